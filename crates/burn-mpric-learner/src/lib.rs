//! Mixed-precision training with burn-train's `Learner`.
//!
//! Wrap a model in [`Scaled`] and the `Learner` trains it with loss scaling: the loss is
//! multiplied by the scale before backward ([`TrainStep::step`](burn::train::TrainStep)),
//! and the optimizer step unscales every gradient (cast to its parameter's dtype), skips the
//! update when any gradient is not finite, and updates the scale. The scaler lives in a
//! [`ScalerHandle`] shared by the model's clones; [`LossScaleMetric`] and
//! [`SkippedStepsMetric`] show it in burn-train's logs and dashboard.
//!
//! **Learning-rate schedule on a skipped step:** burn-train advances its scheduler once per
//! iteration, before the optimizer step, so a skipped step still consumes one step of the
//! schedule (as a PyTorch loop that calls `scheduler.step()` every iteration does). The
//! schedule stays tied to iterations, which keeps checkpoints, logs and resumes aligned;
//! skipped steps are rare (a few per scale back-off) and counted by [`SkippedStepsMetric`].

#![warn(missing_docs)]

mod handle;
mod metrics;
mod step;

pub use handle::ScalerHandle;
pub use metrics::{LossScaleMetric, SkippedStepsMetric};
pub use step::{LossStep, Scaled};
