//! The Learner on the device path: the handle's device state, and [`DevicePathOptimizer`],
//! the optimizer burn-train holds in its place.

use std::collections::VecDeque;
use std::fmt;

use burn::optim::Optimizer;
use burn::tensor::{Device, Tensor};
use burn_mpric_core::scale::{AnyDeviceRule, StepOutcome};

use super::record::StepSlot;
use crate::{DeviceLossScaler, DeviceOptimizer, StepError};

/// The handle's device path: the scaler and the optimizer that step on the device, and the
/// optimizer steps the host has not read yet, each with the slots of its training steps.
pub(crate) struct OnDevice {
    pub(crate) scaler: DeviceLossScaler,
    pub(crate) optim: DeviceOptimizer<AnyDeviceRule>,
    pub(crate) awaiting: VecDeque<Vec<StepSlot>>,
    /// A read found `max_consecutive_skips` skips in a row: the next step stops the run.
    pub(crate) stopped: Option<String>,
}

impl OnDevice {
    /// What a read of the scaler learned: each outcome (oldest first) goes to the training
    /// steps of its optimizer step, and a stall is kept for the next step to stop the run.
    /// Whatever the read did, the steps still awaiting are the scaler's pending ones.
    pub(crate) fn learn(&mut self, read: &Result<Vec<StepOutcome>, StepError>) {
        match read {
            Ok(outcomes) => {
                for outcome in outcomes {
                    for slot in self.awaiting.pop_front().unwrap_or_default() {
                        slot.decide(outcome.clone());
                    }
                }
            }
            Err(err @ StepError::Stalled { .. }) => self.stopped = Some(err.to_string()),
            Err(_) => {}
        }
        let read = self.awaiting.len().saturating_sub(self.scaler.pending());
        self.awaiting.drain(..read);
    }
}

impl fmt::Debug for OnDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "on the device ({:?}, {} optimizer steps unread)",
            self.optim.rule(),
            self.awaiting.len()
        )
    }
}

/// What burn-train 0.22's `Learner` holds as its optimizer when the model's
/// [`ScalerHandle`](super::ScalerHandle) is on the device path
/// ([`ScalerHandle::device_optimizer`](super::ScalerHandle::device_optimizer) returns it as a
/// `ModuleOptimizer`). The `Learner` takes any optimizer and hands it to
/// `TrainStep::optimize`; on the device path the handle's own optimizer steps instead, so this
/// one is never stepped: if it is (its model's handle is not on the device path), it panics
/// rather than leave the parameters unchanged in silence.
///
/// # Example
///
/// ```
/// use burn::optim::ModuleOptimizer;
/// use burn_mpric_022::DevicePathOptimizer;
///
/// let optim: ModuleOptimizer = DevicePathOptimizer.into();
/// assert!(!optim.has_gradient_clipping());
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct DevicePathOptimizer;

impl Optimizer for DevicePathOptimizer {
    type State<const D: usize> = ();

    fn step<const D: usize>(
        &self,
        _lr: f64,
        _tensor: Tensor<D>,
        _grad: Tensor<D>,
        _state: Option<()>,
    ) -> (Tensor<D>, Option<()>) {
        panic!(
            "DevicePathOptimizer stands in for a ScalerHandle's device optimizer and was \
             stepped by a model whose handle is not on the device path: make it with \
             ScalerHandle::device_optimizer and wrap the model in Scaled with that handle"
        )
    }

    fn to_device<const D: usize>(state: (), _device: &Device) {
        state
    }
}
