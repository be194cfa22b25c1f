//! `cargo xtask check`'s documentation rules, read from the files git tracks (or would track):
//!
//! - no `.md`, `.rs` or `.toml` file names a path outside the repository (a sibling checkout,
//!   a machine's absolute path): whoever clones the repository could not follow it;
//! - every relative link of a Markdown file (`[text](path)`, `[label]: path`) names a file or
//!   folder that exists inside the repository (web links, `#anchors` and rustdoc paths such as
//!   `crate::Op` are not checked);
//! - `docs/op-categories.md` lists exactly the ops of each category of burn-mpric-core's op
//!   table (`crates/burn-mpric-core/src/op_table.rs`), so the documented table is the code's.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Component, Path, PathBuf};
use std::process::Command;

/// Text that leads outside the repository: a sibling folder of the checkout, and the absolute
/// path of the machine it was developed on. Spelled in pieces so that this file passes its
/// own rule.
pub const OUTSIDE: [&str; 2] = [concat!("..", "/shared"), concat!("/wo", "rk/")];

/// The op table's source and the document that must list it.
pub const OP_TABLE: &str = "crates/burn-mpric-core/src/op_table.rs";
pub const OP_DOC: &str = "docs/op-categories.md";

/// The files the rules read: what git tracks plus untracked files it does not ignore
/// (relative paths, sorted). Without git, a walk of `root` that skips `target`, `runs` and
/// `.git`.
pub fn repo_files(root: &Path) -> Vec<PathBuf> {
    let listed = Command::new("git")
        .args([
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ])
        .current_dir(root)
        .output()
        .ok()
        .filter(|out| out.status.success());
    let mut files: Vec<PathBuf> = match listed {
        Some(out) => String::from_utf8_lossy(&out.stdout)
            .split('\0')
            .filter(|f| !f.is_empty())
            .map(PathBuf::from)
            .filter(|f| root.join(f).is_file())
            .collect(),
        None => {
            let mut files = Vec::new();
            walk(root, root, &mut files);
            files
        }
    };
    files.sort();
    files.dedup();
    files
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if path.is_dir() {
            if !matches!(name.to_str(), Some("target" | "runs" | ".git")) {
                walk(root, &path, out);
            }
        } else if let Ok(rel) = path.strip_prefix(root) {
            out.push(rel.to_path_buf());
        }
    }
}

fn has_extension(file: &Path, extensions: &[&str]) -> bool {
    file.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| extensions.contains(&e))
}

/// `file:line: text` for every line of `text` that names a path outside the repository.
pub fn outside_paths(file: &Path, text: &str) -> Vec<String> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| OUTSIDE.iter().any(|p| line.contains(p)))
        .map(|(i, line)| {
            format!(
                "{}:{}: names a path outside the repository: {}",
                file.display(),
                i + 1,
                line.trim()
            )
        })
        .collect()
}

/// Markdown text with fenced code blocks and inline code spans blanked out (line numbers
/// kept), so that code is not read as links.
fn prose_of(markdown: &str) -> Vec<String> {
    let mut fenced = false;
    markdown
        .lines()
        .map(|line| {
            let trimmed = line.trim_start();
            if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
                fenced = !fenced;
                return String::new();
            }
            if fenced {
                return String::new();
            }
            // Inline code: drop what lies between pairs of backticks.
            line.split('`')
                .enumerate()
                .filter(|(i, _)| i % 2 == 0)
                .map(|(_, part)| part)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

/// The text under the heading line `heading` (`## Layout`, `### Burn 0.21`) of a Markdown
/// text, up to the next heading of the same or a higher level; lines inside fenced blocks
/// are never headings (a Rust block's hidden `# ` lines among them).
pub fn section<'a>(markdown: &'a str, heading: &str) -> Option<&'a str> {
    let level = |line: &str| {
        let hashes = line.len() - line.trim_start_matches('#').len();
        (hashes > 0 && line[hashes..].starts_with(' ')).then_some(hashes)
    };
    let own = level(heading)?;
    let mut fenced = false;
    let mut start = None;
    let mut at = 0;
    for line in markdown.split_inclusive('\n') {
        let here = at;
        at += line.len();
        let text = line.trim_end();
        if text.trim_start().starts_with("```") || text.trim_start().starts_with("~~~") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        match start {
            None if text == heading => start = Some(here + heading.len()),
            Some(from) if level(text).is_some_and(|l| l <= own) => {
                // Up to the line break before the next heading.
                return Some(&markdown[from..here.saturating_sub(1).max(from)]);
            }
            _ => {}
        }
    }
    start.map(|from| &markdown[from..])
}

