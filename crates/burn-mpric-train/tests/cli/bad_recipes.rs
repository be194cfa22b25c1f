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
            expect: &[
                "batch_size",
                "invalid type: string \"big\"",
                "expected usize",
            ],
        },
        Case {
            name: "wrong type through --set",
            recipe: Some(base()),
            args: &["--set", "steps=many"],
            expect: &["steps", "invalid type: string \"many\"", "expected u64"],
        },
        Case {
            name: "wrong type in a list",
            recipe: edit("hidden = [16]", "hidden = [16, -2]"),
            args: &[],
            expect: &["model.hidden[1]", "-2", "usize"],
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
        stderr.contains("bad.json: optimizer.lr: invalid type"),
        "{stderr}"
    );
}
