//! Per-step metrics and evaluations, written as CSV and JSON.

use std::fmt::Write as _;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::atomic::write_atomic;
use crate::error::Error;

/// One training step.
///
/// ```
/// use burn_mpric_train::report::metrics::{StepRow, csv};
///
/// let row = StepRow { step: 1, epoch: 0, lr: 0.01, loss: Some(1.1), accuracy: None, loss_scale: 1.0,
///     skipped: false, skipped_total: 0, grad_norm: None, step_ms: 2.5, overflowed: vec![], cause: None };
/// assert_eq!(csv(&[row.clone()]).lines().nth(1).unwrap(), "1,0,0.01,1.1,,1,false,0,,2.500,,");
/// let skipped = StepRow { loss: None, skipped: true, skipped_total: 1,
///     overflowed: vec!["Mlp.out.weight".into(), "Mlp.out.bias".into()], cause: Some("range".into()), ..row };
/// assert_eq!(csv(&[skipped]).lines().nth(1).unwrap(), "1,0,0.01,,,1,true,1,,2.500,range,Mlp.out.weight;Mlp.out.bias");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepRow {
    /// Step number, from 1.
    pub step: u64,
    /// Completed epochs before this step.
    pub epoch: u64,
    /// Learning rate of the step.
    pub lr: f64,
    /// Training loss of the batch (unscaled; `None` when it was not finite).
    pub loss: Option<f32>,
    /// Accuracy on the batch, where it applies.
    pub accuracy: Option<f32>,
    /// The loss scale used by this step.
    pub loss_scale: f32,
    /// Whether the step was skipped (non-finite gradients; nothing was updated).
    pub skipped: bool,
    /// Skipped steps so far, this one included.
    pub skipped_total: u64,
    /// Global gradient norm before clipping (when clipping is on and the norm is finite).
    pub grad_norm: Option<f32>,
    /// Wall time of the step in milliseconds (batch, forward, backward, update).
    pub step_ms: f64,
    /// On a skipped step, the parameters (module paths) whose gradients held inf or NaN.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub overflowed: Vec<String>,
    /// On a skipped step of a one-process run, whether the problem moves with the loss scale
    /// (`range`), the loss itself was not finite (`loss_not_finite`), or neither
    /// (`not_range`: a kernel that computes wrongly at this dtype), from one more run of the
    /// batch at a far lower scale.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
}

impl StepRow {
    /// The row without its timing, for comparing runs.
    ///
    /// ```
    /// use burn_mpric_train::report::metrics::StepRow;
    ///
    /// let a = StepRow { step: 1, epoch: 0, lr: 0.1, loss: None, accuracy: None, loss_scale: 1.0,
    ///     skipped: true, skipped_total: 1, grad_norm: None, step_ms: 1.0, overflowed: vec![], cause: None };
    /// let b = StepRow { step_ms: 9.0, ..a.clone() };
    /// assert_eq!(a.untimed(), b.untimed());
    /// ```
    pub fn untimed(&self) -> StepRow {
        StepRow {
            step_ms: 0.0,
            ..self.clone()
        }
    }
}

/// One evaluation on the held-out split.
///
/// ```
/// # let dir = std::env::temp_dir().join(format!("mpric-doc-evalrow-{}", std::process::id()));
/// # let _ = std::fs::remove_dir_all(&dir);
/// # let mut recipe = burn_mpric_train::Recipe::example();
/// # recipe.output = dir.clone();
/// # let plan = burn_mpric_train::Plan::new(recipe, "doc")?;
/// # let summary = burn_mpric_train::train(&plan, &Default::default())?;
/// let metrics: burn_mpric_train::report::metrics::MetricsFile =
///     serde_json::from_slice(&std::fs::read(dir.join("metrics.json")).unwrap()).unwrap();
/// let eval = metrics.eval.last().unwrap();
/// assert_eq!((eval.step, eval.predictions), (20, 30));
/// assert!(eval.accuracy.unwrap() > 0.5);
/// # std::fs::remove_dir_all(&dir).unwrap();
/// # Ok::<(), burn_mpric_train::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalRow {
    /// The step after which it ran.
    pub step: u64,
    /// Mean loss over the held-out predictions.
    pub loss: Option<f32>,
    /// Accuracy over them, where it applies.
    pub accuracy: Option<f32>,
    /// Predictions evaluated.
    pub predictions: usize,
}

