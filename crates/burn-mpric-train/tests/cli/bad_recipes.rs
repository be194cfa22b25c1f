//! Bad recipes: each class of mistake gives exit code 2 and a one-line message on stderr
//! that names the field and what is accepted.

use crate::common::{fresh_dir, run, small_recipe, write_recipe};

/// A valid recipe, edited by a case.
fn base() -> String {
    small_recipe("steps = 5")
}

struct Case {
    name: &'static str,
    /// The recipe text (from `base()`), or `None` for a missing file.
    recipe: Option<String>,
    /// Extra arguments after the recipe.
    args: &'static [&'static str],
    /// What the message must contain: the field, then what is accepted.
    expect: &'static [&'static str],
}

fn edit(from: &str, to: &str) -> Option<String> {
    let text = base();
    assert!(text.contains(from), "the base recipe lacks {from:?}");
    Some(text.replacen(from, to, 1))
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "learning rate out of range",
            recipe: edit("lr = 0.003", "lr = 1e308"),
            args: &[],
            expect: &["optimizer.lr", "must be in (0, 10]", "1e308"],
        },
        Case {
            name: "nan learning rate",
            recipe: edit("lr = 0.003", "lr = nan"),
            args: &[],
            expect: &["optimizer.lr", "must be a finite number, got nan"],
        },
        Case {
            name: "nan through --set",
            recipe: Some(base()),
            args: &["--set", "optimizer.lr=nan"],
            expect: &["--set optimizer.lr=nan", "must be a finite number"],
        },
        Case {
            name: "nan clip norm",
            recipe: edit("seed = 3", "seed = 3\nclip_grad_norm = nan"),
            args: &[],
            expect: &["clip_grad_norm", "must be a finite number"],
        },
        Case {
            name: "infinite clip norm",
            recipe: edit("seed = 3", "seed = 3\nclip_grad_norm = inf"),
            args: &[],
            expect: &["clip_grad_norm", "must be a finite number, got inf"],
        },
        Case {
            name: "nan held-out share",
            recipe: edit(
                "name = \"winequality\"",
                "name = \"winequality\"\neval_fraction = nan",
            ),
            args: &[],
            expect: &["dataset.eval_fraction", "must be a finite number"],
        },
        Case {
            name: "epsilon that vanishes at f32",
            recipe: edit("lr = 0.003", "lr = 0.003\nepsilon = 1e-60"),
            args: &[],
            expect: &["optimizer.epsilon", "nonzero at f32"],
        },
        Case {
            name: "weight decay out of range",
            recipe: edit("lr = 0.003", "lr = 0.003\nweight_decay = 1e30"),
            args: &[],
            expect: &["optimizer.weight_decay", "must be in [0, 1]"],
        },
        Case {
            name: "f64 parameters",
            recipe: edit("seed = 3", "seed = 3\npolicy = \"p=f64,c=f64,o=f64\""),
            args: &[],
            expect: &[
                "policy",
                "keeps parameters at f64",
                "use f32 or half parameters",
            ],
        },
        Case {
            name: "zero skipped-step limit",
            recipe: edit("seed = 3", "seed = 3\nmax_consecutive_skips = 0"),
            args: &[],
            expect: &["max_consecutive_skips", "must be > 0"],
        },
        Case {
            name: "missing wgpu device",
            recipe: edit(
                "seed = 3",
                "seed = 3\nbackend = { name = \"wgpu\", device = 99 }",
            ),
            args: &[],
            expect: &[
                "backend.device",
                "wgpu has no device 99",
                "0 is the default adapter",
            ],
        },
        Case {
            name: "unknown field",
            recipe: edit("lr = 0.003", "lr = 0.003\nlearning_rate = 0.1"),
            args: &[],
            expect: &[
                "optimizer.learning_rate",
                "unknown field",
                "`lr`",
                "`weight_decay`",
            ],
        },
        Case {
            name: "unknown top-level field",
            recipe: edit("seed = 3", "seed = 3\nepochz = 3"),
            args: &[],
            expect: &["epochz", "unknown field", "`epochs`"],
        },
        Case {
            name: "wrong type",
            recipe: edit("batch_size = 32", "batch_size = \"big\""),
            args: &[],
            expect: &["batch_size", "the text \"big\"", "a whole number above 0"],
        },
        Case {
            name: "wrong type through --set",
            recipe: Some(base()),
            args: &["--set", "steps=many"],
            expect: &["steps", "the text \"many\"", "a whole number above 0"],
        },
        Case {
            name: "wrong type in a list",
            recipe: edit("hidden = [16]", "hidden = [16, -2]"),
            args: &[],
            expect: &["model.hidden[1]", "-2", "a whole number from 1 to 65536"],
        },
        Case {
            name: "unknown model",
            recipe: edit("kind = \"mlp\"", "kind = \"resnet\""),
            args: &[],
            expect: &[
                "model.kind",
                "resnet",
                "`mlp`",
                "`conv`",
                "`transformer_lm`",
            ],
        },
        Case {
            name: "unknown dataset",
            recipe: edit("name = \"winequality\"", "name = \"mnist\""),
            args: &[],
            expect: &[
                "dataset.name",
                "mnist",
                "`iris`",
                "`winequality`",
                "`tiny_text`",
            ],
        },
        Case {
            name: "unknown backend",
            recipe: Some(base()),
            args: &["--set", "backend.name=tpu"],
            expect: &["backend.name", "tpu", "`flex`", "`ndarray`", "`wgpu`"],
        },
        Case {
            name: "bad policy string",
            recipe: edit("seed = 3", "seed = 3\npolicy = \"p=f32,c=bf61\""),
            args: &[],
            expect: &["policy", "bf61", "accepted dtypes"],
        },
        Case {
            name: "bad policy key",
            recipe: Some(base()),
            args: &["--set", "policy=p=f32,kompute=f16"],
            expect: &["policy", "kompute", "p|param|params"],
        },
        Case {
            name: "negative learning rate",
            recipe: edit("lr = 0.003", "lr = -0.1"),
            args: &[],
            expect: &["optimizer.lr: must be in (0, 10], got -0.1"],
        },
        Case {
            name: "setting of another kind",
            recipe: edit("lr = 0.003", "lr = 0.003\nmomentum = 0.9"),
            args: &[],
            expect: &["optimizer.momentum", "beta1"],
        },
        Case {
            name: "missing field",
            recipe: edit("batch_size = 32", ""),
            args: &[],
            expect: &["batch_size", "missing"],
        },
        Case {
            name: "missing file",
            recipe: None,
            args: &[],
            expect: &["no-such-recipe.toml", "cannot read the recipe"],
        },
        Case {
            name: "policy the backend can't run",
            recipe: Some(base()),
            args: &["--set", "policy=mixed_f16", "--set", "backend.name=ndarray"],
            expect: &[
                "policy",
                "p=f32,c=f16,o=f32",
                "ndarray",
                "supports f64, f32",
            ],
        },
        Case {
            name: "bad loss-scale preset",
            recipe: edit("seed = 3", "seed = 3\nloss_scale = \"torchh\""),
            args: &[],
            expect: &["loss_scale", "torchh", "torch", "static:<scale>"],
        },
        Case {
            name: "bad loss-scale field",
            recipe: edit(
                "seed = 3",
                "seed = 3\nloss_scale = { backoff_factor = 2.0 }",
            ),
            args: &[],
            expect: &["loss_scale.backoff_factor", "0 < backoff < 1"],
        },
        Case {
            name: "TOML syntax",
            recipe: edit("seed = 3", "seed = = 3"),
            args: &[],
            expect: &["TOML syntax error at line 1"],
        },
        Case {
            name: "batch larger than the data",
            recipe: edit("batch_size = 32", "batch_size = 5000"),
            args: &[],
            expect: &["batch_size", "at most", "1279"],
        },
        Case {
            name: "model and data that do not fit",
            recipe: edit("name = \"winequality\"", "name = \"tiny_text\""),
            args: &[],
            expect: &["dataset.name", "iris, winequality, diabetes"],
        },
        Case {
            name: "unknown optimizer state dtype",
            recipe: edit("lr = 0.003", "lr = 0.003\nstate = \"int8\""),
            args: &[],
            expect: &["optimizer.state", "\"int8\"", "expected f32 or bf16"],
        },
        Case {
            name: "optimizer state at f16",
            recipe: edit("lr = 0.003", "lr = 0.003\nstate = \"f16\""),
            args: &[],
            expect: &["optimizer.state", "refused", "underflow", "bf16"],
        },
        Case {
            name: "unknown master weights",
            recipe: Some(base()),
            args: &["--set", "optimizer.master=bf16"],
            expect: &["optimizer.master", "expected f32, stochastic or kahan"],
        },
        Case {
            name: "a state dtype for an optimizer without state",
            recipe: edit(
                "kind = \"adam\"\nlr = 0.003",
                "kind = \"sgd\"\nlr = 0.003\nstate = \"bf16\"",
            ),
            args: &[],
            expect: &["optimizer.state", "sgd without momentum keeps no state"],
        },
        Case {
            name: "malformed --set",
            recipe: Some(base()),
            args: &["--set", "steps"],
            expect: &["--set steps", "key=value"],
        },
    ]
}

