//! Nothing lost, nothing silent: checkpoints prove themselves on `--resume` (damaged ones are
//! passed over and set aside, forged ones refused by layout and by finiteness), one writer
//! per output folder, divergence stops with exit code 3, pure policies save their dtype, and
//! a run stopped with `--until` records what the uninterrupted run records.

use std::path::Path;
use std::process::Stdio;

use burn_mpric_train::checkpoint::manifest::Manifest;
use burn_mpric_train::checkpoint::record_layout::record_tensors;
use burn_mpric_train::checkpoint::{self, Verified};

use crate::common::{fresh_dir, metrics, mpric, run, run_ok, small_recipe, write_recipe};

fn recipe(head: &str) -> String {
    small_recipe(&format!("checkpoint_every = 10\n{head}"))
}

fn bits(verified: &Verified) -> Vec<u32> {
    verified
        .params
        .iter()
        .flatten()
        .map(|v| v.to_bits())
        .collect()
}

fn final_params(output: &Path) -> Verified {
    checkpoint::latest(output)
        .unwrap()
        .expect("a checkpoint")
        .verify()
        .unwrap()
}

fn step_dir(output: &Path, step: u64) -> std::path::PathBuf {
    checkpoint::checkpoints_dir(output).join(format!("step-{step:08}"))
}

/// Rewrites a checkpoint's manifest so that it describes the files as they are now: a forged
/// but self-consistent checkpoint, which only the layout and finiteness checks can refuse.
fn forge_manifest(dir: &Path, step: u64) {
    let read = |name: &str| std::fs::read(dir.join(name)).unwrap();
    let (model, optimizer, state) = (read("model.mpk"), read("optimizer.mpk"), read("state.mpk"));
    let manifest = Manifest::new(
        step,
        &[
            ("model.mpk", &model),
            ("optimizer.mpk", &optimizer),
            ("state.mpk", &state),
        ],
        Some((&model, &optimizer)),
    )
    .unwrap();
    std::fs::write(dir.join("manifest.json"), manifest.to_json()).unwrap();
}

