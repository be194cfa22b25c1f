//! After training: `mpric evaluate` gives the held-out numbers the training run recorded,
//! `mpric predict` on the training file agrees with `evaluate` on it, `mpric export` writes
//! safetensors that an independent reader (Python's `safetensors` and `numpy`) turns into
//! the predictions `mpric predict` gives, and every bad input gets one line and exit 2.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::common::{fresh_dir, metrics, recipes, run, run_ok, write_recipe};

/// Trains `recipe` into `dir/<output>` with `sets`; returns the overrides every later
/// command of the run repeats (the output folder and `sets`).
fn trained(dir: &Path, recipe: &Path, output: &str, sets: &[&str]) -> Vec<String> {
    let output = format!("output={}", dir.join(output).display());
    let mut args = vec!["train", recipe.to_str().unwrap(), "-q", "--set", &output];
    for set in sets {
        args.extend(["--set", set]);
    }
    run_ok(dir, &args);
    let mut overrides = vec!["--set".to_string(), output];
    for set in sets {
        overrides.extend(["--set".to_string(), set.to_string()]);
    }
    overrides
}

/// `mpric <command> <recipe> <args> <overrides>`, asserted to succeed; stdout.
fn after(dir: &Path, command: &str, recipe: &Path, args: &[&str], overrides: &[String]) -> String {
    let mut all = vec![command, recipe.to_str().unwrap()];
    all.extend(args);
    all.extend(overrides.iter().map(String::as_str));
    run_ok(dir, &all)
}

