//! Several devices from the CLI (`backend.devices`): the batch is split across replicas and
//! one loss-scaler decision covers them all, with `strategy = "multi_device"` (gradients
//! summed on the main device, one optimizer step) or `strategy = "ddp"` (a thread per
//! replica, gradients summed through burn-collective, every replica stepping). On this machine
//! the replicas share Flex's one device, which burn-train's `MultiDevice` also allows.

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

fn with_strategy(text: String, strategy: &str) -> String {
    text.replace(
        "steps = 40",
        &format!("steps = 40\nstrategy = \"{strategy}\""),
    )
}

#[test]
fn two_replicas_follow_the_single_device_run_and_decide_each_step_once() {
    two_replicas_follow_the_single_device_run("multi-device", "multi_device");
}

/// `ddp` sums the replicas' gradients at the parameters' dtype (f32), while one device (and
/// `multi_device`) has the whole batch's gradient in the compute dtype: its f16 gradients
/// overflow at half the scale. So the runs agree step by step where no step overflows; here
/// the scale stays at 256 and nothing is skipped.
#[test]
fn two_ddp_replicas_follow_the_single_device_run_and_decide_each_step_once() {
    two_replicas_follow_the_single_device_run("ddp", "ddp");
}

fn steady(text: String) -> String {
    text.replace(
        "initial_scale = 1e9, growth_interval = 4",
        "initial_scale = 256, growth_interval = 1000",
    )
}

#[test]
fn ddp_replicas_back_off_together_from_an_overflowing_scale() {
    let dir = fresh_dir("ddp-backoff");
    let ddp = write_recipe(
        &dir,
        "ddp.toml",
        &with_strategy(recipe("ddp", Some("[0, 0]")), "ddp"),
    );
    run_ok(&dir, &["train", ddp.to_str().unwrap(), "-q"]);
    let m = metrics(&dir.join("ddp"));
    assert_eq!(m.steps.len(), 40, "one row per step");
    // Skipped while the scale is too high, halving each time; then applied.
    let first_applied = m.steps.iter().position(|r| !r.skipped).unwrap();
    assert!(first_applied >= 3, "{first_applied}");
    for pair in m.steps[..=first_applied].windows(2) {
        assert_eq!(pair[1].loss_scale, pair[0].loss_scale / 2.0);
    }
    assert!(
        m.steps[first_applied..]
            .iter()
            .any(|r| !r.skipped && r.loss.is_some())
    );
}

fn two_replicas_follow_the_single_device_run(name: &str, strategy: &str) {
    let dir = fresh_dir(name);
    let ddp = strategy == "ddp";
    let adjust = |text: String| if ddp { steady(text) } else { text };
    let single = write_recipe(&dir, "single.toml", &adjust(recipe("single", None)));
    let multi = write_recipe(
        &dir,
        "multi.toml",
        &adjust(with_strategy(recipe("multi", Some("[0, 0]")), strategy)),
    );
    run_ok(&dir, &["train", single.to_str().unwrap(), "-q"]);
    let stdout = run_ok(&dir, &["check", multi.to_str().unwrap()]);
    assert!(
        stdout.contains("flex devices [0, 0]") && stdout.contains(&format!("strategy {strategy}")),
        "{stdout}"
    );
    run_ok(&dir, &["train", multi.to_str().unwrap(), "-q"]);

    let (a, b) = (metrics(&dir.join("single")), metrics(&dir.join("multi")));
    assert_eq!(b.backend, "flex devices [0, 0]");
    // One row per step, not one per replica, with the same skip decisions and scales.
    assert_eq!(a.steps.len(), 40);
    assert_eq!(b.steps.len(), 40);
    let decisions = |rows: &[burn_mpric_train::report::metrics::StepRow]| -> Vec<(bool, f32)> {
        rows.iter().map(|r| (r.skipped, r.loss_scale)).collect()
    };
    assert_eq!(decisions(&a.steps), decisions(&b.steps));
    assert_eq!(
        a.steps.iter().any(|r| r.skipped),
        !ddp,
        "the 1e9 scale skips the first steps; the steady one none"
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
    if !ddp {
        // The replicas with the skip decided on the device, read every 5 steps: the same
        // decisions, one row per step.
        run_ok(
            &dir,
            &[
                "train",
                multi.to_str().unwrap(),
                "-q",
                "--set",
                "output=on-device",
                "--set",
                "sync_every=5",
            ],
        );
        let c = metrics(&dir.join("on-device"));
        assert_eq!(c.steps.len(), 40);
        assert_eq!(decisions(&c.steps), decisions(&a.steps));
    }
}

#[test]
fn a_multi_device_run_resumes_bit_for_bit() {
    resumes_bit_for_bit("multi-device-resume", "multi_device", "[0, 0, 0]");
}

#[test]
fn a_ddp_run_resumes_bit_for_bit() {
    // Two replicas: a sum of two is the same whichever replica burn-collective starts from.
    resumes_bit_for_bit("ddp-resume", "ddp", "[0, 0]");
}

fn resumes_bit_for_bit(name: &str, strategy: &str, devices: &str) {
    let dir = fresh_dir(name);
    let straight = write_recipe(
        &dir,
        "straight.toml",
        &with_strategy(recipe("straight", Some(devices)), strategy),
    );
    let split = write_recipe(
        &dir,
        "split.toml",
        &with_strategy(recipe("split", Some(devices)), strategy),
    );
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
