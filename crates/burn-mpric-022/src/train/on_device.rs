//! The handle's state on the device path: the loss scaler and optimizer that step on the
//! device, and the training steps awaiting a read.

use std::fmt;

use burn_mpric_core::scale::{AnyDeviceRule, AwaitingSteps, StepOutcome};

use crate::{DeviceLossScaler, DeviceOptimizer, StepError};

/// The handle's device path: the scaler and the optimizer that step on the device, and the
/// training steps of the optimizer steps the host has not read yet.
pub(crate) struct OnDevice {
    pub(crate) scaler: DeviceLossScaler,
    pub(crate) optim: DeviceOptimizer<AnyDeviceRule>,
    pub(crate) awaiting: AwaitingSteps,
}

impl OnDevice {
    /// What a read of the scaler learned: each outcome to its training steps, a stall kept
    /// for the next step to stop the run.
    pub(crate) fn learn(&mut self, read: &Result<Vec<StepOutcome>, StepError>) {
        match read {
            Ok(outcomes) => self.awaiting.decide(outcomes, self.scaler.pending()),
            Err(err) => {
                if let StepError::Stalled { .. } = err {
                    self.awaiting.stop(err.to_string());
                }
                self.awaiting.decide(&[], self.scaler.pending());
            }
        }
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
