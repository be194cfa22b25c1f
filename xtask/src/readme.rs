//! `cargo xtask check`'s rule for the crate READMEs of every published crate, read from the
//! sources so that the READMEs cannot go stale:
//!
//! - `## Layout` names each file and folder of the crate's `src/` (`name.rs`, `name/`; the
//!   crate root `lib.rs` or `main.rs` needs no entry);
//! - `## Public items` names each item the crate root exports: what it defines (`pub fn`,
//!   `pub struct`, ..., `pub mod`, exported macros) and what it re-exports (by its name or
//!   its alias); a glob re-export (`pub use other::group::*;`) is named by its source path.
//!   Items hidden from the docs (`#[doc(hidden)]`) are left out.

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

use crate::docs::section;
use crate::source::{is_ident, use_leaves};

/// What a crate root exports: the names of its items and the source paths of its globs.
#[derive(Debug, Default, PartialEq)]
pub struct Exports {
    pub names: BTreeSet<String>,
    pub globs: BTreeSet<String>,
}

/// The crate root's top-level statements: split at `;` and at a `}` that closes a block
/// opened at the top level.
fn statements(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut current = String::new();
    for c in code.chars() {
        match c {
            '{' | '[' | '(' => depth += 1,
            '}' | ']' | ')' => depth = depth.saturating_sub(1),
            _ => {}
        }
        if depth == 0 && c == ';' {
            out.push(std::mem::take(&mut current));
            continue;
        }
        current.push(c);
        // A block's `}` ends its item (an attribute's `]` does not: it leads the next one).
        if depth == 0 && c == '}' {
            out.push(std::mem::take(&mut current));
        }
    }
    out.push(current);
    out.into_iter()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// A statement's leading attributes (their text) and the item after them.
fn split_attributes(statement: &str) -> (Vec<String>, &str) {
    let mut attributes = Vec::new();
    let mut rest = statement.trim_start();
    while rest.starts_with('#') {
        let mut depth = 0usize;
        let mut end = rest.len();
        for (i, c) in rest.char_indices() {
            match c {
                '[' => depth += 1,
                ']' => {
                    depth -= 1;
                    if depth == 0 {
                        end = i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        attributes.push(rest[..end].to_string());
        rest = rest[end..].trim_start();
    }
    (attributes, rest)
}

/// The items a crate root (`lib.rs`) exports.
pub fn exports(root: &str) -> Exports {
    let mut exports = Exports::default();
    for statement in statements(&crate::source::without_comments(root)) {
        let (attributes, item) = split_attributes(&statement);
        let has = |text: &str| attributes.iter().any(|a| a.replace(' ', "").contains(text));
        if has("doc(hidden)") || has("cfg(test)") {
            continue;
        }
        let words: Vec<&str> = item
            .split(|c: char| !(is_ident(c) || c == '!'))
            .filter(|w| !w.is_empty())
            .collect();
        if words.first() == Some(&"macro_rules!") && has("macro_export") {
            if let Some(name) = words.get(1) {
                exports.names.insert(name.to_string());
            }
            continue;
        }
        // `pub` alone: `pub(crate)` and the like are not exports.
        let Some(rest) = item.strip_prefix("pub ") else {
            continue;
        };
        let rest = rest.trim_start();
        if let Some(tree) = rest.strip_prefix("use ") {
            let mut leaves = Vec::new();
            use_leaves(tree, "", &mut leaves);
            for (prefix, leaf) in leaves {
                match leaf.split_once(" as ") {
                    Some((_, alias)) => exports.names.insert(alias.to_string()),
                    None if leaf == "*" => exports.globs.insert(prefix),
                    None if leaf == "self" => exports
                        .names
                        .insert(prefix.rsplit("::").next().unwrap_or_default().to_string()),
                    None => exports.names.insert(leaf),
                };
            }
            continue;
        }
        let words: Vec<&str> = rest
            .split(|c: char| !is_ident(c))
            .filter(|w| !w.is_empty())
            .collect();
        let kinds = [
            "fn", "struct", "enum", "trait", "type", "const", "static", "union", "mod",
        ];
        // `pub const fn f`, `pub unsafe fn f`, `pub async fn f`: the name follows the kind.
        let at = words.iter().position(|w| kinds.contains(w)).map(|i| {
            if words.get(i + 1) == Some(&"fn") {
                i + 1
            } else {
                i
            }
        });
        if let Some(name) = at.and_then(|i| words.get(i + 1)) {
            exports.names.insert(name.to_string());
        }
    }
    exports
}

/// Whether `text` holds `word` with no identifier character on either side.
fn names(text: &str, word: &str) -> bool {
    text.match_indices(word).any(|(at, _)| {
        let before = text[..at].chars().last();
        let after = text[at + word.len()..].chars().next();
        !before.is_some_and(is_ident) && !after.is_some_and(is_ident)
    })
}

/// What the README of the crate at `dir` misses, one line each.
pub fn crate_problems(dir: &Path) -> Vec<String> {
    let name = dir
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let Ok(readme) = fs::read_to_string(dir.join("README.md")) else {
        return vec![format!("{name}: no README.md")];
    };
    let mut problems = Vec::new();
    match section(&readme, "## Layout") {
        None => problems.push(format!("{name}/README.md: no `## Layout` section")),
        Some(layout) => {
            let mut entries: Vec<String> = fs::read_dir(dir.join("src"))
                .into_iter()
                .flatten()
                .flatten()
                .filter_map(|e| {
                    let file = e.file_name().to_string_lossy().into_owned();
                    if e.path().is_dir() {
                        Some(format!("{file}/"))
                    } else if file.ends_with(".rs")
                        && !matches!(file.as_str(), "lib.rs" | "main.rs")
                    {
                        Some(file)
                    } else {
                        None
                    }
                })
                .collect();
            entries.sort();
            for entry in entries {
                let found = layout
                    .match_indices(&entry)
                    .any(|(at, _)| !layout[..at].chars().last().is_some_and(is_ident));
                if !found {
                    problems.push(format!(
                        "{name}/README.md: `## Layout` does not name src/{entry}"
                    ));
                }
            }
        }
    }
    // A binary's items are not a library's exports: only `lib.rs` has public items.
    if let Ok(root) = fs::read_to_string(dir.join("src/lib.rs")) {
        match section(&readme, "## Public items") {
            None => problems.push(format!("{name}/README.md: no `## Public items` section")),
            Some(items) => {
                let exports = exports(&root);
                for item in &exports.names {
                    if !names(items, item) {
                        problems.push(format!(
                            "{name}/README.md: `## Public items` does not name `{item}`"
                        ));
                    }
                }
                for glob in &exports.globs {
                    if !items.contains(glob.as_str()) {
                        problems.push(format!(
                            "{name}/README.md: `## Public items` does not name the group \
                             `{glob}` (re-exported whole)"
                        ));
                    }
                }
            }
        }
    }
    problems
}

/// Checks the README of every crate at `dirs`.
pub fn check(dirs: &[impl AsRef<Path>]) -> Result<(), String> {
    let problems: Vec<String> = dirs
        .iter()
        .flat_map(|d| crate_problems(d.as_ref()))
        .collect();
    crate::verdict(problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(items: &[&str]) -> BTreeSet<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_crate_roots_exports_are_read_from_its_items_and_uses() {
        let root = r#"
//! Docs with `pub fn not_an_item` in them.
#![warn(missing_docs)]
mod private;
pub mod open;
#[cfg(feature = "x")]
pub mod gated { pub use crate::open::Thing; }
pub use private::{A, B as Renamed, nested::{C, deep::*}};
pub use other_crate as other; // a crate under another name
pub use another::group::*;
pub(crate) use private::Hidden;
#[doc(hidden)]
pub mod __private {}
#[cfg(test)]
pub mod only_in_tests {}
/* pub fn commented_out() {} */
pub const fn constant() -> u8 { 1 }
pub const LIMIT: Limits = Limits { a: 1 };
pub struct Unit;
pub struct Fields { pub a: u8 }
pub enum Choice { A, B }
pub trait Behaviour { fn f(&self) {} }
pub type Alias = u8;
impl Unit { pub fn method(&self) {} }
#[macro_export]
macro_rules! exported { () => {}; }
macro_rules! local { () => {}; }
"#;
        let exports = exports(root);
        assert_eq!(
            exports.names,
            set(&[
                "open",
                "gated",
                "A",
                "Renamed",
                "C",
                "other",
                "constant",
                "LIMIT",
                "Unit",
                "Fields",
                "Choice",
                "Behaviour",
                "Alias",
                "exported"
            ])
        );
        assert_eq!(
            exports.globs,
            set(&["private::nested::deep", "another::group"])
        );
    }

    #[test]
    fn a_section_ends_at_the_next_heading() {
        let readme = "# x\n\n## Layout\n\n- `a.rs`\n\n## Public items\n\n`A`, `open`\n";
        assert_eq!(section(readme, "## Layout"), Some("\n\n- `a.rs`\n"));
        assert_eq!(
            section(readme, "## Public items"),
            Some("\n\n`A`, `open`\n")
        );
        assert_eq!(section(readme, "## Features"), None);
        // A fenced block's `# ` lines are not headings; a deeper heading stays inside.
        let fenced =
            "## Layout\n```rust\n# use x;\n## not a heading\n```\n### Deeper\n`b.rs`\n# Top\n";
        assert_eq!(
            section(fenced, "## Layout"),
            Some("\n```rust\n# use x;\n## not a heading\n```\n### Deeper\n`b.rs`")
        );
        assert!(names("`A`, `open`", "open") && !names("`opened`", "open"));
    }

    /// A crate on disk: each file, folder and export the README misses is named, and the
    /// problems go once the README names them.
    #[test]
    fn a_readme_that_misses_a_file_or_an_item_is_refused() {
        let dir = std::env::temp_dir().join(format!("xtask-readme-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("src/ops")).unwrap();
        fs::write(
            dir.join("src/lib.rs"),
            "mod step;\nmod ops;\npub use step::Step;\npub use core::group::*;\n",
        )
        .unwrap();
        fs::write(dir.join("src/step.rs"), "pub struct Step;\n").unwrap();
        fs::write(dir.join("src/ops/mod.rs"), "").unwrap();
        fs::write(dir.join("README.md"), "# c\n\n## Layout\n\n- `step.rs`\n").unwrap();
        let problems = crate_problems(&dir).join("\n");
        assert!(problems.contains("does not name src/ops/"), "{problems}");
        assert!(problems.contains("no `## Public items`"), "{problems}");
        assert!(!problems.contains("src/step.rs"), "{problems}");

        fs::write(
            dir.join("README.md"),
            "# c\n\n## Layout\n\n- `step.rs`\n\n## Public items\n\n- `Steps`\n",
        )
        .unwrap();
        let problems = crate_problems(&dir).join("\n");
        assert!(problems.contains("does not name `Step`"), "{problems}");
        assert!(problems.contains("the group `core::group`"), "{problems}");

        fs::write(
            dir.join("README.md"),
            "# c\n\n## Layout\n\n- `step.rs`, `ops/`\n\n## Public items\n\n\
             - `Step`, and `core::group` whole\n",
        )
        .unwrap();
        assert_eq!(crate_problems(&dir), Vec::<String>::new());
        fs::remove_dir_all(&dir).unwrap();
    }
}
