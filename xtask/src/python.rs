//! The Python the export test reads safetensors files with: a virtual environment in
//! `target/python` holding `python-requirements.txt` (the `safetensors` and `numpy`
//! packages), made once. Without `python3` (or its `venv` module, or the package registry)
//! the test skips and says why; nothing else needs Python.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The interpreter of `target/python`, created (and its packages installed) when missing;
/// `None`, with a note on stderr, when it cannot be made.
pub fn prepare(root: &Path) -> Option<PathBuf> {
    let env = root.join("target").join("python");
    let python = env.join("bin").join("python");
    let ready = |python: &Path| {
        Command::new(python)
            .args(["-c", "import safetensors.numpy, numpy"])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if ready(&python) {
        return Some(python);
    }
    let requirements = root.join("xtask").join("python-requirements.txt");
    let steps: [(&str, Vec<String>); 2] = [
        (
            "python3",
            vec!["-m".into(), "venv".into(), env.display().to_string()],
        ),
        (
            python.to_str().unwrap_or("python"),
            vec![
                "-m".into(),
                "pip".into(),
                "install".into(),
                "--quiet".into(),
                "-r".into(),
                requirements.display().to_string(),
            ],
        ),
    ];
    for (program, args) in steps {
        eprintln!("$ {program} {}", args.join(" "));
        match Command::new(program).args(&args).status() {
            Ok(status) if status.success() => {}
            outcome => {
                eprintln!(
                    "note: the safetensors reader test will skip: `{program} {}` failed ({outcome:?}); install python3 and python3-venv",
                    args.join(" ")
                );
                return None;
            }
        }
    }
    ready(&python).then_some(python)
}
