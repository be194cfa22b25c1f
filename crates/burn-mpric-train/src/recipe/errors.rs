//! Recipe errors in the recipe's own words. serde and the TOML parser describe a mistake
//! with the Rust types a recipe deserializes into (`expected usize`, `internally tagged enum
//! ModelConfig`); a person writing a recipe knows its fields, not those types. Every such
//! error is rewritten here into the field's dotted path, what went wrong, what the field
//! accepts and an example line.

use serde_json::Value;

use crate::error::RecipeError;
use crate::recipe::help::{Help, one_of};

/// The help of a field, by its dotted path with list indices written `[]`
/// (`model.hidden[]`) and `[ops]` entries as `ops.*`: each table's module says it of its
/// fields.
fn field_help(path: &str) -> Option<Help> {
    let (table, field) = path.split_once('.').unwrap_or((path, ""));
    match table {
        "loss_scale" => super::loss_scale::field_help(field),
        "model" => super::model::field_help(field),
        "dataset" => super::dataset::field_help(field),
        "optimizer" => super::optimizer::field_help(field),
        _ => super::field_help(path),
    }
}

/// The help of the field at `path` (`model.hidden[1]`, `ops.linear`, ...).
fn help_at(path: &str) -> Option<Help> {
    let mut key = String::with_capacity(path.len());
    let mut in_index = false;
    for c in path.chars() {
        match c {
            '[' => {
                in_index = true;
                key.push_str("[]");
            }
            ']' => in_index = false,
            _ if in_index => {}
            _ => key.push(c),
        }
    }
    if key.starts_with("ops.") {
        key = "ops.*".into();
    }
    field_help(&key)
}

/// A path segment: a table key or a list index.
#[derive(Debug, Clone, PartialEq)]
enum Step {
    Key(String),
    Index(usize),
}

fn steps_of(path: &serde_path_to_error::Path) -> Vec<Step> {
    use serde_path_to_error::Segment;
    path.iter()
        .filter_map(|segment| match segment {
            Segment::Map { key } => Some(Step::Key(key.clone())),
            Segment::Seq { index } => Some(Step::Index(*index)),
            Segment::Enum { .. } | Segment::Unknown => None,
        })
        .collect()
}

/// The dotted path of `steps` under `prefix`: `model` and `hidden`, `1` make `model.hidden[1]`.
fn dotted(prefix: &str, steps: &[Step]) -> String {
    let mut path = prefix.to_string();
    for step in steps {
        match step {
            Step::Key(key) if path.is_empty() => path.push_str(key),
            Step::Key(key) => {
                path.push('.');
                path.push_str(key);
            }
            Step::Index(i) => path.push_str(&format!("[{i}]")),
        }
    }
    path
}

fn value_at<'v>(document: &'v Value, steps: &[Step]) -> Option<&'v Value> {
    steps.iter().try_fold(document, |node, step| match step {
        Step::Key(key) => node.get(key),
        Step::Index(i) => node.get(i),
    })
}

/// A value as a recipe writes it, for "got ...".
fn describe(value: &Value) -> String {
    match value {
        Value::Null => "nothing".into(),
        Value::Bool(b) => format!("`{b}`"),
        Value::Number(n) => format!("`{n}`"),
        Value::String(s) => format!("the text {}", shorten(&format!("{s:?}"))),
        Value::Array(items) if !items.is_empty() && items.iter().all(Value::is_object) => {
            "an array of tables (`[[...]]` where one `[...]` table goes)".into()
        }
        Value::Array(items) => format!(
            "an array `{}`",
            shorten(&serde_json::to_string(items).unwrap_or_default())
        ),
        Value::Object(_) => "a table".into(),
    }
}

fn shorten(text: &str) -> String {
    const MAX: usize = 60;
    if text.chars().count() <= MAX {
        text.to_string()
    } else {
        let head: String = text.chars().take(MAX).collect();
        format!("{head}...")
    }
}

/// serde's own words for an unexpected value (`string "x"`, `integer `5``, `map`), for a
/// value that cannot be looked up in the document.
fn describe_unexpected(serde: &str) -> String {
    let serde = serde.trim();
    let ticked = |rest: &str| format!("`{}`", rest.trim().trim_matches('`'));
    if let Some(rest) = serde.strip_prefix("string ") {
        format!("the text {}", shorten(rest.trim()))
    } else if let Some(rest) = serde
        .strip_prefix("integer ")
        .or_else(|| serde.strip_prefix("floating point "))
        .or_else(|| serde.strip_prefix("boolean "))
    {
        ticked(rest)
    } else {
        match serde {
            "map" => "a table".into(),
            "sequence" => "an array".into(),
            "unit" | "null" | "unit value" => "nothing".into(),
            other => format!("`{other}`"),
        }
    }
}

