//! burn-train 0.22 integration: a model wrapper whose training step scales the loss and whose
//! optimizer step unscales, checks, skips or applies, and updates the scale.
//!
//! Implement [`LossStep`] (the forward half of a step: the unscaled loss and the metrics item)
//! on your model and wrap it in [`Scaled`]; burn-train's `Learner` then trains it with loss
//! scaling. Both ways burn-train applies gradients go through the scaler:
//! `TrainStep::optimize` (one device, and `MultiDeviceOptim::OptimMainDevice`) and
//! `TrainStep::optimize_multi` (`MultiDeviceOptim::OptimSharded`, where a non-finite gradient
//! on any device skips the step on all of them).
//!
//! The scaler lives in a [`ScalerHandle`] shared by the model's clones. Each step's outcome
//! travels with that step's output item ([`ScaledOutput`], carrying a [`ScaleRecord`]), and
//! [`LossScaleMetric`] and [`SkippedStepsMetric`] read only that record, so the logs describe
//! their own step however far burn-train's metric processor runs behind:
//!
//! - `Loss Scale`: the scale the step's loss was multiplied by (the scale *used*, as
//!   PyTorch's `scaler.get_scale()` reads before `scaler.update()`);
//! - `Skipped Steps`: skipped steps so far, the logged step included.
//!
//! **Checkpoints.** Burn 0.22's `ModuleRecord` holds tensor parameters only, and the
//! `Learner`'s checkpointer saves the module, optimizer and scheduler records, so the scaler
//! state is not in them: save [`ScalerHandle::snapshot`] with
//! [`LossScaler::save_file`](crate::LossScaler::save_file) next to them and put it back with
//! [`ScalerHandle::restore`] when resuming.
//!
//! **The device path.** [`ScalerHandle::device_optimizer`] puts the handle's models on it
//! and returns the optimizer to hand the `Learner` (a [`DevicePathOptimizer`], which only
//! stands in: the handle's own device optimizer, Adam, AdamW or SGD with momentum, steps).
//! The finiteness flag, the scale and its counters stay on the device, the update is kept or
//! discarded there, and nothing is read between backward and the optimizer. The decisions,
//! scales and counters are the host-read path's; the host learns them at a read (every
//! `sync_every` steps, or when the handle is asked), and until then a step's metrics item
//! shows the scaler as of the last read. Checkpoints save the handle's
//! [`device_optimizer_record`](ScalerHandle::device_optimizer_record) beside its snapshot.
//! Not on this path: gradient clipping, the skip-cause probe and parameter groups with rates
//! of their own; take the host-read path (any Burn optimizer) for them.
//!
//! **Learning-rate schedule on a skipped step:** burn-train advances its scheduler once per
//! iteration, before the optimizer step, so a skipped step still consumes one step of the
//! schedule (as a PyTorch loop calling `scheduler.step()` every iteration does).
//!
//! **Data parallelism:** burn-train's `DistributedDataParallel` strategy runs a learner per
//! device, each holding a clone of the model and so of the one [`ScalerHandle`]: every
//! worker would update it once per step. Use `MultiDevice` with loss scaling.

mod device;
mod handle;
mod metrics;
mod on_device;
mod record;
mod step;

pub use device::DevicePathOptimizer;
pub use handle::ScalerHandle;
pub use metrics::{LossScaleMetric, SkipCauseMetric, SkippedStepsMetric};
pub use record::{ScaleRecord, ScaledOutput};
pub use step::{LossStep, Scaled};
