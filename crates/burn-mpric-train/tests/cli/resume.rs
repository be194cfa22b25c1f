//! Resume is exact: N steps, then `--resume` to 2N, ends bit-identical to 2N steps in one
//! run (parameters, loss-scaler state, metric rows), with a dynamic loss scale that skips
//! and grows during the run.

use std::path::Path;

use burn_mpric_train::checkpoint::{self, Verified};

use crate::common::{fresh_dir, metrics, run_ok, small_recipe, write_recipe};

/// f16 compute on Flex, a loss scale that starts far too high (so the first steps overflow
/// and are skipped) and grows every 4 steps, clipping, a cosine schedule.
fn recipe(schedule: &str) -> String {
    small_recipe(&format!(
        r#"steps = 40
checkpoint_every = 10
clip_grad_norm = 1.0
policy = "mixed_f16"
loss_scale = {{ preset = "torch", initial_scale = 1e9, growth_interval = 4 }}

[schedule]
{schedule}"#
    ))
}

fn last_checkpoint(output: &Path) -> Verified {
    let found = checkpoint::latest(output).unwrap().expect("a checkpoint");
    found.verify().unwrap()
}

fn assert_same_run(a: &Path, b: &Path) {
    let (ca, cb) = (last_checkpoint(a), last_checkpoint(b));
    assert_eq!(ca.state.step, 40);
    assert_eq!(cb.state.step, 40);
    let bits = |params: &[Vec<f32>]| -> Vec<u32> {
        params.iter().flatten().map(|v| v.to_bits()).collect()
    };
    assert!(!ca.params.is_empty());
    assert_eq!(
        bits(&ca.params),
        bits(&cb.params),
        "final parameters differ"
    );
    assert_eq!(
        ca.state.scaler, cb.state.scaler,
        "loss-scaler state differs"
    );
    assert_eq!(ca.state.data, cb.state.data, "data position differs");
    assert!(
        ca.state.scaler.stats.skipped > 0,
        "the run should skip some steps"
    );
    assert!(
        ca.state.scaler.scale < 1e9,
        "the scale should have backed off"
    );

    let (ma, mb) = (metrics(a), metrics(b));
    assert_eq!(ma.steps.len(), 40);
    let untimed = |rows: &[burn_mpric_train::report::metrics::StepRow]| -> Vec<_> {
        rows.iter().map(|r| r.untimed()).collect()
    };
    assert_eq!(untimed(&ma.steps), untimed(&mb.steps), "metric rows differ");
    assert_eq!(ma.eval.last(), mb.eval.last());
    // The CSV files agree too, but for the timing column.
    let timing = burn_mpric_train::report::metrics::CSV_HEADER
        .split(',')
        .position(|c| c == "step_ms")
        .unwrap();
    let csv = |dir: &Path| -> Vec<String> {
        std::fs::read_to_string(dir.join("metrics.csv"))
            .unwrap()
            .lines()
            .map(|l| {
                let mut cells: Vec<&str> = l.split(',').collect();
                cells.remove(timing);
                cells.join(",")
            })
            .collect()
    };
    assert_eq!(csv(a), csv(b));
}

#[test]
fn stopping_with_until_and_resuming_equals_one_run() {
    let dir = fresh_dir("resume-until");
    let text = recipe("kind = \"cosine\"\nwarmup_steps = 5");
    let path = write_recipe(&dir, "r.toml", &text);
    let path = path.to_str().unwrap();

    run_ok(&dir, &["train", path, "-q", "--set", "output=one"]);

    let out = run_ok(
        &dir,
        &["train", path, "-q", "--set", "output=two", "--until", "20"],
    );
    assert!(out.contains("continue with"), "{out}");
    assert_eq!(last_checkpoint(&dir.join("two")).state.step, 20);
    run_ok(
        &dir,
        &["train", path, "-q", "--set", "output=two", "--resume"],
    );

    assert_same_run(&dir.join("one"), &dir.join("two"));
}

#[test]
fn extending_steps_with_set_and_resuming_equals_one_run() {
    // With a constant schedule the learning rate does not depend on the run's length, so
    // `--set steps=20` then `--resume --set steps=40` is the 40-step run.
    let dir = fresh_dir("resume-set");
    let path = write_recipe(&dir, "r.toml", &recipe("kind = \"constant\""));
    let path = path.to_str().unwrap();

    run_ok(&dir, &["train", path, "-q", "--set", "output=one"]);
    run_ok(
        &dir,
        &[
            "train",
            path,
            "-q",
            "--set",
            "output=two",
            "--set",
            "steps=20",
        ],
    );
    assert_eq!(last_checkpoint(&dir.join("two")).state.step, 20);
    run_ok(
        &dir,
        &[
            "train",
            path,
            "-q",
            "--set",
            "output=two",
            "--set",
            "steps=40",
            "--resume",
        ],
    );

    assert_same_run(&dir.join("one"), &dir.join("two"));
}