/// Runs a command that must be refused: exit 2, one stderr line holding every needle.
fn refused(dir: &Path, args: &[&str], needles: &[&str]) {
    let out = run(dir, args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let message = stderr.trim_end();
    assert_eq!(out.status.code(), Some(2), "mpric {args:?}: {stderr}");
    assert_eq!(message.lines().count(), 1, "one line expected:\n{stderr}");
    assert!(message.starts_with("error: "), "{message}");
    assert!(!message.contains("panicked"), "{message}");
    for needle in needles {
        assert!(message.contains(needle), "{message:?} lacks {needle:?}");
    }
}

fn pumps() -> PathBuf {
    recipes().join("csv_pumps.toml")
}

#[test]
fn evaluate_gives_the_held_out_numbers_training_recorded() {
    let dir = fresh_dir("after-evaluate");
    let recipe = pumps();
    let sets = trained(&dir, &recipe, "out", &["steps=120", "checkpoint_every=60"]);
    let recorded = metrics(&dir.join("out")).eval;
    assert_eq!(
        recorded.iter().map(|e| e.step).collect::<Vec<_>>(),
        [60, 120]
    );
    for row in &recorded {
        let checkpoint = format!("step-{}", row.step);
        let json: Value = serde_json::from_str(&after(
            &dir,
            "evaluate",
            &recipe,
            &["--checkpoint", &checkpoint, "--json"],
            &sets,
        ))
        .unwrap();
        assert_eq!(json["step"], row.step);
        assert_eq!(json["predictions"], row.predictions);
        assert_eq!(json["loss"].as_f64().map(|v| v as f32), row.loss);
        assert_eq!(json["accuracy"].as_f64().map(|v| v as f32), row.accuracy);
        assert_eq!(json["policy"], "p=f32,c=bf16,o=f32");
    }
    // The default is the newest checkpoint; the table goes to stdout, the JSON to a file.
    let table = after(&dir, "evaluate", &recipe, &[], &sets);
    assert!(table.contains("at step 120"), "{table}");
    let file: Value =
        serde_json::from_slice(&std::fs::read(dir.join("out/evaluation.json")).unwrap()).unwrap();
    assert_eq!(file["step"], 120);
    // Another policy: f32 and pure f16 answer within rounding of the training policy, and
    // pure f16 holds the weights in half the bytes.
    let at = |policy: &str| -> Value {
        serde_json::from_str(&after(
            &dir,
            "evaluate",
            &recipe,
            &["--policy", policy, "--json"],
            &sets,
        ))
        .unwrap()
    };
    let (f32_run, f16_run) = (at("f32"), at("f16"));
    assert_eq!(f32_run["policy"], "p=f32,c=f32,o=f32");
    assert_eq!(f16_run["policy"], "p=f16,c=f16,o=f16");
    assert_eq!(
        f16_run["weight_bytes"].as_u64().unwrap() * 2,
        f32_run["weight_bytes"].as_u64().unwrap()
    );
    let loss = |v: &Value| v["loss"].as_f64().unwrap();
    assert!((loss(&f16_run) - loss(&f32_run)).abs() < 0.02 * loss(&f32_run));
}

#[test]
fn evaluate_reports_the_metrics_of_each_task() {
    let dir = fresh_dir("after-tasks");
    // Regression on a bundled table: MSE and MAE in the target's units.
    let diabetes = write_recipe(
        &dir,
        "diabetes.toml",
        "batch_size = 32\nsteps = 60\noutput = \"out\"\n[model]\nkind = \"mlp\"\nhidden = [16]\n[dataset]\nname = \"diabetes\"\n[optimizer]\nkind = \"adam\"\nlr = 0.01\n",
    );
    run_ok(&dir, &["train", diabetes.to_str().unwrap(), "-q"]);
    let json: Value = serde_json::from_str(&run_ok(
        &dir,
        &["evaluate", diabetes.to_str().unwrap(), "--json"],
    ))
    .unwrap();
    let (mse, mae) = (json["mse"].as_f64().unwrap(), json["mae"].as_f64().unwrap());
    // The target (disease progression) spreads over about 25..346: errors in its units are
    // tens, while the standardized loss is about 0.5.
    assert!(mae > 10.0 && mae < 100.0, "{json}");
    assert!(mae * mae <= mse, "{json}"); // Jensen: mean |e| squared <= mean e squared
    assert!(json["accuracy"].is_null() && json["perplexity"].is_null());
    assert_eq!(
        json["loss"].as_f64().map(|v| v as f32),
        metrics(&dir.join("out")).eval.last().unwrap().loss
    );

    // The character model: perplexity is exp(loss).
    let lm = recipes().join("tiny_lm.toml");
    let sets = trained(&dir, &lm, "lm", &["steps=6", "schedule.warmup_steps=1"]);
    let json: Value =
        serde_json::from_str(&after(&dir, "evaluate", &lm, &["--json"], &sets)).unwrap();
    let (loss, perplexity) = (
        json["loss"].as_f64().unwrap(),
        json["perplexity"].as_f64().unwrap(),
    );
    assert!(
        (perplexity - loss.exp()).abs() < 1e-6 * perplexity,
        "{json}"
    );
    assert!(json["accuracy"].as_f64().is_some());
}

#[test]
fn predict_on_the_training_file_agrees_with_evaluate() {
    let dir = fresh_dir("after-predict");
    let recipe = pumps();
    let sets = trained(&dir, &recipe, "out", &["steps=120"]);
    let data = recipes().join("data/pumps.csv");
    let data = data.to_str().unwrap();
    let out = crate::common::mpric(&dir)
        .args(["predict", recipe.to_str().unwrap(), "--data", data])
        .args(&sets)
        .output()
        .unwrap();
    assert!(out.status.success());
    // The column the model does not read is named on stderr.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("ignored 1 column") && stderr.contains("`pump_id`"),
        "{stderr}"
    );
    let predicted = csv_rows(&String::from_utf8(out.stdout).unwrap());
    assert_eq!(predicted[0], ["line", "condition", "probability"]);
    let truth = csv_rows(&std::fs::read_to_string(data).unwrap());
    let condition = truth[0].iter().position(|c| c == "condition").unwrap();
    assert_eq!(predicted.len(), truth.len());
    let correct = predicted[1..]
        .iter()
        .zip(&truth[1..])
        .filter(|(p, t)| p[1] == t[condition])
        .count();
    for p in &predicted[1..] {
        let probability: f64 = p[2].parse().unwrap();
        assert!((0.0..=1.0).contains(&probability) && probability >= 1.0 / 3.0);
    }
    let json: Value = serde_json::from_str(&after(
        &dir,
        "evaluate",
        &recipe,
        &["--data", data, "--json"],
        &sets,
    ))
    .unwrap();
    assert_eq!(json["predictions"], 300);
    let accuracy = json["accuracy"].as_f64().unwrap() as f32;
    assert_eq!(accuracy, correct as f32 / 300.0);
    assert!(accuracy > 0.8, "{json}");

    // JSON output, to a file.
    let file = dir.join("p.json");
    after(
        &dir,
        "predict",
        &recipe,
        &[
            "--data",
            data,
            "--format",
            "json",
            "--out",
            file.to_str().unwrap(),
        ],
        &sets,
    );
    let rows: Vec<Value> = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(rows.len(), 300);
    assert_eq!(rows[0]["condition"].as_str().unwrap(), predicted[1][1]);
}