/// The link targets of a Markdown text, with their line numbers: inline links
/// `[text](target "title")` and reference definitions `[label]: target "title"`.
pub fn link_targets(markdown: &str) -> Vec<(usize, String)> {
    let mut targets = Vec::new();
    for (i, line) in prose_of(markdown).iter().enumerate() {
        let mut rest = line.as_str();
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let Some(close) = rest.find(')') else {
                break;
            };
            let inside = rest[..close].trim();
            let target = inside
                .strip_prefix('<')
                .and_then(|t| t.split_once('>'))
                .map(|(t, _)| t)
                .unwrap_or_else(|| inside.split_whitespace().next().unwrap_or_default());
            if !target.is_empty() {
                targets.push((i + 1, target.to_string()));
            }
            rest = &rest[close..];
        }
        // `[label]: target` alone on its line, optionally with a quoted title.
        let trimmed = line.trim_start();
        if let Some(after) = trimmed.strip_prefix('[')
            && let Some((label, definition)) = after.split_once("]:")
            && !label.is_empty()
            && !label.contains('[')
        {
            let mut words = definition.split_whitespace();
            if let Some(target) = words.next() {
                let title: Vec<&str> = words.collect();
                let title = title.join(" ");
                let is_title = title.is_empty()
                    || [('"', '"'), ('\'', '\''), ('(', ')')]
                        .iter()
                        .any(|(open, close)| title.starts_with(*open) && title.ends_with(*close));
                if is_title {
                    targets.push((i + 1, target.to_string()));
                }
            }
        }
    }
    targets
}

/// Whether a link target is checked as a path: not a web or mail link, not an anchor in the
/// same page, not a rustdoc path (`crate::Op`, `Tensor::cast`).
fn is_local(target: &str) -> bool {
    let lower = target.to_ascii_lowercase();
    !(lower.starts_with("http://")
        || lower.starts_with("https://")
        || lower.starts_with("mailto:")
        || target.starts_with('#')
        || target.contains("::"))
}

/// `path` with `.` and `..` folded, or `None` when a `..` climbs above its start.
fn normalize(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::Normal(part) => out.push(part),
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

/// `file:line: ...` for every relative link of the Markdown file `file` (relative to `root`)
/// that leaves the repository or names nothing. A link starting with `/` is taken from the
/// repository's root, as GitHub does.
pub fn broken_links(root: &Path, file: &Path, markdown: &str) -> Vec<String> {
    let dir = file.parent().unwrap_or(Path::new(""));
    link_targets(markdown)
        .into_iter()
        .filter(|(_, target)| is_local(target))
        .filter_map(|(line, target)| {
            let path = target.split(['#', '?']).next().unwrap_or_default();
            if path.is_empty() {
                return None;
            }
            let joined = match path.strip_prefix('/') {
                Some(from_root) => PathBuf::from(from_root),
                None => dir.join(path),
            };
            let problem = match normalize(&joined) {
                None => "leads outside the repository",
                Some(inside) if !root.join(&inside).exists() => "names no file in the repository",
                Some(_) => return None,
            };
            Some(format!(
                "{}:{line}: the link `{target}` {problem}",
                file.display()
            ))
        })
        .collect()
}

/// Each category of the op table (`Compute`, `FullPrecision`, `Promote`, as the `op_table!`
/// invocation names them) with its ops' names, in table order.
pub fn op_table(source: &str) -> Result<Vec<(String, Vec<String>)>, String> {
    let start = source
        .find("op_table! {")
        .ok_or("no `op_table! {` invocation")?;
    let mut categories: Vec<(String, Vec<String>)> = Vec::new();
    let mut rest = &source[start + "op_table! {".len()..];
    loop {
        let trimmed = rest.trim_start();
        let Some((name, after)) = trimmed.split_once(": [") else {
            break;
        };
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric()) {
            break;
        }
        let close = after
            .find(']')
            .ok_or_else(|| format!("category `{name}` is not closed"))?;
        let ops = after[..close]
            .split(',')
            .filter_map(|entry| {
                let (_, quoted) = entry.split_once('=')?;
                Some(quoted.trim().trim_matches('"').to_string())
            })
            .collect();
        categories.push((name.to_string(), ops));
        rest = &after[close + 1..];
    }
    if categories.is_empty() {
        Err("the op table lists no category".into())
    } else {
        Ok(categories)
    }
}

