//! A skipped step names the parameters whose gradients overflowed and the probe's cause (a
//! range problem, for a scale far too high): on stderr at each scale back-off, and in
//! `metrics.json` and `metrics.csv`, the three agreeing.

use crate::common::{fresh_dir, metrics, run, write_recipe};

#[test]
fn skipped_steps_name_their_overflowed_parameters_everywhere() {
    let dir = fresh_dir("overflow-names");
    // f16 with a first scale of 2^24: the first steps overflow and back off.
    let recipe = r#"seed = 1
batch_size = 32
steps = 12
output = "out"
policy = "mixed_f16"

[loss_scale]
initial_scale = 16777216.0

[model]
kind = "mlp"
hidden = [16]

[dataset]
name = "winequality"

[optimizer]
kind = "adam"
lr = 0.003
"#;
    let path = write_recipe(&dir, "r.toml", recipe);
    let out = run(&dir, &["train", path.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");

    let all = [
        "Mlp.layers.0.weight",
        "Mlp.layers.0.bias",
        "Mlp.out.weight",
        "Mlp.out.bias",
    ];
    let m = metrics(&dir.join("out"));
    let skipped: Vec<_> = m.steps.iter().filter(|r| r.skipped).collect();
    assert!(!skipped.is_empty(), "no step was skipped");
    let csv = std::fs::read_to_string(dir.join("out/metrics.csv")).unwrap();
    for row in &m.steps {
        if !row.skipped {
            assert!(row.overflowed.is_empty() && row.cause.is_none(), "{row:?}");
            continue;
        }
        // Names are parameters of the model, in module order, without repeats.
        assert!(!row.overflowed.is_empty(), "{row:?}");
        let positions: Vec<usize> = row
            .overflowed
            .iter()
            .map(|n| {
                all.iter()
                    .position(|a| a == n)
                    .unwrap_or_else(|| panic!("{n} is not a parameter"))
            })
            .collect();
        assert!(positions.windows(2).all(|w| w[0] < w[1]), "{row:?}");
        // stderr: one line for the step, with the names and the scales.
        let line = stderr
            .lines()
            .find(|l| l.starts_with(&format!("step {}: skipped: ", row.step)))
            .unwrap_or_else(|| panic!("no stderr line for step {}:\n{stderr}", row.step));
        for name in &row.overflowed {
            assert!(line.contains(name.as_str()), "{line}");
        }
        assert!(
            line.contains(&format!("loss scale {} -> ", row.loss_scale)),
            "{line}"
        );
        // The batch ran once more at a far lower scale and its gradients were finite there.
        assert_eq!(row.cause.as_deref(), Some("range"), "{row:?}");
        assert!(
            line.contains("; a range problem: the gradients overflow at a loss scale of 2^"),
            "{line}"
        );
        // CSV: the cause, then the names in the last cell.
        let csv_line = csv.lines().nth(row.step as usize).unwrap();
        assert!(
            csv_line.ends_with(&format!(",range,{}", row.overflowed.join(";"))),
            "{csv_line}"
        );
    }
    assert_eq!(
        stderr.lines().filter(|l| l.contains(": skipped: ")).count(),
        skipped.len(),
        "{stderr}"
    );
}
