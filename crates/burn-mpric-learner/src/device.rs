//! The Learner on the device path: [`ScaledDeviceOptimizer`], the optimizer burn-train steps,
//! and the handle's device state it steps through.

use std::any::Any;
use std::fmt;

use burn::module::AutodiffModule;
use burn::optim::{GradientsParams, MultiGradientsParams, Optimizer};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn_mpric::scale::{
    AwaitingSteps, DeviceLossScaler, DeviceOptimizer, DeviceOptimizerRecord, DeviceRule,
    LossScaler, StepError, StepOutcome,
};

use crate::ScalerHandle;

/// A [`DeviceLossScaler`] of any backend, as the (untyped) [`ScalerHandle`] holds it.
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
        *self = DeviceLossScaler::new(host, &device)?.with_sync_every(self.sync_every());
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

/// The optimizer a [`Scaled`](crate::Scaled) model's `Learner` steps on the device path
/// ([`ScalerHandle::device_optimizer`]): each optimizer step unscales the gradients on the
/// device, applies or discards the update by the device's finiteness flag
/// ([`DeviceOptimizer`]: Adam, AdamW, SGD) and moves the handle's device scale on, with
/// nothing read between backward and the update. The host learns the steps at the handle's
/// syncs.
///
/// Its record is the optimizer's state (at f32, one list of tensors per parameter), so
/// burn-train's checkpointer saves it with the Learner's optimizer.
///
/// # Example
///
/// ```
/// use burn::backend::{Autodiff, Flex};
/// use burn_mpric::scale::{DeviceAdamConfig, LossScaler};
/// use burn_mpric_learner::ScalerHandle;
///
/// type B = Autodiff<Flex>;
/// let handle = ScalerHandle::new(LossScaler::default());
/// let optim = handle.device_optimizer::<B, _>(DeviceAdamConfig::new(), &Default::default(), 0);
/// assert!(optim.is_ok());
/// assert!(handle.is_on_device());
/// ```
pub struct ScaledDeviceOptimizer<R: DeviceRule, AB: AutodiffBackend> {
    handle: ScalerHandle,
    optim: DeviceOptimizer<R, AB::InnerBackend>,
}

impl<R: DeviceRule, AB: AutodiffBackend> ScaledDeviceOptimizer<R, AB> {
    pub(crate) fn new(handle: ScalerHandle, rule: R) -> Self {
        Self {
            handle,
            optim: DeviceOptimizer::new(rule),
        }
    }
}

impl<R: DeviceRule, AB: AutodiffBackend> Clone for ScaledDeviceOptimizer<R, AB> {
    fn clone(&self) -> Self {
        Self {
            handle: self.handle.clone(),
            optim: self.optim.clone(),
        }
    }
}

/// The device optimizer's state as a Burn record: each parameter's state tensors, at f32.
pub type ScaledDeviceOptimizerRecord<AB> = DeviceOptimizerRecord<AB>;

impl<R, AB, M> Optimizer<M, AB> for ScaledDeviceOptimizer<R, AB>
where
    R: DeviceRule,
    AB: AutodiffBackend,
    M: AutodiffModule<AB>,
{
    type Record = ScaledDeviceOptimizerRecord<AB>;

    fn step(&mut self, lr: f64, module: M, grads: GradientsParams) -> M {
        let optim = &mut self.optim;
        self.handle.device_step::<AB, M>(|scaler| {
            scaler.step::<AB, M, R, 1>(optim, lr, module, grads, None)
        })
    }

    fn step_multi(&mut self, lr: f64, module: M, grads: MultiGradientsParams) -> M {
        let optim = &mut self.optim;
        self.handle.device_step::<AB, M>(|scaler| {
            scaler.step_multi::<AB, M, R, 1>(optim, lr, module, grads, None)
        })
    }

    fn to_record(&self) -> Self::Record {
        self.optim.to_autodiff_record()
    }

    fn load_record(self, record: Self::Record) -> Self {
        Self {
            handle: self.handle,
            optim: self.optim.load_autodiff_record(record),
        }
    }
}
