//! The plots are SVG images that show the loss and the loss scale, with skipped steps
//! marked.

use std::path::Path;

use crate::common::{fresh_dir, metrics, run_ok, small_recipe, write_recipe};

/// The points of every `<polyline>` in an SVG text.
fn polylines(svg: &str) -> Vec<Vec<(f64, f64)>> {
    svg.split("<polyline")
        .skip(1)
        .map(|rest| {
            let points = rest
                .split("points=\"")
                .nth(1)
                .unwrap()
                .split('"')
                .next()
                .unwrap();
            points
                .split_whitespace()
                .map(|p| {
                    let (x, y) = p.split_once(',').unwrap();
                    (x.parse().unwrap(), y.parse().unwrap())
                })
                .collect()
        })
        .collect()
}

fn read_svg(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(
        text.starts_with("<svg") || text.starts_with("<?xml"),
        "{}",
        path.display()
    );
    assert!(text.trim_end().ends_with("</svg>"));
    assert!(
        text.len() > 5_000,
        "{} is only {} bytes",
        path.display(),
        text.len()
    );
    // Well-formed enough: every element that opens is closed or self-closing.
    assert_eq!(text.matches("<svg").count(), text.matches("</svg>").count());
    assert_eq!(
        text.matches("<text").count(),
        text.matches("</text>").count()
    );
    text
}

#[test]
fn loss_and_loss_scale_plots_show_the_run() {
    let dir = fresh_dir("plots");
    // A scale that starts far too high for f16: the first steps overflow and are skipped.
    let text = small_recipe(
        "steps = 80\npolicy = \"mixed_f16\"\nloss_scale = { initial_scale = 1e9, growth_interval = 10 }",
    );
    let path = write_recipe(&dir, "r.toml", &text);
    run_ok(&dir, &["train", path.to_str().unwrap(), "-q"]);
    let output = dir.join("out");
    let m = metrics(&output);
    let skipped = m.steps.iter().filter(|r| r.skipped).count();
    assert!(skipped >= 5, "expected skipped steps, got {skipped}");

    let loss = read_svg(&output.join("loss.svg"));
    assert!(loss.contains("loss: "), "no title");
    assert!(loss.contains("training loss (batch)") && loss.contains("held-out loss"));
    let lines = polylines(&loss);
    // Raw loss (one point per step with a finite loss), its moving average, held-out.
    let finite = m.steps.iter().filter(|r| r.loss.is_some()).count();
    assert!(
        lines.iter().any(|l| l.len() == finite),
        "no line with {finite} points"
    );
    let mean = lines.iter().filter(|l| l.len() == finite).nth(1).unwrap();
    // The loss went down: later points sit lower on the image (larger y).
    assert!(
        mean.last().unwrap().1 > mean[0].1,
        "{:?} .. {:?}",
        mean[0],
        mean.last()
    );

    let scale = read_svg(&output.join("loss_scale.svg"));
    assert!(scale.contains("loss scale") && scale.contains("skipped step"));
    assert!(scale.contains(&format!("({skipped} skipped steps)")));
    let lines = polylines(&scale);
    let curve = lines.iter().find(|l| l.len() == m.steps.len()).unwrap();
    // Backed off from 1e9: the curve ends lower than it starts.
    assert!(curve.last().unwrap().1 > curve[0].1);
    // One red cross (two strokes) per skipped step, besides the legend's.
    let red_strokes = scale.matches("stroke=\"#FF0000\"").count();
    assert!(
        red_strokes >= 2 * skipped,
        "{red_strokes} red strokes for {skipped} skips"
    );
}