/// Asserts `mpric train --resume` refuses with exit 2 and one line containing `needles`.
fn assert_refused(dir: &Path, recipe: &Path, needles: &[&str]) {
    let out = run(dir, &["train", recipe.to_str().unwrap(), "--resume", "-q"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    for needle in needles {
        assert!(stderr.contains(needle), "{stderr:?} lacks {needle:?}");
    }
}

/// Trains `text` in one run into `straight/`, and into `out/` stopped with `--until` and then
/// resumed (with `resume_args`); returns the output of the stopped run. After the stop, the
/// metrics hold no held-out row of the stop's step (it is not on the checkpoint schedule).
fn straight_and_split(dir: &Path, text: &str, until: u64, resume_args: &[&str]) -> String {
    let straight = write_recipe(
        dir,
        "straight.toml",
        &text.replace("\"out\"", "\"straight\""),
    );
    run_ok(dir, &["train", straight.to_str().unwrap(), "-q"]);
    let split = write_recipe(dir, "split.toml", text);
    let stop = until.to_string();
    let first = run_ok(
        dir,
        &["train", split.to_str().unwrap(), "--until", &stop, "-q"],
    );
    let evals = metrics(&dir.join("out")).eval;
    assert!(!evals.iter().any(|e| e.step == until), "{evals:?}");
    let mut resume = vec!["train", split.to_str().unwrap(), "--resume", "-q"];
    resume.extend_from_slice(resume_args);
    run_ok(dir, &resume);
    first
}

#[test]
fn a_damaged_newest_checkpoint_is_set_aside_and_the_run_resumes_from_the_one_before() {
    let dir = fresh_dir("integrity-fallback");
    let straight = write_recipe(
        &dir,
        "straight.toml",
        &recipe("steps = 40").replace("\"out\"", "\"straight\""),
    );
    run_ok(&dir, &["train", straight.to_str().unwrap(), "-q"]);

    // 30 steps (checkpoints 20 and 30), then a model of another architecture in step 30.
    let split = write_recipe(&dir, "split.toml", &recipe("steps = 40"));
    run_ok(
        &dir,
        &["train", split.to_str().unwrap(), "--until", "30", "-q"],
    );
    let other = write_recipe(
        &dir,
        "other.toml",
        &recipe("steps = 10")
            .replace("hidden = [16]", "hidden = [8]")
            .replace("\"out\"", "\"other\""),
    );
    run_ok(&dir, &["train", other.to_str().unwrap(), "-q"]);
    let out = dir.join("out");
    std::fs::copy(
        step_dir(&dir.join("other"), 10).join("model.mpk"),
        step_dir(&out, 30).join("model.mpk"),
    )
    .unwrap();

    let resumed = run(&dir, &["train", split.to_str().unwrap(), "--resume", "-q"]);
    let stderr = String::from_utf8_lossy(&resumed.stderr);
    assert!(resumed.status.success(), "{stderr}");
    assert!(
        stderr.contains("step-00000030/model.mpk")
            && stderr.contains("set aside as")
            && stderr.contains("resuming from step 20"),
        "{stderr}"
    );
    assert!(
        checkpoint::checkpoints_dir(&out)
            .join("step-00000030.rejected")
            .join("model.mpk")
            .exists()
    );
    // Steps 21..40 again from step 20: the uninterrupted run, bit for bit.
    assert_eq!(
        bits(&final_params(&out)),
        bits(&final_params(&dir.join("straight")))
    );

    // An empty newest folder (a checkpoint cut short) is passed over the same way.
    std::fs::create_dir(step_dir(&out, 50)).unwrap();
    let extended = run(
        &dir,
        &[
            "train",
            split.to_str().unwrap(),
            "--resume",
            "--set",
            "steps=60",
            "-q",
        ],
    );
    let stderr = String::from_utf8_lossy(&extended.stderr);
    assert!(extended.status.success(), "{stderr}");
    assert!(stderr.contains("manifest.json: missing"), "{stderr}");
    assert_eq!(checkpoint::latest(&out).unwrap().unwrap().step, 60);
}

#[test]
fn forged_checkpoints_are_refused_with_one_line_before_anything_is_loaded() {
    let dir = fresh_dir("integrity-forged");
    let path = write_recipe(&dir, "r.toml", &recipe("steps = 10"));
    let out = dir.join("out");
    let fresh = || {
        run_ok(
            &dir,
            &["train", path.to_str().unwrap(), "--overwrite", "-q"],
        );
    };
    let other = |edit: &dyn Fn(String) -> String, name: &str| {
        let text = edit(recipe("steps = 10")).replace("\"out\"", &format!("\"{name}\""));
        let other = write_recipe(&dir, &format!("{name}.toml"), &text);
        run_ok(
            &dir,
            &["train", other.to_str().unwrap(), "--overwrite", "-q"],
        );
        step_dir(&dir.join(name), 10)
    };
    let wider = other(&|t| t.replace("hidden = [16]", "hidden = [24]"), "wider");
    let reseeded = other(&|t| t.replace("seed = 3", "seed = 4"), "reseeded");
    let ours = step_dir(&out, 10);

    // A model of another architecture: refused by its layout, not a panic inside Burn.
    fresh();
    std::fs::copy(wider.join("model.mpk"), ours.join("model.mpk")).unwrap();
    forge_manifest(&ours, 10);
    assert_refused(
        &dir,
        &path,
        &[
            "model.mpk",
            "where the recipe's model has",
            "no other checkpoint",
        ],
    );

    // The optimizer state of another run (same architecture, other parameter ids).
    fresh();
    std::fs::copy(reseeded.join("optimizer.mpk"), ours.join("optimizer.mpk")).unwrap();
    forge_manifest(&ours, 10);
    assert_refused(
        &dir,
        &path,
        &["optimizer.mpk", "which the model does not have"],
    );

    // A NaN written into one weight.
    fresh();
    let model = std::fs::read(ours.join("model.mpk")).unwrap();
    let tensors = record_tensors(&model).unwrap();
    assert!(!tensors.is_empty());
    poison_last_tensor(&ours.join("model.mpk"));
    assert_refused(&dir, &path, &["model.mpk", "SHA-256 mismatch"]);
    forge_manifest(&ours, 10);
    let out_run = run(&dir, &["train", path.to_str().unwrap(), "--resume", "-q"]);
    let stderr = String::from_utf8_lossy(&out_run.stderr);
    assert_eq!(out_run.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("holds 1 non-finite values (NaN or infinity)"),
        "{stderr}"
    );
    // A NaN in the optimizer state (Adam's moments).
    fresh();
    poison_last_tensor(&ours.join("optimizer.mpk"));
    forge_manifest(&ours, 10);
    assert_refused(&dir, &path, &["optimizer.mpk", "non-finite values"]);
    // Refused checkpoints are kept where they are when nothing else can be resumed.
    assert!(ours.join("model.mpk").exists());
    assert!(
        !out.join("checkpoints")
            .join("step-00000010.rejected")
            .exists()
    );
}

/// Writes a NaN over the first element of the last tensor of a record file: its payload
/// follows the key `bytes` and a MessagePack bin header (bin8, bin16 or bin32).
fn poison_last_tensor(path: &Path) {
    let mut bytes = std::fs::read(path).unwrap();
    let key = bytes.windows(5).rposition(|w| w == b"bytes").unwrap() + 5;
    let header = match bytes[key] {
        0xc4 => 2,
        0xc5 => 3,
        0xc6 => 5,
        other => panic!("not a bin header: {other:#x}"),
    };
    let at = key + header;
    bytes[at..at + 4].copy_from_slice(&f32::NAN.to_le_bytes());
    std::fs::write(path, &bytes).unwrap();
}

#[test]
fn a_second_run_on_the_same_output_fails_at_once() {
    let dir = fresh_dir("integrity-lock");
    let path = write_recipe(&dir, "r.toml", &small_recipe("steps = 100000"));
    let mut first = mpric(&dir)
        .args(["train", path.to_str().unwrap(), "-q"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The checkpoints folder is made after the lock is taken.
    let started = std::time::Instant::now();
    while !dir.join("out").join("checkpoints").exists() {
        assert!(
            started.elapsed().as_secs() < 60,
            "the first run did not start"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    for args in [vec!["--overwrite"], vec!["--resume"], vec![]] {
        let mut full = vec!["train", path.to_str().unwrap(), "-q"];
        full.extend(args);
        let second = run(&dir, &full);
        let stderr = String::from_utf8_lossy(&second.stderr);
        assert_eq!(second.status.code(), Some(2), "{full:?}: {stderr}");
        assert!(
            stderr.contains("another mpric run is writing to this output folder"),
            "{stderr}"
        );
    }
    first.kill().unwrap();
    first.wait().unwrap();
    // The lock died with its process: the folder can be used again.
    run_ok(
        &dir,
        &[
            "train",
            path.to_str().unwrap(),
            "--overwrite",
            "--set",
            "steps=5",
            "-q",
        ],
    );
}

#[test]
fn a_run_whose_steps_keep_overflowing_stops_with_exit_3_and_keeps_its_last_checkpoint() {
    let dir = fresh_dir("integrity-diverge");
    // f16 compute with a scale that cannot back off: every step overflows and is skipped.
    let text = small_recipe(
        "steps = 40\ncheckpoint_every = 2\nmax_consecutive_skips = 5\npolicy = \"mixed_f16\"\nloss_scale = { initial_scale = 1e30, min_scale = 1e30 }",
    );
    let path = write_recipe(&dir, "r.toml", &text);
    let out = run(&dir, &["train", path.to_str().unwrap(), "-q"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("step 5: the run diverged: 5 steps in a row were skipped")
            && stderr.contains("the last good checkpoint, step 4, is kept"),
        "{stderr}"
    );
    assert_eq!(
        checkpoint::latest(&dir.join("out")).unwrap().unwrap().step,
        4
    );
    assert_eq!(metrics(&dir.join("out")).steps.len(), 5);
}

#[test]
fn a_pure_f16_run_saves_f16_params_and_resumes_close_to_the_uninterrupted_run() {
    let dir = fresh_dir("integrity-pure");
    let text = recipe("steps = 40\npolicy = \"pure_f16\"\nloss_scale = \"none\"");
    straight_and_split(&dir, &text, 25, &[]);

    for output in [dir.join("straight"), dir.join("out")] {
        let found = checkpoint::latest(&output).unwrap().unwrap();
        let model = std::fs::read(found.model_path()).unwrap();
        let dtypes: Vec<String> = record_tensors(&model)
            .unwrap()
            .into_iter()
            .map(|t| t.dtype)
            .collect();
        assert!(
            !dtypes.is_empty() && dtypes.iter().all(|d| d == "F16"),
            "{dtypes:?}"
        );
        let params = found.verify().unwrap().params;
        for v in params.iter().flatten() {
            assert!(v.abs() <= 65504.0);
            assert_eq!(
                burn::tensor::f16::from_f32(*v).to_f32(),
                *v,
                "{v} is not an f16 value"
            );
        }
    }
    let (a, b) = (metrics(&dir.join("straight")), metrics(&dir.join("out")));
    let (la, lb) = (a.steps[39].loss.unwrap(), b.steps[39].loss.unwrap());
    assert!((la - lb).abs() <= 1e-2 * la.abs(), "{la} vs {lb}");
}

#[test]
fn until_then_resume_writes_the_metrics_of_the_uninterrupted_run() {
    let dir = fresh_dir("integrity-until");
    let text = small_recipe("steps = 30");
    // A default spelled out on resume is the same recipe.
    let first = straight_and_split(&dir, &text, 5, &["--set", "optimizer.beta1=0.9"]);
    assert!(
        first.contains("held-out loss"),
        "the stop still reports a held-out loss: {first}"
    );
    let (a, b) = (metrics(&dir.join("straight")), metrics(&dir.join("out")));
    let untimed = |rows: &[burn_mpric_train::report::metrics::StepRow]| -> Vec<String> {
        rows.iter()
            .map(|r| {
                format!(
                    "{} {:?} {:?} {} {}",
                    r.step, r.loss, r.accuracy, r.loss_scale, r.skipped
                )
            })
            .collect()
    };
    assert_eq!(untimed(&a.steps), untimed(&b.steps));
    assert_eq!(a.eval, b.eval);
    assert_eq!(b.eval.len(), 1);
}

#[test]
fn an_unwritable_checkpoints_folder_is_found_before_the_first_step() {
    let dir = fresh_dir("integrity-preflight");
    let path = write_recipe(&dir, "r.toml", &small_recipe("steps = 5"));
    std::fs::create_dir_all(dir.join("out")).unwrap();
    // A file where the checkpoints folder should be: unwritable whoever runs the test.
    std::fs::write(dir.join("out").join("checkpoints"), b"").unwrap();
    let out = run(&dir, &["train", path.to_str().unwrap(), "-q"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("checkpoints"), "{stderr}");
    assert!(!dir.join("out").join("metrics.json").exists(), "a step ran");
}
