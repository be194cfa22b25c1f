//! A new user's project outside the workspace: for each edition, README.md's quick start
//! (its `Cargo.toml` lines and its program, as a reader copies them) built and run against
//! the packaged crates, not the workspace's sources. `cargo package` has written the
//! `.crate` files; they are unpacked and named in `[patch.crates-io]`, so the project asks
//! for `burn-mpric = "0.1"` as a user does and gets exactly what would be published.
//!
//! The project lives in `target/user-project/`: its own workspace, with a lock file started
//! from this workspace's, so that it builds the Burn release the tests ran on, and built into
//! this workspace's `target/`, where the dependencies it shares with the workspace (same
//! version, same features) are built already.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::package::Workspace;

/// The README sections whose quick starts become a project each: (heading, package name).
pub const EDITIONS: [(&str, &str); 2] = [
    ("### Burn 0.21", "quickstart-021"),
    ("### Burn 0.22", "quickstart-022"),
];

/// A quick start as README.md gives it: the `Cargo.toml` lines and the program.
#[derive(Debug, PartialEq)]
pub struct QuickStart {
    pub manifest: String,
    pub program: String,
}

/// The first fenced block of `language` in `text`, as a reader copies it: rustdoc's hidden
/// lines (`# ` and a lone `#`) shown.
fn first_block(text: &str, language: &str) -> Option<String> {
    let mut lines = text.lines();
    lines.find(|l| l.trim_end() == format!("```{language}"))?;
    let mut body = String::new();
    for line in lines {
        if line.trim_end() == "```" {
            return Some(body);
        }
        let line = match line.strip_prefix("# ") {
            Some(shown) => shown,
            None if line == "#" => "",
            None => line,
        };
        body.push_str(line);
        body.push('\n');
    }
    None
}

/// The quick start under `heading` in `readme`: the section's first `toml` and `rust`
/// blocks, up to the next heading of the same or a higher level.
pub fn quick_start(readme: &str, heading: &str) -> Result<QuickStart, String> {
    let section = crate::docs::section(readme, heading)
        .ok_or_else(|| format!("README.md has no `{heading}` section"))?;
    let missing = |what: &str| format!("README.md's `{heading}` has no ```{what} block");
    Ok(QuickStart {
        manifest: first_block(section, "toml").ok_or_else(|| missing("toml"))?,
        program: first_block(section, "rust").ok_or_else(|| missing("rust"))?,
    })
}

/// The project's files, relative to its folder: the workspace manifest with `patches`
/// (crate name, folder) and each edition's package.
pub fn project_files(
    editions: &[(&str, QuickStart)],
    patches: &[(String, PathBuf)],
) -> Vec<(PathBuf, String)> {
    let mut workspace = String::from("[workspace]\nresolver = \"3\"\nmembers = [");
    let members: Vec<String> = editions.iter().map(|(n, _)| format!("\"{n}\"")).collect();
    workspace.push_str(&members.join(", "));
    workspace.push_str(
        "]\n\n# The packaged crates, as crates.io would serve them.\n[patch.crates-io]\n",
    );
    for (name, dir) in patches {
        let _ = writeln!(
            workspace,
            "{name} = {{ path = {:?} }}",
            dir.display().to_string()
        );
    }
    let mut files = vec![(PathBuf::from("Cargo.toml"), workspace)];
    for (name, quick) in editions {
        let manifest = format!(
            "[package]\nname = \"{name}\"\nversion = \"0.1.0\"\nedition = \"2024\"\npublish = false\n\n{}",
            quick.manifest
        );
        files.push((Path::new(name).join("Cargo.toml"), manifest));
        files.push((Path::new(name).join("src/main.rs"), quick.program.clone()));
    }
    files
}

