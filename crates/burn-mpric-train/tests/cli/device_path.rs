//! `sync_every`: the loss scaler's device path in `mpric train`. The skip is decided on the
//! device and the rows come at the reads: the same decisions as the host-read run, a resume
//! that equals one run bit for bit, and recipes the device path cannot take refused.

use burn_mpric_train::checkpoint;

use crate::common::{fresh_dir, metrics, run, run_ok, small_recipe, write_recipe};
use crate::resume::split_equals_straight;

/// f16 compute on Flex with a loss scale far too high at first (the first steps skip) that
/// grows every 4 steps, read every 3 steps and at the checkpoints.
fn recipe(sync_every: Option<u64>) -> String {
    let sync = sync_every.map_or(String::new(), |n| format!("sync_every = {n}\n"));
    small_recipe(&format!(
        r#"steps = 40
checkpoint_every = 10
{sync}policy = "mixed_f16"
loss_scale = {{ preset = "torch", initial_scale = 1e9, growth_interval = 4 }}"#
    ))
}

#[test]
fn the_device_path_resumes_exactly_and_takes_the_host_paths_decisions() {
    let on_device = split_equals_straight("device-resume", &recipe(Some(3)), 17);
    assert_eq!(on_device.state.step, 40);
    assert_eq!(on_device.state.steps.len(), 40, "one row per step");

    let dir = fresh_dir("device-host");
    let path = write_recipe(&dir, "r.toml", &recipe(None));
    run_ok(&dir, &["train", path.to_str().unwrap(), "-q"]);
    let found = checkpoint::latest(&dir.join("out")).unwrap().unwrap();
    let host = found.verify().unwrap();

    // The same skips, scales and counters as the host-read run, step by step.
    let decisions = |rows: &[burn_mpric_train::report::metrics::StepRow]| -> Vec<_> {
        rows.iter()
            .map(|r| (r.step, r.loss_scale, r.skipped, r.skipped_total))
            .collect()
    };
    assert_eq!(
        decisions(&on_device.state.steps),
        decisions(&host.state.steps)
    );
    assert!(
        host.state.scaler.stats.skipped > 0,
        "the run should skip steps"
    );
    assert_eq!(on_device.state.scaler, host.state.scaler);
    // A skipped step's overflowed parameters are named as on the host, learned at the read.
    let named = |rows: &[burn_mpric_train::report::metrics::StepRow]| -> Vec<_> {
        rows.iter().map(|r| r.overflowed.clone()).collect()
    };
    assert!(host.state.steps.iter().any(|r| !r.overflowed.is_empty()));
    assert_eq!(named(&on_device.state.steps), named(&host.state.steps));
    // Only the host-read run probes a skipped step's cause: the device path ran.
    assert!(host.state.steps.iter().any(|r| r.cause.is_some()));
    assert!(on_device.state.steps.iter().all(|r| r.cause.is_none()));
    // Losses and accuracies from the rows' own steps (Adam on the device agrees with Burn's
    // to rounding).
    for (d, h) in on_device.state.steps.iter().zip(&host.state.steps) {
        match (d.loss, h.loss) {
            (Some(a), Some(b)) => assert!((a - b).abs() <= 1e-3 * (1.0 + b.abs()), "{d:?} {h:?}"),
            (a, b) => assert_eq!(a.is_some(), b.is_some(), "{d:?} {h:?}"),
        }
        assert_eq!(d.accuracy.is_some(), h.accuracy.is_some());
        if let (Some(a), Some(b)) = (d.accuracy, h.accuracy) {
            assert!((a - b).abs() <= 0.07, "{d:?} {h:?}");
        }
    }
    let files = metrics(&dir.join("out"));
    assert_eq!(files.steps.len(), 40);
}

#[test]
fn recipes_the_device_path_cannot_take_are_refused() {
    let dir = fresh_dir("device-refused");
    for (extra, says) in [
        ("sync_every = 0\n", "must be > 0"),
        ("sync_every = 5\nclip_grad_norm = 1.0\n", "cannot clip"),
    ] {
        let text = small_recipe(&format!("steps = 4\n{extra}"));
        let path = write_recipe(&dir, "r.toml", &text);
        let out = run(&dir, &["train", path.to_str().unwrap(), "-q"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains("sync_every") && stderr.contains(says),
            "{stderr}"
        );
    }
    let text = small_recipe("steps = 4\nsync_every = 5").replacen(
        "lr = 0.003",
        "lr = 0.003\nstate = \"bf16\"\nmaster = \"stochastic\"",
        1,
    );
    let path = write_recipe(&dir, "r.toml", &text);
    let out = run(&dir, &["train", path.to_str().unwrap(), "-q"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("sync_every") && stderr.contains("f32"),
        "{stderr}"
    );
}
