//! The quickstart recipe, shortened to 60 steps: the mixed-precision run (bf16 compute)
//! ends within 2% of the same recipe at f32, from the same seed; and every shipped recipe
//! passes `mpric check` (wgpu's needs an adapter with f16, as CI's lavapipe has).

use crate::common::{fresh_dir, metrics, recipes, run_ok};

fn final_losses(dir: &std::path::Path, output: &str, policy: &str) -> (f32, f32, f32) {
    final_losses_on(dir, output, policy, "flex")
}

/// The quickstart's 60 steps at `policy` on `backend` into `dir/output`: the mean loss of
/// the first and the last 10 steps and the held-out loss; no step skipped.
pub fn final_losses_on(
    dir: &std::path::Path,
    output: &str,
    policy: &str,
    backend: &str,
) -> (f32, f32, f32) {
    let recipe = recipes().join("quickstart.toml");
    run_ok(
        dir,
        &[
            "train",
            recipe.to_str().unwrap(),
            "-q",
            "--set",
            "steps=60",
            "--set",
            &format!("output={output}"),
            "--set",
            &format!("policy={policy}"),
            "--set",
            &format!("backend.name={backend}"),
        ],
    );
    let m = metrics(&dir.join(output));
    assert_eq!(m.steps.len(), 60);
    assert!(m.steps.iter().all(|r| !r.skipped));
    let mean = |rows: &[burn_mpric_train::report::metrics::StepRow]| {
        rows.iter().map(|r| r.loss.unwrap()).sum::<f32>() / rows.len() as f32
    };
    let first = mean(&m.steps[..10]);
    let last = mean(&m.steps[50..]);
    let eval = m.eval.last().unwrap().loss.unwrap();
    (first, last, eval)
}

#[test]
fn quickstart_mixed_precision_ends_within_two_percent_of_f32() {
    let dir = fresh_dir("quickstart");
    let (mixed_first, mixed_last, mixed_eval) = final_losses(&dir, "mixed", "p=f32,c=bf16,o=f32");
    let (f32_first, f32_last, f32_eval) = final_losses(&dir, "full", "f32");
    eprintln!(
        "mixed: {mixed_first} -> {mixed_last} (held-out {mixed_eval}); f32: {f32_first} -> {f32_last} (held-out {f32_eval})"
    );
    // Both runs learned something.
    assert!(
        f32_last < 0.8 * f32_first,
        "f32 did not learn: {f32_first} -> {f32_last}"
    );
    assert!(mixed_last < 0.8 * mixed_first);
    // And they end in the same place.
    let rel = |a: f32, b: f32| (a - b).abs() / b;
    assert!(
        rel(mixed_last, f32_last) < 0.02,
        "training loss of the last 10 steps: mixed {mixed_last} vs f32 {f32_last}"
    );
    assert!(
        rel(mixed_eval, f32_eval) < 0.02,
        "held-out loss: mixed {mixed_eval} vs f32 {f32_eval}"
    );
    // The mixed run really ran at bf16.
    assert_eq!(metrics(&dir.join("mixed")).policy, "p=f32,c=bf16,o=f32");
}

#[test]
fn every_shipped_recipe_passes_check() {
    let dir = fresh_dir("check-recipes");
    let mut names: Vec<String> = std::fs::read_dir(recipes())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".toml"))
        .collect();
    names.sort();
    assert!(names.len() >= 3, "{names:?}");
    for name in names {
        let out = run_ok(&dir, &["check", recipes().join(&name).to_str().unwrap()]);
        assert!(out.contains(": ok"), "{name}: {out}");
    }
}
