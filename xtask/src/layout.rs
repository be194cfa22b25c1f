//! `cargo xtask check`'s layout rules, read from the sources:
//!
//! - the modules of each crate import each other without circles (a module may use its own
//!   descendants and ancestors; a name an ancestor re-exports counts as an import of the
//!   module that defines it, reached by `crate::` or `super::`; siblings must form a
//!   hierarchy), and so do the
//!   top-level modules (folders) once their files are taken together; modules that exist only
//!   in test builds (`#[cfg(test)] mod x;`) are left out;
//! - the Burn-independent core (`crates/burn-mpric-core`) depends on no Burn crate and names
//!   no Burn path, so that both editions (Burn 0.21 and Burn 0.22) share it unchanged.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use crate::source::{is_ident, join, reexported_names};

/// The crates whose module graphs must have no circles.
pub const CRATES: [&str; 9] = [
    "crates/burn-mpric-core",
    "crates/burn-mpric-cluster",
    "crates/burn-mpric",
    "crates/burn-mpric-scale",
    "crates/burn-mpric-optim",
    "crates/burn-mpric-learner",
    "crates/burn-mpric-train",
    "crates/burn-mpric-bench",
    "crates/burn-mpric-022",
];

/// The Burn-independent core: the policy's text form and resolution, the op table, the
/// loss-scale state machines, presets and saved state.
pub const CORE: &str = "crates/burn-mpric-core";

/// Source lines without comments (doc links are not imports) and without `#[cfg(test)]`
/// modules, which may use anything.
fn code_of(source: &str) -> String {
    let source = source.split("#[cfg(test)]").next().unwrap_or_default();
    crate::source::without_comments(source)
}

/// The module path of a source file under `src` (`run/train.rs` is `run::train`,
/// `run/mod.rs` is `run`, `lib.rs` is the crate root `""`).
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap_or(file).with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts.join("::")
}

/// Every `.rs` file below `dir`.
pub fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The paths after each `crate::` in `code`, with `use crate::{a::b, c}` groups expanded
/// (one level of braces is enough for this workspace's imports).
fn crate_paths(code: &str) -> Vec<Vec<String>> {
    paths_after(code, "crate::")
}

/// The paths after each `keyword` (`crate::`, `super::`) in `code`, groups expanded.
fn paths_after(code: &str, keyword: &str) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find(keyword) {
        let before = rest[..at].chars().last();
        rest = &rest[at + keyword.len()..];
        if before.is_some_and(|c| is_ident(c) || c == ':' || c == '$') {
            continue; // `$crate::` (a macro's own crate), `other::crate::`, `super::super::`
        }
        let end = rest
            .find(|c: char| !(is_ident(c) || c == ':'))
            .unwrap_or(rest.len());
        let prefix: Vec<String> = rest[..end]
            .split("::")
            .filter(|p| !p.is_empty())
            .map(String::from)
            .collect();
        match rest[end..].strip_prefix('{') {
            // `crate::{a::b, c}` or `crate::m::{A, B}`: one path per item.
            Some(group) => {
                let close = group.find('}').unwrap_or(group.len());
                for item in group[..close].split(',') {
                    let item: Vec<String> = item
                        .split("::")
                        .map(|p| p.trim().to_string())
                        .take_while(|p| !p.is_empty() && p.chars().all(is_ident))
                        .collect();
                    if !item.is_empty() {
                        paths.push(prefix.iter().cloned().chain(item).collect());
                    }
                }
            }
            None if !prefix.is_empty() => paths.push(prefix),
            None => {}
        }
    }
    paths
}

/// The parent of a module path (`a::b` -> `a`; the crate root's children -> the root, `""`).
fn parent(module: &str) -> &str {
    module.rsplit_once("::").map_or("", |(parent, _)| parent)
}

