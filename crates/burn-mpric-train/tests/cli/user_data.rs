//! Recipes on the user's own files: the three example recipes train on the files in
//! `recipes/data/`, broken files of each kind exit 2 with one line naming the file (and the
//! line or entry), and a resumed run refuses data that changed.

use std::path::{Path, PathBuf};

use crate::common::{fresh_dir, metrics, recipes, run, run_ok, write_recipe};

/// Runs `check` and `train` on `recipe` and asserts both exit 2 with one stderr line holding
/// every needle, and that nothing was trained.
fn refused(dir: &Path, recipe: &Path, needles: &[&str]) {
    for command in ["check", "train"] {
        let out = run(dir, &[command, recipe.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let message = stderr.trim_end();
        assert_eq!(out.status.code(), Some(2), "`mpric {command}`: {stderr}");
        assert_eq!(message.lines().count(), 1, "one line expected:\n{stderr}");
        for needle in needles {
            assert!(message.contains(needle), "{message:?} lacks {needle:?}");
        }
    }
    assert!(!dir.join("out").join("metrics.json").exists());
}

/// A recipe in `dir` training an MLP on the CSV `file` (relative to `dir`).
fn csv_recipe(dir: &Path, name: &str, file: &str, extra: &str) -> PathBuf {
    write_recipe(
        dir,
        name,
        &format!(
            r#"batch_size = 4
steps = 6
output = "out"
policy = "mixed_bf16"
[model]
kind = "mlp"
hidden = [8]
[dataset]
kind = "csv"
path = "{file}"
target = "label"
task = "classification"
{extra}
[optimizer]
kind = "adam"
lr = 0.01
"#
        ),
    )
}

fn image_recipe(dir: &Path, folder: &str) -> PathBuf {
    write_recipe(
        dir,
        "images.toml",
        &format!(
            r#"batch_size = 2
steps = 4
output = "out"
[model]
kind = "conv"
channels = [4]
[dataset]
kind = "image_folder"
path = "{folder}"
image_size = 8
[optimizer]
kind = "sgd"
lr = 0.01
"#
        ),
    )
}

fn text_recipe(dir: &Path, file: &str) -> PathBuf {
    write_recipe(
        dir,
        "text.toml",
        &format!(
            r#"batch_size = 2
steps = 3
output = "out"
[model]
kind = "transformer_lm"
d_model = 16
heads = 2
layers = 1
context = 8
[dataset]
kind = "text"
path = "{file}"
[optimizer]
kind = "adam"
lr = 0.01
"#
        ),
    )
}

/// 12 well-formed rows of two features and a label.
fn good_rows() -> String {
    let mut text = String::from("a,b,label\n");
    for i in 0..12 {
        text.push_str(&format!("{i},{},{}\n", i * 2, ["x", "y"][i % 2]));
    }
    text
}

#[test]
fn the_example_recipes_train_on_the_files_in_the_repository() {
    let dir = fresh_dir("user-data-examples");
    for (recipe, steps, min_accuracy) in [
        // Chance is 1/3 for each of the two classification recipes.
        ("csv_pumps.toml", "150", 0.7),
        ("image_folder_shapes.toml", "60", 0.6),
        ("text_file.toml", "40", 0.0),
    ] {
        let output = dir.join(recipe.trim_end_matches(".toml"));
        let path = recipes().join(recipe);
        let steps = format!("steps={steps}");
        let out_set = format!("output={}", output.display());
        // Run from another folder: the data paths are relative to the recipe file.
        run_ok(
            &dir,
            &[
                "train",
                path.to_str().unwrap(),
                "-q",
                "--set",
                &steps,
                "--set",
                &out_set,
                "--set",
                "checkpoint_every=1000",
            ],
        );
        let m = metrics(&output);
        let eval = m.eval.last().unwrap();
        let first = m.steps.first().unwrap().loss;
        let last = m.steps.last().unwrap().loss;
        assert!(last < first, "{recipe}: loss {first:?} -> {last:?}");
        if min_accuracy > 0.0 {
            let accuracy = eval.accuracy.unwrap();
            assert!(
                accuracy >= min_accuracy,
                "{recipe}: held-out accuracy {accuracy}"
            );
        }
    }
}

#[test]
fn broken_csv_files_name_the_file_and_the_line() {
    let dir = fresh_dir("user-data-csv");
    let write = |name: &str, text: &str| std::fs::write(dir.join(name), text).unwrap();
    let at = |name: &str| dir.join(name).display().to_string();

    let recipe = csv_recipe(&dir, "missing.toml", "nope.csv", "");
    refused(
        &dir,
        &recipe,
        &[
            "missing.toml: dataset.path: ",
            &at("nope.csv"),
            "cannot read it",
        ],
    );

    write("ragged.csv", &good_rows().replace("5,10,y\n", "5,10\n"));
    let recipe = csv_recipe(&dir, "ragged.toml", "ragged.csv", "");
    refused(
        &dir,
        &recipe,
        &[&at("ragged.csv"), "line 7: 2 fields where the header has 3"],
    );

    write("text.csv", &good_rows().replace("3,6,y", "3,six,y"));
    let recipe = csv_recipe(&dir, "text.toml", "text.csv", "");
    refused(
        &dir,
        &recipe,
        &[
            &at("text.csv"),
            "line 5: column `b` `six` is not a finite number",
        ],
    );

    write("good.csv", &good_rows());
    let text = std::fs::read_to_string(csv_recipe(&dir, "target.toml", "good.csv", "")).unwrap();
    let recipe = write_recipe(&dir, "target.toml", &text.replace("\"label\"", "\"class\""));
    refused(
        &dir,
        &recipe,
        &[
            "dataset.target",
            "no column `class`; the columns are `a`, `b`, `label`",
        ],
    );

    write("one.csv", "a,b,label\n1,2,x\n");
    let recipe = csv_recipe(&dir, "one.toml", "one.csv", "");
    refused(&dir, &recipe, &["one value (`x`)"]);
    write("single.csv", "a,b,label\n1,2,x\n");
    let text = std::fs::read_to_string(csv_recipe(&dir, "single.toml", "single.csv", "")).unwrap();
    let text = text.replace(
        "target = \"label\"\ntask = \"classification\"",
        "target = \"a\"\ntask = \"regression\"\nignore = [\"label\"]",
    );
    let recipe = write_recipe(&dir, "single.toml", &text);
    refused(&dir, &recipe, &["has 1 example; a run needs at least 2"]);

    write("header.csv", "a,b,label\n");
    let recipe = csv_recipe(&dir, "header.toml", "header.csv", "");
    refused(
        &dir,
        &recipe,
        &[&at("header.csv"), "has a header but no data rows"],
    );

    let mut bytes = good_rows().into_bytes();
    bytes.extend(b"1,2,\xff\n");
    std::fs::write(dir.join("latin1.csv"), bytes).unwrap();
    let recipe = csv_recipe(&dir, "latin1.toml", "latin1.csv", "");
    refused(
        &dir,
        &recipe,
        &[&at("latin1.csv"), "line 14: not valid UTF-8"],
    );

    // Far larger than a recipe may hold: refused from its size, before any byte is read
    // (a sparse file: no disk is used).
    let huge = std::fs::File::create(dir.join("huge.csv")).unwrap();
    huge.set_len(64 << 30).unwrap();
    let recipe = csv_recipe(&dir, "huge.toml", "huge.csv", "");
    refused(
        &dir,
        &recipe,
        &[
            &at("huge.csv"),
            "65536 MiB; a recipe reads data files of at most 1024 MiB",
        ],
    );

    let recipe = csv_recipe(&dir, "folder.toml", ".", "");
    refused(&dir, &recipe, &["is a folder, not a file"]);
}

#[test]
fn broken_text_and_image_folders_are_named() {
    let dir = fresh_dir("user-data-files");
    let at = |name: &str| dir.join(name).display().to_string();

    std::fs::write(dir.join("latin1.txt"), b"caf\xe9 au lait\n".repeat(20)).unwrap();
    refused(
        &dir,
        &text_recipe(&dir, "latin1.txt"),
        &[&at("latin1.txt"), "not valid UTF-8: line 1, byte 4"],
    );
    std::fs::write(dir.join("tiny.txt"), "just a few words").unwrap();
    refused(
        &dir,
        &text_recipe(&dir, "tiny.txt"),
        &["model.context", &at("tiny.txt"), "does not fit"],
    );

    let shapes = recipes().join("data/shapes");
    let copy = dir.join("shapes");
    for class in ["circle", "square"] {
        std::fs::create_dir_all(copy.join(class)).unwrap();
        for i in 0..3 {
            let name = format!("{i:02}.png");
            std::fs::copy(shapes.join(class).join(&name), copy.join(class).join(&name)).unwrap();
        }
    }
    std::fs::write(copy.join("square/notes.txt"), "not an image").unwrap();
    let out = run_ok(
        &dir,
        &["check", image_recipe(&dir, "shapes").to_str().unwrap()],
    );
    assert!(
        out.contains("2 classes (circle, square), 3x8x8 pixels"),
        "{out}"
    );
    assert!(
        out.contains("skipped 1 file that is not an image (square/notes.txt)"),
        "{out}"
    );

    std::fs::write(copy.join("square/broken.png"), b"text, not a PNG").unwrap();
    refused(
        &dir,
        &image_recipe(&dir, "shapes"),
        &[&at("shapes/square/broken.png"), "not a readable image"],
    );
    std::fs::remove_file(copy.join("square/broken.png")).unwrap();

    std::fs::create_dir_all(copy.join("empty")).unwrap();
    refused(
        &dir,
        &image_recipe(&dir, "shapes"),
        &[&at("shapes/empty"), "class folder holds no images"],
    );
    std::fs::remove_dir(copy.join("empty")).unwrap();

    refused(
        &dir,
        &image_recipe(&dir, "shapes/circle"),
        &["has 0 class folders"],
    );
    refused(
        &dir,
        &image_recipe(&dir, "shapes/circle/00.png"),
        &["is a file; kind `image_folder` reads a folder"],
    );
}

#[test]
fn a_resumed_run_refuses_data_that_changed() {
    let dir = fresh_dir("user-data-resume");
    std::fs::write(dir.join("data.csv"), good_rows()).unwrap();
    let recipe = csv_recipe(&dir, "r.toml", "data.csv", "");
    let recipe = recipe.to_str().unwrap();
    run_ok(&dir, &["train", recipe, "-q", "--until", "3"]);

    // The same bytes resume; one changed value does not.
    std::fs::write(dir.join("data.csv"), good_rows().replace("4,8,x", "4,9,x")).unwrap();
    let out = run(&dir, &["train", recipe, "--resume"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("the data of `csv data.csv` changed since the checkpoint"),
        "{stderr}"
    );
    assert_eq!(
        metrics(&dir.join("out")).steps.len(),
        3,
        "the refused resume trained"
    );

    std::fs::write(dir.join("data.csv"), good_rows()).unwrap();
    run_ok(&dir, &["train", recipe, "-q", "--resume"]);
    assert_eq!(metrics(&dir.join("out")).steps.len(), 6);
}
