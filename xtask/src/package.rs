//! `cargo package` of every crate a user depends on: the workspace's crates less those whose
//! manifest says `publish = false` (the tools of this repository), read from `cargo metadata`
//! so that a new tool needs no list here.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// A workspace member, as `cargo metadata` describes it.
#[derive(Debug, PartialEq)]
pub struct Member {
    pub name: String,
    /// The folder of its `Cargo.toml`.
    pub dir: PathBuf,
    /// False where its manifest says `publish = false` (`"publish": []` in the JSON; `null`
    /// means publishable anywhere).
    pub published: bool,
}

/// The workspace members in `cargo metadata`'s JSON.
fn members_of(metadata: &str) -> Result<Vec<Member>, String> {
    let json: Value = serde_json::from_str(metadata).map_err(|e| format!("cargo metadata: {e}"))?;
    let packages = json["packages"]
        .as_array()
        .ok_or("cargo metadata: no `packages`")?;
    Ok(packages
        .iter()
        .map(|p| Member {
            name: p["name"].as_str().unwrap_or_default().to_string(),
            dir: Path::new(p["manifest_path"].as_str().unwrap_or_default())
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_default(),
            published: !p["publish"].as_array().is_some_and(Vec::is_empty),
        })
        .collect())
}

/// This workspace's members.
pub fn members() -> Result<Vec<Member>, String> {
    members_of(&metadata()?)
}

/// This workspace's build folder (`target/`, or where `CARGO_TARGET_DIR` puts it), where
/// `cargo package` writes the `.crate` files under `package/`.
pub fn target_dir() -> Result<PathBuf, String> {
    let json: Value =
        serde_json::from_str(&metadata()?).map_err(|e| format!("cargo metadata: {e}"))?;
    json["target_directory"]
        .as_str()
        .map(PathBuf::from)
        .ok_or_else(|| "cargo metadata: no `target_directory`".to_string())
}

/// The names of the members that are not published.
fn unpublished(members: Vec<Member>) -> Vec<String> {
    members
        .into_iter()
        .filter(|m| !m.published)
        .map(|m| m.name)
        .collect()
}

/// This workspace's members, as `cargo metadata --no-deps` gives them (JSON).
fn metadata() -> Result<String, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(&cargo)
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .output()
        .map_err(|e| format!("could not start `{cargo}`: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "`cargo metadata` failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Packages every publishable crate of the workspace, without building the packages again
/// (docs/testing.md gives the verified command and its time).
pub fn check() -> Result<(), String> {
    let tools = unpublished(members()?);
    let mut args = vec!["package", "--workspace", "--no-verify", "--allow-dirty"];
    for tool in &tools {
        args.extend(["--exclude", tool.as_str()]);
    }
    crate::cargo(&args)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_crates_that_say_publish_false_are_the_unpublished_ones() {
        let metadata = r#"{"packages": [
            {"name": "lib", "publish": null, "manifest_path": "/w/lib/Cargo.toml"},
            {"name": "tool", "publish": [], "manifest_path": "/w/tool/Cargo.toml"},
            {"name": "private-registry", "publish": ["mine"], "manifest_path": "/w/p/Cargo.toml"}
        ]}"#;
        let members = members_of(metadata).unwrap();
        assert_eq!(members[1].dir, Path::new("/w/tool"));
        assert_eq!(unpublished(members), ["tool"]);
        assert!(members_of("{}").is_err());
    }

    /// This workspace's own manifests: the tools are unpublished, the crates users depend
    /// on are not.
    #[test]
    fn this_workspaces_tools_are_unpublished() {
        let tools = unpublished(members().unwrap());
        for tool in ["burn-mpric-bench", "burn-mpric-snippets", "xtask"] {
            assert!(tools.iter().any(|t| t == tool), "{tool} not in {tools:?}");
        }
        for user in [
            "burn-mpric",
            "burn-mpric-022",
            "burn-mpric-cluster",
            "burn-mpric-train",
        ] {
            assert!(!tools.iter().any(|t| t == user), "{user} in {tools:?}");
        }
    }
}