/// The absolute module path a `use` path written in `module` starts with (`crate::a`,
/// `self::a`, `super::a`, a child `a`), or `None` for another crate's path.
fn absolute(module: &str, path: &str, modules: &BTreeMap<String, String>) -> Option<String> {
    if let Some(rest) = path
        .strip_prefix("crate::")
        .or((path == "crate").then_some(""))
    {
        return Some(rest.to_string());
    }
    if let Some(rest) = path.strip_prefix("self::") {
        return Some(join(module, rest));
    }
    let mut base = module;
    let mut rest = path;
    let mut climbed = false;
    while let Some(after) = rest
        .strip_prefix("super::")
        .or((rest == "super").then_some(""))
    {
        base = parent(base);
        rest = after;
        climbed = true;
    }
    let first = rest.split("::").next().unwrap_or_default();
    (climbed || modules.contains_key(&join(base, first))).then(|| join(base, rest))
}

/// What each module re-exports (`pub use sub::{A, B};`): module -> name -> the absolute path
/// of the module the statement names. Glob re-exports are not followed.
fn module_reexports(
    sources: &BTreeMap<String, String>,
) -> BTreeMap<String, BTreeMap<String, String>> {
    sources
        .iter()
        .map(|(module, code)| {
            let names = reexported_names(code)
                .into_iter()
                .filter_map(|(name, from)| Some((name, absolute(module, &from, sources)?)))
                .collect();
            (module.clone(), names)
        })
        .collect()
}

/// The module an absolute path (`scale::StepOutcome`) leads to, through the re-exports
/// (`scale` re-exports `StepOutcome` from `scale::outcome`, so that is where it leads).
fn resolve(
    mut path: Vec<String>,
    sources: &BTreeMap<String, String>,
    reexports: &BTreeMap<String, BTreeMap<String, String>>,
) -> Option<String> {
    // A bound on re-exports of re-exports.
    for _ in 0..16 {
        let n = (0..=path.len())
            .rev()
            .find(|&n| sources.contains_key(&path[..n].join("::")))?;
        let module = path[..n].join("::");
        let Some(from) = path
            .get(n)
            .and_then(|name| reexports.get(&module)?.get(name))
        else {
            return Some(module);
        };
        let mut next: Vec<String> = from
            .split("::")
            .filter(|p| !p.is_empty())
            .map(String::from)
            .collect();
        next.extend(path[n..].iter().cloned());
        if next == path {
            return Some(module);
        }
        path = next;
    }
    None
}

/// What a crate's modules import, read from its sources once.
pub struct Imports {
    /// Module -> the modules it imports, leaving out a module's imports of its own ancestors
    /// and descendants.
    pub graph: BTreeMap<String, BTreeSet<String>>,
    /// Each use of an item of the crate root by another module (`a uses main.rs's helper`).
    root_uses: Vec<String>,
    /// Whether the root is a binary's `main.rs` (no `lib.rs`).
    binary: bool,
}

impl Imports {
    /// The imports of the crate at `dir`.
    pub fn of(dir: &Path) -> Self {
        let src = dir.join("src");
        let binary = src.join("main.rs").exists() && !src.join("lib.rs").exists();
        let sources = crate_sources(dir);
        let reexports = module_reexports(&sources);
        let related = |a: &str, b: &str| {
            a == b || a.starts_with(&format!("{b}::")) || b.starts_with(&format!("{a}::"))
        };
        let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let mut root_uses = Vec::new();
        for (module, code) in &sources {
            let edges = graph.entry(module.clone()).or_default();
            for path in absolute_paths(module, code) {
                let Some(target) = resolve(path.clone(), &sources, &reexports) else {
                    continue;
                };
                if target.is_empty() {
                    if !module.is_empty() && !path.is_empty() {
                        root_uses.push(format!("{module} uses main.rs's {}", path.join("::")));
                    }
                } else if !related(module, &target) {
                    edges.insert(target);
                }
            }
        }
        Self {
            graph,
            root_uses,
            binary,
        }
    }

    /// The modules of a binary crate that use an item of `main.rs`: the command line uses the
    /// modules, never the other way round. A library's modules may use its root.
    pub fn uses_of_main(&self) -> &[String] {
        match self.binary {
            true => &self.root_uses,
            false => &[],
        }
    }
}