/// The `.crate` files `cargo package` wrote under the workspace's `target/package/` for its
/// published crates, unpacked into `into`: (crate name, unpacked folder).
fn unpack(workspace: &Workspace, into: &Path) -> Result<Vec<(String, PathBuf)>, String> {
    let packaged = workspace.target_dir.join("package");
    fs::create_dir_all(into).map_err(|e| format!("{}: {e}", into.display()))?;
    let mut out = Vec::new();
    for member in workspace.published() {
        let stem = format!("{}-{}", member.name, member.version);
        let file = packaged.join(format!("{stem}.crate"));
        if !file.is_file() {
            return Err(format!(
                "{} is missing: run `cargo package` first",
                file.display()
            ));
        }
        let dir = into.join(&stem);
        // The archive beside its unpacked folder: the same bytes again leave the folder (and
        // the builds made from it) as they are.
        let bytes = fs::read(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        let unpacked_from = into.join(format!("{stem}.crate"));
        let unchanged =
            dir.is_dir() && fs::read(&unpacked_from).ok().as_deref() == Some(&bytes[..]);
        if !unchanged {
            unpack_one(&file, &dir, into)?;
            fs::write(&unpacked_from, &bytes)
                .map_err(|e| format!("{}: {e}", unpacked_from.display()))?;
        }
        out.push((member.name.clone(), dir));
    }
    Ok(out)
}

/// Unpacks the archive `file` into `into`, where it makes `dir`, replacing what was there.
fn unpack_one(file: &Path, dir: &Path, into: &Path) -> Result<(), String> {
    let _ = fs::remove_dir_all(dir);
    // `-m`: the files dated now, not with the fixed date cargo packages them with, which is
    // older than any build and would let cargo reuse a build of the previous archive of the
    // same version.
    let status = Command::new("tar")
        .arg("-xzmf")
        .arg(file)
        .arg("-C")
        .arg(into)
        .status()
        .map_err(|e| format!("could not start `tar`: {e}"))?;
    if !status.success() || !dir.is_dir() {
        return Err(format!("could not unpack {} ({status})", file.display()));
    }
    Ok(())
}

/// Writes the project for README.md's quick starts and builds and runs each edition's program.
pub fn check(root: &Path, workspace: &Workspace) -> Result<(), String> {
    let readme =
        fs::read_to_string(root.join("README.md")).map_err(|e| format!("README.md: {e}"))?;
    let editions = EDITIONS
        .iter()
        .map(|(heading, name)| Ok((*name, quick_start(&readme, heading)?)))
        .collect::<Result<Vec<_>, String>>()?;
    let project = workspace.target_dir.join("user-project");
    let patches = unpack(workspace, &project.join("packages"))?;
    for (file, text) in project_files(&editions, &patches) {
        let path = project.join(file);
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    // This workspace's lock: the project builds the releases the tests ran on.
    fs::copy(root.join("Cargo.lock"), project.join("Cargo.lock"))
        .map_err(|e| format!("Cargo.lock: {e}"))?;
    let manifest = project.join("Cargo.toml");
    let manifest = manifest.to_string_lossy();
    let target = workspace.target_dir.to_string_lossy();
    for (name, _) in &editions {
        let run = [
            "run",
            "--manifest-path",
            &manifest,
            "--target-dir",
            &target,
            "-p",
            name,
        ];
        crate::cargo(&run)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const README: &str = "# x\n\n## Quick start\n\n### Burn 0.21\n\n```toml\n[dependencies]\n\
        burn-mpric = \"0.1\"\n```\n\nText.\n\n```rust\n# use std::fmt;\nfn main() {}\n```\n\n\
        ```rust\nfn other() {}\n```\n\n### Burn 0.22\n\n```rust\nfn main() {}\n```\n\n## Next\n";

    #[test]
    fn a_quick_start_is_its_sections_first_toml_and_rust_blocks() {
        let quick = quick_start(README, "### Burn 0.21").unwrap();
        assert_eq!(quick.manifest, "[dependencies]\nburn-mpric = \"0.1\"\n");
        // The hidden line is shown, as a reader's copy has it; the second block is not taken.
        assert_eq!(quick.program, "use std::fmt;\nfn main() {}\n");
        // The 0.22 section has no toml block of its own: the 0.21 one is not borrowed.
        let err = quick_start(README, "### Burn 0.22").unwrap_err();
        assert!(err.contains("no ```toml"), "{err}");
        assert!(quick_start(README, "### Burn 0.23").is_err());
    }

    #[test]
    fn the_project_patches_every_packaged_crate_and_has_a_package_per_edition() {
        let quick = quick_start(README, "### Burn 0.21").unwrap();
        let patches = vec![(
            "burn-mpric".to_string(),
            PathBuf::from("/p/burn-mpric-0.1.0"),
        )];
        let files = project_files(&[("quickstart-021", quick)], &patches);
        let text = |path: &str| {
            files
                .iter()
                .find(|(p, _)| p == Path::new(path))
                .map(|(_, t)| t.clone())
                .unwrap_or_else(|| panic!("no {path}"))
        };
        let workspace = text("Cargo.toml");
        assert!(
            workspace.contains("members = [\"quickstart-021\"]"),
            "{workspace}"
        );
        assert!(
            workspace
                .contains("[patch.crates-io]\nburn-mpric = { path = \"/p/burn-mpric-0.1.0\" }"),
            "{workspace}"
        );
        let manifest = text("quickstart-021/Cargo.toml");
        assert!(
            manifest.starts_with("[package]\nname = \"quickstart-021\""),
            "{manifest}"
        );
        assert!(
            manifest.ends_with("[dependencies]\nburn-mpric = \"0.1\"\n"),
            "{manifest}"
        );
        assert_eq!(
            text("quickstart-021/src/main.rs"),
            "use std::fmt;\nfn main() {}\n"
        );
    }

    /// This repository's README: both editions' quick starts are complete programs with one
    /// dependency line besides Burn.
    #[test]
    fn this_readmes_quick_starts_have_burn_and_one_dependency() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let readme = fs::read_to_string(root.join("README.md")).unwrap();
        for (heading, _) in EDITIONS {
            let quick = quick_start(&readme, heading).unwrap();
            let dependencies: Vec<&str> = quick
                .manifest
                .lines()
                .filter(|l| !l.trim().is_empty() && !l.starts_with('[') && !l.starts_with('#'))
                .map(|l| l.split('=').next().unwrap_or_default().trim())
                .collect();
            assert_eq!(dependencies.len(), 2, "{heading}: {dependencies:?}");
            assert_eq!(dependencies[0], "burn", "{heading}");
            assert!(dependencies[1].starts_with("burn-mpric"), "{heading}");
            assert!(quick.program.contains("fn main()"), "{heading}");
        }
    }
}