/// The name a category has in the documents (`OpCategory`'s `Display`).
fn category_name(variant: &str) -> String {
    match variant {
        "FullPrecision" => "full".into(),
        other => other.to_ascii_lowercase(),
    }
}

/// The ops `doc` lists under `<!-- op-table: NAME -->`: every backticked word from the marker
/// to the next blank line.
pub fn documented_ops(doc: &str, name: &str) -> Option<Vec<String>> {
    let marker = format!("<!-- op-table: {name} -->");
    let at = doc.find(&marker)?;
    let block = doc[at + marker.len()..]
        .trim_start_matches([' ', '\t', '\r'])
        .strip_prefix('\n')
        .unwrap_or_default();
    let end = block.find("\n\n").unwrap_or(block.len());
    Some(
        block[..end]
            .split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect(),
    )
}

/// What differs between the op table's `source` and the document `doc`.
pub fn op_doc_problems(source: &str, doc: &str) -> Result<Vec<String>, String> {
    let mut problems = Vec::new();
    for (variant, ops) in op_table(source)? {
        let name = category_name(&variant);
        let Some(listed) = documented_ops(doc, &name) else {
            problems.push(format!(
                "{OP_DOC} has no `<!-- op-table: {name} -->` list for the {variant} ops"
            ));
            continue;
        };
        let code: BTreeSet<&String> = ops.iter().collect();
        let documented: BTreeSet<&String> = listed.iter().collect();
        let missing: Vec<&str> = code.difference(&documented).map(|s| s.as_str()).collect();
        let extra: Vec<&str> = documented.difference(&code).map(|s| s.as_str()).collect();
        if !missing.is_empty() {
            problems.push(format!(
                "{OP_DOC} does not list these {name} ops of {OP_TABLE}: {}",
                missing.join(", ")
            ));
        }
        if !extra.is_empty() {
            problems.push(format!(
                "{OP_DOC} lists as {name} ops that {OP_TABLE} does not put there: {}",
                extra.join(", ")
            ));
        }
        if listed.len() != documented.len() {
            problems.push(format!("{OP_DOC} lists a {name} op twice"));
        }
    }
    Ok(problems)
}

