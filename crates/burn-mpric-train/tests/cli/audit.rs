//! `mpric audit`: the quickstart and the tiny language model get the verdicts their known
//! behaviour implies (both train at bf16 without skipped steps; at f16 the printed initial
//! scale trains without skipped steps, a scale 64 times larger does not); the table, the JSON
//! and the SVG agree; `[ops]` overrides reach the ops; bad input is a clear error.

use std::path::Path;

use serde_json::Value;

use crate::common::{fresh_dir, metrics, recipes, run, run_ok, small_recipe, write_recipe};

/// Runs `mpric audit --json` and returns the parsed JSON; checks audit.json holds the same.
fn audit_json(dir: &Path, recipe: &str, extra: &[&str]) -> Value {
    let mut args = vec!["audit", recipe, "--json", "--set", "output=out"];
    args.extend(extra);
    let stdout = run_ok(dir, &args);
    let printed: Value = serde_json::from_str(&stdout).unwrap();
    let file: Value =
        serde_json::from_slice(&std::fs::read(dir.join("out/audit.json")).unwrap()).unwrap();
    assert_eq!(printed, file, "stdout and audit.json differ");
    let svg = std::fs::read_to_string(dir.join("out/audit_gradients.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("f16 normal range"));
    printed
}

fn kinds(audit: &Value) -> Vec<&str> {
    audit["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["verdict"].as_str().unwrap())
        .collect()
}

/// The `--set` lines of the first verdict of `kind`.
fn fix<'a>(audit: &'a Value, kind: &str) -> (Vec<&'a str>, &'a Value) {
    let i = kinds(audit).iter().position(|k| *k == kind).unwrap();
    let lines = audit["fixes"][i]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    (lines, &audit["verdicts"][i])
}

/// Trains `recipe` with `sets` for `steps` steps (after a one-step warmup) in `dir/name`;
/// returns the skipped steps.
fn skipped(dir: &Path, recipe: &str, name: &str, steps: u64, sets: &[&str]) -> usize {
    let output = format!("output={name}");
    let steps = format!("steps={steps}");
    let mut args = vec![
        "train",
        recipe,
        "-q",
        "--set",
        &output,
        "--set",
        &steps,
        "--set",
        "schedule.warmup_steps=1",
    ];
    for set in sets {
        args.extend(["--set", set]);
    }
    run_ok(dir, &args);
    metrics(&dir.join(name))
        .steps
        .iter()
        .filter(|r| r.skipped)
        .count()
}

fn check_known_behaviour(name: &str, recipe: &str, audit_steps: &str, train_steps: u64) {
    let dir = fresh_dir(name);
    let recipe = recipes().join(recipe);
    let recipe = recipe.to_str().unwrap();
    let audit = audit_json(&dir, recipe, &["--steps", audit_steps]);
    assert_eq!(audit["steps"], audit_steps.parse::<u64>().unwrap());
    // Both models train at bf16 without skips and hold no outsized activation.
    assert_eq!(
        kinds(&audit),
        ["f16_safe", "bf16_safe"],
        "{:#}",
        audit["verdicts"]
    );
    let (bf16, _) = fix(&audit, "bf16_safe");
    assert!(
        bf16.is_empty(),
        "the recipe already runs bf16 unscaled: {bf16:?}"
    );

    let (f16, verdict) = fix(&audit, "f16_safe");
    assert!(verdict["keeping_full"].as_array().unwrap().is_empty());
    let scale = verdict["initial_scale"].as_f64().unwrap() as f32;
    assert_eq!(f16[0], "policy=mixed_f16");
    assert_eq!(
        f16[1],
        format!("loss_scale={{ initial_scale = {scale:?} }}")
    );
    assert_eq!(skipped(&dir, recipe, "f16", train_steps, &f16), 0);
    // The audit's scale is within a few powers of two of the edge (it keeps the largest
    // gradient below half of f16's end, and counts every table op's backward output as a
    // gradient): 64 times larger overflows.
    let larger = format!("loss_scale={{ initial_scale = {:?} }}", scale * 64.0);
    assert!(skipped(&dir, recipe, "f16x64", 4, &[f16[0], &larger]) > 0);
}

#[test]
fn the_quickstart_gets_the_verdicts_its_runs_confirm() {
    check_known_behaviour("audit-quickstart", "quickstart.toml", "5", 60);
}

#[test]
fn the_tiny_lm_gets_the_verdicts_its_runs_confirm() {
    check_known_behaviour("audit-tiny-lm", "tiny_lm.toml", "2", 12);
}

#[test]
fn the_table_shows_what_the_json_holds() {
    let dir = fresh_dir("audit-table");
    let path = write_recipe(
        &dir,
        "r.toml",
        &small_recipe("steps = 10\npolicy = \"mixed_f16\""),
    );
    let audit = audit_json(&dir, path.to_str().unwrap(), &["--steps", "2"]);
    // f16 compute: shares at the recipe's first scale (dynamic, 2^15).
    assert_eq!(audit["loss_scale"], 32768.0);
    assert_eq!(audit["measured_at"], "p=f32,c=bf16,o=f32");
    let text = run_ok(
        &dir,
        &["audit", "r.toml", "--steps", "2", "--set", "output=out"],
    );
    assert!(
        text.contains("backward values at the loss scale 2^15"),
        "{text}"
    );
    for row in audit["ops"].as_array().unwrap() {
        let method = row["method"].as_str().unwrap();
        assert!(text.contains(method), "{method} missing from the table");
    }
    for p in ["Mlp.layers.0.weight", "Mlp.out.bias"] {
        assert!(text.contains(p), "{p}");
    }
    // The f16 verdict needs no policy line: the recipe computes at f16 already.
    let (f16, _) = fix(&audit, "f16_safe");
    assert!(f16[0].starts_with("loss_scale="), "{f16:?}");
    assert!(text.contains(&format!("--set '{}'", f16[0])), "{text}");
    assert!(text.contains("LossScaler::dynamic(LossScaleConfig::new().with_initial_scale("));
}

#[test]
fn op_overrides_in_the_recipe_reach_the_ops() {
    let dir = fresh_dir("audit-ops");
    let path = write_recipe(
        &dir,
        "r.toml",
        &small_recipe("steps = 10\npolicy = \"mixed_f16\"\n\n[ops]\nlinear = \"full\""),
    );
    let audit = audit_json(&dir, path.to_str().unwrap(), &["--steps", "1"]);
    let ops = audit["ops"].as_array().unwrap();
    let forward_linear: Vec<&Value> = ops
        .iter()
        .filter(|r| r["method"] == "linear" && r["phase"] == "forward")
        .collect();
    assert!(!forward_linear.is_empty());
    for row in forward_linear {
        assert_eq!(row["dtype"], "f32", "{row}");
        assert_eq!(row["low"], false);
    }
    // linear_weight_backward has no override: it still runs at f16.
    assert!(
        ops.iter()
            .any(|r| r["method"] == "linear_weight_backward" && r["dtype"] == "f16")
    );
    // The same override trains, and `mpric check` accepts it.
    run_ok(
        &dir,
        &[
            "train",
            "r.toml",
            "-q",
            "--set",
            "output=trained",
            "--set",
            "steps=3",
        ],
    );
    let check = run_ok(&dir, &["check", "r.toml"]);
    assert!(check.contains("(ops: linear full)"), "{check}");
}

#[test]
fn bad_input_is_a_clear_error() {
    let dir = fresh_dir("audit-bad");
    let quickstart = recipes().join("quickstart.toml");
    let quickstart = quickstart.to_str().unwrap();
    let fails = |args: &[&str]| {
        let out = run(&dir, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(out.stdout.is_empty());
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        stderr
    };
    let err = fails(&["audit", quickstart, "--steps", "0", "--set", "output=out"]);
    assert!(err.contains("at least one step"), "{err}");
    let err = fails(&[
        "audit",
        quickstart,
        "--set",
        "ops.matmool=full",
        "--set",
        "output=out",
    ]);
    assert!(err.contains("ops.matmool: unknown op `matmool`"), "{err}");
    let err = fails(&[
        "audit",
        quickstart,
        "--set",
        "ops.linear=fulll",
        "--set",
        "output=out",
    ]);
    assert!(
        err.contains("ops.linear: unknown op category `fulll`"),
        "{err}"
    );
    let err = fails(&["audit", "missing.toml"]);
    assert!(err.contains("missing.toml"), "{err}");
    // A recipe whose data cannot be read.
    let path = write_recipe(
        &dir,
        "r.toml",
        "batch_size = 4\nsteps = 2\noutput = \"out\"\n[model]\nkind = \"mlp\"\n[dataset]\nkind = \"csv\"\npath = \"nowhere.csv\"\ntarget = \"y\"\ntask = \"regression\"\n[optimizer]\nkind = \"sgd\"\nlr = 0.1\n",
    );
    let err = fails(&["audit", path.to_str().unwrap()]);
    assert!(err.contains("nowhere.csv"), "{err}");
    // f16 on a backend without it: the policy the audit would judge cannot run there.
    let err = fails(&[
        "audit",
        quickstart,
        "--set",
        "policy=mixed_f16",
        "--set",
        "backend.name=ndarray",
        "--set",
        "output=out",
    ]);
    assert!(err.contains("policy"), "{err}");
    assert!(
        !dir.join("out/audit.json").exists(),
        "nothing written for a failed audit"
    );
}

/// At f16 from a scale of 2^40 the recipe as written skips step after step: the trial says
/// so, with its cause (a range problem: the gradients are finite at a far lower scale); each
/// verdict's `--set` lines are tried as trials of their own and train without a skip after
/// the first two; the same recipe at a sane scale needs no remedy.
#[test]
fn a_failing_recipe_gets_remedies_that_were_run() {
    let dir = fresh_dir("audit-remedies");
    let quickstart = recipes().join("quickstart.toml");
    let quickstart = quickstart.to_str().unwrap();
    let sets = [
        "--set",
        "policy=mixed_f16",
        "--set",
        "loss_scale={ initial_scale = 1099511627776.0 }",
    ];
    let audit = audit_json(&dir, quickstart, &sets);
    let trial = &audit["trial"];
    let skipped = trial["skipped"].as_array().unwrap();
    assert!(skipped.len() > 2, "{trial}");
    assert_eq!(trial["cause"]["cause"], "range", "{trial}");
    let remedies = audit["remedies"].as_array().unwrap();
    assert!(!remedies.is_empty(), "{audit}");
    for remedy in remedies {
        let tried = &remedy["tried"];
        let late: Vec<_> = tried["skipped"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s.as_u64().unwrap() >= 2)
            .collect();
        assert!(late.is_empty(), "{remedy}");
        assert!(
            tried["cause"].is_null() || tried["cause"]["cause"] == "range",
            "{remedy}"
        );
    }
    let f16 = remedies
        .iter()
        .find(|r| {
            r["lines"][0]
                .as_str()
                .unwrap()
                .starts_with("loss_scale.initial_scale=")
        })
        .expect("the initial-scale remedy");
    assert_eq!(f16["tried"]["policy"], "p=f32,c=f16,o=f32");

    let mut args = vec!["audit", quickstart, "--set", "output=out"];
    args.extend(sets);
    let text = run_ok(&dir, &args);
    assert!(
        text.contains(
            "trial of the recipe as written: p=f32,c=f16,o=f32 from a loss scale of 2^40: 8 steps"
        ),
        "{text}"
    );
    assert!(text.contains("a range problem"), "{text}");
    assert!(text.contains("     checked: "), "{text}");
    // The verdict that calls f16 safe stands above a trial at f16 (from the recipe's scale)
    // that failed: its line says so; the bf16 verdicts are not what the trial tried.
    let safe = text
        .lines()
        .find(|l| l.contains("f16 is safe with an initial scale of"))
        .expect("an f16-safe verdict");
    assert!(
        safe.contains(" — but the trial below, from a loss scale of 2^40 rather than this 2^")
            && safe.contains(", did not train: ")
            && safe.ends_with("steps skipped after the first 2 (the gradients overflowed)"),
        "{text}"
    );
    assert!(
        text.lines()
            .filter(|l| l.contains("but the trial below"))
            .all(|l| l.contains("f16 is safe")),
        "{text}"
    );

    let sane = audit_json(&dir, quickstart, &["--set", "policy=mixed_f16"]);
    assert!(sane["remedies"].as_array().unwrap().is_empty(), "{sane}");
    let sane_text = run_ok(
        &dir,
        &[
            "audit",
            quickstart,
            "--set",
            "policy=mixed_f16",
            "--set",
            "output=out",
        ],
    );
    assert!(sane_text.contains("no remedy needed"), "{sane_text}");
    assert!(
        !sane_text.contains("but the trial below"),
        "a trial that trains contradicts no verdict: {sane_text}"
    );
    let out = run(
        &dir,
        &[
            "audit",
            quickstart,
            "--trial-steps",
            "2",
            "--set",
            "output=out",
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("--trial-steps was 2") && stderr.lines().count() == 1,
        "{stderr}"
    );
}