/// serde's "expected ..." in words, for a field without help (a safety net: every field of
/// a recipe has help).
fn plain_expected(expected: &str) -> String {
    let expected = expected.trim();
    match expected {
        "usize" | "u64" | "u32" | "u16" | "u8" => "a whole number, 0 or more".into(),
        "i64" | "i32" | "isize" => "a whole number".into(),
        "f64" | "f32" => "a number".into(),
        "a boolean" | "bool" => "`true` or `false`".into(),
        "a string" | "path string" | "a borrowed string" | "char" => "text in quotes".into(),
        "a sequence" => "an array".into(),
        _ if expected.starts_with("one of ") => {
            format!("one of {}", &expected["one of ".len()..])
        }
        _ if expected.starts_with('`') => expected.to_string(),
        // A map, a struct, an enum: what a table holds.
        _ => "a table".into(),
    }
}

/// The names serde lists after "expected" (`one of `a`, `b``, `a` or `b`).
fn listed_names(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// The closest name to `name` among `names`, if it is close: a typo, a prefix.
fn closest<'a>(name: &str, names: &'a [String]) -> Option<&'a str> {
    let name = name.to_ascii_lowercase();
    names
        .iter()
        .map(|candidate| (strsim::levenshtein(&name, candidate), candidate))
        .filter(|(distance, candidate)| {
            let near = match candidate.len() {
                0..=4 => 1,
                5..=8 => 2,
                _ => 3,
            };
            *distance <= near
                || (name.len() >= 3
                    && (candidate.starts_with(&name) || name.starts_with(candidate.as_str())))
        })
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate.as_str())
}

/// The settings of each kind of a tagged table.
const KIND_FIELDS: [(&str, &str, &[&str]); 6] = [
    ("model", "mlp", &["hidden"]),
    ("model", "conv", &["channels", "kernel_size", "hidden"]),
    (
        "model",
        "transformer_lm",
        &["d_model", "heads", "layers", "d_ff", "context"],
    ),
    (
        "optimizer",
        "adam",
        &[
            "lr",
            "weight_decay",
            "beta1",
            "beta2",
            "epsilon",
            "state",
            "master",
        ],
    ),
    (
        "optimizer",
        "adamw",
        &[
            "lr",
            "weight_decay",
            "beta1",
            "beta2",
            "epsilon",
            "state",
            "master",
        ],
    ),
    (
        "optimizer",
        "sgd",
        &[
            "lr",
            "weight_decay",
            "momentum",
            "nesterov",
            "state",
            "master",
        ],
    ),
];

/// The kind of `table` other than `kind` that takes `field`: `momentum` is `sgd`'s.
fn other_kind_of(table: &str, kind: &str, field: &str) -> Option<&'static str> {
    KIND_FIELDS
        .iter()
        .find(|(t, k, fields)| *t == table && *k != kind && fields.contains(&field))
        .map(|(_, k, _)| *k)
}

/// `e.g. <line>` for the field at `path`, or nothing.
fn example(path: &str) -> String {
    help_at(path)
        .map(|h| format!("; e.g. {}", h.example))
        .unwrap_or_default()
}

/// Where a table is, in the words of a message: `the top level`, `[model]`, `[model] of kind
/// `mlp``.
fn table_name(table: &str, kind: Option<&str>) -> String {
    let name = if table.is_empty() {
        "the top level of the recipe".to_string()
    } else {
        format!("[{table}]")
    };
    match kind {
        Some(kind) => format!("{name} of kind `{kind}`"),
        None => name,
    }
}

