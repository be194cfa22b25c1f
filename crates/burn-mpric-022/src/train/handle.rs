//! [`ScalerHandle`]: one loss scaler shared by a model's clones, and the steps waiting for its
//! decision.

use std::any::Any;
use std::sync::MutexGuard;

use burn::module::Module;
use burn::optim::{GradientsParams, ModuleOptimizer, MultiGradientsParams};
use burn::tensor::{Device, Tensor};
use burn_mpric_core::scale::{
    AnyDeviceRule, AwaitingSteps, HandleState, ProbeInputs, ScalerStats, SharedHandle, StepOutcome,
};

use super::device::DevicePathOptimizer;
use super::on_device::OnDevice;
use super::record::StepSlot;
use crate::{
    DataParallel, DeviceLossScaler, DeviceOptimizer, DeviceOptimizerRecord, LossScaler, StepError,
};

/// A [`LossScaler`] shared between the training steps and the optimizer steps (burn-train
/// clones the model, one clone per device, and every clone sees the same scaler).
///
/// Metrics do not read it: each step's outcome travels with the step's output item (see
/// [`ScaleRecord`](super::ScaleRecord)).
///
/// # Example
///
/// ```
/// use burn_mpric_022::{LossScaler, ScalerHandle};
///
/// let handle = ScalerHandle::new(LossScaler::fixed(8.0).unwrap());
/// let clone = handle.clone();
/// assert_eq!(clone.scale(), 8.0);
/// assert_eq!(handle.stats().steps, 0);
/// ```
#[derive(Debug, Clone)]
pub struct ScalerHandle(SharedHandle<LossScaler, DataParallel, OnDevice>);

/// What the handle's clones share: the core's handle state around this edition's scaler.
type Shared = HandleState<LossScaler, DataParallel, OnDevice>;

impl ScalerHandle {
    /// Shares `scaler`.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_022::{LossScaler, ScalerHandle};
    ///
    /// assert_eq!(ScalerHandle::new(LossScaler::default()).scale(), 32768.0);
    /// ```
    pub fn new(scaler: LossScaler) -> Self {
        Self(SharedHandle::new(scaler))
    }

    /// Makes every optimizer step of the models sharing this handle a step of a run across
    /// processes: before the scaler decides, the step's gradients are summed with the other
    /// processes' through `parallel` (as burn-train sums the gradients of its devices), so
    /// every process's Learner applies or skips the same steps with the same gradients and
    /// keeps the same scale. Each process's Learner reads its own shard of the data. Burn
    /// 0.22's own DDP runs in one process: this is its Learner's way across processes.
    ///
    /// A process lost mid-run ends the run: the step panics with the line that names it
    /// (burn-train's Learner has no way to return the error), and over MPI the job is aborted.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_022::{DataParallel, LossScaler, ScalerHandle};
    /// use burn_mpric_cluster::{ClusterError, Transport};
    ///
    /// struct Alone;
    /// impl Transport for Alone {
    ///     fn rank(&self) -> usize { 0 }
    ///     fn world(&self) -> usize { 1 }
    ///     fn all_reduce(&mut self, _: u64, v: &[f32]) -> Result<Vec<f32>, ClusterError> {
    ///         Ok(v.to_vec())
    ///     }
    ///     fn finish(self: Box<Self>) -> Result<(), ClusterError> { Ok(()) }
    /// }
    ///
    /// let handle = ScalerHandle::new(LossScaler::noop())
    ///     .across_processes(DataParallel::new(Box::new(Alone)));
    /// let parallel = handle.leave_processes().unwrap();
    /// assert_eq!(parallel.world(), 1);
    /// parallel.finish().unwrap();
    /// ```
    pub fn across_processes(self, parallel: DataParallel) -> Self {
        self.lock().parallel = Some(parallel);
        self
    }

    /// Takes the [`DataParallel`] back after training, to [`finish`](DataParallel::finish) it
    /// (wait for the other processes) or reuse it; the handle's models step alone again.
    ///
    /// See [`across_processes`](Self::across_processes) for an example.
    pub fn leave_processes(&self) -> Option<DataParallel> {
        self.lock().parallel.take()
    }

    /// The current scale: the one the next step's loss will be multiplied by.
    /// On the device path, the pending steps are read first ([`sync`](Self::sync)).
    ///
    /// # Example
    ///
    /// ```
    /// assert_eq!(burn_mpric_022::ScalerHandle::default().scale(), 1.0);
    /// ```
    pub fn scale(&self) -> f32 {
        self.settled().scaler.scale()
    }

