//! A training run's reports: each step's row, the metrics files (CSV, JSON) and the plots
//! (SVG) rewritten from the run's rows, and the mean loss of the last steps.

use std::time::Duration;

use burn_mpric::ResolvedPolicy;
use burn_mpric::scale::{SkipCause, StepOutcome};

use crate::error::Error;
use crate::plan::Plan;
use crate::report::metrics::{self, EvalRow, MetricsFile, StepRow};
use crate::report::plot;

/// The row of step `step` of epoch `epoch` at learning rate `lr`: what the scaler's step did
/// (`outcome`), the batch's accuracy, the cause of a skipped step, and the step's wall time.
pub(crate) fn step_row(
    (step, epoch, lr): (u64, u64, f64),
    outcome: &StepOutcome,
    accuracy: Option<f32>,
    cause: Option<&SkipCause>,
    took: Duration,
) -> StepRow {
    StepRow {
        step,
        epoch,
        lr,
        loss: outcome.loss.filter(|l| l.is_finite()),
        accuracy,
        loss_scale: outcome.scale_used,
        skipped: outcome.is_skipped(),
        skipped_total: outcome.stats.skipped,
        grad_norm: outcome.grad_norm.filter(|n| n.is_finite()),
        step_ms: took.as_secs_f64() * 1e3,
        overflowed: outcome
            .overflow
            .as_ref()
            .map(|o| o.params.clone())
            .unwrap_or_default(),
        cause: cause.map(|c| c.label().to_string()),
    }
}

/// The plots' title: the recipe, its model, backend and policy.
pub(crate) fn plot_title(plan: &Plan, policy: ResolvedPolicy) -> String {
    let recipe = &plan.recipe;
    format!(
        "{} ({} on {}, {})",
        plan.label,
        recipe.model.kind(),
        recipe.backend.name,
        policy
    )
}

/// Mean training loss over the last 10% of `rows` (at least one row), of the finite losses.
pub(crate) fn tail_loss(rows: &[StepRow]) -> Option<f32> {
    let tail = (rows.len() / 10).max(1);
    let losses: Vec<f32> = rows
        .iter()
        .rev()
        .take(tail)
        .filter_map(|r| r.loss)
        .collect();
    (!losses.is_empty()).then(|| losses.iter().sum::<f32>() / losses.len() as f32)
}

/// Writes the metrics files and the plots of the rows so far.
pub(crate) fn write_reports(
    plan: &Plan,
    policy: ResolvedPolicy,
    rows: &[StepRow],
    evals: &[EvalRow],
    title: &str,
) -> Result<(), Error> {
    let output = plan.recipe.output.as_path();
    metrics::write(
        output,
        &MetricsFile {
            recipe: plan.label.clone(),
            policy: policy.to_string(),
            backend: format!(
                "{} {}",
                plan.recipe.backend.name,
                plan.recipe.backend.describe_devices()
            ),
            total_steps: plan.total_steps,
            steps: rows.to_vec(),
            eval: evals.to_vec(),
        },
    )?;
    plot::write(output, rows, evals, title)
}
