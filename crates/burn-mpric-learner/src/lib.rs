//! Mixed-precision training with burn-train's `Learner`.
//!
//! Wrap a model in [`Scaled`] and the `Learner` trains it with loss scaling: the loss is
//! multiplied by the scale before backward ([`TrainStep::step`](burn::train::TrainStep)),
//! and the optimizer step unscales every gradient (cast to its parameter's dtype), skips the
//! update when any gradient is not finite, and updates the scale. Every way burn-train applies
//! gradients goes through the scaler: `TrainStep::optimize` (one device, and
//! `MultiDeviceOptim::OptimMainDevice`) and `TrainStep::optimize_multi`
//! (`MultiDeviceOptim::OptimSharded`, where a non-finite gradient on any device skips the
//! step on all of them).
//!
//! The scaler lives in a [`ScalerHandle`] shared by the model's clones. Each step's outcome
//! travels with that step's output item ([`ScaledItem`], holding a [`ScaleRecord`]), and
//! [`LossScaleMetric`] and [`SkippedStepsMetric`] read only that record, so the per-step
//! logs describe their own step even when burn-train's metric processor runs behind the
//! training loop:
//!
//! - `Loss Scale` logs the scale the step's loss was multiplied by (the scale *used*, as
//!   PyTorch's `scaler.get_scale()` reads before `scaler.update()`);
//! - `Skipped Steps` logs the number of skipped steps so far, the logged step included.
//!
//! **burn-train's `ExecutionStrategy::DistributedDataParallel` is not supported.** In Burn
//! 0.21 it all-reduces the gradients inside `backward()` through the backend's
//! `DistributedBackend::all_reduce`, which only the CUDA backend implements (NCCL), and its
//! `ddp` feature makes `Autodiff<B>` require `B: DistributedBackend` throughout a build. Each of
//! its worker threads also holds its own clone of the learner, and so of the model: all of
//! them would share one [`ScalerHandle`] and update it once per worker per step. For data
//! parallelism with loss scaling, use `MultiDevice` here, or burn-mpric-scale's
//! `LossScaler::step_all_reduced` (burn-collective) in a loop of your own, as the `mpric`
//! CLI's `strategy = "ddp"` does.
//!
//! **Learning-rate schedule on a skipped step:** burn-train advances its scheduler once per
//! iteration, before the optimizer step, so a skipped step still consumes one step of the
//! schedule (as a PyTorch loop that calls `scheduler.step()` every iteration does). The
//! schedule stays tied to iterations, which keeps checkpoints, logs and resumes aligned;
//! skipped steps are rare (a few per scale back-off) and counted by [`SkippedStepsMetric`].

#![warn(missing_docs)]

mod handle;
mod metrics;
mod record;
mod step;

pub use handle::ScalerHandle;
pub use metrics::{LossScaleMetric, SkippedStepsMetric};
pub use record::{ScaleRecord, ScaledItem, ScaledOutput};
pub use step::{LossStep, Scaled};

#[doc(hidden)]
pub mod __private {
    pub use burn::train::metric::Adaptor;
}