    /// The scaler's counters (steps, skipped steps).
    /// On the device path, the pending steps are read first ([`sync`](Self::sync)).
    ///
    /// # Example
    ///
    /// ```
    /// assert_eq!(burn_mpric_022::ScalerHandle::default().stats().skipped, 0);
    /// ```
    pub fn stats(&self) -> ScalerStats {
        self.settled().scaler.stats()
    }

    /// A copy of the scaler, to checkpoint it.
    /// On the device path, the pending steps are read first ([`sync`](Self::sync)).
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_022::{LossScaler, ScalerHandle};
    ///
    /// let handle = ScalerHandle::new(LossScaler::fixed(4.0).unwrap());
    /// assert_eq!(handle.snapshot(), LossScaler::fixed(4.0).unwrap());
    /// ```
    pub fn snapshot(&self) -> LossScaler {
        self.settled().scaler
    }

    /// Replaces the shared scaler (a resumed run puts its saved state back); every clone of
    /// the handle sees it. On the device path the device's state starts over from it; a
    /// scaler that path cannot take (one that clips gradients, say) leaves the state as it was
    /// and is reported by [`last_error`](Self::last_error).
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_022::{LossScaler, ScalerHandle};
    ///
    /// let handle = ScalerHandle::default();
    /// handle.clone().restore(LossScaler::fixed(512.0).unwrap());
    /// assert_eq!(handle.scale(), 512.0);
    /// ```
    pub fn restore(&self, scaler: LossScaler) {
        let mut shared = self.lock();
        if let Some(device) = shared.device.as_mut() {
            let on = device.scaler.device_scale().scale().device();
            match DeviceLossScaler::new(scaler, &on) {
                Ok(restarted) => {
                    device.scaler = restarted
                        .with_sync_every(device.scaler.sync_every())
                        .with_overflow_names(device.scaler.overflow_names());
                    device.awaiting.clear();
                }
                Err(err) => {
                    shared.fail(format!("{err}: the loss scaler keeps its state"));
                    return;
                }
            }
        }
        shared.restore(scaler);
    }

    /// The error of the last optimizer step that could not run (a failed device read), if
    /// any. Such a step applied nothing and left the scale unchanged; its item's
    /// [`ScaleRecord`](super::ScaleRecord) has no outcome.
    ///
    /// # Example
    ///
    /// ```
    /// assert!(burn_mpric_022::ScalerHandle::default().last_error().is_none());
    /// ```
    pub fn last_error(&self) -> Option<String> {
        self.lock().last_error.clone()
    }

    /// Scales `loss` with the current scale and opens the slot the step's optimizer decision
    /// will fill. On the device path the slot starts with the scaler as of the last read (the
    /// loss is multiplied by the device's scale), and its step's outcome fills it at a read.
    pub(crate) fn scale_loss<const D: usize>(&self, loss: Tensor<D>) -> (Tensor<D>, StepSlot) {
        let mut shared = self.lock();
        let slot = StepSlot::new(shared.scaler.scale(), shared.scaler.stats().skipped);
        shared.pending.push(slot.clone());
        let scaled = match &shared.device {
            Some(device) => device.scaler.scale_loss(loss),
            None => shared.scaler.scale_loss(loss),
        };
        (scaled, slot)
    }

