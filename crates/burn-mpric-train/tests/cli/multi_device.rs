//! Several devices from the CLI (`backend.devices`, `strategy = "multi_device"`): the batch is
//! split across replicas, gradients are summed on the main device, and one loss-scaler
//! decision and one optimizer step follow. On this machine the replicas share Flex's one
//! device, which burn-train's `MultiDevice` also allows.

use crate::common::{fresh_dir, metrics, run, run_ok, small_recipe, write_recipe};
use burn_mpric_train::checkpoint;

/// f16 compute with a scale that starts far too high: the first steps overflow and are
/// skipped, then the scale grows every 4 steps.
fn recipe(output: &str, devices: Option<&str>) -> String {
    let devices = devices
        .map(|d| format!("backend = {{ name = \"flex\", devices = {d} }}\n"))
        .unwrap_or_default();
    small_recipe(&format!(
        "steps = 40\ncheckpoint_every = 10\npolicy = \"mixed_f16\"\nloss_scale = {{ preset = \"torch\", initial_scale = 1e9, growth_interval = 4 }}\n{devices}"
    ))
    .replace("\"out\"", &format!("\"{output}\""))
}

#[test]
fn two_replicas_follow_the_single_device_run_and_decide_each_step_once() {
    let dir = fresh_dir("multi-device");
    let single = write_recipe(&dir, "single.toml", &recipe("single", None));
    let multi = write_recipe(&dir, "multi.toml", &recipe("multi", Some("[0, 0]")));
    run_ok(&dir, &["train", single.to_str().unwrap(), "-q"]);
    let stdout = run_ok(&dir, &["check", multi.to_str().unwrap()]);
    assert!(
        stdout.contains("flex devices [0, 0]") && stdout.contains("strategy multi_device"),
        "{stdout}"
    );
    run_ok(&dir, &["train", multi.to_str().unwrap(), "-q"]);

    let (a, b) = (metrics(&dir.join("single")), metrics(&dir.join("multi")));
    assert_eq!(b.backend, "flex devices [0, 0]");
    // One row per step, not one per replica, with the same skip decisions and scales.
    assert_eq!(a.steps.len(), 40);
    assert_eq!(b.steps.len(), 40);
    let decisions = |rows: &[burn_mpric_train::metrics::StepRow]| -> Vec<(bool, f32)> {
        rows.iter().map(|r| (r.skipped, r.loss_scale)).collect()
    };
    assert_eq!(decisions(&a.steps), decisions(&b.steps));
    assert!(
        a.steps.iter().any(|r| r.skipped),
        "the run should skip its first steps"
    );
    // Shard losses weighted by their share sum to the batch's mean loss: the same curve up to
    // f16 rounding of the per-shard computations.
    for (ra, rb) in a.steps.iter().zip(&b.steps) {
        match (ra.loss, rb.loss) {
            (Some(x), Some(y)) => assert!(
                (x - y).abs() <= 2e-2 * x.abs(),
                "step {}: {x} vs {y}",
                ra.step
            ),
            (x, y) => assert_eq!(x.is_some(), y.is_some(), "step {}", ra.step),
        }
        assert_eq!(ra.accuracy.is_some(), rb.accuracy.is_some());
    }
    let (ea, eb) = (
        a.eval[a.eval.len() - 1].loss.unwrap(),
        b.eval[b.eval.len() - 1].loss.unwrap(),
    );
    assert!((ea - eb).abs() <= 2e-2 * ea, "held-out {ea} vs {eb}");
}

#[test]
fn a_multi_device_run_resumes_bit_for_bit() {
    let dir = fresh_dir("multi-device-resume");
    let straight = write_recipe(
        &dir,
        "straight.toml",
        &recipe("straight", Some("[0, 0, 0]")),
    );
    let split = write_recipe(&dir, "split.toml", &recipe("split", Some("[0, 0, 0]")));
    run_ok(&dir, &["train", straight.to_str().unwrap(), "-q"]);
    run_ok(
        &dir,
        &["train", split.to_str().unwrap(), "--until", "20", "-q"],
    );
    run_ok(&dir, &["train", split.to_str().unwrap(), "--resume", "-q"]);
    let params = |name: &str| -> Vec<u32> {
        let found = checkpoint::latest(&dir.join(name)).unwrap().unwrap();
        found
            .verify()
            .unwrap()
            .params
            .into_iter()
            .flatten()
            .map(f32::to_bits)
            .collect()
    };
    assert_eq!(params("straight"), params("split"));
}

#[test]
fn device_lists_the_cli_cannot_run_are_refused_with_one_line() {
    let dir = fresh_dir("multi-device-bad");
    let cases = [
        (
            recipe("out", Some("[0, 0]")).replace("steps = 40", "steps = 40\nstrategy = \"ddp\""),
            vec!["strategy", "`ddp`", "use `multi_device`"],
        ),
        (
            recipe("out", Some("[0, 1]")),
            vec!["backend.devices", "flex has one device, 0; got 1"],
        ),
        (
            recipe("out", Some("[]")),
            vec!["backend.devices", "must list 1 to 64 devices"],
        ),
        (
            recipe("out", Some("[0, 0, 0]")).replace("batch_size = 32", "batch_size = 2"),
            vec!["backend.devices", "3 devices need a batch of at least 3"],
        ),
    ];
    for (i, (text, needles)) in cases.into_iter().enumerate() {
        let path = write_recipe(&dir, &format!("case{i}.toml"), &text);
        let out = run(&dir, &["train", path.to_str().unwrap(), "-q"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "case {i}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "case {i}: {stderr}");
        for needle in needles {
            assert!(
                stderr.contains(needle),
                "case {i}: {stderr:?} lacks {needle:?}"
            );
        }
    }
}
