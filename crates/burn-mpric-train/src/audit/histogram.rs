//! The SVG histogram of the gradient exponents against f16's and bf16's ranges.

use burn_mpric::audit::{
    AuditReport, BF16_MIN_NORMAL_EXP, F16_MIN_NORMAL_EXP, F16_MIN_SUBNORMAL_EXP,
};
use plotters::prelude::*;

const SIZE: (u32, u32) = (900, 500);
/// The exponent of f16's largest finite values.
const F16_MAX_EXP: i32 = 15;
/// The exponent of bf16's largest finite values.
const BF16_MAX_EXP: i32 = 127;

/// A legend entry's filled square.
fn swatch(style: ShapeStyle) -> impl Fn((i32, i32)) -> Rectangle<(i32, i32)> {
    move |(x, y)| Rectangle::new([(x, y - 5), (x + 20, y + 5)], style)
}

/// The gradient values computed at the compute dtype, by binary exponent at the report's loss
/// scale, with f16's range (normal and subnormal) and bf16's marked: what falls left of
/// f16's subnormals flushes to zero, what falls right of its end overflows.
///
/// ```
/// use burn_mpric::audit::AuditReport;
/// use burn_mpric_train::audit::histogram_svg;
///
/// let svg = histogram_svg(&AuditReport::new(1, "f32", "f32", 1.0, vec![], vec![]), "r.toml").unwrap();
/// assert!(svg.starts_with("<svg"));
/// assert!(svg.contains("f16 normal"));
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
    let top = bars.iter().map(|b| b.1).max().unwrap_or(1).max(1) as f64 * 2.0;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let mut chart = ChartBuilder::on(&root)
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
            .build_cartesian_2d(lo..hi + 1, (0.5..top).log_scale())
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc("binary exponent e (2^e <= |g| < 2^(e+1))")
            .y_desc("values")
            .draw()
            .map_err(|e| e.to_string())?;
        let band = |from: i32, to: i32, color: RGBColor| {
            Rectangle::new(
                [(from.max(lo), top), (to.min(hi + 1), 0.5)],
                color.mix(0.15).filled(),
            )
        };
        chart
            .draw_series([band(F16_MIN_NORMAL_EXP, F16_MAX_EXP + 1, GREEN)])
            .map_err(|e| e.to_string())?
            .label("f16 normal range (2^-14 .. 65504)")
            .legend(swatch(GREEN.mix(0.3).filled()));
        chart
            .draw_series([band(F16_MIN_SUBNORMAL_EXP, F16_MIN_NORMAL_EXP, YELLOW)])
            .map_err(|e| e.to_string())?
            .label("f16 subnormals (fewer bits; below 2^-24 flushes to zero)")
            .legend(swatch(YELLOW.mix(0.4).filled()));
        if lo <= BF16_MIN_NORMAL_EXP || hi >= BF16_MAX_EXP {
            chart
                .draw_series([band(BF16_MIN_NORMAL_EXP, BF16_MAX_EXP + 1, BLUE)])
                .map_err(|e| e.to_string())?
                .label("bf16 normal range (2^-126 .. 2^128)")
                .legend(swatch(BLUE.mix(0.3).filled()));
        }
        chart
            .draw_series(bars.iter().map(|&(e, n)| {
                Rectangle::new([(e, n as f64), (e + 1, 0.5)], BLUE.mix(0.8).filled())
            }))
            .map_err(|e| e.to_string())?
            .label(format!(
                "gradient values at the compute dtype ({} nonzero; bf16 holds all of e = -126..127)",
                grads.nonzero()
            ))
            .legend(swatch(BLUE.mix(0.8).filled()));
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}
