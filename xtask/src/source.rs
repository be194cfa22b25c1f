//! Rust source read as text, for the rules that read it (`layout.rs`, `readme.rs`): what an
//! identifier is, module paths joined, the re-exports of `pub use` statements, and the code
//! without its comments.

/// Whether `c` may stand in an identifier.
pub fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// `module::rest`, either side possibly empty (the crate root is `""`).
pub fn join(module: &str, rest: &str) -> String {
    match (module.is_empty(), rest.is_empty()) {
        (true, _) => rest.to_string(),
        (false, true) => module.to_string(),
        (false, false) => format!("{module}::{rest}"),
    }
}

/// The leaves of a use tree (`a::{b, c::d as e, f::*}`): (prefix path, leaf) pairs, where a
/// leaf is an identifier, `self`, `*`, or `name as alias`.
pub fn use_leaves(tree: &str, prefix: &str, out: &mut Vec<(String, String)>) {
    let tree: String = tree.split_whitespace().collect::<Vec<_>>().join(" ");
    let tree = tree.trim();
    match tree.find('{') {
        Some(open) => {
            let head = tree[..open].trim_end_matches("::").trim();
            let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
            let prefix = join(prefix, head);
            let mut depth = 0usize;
            let mut start = 0;
            for (i, c) in inner.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        use_leaves(&inner[start..i], &prefix, out);
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            use_leaves(&inner[start..], &prefix, out);
        }
        None if tree.is_empty() => {}
        None => {
            let (path, alias) = match tree.split_once(" as ") {
                Some((path, alias)) => (path.trim(), Some(alias.trim())),
                None => (tree, None),
            };
            let (head, leaf) = path.rsplit_once("::").unwrap_or(("", path));
            let leaf = alias.map_or(leaf.to_string(), |a| format!("{leaf} as {a}"));
            out.push((join(prefix, head), leaf));
        }
    }
}

/// What the `pub use` statements of `code` re-export by name (an alias by its alias), with
/// the module path each statement names, as written. Globs (`*`) name no item.
pub fn reexported_names(code: &str) -> Vec<(String, String)> {
    let mut names = Vec::new();
    for statement in code.split(';') {
        let Some(at) = statement.find("pub use ") else {
            continue;
        };
        let mut leaves = Vec::new();
        use_leaves(&statement[at + "pub use ".len()..], "", &mut leaves);
        for (prefix, leaf) in leaves {
            match leaf.split_once(" as ") {
                Some((_, alias)) => names.push((alias.to_string(), prefix)),
                None if leaf != "*" => names.push((leaf, prefix)),
                None => {}
            }
        }
    }
    names
}

/// `source` without comments; string literals are kept as they are (a crate root's strings
/// hold no comment markers or braces that matter here).
pub fn without_comments(source: &str) -> String {
    let mut out = String::new();
    let mut rest = source;
    loop {
        let line = rest.find("//");
        let block = rest.find("/*");
        match (line, block) {
            (Some(l), b) if b.is_none_or(|b| l < b) => {
                out.push_str(&rest[..l]);
                rest = rest[l..].find('\n').map_or("", |end| &rest[l + end..]);
            }
            (_, Some(b)) => {
                out.push_str(&rest[..b]);
                rest = rest[b..].find("*/").map_or("", |end| &rest[b + end + 2..]);
            }
            _ => {
                out.push_str(rest);
                return out;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn use_trees_are_read_to_their_leaves() {
        let mut leaves = Vec::new();
        use_leaves(
            "private::{A, B as Renamed, nested::{C, deep::*}}",
            "",
            &mut leaves,
        );
        let pairs = |v: &[(&str, &str)]| {
            v.iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            leaves,
            pairs(&[
                ("private", "A"),
                ("private", "B as Renamed"),
                ("private::nested", "C"),
                ("private::nested::deep", "*"),
            ])
        );
        let code = "mod a;\npub use a::{X, Y as Z};\npub use b::*;\npub(crate) use c::W;\n";
        assert_eq!(reexported_names(code), pairs(&[("X", "a"), ("Z", "a")]));
        assert_eq!(
            (join("", "a"), join("a", ""), join("a", "b")),
            ("a".into(), "a".into(), "a::b".into())
        );
    }
}
