//! Using a trained model: `mpric evaluate` ([`evaluate`]), `mpric predict` ([`predict`], on
//! inputs read by [`inputs`]) and `mpric export` ([`export`]). Each starts from a checkpoint
//! that proves itself against the recipe, as `train --resume` demands ([`Trained::open`]),
//! and runs the model at the training policy or another one.

pub mod evaluate;
pub mod export;
pub mod inputs;
pub mod predict;

use std::path::{Path, PathBuf};

use burn::tensor::backend::Backend;
use burn_mpric::{MixedPrecision, MpDevice, Policy, ResolvedPolicy};

use crate::backend::{BackendTask, dispatch, mp_device};
use crate::checkpoint::{self, Checkpoint, Rejection, TrainState};
use crate::error::Error;
use crate::models::Model;
use crate::plan::Plan;
use crate::recipe::BackendName;
use crate::schema::Schema;

/// A checkpoint of a recipe's run that verified, with what its model reads and gives.
///
/// ```
/// # let dir = std::env::temp_dir().join(format!("mpric-doc-trained-{}", std::process::id()));
/// # let _ = std::fs::remove_dir_all(&dir);
/// use burn_mpric_train::infer::Trained;
/// use burn_mpric_train::{Plan, Recipe, train};
///
/// let mut recipe = Recipe::example();
/// recipe.output = dir.clone();
/// let plan = Plan::new(recipe, "doc")?;
/// assert!(Trained::open(&plan, None).unwrap_err().to_string().contains("no checkpoint"));
/// train(&plan, &Default::default())?;
/// let trained = Trained::open(&plan, None)?;
/// assert_eq!(trained.checkpoint.step, 20);
/// assert_eq!(trained.schema, plan.schema());
/// assert!(Trained::open(&plan, Some("step-7")).is_err());
/// # std::fs::remove_dir_all(&dir).unwrap();
/// # Ok::<(), burn_mpric_train::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Trained {
    /// The checkpoint folder.
    pub checkpoint: Checkpoint,
    /// Its run state.
    pub state: TrainState,
    /// What its model reads and gives (saved with the checkpoint, or from the recipe's data
    /// for checkpoints written before it was saved).
    pub schema: Schema,
}

impl Trained {
    /// The checkpoint `which` (`step-N`, `N`, or a checkpoint folder) of the run in `plan`'s
    /// output folder, or the newest one that verifies; a checkpoint that fails verification
    /// or was written by a run of another recipe is refused with the reason.
    pub fn open(plan: &Plan, which: Option<&str>) -> Result<Self, Error> {
        let output = &plan.recipe.output;
        let candidates = match which {
            Some(text) => vec![named(output, text)?],
            None => {
                let all = checkpoint::list(output)?;
                if all.is_empty() {
                    return Err(Error::Input(format!(
                        "{}: no checkpoint in {}; train the recipe first (mpric train {})",
                        plan.label,
                        checkpoint::checkpoints_dir(output).display(),
                        plan.label
                    )));
                }
                all.into_iter().rev().collect()
            }
        };
        let count = candidates.len();
        let mut refused: Vec<String> = Vec::new();
        for candidate in candidates {
            match candidate.verify_model_for(plan) {
                Ok(verified) => {
                    for skipped in &refused {
                        eprintln!("note: skipped {skipped}");
                    }
                    return Ok(Trained {
                        schema: verified
                            .state
                            .schema
                            .clone()
                            .unwrap_or_else(|| plan.schema()),
                        state: verified.state,
                        checkpoint: candidate,
                    });
                }
                Err(Rejection::Incompatible(err)) => {
                    let reason = match err {
                        Error::Resume(message) => message,
                        other => other.to_string(),
                    };
                    return Err(Error::Input(format!(
                        "{}: not a checkpoint of {}: {reason}",
                        candidate.dir.display(),
                        plan.label
                    )));
                }
                Err(Rejection::Invalid(reason)) => {
                    refused.push(format!("{}/{reason}", candidate.dir.display()));
                }
            }
        }
        Err(Error::Input(match count {
            1 => format!("{}; the checkpoint fails verification", refused[0]),
            n => format!(
                "{}; none of the {n} checkpoints passes verification",
                refused[0]
            ),
        }))
    }
}