    /// Puts every model sharing this handle on the device path and returns the optimizer to
    /// hand burn-train's `Learner` (a [`DevicePathOptimizer`], which the `Learner` only holds):
    /// the handle's own [`DeviceOptimizer`] with `rule` (`DeviceAdamConfig`,
    /// `DeviceAdamWConfig`, `DeviceSgdConfig`) steps instead, the skip is decided on the
    /// device, the scale and its counters live there (moved to `device`), and nothing is read
    /// between backward and the update. The learning rate is the `Learner`'s, its scheduler's
    /// base rate (one rate for every parameter).
    ///
    /// The host learns the steps later, all pending ones in one read: every `sync_every`
    /// steps, one step behind (`0`: only when asked, and once
    /// [`MAX_PENDING_STEPS`](burn_mpric_core::scale::MAX_PENDING_STEPS) are pending), and
    /// whenever the handle is asked ([`sync`](Self::sync), [`scale`](Self::scale),
    /// [`stats`](Self::stats), [`snapshot`](Self::snapshot)). Until then a step's metrics
    /// item shows the scaler as of the last read, undecided; a stall
    /// (`max_consecutive_skips`) stops the run at the step after the read that finds it.
    /// Checkpoints: save [`snapshot`](Self::snapshot) and
    /// [`device_optimizer_record`](Self::device_optimizer_record) with the `Learner`'s, and
    /// put them back with [`restore`](Self::restore) and
    /// [`load_device_optimizer_record`](Self::load_device_optimizer_record). Not on this path:
    /// gradient clipping, the skip-cause probe, parameter groups with their own rates.
    ///
    /// Fails with [`StepError::NotOnDevice`] when the scaler clips gradients or its growth or
    /// backoff factor is not exact in f32, or when the handle is on the device path already.
    ///
    /// # Example
    ///
    /// ```
    /// use burn::tensor::Device;
    /// use burn_mpric_022::{LossScaler, ScalerHandle};
    /// use burn_mpric_core::scale::DeviceAdamConfig;
    ///
    /// let handle = ScalerHandle::new(LossScaler::default());
    /// let optim = handle.device_optimizer(DeviceAdamConfig::new(), &Device::flex(), 10).unwrap();
    /// assert!(handle.is_on_device());
    /// // One device optimizer per handle.
    /// assert!(handle.device_optimizer(DeviceAdamConfig::new(), &Device::flex(), 10).is_err());
    /// # drop(optim);
    /// ```
    pub fn device_optimizer(
        &self,
        rule: impl Into<AnyDeviceRule>,
        device: &Device,
        sync_every: usize,
    ) -> Result<ModuleOptimizer, StepError> {
        let mut shared = self.lock();
        if shared.device.is_some() {
            return Err(StepError::NotOnDevice(
                "this ScalerHandle is on the device path already: one device optimizer per handle"
                    .into(),
            ));
        }
        // A skipped step's outcome names its overflowed parameters, as on the host.
        let scaler = DeviceLossScaler::new(shared.scaler, device)?
            .with_sync_every(sync_every)
            .with_overflow_names(true);
        shared.device = Some(OnDevice {
            scaler,
            optim: DeviceOptimizer::new(rule.into()),
            awaiting: AwaitingSteps::default(),
        });
        Ok(DevicePathOptimizer.into())
    }

    /// Whether the handle's models step on the device path
    /// ([`device_optimizer`](Self::device_optimizer)).
    ///
    /// # Example
    ///
    /// ```
    /// assert!(!burn_mpric_022::ScalerHandle::default().is_on_device());
    /// ```
    pub fn is_on_device(&self) -> bool {
        self.lock().device.is_some()
    }

    /// On the device path, reads every step the host has not learned yet (one read) and
    /// returns their outcomes in order; each step's metrics item not synced yet gets its own.
    /// On the host path there is nothing to read: `Ok` and no outcome.
    ///
    /// Fails as [`DeviceLossScaler::sync`] does: with [`StepError::Stalled`] when a step
    /// reached `max_consecutive_skips` skips in a row (the next step then stops the run), or
    /// with a read error (the steps stay pending).
    ///
    /// # Example
    ///
    /// ```
    /// assert!(burn_mpric_022::ScalerHandle::default().sync().unwrap().is_empty());
    /// ```
    pub fn sync(&self) -> Result<Vec<StepOutcome>, StepError> {
        Self::read_device(&mut self.lock())
    }

    /// The device optimizer's state (each parameter's state tensors, at f32), for a
    /// checkpoint; `None` on the host path.
    ///
    /// # Example
    ///
    /// ```
    /// use burn::tensor::Device;
    /// use burn_mpric_022::{LossScaler, ScalerHandle};
    /// use burn_mpric_core::scale::DeviceSgdConfig;
    ///
    /// let handle = ScalerHandle::new(LossScaler::default());
    /// assert!(handle.device_optimizer_record().is_none());
    /// handle.device_optimizer(DeviceSgdConfig::new(), &Device::flex(), 0).unwrap();
    /// assert!(handle.device_optimizer_record().unwrap().is_empty()); // no step yet
    /// ```
    pub fn device_optimizer_record(&self) -> Option<DeviceOptimizerRecord> {
        self.lock()
            .device
            .as_ref()
            .map(|device| device.optim.to_record())
    }

    /// Puts a saved [`device_optimizer_record`](Self::device_optimizer_record) back into the
    /// device optimizer. Fails with [`StepError::NotOnDevice`] on the host path.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_022::ScalerHandle;
    ///
    /// let handle = ScalerHandle::default();
    /// assert!(handle.load_device_optimizer_record(Default::default()).is_err());
    /// ```
    pub fn load_device_optimizer_record(
        &self,
        record: DeviceOptimizerRecord,
    ) -> Result<(), StepError> {
        let mut shared = self.lock();
        let Some(device) = shared.device.as_mut() else {
            return Err(StepError::NotOnDevice(
                "this ScalerHandle is not on the device path: it has no device optimizer".into(),
            ));
        };
        let rule = *device.optim.rule();
        let optim = std::mem::replace(&mut device.optim, DeviceOptimizer::new(rule));
        device.optim = optim.load_record(record);
        Ok(())
    }

