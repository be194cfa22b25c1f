//! What a training run says while it runs: the progress bar and its message, the line of
//! each checkpoint, and the line of a skipped step.

use std::io::IsTerminal;

use burn_mpric::scale::{SkipCause, StepOutcome};
use indicatif::{ProgressBar, ProgressStyle};

use burn_mpric::ResolvedPolicy;

use crate::plan::Plan;
use crate::report::metrics::{EvalRow, StepRow};

/// The line a run starts with: the recipe, its steps, model, backend, devices, policy and
/// output folder.
pub(crate) fn start_line(plan: &Plan, policy: ResolvedPolicy) -> String {
    let recipe = &plan.recipe;
    format!(
        "training {}: {} steps of {} on {} {} ({policy}) -> {}",
        plan.label,
        plan.total_steps,
        recipe.model.kind(),
        recipe.backend.name,
        recipe.backend.describe_devices(),
        recipe.output.display()
    )
}

/// A bar from `start` to `total` when `show` is set and stderr is a terminal, else a hidden
/// one.
pub(crate) fn progress_bar(show: bool, start: u64, total: u64) -> ProgressBar {
    if !show || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total).with_position(start);
    if let Ok(style) = ProgressStyle::with_template(
        "[{elapsed_precise}] {wide_bar} {pos}/{len} ({eta} left) {msg}",
    ) {
        bar.set_style(style);
    }
    bar
}

fn fmt_opt(value: Option<f32>, digits: usize) -> String {
    value.map_or("-".to_string(), |v| format!("{v:.digits$}"))
}

/// The bar's message: the last step's loss, accuracy, scale and skipped steps.
pub(crate) fn progress_message(row: &StepRow) -> String {
    format!(
        "loss {} acc {} scale {} skipped {}",
        fmt_opt(row.loss, 4),
        fmt_opt(row.accuracy, 3),
        row.loss_scale,
        row.skipped_total
    )
}

/// The line of a checkpoint written: the last step's and the held-out metrics.
pub(crate) fn checkpoint_line(
    step: u64,
    total: u64,
    rows: &[StepRow],
    eval: Option<&EvalRow>,
) -> String {
    let last = rows.last();
    format!(
        "step {step}/{total}: loss {}, held-out loss {}, held-out accuracy {}, loss scale {}, skipped {} (checkpoint written)",
        fmt_opt(last.and_then(|r| r.loss), 4),
        fmt_opt(eval.and_then(|e| e.loss), 4),
        fmt_opt(eval.and_then(|e| e.accuracy), 3),
        last.map_or(1.0, |r| r.loss_scale),
        last.map_or(0, |r| r.skipped_total),
    )
}

/// The stderr line of a skipped step: the scale it used and the next one, which parameters'
/// gradients overflowed, and the probe's cause.
pub(crate) fn skip_line(step: u64, outcome: &StepOutcome, cause: Option<&SkipCause>) -> String {
    let which = match &outcome.overflow {
        Some(overflow) if overflow.params.is_empty() => {
            "the global gradient norm overflowed f32 (no single gradient held inf or NaN)"
                .to_string()
        }
        Some(overflow) => format!("inf/NaN gradients in {overflow}"),
        None => "inf/NaN gradients".to_string(),
    };
    let cause = cause.map(|c| format!("; {c}")).unwrap_or_default();
    format!(
        "step {step}: skipped: {which}; loss scale {} -> {}{cause}",
        outcome.scale_used, outcome.next_scale
    )
}
