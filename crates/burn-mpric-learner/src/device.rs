//! The Learner on the device path: [`ScaledDeviceOptimizer`], the optimizer burn-train steps,
//! and [`ScalerHandle::device_optimizer`], which makes it.

use std::any::type_name;

use burn::module::AutodiffModule;
use burn::optim::{GradientsParams, MultiGradientsParams, Optimizer};
use burn::tensor::backend::AutodiffBackend;
use burn_mpric_scale::{
    AwaitingSteps, DeviceLossScaler, DeviceOptimizer, DeviceOptimizerRecord, DeviceRule, StepError,
};

use crate::ScalerHandle;
use crate::on_device::OnDevice;

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
/// use burn_mpric::learner::ScalerHandle;
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

impl ScalerHandle {
    /// Puts every model sharing this handle on the device path and returns the optimizer to
    /// hand burn-train's `Learner`: the skip is decided on the device, the scale and its
    /// counters live there, and nothing is read between backward and the update (see
    /// [`ScaledDeviceOptimizer`]). `rule` is the update (`DeviceAdamConfig`,
    /// `DeviceAdamWConfig`, `DeviceSgdConfig`); the scaler's state moves to `device`.
    ///
    /// The host learns the steps later, all pending ones in one read: every `sync_every`
    /// steps, one step behind (`0`: only at the syncs below, and once
    /// [`MAX_PENDING_STEPS`](burn_mpric_scale::MAX_PENDING_STEPS) are pending); before each
    /// validation epoch (burn-train calls `valid()`), at each checkpoint (the record holds the
    /// scaler as of every step), and whenever the handle is asked ([`sync`](Self::sync),
    /// [`scale`](Self::scale), [`stats`](Self::stats), [`snapshot`](Self::snapshot)). What
    /// comes late: the per-step metrics ([`ScaleRecord`](crate::ScaleRecord)s of steps not
    /// read yet show the scaler as of the last read, undecided), the names of a skipped
    /// step's overflowed parameters (kept as one flag per parameter, read with the step),
    /// and the stop after `max_consecutive_skips` skips in a row (at the read that finds it).
    /// Not on this path: gradient clipping and the skip-cause probe (they need the gradients
    /// on the host at the step).
    ///
    /// Fails with [`StepError::NotOnDevice`] when the scaler clips gradients or its growth or
    /// backoff factor is not exact in f32, or when the handle is on the device path already.
    ///
    /// # Example
    ///
    /// ```
    /// use burn::backend::{Autodiff, Flex};
    /// use burn_mpric::scale::{DeviceSgdConfig, LossScaler};
    /// use burn_mpric::learner::ScalerHandle;
    ///
    /// type B = Autodiff<Flex>;
    /// let handle = ScalerHandle::new(LossScaler::default());
    /// let device = Default::default();
    /// let optim = handle.device_optimizer::<B, _>(DeviceSgdConfig::new(), &device, 10).unwrap();
    /// // One device optimizer per handle.
    /// assert!(handle.device_optimizer::<B, _>(DeviceSgdConfig::new(), &device, 10).is_err());
    /// # drop(optim);
    /// ```
    pub fn device_optimizer<AB, R>(
        &self,
        rule: R,
        device: &burn::tensor::Device<AB::InnerBackend>,
        sync_every: usize,
    ) -> Result<ScaledDeviceOptimizer<R, AB>, StepError>
    where
        AB: AutodiffBackend,
        R: DeviceRule,
    {
        self.enter_device_path(|host| {
            // `OverflowedParamsMetric` names a skipped step's parameters, as on the host.
            let scaler = DeviceLossScaler::<AB::InnerBackend>::new(host, device)?
                .with_sync_every(sync_every)
                .with_overflow_names(true);
            Ok(OnDevice {
                scaler: Box::new(scaler),
                optimizer: type_name::<ScaledDeviceOptimizer<R, AB>>(),
                awaiting: AwaitingSteps::default(),
            })
        })?;
        Ok(ScaledDeviceOptimizer::new(self.clone(), rule))
    }
}
