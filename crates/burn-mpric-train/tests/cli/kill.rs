//! A run killed with SIGKILL in the middle of training (it checkpoints every step, so the
//! kill most likely lands inside a write) leaves only loadable files behind, and the resumed
//! run finishes with a valid model equal to an uninterrupted run's.

use std::path::Path;
use std::time::{Duration, Instant};

use burn_mpric_train::checkpoint;
use burn_mpric_train::report::metrics::CSV_HEADER;

use crate::common::{fresh_dir, metrics, mpric, run_ok, small_recipe, write_recipe};

const STEPS: u64 = 300;

fn assert_valid_svg(path: &Path) {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(
        text.starts_with("<svg") || text.starts_with("<?xml"),
        "{}",
        path.display()
    );
    assert!(
        text.trim_end().ends_with("</svg>"),
        "{} is truncated",
        path.display()
    );
    assert!(text.contains("<polyline"), "{}", path.display());
}

/// Every file of the output folder parses or loads.
fn assert_all_files_valid(output: &Path, expect_complete: bool) {
    for checkpoint in checkpoint::list(output).unwrap() {
        let verified = checkpoint
            .verify()
            .unwrap_or_else(|e| panic!("{}: {e}", checkpoint.dir.display()));
        assert_eq!(verified.state.step, checkpoint.step);
        assert!(verified.params.iter().flatten().all(|v| v.is_finite()));
    }
    if output.join("metrics.json").exists() || expect_complete {
        let m = metrics(output);
        let csv = std::fs::read_to_string(output.join("metrics.csv")).unwrap();
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines[0], CSV_HEADER);
        // Each file is replaced atomically, the pair is not: a kill between the two renames
        // leaves the CSV one checkpoint ahead of the JSON. Where both have a step, they agree
        // (a resumed run first rewrites both from its checkpoint, so rows of two runs that
        // repeated a step with different wall times never meet).
        let from_json = burn_mpric_train::report::metrics::csv(&m.steps);
        let from_json: Vec<&str> = from_json.lines().collect();
        let common = lines.len().min(from_json.len());
        assert_eq!(
            lines[..common],
            from_json[..common],
            "CSV and JSON disagree"
        );
        if expect_complete {
            assert_eq!(lines.len(), from_json.len());
        }
        for (i, line) in lines[1..].iter().enumerate() {
            assert_eq!(
                line.split(',').count(),
                CSV_HEADER.split(',').count(),
                "{line}"
            );
            assert!(line.starts_with(&format!("{},", i + 1)), "{line}");
        }
        for (i, row) in m.steps.iter().enumerate() {
            assert_eq!(row.step, i as u64 + 1);
        }
        assert_valid_svg(&output.join("loss.svg"));
        assert_valid_svg(&output.join("loss_scale.svg"));
        if expect_complete {
            assert_eq!(m.steps.len() as u64, STEPS);
        }
    }
}

fn temporaries(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for sub in [dir.to_path_buf(), dir.join("checkpoints")] {
        if let Ok(entries) = std::fs::read_dir(&sub) {
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if name.ends_with(".tmp") {
                    found.push(name);
                }
            }
        }
    }
    found
}

#[test]
fn sigkill_during_training_then_resume_finishes_with_valid_files() {
    kill_and_resume("kill", "");
}

/// The same on the loss scaler's device path: the checkpoints hold the steps read there.
#[test]
fn sigkill_on_the_device_path_then_resume_equals_the_uninterrupted_run() {
    kill_and_resume("kill-device", "sync_every = 4\n");
}

/// Kills a run three times, resumes it to the end, and compares it with a run never killed.
fn kill_and_resume(name: &str, extra: &str) {
    let dir = fresh_dir(name);
    let text = small_recipe(&format!(
        "steps = {STEPS}\ncheckpoint_every = 1\n{extra}policy = \"p=f32,c=bf16,o=f32\""
    ));
    let path = write_recipe(&dir, "r.toml", &text);
    let path = path.to_str().unwrap();
    let output = dir.join("out");

    // Three kills at different moments; each run after the first resumes the killed one.
    let mut killed_at = 0;
    for (round, delay_ms) in [0u64, 7, 19].into_iter().enumerate() {
        let mut args = vec!["train", path, "-q"];
        if round > 0 {
            args.push("--resume");
        }
        let mut child = mpric(&dir)
            .args(&args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let started = Instant::now();
        loop {
            let step = checkpoint::latest(&output).unwrap().map_or(0, |c| c.step);
            if step >= killed_at + 3 {
                break;
            }
            assert!(
                child.try_wait().unwrap().is_none(),
                "the run ended before it was killed"
            );
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "no checkpoint appeared"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        std::thread::sleep(Duration::from_millis(delay_ms));
        child.kill().unwrap(); // SIGKILL on Unix
        let status = child.wait().unwrap();
        assert!(
            !status.success(),
            "the run finished before the kill: {status}"
        );

        let step = checkpoint::latest(&output).unwrap().unwrap().step;
        assert!(
            step > killed_at && step < STEPS,
            "round {round}: step {step}"
        );
        killed_at = step;
        eprintln!(
            "round {round}: killed after checkpoint {step}, temporaries left: {:?}",
            temporaries(&output)
        );
        assert_all_files_valid(&output, false);
    }

    let out = run_ok(
        &dir,
        &[
            "train",
            path,
            "-q",
            "--resume",
            "--set",
            "checkpoint_every=100",
        ],
    );
    assert!(
        out.contains(&format!("steps {killed_at} -> {STEPS}")),
        "{out}"
    );
    assert_all_files_valid(&output, true);
    assert!(
        temporaries(&output).is_empty(),
        "{:?}",
        temporaries(&output)
    );

    // The resumed run is the uninterrupted run.
    run_ok(
        &dir,
        &[
            "train",
            path,
            "-q",
            "--set",
            "output=straight",
            "--set",
            "checkpoint_every=100",
        ],
    );
    let a = checkpoint::latest(&output)
        .unwrap()
        .unwrap()
        .verify()
        .unwrap();
    let b = checkpoint::latest(&dir.join("straight"))
        .unwrap()
        .unwrap()
        .verify()
        .unwrap();
    assert_eq!(a.params, b.params);
    assert_eq!(a.state.scaler, b.state.scaler);
}
