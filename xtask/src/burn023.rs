//! `cargo xtask burn023`: builds and tests the Burn 0.22 edition (`burn-mpric-022`) against
//! Burn 0.23.0-pre.1, outside the workspace and outside CI.
//!
//! The edition, the core and the transports (burn-mpric-cluster) are copied into `target/burn023/` with a workspace of their own
//! (the root's package fields, dependencies and profiles), every `=0.22.1` Burn requirement of
//! the edition becomes `=0.23.0-pre.1`, and `cargo test` runs there with its own lock file and
//! target folder, so nothing of the main build is touched.

use std::fs;
use std::path::Path;
use std::process::Command;

/// The Burn release the edition is pinned to, and the preview it is tried against.
const PINNED: &str = "=0.22.1";
const PREVIEW: &str = "=0.23.0-pre.1";

fn copy_dir(from: &Path, to: &Path) -> Result<(), String> {
    fs::create_dir_all(to).map_err(|e| format!("{}: {e}", to.display()))?;
    for entry in fs::read_dir(from).map_err(|e| format!("{}: {e}", from.display()))? {
        let entry = entry.map_err(|e| format!("{}: {e}", from.display()))?;
        let path = entry.path();
        let target = to.join(entry.file_name());
        if path.is_dir() {
            if entry.file_name() != "target" {
                copy_dir(&path, &target)?;
            }
        } else {
            fs::copy(&path, &target).map_err(|e| format!("{}: {e}", path.display()))?;
        }
    }
    Ok(())
}

/// The root manifest's sections a member reads through `workspace = true`, and its profiles,
/// under a workspace that lists `members`.
fn workspace_manifest(root_manifest: &str, members: &[&str]) -> String {
    let mut out = String::from("[workspace]\nresolver = \"3\"\nmembers = [");
    out.push_str(
        &members
            .iter()
            .map(|m| format!("\"{m}\""))
            .collect::<Vec<_>>()
            .join(", "),
    );
    out.push_str("]\n\n");
    let mut keep = false;
    for line in root_manifest.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('[') {
            keep = trimmed.starts_with("[workspace.") || trimmed.starts_with("[profile");
        }
        if keep {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// Runs the edition's tests against Burn 0.23.0-pre.1; `args` go to `cargo test`.
pub fn run(root: &Path, args: &[String]) -> Result<(), String> {
    let dir = root.join("target").join("burn023");
    let _ = fs::remove_dir_all(dir.join("burn-mpric-022"));
    // The crates the edition depends on by path (the core, and the Burn-free transports).
    for shared in ["burn-mpric-core", "burn-mpric-cluster"] {
        let _ = fs::remove_dir_all(dir.join(shared));
        copy_dir(&root.join("crates").join(shared), &dir.join(shared))?;
    }
    copy_dir(
        &root.join("crates/burn-mpric-022"),
        &dir.join("burn-mpric-022"),
    )?;
    let root_manifest = fs::read_to_string(root.join("Cargo.toml")).map_err(|e| e.to_string())?;
    fs::write(
        dir.join("Cargo.toml"),
        workspace_manifest(
            &root_manifest,
            &["burn-mpric-core", "burn-mpric-cluster", "burn-mpric-022"],
        ),
    )
    .map_err(|e| e.to_string())?;
    let manifest = dir.join("burn-mpric-022/Cargo.toml");
    let text = fs::read_to_string(&manifest).map_err(|e| e.to_string())?;
    if !text.contains(PINNED) {
        return Err(format!(
            "{} pins no Burn crate to {PINNED}: update xtask/src/burn023.rs",
            manifest.display()
        ));
    }
    fs::write(&manifest, text.replace(PINNED, PREVIEW)).map_err(|e| e.to_string())?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    eprintln!(
        "$ cargo test -p burn-mpric-022 (Burn {PREVIEW}, in {})",
        dir.display()
    );
    let status = Command::new(&cargo)
        .arg("test")
        .arg("--manifest-path")
        .arg(dir.join("Cargo.toml"))
        .args(["-p", "burn-mpric-022"])
        .args(args)
        .env("CARGO_TARGET_DIR", dir.join("target"))
        .status()
        .map_err(|e| format!("could not start `{cargo}`: {e}"))?;
    if status.success() {
        eprintln!("burn-mpric-022 builds and passes its tests on Burn {PREVIEW}");
        Ok(())
    } else {
        Err(format!(
            "burn-mpric-022 on Burn {PREVIEW}: `cargo test` failed ({status})"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_copied_workspace_keeps_package_fields_dependencies_and_profiles_only() {
        let root = "[workspace]\nmembers = [\"a\"]\n\n[workspace.package]\nversion = \"0.1.0\"\n\n\
                    [workspace.dependencies]\nserde = \"1\"\n\n[profile.dev]\ndebug = 0\n";
        let out = workspace_manifest(root, &["x", "y"]);
        assert!(out.starts_with("[workspace]\nresolver = \"3\"\nmembers = [\"x\", \"y\"]"));
        assert!(out.contains("[workspace.package]\nversion = \"0.1.0\""));
        assert!(out.contains("[workspace.dependencies]\nserde = \"1\""));
        assert!(out.contains("[profile.dev]\ndebug = 0"));
        assert!(!out.contains("\"a\""), "{out}");
    }
}
