//! SVG plots of a run: the loss curve, and the loss scale over steps with skipped steps
//! marked.

use std::path::Path;

use plotters::prelude::*;

use crate::atomic::write_atomic;
use crate::error::Error;
use crate::report::metrics::{EvalRow, StepRow};

const SIZE: (u32, u32) = (900, 500);

fn plot_error(path: &Path, err: impl std::fmt::Display) -> Error {
    Error::Plot {
        path: path.to_path_buf(),
        message: err.to_string(),
    }
}

/// The trailing mean of `window` points at each point.
fn moving_average(points: &[(u64, f64)], window: usize) -> Vec<(u64, f64)> {
    let mut sum = 0.0;
    points
        .iter()
        .enumerate()
        .map(|(i, &(x, y))| {
            sum += y;
            if i >= window {
                sum -= points[i - window].1;
            }
            (x, sum / (i + 1).min(window) as f64)
        })
        .collect()
}

/// A loss-scale tick label: `2^k` for powers of two, else scientific notation.
fn scale_label(value: &f64) -> String {
    let log2 = value.log2();
    if (log2 - log2.round()).abs() < 1e-9 && log2.abs() < 200.0 {
        format!("2^{}", log2.round() as i64)
    } else {
        format!("{value:.0e}")
    }
}

/// A value range with some room around it (never empty).
fn padded(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values.filter(|v| v.is_finite()) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    let room = if hi > lo {
        (hi - lo) * 0.05
    } else {
        lo.abs().max(1.0) * 0.1
    };
    (lo - room, hi + room)
}

/// The loss curve as SVG text: training loss per step (line) and held-out loss (dots).
pub fn loss_svg(rows: &[StepRow], eval: &[EvalRow], title: &str) -> Result<String, String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let last = rows.last().map_or(1, |r| r.step).max(1);
        let (lo, hi) = padded(
            rows.iter()
                .filter_map(|r| r.loss)
                .chain(eval.iter().filter_map(|e| e.loss))
                .map(f64::from),
        );
        let mut chart = ChartBuilder::on(&root)
            .caption(format!("loss: {title}"), ("sans-serif", 20))
            .margin(15)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0u64..last, lo..hi)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc("step")
            .y_desc("loss")
            .draw()
            .map_err(|e| e.to_string())?;
        let train: Vec<(u64, f64)> = rows
            .iter()
            .filter_map(|r| r.loss.map(|l| (r.step, f64::from(l))))
            .collect();
        let light = RGBColor(150, 180, 235);
        chart
            .draw_series(LineSeries::new(train.clone(), light.stroke_width(1)))
            .map_err(|e| e.to_string())?
            .label("training loss (batch)")
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], light.stroke_width(1))
            });
        let window = (train.len() / 40).max(1);
        chart
            .draw_series(LineSeries::new(
                moving_average(&train, window),
                BLUE.stroke_width(2),
            ))
            .map_err(|e| e.to_string())?
            .label(format!("training loss (mean of {window} steps)"))
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLUE.stroke_width(2)));
        let held_out: Vec<(u64, f64)> = eval
            .iter()
            .filter_map(|e| e.loss.map(|l| (e.step, f64::from(l))))
            .collect();
        if !held_out.is_empty() {
            chart
                .draw_series(LineSeries::new(held_out.clone(), RED.stroke_width(1)))
                .map_err(|e| e.to_string())?;
            chart
                .draw_series(
                    held_out
                        .into_iter()
                        .map(|p| Circle::new(p, 4, RED.filled())),
                )
                .map_err(|e| e.to_string())?
                .label("held-out loss")
                .legend(|(x, y)| Circle::new((x + 10, y), 4, RED.filled()));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

/// The loss scale used by each step as SVG text (log scale), skipped steps marked with red
/// crosses.
pub fn loss_scale_svg(rows: &[StepRow], title: &str) -> Result<String, String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let last = rows.last().map_or(1, |r| r.step).max(1);
        let (mut lo, mut hi) = (f64::INFINITY, 0.0f64);
        for r in rows {
            lo = lo.min(f64::from(r.loss_scale));
            hi = hi.max(f64::from(r.loss_scale));
        }
        if !lo.is_finite() || lo <= 0.0 {
            (lo, hi) = (1.0, 1.0);
        }
        let (lo, hi) = (lo / 2.0, hi * 2.0);
        let skipped = rows.iter().filter(|r| r.skipped).count();
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!("loss scale: {title} ({skipped} skipped steps)"),
                ("sans-serif", 20),
            )
            .margin(15)
            .x_label_area_size(40)
            .y_label_area_size(80)
            .build_cartesian_2d(0u64..last, (lo..hi).log_scale())
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc("step")
            .y_desc("loss scale")
            .y_label_formatter(&scale_label)
            .draw()
            .map_err(|e| e.to_string())?;
        chart
            .draw_series(LineSeries::new(
                rows.iter().map(|r| (r.step, f64::from(r.loss_scale))),
                GREEN.stroke_width(2),
            ))
            .map_err(|e| e.to_string())?
            .label("loss scale used")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], GREEN.stroke_width(2)));
        chart
            .draw_series(
                rows.iter()
                    .filter(|r| r.skipped)
                    .map(|r| Cross::new((r.step, f64::from(r.loss_scale)), 5, RED.stroke_width(2))),
            )
            .map_err(|e| e.to_string())?
            .label(format!("skipped step ({skipped})"))
            .legend(|(x, y)| Cross::new((x + 10, y), 5, RED.stroke_width(2)));
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

/// Writes `loss.svg` and `loss_scale.svg` into `dir`, each atomically.
pub fn write(dir: &Path, rows: &[StepRow], eval: &[EvalRow], title: &str) -> Result<(), Error> {
    let path = dir.join("loss.svg");
    let svg = loss_svg(rows, eval, title).map_err(|e| plot_error(&path, e))?;
    write_atomic(&path, svg.as_bytes())?;
    let path = dir.join("loss_scale.svg");
    let svg = loss_scale_svg(rows, title).map_err(|e| plot_error(&path, e))?;
    write_atomic(&path, svg.as_bytes())
}

#[cfg(test)]
mod tests {
    use crate::report::metrics::StepRow;

    fn row(step: u64, loss: Option<f32>, loss_scale: f32, skipped: bool) -> StepRow {
        StepRow {
            step,
            epoch: 0,
            lr: 0.1,
            loss,
            accuracy: None,
            loss_scale,
            skipped,
            skipped_total: 0,
            grad_norm: None,
            step_ms: 1.0,
            overflowed: vec![],
            cause: None,
        }
    }

    #[test]
    fn the_loss_plot_draws_a_curve() {
        let rows: Vec<StepRow> = (1..=5)
            .map(|s| row(s, Some(1.0 / s as f32), 1.0, false))
            .collect();
        let svg = super::loss_svg(&rows, &[], "doc").unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("<polyline"));
    }

    #[test]
    fn the_scale_plot_marks_the_skipped_steps() {
        let rows: Vec<StepRow> = (1..=4)
            .map(|s| row(s, None, 65536.0 / s as f32, s == 2))
            .collect();
        let svg = super::loss_scale_svg(&rows, "doc").unwrap();
        assert!(svg.contains("<polyline") && svg.contains("skipped"));
    }

    #[test]
    fn both_plots_are_written() {
        let dir = std::env::temp_dir().join(format!("mpric-doc-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        crate::report::plot::write(&dir, &[], &[], "empty run").unwrap();
        assert!(
            std::fs::read_to_string(dir.join("loss.svg"))
                .unwrap()
                .starts_with("<svg")
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