#[test]
fn predictions_of_images_and_text() {
    let dir = fresh_dir("after-images");
    let recipe = recipes().join("image_folder_shapes.toml");
    let sets = trained(&dir, &recipe, "out", &["steps=60"]);
    let shapes = recipes().join("data/shapes");
    let csv = after(
        &dir,
        "predict",
        &recipe,
        &["--data", shapes.to_str().unwrap()],
        &sets,
    );
    let rows = csv_rows(&csv);
    assert_eq!(rows[0], ["file", "class folder", "probability"]);
    assert_eq!(rows.len(), 61);
    let right = rows[1..]
        .iter()
        .filter(|r| r[0].contains(&format!("/{}/", r[1])))
        .count();
    let json: Value = serde_json::from_str(&after(
        &dir,
        "evaluate",
        &recipe,
        &["--data", shapes.to_str().unwrap(), "--json"],
        &sets,
    ))
    .unwrap();
    assert_eq!(
        json["accuracy"].as_f64().unwrap() as f32,
        right as f32 / 60.0
    );

    // One image of another size: refused, then read as training read it with --resize.
    let big = dir.join("big.png");
    image::RgbImage::from_pixel(32, 32, image::Rgb([200, 10, 10]))
        .save(&big)
        .unwrap();
    let gray = dir.join("gray.png");
    image::GrayImage::from_pixel(16, 16, image::Luma([90]))
        .save(&gray)
        .unwrap();
    let mut args = vec!["predict", recipe.to_str().unwrap(), "--data"];
    let owned: Vec<&str> = sets.iter().map(String::as_str).collect();
    for (file, needle) in [(&big, "a 32x32 color image"), (&gray, "a 16x16 gray image")] {
        let mut these = args.clone();
        these.push(file.to_str().unwrap());
        these.extend(&owned);
        refused(
            &dir,
            &these,
            &[needle, "the model reads 16x16 color images", "--resize"],
        );
    }
    args.extend([big.to_str().unwrap(), "--resize"]);
    args.extend(&owned);
    assert_eq!(csv_rows(&run_ok(&dir, &args)).len(), 2);

    // Text: greedy generation is deterministic, sampling follows its seed.
    let lm = recipes().join("tiny_lm.toml");
    let sets = &trained(&dir, &lm, "lm", &["steps=4", "schedule.warmup_steps=1"]);
    let generate = |extra: &[&str]| {
        let mut args = vec!["--prompt", "The ", "--tokens", "12"];
        args.extend(extra);
        after(&dir, "predict", &lm, &args, sets)
    };
    let greedy = generate(&[]);
    assert!(greedy.starts_with("The ") && greedy.trim_end_matches('\n').chars().count() == 16);
    assert_eq!(greedy, generate(&[]));
    let sampled = generate(&["--sample", "--seed", "5"]);
    assert_eq!(sampled, generate(&["--sample", "--seed", "5"]));
    for (prompt, tokens, needle) in [
        ("", "5", "--prompt: empty"),
        ("日本", "5", "'日' is not in the model's vocabulary"),
        (
            "The ",
            "10000000000",
            "--tokens 10000000000: at most 1000000",
        ),
    ] {
        let mut args = vec![
            "predict",
            lm.to_str().unwrap(),
            "--prompt",
            prompt,
            "--tokens",
            tokens,
        ];
        args.extend(sets.iter().map(String::as_str));
        refused(&dir, &args, &[needle]);
    }
}

