//! Which recipe changes a resumed run accepts: how long it runs, how often it checkpoints,
//! when it stops on skipped steps, and where it writes. Anything else would make the
//! continuation a different run.

use serde_json::Value;

use crate::checkpoint::manifest::FileDigest;
use crate::error::Error;
use crate::plan::Plan;
use crate::recipe::Recipe;
use crate::recipe::document::field_path;

/// Fields a resumed run may change: how long it runs, how often it checkpoints, when it stops
/// on a run of skipped steps, and where it writes.
const RESUMABLE_CHANGES: [&str; 5] = [
    "steps",
    "epochs",
    "checkpoint_every",
    "max_consecutive_skips",
    "output",
];

/// Errors unless `current` is `saved` up to [`RESUMABLE_CHANGES`], naming the first field
/// that differs.
/// The fields that make a trained model what it is: its architecture, the data it learned
/// (with its split, drawn from the seed). Evaluating, predicting and exporting may change
/// everything else (the backend, the policy, the optimizer).
const MODEL_FIELDS: [&str; 3] = ["model", "dataset", "seed"];

pub(crate) fn compatible(saved: &Recipe, current: &Recipe) -> Result<(), Error> {
    compare(
        saved,
        current,
        |key| !RESUMABLE_CHANGES.contains(&key),
        "a resumed run may change only steps, epochs, checkpoint_every, max_consecutive_skips and output",
    )
}

/// Whether a checkpoint of `saved` holds the model of `current`, for evaluation, prediction
/// and export.
pub(crate) fn same_model(saved: &Recipe, current: &Recipe) -> Result<(), Error> {
    compare(
        saved,
        current,
        |key| MODEL_FIELDS.contains(&key),
        "its model, dataset and seed must be the run's",
    )
}

fn compare(
    saved: &Recipe,
    current: &Recipe,
    compared: impl Fn(&str) -> bool,
    hint: &str,
) -> Result<(), Error> {
    let strip = |recipe: &Recipe| -> Result<Value, Error> {
        let mut value = serde_json::to_value(recipe)
            .map_err(|e| Error::Internal(format!("recipe is not serializable: {e}")))?;
        if let Value::Object(map) = &mut value {
            map.retain(|key, _| compared(key));
        }
        Ok(value)
    };
    let explicit = |recipe: &Recipe| {
        recipe
            .explicit()
            .map_err(|e| Error::Resume(format!("the recipe: {e}")))
    };
    let (a, b) = (strip(&explicit(saved)?)?, strip(&explicit(current)?)?);
    match first_difference(&a, &b, String::new()) {
        None => Ok(()),
        Some((field, was, now)) => Err(Error::Resume(format!(
            "the recipe's `{field}` is {now} but the run was started with {was}; use the recipe the run started with ({hint})"
        ))),
    }
}

/// Errors when the data files a checkpoint was trained on (`saved`, from its manifest)
/// differ from the ones `plan` loaded.
pub(crate) fn same_data(saved: Option<&FileDigest>, plan: &Plan) -> Result<(), Error> {
    let Some(saved) = saved else {
        return Ok(());
    };
    match plan.data.digest() {
        Some(now) if now == saved => Ok(()),
        now => Err(Error::Resume(format!(
            "the data of `{}` changed since the checkpoint ({} bytes, SHA-256 {}... then; {} now); use the data the run started with, or start a new run in another output folder",
            plan.recipe.dataset.label(),
            saved.bytes,
            &saved.sha256[..saved.sha256.len().min(12)],
            now.map_or("no file".to_string(), |d| format!(
                "{} bytes, SHA-256 {}...",
                d.bytes,
                &d.sha256[..d.sha256.len().min(12)]
            ))
        ))),
    }
}

fn first_difference(a: &Value, b: &Value, path: String) -> Option<(String, String, String)> {
    let show = |v: Option<&Value>| v.map_or("(not set)".to_string(), Value::to_string);
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            keys.into_iter().find_map(|key| {
                let sub = field_path(&path, key);
                match (x.get(key), y.get(key)) {
                    (Some(u), Some(v)) => first_difference(u, v, sub),
                    (u, v) => Some((sub, show(u), show(v))),
                }
            })
        }
        _ if a == b => None,
        _ => Some((path, show(Some(a)), show(Some(b)))),
    }
}
