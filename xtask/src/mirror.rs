//! The two editions, file for file: docs/layout.md's table of twins (a Burn 0.21 file, its
//! Burn 0.22 twin, what they do; one side `—` where a file has no twin, with the reason),
//! checked against the tree, so that a file added to one edition without its twin, or without
//! a reason, is reported.

use std::fs;
use std::path::Path;

/// The Burn 0.21 edition's crates (under `crates/`).
const EDITION_021: [&str; 4] = [
    "burn-mpric",
    "burn-mpric-scale",
    "burn-mpric-learner",
    "burn-mpric-optim",
];

/// The Burn 0.22 edition's crate.
const EDITION_022: [&str; 1] = ["burn-mpric-022"];

/// The page and section that hold the table.
const PAGE: &str = "docs/layout.md";
const SECTION: &str = "## The two editions, file for file";

/// One row: a path in each edition (relative to `crates/`; a folder ends in `/`), or none.
#[derive(Debug, Clone, PartialEq)]
struct Row {
    old: Option<String>,
    new: Option<String>,
    what: String,
}

/// The table's rows: lines that start with `|`, after the header and its `---` line.
fn rows(section: &str) -> Result<Vec<Row>, String> {
    let cell = |text: &str| {
        let text = text.trim().trim_matches('`').trim();
        (!text.is_empty() && text != "—" && text != "-").then(|| text.to_string())
    };
    let mut rows = Vec::new();
    for line in section.lines().filter(|l| l.trim_start().starts_with('|')) {
        let cells: Vec<&str> = line.trim().trim_matches('|').split('|').collect();
        if cells
            .iter()
            .all(|c| c.trim().chars().all(|ch| ch == '-' || ch == ':'))
        {
            continue;
        }
        let [old, new, what] = cells.as_slice() else {
            return Err(format!("{PAGE}: a row of three cells expected: {line}"));
        };
        if old.trim() == "Burn 0.21" {
            continue;
        }
        rows.push(Row {
            old: cell(old),
            new: cell(new),
            what: what.trim().to_string(),
        });
    }
    Ok(rows)
}

/// Whether `file` is `path`, or below it where `path` is a folder.
fn covers(path: &str, file: &str) -> bool {
    match path.strip_suffix('/') {
        Some(_) => file.starts_with(path),
        None => file == path,
    }
}

/// What is wrong with `rows` for the editions' source files (`old_files`, `new_files`, paths
/// relative to `crates/`); `exists` says whether a row's path is in the tree.
fn problems(
    rows: &[Row],
    old_files: &[String],
    new_files: &[String],
    exists: impl Fn(&str) -> bool,
) -> Vec<String> {
    let mut problems = Vec::new();
    let in_crates = |path: &str, crates: &[&str]| {
        crates.iter().any(|c| {
            path.strip_prefix(c)
                .is_some_and(|rest| rest.starts_with("/src/"))
        })
    };
    for row in rows {
        let sides = [(&row.old, &EDITION_021[..]), (&row.new, &EDITION_022[..])];
        if row.old.is_none() && row.new.is_none() {
            problems.push(format!("{PAGE}: a row with no file: {}", row.what));
        }
        if row.what.is_empty() {
            problems.push(format!("{PAGE}: {row:?} says nothing of what the files do"));
        }
        for (path, crates) in sides {
            let Some(path) = path else { continue };
            if !in_crates(path, crates) {
                problems.push(format!(
                    "{PAGE}: {path} is not in the column of its edition ({})",
                    crates.join(", ")
                ));
            } else if !exists(path) {
                problems.push(format!("{PAGE}: {path} is not in the tree"));
            }
        }
    }
    let paths: Vec<&str> = rows
        .iter()
        .flat_map(|r| [r.old.as_deref(), r.new.as_deref()])
        .flatten()
        .collect();
    for file in old_files.iter().chain(new_files) {
        match paths.iter().filter(|p| covers(p, file)).count() {
            0 => problems.push(format!(
                "crates/{file} is in neither column of {PAGE} (\"{SECTION}\"): name its \
                 twin in the other edition, or why it has none"
            )),
            1 => {}
            n => problems.push(format!("crates/{file} is in {n} rows of {PAGE}")),
        }
    }
    problems
}

/// The `.rs` files under each crate's `src/`, relative to `crates/`.
fn sources(crates_dir: &Path, crates: &[&str]) -> Vec<String> {
    let mut files = Vec::new();
    for krate in crates {
        crate::layout::rust_files(&crates_dir.join(krate).join("src"), &mut files);
    }
    let mut names: Vec<String> = files
        .iter()
        .filter_map(|f| f.strip_prefix(crates_dir).ok())
        .map(|f| f.to_string_lossy().replace('\\', "/"))
        .collect();
    names.sort();
    names
}

/// Checks the table in docs/layout.md against the workspace at `root`.
pub fn check(root: &Path) -> Result<(), String> {
    let page = fs::read_to_string(root.join(PAGE)).map_err(|e| format!("{PAGE}: {e}"))?;
    let section =
        crate::docs::section(&page, SECTION).ok_or_else(|| format!("{PAGE}: no {SECTION}"))?;
    let rows = rows(section)?;
    let crates_dir = root.join("crates");
    let exists = |path: &str| crates_dir.join(path.trim_end_matches('/')).exists();
    let old = sources(&crates_dir, &EDITION_021);
    let new = sources(&crates_dir, &EDITION_022);
    crate::verdict(problems(&rows, &old, &new, exists))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "\n| Burn 0.21 | Burn 0.22 | what |\n|---|---|---|\n\
        | `burn-mpric-scale/src/scaler.rs` | `burn-mpric-022/src/scaler.rs` | the step |\n\
        | `burn-mpric/src/ops/` | — | the decorator's ops |\n\
        | — | `burn-mpric-022/src/cast.rs` | casts |\n";

    fn files(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn the_rows_are_read_with_their_empty_sides() {
        let rows = rows(TABLE).unwrap();
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[1].new, None);
        assert_eq!(rows[2].old, None);
        assert_eq!(rows[2].new.as_deref(), Some("burn-mpric-022/src/cast.rs"));
    }

    #[test]
    fn a_tree_that_matches_the_table_has_no_problems() {
        let old = files(&[
            "burn-mpric-scale/src/scaler.rs",
            "burn-mpric/src/ops/tensor.rs",
            "burn-mpric/src/ops/module.rs",
        ]);
        let new = files(&["burn-mpric-022/src/scaler.rs", "burn-mpric-022/src/cast.rs"]);
        assert_eq!(
            problems(&rows(TABLE).unwrap(), &old, &new, |_| true),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_file_without_a_row_a_missing_path_and_a_wrong_column_are_reported() {
        let mut rows = rows(TABLE).unwrap();
        rows.push(Row {
            old: Some("burn-mpric-022/src/probe.rs".into()),
            new: None,
            what: "the probe".into(),
        });
        let old = files(&[
            "burn-mpric-scale/src/scaler.rs",
            "burn-mpric-scale/src/new.rs",
        ]);
        let new = files(&["burn-mpric-022/src/scaler.rs"]);
        let found = problems(&rows, &old, &new, |p| !p.ends_with("cast.rs"));
        assert_eq!(found.len(), 3, "{found:#?}");
        assert!(found[0].contains("cast.rs is not in the tree"));
        assert!(found[1].contains("probe.rs is not in the column of its edition"));
        assert!(found[2].contains("crates/burn-mpric-scale/src/new.rs is in neither column"));
    }

    #[test]
    fn the_workspace_table_matches_the_tree() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        check(root).unwrap();
    }
}