#[test]
fn bad_inputs_get_one_line_and_exit_2() {
    let dir = fresh_dir("after-bad");
    let recipe = pumps();
    let r = recipe.to_str().unwrap();
    // Nothing trained yet.
    let output = format!("output={}", dir.join("out").display());
    refused(
        &dir,
        &["evaluate", r, "--set", &output],
        &["no checkpoint in", "mpric train"],
    );
    trained(&dir, &recipe, "out", &["steps=40"]);
    let with = |args: &[&str]| -> Vec<String> {
        let mut all: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        all.extend(["--set".to_string(), output.clone()]);
        all
    };
    let check = |args: &[&str], needles: &[&str]| {
        let all = with(args);
        refused(
            &dir,
            &all.iter().map(String::as_str).collect::<Vec<_>>(),
            needles,
        );
    };
    // A CSV missing a feature column names it; a value that is not a number names its line.
    std::fs::write(
        dir.join("missing.csv"),
        "temperature_c,vibration_mm_s,pressure_bar\n1,2,3\n",
    )
    .unwrap();
    check(
        &["predict", r, "--data", "missing.csv"],
        &["missing.csv", "no column `current_a`"],
    );
    std::fs::write(
        dir.join("text.csv"),
        "temperature_c,vibration_mm_s,current_a,pressure_bar\n1,2,3,4\n1,x,3,4\n",
    )
    .unwrap();
    check(
        &["predict", r, "--data", "text.csv"],
        &["line 3", "`vibration_mm_s` is `x`"],
    );
    check(
        &["evaluate", r, "--data", "text.csv"],
        &["no column `condition`, the target"],
    );
    // Lines of a file saved on Windows ("\r\n") are counted as an editor counts them.
    std::fs::write(
        dir.join("crlf.csv"),
        "temperature_c,vibration_mm_s,current_a,pressure_bar\r\n1,2,3,4\r\n1,2,3,4\r\n1,2,x,4\r\n",
    )
    .unwrap();
    check(
        &["predict", r, "--data", "crlf.csv"],
        &["line 4", "`current_a` is `x`"],
    );
    std::fs::write(
        dir.join("twice.csv"),
        "temperature_c,temperature_c,vibration_mm_s,current_a,pressure_bar\n1,1,2,3,4\n",
    )
    .unwrap();
    check(
        &["predict", r, "--data", "twice.csv"],
        &["`temperature_c` appears twice"],
    );
    std::fs::write(
        dir.join("label.csv"),
        "temperature_c,vibration_mm_s,current_a,pressure_bar,condition\n1,2,3,4,broken\n",
    )
    .unwrap();
    check(
        &["evaluate", r, "--data", "label.csv"],
        &["`broken` is not a class the model knows"],
    );
    check(
        &["predict", r, "--data", "no-such.csv"],
        &["no-such.csv: cannot read it"],
    );
    check(
        &["predict", r, "--prompt", "hi"],
        &["--prompt is for character models"],
    );
    // Checkpoints: one that does not exist, one of another recipe, one that fails verification.
    check(
        &["evaluate", r, "--checkpoint", "step-7"],
        &["no such checkpoint", "step-40"],
    );
    std::fs::create_dir_all(dir.join("data")).unwrap();
    std::fs::copy(recipes().join("data/pumps.csv"), dir.join("data/pumps.csv")).unwrap();
    let other = write_recipe(
        &dir,
        "other.toml",
        &std::fs::read_to_string(&recipe)
            .unwrap()
            .replace("hidden = [32, 32]", "hidden = [8]"),
    );
    check(
        &["evaluate", other.to_str().unwrap()],
        &["not a checkpoint of", "`model.hidden`"],
    );
    let step = dir.join("out/checkpoints/step-00000040");
    check(
        &[
            "export",
            other.to_str().unwrap(),
            "--to",
            "m.safetensors",
            "--checkpoint",
            step.to_str().unwrap(),
        ],
        &["not a checkpoint of"],
    );
    // Policies: unparsable, and one the backend cannot run.
    check(&["evaluate", r, "--policy", "f17"], &["--policy f17"]);
    let ndarray = ["--set", "backend.name=ndarray"];
    check(
        &[&["evaluate", r, "--policy", "f16"][..], &ndarray].concat(),
        &["--policy", "ndarray supports"],
    );
    // Destinations that cannot be written.
    check(
        &["export", r, "--to", "no/such/folder/m.safetensors"],
        &["--to", "does not exist"],
    );
    check(&["export", r, "--to", "."], &["is a folder"]);
    // A damaged checkpoint is refused as `train --resume` refuses it.
    std::fs::write(step.join("model.mpk"), b"damaged").unwrap();
    check(&["evaluate", r], &["model.mpk", "fails verification"]);
}