/// The checkpoint a `--checkpoint` argument names.
fn named(output: &Path, text: &str) -> Result<Checkpoint, Error> {
    let all = checkpoint::list(output)?;
    let step = text
        .strip_prefix("step-")
        .unwrap_or(text)
        .parse::<u64>()
        .ok();
    let found = match step {
        Some(step) => all.iter().find(|c| c.step == step).cloned(),
        None => {
            let path = PathBuf::from(text);
            let canonical = path.canonicalize().ok();
            all.iter()
                .find(|c| canonical.is_some() && c.dir.canonicalize().ok() == canonical)
                .cloned()
                .or_else(|| {
                    let step = path
                        .file_name()?
                        .to_str()?
                        .strip_prefix("step-")?
                        .parse()
                        .ok()?;
                    path.is_dir().then_some(Checkpoint { dir: path, step })
                })
        }
    };
    found.ok_or_else(|| {
        let have: Vec<String> = all.iter().map(|c| format!("step-{}", c.step)).collect();
        Error::Input(format!(
            "--checkpoint {text}: no such checkpoint in {}; {}",
            checkpoint::checkpoints_dir(output).display(),
            if have.is_empty() {
                "the run has none".to_string()
            } else {
                format!("the run has {}", have.join(", "))
            }
        ))
    })
}

/// Work on a trained model, generic over the backend.
pub trait ModelTask {
    /// What the task returns.
    type Output;
    /// Runs on the loaded model and its device.
    fn run<B: Backend>(
        self,
        model: Model<MixedPrecision<B>>,
        device: &MpDevice<B>,
    ) -> Result<Self::Output, Error>;
}

/// Loads a trained model on the recipe's backend (its first device) at `policy` (the
/// training run's when `None`) and runs `task` on it; returns what it gave and the policy as the
/// device resolved it. A policy the device cannot run is refused naming `--policy`.
pub fn with_model<T: ModelTask>(
    plan: &Plan,
    trained: &Trained,
    policy: Option<Policy>,
    task: T,
) -> Result<(T::Output, ResolvedPolicy), Error> {
    struct OnBackend<'a, T> {
        plan: &'a Plan,
        trained: &'a Trained,
        policy: Option<Policy>,
        task: T,
    }
    impl<T: ModelTask> BackendTask for OnBackend<'_, T> {
        type Output = Result<(T::Output, ResolvedPolicy), Error>;
        fn run<B: Backend>(self, device: B::Device, backend: BackendName) -> Self::Output {
            // The run's own policy unless another is asked for: the model as it trained.
            let mut recipe = self.plan.recipe.clone();
            recipe.policy = self.policy.unwrap_or(self.trained.state.recipe.policy);
            let settings = recipe.settings().map_err(|e| e.in_file(&self.plan.label))?;
            let device = mp_device::<B>(device, settings, backend).map_err(|e| {
                match (self.policy, e.field.as_str()) {
                    (Some(policy), "policy") => {
                        Error::Input(format!("--policy {policy}: {}", e.message))
                    }
                    _ => e.in_file(&self.plan.label),
                }
            })?;
            let model =
                Model::<MixedPrecision<B>>::init(&recipe.model, self.plan.data.dims(), &device);
            let model = self.trained.checkpoint.load_model(model, &device)?;
            let out = self.task.run(model, &device)?;
            Ok((out, device.policy()))
        }
    }
    dispatch(
        &plan.recipe.backend,
        OnBackend {
            plan,
            trained,
            policy,
            task,
        },
    )
    .map_err(|e| e.in_file(&plan.label))?
}

/// Parses a `--policy` argument.
pub(crate) fn parse_policy(text: Option<&str>) -> Result<Option<Policy>, Error> {
    text.map(|t| {
        t.parse::<Policy>()
            .map_err(|e| Error::Input(format!("--policy {t}: {e}")))
    })
    .transpose()
}