#[test]
fn resume_refuses_a_changed_recipe_and_a_fresh_run_refuses_a_used_folder() {
    let dir = fresh_dir("resume-refuse");
    let path = write_recipe(&dir, "r.toml", &recipe("kind = \"constant\""));
    let path = path.to_str().unwrap();
    run_ok(&dir, &["train", path, "-q", "--until", "10"]);

    let out = crate::common::run(
        &dir,
        &["train", path, "-q", "--resume", "--set", "optimizer.lr=0.1"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("optimizer.lr"), "{stderr}");

    let out = crate::common::run(&dir, &["train", path, "-q"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--resume") && stderr.contains("--overwrite"),
        "{stderr}"
    );

    let out = crate::common::run(
        &dir,
        &["train", path, "-q", "--resume", "--set", "output=none"],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no checkpoint"));

    // --overwrite starts over.
    run_ok(&dir, &["train", path, "-q", "--overwrite", "--until", "5"]);
    assert_eq!(last_checkpoint(&dir.join("out")).state.step, 5);
}

/// `--until half` then `--resume` against one run, for any recipe: same parameters (bits),
/// scaler state, data position and metric rows.
pub(crate) fn split_equals_straight(name: &str, text: &str, until: u64) -> Verified {
    let dir = fresh_dir(name);
    let path = write_recipe(&dir, "r.toml", text);
    let path = path.to_str().unwrap();
    run_ok(&dir, &["train", path, "-q", "--set", "output=one"]);
    let until = until.to_string();
    run_ok(
        &dir,
        &[
            "train",
            path,
            "-q",
            "--set",
            "output=two",
            "--until",
            &until,
        ],
    );
    run_ok(
        &dir,
        &["train", path, "-q", "--set", "output=two", "--resume"],
    );
    let (a, b) = (
        last_checkpoint(&dir.join("one")),
        last_checkpoint(&dir.join("two")),
    );
    let bits = |params: &[Vec<f32>]| -> Vec<u32> {
        params.iter().flatten().map(|v| v.to_bits()).collect()
    };
    assert_eq!(
        bits(&a.params),
        bits(&b.params),
        "{name}: parameters differ"
    );
    assert_eq!(a.state.scaler, b.state.scaler);
    assert_eq!(a.state.data, b.state.data);
    let untimed = |rows: &[burn_mpric_train::report::metrics::StepRow]| -> Vec<_> {
        rows.iter().map(|r| r.untimed()).collect()
    };
    assert_eq!(untimed(&a.state.steps), untimed(&b.state.steps));
    a
}

#[test]
fn the_language_model_on_text_resumes_exactly() {
    // The text sampler draws random windows: its generator state is what resumes.
    let text = r#"seed = 5
batch_size = 4
steps = 6
output = "out"
clip_grad_norm = 1.0
policy = "mixed_bf16"

[model]
kind = "transformer_lm"
d_model = 16
heads = 2
layers = 1
d_ff = 32
context = 16

[dataset]
name = "tiny_text"

[optimizer]
kind = "adamw"
lr = 0.01

[schedule]
kind = "cosine"
warmup_steps = 2
"#;
    let run = split_equals_straight("resume-lm", text, 3);
    let first = run.state.steps[0].loss.unwrap();
    // A uniform guess over the characters scores ln(vocabulary), about 4.
    assert!(first > 3.0 && first < 5.5, "first loss {first}");
    assert!(run.state.steps.iter().all(|r| r.accuracy.is_some()));
}

#[test]
fn the_conv_net_on_regression_data_resumes_exactly() {
    let text = r#"seed = 2
batch_size = 16
epochs = 2
output = "out"
policy = "p=f32,c=bf16,o=f32"

[model]
kind = "conv"
channels = [4]
hidden = [8]

[dataset]
name = "diabetes"

[optimizer]
kind = "sgd"
lr = 0.05
momentum = 0.9
"#;
    // 353 training examples: 22 full batches per epoch, 44 steps.
    let run = split_equals_straight("resume-conv", text, 30);
    assert_eq!(run.state.total_steps, 44);
    assert_eq!(run.state.data.epoch, 1);
    // Regression: no accuracy, and the standardized target starts near MSE 1.
    assert!(run.state.steps.iter().all(|r| r.accuracy.is_none()));
    let last = run.state.steps.last().unwrap().loss.unwrap();
    assert!(last < 1.0, "the conv net did not learn: {last}");
}

#[test]
fn bf16_optimizer_state_and_master_weights_resume_exactly_and_stay_bf16() {
    for (master, bytes) in [("stochastic", 8), ("kahan", 10)] {
        let text = recipe("kind = \"cosine\"\nwarmup_steps = 5").replacen(
            "lr = 0.003",
            &format!("lr = 0.003\nstate = \"bf16\"\nmaster = \"{master}\""),
            1,
        );
        let dir = fresh_dir(&format!("resume-bf16-{master}"));
        let path = write_recipe(&dir, "r.toml", &text);
        let out = run_ok(
            &dir,
            &[
                "train",
                path.to_str().unwrap(),
                "--set",
                "output=summary",
                "--set",
                "steps=8",
            ],
        );
        let line = format!("state bf16, master weights {master}: {bytes} bytes per parameter");
        assert!(out.contains(&line), "{out}");

        let found = split_equals_straight(&format!("resume-split-{master}"), &text, 20);
        assert!(found.state.scaler.stats.skipped > 0);
        // Every parameter is a bf16 value: the low 16 bits of its f32 form are zero.
        let values: Vec<f32> = found.params.iter().flatten().copied().collect();
        assert!(!values.is_empty());
        assert!(
            values.iter().all(|v| v.to_bits() & 0xffff == 0),
            "{master}: f32 values"
        );
    }
}