/// Checks the three rules over the repository at `root`.
pub fn check(root: &Path) -> Result<(), String> {
    let mut problems = Vec::new();
    for file in repo_files(root) {
        if !has_extension(&file, &["md", "rs", "toml"]) {
            continue;
        }
        let Ok(text) = fs::read_to_string(root.join(&file)) else {
            continue;
        };
        problems.extend(outside_paths(&file, &text));
        if has_extension(&file, &["md"]) {
            problems.extend(broken_links(root, &file, &text));
        }
    }
    let read = |rel: &str| fs::read_to_string(root.join(rel)).map_err(|e| format!("{rel}: {e}"));
    problems.extend(op_doc_problems(&read(OP_TABLE)?, &read(OP_DOC)?)?);
    crate::verdict(problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_outside_the_repository_are_found() {
        let sibling = format!("see ..{}DESIGN.md", "/shared/");
        let absolute = format!("/wo{}main/README.md", "rk/");
        let text = format!("fine\n{sibling}\n// {absolute}\nshared/ alone is fine\n");
        let found = outside_paths(Path::new("a.md"), &text);
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[0].starts_with("a.md:2: "), "{found:?}");
        assert!(found[1].starts_with("a.md:3: "), "{found:?}");
    }

    #[test]
    fn links_are_read_from_prose_not_code() {
        let markdown = "\
See [the design](docs/design.md#rules) and [web](https://burn.dev).
Inline `[not](a-link.md)` code, and <[angle](<with space.md> \"title\")>.
```rust
let v = w[..](x); // [x](code.md)
```
[label]: docs/limits.md \"Limits\"
[1/terms, 1]: it is stored at the compute dtype
[two](a.md) [links](b.md)
";
        let targets: Vec<String> = link_targets(markdown).into_iter().map(|(_, t)| t).collect();
        assert_eq!(
            targets,
            [
                "docs/design.md#rules",
                "https://burn.dev",
                "with space.md",
                "docs/limits.md",
                "a.md",
                "b.md"
            ]
        );
        assert_eq!(link_targets(markdown)[3].0, 6);
    }

    #[test]
    fn broken_and_escaping_links_are_reported() {
        let root = std::env::temp_dir().join(format!("xtask-links-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(root.join("docs")).unwrap();
        fs::write(root.join("docs/dtypes.md"), "").unwrap();
        fs::write(root.join("README.md"), "").unwrap();
        let markdown = format!(
            "[ok](dtypes.md) [up](../README.md#tests) [root](/docs/dtypes.md) [folder](.)\n\
             [anchor](#here) [web](http://x.org/a.md) [rustdoc](crate::Op)\n\
             [missing](limits.md)\n[escape](../..{}DESIGN.md)\n",
            "/shared/"
        );
        let problems = broken_links(&root, Path::new("docs/index.md"), &markdown);
        fs::remove_dir_all(&root).unwrap();
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(
            problems[0].starts_with("docs/index.md:3: the link `limits.md` names no file"),
            "{problems:?}"
        );
        assert!(
            problems[1].contains("leads outside the repository"),
            "{problems:?}"
        );
    }

    const TABLE: &str = r#"
op_table! {
    Compute: [
        Matmul = "matmul",
        Linear = "linear",
    ]
    FullPrecision: [
        Exp = "exp",
    ]
    Promote: [
        Add = "add",
    ]
}
"#;

    #[test]
    fn the_op_table_is_read_by_category() {
        let table = op_table(TABLE).unwrap();
        let names: Vec<&str> = table.iter().map(|(c, _)| c.as_str()).collect();
        assert_eq!(names, ["Compute", "FullPrecision", "Promote"]);
        assert_eq!(table[0].1, ["matmul", "linear"]);
        assert!(op_table("fn main() {}").is_err());
    }

    #[test]
    fn the_document_must_list_each_category_exactly() {
        let doc = "\
<!-- op-table: compute -->
| matmul | `matmul`, `linear` |

<!-- op-table: full -->
`exp`

<!-- op-table: promote -->
`add`
";
        assert_eq!(op_doc_problems(TABLE, doc).unwrap(), Vec::<String>::new());

        let wrong = doc
            .replace("`exp`", "`exp`, `log`")
            .replace(", `linear`", "");
        let problems = op_doc_problems(TABLE, &wrong).unwrap();
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(
            problems[0].contains("does not list these compute ops"),
            "{problems:?}"
        );
        assert!(problems[0].ends_with(": linear"), "{problems:?}");
        assert!(problems[1].contains("lists as full ops"), "{problems:?}");

        let unmarked = doc.replace("<!-- op-table: promote -->", "");
        let problems = op_doc_problems(TABLE, &unmarked).unwrap();
        assert!(
            problems[0].contains("no `<!-- op-table: promote -->` list"),
            "{problems:?}"
        );
    }

    #[test]
    fn this_repository_keeps_the_rules() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        check(root).unwrap();
        // The files are really read: README.md and this file are among them.
        let files = repo_files(root);
        assert!(files.contains(&PathBuf::from("README.md")), "{files:?}");
        assert!(
            files.contains(&PathBuf::from("xtask/src/docs.rs")),
            "{files:?}"
        );
    }
}