#[test]
fn every_bad_recipe_class_exits_2_with_one_line_naming_the_field() {
    let dir = fresh_dir("bad-recipes");
    for (i, case) in cases().into_iter().enumerate() {
        let path = match &case.recipe {
            Some(text) => write_recipe(&dir, &format!("case{i}.toml"), text),
            None => dir.join("no-such-recipe.toml"),
        };
        for command in ["check", "train"] {
            let mut args = vec![command, path.to_str().unwrap()];
            args.extend_from_slice(case.args);
            let out = run(&dir, &args);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(
                out.status.code(),
                Some(2),
                "{}: `mpric {command}` should exit 2; stderr: {stderr}",
                case.name
            );
            let message = stderr.trim_end();
            assert_eq!(
                message.lines().count(),
                1,
                "{}: expected one line, got:\n{stderr}",
                case.name
            );
            for needle in case.expect {
                assert!(
                    message.contains(needle),
                    "{}: {message:?} lacks {needle:?}",
                    case.name
                );
            }
            assert!(out.stdout.is_empty(), "{}: wrote to stdout", case.name);
        }
    }
    // Nothing was trained.
    assert!(!dir.join("out").join("metrics.json").exists());
}

#[test]
fn a_json_recipe_is_accepted_and_checked_the_same_way() {
    let dir = fresh_dir("json-recipe");
    let good = r#"{"batch_size": 8, "steps": 3, "output": "out",
        "model": {"kind": "conv", "channels": [4]},
        "dataset": {"name": "iris"},
        "optimizer": {"kind": "sgd", "lr": 0.1, "momentum": 0.9}}"#;
    let path = write_recipe(&dir, "r.json", good);
    let out = crate::common::run_ok(&dir, &["check", path.to_str().unwrap()]);
    assert!(out.contains("conv, channels [4]"), "{out}");

    let bad = good.replace("\"lr\": 0.1", "\"lr\": \"fast\"");
    let path = write_recipe(&dir, "bad.json", &bad);
    let out = run(&dir, &["check", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "bad.json: optimizer.lr: expected a number above 0, at most 10, got the text \"fast\""
        ),
        "{stderr}"
    );
}