/// The content of `metrics.json`.
///
/// ```
/// # let dir = std::env::temp_dir().join(format!("mpric-doc-metricsfile-{}", std::process::id()));
/// # let _ = std::fs::remove_dir_all(&dir);
/// # let mut recipe = burn_mpric_train::Recipe::example();
/// # recipe.output = dir.clone();
/// # let plan = burn_mpric_train::Plan::new(recipe, "doc")?;
/// # let summary = burn_mpric_train::train(&plan, &Default::default())?;
/// let metrics: burn_mpric_train::report::metrics::MetricsFile =
///     serde_json::from_slice(&std::fs::read(dir.join("metrics.json")).unwrap()).unwrap();
/// assert_eq!(metrics.steps.len(), 20);
/// assert_eq!(metrics.policy, "p=f32,c=f32,o=f32");
/// # std::fs::remove_dir_all(&dir).unwrap();
/// # Ok::<(), burn_mpric_train::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricsFile {
    /// The recipe file.
    pub recipe: String,
    /// The resolved policy.
    pub policy: String,
    /// The backend.
    pub backend: String,
    /// Steps in the whole run.
    pub total_steps: u64,
    /// One row per step done so far.
    pub steps: Vec<StepRow>,
    /// Held-out evaluations (at each checkpoint and at the end).
    pub eval: Vec<EvalRow>,
}

/// The CSV header.
///
/// ```
/// assert!(burn_mpric_train::report::metrics::CSV_HEADER.starts_with("step,epoch,lr,loss"));
/// ```
pub const CSV_HEADER: &str = "step,epoch,lr,loss,accuracy,loss_scale,skipped,skipped_total,grad_norm,step_ms,cause,overflowed";

fn opt(value: Option<f32>) -> String {
    value.map(|v| v.to_string()).unwrap_or_default()
}

/// The overflowed parameters as one CSV cell: names joined by `;`, quoted where a name holds
/// a comma or a quote.
fn overflowed_cell(names: &[String]) -> String {
    let cell = names.join(";");
    if cell.contains([',', '"', '\n']) {
        format!("\"{}\"", cell.replace('"', "\"\""))
    } else {
        cell
    }
}

/// The rows as CSV text (header first; empty cells for values that do not apply).
///
/// ```
/// use burn_mpric_train::report::metrics::{csv, CSV_HEADER};
///
/// assert_eq!(csv(&[]), format!("{CSV_HEADER}\n"));
/// ```
pub fn csv(rows: &[StepRow]) -> String {
    let mut out = String::with_capacity(64 * (rows.len() + 1));
    out.push_str(CSV_HEADER);
    out.push('\n');
    for r in rows {
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{},{},{},{:.3},{},{}",
            r.step,
            r.epoch,
            r.lr,
            opt(r.loss),
            opt(r.accuracy),
            r.loss_scale,
            r.skipped,
            r.skipped_total,
            opt(r.grad_norm),
            r.step_ms,
            r.cause.as_deref().unwrap_or_default(),
            overflowed_cell(&r.overflowed)
        );
    }
    out
}

/// Writes `metrics.csv` and `metrics.json` into `dir`, each atomically.
///
/// ```
/// use burn_mpric_train::report::metrics::{write, MetricsFile};
///
/// let dir = std::env::temp_dir().join(format!("mpric-doc-metrics-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// let file = MetricsFile { recipe: "r.toml".into(), policy: "f32".into(), backend: "flex".into(),
///     total_steps: 0, steps: vec![], eval: vec![] };
/// write(&dir, &file).unwrap();
/// assert!(dir.join("metrics.csv").exists() && dir.join("metrics.json").exists());
/// # std::fs::remove_dir_all(&dir).unwrap();
/// ```
pub fn write(dir: &Path, file: &MetricsFile) -> Result<(), Error> {
    write_atomic(&dir.join("metrics.csv"), csv(&file.steps).as_bytes())?;
    let json = serde_json::to_vec_pretty(file)
        .map_err(|e| Error::Internal(format!("metrics are not serializable: {e}")))?;
    write_atomic(&dir.join("metrics.json"), &json)
}