#[test]
fn an_independent_reader_computes_the_predictions_from_the_export() {
    let dir = fresh_dir("after-python");
    let Some(python) = python_with_safetensors() else {
        eprintln!(
            "skipped: no Python with the `safetensors` and `numpy` packages (set MPRIC_PYTHON, or run `cargo xtask check`, which installs them into target/python)"
        );
        return;
    };
    // Classification (CSV with labels) and regression (a target in its own units).
    let mut rows = String::from("a,b,c,target\n");
    for i in 0..200 {
        let (a, b, c) = (
            i as f64 * 0.37 % 5.0,
            (i * 7 % 13) as f64,
            (i as f64).sin() * 40.0,
        );
        rows.push_str(&format!(
            "{a},{b},{c},{}\n",
            300.0 + 20.0 * a - 3.0 * b + 0.5 * c
        ));
    }
    std::fs::write(dir.join("values.csv"), &rows).unwrap();
    let regression = write_recipe(
        &dir,
        "values.toml",
        "batch_size = 16\nsteps = 150\noutput = \"values\"\npolicy = \"mixed_bf16\"\n[model]\nkind = \"mlp\"\nhidden = [16, 16]\n[dataset]\nkind = \"csv\"\npath = \"values.csv\"\ntarget = \"target\"\ntask = \"regression\"\n[optimizer]\nkind = \"adam\"\nlr = 0.01\n",
    );
    run_ok(&dir, &["train", regression.to_str().unwrap(), "-q"]);
    let classes = pumps();
    let sets = trained(&dir, &classes, "out", &["steps=100"]);
    // Inputs no test trains on: rows made up here, in another column order.
    let mut new_pumps = String::from("pressure_bar,current_a,temperature_c,vibration_mm_s\n");
    for i in 0..40 {
        let i = f64::from(i);
        new_pumps.push_str(&format!(
            "{},{},{},{}\n",
            1.2 + i * 0.02,
            3.0 + i * 0.1,
            55.0 + i,
            0.5 + i * 0.08
        ));
    }
    std::fs::write(dir.join("new_pumps.csv"), new_pumps).unwrap();
    let cases = [
        (regression.clone(), Vec::new(), "values.csv", "target"),
        (classes.clone(), sets.clone(), "new_pumps.csv", "condition"),
    ];
    for (recipe, sets, data, target) in cases {
        for (dtype, layout, tolerance) in [
            ("f32", "pytorch", 1e-4),
            ("f16", "burn", 2e-2),
            ("bf16", "pytorch", 6e-2),
        ] {
            let file = dir.join(format!("{target}-{dtype}.safetensors"));
            after(
                &dir,
                "export",
                &recipe,
                &[
                    "--to",
                    file.to_str().unwrap(),
                    "--dtype",
                    dtype,
                    "--layout",
                    layout,
                ],
                &sets,
            );
            let ours = csv_rows(&after(
                &dir,
                "predict",
                &recipe,
                &["--data", data, "--policy", "f32"],
                &sets,
            ));
            let theirs = Command::new(&python)
                .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cli/read_export.py"))
                .args([file.to_str().unwrap(), dir.join(data).to_str().unwrap()])
                .output()
                .unwrap();
            assert!(
                theirs.status.success(),
                "{}",
                String::from_utf8_lossy(&theirs.stderr)
            );
            let theirs = csv_rows(&String::from_utf8(theirs.stdout).unwrap());
            assert_eq!(theirs.len(), ours.len());
            assert_eq!(theirs[0], ours[0]);
            for (a, b) in ours[1..].iter().zip(&theirs[1..]) {
                assert_eq!(a[0], b[0]);
                let value = |row: &[String]| row.last().unwrap().parse::<f64>().unwrap();
                let scale = if target == "target" {
                    value(a).abs().max(1.0)
                } else {
                    1.0
                };
                assert!(
                    (value(a) - value(b)).abs() <= tolerance * scale,
                    "{dtype}: {a:?} vs {b:?}"
                );
                if target == "condition" && dtype == "f32" {
                    assert_eq!(a[1], b[1]);
                }
            }
        }
    }
}

