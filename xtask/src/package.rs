//! `cargo package` of every crate a user depends on: the workspace's crates less those whose
//! manifest says `publish = false` (the tools of this repository), read from `cargo metadata`
//! so that a new tool needs no list here.

use std::process::Command;

use serde_json::Value;

/// The workspace members whose manifest says `publish = false`, from `cargo metadata`'s JSON
/// (where that is `"publish": []`; `null` means publishable anywhere).
fn unpublished(metadata: &str) -> Result<Vec<String>, String> {
    let json: Value = serde_json::from_str(metadata).map_err(|e| format!("cargo metadata: {e}"))?;
    let packages = json["packages"]
        .as_array()
        .ok_or("cargo metadata: no `packages`")?;
    Ok(packages
        .iter()
        .filter(|p| p["publish"].as_array().is_some_and(Vec::is_empty))
        .filter_map(|p| p["name"].as_str().map(String::from))
        .collect())
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
    let tools = unpublished(&metadata()?)?;
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
            {"name": "lib", "publish": null},
            {"name": "tool", "publish": []},
            {"name": "private-registry", "publish": ["mine"]}
        ]}"#;
        assert_eq!(unpublished(metadata).unwrap(), ["tool"]);
        assert!(unpublished("{}").is_err());
    }

    /// This workspace's own manifests: the tools are unpublished, the crates users depend
    /// on are not.
    #[test]
    fn this_workspaces_tools_are_unpublished() {
        let tools = unpublished(&metadata().unwrap()).unwrap();
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
