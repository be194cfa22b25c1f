//! `--set key=value` overrides, applied to the parsed document before it is deserialized,
//! so that a wrong type is reported exactly like the same mistake written in the file.

use serde_json::{Map, Value};

use crate::error::Error;

/// Parses one `key=value` override: the key is a dotted path (`optimizer.lr`), the value is
/// read as a TOML value (`20`, `0.01`, `true`, `[32, 32]`, `"text"`) and, when it is not
/// one, taken as a plain string (`mixed_f16`, `runs/x`).
pub fn parse_override(arg: &str) -> Result<(Vec<String>, Value), Error> {
    let fail = |message: &str| Error::Override {
        arg: arg.escape_debug().to_string(),
        message: message.to_string(),
    };
    if arg.contains(['\n', '\r']) {
        return Err(fail(
            "an override is one line; give each key=value its own --set",
        ));
    }
    let (key, raw) = arg
        .split_once('=')
        .ok_or_else(|| fail("expected key=value, e.g. --set optimizer.lr=0.01"))?;
    let path: Vec<String> = key
        .trim()
        .split('.')
        .map(|s| s.trim().to_string())
        .collect();
    if path.iter().any(|segment| segment.is_empty()) {
        return Err(fail(
            "the key must be a dotted field path such as steps or optimizer.lr",
        ));
    }
    let raw = raw.trim();
    let value = match toml::from_str::<toml::Table>(&format!("v = {raw}")) {
        Ok(mut table) => match table.remove("v") {
            Some(v) => {
                crate::recipe::document::from_toml(v, key.trim()).map_err(|e| fail(&e.message))?
            }
            None => Value::String(raw.to_string()),
        },
        Err(_) => Value::String(raw.to_string()),
    };
    Ok((path, value))
}

/// Applies `key=value` overrides to a parsed recipe document, in order.
pub fn apply_overrides(document: &mut Value, overrides: &[String]) -> Result<(), Error> {
    for arg in overrides {
        let (path, value) = parse_override(arg)?;
        let not_a_table = |depth: usize| Error::Override {
            arg: arg.clone(),
            message: if depth == 0 {
                "the recipe is not a table".to_string()
            } else {
                format!("`{}` is not a table", path[..depth].join("."))
            },
        };
        let Some((last, parents)) = path.split_last() else {
            continue;
        };
        let mut node = &mut *document;
        for (depth, segment) in parents.iter().enumerate() {
            let Value::Object(map) = node else {
                return Err(not_a_table(depth));
            };
            node = map
                .entry(segment.clone())
                .or_insert_with(|| Value::Object(Map::new()));
        }
        let Value::Object(map) = node else {
            return Err(not_a_table(parents.len()));
        };
        map.insert(last.clone(), value);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn overrides_parse_as_toml_values_or_strings() {
        use crate::recipe::overrides::parse_override;
        use serde_json::json;

        assert_eq!(
            parse_override("steps=20").unwrap(),
            (vec!["steps".to_string()], json!(20))
        );
        assert_eq!(
            parse_override("policy=p=f32,c=bf16").unwrap().1,
            json!("p=f32,c=bf16")
        );
        assert_eq!(
            parse_override("model.hidden=[8, 8]").unwrap().1,
            json!([8, 8])
        );
        assert!(parse_override("no-equals-sign").is_err());
        assert!(parse_override("a..b=1").is_err());
        // One override per --set: a second line would otherwise be dropped silently.
        assert!(
            parse_override("steps=5\nseed=3")
                .unwrap_err()
                .to_string()
                .contains("one line")
        );
        assert!(
            parse_override("optimizer.lr=nan")
                .unwrap_err()
                .to_string()
                .contains("must be a finite number")
        );
    }

    #[test]
    fn overrides_land_at_their_path() {
        use crate::recipe::overrides::apply_overrides;
        use serde_json::json;

        let mut doc = json!({"steps": 100, "optimizer": {"lr": 0.1}});
        apply_overrides(
            &mut doc,
            &[
                "steps=20".into(),
                "optimizer.lr=0.01".into(),
                "model.kind=mlp".into(),
            ],
        )
        .unwrap();
        assert_eq!(
            doc,
            json!({"steps": 20, "optimizer": {"lr": 0.01}, "model": {"kind": "mlp"}})
        );
        assert!(apply_overrides(&mut doc, &["steps.x=1".into()]).is_err());
    }
}
