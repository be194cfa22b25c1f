//! The SVG histogram of the gradient exponents against f16's and bf16's ranges.

use burn_mpric::audit::{
    AuditReport, BF16_MIN_NORMAL_EXP, F16_MIN_NORMAL_EXP, F16_MIN_SUBNORMAL_EXP,
};
use plotters::prelude::*;

/// The image's width, and the height of the chart above the legend.
const WIDTH: u32 = 900;
const CHART_HEIGHT: u32 = 480;
/// One legend entry's height; the legend sits below the chart, where it covers no bar.
const LEGEND_ROW: u32 = 22;
/// The exponent of f16's largest finite values.
const F16_MAX_EXP: i32 = 15;
/// The exponent of bf16's largest finite values.
const BF16_MAX_EXP: i32 = 127;
/// At most this many labels on the count axis.
const COUNT_LABELS: i32 = 10;
/// The count axis's unit: a sixteenth of a power of two.
const SIXTEENTHS: i32 = 16;

/// The gradient values computed at the compute dtype, by binary exponent at the report's loss
/// scale, with f16's range (normal and subnormal) and bf16's marked: what falls left of
/// f16's subnormals flushes to zero, what falls right of its end overflows. Both axes are
/// labelled in powers of two (the counts on a log2 axis); the legend is drawn below the
/// chart, outside the plotting area.
///
/// ```
/// use burn_mpric::audit::AuditReport;
/// use burn_mpric_train::audit::histogram_svg;
///
/// let svg = histogram_svg(&AuditReport::new(1, "f32", "f32", 1.0, vec![], vec![]), "r.toml").unwrap();
/// assert!(svg.starts_with("<svg"));
/// assert!(svg.contains("f16 normal"));
/// assert!(svg.lines().any(|l| l.trim() == "2^-20"), "the exponent axis in powers of two");
/// ```
pub fn histogram_svg(report: &AuditReport, title: &str) -> Result<String, String> {
    let shift = report.scale_exp();
    let grads = report.low_gradients();
    let bars: Vec<(i32, u64)> = grads
        .exponents
        .iter()
        .map(|(e, n)| (e + shift, *n))
        .collect();
    let lo = bars
        .first()
        .map_or(F16_MIN_SUBNORMAL_EXP, |b| b.0)
        .min(F16_MIN_SUBNORMAL_EXP)
        - 3;
    let hi = bars.last().map_or(F16_MAX_EXP, |b| b.0).max(F16_MAX_EXP) + 3;
    // Counts on a log2 axis, in sixteenths of a power of two (plotters takes key points of
    // its own choosing on a float axis, some between powers): a bar of n values reaches
    // 16 log2(n), from -16 (half a value) so that a single value still shows; the top
    // leaves a power of two of room.
    let most = bars.iter().map(|b| b.1).max().unwrap_or(1).max(1);
    let top = (most as f64).log2().ceil() as i32 + 1;
    let step = (top + COUNT_LABELS - 1) / COUNT_LABELS;
    let count_keys: Vec<i32> = (0..=top)
        .step_by(step.max(1) as usize)
        .map(|k| k * SIXTEENTHS)
        .collect();
    let height = |n: u64| ((n as f64).log2() * f64::from(SIXTEENTHS)).round() as i32;
    let bottom = -SIXTEENTHS;
    let ceiling = top * SIXTEENTHS;

    let mut legend: Vec<(String, RGBAColor)> = vec![
        ("f16 normal range (2^-14 .. 65504)".into(), GREEN.mix(0.3)),
        (
            "f16 subnormals (fewer bits; below 2^-24 flushes to zero)".into(),
            YELLOW.mix(0.4),
        ),
    ];
    let show_bf16 = lo <= BF16_MIN_NORMAL_EXP || hi >= BF16_MAX_EXP;
    if show_bf16 {
        legend.push(("bf16 normal range (2^-126 .. 2^128)".into(), BLUE.mix(0.3)));
    }
    legend.push((
        format!(
            "gradient values at the compute dtype ({} nonzero; bf16 holds all of e = -126..127)",
            grads.nonzero()
        ),
        BLUE.mix(0.8),
    ));
    let legend_height = LEGEND_ROW * legend.len() as u32 + 16;

    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, CHART_HEIGHT + legend_height))
            .into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let (upper, lower) = root.split_vertically(CHART_HEIGHT);
        let mut chart = ChartBuilder::on(&upper)
            .caption(
                format!(
                    "gradient exponents at loss scale 2^{shift}: {title} ({})",
                    report.audited
                ),
                ("sans-serif", 20),
            )
            .margin(15)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(lo..hi + 1, (bottom..ceiling).with_key_points(count_keys))
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc("|g| at the loss scale (the bar at 2^e counts 2^e <= |g| < 2^(e+1))")
            .y_desc("values")
            .x_label_formatter(&|e| format!("2^{e}"))
            .y_label_formatter(&|k| format!("2^{}", k / SIXTEENTHS))
            .draw()
            .map_err(|e| e.to_string())?;
        let band = |from: i32, to: i32, color: RGBAColor| {
            Rectangle::new(
                [(from.max(lo), ceiling), (to.min(hi + 1), bottom)],
                color.filled(),
            )
        };
        chart
            .draw_series([band(F16_MIN_NORMAL_EXP, F16_MAX_EXP + 1, GREEN.mix(0.15))])
            .map_err(|e| e.to_string())?;
        chart
            .draw_series([band(
                F16_MIN_SUBNORMAL_EXP,
                F16_MIN_NORMAL_EXP,
                YELLOW.mix(0.15),
            )])
            .map_err(|e| e.to_string())?;
        if show_bf16 {
            chart
                .draw_series([band(BF16_MIN_NORMAL_EXP, BF16_MAX_EXP + 1, BLUE.mix(0.15))])
                .map_err(|e| e.to_string())?;
        }
        chart
            .draw_series(bars.iter().map(|&(e, n)| {
                Rectangle::new([(e, height(n)), (e + 1, bottom)], BLUE.mix(0.8).filled())
            }))
            .map_err(|e| e.to_string())?;

        // The legend below the chart: a framed box, one swatch and label a row.
        let (width, _) = lower.dim_in_pixel();
        lower
            .draw(&Rectangle::new(
                [(15, 4), (width as i32 - 15, legend_height as i32 - 8)],
                BLACK.stroke_width(1),
            ))
            .map_err(|e| e.to_string())?;
        for (i, (label, color)) in legend.iter().enumerate() {
            let y = 4 + LEGEND_ROW as i32 / 2 + 4 + i as i32 * LEGEND_ROW as i32;
            lower
                .draw(&Rectangle::new([(25, y - 5), (45, y + 5)], color.filled()))
                .map_err(|e| e.to_string())?;
            lower
                .draw(&Text::new(
                    label.as_str(),
                    (55, y - 7),
                    ("sans-serif", 14).into_font(),
                ))
                .map_err(|e| e.to_string())?;
        }
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use burn_mpric::audit::{Magnitudes, OpStats, Phase};

    use super::*;

    /// A report with 2^21 gradient values at 2^-10 and one at 2^3: counts the old axis
    /// printed as `1000000.0`.
    fn report() -> AuditReport {
        let mut values = Magnitudes::default();
        values.add(&vec![1.0e-3; 1 << 21]);
        values.add(&[10.0]);
        let row = OpStats {
            method: "linear_weight_backward".into(),
            op: Some("linear".into()),
            phase: Phase::Backward,
            dtype: "bf16".into(),
            low: true,
            calls: 1,
            values,
        };
        AuditReport::new(
            1,
            "p=f32,c=f16,o=f32",
            "p=f32,c=bf16,o=f32",
            1.0,
            vec![row],
            vec![],
        )
    }

    /// The `<rect .../>` elements of `svg` as (x, y, width, height, the element's text).
    fn rects(svg: &str) -> Vec<(f64, f64, f64, f64, &str)> {
        let attr = |element: &str, name: &str| -> f64 {
            let start = element.find(&format!(" {name}=\"")).unwrap() + name.len() + 3;
            let end = start + element[start..].find('"').unwrap();
            element[start..end].parse().unwrap()
        };
        svg.match_indices("<rect")
            .map(|(i, _)| {
                let element = &svg[i..i + svg[i..].find("/>").unwrap()];
                let (x, y) = (attr(element, "x"), attr(element, "y"));
                let (w, h) = (attr(element, "width"), attr(element, "height"));
                (x, y, w, h, element)
            })
            .collect()
    }

    #[test]
    fn the_axes_count_in_powers_of_two_and_the_legend_covers_no_bar() {
        let path = std::env::temp_dir().join(format!("mpric-histogram-{}.svg", std::process::id()));
        std::fs::write(&path, histogram_svg(&report(), "r.toml").unwrap()).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).unwrap();

        // 2^21 values at 2^-10: the count axis labels every third power of two up to 2^21.
        // (The SVG writes each label on a line of its own.)
        let label = |text: &str| svg.lines().any(|l| l.trim() == text);
        assert!(label("2^21") && label("2^0") && label("2^18"), "{svg}");
        assert!(label("2^-20"), "the exponent axis in powers of two: {svg}");
        assert!(!svg.contains("1000000"), "{svg}");
        assert!(
            !svg.lines().any(|l| l.trim().ends_with(".0")),
            "no decimal label: {svg}"
        );

        let all = rects(&svg);
        // The legend: the framed box, stroked black.
        let frame = all
            .iter()
            .find(|r| r.4.contains("stroke=\"#000000\""))
            .expect("the legend's frame");
        let inside =
            |r: &&(f64, f64, f64, f64, &str)| r.1 > frame.1 && r.1 + r.3 < frame.1 + frame.3;
        assert_eq!(
            all.iter().filter(inside).count(),
            3,
            "three swatches in the frame: f16 normal, f16 subnormal, the bars"
        );
        // The bars: opaque blue (the bf16 band is a fainter blue), outside the frame.
        let bars: Vec<_> = all
            .iter()
            .filter(|r| r.4.contains("fill=\"#0000FF\"") && r.4.contains("opacity=\"0.8\""))
            .filter(|r| !inside(r))
            .collect();
        assert_eq!(bars.len(), 2, "one bar per exponent");
        let bars_bottom = bars.iter().map(|r| r.1 + r.3).fold(0.0, f64::max);
        assert!(
            frame.1 > bars_bottom,
            "the legend (top at {}) starts below the bars (bottom at {bars_bottom})",
            frame.1
        );
    }
}
