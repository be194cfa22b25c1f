//! Choosing the checkpoint a run resumes from: the newest one that proves itself (see
//! [`Checkpoint::verify_for`]); newer ones that do not are set aside, not deleted.

use std::path::PathBuf;

use serde_json::Value;

use crate::checkpoint::{self, Checkpoint, Rejection, TrainState};
use crate::error::Error;
use crate::plan::Plan;
use crate::recipe::Recipe;

/// The checkpoint a run resumes from.
#[derive(Debug)]
pub(crate) struct Resumed {
    pub(crate) checkpoint: Checkpoint,
    pub(crate) state: TrainState,
    /// Newer checkpoints that failed verification, moved out of the way.
    pub(crate) set_aside: Vec<SetAside>,
}

/// A checkpoint that could not be resumed, renamed so that no later run picks it up.
#[derive(Debug, Clone)]
pub(crate) struct SetAside {
    /// Why it was refused (starting with its folder and file).
    pub(crate) reason: String,
    /// Where it is now.
    pub(crate) moved_to: PathBuf,
}

/// The newest checkpoint of the run in `plan`'s output folder that verifies against `plan`.
/// A recipe that differs from the run's is an error at once; damaged checkpoints are passed
/// over (and, when an older one serves, set aside); when none serves, the error names the
/// newest one's problem.
pub(crate) fn choose(plan: &Plan) -> Result<Resumed, Error> {
    let output = &plan.recipe.output;
    let all = checkpoint::list(output)?;
    if all.is_empty() {
        return Err(Error::Resume(format!(
            "no checkpoint in {}; start the run without --resume",
            checkpoint::checkpoints_dir(output).display()
        )));
    }
    let mut refused: Vec<(Checkpoint, String)> = Vec::new();
    for candidate in all.iter().rev() {
        match candidate.verify_for(plan) {
            Ok(verified) => {
                let set_aside = refused
                    .into_iter()
                    .map(|(c, reason)| set_aside(&c, reason))
                    .collect::<Result<_, _>>()?;
                return Ok(Resumed {
                    checkpoint: candidate.clone(),
                    state: verified.state,
                    set_aside,
                });
            }
            Err(Rejection::Incompatible(err)) => return Err(err),
            Err(Rejection::Invalid(reason)) => {
                let reason = format!("{}/{reason}", candidate.dir.display());
                refused.push((candidate.clone(), reason));
            }
        }
    }
    let (_, newest) = &refused[0];
    Err(Error::Resume(if refused.len() == 1 {
        format!("{newest}; no other checkpoint to fall back to")
    } else {
        format!(
            "{newest}; none of the {} checkpoints can be resumed",
            refused.len()
        )
    }))
}

/// Renames a refused checkpoint to `step-N.rejected` (or `.rejected-2`, ...).
fn set_aside(checkpoint: &Checkpoint, reason: String) -> Result<SetAside, Error> {
    let name = checkpoint
        .dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut moved_to = checkpoint.dir.with_file_name(format!("{name}.rejected"));
    let mut n = 2;
    while moved_to.exists() {
        moved_to = checkpoint
            .dir
            .with_file_name(format!("{name}.rejected-{n}"));
        n += 1;
    }
    std::fs::rename(&checkpoint.dir, &moved_to).map_err(|e| Error::io(&checkpoint.dir, e))?;
    Ok(SetAside { reason, moved_to })
}

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
pub(crate) fn compatible(saved: &Recipe, current: &Recipe) -> Result<(), Error> {
    let strip = |recipe: &Recipe| -> Result<Value, Error> {
        let mut value = serde_json::to_value(recipe)
            .map_err(|e| Error::Internal(format!("recipe is not serializable: {e}")))?;
        if let Value::Object(map) = &mut value {
            for key in RESUMABLE_CHANGES {
                map.remove(key);
            }
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
            "the recipe's `{field}` is {now} but the run was started with {was}; resume with the recipe the run started with (only steps, epochs, checkpoint_every and max_consecutive_skips may change)"
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
                let sub = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
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