/// The `crate::` paths of `module`'s `code`, and its `super::` paths as the absolute paths
/// they name.
fn absolute_paths(module: &str, code: &str) -> Vec<Vec<String>> {
    let supers = paths_after(code, "super::").into_iter().map(|path| {
        let mut base = parent(module);
        let mut path = path.as_slice();
        while let Some(("super", rest)) = path.split_first().map(|(h, r)| (h.as_str(), r)) {
            base = parent(base);
            path = rest;
        }
        base.split("::")
            .filter(|p| !p.is_empty())
            .map(String::from)
            .chain(path.iter().cloned())
            .collect::<Vec<_>>()
    });
    crate_paths(code).into_iter().chain(supers).collect()
}

/// Each module's code (comments and test-only modules left out), by module path (`""` the
/// crate root).
fn crate_sources(dir: &Path) -> BTreeMap<String, String> {
    let src = dir.join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let raw: BTreeMap<String, String> = files
        .iter()
        .filter_map(|f| Some((module_of(&src, f), fs::read_to_string(f).ok()?)))
        .collect();
    // Modules declared under `#[cfg(test)]` (`#[cfg(test)] mod conformance;`) exist only in
    // test builds, which may use anything.
    let test_only: BTreeSet<String> = raw
        .iter()
        .flat_map(|(module, source)| {
            source
                .split("#[cfg(test)]")
                .skip(1)
                .filter_map(|after| {
                    let declared = after.trim_start().strip_prefix("mod ")?;
                    let name = declared.split(';').next()?.trim();
                    name.chars().all(is_ident).then(|| {
                        if module.is_empty() {
                            name.to_string()
                        } else {
                            format!("{module}::{name}")
                        }
                    })
                })
                .collect::<Vec<_>>()
        })
        .collect();
    raw.into_iter()
        .filter(|(module, _)| {
            !test_only
                .iter()
                .any(|t| module == t || module.starts_with(&format!("{t}::")))
        })
        .map(|(module, source)| (module, code_of(&source)))
        .collect()
}

/// The graph between top-level modules (`run::train -> checkpoint` is `run -> checkpoint`).
pub fn top_level(graph: &BTreeMap<String, BTreeSet<String>>) -> BTreeMap<String, BTreeSet<String>> {
    let top = |m: &str| m.split("::").next().unwrap_or_default().to_string();
    let mut collapsed: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, imports) in graph {
        let entry = collapsed.entry(top(module)).or_default();
        entry.extend(imports.iter().map(|i| top(i)).filter(|t| *t != top(module)));
    }
    collapsed
}

/// One circle of the graph, as the modules along it, if there is any.
pub fn find_circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, bool>, // false: on the path, true: done
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(node.to_string(), false);
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            match state.get(next) {
                Some(false) => {
                    let start = path.iter().position(|m| m == next).unwrap_or(0);
                    let mut circle = path[start..].to_vec();
                    circle.push(next.clone());
                    return Some(circle);
                }
                Some(true) => {}
                None => {
                    if let Some(circle) = visit(next, graph, state, path) {
                        return Some(circle);
                    }
                }
            }
        }
        path.pop();
        state.insert(node.to_string(), true);
        None
    }
    let mut state = BTreeMap::new();
    for node in graph.keys() {
        if !state.contains_key(node)
            && let Some(circle) = visit(node, graph, &mut state, &mut Vec::new())
        {
            return Some(circle);
        }
    }
    None
}

/// The Burn paths `code` names.
fn burn_names(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    for prefix in ["burn::", "burn_backend::", "burn_std::"] {
        let mut rest = code;
        while let Some(at) = rest.find(prefix) {
            let before = rest[..at].chars().last();
            let tail = &rest[at..];
            rest = &rest[at + prefix.len()..];
            if before.is_some_and(|c| is_ident(c) || c == ':') {
                continue;
            }
            let end = tail
                .find(|c: char| !(is_ident(c) || c == ':'))
                .unwrap_or(tail.len());
            found.push(tail[..end].to_string());
        }
    }
    found
}

