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
//! [`LossScaleMetric`], [`SkippedStepsMetric`] and [`OverflowedParamsMetric`] read only that
//! record, so the per-step logs describe their own step even when burn-train's metric processor runs behind the
//! training loop:
//!
//! - `Loss Scale` logs the scale the step's loss was multiplied by (the scale *used*, as
//!   PyTorch's `scaler.get_scale()` reads before `scaler.update()`);
//! - `Skipped Steps` logs the number of skipped steps so far, the logged step included;
//! - `Overflowed Parameters` (registered with `metric_train`) logs, for a skipped step, the
//!   parameters whose gradients held inf or NaN by module path, and `-` for an applied one.
//!
//! **Checkpoints carry the scaler.** A [`Scaled`] model's record holds the wrapped model's
//! record and the loss scaler's state (scale, growth and hysteresis counters, step counters,
//! configuration), so burn-train's file checkpointer (`with_file_checkpointer`) saves it with
//! the model, and a run resumed with `.checkpoint(epoch)` restores it into the shared
//! [`ScalerHandle`]: the resumed run goes on with the scale and the skip counts it had, as the
//! uninterrupted run would, instead of starting over from the initial scale (which, at f16,
//! would skip steps again to back off). This is what PyTorch asks of its users by saving
//! `scaler.state_dict()` with every checkpoint. The checkpoint's scaler replaces the handle's
//! whole, configuration included; a record saved before the scaler was part of it still loads,
//! and then leaves the scaler as it is (see [`Scaled`] and [`ScalerHandle::restore`]).
//!
//! **The device path.** [`ScalerHandle::device_optimizer`] makes the optimizer to hand the
//! `Learner` ([`ScaledDeviceOptimizer`]: Adam, AdamW or SGD with momentum, as
//! burn-mpric-scale's `DeviceOptimizer`): the finiteness flag, the scale and its counters stay
//! on the device, the update is kept or discarded there, and nothing is read between backward
//! and the optimizer, which on a GPU keeps the device busy (and a fused stream whole) through
//! the step. The decisions, scales and counters are the host-read path's. The host learns
//! them later: every `sync_every` steps, before each validation epoch, at each checkpoint
//! (which holds the scaler as of its last step, and the optimizer's state) and whenever the
//! handle is asked. Until then a step's metrics item shows the scaler as of the last read,
//! and a stall (`max_consecutive_skips`) stops the run at the step after the read that finds
//! it. The overflowed parameters are named too, from one flag per parameter read with the
//! step. Not on this path: gradient clipping and the skip-cause probe, which need the
//! gradients on the host at the step; take the host-read path (any Burn optimizer) for them,
//! or when every step's metrics must show its own decision.
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

mod device;
mod handle;
mod metrics;
mod on_device;
mod record;
mod step;

pub use device::{ScaledDeviceOptimizer, ScaledDeviceOptimizerRecord};
pub use handle::ScalerHandle;
pub use metrics::{LossScaleMetric, OverflowedParamsMetric, SkipCauseMetric, SkippedStepsMetric};
pub use record::{ScaleRecord, ScaledItem, ScaledOutput};
pub use step::{LossStep, Scaled};

#[doc(hidden)]
pub mod __private {
    pub use burn::train::metric::Adaptor;
}