/// A deserialization error as a field error in the recipe's words. `document` is the value
/// that was deserialized, `prefix` the dotted path it sits at (empty for the whole recipe)
/// and `kind` the kind of a tagged table (`[model]`, `[optimizer]`) read as its settings.
pub(crate) fn describe_error(
    document: &Value,
    prefix: &str,
    kind: Option<&str>,
    err: &serde_path_to_error::Error<serde_json::Error>,
) -> RecipeError {
    let mut steps = steps_of(err.path());
    // serde reads a struct or a tagged table from an array too (`[[model]]`), and then
    // fails inside it: the mistake is the array, where the recipe wants a table or a value.
    if let Some(end) = (1..steps.len()).find(|&end| {
        matches!(steps[end], Step::Index(_))
            && matches!(value_at(document, &steps[..end]), Some(Value::Array(_)))
            && help_at(&dotted(prefix, &steps[..end]))
                .is_some_and(|h| !h.accepted.contains("array"))
    }) {
        steps.truncate(end);
        let path = dotted(prefix, &steps);
        let accepted = help_at(&path)
            .map(|h| h.accepted.into_owned())
            .unwrap_or_default();
        let got = value_at(document, &steps).map(describe).unwrap_or_default();
        return RecipeError::new(
            &path,
            format!("expected {accepted}, got {got}{}", example(&path)),
        );
    }
    let path = dotted(prefix, &steps);
    let message = err.inner().to_string().replace('\n', " ");
    let got = || {
        value_at(document, &steps)
            .map(describe)
            .unwrap_or_else(|| "another value".into())
    };

    if let Some(rest) = message.strip_prefix("missing field `") {
        let field = rest.split('`').next().unwrap_or_default();
        let full = dotted(&path, &[Step::Key(field.to_string())]);
        let accepted = help_at(&full)
            .map(|h| format!(": {}", h.accepted))
            .unwrap_or_default();
        return RecipeError::new(
            &full,
            format!(
                "missing: {} needs `{field}`{accepted}{}",
                table_name(&path, kind),
                example(&full)
            ),
        );
    }

    if let Some(rest) = message.strip_prefix("unknown field `") {
        let field = rest.split('`').next().unwrap_or_default();
        // The path may already end with the unknown key.
        let (full, table) = match steps.last() {
            Some(Step::Key(last)) if last == field => {
                (path.clone(), dotted(prefix, &steps[..steps.len() - 1]))
            }
            _ => (dotted(&path, &[Step::Key(field.to_string())]), path.clone()),
        };
        let names = rest
            .split_once(", expected ")
            .map(|(_, expected)| listed_names(expected))
            .unwrap_or_default();
        let accepted = if names.is_empty() {
            "no fields".to_string()
        } else {
            names
                .iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let suggestion = closest(field, &names)
            .map(|name| {
                let line = dotted(&table, &[Step::Key(name.to_string())]);
                format!("; did you mean `{name}`?{}", example(&line))
            })
            .or_else(|| {
                let owner = other_kind_of(&table, kind?, field)?;
                Some(format!(
                    "; `{field}` belongs to kind `{owner}`; e.g. kind = \"{owner}\" under [{table}]"
                ))
            })
            .unwrap_or_default();
        return RecipeError::new(
            full,
            format!(
                "unknown field; {} accepts {accepted}{suggestion}",
                table_name(&table, kind)
            ),
        );
    }

    if let Some(rest) = message.strip_prefix("unknown variant `") {
        let name = rest.split('`').next().unwrap_or_default();
        let names = rest
            .split_once(", expected ")
            .map(|(_, expected)| listed_names(expected))
            .unwrap_or_default();
        let accepted = help_at(&path)
            .map(|h| h.accepted.into_owned())
            .unwrap_or_else(|| {
                let names: Vec<&str> = names.iter().map(String::as_str).collect();
                one_of(&names)
            });
        let suggestion = closest(name, &names)
            .map(|n| format!("; did you mean `{n}`?"))
            .unwrap_or_default();
        return RecipeError::new(
            &path,
            format!(
                "unknown value {}; accepted: {accepted}{suggestion}{}",
                shorten(&format!("{name:?}")),
                example(&path)
            ),
        );
    }

    for (prefix_words, is_type) in [("invalid type: ", true), ("invalid value: ", false)] {
        let Some(rest) = message.strip_prefix(prefix_words) else {
            continue;
        };
        let (unexpected, expected) = rest.split_once(", expected ").unwrap_or((rest, ""));
        let got = value_at(document, &steps)
            .map(describe)
            .unwrap_or_else(|| describe_unexpected(unexpected));
        let accepted = help_at(&path)
            .map(|h| h.accepted.into_owned())
            .unwrap_or_else(|| plain_expected(expected));
        // A float where a whole number goes says so: `1.5` looks like a number.
        let why = match (is_type, value_at(document, &steps)) {
            (true, Some(Value::Number(n))) if n.is_f64() && accepted.contains("whole number") => {
                " (not a whole number)"
            }
            (false, Some(Value::Number(_))) => " (out of range)",
            _ => "",
        };
        return RecipeError::new(
            &path,
            format!("expected {accepted}, got {got}{why}{}", example(&path)),
        );
    }

    // The recipe types' own messages (a policy, a loss-scale preset or rule that does not
    // parse) already speak the recipe's words; the example shows a line that works.
    let field = if path.is_empty() {
        "recipe".to_string()
    } else {
        path.clone()
    };
    let _ = got;
    RecipeError::new(field, format!("{message}{}", example(&path)))
}

/// Where a TOML syntax error is: the dotted field path of the key on the error's line (under
/// the table the line is in), or the table of a table header line; empty when the line names
/// no key.
pub(crate) fn toml_field_at(text: &str, offset: usize) -> String {
    let offset = offset.min(text.len());
    let line_start = text[..offset].rfind('\n').map_or(0, |i| i + 1);
    let line_end = text[offset..].find('\n').map_or(text.len(), |i| offset + i);
    let line = text[line_start..line_end].trim();
    let header = |line: &str| -> Option<String> {
        let inner = line.strip_prefix('[')?;
        let inner = inner.split(']').next()?.trim_start_matches('[').trim();
        (!inner.is_empty()).then(|| unquote_key(inner))
    };
    if line.starts_with('[') {
        return header(line).unwrap_or_default();
    }
    let table = text[..line_start]
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| l.starts_with('['))
        .and_then(header)
        .unwrap_or_default();
    let Some((key, _)) = line.split_once('=') else {
        return table;
    };
    let key = unquote_key(key.trim());
    if key.is_empty() || key.starts_with('#') {
        return table;
    }
    if table.is_empty() {
        key
    } else {
        format!("{table}.{key}")
    }
}

