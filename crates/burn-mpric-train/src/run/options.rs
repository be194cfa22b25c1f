//! What a run is asked to do ([`TrainOptions`]) and what it did ([`Summary`]): the loop
//! (`train.rs`) takes the one and the history (`history.rs`) makes the other.

use std::path::PathBuf;

use burn_mpric::ResolvedPolicy;

use crate::report::metrics::{EvalRow, StepRow};
use crate::run::processes::Processes;

/// How to run a plan.
///
/// ```
/// use burn_mpric_train::TrainOptions;
///
/// let options = TrainOptions { until: Some(10), ..TrainOptions::default() };
/// assert!(!options.resume);
/// ```
#[derive(Debug, Clone, Default)]
pub struct TrainOptions {
    /// Continue from the latest checkpoint in the output folder.
    pub resume: bool,
    /// Start over in an output folder that already holds a run (its checkpoints and metrics
    /// are removed).
    pub overwrite: bool,
    /// Stop after this step (a checkpoint is written there); `--resume` continues later.
    pub until: Option<u64>,
    /// Show a progress bar when stderr is a terminal.
    pub progress: bool,
    /// Print a line to stderr at each checkpoint (when no progress bar is shown).
    pub log: bool,
    /// This process's place in a multi-process run; `None` for a run of one process.
    pub processes: Option<Processes>,
}

/// What a run did.
///
/// ```
/// use burn_mpric_train::{Plan, Recipe, train};
///
/// let mut recipe = Recipe::example();
/// recipe.output = std::env::temp_dir().join(format!("mpric-doc-summary-{}", std::process::id()));
/// # let _ = std::fs::remove_dir_all(&recipe.output);
/// let summary = train(&Plan::new(recipe.clone(), "r")?, &Default::default())?;
/// assert_eq!((summary.start_step, summary.step, summary.total_steps), (0, 20, 20));
/// assert_eq!(summary.skipped, 0);
/// # std::fs::remove_dir_all(&recipe.output).unwrap();
/// # Ok::<(), burn_mpric_train::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Summary {
    /// The output folder.
    pub output: PathBuf,
    /// The policy as the device resolved it.
    pub policy: ResolvedPolicy,
    /// The step the run started from (0, or the checkpoint it resumed).
    pub start_step: u64,
    /// Steps done (the run's position now).
    pub step: u64,
    /// Steps of the whole run.
    pub total_steps: u64,
    /// The last step's metrics.
    pub last: Option<StepRow>,
    /// The last held-out evaluation.
    pub eval: Option<EvalRow>,
    /// Skipped steps in the whole run.
    pub skipped: u64,
    /// Mean training loss over the last 10% of the steps done (at least one step).
    pub tail_loss: Option<f32>,
    /// Wall time of this invocation, seconds.
    pub wall_s: f64,
}