/// What makes the core at `core` depend on Burn: a `burn*` dependency in its manifest (other
/// than its own name), or a Burn path in its sources.
fn core_problems(core: &Path) -> Result<Vec<String>, String> {
    let mut problems = Vec::new();
    let manifest = core.join("Cargo.toml");
    let text = fs::read_to_string(&manifest).map_err(|e| format!("{}: {e}", manifest.display()))?;
    let mut in_deps = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            in_deps = line.contains("dependencies");
        } else if in_deps && line.starts_with("burn") {
            problems.push(format!(
                "{}: the Burn-independent core depends on `{line}`",
                manifest.display()
            ));
        }
    }
    let mut files = Vec::new();
    rust_files(&core.join("src"), &mut files);
    for file in files {
        let code = fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        let names = burn_names(&code_of(&code));
        if !names.is_empty() {
            problems.push(format!(
                "{} is part of the Burn-independent core but names {}",
                file.display(),
                names.join(", ")
            ));
        }
    }
    Ok(problems)
}

/// Checks both rules over the workspace at `root`.
pub fn check(root: &Path) -> Result<(), String> {
    let mut problems = Vec::new();
    for krate in CRATES {
        let imports = Imports::of(&root.join(krate));
        for used in imports.uses_of_main() {
            problems.push(format!("{krate}: {used}"));
        }
        let graph = imports.graph;
        if let Some(circle) = find_circle(&graph) {
            problems.push(format!(
                "{krate}: modules import each other in a circle: {}",
                circle.join(" -> ")
            ));
        }
        if let Some(circle) = find_circle(&top_level(&graph)) {
            problems.push(format!(
                "{krate}: top-level modules import each other in a circle: {}",
                circle.join(" -> ")
            ));
        }
    }
    problems.extend(core_problems(&root.join(CORE))?);
    crate::verdict(problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(edges: &[(&str, &str)]) -> BTreeMap<String, BTreeSet<String>> {
        let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (a, b) in edges {
            g.entry(a.to_string()).or_default().insert(b.to_string());
            g.entry(b.to_string()).or_default();
        }
        g
    }

    #[test]
    fn a_circle_is_found_and_a_hierarchy_is_not_one() {
        let circle = find_circle(&graph(&[("a", "b"), ("b", "c"), ("c", "a"), ("d", "a")]));
        assert_eq!(circle.map(|c| c.len()), Some(4)); // a -> b -> c -> a
        assert_eq!(
            find_circle(&graph(&[("a", "b"), ("b", "c"), ("a", "c")])),
            None
        );
    }

    #[test]
    fn imports_are_read_from_paths_and_groups_but_not_comments() {
        let code = code_of(
            "use crate::rules::{Op, Precision};\nuse crate::{MpDevice, policy::Policy};\n\
             /// [`crate::ignored`]\nlet x = crate::ops::args::Arg::cast(y);\n$crate::macro_path::x",
        );
        let paths: Vec<String> = crate_paths(&code).iter().map(|p| p.join("::")).collect();
        assert_eq!(
            paths,
            [
                "rules::Op",
                "rules::Precision",
                "MpDevice",
                "policy::Policy",
                "ops::args::Arg::cast"
            ]
        );
    }

    #[test]
    fn burn_names_are_reported() {
        let code = "use burn::tensor::FloatDType;\nuse burn_mpric_core::Policy;\nfn f<B: burn_backend::Backend>() {}";
        assert_eq!(
            burn_names(code),
            ["burn::tensor::FloatDType", "burn_backend::Backend"]
        );
    }

    #[test]
    fn a_core_that_names_burn_is_refused() {
        let dir = std::env::temp_dir().join(format!("xtask-core-{}", std::process::id()));
        fs::create_dir_all(dir.join("src")).unwrap();
        fs::write(
            dir.join("Cargo.toml"),
            "[package]\nname = \"c\"\n[dependencies]\nserde = \"1\"\nburn = \"0.21\"\n",
        )
        .unwrap();
        fs::write(
            dir.join("src/lib.rs"),
            "pub fn f(d: burn::tensor::DType) {}\n",
        )
        .unwrap();
        let problems = core_problems(&dir).unwrap();
        fs::remove_dir_all(&dir).unwrap();
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("burn = "), "{problems:?}");
        assert!(problems[1].contains("burn::tensor::DType"), "{problems:?}");
    }

    /// A circle through a parent's re-exports and `super::` paths: `cause` names
    /// `super::StepOutcome` and `outcome` names `crate::scale::SkipCause`, both re-exported by
    /// `scale`, so each imports the other; it goes once the probe has a module of its own.
    #[test]
    fn a_circle_through_reexports_and_super_is_found() {
        let dir = std::env::temp_dir().join(format!("xtask-reexports-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("src/scale")).unwrap();
        let write = |file: &str, text: &str| fs::write(dir.join("src").join(file), text).unwrap();
        write("lib.rs", "mod scale;\npub use scale::StepOutcome;\n");
        write(
            "scale/mod.rs",
            "mod cause;\nmod outcome;\npub use cause::{Probe, SkipCause};\n\
             pub use self::outcome::StepOutcome;\n",
        );
        write(
            "scale/cause.rs",
            "use super::StepOutcome;\npub struct SkipCause;\n",
        );
        write(
            "scale/outcome.rs",
            "use crate::scale::SkipCause;\npub struct StepOutcome;\n",
        );
        let graph = Imports::of(&dir).graph;
        assert_eq!(
            graph["scale::cause"],
            BTreeSet::from(["scale::outcome".to_string()])
        );
        let circle = find_circle(&graph).unwrap();
        assert!(circle.contains(&"scale::cause".to_string()), "{circle:?}");

        // The probe in its own module: it imports both, and neither imports it.
        write("scale/cause.rs", "pub struct SkipCause;\n");
        write("scale/probe.rs", "use super::{SkipCause, StepOutcome};\n");
        write(
            "scale/mod.rs",
            "mod cause;\nmod outcome;\nmod probe;\npub use cause::SkipCause;\n\
             pub use outcome::StepOutcome;\npub use probe::Probe;\n",
        );
        let graph = Imports::of(&dir).graph;
        assert_eq!(find_circle(&graph), None);
        assert_eq!(graph["scale::probe"].len(), 2, "{graph:?}");
        fs::remove_dir_all(&dir).unwrap();
    }

    /// A binary's modules use each other, never an item of `main.rs`; a library's may use its
    /// root.
    #[test]
    fn a_module_that_uses_main_rs_is_reported() {
        let dir = std::env::temp_dir().join(format!("xtask-main-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("src")).unwrap();
        let write = |file: &str, text: &str| fs::write(dir.join("src").join(file), text).unwrap();
        write(
            "main.rs",
            "mod a;
mod b;
fn helper() {}
fn main() { a::f() }
",
        );
        write(
            "a.rs",
            "pub fn f() { crate::helper(); crate::b::g() }
",
        );
        write(
            "b.rs",
            "pub fn g() { super::a::f() }
",
        );
        assert_eq!(
            Imports::of(&dir).uses_of_main(),
            vec!["a uses main.rs's helper".to_string()]
        );
        write(
            "a.rs",
            "pub fn f() { crate::b::g() }
",
        );
        assert!(Imports::of(&dir).uses_of_main().is_empty());
        fs::rename(dir.join("src/main.rs"), dir.join("src/lib.rs")).unwrap();
        write(
            "a.rs",
            "pub fn f() { crate::helper() }
",
        );
        assert!(Imports::of(&dir).uses_of_main().is_empty());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn this_workspace_keeps_both_rules() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        check(root).unwrap();
        // The graph is really read: the device and the handler read the rules.
        let core = Imports::of(&root.join("crates/burn-mpric")).graph;
        assert!(core["device"].contains("rules"), "{:?}", core["device"]);
        assert!(core["handler"].contains("device"), "{:?}", core["handler"]);
    }
}
