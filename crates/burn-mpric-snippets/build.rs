//! Collects the Rust blocks of the user docs into one Markdown file for `src/lib.rs`'s
//! doctests, each block headed by where it stands and given its edition's Burn as `burn`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::{env, fs};

/// The READMEs that are their crates' docs: rustdoc runs their blocks there already.
const COMPILED_ELSEWHERE: [&str; 2] = [
    "crates/burn-mpric/README.md",
    "crates/burn-mpric-022/README.md",
];

fn pages(root: &Path) -> Vec<PathBuf> {
    let mut pages = vec![root.join("README.md")];
    for dir in ["docs", "crates"] {
        let Ok(entries) = fs::read_dir(root.join(dir)) else {
            continue;
        };
        let mut found: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .map(|p| if p.is_dir() { p.join("README.md") } else { p })
            .filter(|p| p.extension().is_some_and(|e| e == "md") && p.is_file())
            .collect();
        found.sort();
        pages.extend(found);
    }
    pages.retain(|p| !COMPILED_ELSEWHERE.iter().any(|c| p.ends_with(c)));
    pages
}

/// The Rust blocks of `text`: (line of the opening fence, info string, body).
fn rust_blocks(text: &str) -> Vec<(usize, String, String)> {
    let mut blocks = Vec::new();
    // The block being read: its fence's line and info string, `None` for another language.
    let mut open: Option<(usize, Option<String>)> = None;
    let mut body = String::new();
    for (i, line) in text.lines().enumerate() {
        match open.take() {
            None => {
                if let Some(info) = line.strip_prefix("```") {
                    let info = info.trim();
                    let rust = info.split(',').next() == Some("rust");
                    open = Some((i + 1, rust.then(|| info.to_string())));
                    body.clear();
                }
            }
            Some((at, info)) => {
                if line.trim_end() == "```" {
                    if let Some(info) = info {
                        blocks.push((at, info, body.clone()));
                    }
                } else {
                    body.push_str(line);
                    body.push('\n');
                    open = Some((at, info));
                }
            }
        }
    }
    blocks
}

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let root = manifest
        .parent()
        .and_then(Path::parent)
        .unwrap()
        .to_path_buf();
    let mut out = String::from("Every Rust block of the user docs.\n\n");
    for page in pages(&root) {
        println!("cargo::rerun-if-changed={}", page.display());
        let text = fs::read_to_string(&page).unwrap();
        let name = page.strip_prefix(&root).unwrap().display().to_string();
        for (line, info, body) in rust_blocks(&text) {
            // A block a user reads is a program that compiles: `no_run` where it needs MPI or
            // a GPU, `text` where it is not one Rust program.
            assert!(
                !info.split(',').any(|a| a == "ignore"),
                "{name}, line {line}: a `rust,ignore` block; make it compile (`no_run` for MPI \
                 or GPU code, hidden `# ` lines for its setup) or mark it `text`"
            );
            let edition = if body.contains("burn_mpric_022") {
                "burn022"
            } else {
                "burn021"
            };
            let _ = write!(
                out,
                "`{name}`, line {line}:\n\n```{info}\n# extern crate {edition} as burn;\n{body}```\n\n"
            );
        }
    }
    for dir in ["docs", "crates"] {
        println!("cargo::rerun-if-changed={}", root.join(dir).display());
    }
    let dest = PathBuf::from(env::var("OUT_DIR").unwrap()).join("snippets.md");
    fs::write(dest, out).unwrap();
}