    /// The shared state after a read of the device path's pending steps (an error is kept
    /// for [`last_error`](Self::last_error), a stall for the next step).
    fn settled(&self) -> MutexGuard<'_, Shared> {
        let mut shared = self.lock();
        if let Err(err) = Self::read_device(&mut shared) {
            shared.fail(err);
        }
        shared
    }

    fn read_device(shared: &mut Shared) -> Result<Vec<StepOutcome>, StepError> {
        let Some(device) = shared.device.as_mut() else {
            return Ok(Vec::new());
        };
        let read = device.scaler.sync();
        device.learn(&read);
        shared.scaler = *device.scaler.host();
        read
    }

    /// One optimizer step on the device path: `grads` summed with the other processes' when the handle runs across processes, then
    /// unscaled, decided and applied on the device, the training steps since the last
    /// optimizer step handed to its outcome for when the host reads it. Panics where
    /// burn-train's `TrainStep` cannot return an error: a lost process, a stall found by a
    /// read.
    pub(crate) fn device_step<M: Module>(&self, lr: f64, module: M, grads: DeviceGrads) -> M {
        let mut guard = self.lock();
        let shared = &mut *guard;
        let Some(device) = shared.device.as_mut() else {
            drop(guard);
            panic!("a device-path step on a ScalerHandle that is not on the device path");
        };
        if let Some(stop) = device.awaiting.take_stop() {
            drop(guard);
            panic!("the run stopped: {stop}");
        }
        let grads = match (grads, shared.parallel.as_mut()) {
            (grads, None) => Ok(grads),
            (DeviceGrads::One(g), Some(p)) => p.sum_grads(&module, g).map(DeviceGrads::One),
            (DeviceGrads::Multi(g), Some(p)) => {
                p.sum_multi_grads(&module, g).map(DeviceGrads::Multi)
            }
        };
        let grads = match grads {
            Ok(grads) => grads,
            Err(lost) => {
                drop(guard);
                panic!("the run across processes stopped: {lost}")
            }
        };
        let slots = std::mem::take(&mut shared.pending);
        device.awaiting.push(slots);
        let optim = &mut device.optim;
        let (module, read) = match grads {
            DeviceGrads::One(g) => device.scaler.step::<M, _, 1>(optim, lr, module, g, None),
            DeviceGrads::Multi(g) => device
                .scaler
                .step_multi::<M, _, 1>(optim, lr, module, g, None),
        };
        device.learn(&read);
        shared.scaler = *device.scaler.host();
        match read {
            Err(StepError::Stalled { .. }) => {
                let stop = device.awaiting.take_stop().unwrap_or_default();
                drop(guard);
                panic!("the run stopped: {stop}")
            }
            Err(err) => shared.fail(err),
            Ok(_) => {}
        }
        module
    }

    /// Runs one optimizer step with the scaler, then hands its outcome to every step that
    /// contributed gradients.
    /// Keeps a copy of a step's batch for the probe of the next optimizer step.
    pub(crate) fn keep_for_probe(&self, input: Box<dyn Any + Send>) {
        self.lock().probe.push(input);
    }

    pub(crate) fn optimizer_step<M>(
        &self,
        step: impl FnOnce(
            &mut LossScaler,
            Option<&mut DataParallel>,
            ProbeInputs,
        ) -> (M, Result<StepOutcome, StepError>),
    ) -> M {
        let mut guard = self.lock();
        let shared = &mut *guard;
        let kept = std::mem::take(&mut shared.probe);
        let (module, outcome) = step(&mut shared.scaler, shared.parallel.as_mut(), kept);
        let pending = std::mem::take(&mut shared.pending);
        match outcome {
            Ok(outcome) => pending.iter().for_each(|slot| slot.decide(outcome.clone())),
            // The other processes are gone: this one cannot step alone.
            Err(StepError::Transport(lost)) => {
                drop(guard);
                panic!("the run across processes stopped: {lost}")
            }
            // Every step skips: the run stops rather than go on in silence (burn-train's
            // `TrainStep::optimize` cannot return an error).
            Err(err @ StepError::Stalled { .. }) => {
                drop(guard);
                panic!("the run stopped: {err}")
            }
            Err(err) => shared.fail(err),
        }
        module
    }

    fn lock(&self) -> MutexGuard<'_, Shared> {
        self.0.lock()
    }
}

impl Default for ScalerHandle {
    /// No scaling (bf16 and f32 policies); non-finite steps are still skipped.
    fn default() -> Self {
        Self::new(LossScaler::noop())
    }
}

/// The gradients of one device-path optimizer step, as burn-train hands them.
pub(crate) enum DeviceGrads {
    /// One device, or summed on the main one.
    One(GradientsParams),
    /// One shard per device.
    Multi(MultiGradientsParams),
}
