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
    pub version: String,
    /// The folder of its `Cargo.toml`.
    pub dir: PathBuf,
    /// False where its manifest says `publish = false` (`"publish": []` in the JSON; `null`
    /// means publishable anywhere).
    pub published: bool,
}

/// What the check needs of `cargo metadata`, read once: the members, and the build folder
/// (`target/`, or where `CARGO_TARGET_DIR` puts it), where `cargo package` writes the
/// `.crate` files under `package/`.
#[derive(Debug)]
pub struct Workspace {
    pub members: Vec<Member>,
    pub target_dir: PathBuf,
}

impl Workspace {
    /// The members a user depends on.
    pub fn published(&self) -> impl Iterator<Item = &Member> {
        self.members.iter().filter(|m| m.published)
    }

    /// The names of the members that are not published (the tools).
    fn unpublished(&self) -> Vec<&str> {
        self.members
            .iter()
            .filter(|m| !m.published)
            .map(|m| m.name.as_str())
            .collect()
    }
}

/// The workspace in `cargo metadata`'s JSON.
fn workspace_of(metadata: &str) -> Result<Workspace, String> {
    let json: Value = serde_json::from_str(metadata).map_err(|e| format!("cargo metadata: {e}"))?;
    let packages = json["packages"]
        .as_array()
        .ok_or("cargo metadata: no `packages`")?;
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let members = packages
        .iter()
        .map(|p| Member {
            name: text(&p["name"]),
            version: text(&p["version"]),
            dir: Path::new(p["manifest_path"].as_str().unwrap_or_default())
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_default(),
            published: !p["publish"].as_array().is_some_and(Vec::is_empty),
        })
        .collect();
    let target_dir = json["target_directory"]
        .as_str()
        .map(PathBuf::from)
        .ok_or("cargo metadata: no `target_directory`")?;
    Ok(Workspace {
        members,
        target_dir,
    })
}

/// This workspace, from one run of `cargo metadata`.
pub fn workspace() -> Result<Workspace, String> {
    workspace_of(&metadata()?)
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
pub fn check(workspace: &Workspace) -> Result<(), String> {
    let mut args = vec!["package", "--workspace", "--no-verify", "--allow-dirty"];
    for tool in workspace.unpublished() {
        args.extend(["--exclude", tool]);
    }
    crate::cargo(&args)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_crates_that_say_publish_false_are_the_unpublished_ones() {
        let metadata = r#"{"packages": [
            {"name": "lib", "version": "0.1.0", "publish": null, "manifest_path": "/w/lib/Cargo.toml"},
            {"name": "tool", "version": "0.1.0", "publish": [], "manifest_path": "/w/tool/Cargo.toml"},
            {"name": "private-registry", "version": "0.2.0", "publish": ["mine"], "manifest_path": "/w/p/Cargo.toml"}
        ], "target_directory": "/w/target"}"#;
        let workspace = workspace_of(metadata).unwrap();
        assert_eq!(workspace.members[1].dir, Path::new("/w/tool"));
        assert_eq!(workspace.members[2].version, "0.2.0");
        assert_eq!(workspace.target_dir, Path::new("/w/target"));
        assert_eq!(workspace.unpublished(), ["tool"]);
        assert!(workspace_of("{}").is_err());
        // Without the build folder the `.crate` files cannot be found: an error, not a guess.
        assert!(workspace_of(r#"{"packages": []}"#).is_err());
    }

    /// This workspace's own manifests: the tools are unpublished, the crates users depend
    /// on are not.
    #[test]
    fn this_workspaces_tools_are_unpublished() {
        let workspace = workspace().unwrap();
        let tools = workspace.unpublished();
        for tool in ["burn-mpric-bench", "burn-mpric-snippets", "xtask"] {
            assert!(tools.contains(&tool), "{tool} not in {tools:?}");
        }
        for user in [
            "burn-mpric",
            "burn-mpric-022",
            "burn-mpric-cluster",
            "burn-mpric-train",
        ] {
            assert!(!tools.contains(&user), "{user} in {tools:?}");
        }
    }
}
