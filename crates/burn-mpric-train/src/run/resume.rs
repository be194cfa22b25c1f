//! Choosing the checkpoint a run resumes from: the newest one that proves itself (see
//! [`Checkpoint::verify_for`]); newer ones that do not are set aside, not deleted.

use std::path::PathBuf;

use crate::checkpoint::{self, Checkpoint, Rejection, TrainState};
use crate::error::Error;
use crate::plan::Plan;

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
///
/// A process that does not write (`writer` false: a multi-process run's other ranks)
/// chooses the same checkpoint but moves nothing.
pub(crate) fn choose(plan: &Plan, writer: bool) -> Result<Resumed, Error> {
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
                    .filter(|_| writer)
                    .map(|(c, reason)| move_aside(&c, reason))
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
fn move_aside(checkpoint: &Checkpoint, reason: String) -> Result<SetAside, Error> {
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
