//! The handle's state on the device path: the loss scaler of whichever backend, and the
//! training steps awaiting a read.

use std::any::Any;
use std::fmt;

use burn::tensor::backend::Backend;
use burn_mpric_scale::{AwaitingSteps, DeviceLossScaler, LossScaler, StepError, StepOutcome};

/// A [`DeviceLossScaler`] of any backend, as the (untyped) `ScalerHandle` holds it.
pub(crate) trait DeviceScaler: Send {
    fn sync(&mut self) -> Result<Vec<StepOutcome>, StepError>;
    fn host(&self) -> LossScaler;
    fn pending(&self) -> usize;
    /// Starts over from `host` (a restored checkpoint's scaler); pending steps are dropped.
    fn restart(&mut self, host: LossScaler) -> Result<(), StepError>;
    fn as_any(&mut self) -> &mut dyn Any;
}

impl<B: Backend> DeviceScaler for DeviceLossScaler<B>
where
    DeviceLossScaler<B>: Send,
{
    fn sync(&mut self) -> Result<Vec<StepOutcome>, StepError> {
        DeviceLossScaler::sync(self)
    }

    fn host(&self) -> LossScaler {
        *DeviceLossScaler::host(self)
    }

    fn pending(&self) -> usize {
        DeviceLossScaler::pending(self)
    }

    fn restart(&mut self, host: LossScaler) -> Result<(), StepError> {
        let device = self.device_scale().scale().device();
        *self = DeviceLossScaler::new(host, &device)?
            .with_sync_every(self.sync_every())
            .with_overflow_names(self.overflow_names());
        Ok(())
    }

    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

/// The handle's device path: its scaler, the optimizer made for it, and the training steps
/// of the optimizer steps the host has not read yet.
pub(crate) struct OnDevice {
    pub(crate) scaler: Box<dyn DeviceScaler>,
    /// The type of the optimizer made for this handle, to refuse another one.
    pub(crate) optimizer: &'static str,
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

    /// The typed scaler: the handle's device path was made for `B`, or the caller mixed two
    /// backends in one handle.
    pub(crate) fn scaler<B: Backend>(&mut self) -> &mut DeviceLossScaler<B> {
        self.scaler
            .as_any()
            .downcast_mut::<DeviceLossScaler<B>>()
            .unwrap_or_else(|| {
                panic!(
                    "this ScalerHandle's device path was made for another backend than {}",
                    std::any::type_name::<B>()
                )
            })
    }
}

impl fmt::Debug for OnDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "on the device ({}, {} optimizer steps unread)",
            self.optimizer,
            self.awaiting.len()
        )
    }
}
