//! `cargo xtask bench --inference`: what half precision costs a trained model. Builds `mpric`
//! in release, trains the recipes (the quickstart, the CSV, image and character-model ones),
//! then runs `mpric evaluate` on each held-out split at f32, mixed bf16/f16 and pure
//! bf16/f16, the policies interleaved over rounds, and writes `target/bench/inference.md`:
//! each policy's metrics and their change from f32, the weights' bytes, and the median
//! scoring time over f32's.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// The policies compared, f32 first (the reference).
const POLICIES: [&str; 5] = ["f32", "mixed_bf16", "mixed_f16", "pure_bf16", "pure_f16"];

/// The recipes (file, overrides for a shorter run where the full one is long).
const RECIPES: [(&str, &[&str]); 4] = [
    ("quickstart.toml", &[]),
    ("csv_pumps.toml", &[]),
    ("image_folder_shapes.toml", &[]),
    ("tiny_lm.toml", &["steps=300"]),
];

/// Runs the comparison; `args` may hold `--reps N` (rounds, default 7).
pub fn bench(cargo: &str, root: &Path, args: &[String]) -> Result<(), String> {
    let reps: usize = match args {
        [] => 7,
        [flag, n] if flag == "--reps" => n.parse().map_err(|_| format!("--reps {n}: a number"))?,
        other => {
            return Err(format!(
                "bench --inference: unexpected {other:?}; use --reps N"
            ));
        }
    };
    if reps == 0 {
        return Err("--reps 0: at least one round".into());
    }
    let status = Command::new(cargo)
        .args([
            "build",
            "--release",
            "-p",
            "burn-mpric-train",
            "--bin",
            "mpric",
        ])
        .current_dir(root)
        .status()
        .map_err(|e| format!("cargo build: {e}"))?;
    if !status.success() {
        return Err("building mpric failed".into());
    }
    let mpric = root.join("target/release/mpric");
    let out = root.join("target/bench");
    let mut report =
        String::from("## Inference at half precision (`cargo xtask bench --inference`)\n\n");
    for (file, sets) in RECIPES {
        let recipe = root.join("recipes").join(file);
        let name = file.trim_end_matches(".toml");
        let output = format!("output={}", out.join("inference").join(name).display());
        let mut overrides: Vec<String> = vec!["--set".into(), output];
        for set in sets {
            overrides.extend(["--set".to_string(), set.to_string()]);
        }
        run(
            &mpric,
            &[
                &[
                    "train",
                    recipe.to_str().unwrap_or_default(),
                    "-q",
                    "--overwrite",
                ][..],
                &strs(&overrides),
            ]
            .concat(),
        )?;
        let mut results: Vec<Vec<Value>> = vec![Vec::new(); POLICIES.len()];
        for round in 0..reps {
            for k in 0..POLICIES.len() {
                let i = (k + round) % POLICIES.len();
                let json = run(
                    &mpric,
                    &[
                        &[
                            "evaluate",
                            recipe.to_str().unwrap_or_default(),
                            "--json",
                            "--policy",
                            POLICIES[i],
                        ][..],
                        &strs(&overrides),
                    ]
                    .concat(),
                )?;
                results[i].push(serde_json::from_str(&json).map_err(|e| e.to_string())?);
            }
        }
        report.push_str(&table(name, sets, &results));
    }
    std::fs::create_dir_all(&out).map_err(|e| e.to_string())?;
    let path = out.join("inference.md");
    std::fs::write(&path, &report).map_err(|e| format!("{}: {e}", path.display()))?;
    print!("{report}");
    eprintln!("written: {}", path.display());
    Ok(())
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

fn run(program: &Path, args: &[&str]) -> Result<String, String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("{}: {e}", program.display()))?;
    if !out.status.success() {
        return Err(format!(
            "mpric {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    String::from_utf8(out.stdout).map_err(|e| e.to_string())
}

/// One recipe's table: a row per policy.
fn table(name: &str, sets: &[&str], results: &[Vec<Value>]) -> String {
    let first = &results[0][0];
    let metric = ["accuracy", "perplexity", "mae"]
        .into_iter()
        .find(|m| first[m].is_number())
        .unwrap_or("loss");
    let median = |runs: &[Value]| {
        let mut t: Vec<f64> = runs.iter().filter_map(|r| r["seconds"].as_f64()).collect();
        t.sort_by(f64::total_cmp);
        t.get(t.len() / 2).copied().unwrap_or(f64::NAN)
    };
    let reference = (&results[0][0], median(&results[0]));
    let mut text = format!(
        "### {name}{}\n\n{} held-out predictions, step {}, on {}; scoring time is the median of {} rounds.\n\n| policy | loss | Δ loss | {metric} | Δ {metric} | weight bytes | time vs f32 |\n|---|---|---|---|---|---|---|\n",
        if sets.is_empty() {
            String::new()
        } else {
            format!(" ({})", sets.join(", "))
        },
        first["predictions"],
        first["step"],
        first["backend"].as_str().unwrap_or_default(),
        results[0].len()
    );
    for (policy, runs) in POLICIES.iter().zip(results) {
        let r = &runs[0];
        let num = |v: &Value, k: &str| v[k].as_f64().unwrap_or(f64::NAN);
        text.push_str(&format!(
            "| {policy} (`{}`) | {:.4} | {:+.4} | {:.4} | {:+.4} | {} ({:.2}x) | {:.2}x |\n",
            r["policy"].as_str().unwrap_or_default(),
            num(r, "loss"),
            num(r, "loss") - num(reference.0, "loss"),
            num(r, metric),
            num(r, metric) - num(reference.0, metric),
            r["weight_bytes"],
            num(r, "weight_bytes") / num(reference.0, "weight_bytes"),
            median(runs) / reference.1
        ));
    }
    text.push('\n');
    text
}