/// Words of the Rust types a recipe is read into, which a recipe's author never wrote.
const RUST_WORDS: &[&str] = &[
    "ModelConfig",
    "DatasetConfig",
    "OptimizerConfig",
    "BackendConfig",
    "ScheduleConfig",
    "MlpConfig",
    "AdamSettings",
    "SgdSettings",
    "LossScaleSpec",
    "LossScaleTable",
    "LossScalePreset",
    "Recipe",
    "Policy",
    "enum",
    "struct",
    "Option",
    "Some",
    "None",
    "u8",
    "u16",
    "u32",
    "u64",
    "usize",
    "i32",
    "i64",
    "i128",
    "f32",
    "f64",
    "String",
    "Vec",
    "PathBuf",
    "BTreeMap",
    "map",
    "sequence",
    "variant",
    "tagged",
    "serde",
    "bool",
    "char",
];

/// Every mistake serde or the TOML parser catches in a hand-written recipe is told in the
/// recipe's words: the field's dotted path, what went wrong, what the field accepts and an
/// example line, on one line, exit code 2, nothing written; never the name of a Rust type.
#[test]
fn serde_and_toml_failures_are_told_in_the_recipes_words() {
    let dir = fresh_dir("recipe-words");
    let model_table = "[model]\nkind = \"mlp\"\nhidden = [16]\n";
    let edits = |pairs: &[(&str, &str)]| {
        let mut text = base();
        for (from, to) in pairs {
            assert!(text.contains(from), "the base recipe lacks {from:?}");
            text = text.replacen(from, to, 1);
        }
        text
    };
    let one = |from: &str, to: &str| edits(&[(from, to)]);
    let seed = |extra: &str| one("seed = 3", &format!("seed = 3\n{extra}"));
    let csv = |extra: &str| {
        one(
            "name = \"winequality\"",
            &format!("kind = \"csv\"\npath = \"x.csv\"\ntarget = \"t\"\n{extra}"),
        )
    };
    // (name, recipe, what the one line must hold: the field first).
    let cases: Vec<(&str, String, &[&str])> = vec![
        (
            "a value where a table goes",
            edits(&[(model_table, ""), ("seed = 3", "seed = 3\nmodel = \"x\"")]),
            &[
                "model: ",
                "expected a [model] table",
                "got the text \"x\"",
                "e.g. kind = \"mlp\" under [model]",
            ],
        ),
        (
            "a table where a value goes",
            edits(&[
                ("steps = 5\n", ""),
                ("lr = 0.003", "lr = 0.003\n[steps]\nvalue = 5"),
            ]),
            &[
                "steps: ",
                "expected a whole number above 0, got a table",
                "e.g. steps = 300",
            ],
        ),
        (
            "an array of tables where a table goes",
            one("[model]", "[[model]]"),
            &[
                "model: ",
                "got an array of tables",
                "e.g. kind = \"mlp\" under [model]",
            ],
        ),
        (
            "text for a number",
            one("batch_size = 32", "batch_size = \"big\""),
            &[
                "batch_size: ",
                "a whole number above 0",
                "got the text \"big\"",
                "e.g. batch_size = 32",
            ],
        ),
        (
            "a fraction for a whole number",
            one("steps = 5", "steps = 2.5"),
            &[
                "steps: ",
                "got `2.5` (not a whole number)",
                "e.g. steps = 300",
            ],
        ),
        (
            "a negative whole number",
            one("seed = 3", "seed = -3"),
            &[
                "seed: ",
                "0 or more",
                "got `-3` (out of range)",
                "e.g. seed = 0",
            ],
        ),
        (
            "a whole number too large for its field",
            seed("loss_scale = { growth_interval = 5000000000 }"),
            &[
                "loss_scale.growth_interval: ",
                "from 1 to 4294967295",
                "`5000000000`",
                "e.g. growth_interval = 2000 under [loss_scale]",
            ],
        ),
        (
            "a whole number too large for TOML",
            one("seed = 3", "seed = 99999999999999999999"),
            &[
                "seed: ",
                "TOML syntax error at line 1",
                "out of range",
                "9223372036854775807",
                "e.g. seed = 0",
            ],
        ),
        (
            "a list element of the wrong type",
            one("hidden = [16]", "hidden = [16, \"wide\"]"),
            &[
                "model.hidden[1]: ",
                "a layer width",
                "got the text \"wide\"",
                "e.g. hidden = [64, 64] under [model]",
            ],
        ),
        (
            "a number for a list",
            one("hidden = [16]", "hidden = 16"),
            &["model.hidden: ", "an array of layer widths", "got `16`"],
        ),
        (
            "text for true or false",
            csv("header = \"yes\""),
            &[
                "dataset.header: ",
                "`true` or `false`",
                "got the text \"yes\"",
                "e.g. header = true under [dataset]",
            ],
        ),
        (
            "a misspelt top-level field",
            seed("epochz = 3"),
            &[
                "epochz: ",
                "unknown field",
                "`epochs`",
                "did you mean `epochs`?",
                "e.g. epochs = 10",
            ],
        ),
        (
            "a field of another kind",
            one("lr = 0.003", "lr = 0.003\nmomentum = 0.9"),
            &[
                "optimizer.momentum: ",
                "unknown field",
                "[optimizer] of kind `adam` accepts",
                "`beta1`",
                "`momentum` belongs to kind `sgd`",
                "e.g. kind = \"sgd\" under [optimizer]",
            ],
        ),
        (
            "a table that does not exist",
            one("lr = 0.003", "lr = 0.003\n[trainer]\nsteps = 5"),
            &[
                "trainer: ",
                "unknown field",
                "the top level of the recipe accepts",
            ],
        ),
        (
            "a missing field",
            one("output = \"out\"\n", ""),
            &[
                "output: ",
                "missing",
                "a folder path",
                "e.g. output = \"runs/quickstart\"",
            ],
        ),
        (
            "a missing kind",
            one("kind = \"mlp\"\n", ""),
            &[
                "model.kind: ",
                "missing: [model] needs `kind`: `mlp`, `conv` or `transformer_lm`",
                "e.g. kind = \"mlp\" under [model]",
            ],
        ),
        (
            "an empty recipe",
            String::new(),
            &["batch_size: ", "missing", "e.g. batch_size = 32"],
        ),
        (
            "an unknown model kind",
            one("kind = \"mlp\"", "kind = \"resnet\""),
            &[
                "model.kind: ",
                "unknown value \"resnet\"",
                "`transformer_lm`",
                "e.g. kind = \"mlp\" under [model]",
            ],
        ),
        (
            "an unknown data kind",
            one(
                "name = \"winequality\"",
                "kind = \"parquet\"\npath = \"x.parquet\"",
            ),
            &[
                "dataset.kind: ",
                "\"parquet\"",
                "`csv`, `text` or `image_folder`",
                "e.g. kind = \"csv\" under [dataset]",
            ],
        ),
        (
            "a misspelt optimizer",
            one("kind = \"adam\"", "kind = \"adamm\""),
            &[
                "optimizer.kind: ",
                "`adam`, `adamw` or `sgd`",
                "did you mean `adam`?",
            ],
        ),
        (
            "an unknown backend",
            seed("backend = { name = \"tpu\" }"),
            &[
                "backend.name: ",
                "`flex`, `ndarray`, `wgpu`, `vulkan`, `metal` or `cuda`",
                "e.g. name = \"wgpu\" under [backend]",
            ],
        ),
        (
            "an unknown schedule",
            one("lr = 0.003", "lr = 0.003\n[schedule]\nkind = \"linear\""),
            &["schedule.kind: ", "`constant` or `cosine`"],
        ),
        (
            "an unknown strategy",
            seed("strategy = \"fsdp\""),
            &["strategy: ", "`multi_device` or `ddp`"],
        ),
        (
            "a table for the policy",
            seed("policy = { p = \"bf16\" }"),
            &["policy: ", "got a table", "e.g. policy = \"mixed_bf16\""],
        ),
        (
            "a number for the loss scale",
            seed("loss_scale = 3"),
            &[
                "loss_scale: ",
                "a preset name",
                "or a table of loss-scale fields",
                "got `3`",
            ],
        ),
        (
            "an unknown loss-scale rule",
            seed("loss_scale = { rule = \"pytorch\" }"),
            &[
                "loss_scale.rule: ",
                "pytorch",
                "deepspeed",
                "e.g. rule = \"deepspeed\" under [loss_scale]",
            ],
        ),
        (
            "a number for an op's category",
            one("lr = 0.003", "lr = 0.003\n[ops]\nlinear = 1"),
            &["ops.linear: ", "`compute`, `full` or `promote`", "got `1`"],
        ),
        (
            "a duplicate key",
            seed("seed = 4"),
            &[
                "seed: ",
                "TOML syntax error at line 2",
                "duplicate",
                "e.g. seed = 0",
            ],
        ),
        (
            "a duplicate table",
            one("lr = 0.003", "lr = 0.003\n[model]\nkind = \"conv\""),
            &[
                "model: ",
                "TOML syntax error at line",
                "e.g. kind = \"mlp\" under [model]",
            ],
        ),
        (
            "bad syntax in a table",
            one("lr = 0.003", "lr = 0.003.1"),
            &[
                "optimizer.lr: ",
                "TOML syntax error at line",
                "e.g. lr = 0.001 under [optimizer]",
            ],
        ),
    ];
    assert!(cases.len() >= 12);
    // Every case is tried, and every failure listed at the end.
    let mut failures = Vec::new();
    let mut check = |ok: bool, what: String| {
        if !ok {
            failures.push(what);
        }
    };
    for (i, (name, text, expect)) in cases.iter().enumerate() {
        let path = write_recipe(&dir, &format!("words{i}.toml"), text);
        for command in ["check", "train"] {
            let out = run(&dir, &[command, path.to_str().unwrap()]);
            let stderr = String::from_utf8_lossy(&out.stderr);
            let message = stderr.trim_end();
            check(
                out.status.code() == Some(2),
                format!("{name}: exit {:?}: {stderr}", out.status.code()),
            );
            check(
                message.lines().count() == 1,
                format!("{name}: one line expected:\n{stderr}"),
            );
            check(out.stdout.is_empty(), format!("{name}: wrote to stdout"));
            let after_file = message
                .strip_prefix(&format!("error: {}: ", path.display()))
                .unwrap_or_default();
            check(
                after_file.starts_with(expect[0]),
                format!(
                    "{name}: {message:?} does not name the field {:?} first",
                    expect[0]
                ),
            );
            for needle in *expect {
                check(
                    message.contains(needle),
                    format!("{name}: {message:?} lacks {needle:?}"),
                );
            }
            let words: Vec<&str> = message
                .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .collect();
            for word in RUST_WORDS {
                // `f32` is a policy's name and a dtype, words of the recipe there.
                if expect[0] == "policy: " && word.starts_with('f') {
                    continue;
                }
                check(
                    !words.contains(word),
                    format!("{name}: {message:?} names {word:?}"),
                );
            }
            for phrase in [
                "invalid type",
                "invalid value",
                "internally tagged",
                "expected one of",
            ] {
                check(
                    !message.contains(phrase),
                    format!("{name}: {message:?} says {phrase:?}"),
                );
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    // Nothing was written: no output folder, no checkpoint.
    assert!(!dir.join("out").exists());
}
