//! A recipe document as parsed, before it is deserialized: TOML values turned into the JSON
//! value the recipe types deserialize from.
//!
//! TOML has `nan` and `inf`; JSON has neither, and `serde_json` turns them into `null`, which
//! reads as "not set" for an optional field. Every number of a recipe must be finite, so a
//! non-finite one is refused here, with its field path.

use serde_json::{Map, Number, Value};

use crate::error::RecipeError;

/// The dotted path of field `key` under `parent` (empty for the whole document):
/// `optimizer` and `lr` make `optimizer.lr`. Recipes, checkpoint records and a run's identity
/// name their fields this way.
pub(crate) fn field_path(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

/// Converts a TOML value to JSON, refusing non-finite floats; `path` is the dotted field path
/// of `value` (empty for the whole document).
pub fn from_toml(value: toml::Value, path: &str) -> Result<Value, RecipeError> {
    let child = |key: &str| field_path(path, key);
    Ok(match value {
        toml::Value::String(s) => Value::String(s),
        toml::Value::Integer(i) => Value::Number(i.into()),
        toml::Value::Float(f) => Value::Number(Number::from_f64(f).ok_or_else(|| {
            // As TOML spells them: nan, inf, -inf.
            let shown = if f.is_nan() {
                "nan".into()
            } else {
                f.to_string()
            };
            RecipeError::new(path, format!("must be a finite number, got {shown}"))
        })?),
        toml::Value::Boolean(b) => Value::Bool(b),
        toml::Value::Datetime(d) => Value::String(d.to_string()),
        toml::Value::Array(items) => Value::Array(
            items
                .into_iter()
                .enumerate()
                .map(|(i, item)| from_toml(item, &format!("{path}[{i}]")))
                .collect::<Result<_, _>>()?,
        ),
        toml::Value::Table(table) => Value::Object(
            table
                .into_iter()
                .map(|(key, item)| {
                    let field = child(&key);
                    from_toml(item, &field).map(|v| (key, v))
                })
                .collect::<Result<Map<_, _>, _>>()?,
        ),
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn non_finite_numbers_are_refused_with_their_path() {
        use crate::recipe::document::from_toml;

        let table: toml::Value = toml::from_str("steps = 5\n[optimizer]\nlr = nan").unwrap();
        let err = from_toml(table, "").unwrap_err();
        assert_eq!(
            err.to_string(),
            "optimizer.lr: must be a finite number, got nan"
        );

        let ok: toml::Value = toml::from_str("lr = 0.1\nhidden = [8, 8]").unwrap();
        assert_eq!(
            from_toml(ok, "").unwrap(),
            serde_json::json!({"lr": 0.1, "hidden": [8, 8]})
        );
    }
}