#[test]
fn an_independent_reader_computes_the_character_models_loss_from_the_export() {
    let dir = fresh_dir("after-python-lm");
    let Some(python) = python_with_safetensors() else {
        eprintln!("skipped: no Python with the `safetensors` and `numpy` packages (see above)");
        return;
    };
    let lm = recipes().join("tiny_lm.toml");
    let sets = trained(&dir, &lm, "lm", &["steps=30", "schedule.warmup_steps=1"]);
    // A passage the model reads as new text: the middle of the shipped text, rewritten.
    let shipped =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("data/tiny_text.txt"))
            .unwrap();
    let passage: String = shipped.chars().skip(5000).take(400).collect::<String>();
    let passage = passage.replace("the", "a");
    std::fs::write(dir.join("passage.txt"), &passage).unwrap();
    let ours: Value = serde_json::from_str(&after(
        &dir,
        "evaluate",
        &lm,
        &["--data", "passage.txt", "--policy", "f32", "--json"],
        &sets,
    ))
    .unwrap();
    let ours = ours["loss"].as_f64().unwrap();
    for (dtype, tolerance) in [("f32", 1e-4), ("f16", 1e-2)] {
        let file = dir.join(format!("lm-{dtype}.safetensors"));
        after(
            &dir,
            "export",
            &lm,
            &["--to", file.to_str().unwrap(), "--dtype", dtype],
            &sets,
        );
        let theirs = Command::new(&python)
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cli/read_export_lm.py"))
            .args([
                file.to_str().unwrap(),
                dir.join("passage.txt").to_str().unwrap(),
            ])
            .output()
            .unwrap();
        assert!(
            theirs.status.success(),
            "{}",
            String::from_utf8_lossy(&theirs.stderr)
        );
        let theirs: f64 = String::from_utf8(theirs.stdout)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(
            (ours - theirs).abs() <= tolerance * ours,
            "{dtype}: mpric {ours}, numpy {theirs}"
        );
    }
}

