//! Shared helpers: a fresh folder per test, recipe files, running the binary.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The repository's `recipes/` folder.
pub fn recipes() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../recipes")
}

/// An empty folder for one test.
pub fn fresh_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("mpric-{name}"));
    if dir.exists() {
        std::fs::remove_dir_all(&dir).unwrap();
    }
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Writes a recipe file into `dir`.
pub fn write_recipe(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// The `mpric` binary, run from `dir`.
pub fn mpric(dir: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_mpric"));
    command.current_dir(dir);
    // Mesa's Vulkan driver prints "XDG_RUNTIME_DIR is invalid" to stderr on a machine without
    // a session (CI); the tests read the CLI's own stderr, one line per error.
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        let runtime = Path::new(env!("CARGO_TARGET_TMPDIR")).join("xdg-runtime");
        std::fs::create_dir_all(&runtime).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o700)).unwrap();
        }
        command.env("XDG_RUNTIME_DIR", runtime);
    }
    command
}

/// Runs `mpric` with `args` from `dir`.
pub fn run(dir: &Path, args: &[&str]) -> Output {
    mpric(dir).args(args).output().unwrap()
}

/// Runs `mpric` and asserts it succeeded; returns stdout.
pub fn run_ok(dir: &Path, args: &[&str]) -> String {
    let out = run(dir, args);
    assert!(
        out.status.success(),
        "mpric {args:?} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A small, fast recipe on red-wine quality; `extra` is appended (top-level keys must come
/// before the tables, so it goes in the `[optimizer]`-free header through `head`).
pub fn small_recipe(head: &str) -> String {
    format!(
        r#"seed = 3
batch_size = 32
output = "out"
{head}

[model]
kind = "mlp"
hidden = [16]

[dataset]
name = "winequality"

[optimizer]
kind = "adam"
lr = 0.003
"#
    )
}

/// Reads `metrics.json` of an output folder.
pub fn metrics(output: &Path) -> burn_mpric_train::report::metrics::MetricsFile {
    let bytes = std::fs::read(output.join("metrics.json")).unwrap();
    serde_json::from_slice(&bytes).unwrap()
}