/// A TOML key as the field path names it: `"model" . kind` is `model.kind`.
fn unquote_key(key: &str) -> String {
    key.split('.')
        .map(|part| part.trim().trim_matches(['"', '\'']))
        .collect::<Vec<_>>()
        .join(".")
}

/// A TOML syntax error as a field error: the field of the line when one is named, the line
/// and column, the parser's message, and an example line for the field.
pub(crate) fn toml_syntax_error(text: &str, err: &toml::de::Error) -> RecipeError {
    let message = err.message().replace('\n', " ");
    let mut message = message.trim().trim_end_matches('.').to_string();
    // The parser reads integers through i128 and says so; a recipe's author wrote a number
    // beyond TOML's integers.
    if message.contains(" as i128") || message.contains("integer number overflowed") {
        message = format!(
            "whole number out of range; TOML's whole numbers go from {} to {}",
            i64::MIN,
            i64::MAX
        );
    }
    let Some(span) = err.span() else {
        return RecipeError::new("", format!("TOML syntax error: {message}"));
    };
    let before = &text[..span.start.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
    let field = toml_field_at(text, span.start);
    RecipeError::new(
        &field,
        format!(
            "TOML syntax error at line {line}, column {column}: {message}{}",
            example(&field)
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_field_of_a_toml_line_is_found_under_its_table() {
        let text = "seed = 1\n[model]\nkind = \"mlp\"\nhidden = [1,\n[optimizer]\n";
        assert_eq!(toml_field_at(text, 2), "seed");
        assert_eq!(
            toml_field_at(text, text.find("hidden").unwrap() + 3),
            "model.hidden"
        );
        assert_eq!(
            toml_field_at(text, text.find("[optimizer]").unwrap()),
            "optimizer"
        );
        assert_eq!(toml_field_at("[a.b]\n\"c\" = 1", 8), "a.b.c");
    }

    #[test]
    fn every_field_of_the_example_recipe_has_help() {
        let value = serde_json::to_value(crate::Recipe::example().explicit().unwrap()).unwrap();
        fn walk(path: &str, value: &Value) {
            assert!(help_at(path).is_some(), "no help for {path:?}");
            match value {
                Value::Object(map) => {
                    for (k, v) in map {
                        walk(&dotted(path, &[Step::Key(k.clone())]), v)
                    }
                }
                Value::Array(items) => {
                    for (i, v) in items.iter().enumerate() {
                        walk(&dotted(path, &[Step::Index(i)]), v)
                    }
                }
                _ => {}
            }
        }
        walk("", &value);
    }

    #[test]
    fn close_names_are_suggested() {
        let names: Vec<String> = ["epochs", "steps", "seed"].map(String::from).to_vec();
        assert_eq!(closest("epochz", &names), Some("epochs"));
        assert_eq!(closest("step", &names), Some("steps"));
        assert_eq!(closest("completely_else", &names), None);
    }
}