/// A Python that imports `safetensors` and `numpy`: `MPRIC_PYTHON`, the one `cargo xtask
/// check` installs into `target/python`, or `python3`.
fn python_with_safetensors() -> Option<PathBuf> {
    let installed = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/python/bin/python");
    let candidates = [
        std::env::var_os("MPRIC_PYTHON").map(PathBuf::from),
        Some(installed),
        Some(PathBuf::from("python3")),
    ];
    candidates.into_iter().flatten().find(|python| {
        Command::new(python)
            .args(["-c", "import safetensors.numpy, numpy"])
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

/// The rows of a CSV text, fields split by the `csv` crate.
fn csv_rows(text: &str) -> Vec<Vec<String>> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .from_reader(text.as_bytes());
    reader
        .records()
        .map(|r| r.unwrap().iter().map(str::to_string).collect())
        .collect()
}

#[test]
fn predict_probabilities_give_every_class_in_the_sidecars_order() {
    let dir = fresh_dir("after-probabilities");
    let recipe = pumps();
    let r = recipe.to_str().unwrap();
    let sets = trained(&dir, &recipe, "out", &["steps=40"]);
    let data = recipes().join("data/pumps.csv");
    let data = data.to_str().unwrap();

    // The class order the run saved: the export's sidecar lists the labels.
    let to = dir.join("model.safetensors");
    after(
        &dir,
        "export",
        &recipe,
        &["--to", to.to_str().unwrap()],
        &sets,
    );
    let sidecar: Value =
        serde_json::from_slice(&std::fs::read(dir.join("model.json")).unwrap()).unwrap();
    let classes: Vec<String> = sidecar["schema"]["outputs"]["classes"]["names"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    assert_eq!(classes, ["faulty", "ok", "worn"]);

    let plain = csv_rows(&after(&dir, "predict", &recipe, &["--data", data], &sets));
    let table = csv_rows(&after(
        &dir,
        "predict",
        &recipe,
        &["--data", data, "--probabilities"],
        &sets,
    ));
    // A column per class, named by its label, in the sidecar's order.
    let mut header = vec!["line".to_string()];
    header.extend(classes.iter().cloned());
    assert_eq!(table[0], header);
    assert_eq!(table.len(), plain.len());
    assert_eq!(table.len(), 301);
    for (row, plain) in table[1..].iter().zip(&plain[1..]) {
        assert_eq!(row[0], plain[0], "the same input on the same row");
        let p: Vec<f64> = row[1..].iter().map(|v| v.parse().unwrap()).collect();
        assert_eq!(p.len(), classes.len());
        assert!(p.iter().all(|v| (0.0..=1.0).contains(v)), "{row:?}");
        let sum: f64 = p.iter().sum();
        assert!((sum - 1.0).abs() < 1e-5, "{row:?} sums to {sum}");
        // The most probable column is the class plain predict gives, at its probability.
        let best = (0..p.len()).fold(0, |b, i| if p[i] > p[b] { i } else { b });
        assert_eq!(classes[best], plain[1], "{row:?} vs {plain:?}");
        assert_eq!(row[1 + best], plain[2]);
    }

    // JSON: the same numbers, the classes in the same order, to a file.
    let file = dir.join("p.json");
    let f = file.to_str().unwrap();
    let args = [
        "--data",
        data,
        "--probabilities",
        "--format",
        "json",
        "--out",
        f,
    ];
    assert_eq!(after(&dir, "predict", &recipe, &args, &sets), "");
    let text = std::fs::read_to_string(&file).unwrap();
    let rows: Vec<Value> = serde_json::from_str(&text).unwrap();
    assert_eq!(rows.len(), 300);
    assert_eq!(rows[0]["line"], table[1][0].as_str());
    for (i, class) in classes.iter().enumerate() {
        let value = rows[0]["probabilities"][class].as_f64().unwrap();
        assert_eq!(value as f32, table[1][1 + i].parse::<f32>().unwrap());
    }
    let positions: Vec<usize> = classes
        .iter()
        .map(|c| text.find(&format!("\"{c}\":")).unwrap())
        .collect();
    assert!(positions.is_sorted(), "classes out of order in {text}");

    // A regression model has no classes, and the character model generates text: refused
    // in one line, and nothing written.
    let diabetes = write_recipe(
        &dir,
        "diabetes.toml",
        "batch_size = 32\nsteps = 5\noutput = \"reg\"\n[model]\nkind = \"mlp\"\nhidden = [8]\n[dataset]\nname = \"diabetes\"\n[optimizer]\nkind = \"adam\"\nlr = 0.01\n",
    );
    run_ok(&dir, &["train", diabetes.to_str().unwrap(), "-q"]);
    let values = dir.join("values.csv");
    // Refused before the file is read.
    std::fs::write(&values, "a,b\n1,2\n").unwrap();
    let unwritten = dir.join("never.csv");
    let d = diabetes.to_str().unwrap();
    refused(
        &dir,
        &[
            "predict",
            d,
            "--data",
            values.to_str().unwrap(),
            "--probabilities",
            "--out",
            unwritten.to_str().unwrap(),
        ],
        &["--probabilities", "`progression`", "not classes"],
    );
    assert!(!unwritten.exists());
    refused(
        &dir,
        &["predict", r, "--prompt", "The ", "--probabilities"],
        &["--probabilities", "--prompt"],
    );
}
