//! [`ScalerHandle`]: one loss scaler shared by a model's clones, and the steps waiting for
//! its decision.

use std::any::Any;
use std::sync::MutexGuard;

use burn::module::{
    AutodiffModule, Content, Devices, HasAutodiffModule, Module, ModuleDisplay,
    ModuleDisplayDefault, ModuleMapper, ModuleVisitor,
};
use burn::optim::{GradientsParams, MultiGradientsParams};
use burn::tensor::Tensor;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn_mpric_core::scale::{HandleState, ProbeInputs, SharedHandle};
use burn_mpric_scale::{
    DataParallel, DeviceLossScaler, LossScaler, LossScalerRecord, ScalerStats, StateError,
    StepError, StepOutcome,
};

use crate::on_device::OnDevice;
use crate::record::StepSlot;

/// A [`LossScaler`] shared between the training steps and the optimizer steps (burn-train
/// clones the model, and runs one clone per device; every clone sees the same scaler).
///
/// Metrics do not read it: each step's outcome travels with the step's output item (see
/// [`ScaleRecord`](crate::ScaleRecord)), so a metric processed several steps later still
/// describes its own step.
///
/// It is a Burn [`Module`] without parameters whose record is the scaler's complete state
/// ([`LossScalerRecord`]): [`into_record`](Module::into_record) saves a snapshot, and
/// [`load_record`](Module::load_record) restores it into the shared scaler, so every clone sees
/// it (see [`restore`](Self::restore) for what a load does). Mapping, visiting, `to_device`,
/// `fork` and `valid` all keep sharing the same scaler. [`Scaled`](crate::Scaled) puts it in
/// its record this way, which is how burn-train's checkpoints carry the scaler.
///
/// ```
/// use burn::backend::Flex;
/// use burn::module::Module;
/// use burn_mpric::scale::LossScaler;
/// use burn_mpric::learner::ScalerHandle;
///
/// let handle = ScalerHandle::new(LossScaler::fixed(8.0).unwrap());
/// let clone = handle.clone();
/// assert_eq!(clone.scale(), 8.0);
/// assert_eq!(handle.stats().steps, 0);
///
/// // Its record is the scaler's state; loading one restores it into every clone.
/// let saved = Module::<Flex>::into_record(ScalerHandle::new(LossScaler::fixed(64.0).unwrap()));
/// let handle = Module::<Flex>::load_record(handle, saved);
/// assert_eq!((handle.scale(), clone.scale()), (64.0, 64.0));
/// ```
#[derive(Debug, Clone)]
pub struct ScalerHandle(SharedHandle<LossScaler, DataParallel, OnDevice>);

/// What the handle's clones share: the core's handle state around this edition's scaler.
type Shared = HandleState<LossScaler, DataParallel, OnDevice>;

impl ScalerHandle {
    /// Shares `scaler`.
    pub fn new(scaler: LossScaler) -> Self {
        Self(SharedHandle::new(scaler))
    }

    /// Makes every optimizer step of the models sharing this handle a step of a run across
    /// processes: before the scaler decides, the step's gradients are summed with the other
    /// processes' through `parallel` (as burn-train sums the gradients of its devices), so
    /// every process's Learner applies or skips the same steps with the same gradients and
    /// keeps the same scale. Each process's Learner reads its own shard of the data.
    ///
    /// A process lost mid-run ends the run: the step panics with the line that names it
    /// (burn-train's Learner has no way to return the error), and over MPI the job is aborted.
    ///
    /// ```
    /// use burn_mpric::scale::{DataParallel, LossScaler};
    /// use burn_mpric_cluster::{ClusterError, Transport};
    /// use burn_mpric::learner::ScalerHandle;
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

    /// Puts the handle on the device path with the scaler `make` builds from the host's
    /// (see [`device_optimizer`](Self::device_optimizer)); refused when it is on it already.
    pub(crate) fn enter_device_path(
        &self,
        make: impl FnOnce(LossScaler) -> Result<OnDevice, StepError>,
    ) -> Result<(), StepError> {
        let mut shared = self.lock();
        if shared.device.is_some() {
            return Err(StepError::NotOnDevice(
                "this ScalerHandle is on the device path already: one device optimizer per handle"
                    .into(),
            ));
        }
        shared.device = Some(make(shared.scaler)?);
        Ok(())
    }

    /// Whether the handle's models step on the device path
    /// ([`device_optimizer`](Self::device_optimizer)).
    ///
    /// ```
    /// use burn_mpric::learner::ScalerHandle;
    ///
    /// assert!(!ScalerHandle::default().is_on_device());
    /// ```
    pub fn is_on_device(&self) -> bool {
        self.lock().device.is_some()
    }

    /// On the device path, reads every step the host has not learned yet (one read) and
    /// returns their outcomes in order; each step's metrics item that was not processed yet
    /// gets its own. On the host path there is nothing to read: `Ok` and no outcome.
    ///
    /// Fails as [`DeviceLossScaler::sync`] does: with [`StepError::Stalled`] when a step
    /// reached `max_consecutive_skips` skips in a row (the Learner's next step then stops the
    /// run), or with a read error (the steps stay pending).
    ///
    /// ```
    /// use burn_mpric::learner::ScalerHandle;
    ///
    /// assert!(ScalerHandle::default().sync().unwrap().is_empty());
    /// ```
    pub fn sync(&self) -> Result<Vec<StepOutcome>, StepError> {
        Self::read_device(&mut self.lock())
    }

    /// [`sync`](Self::sync) where no error can be returned: logged, and a stall is kept for
    /// the next step to stop the run.
    fn settle(shared: &mut Shared) {
        if let Err(err) = Self::read_device(shared) {
            log::error!("the loss scaler's pending device steps were not read: {err}");
            shared.fail(err);
        }
    }

    /// [`settle`](Self::settle), then the stop a read found, if any (a panic: burn-train's
    /// `valid()` cannot return an error).
    pub(crate) fn settle_and_check(&self) {
        let mut guard = self.lock();
        Self::settle(&mut guard);
        if let Some(stop) = guard.device.as_mut().and_then(|d| d.awaiting.take_stop()) {
            drop(guard);
            panic!("the run stopped: {stop}");
        }
    }

    fn read_device(shared: &mut Shared) -> Result<Vec<StepOutcome>, StepError> {
        let Some(device) = shared.device.as_mut() else {
            return Ok(Vec::new());
        };
        let read = device.scaler.sync();
        device.learn(&read);
        shared.scaler = device.scaler.host();
        read
    }

    /// The error of the last optimizer step that could not run (a failed device read), or
    /// of a restore that was refused, if any (each is logged too). Such a step applied
    /// nothing and left the scale unchanged.
    ///
    /// ```
    /// assert!(burn_mpric::learner::ScalerHandle::default().last_error().is_none());
    /// ```
    pub fn last_error(&self) -> Option<String> {
        self.lock().last_error.clone()
    }

    /// The current scale (the one the next step's loss will be multiplied by).
    /// On the device path, the pending steps are read first ([`sync`](Self::sync)).
    ///
    /// ```
    /// use burn_mpric::learner::ScalerHandle;
    ///
    /// assert_eq!(ScalerHandle::default().scale(), 1.0);
    /// ```
    pub fn scale(&self) -> f32 {
        let mut shared = self.lock();
        Self::settle(&mut shared);
        shared.scaler.scale()
    }

    /// The scaler's counters (steps, skipped steps).
    /// On the device path, the pending steps are read first ([`sync`](Self::sync)).
    ///
    /// ```
    /// use burn_mpric::learner::ScalerHandle;
    ///
    /// assert_eq!(ScalerHandle::default().stats().skipped, 0);
    /// ```
    pub fn stats(&self) -> ScalerStats {
        let mut shared = self.lock();
        Self::settle(&mut shared);
        shared.scaler.stats()
    }

    /// A copy of the scaler (to checkpoint it, for example).
    /// On the device path, the pending steps are read first ([`sync`](Self::sync)).
    ///
    /// ```
    /// use burn_mpric::learner::ScalerHandle;
    ///
    /// assert_eq!(ScalerHandle::default().snapshot().scale(), 1.0);
    /// ```
    pub fn snapshot(&self) -> LossScaler {
        let mut shared = self.lock();
        Self::settle(&mut shared);
        shared.scaler
    }

    /// Replaces the shared scaler's state with `record` (scale, counters, configuration and
    /// clipping), for every clone of this handle.
    ///
    /// The record is validated first ([`LossScaler::from_record`]); an invalid one is an error
    /// and leaves the scaler unchanged. A valid record replaces the scaler whole, whatever its
    /// kind: a checkpoint's scaler wins over the one the handle was created with, as
    /// [`LossScaler::from_record`] and PyTorch's `GradScaler.load_state_dict` do (a warning is
    /// logged when its kind, configuration or clipping differs). Steps whose loss was scaled
    /// but whose optimizer step has not run are forgotten: their metrics items read no outcome.
    /// On the device path, a record that path cannot take (one that clips gradients, say) is
    /// logged as an error and leaves the scaler unchanged.
    ///
    /// ```
    /// use burn_mpric::scale::{LossScaleConfig, LossScaler};
    /// use burn_mpric::learner::ScalerHandle;
    ///
    /// let mut saved = LossScaler::dynamic(LossScaleConfig::new().with_initial_scale(8.0)).unwrap();
    /// saved.update(false);
    /// let handle = ScalerHandle::new(LossScaler::dynamic(LossScaleConfig::new()).unwrap());
    /// let clone = handle.clone();
    /// handle.restore(saved.to_record()).unwrap();
    /// assert_eq!((clone.scale(), clone.stats().skipped), (4.0, 1));
    ///
    /// let mut corrupted = saved.to_record();
    /// corrupted.scale = f32::NAN;
    /// assert!(handle.restore(corrupted).is_err());
    /// assert_eq!(clone.scale(), 4.0);
    /// ```
    pub fn restore(&self, record: LossScalerRecord) -> Result<(), StateError> {
        let restored = LossScaler::from_record(record)?;
        let mut shared = self.lock();
        let (old, new) = (shared.scaler.to_record(), restored.to_record());
        if (old.kind, old.config, old.clip_norm) != (new.kind, new.config, new.clip_norm) {
            log::warn!(
                "the restored loss scaler ({:?}, config {:?}, clip {:?}) replaces the one in use \
                 ({:?}, config {:?}, clip {:?})",
                new.kind,
                new.config,
                new.clip_norm,
                old.kind,
                old.config,
                old.clip_norm
            );
        }
        if let Some(device) = shared.device.as_mut() {
            // The device path goes on from the restored state, or keeps its own.
            if let Err(err) = device.scaler.restart(restored) {
                let refused = format!("{err}: the loss scaler keeps its state");
                log::error!("{refused}");
                shared.fail(refused);
                return Ok(());
            }
            device.awaiting.clear();
        }
        shared.restore(restored);
        Ok(())
    }

    /// Scales `loss` with the current scale and opens the slot that the step's optimizer
    /// decision will fill.
    /// On the device path the slot starts with the scaler as of the last read (the scale the
    /// loss is multiplied by is the device's), and its step's outcome fills it at a sync.
    pub(crate) fn scale_loss<B: AutodiffBackend, const D: usize>(
        &self,
        loss: Tensor<B, D>,
    ) -> (Tensor<B, D>, StepSlot) {
        let mut shared = self.lock();
        let slot = StepSlot::new(shared.scaler.scale(), shared.scaler.stats().skipped);
        shared.pending.push(slot.clone());
        let scaled = match shared.device.as_mut() {
            Some(device) => device.scaler::<B::InnerBackend>().scale_loss(loss),
            None => shared.scaler.scale_loss(loss),
        };
        (scaled, slot)
    }

    /// The type of the optimizer made for the device path, if the handle is on it.
    pub(crate) fn device_optimizer_type(&self) -> Option<&'static str> {
        self.lock().device.as_ref().map(|device| device.optimizer)
    }

    /// Sums the gradients with the other processes' when the handle runs across processes.
    pub(crate) fn sum_across_processes<AB, M>(
        &self,
        module: &M,
        grads: GradientsParams,
    ) -> Result<GradientsParams, StepError>
    where
        AB: AutodiffBackend,
        M: AutodiffModule<AB>,
    {
        match self.lock().parallel.as_mut() {
            Some(parallel) => parallel.sum_grads::<AB, M>(module, grads),
            None => Ok(grads),
        }
    }

    /// [`sum_across_processes`](Self::sum_across_processes) for gradients on several devices.
    pub(crate) fn sum_multi_across_processes<AB, M>(
        &self,
        module: &M,
        grads: MultiGradientsParams,
    ) -> Result<MultiGradientsParams, StepError>
    where
        AB: AutodiffBackend,
        M: AutodiffModule<AB>,
    {
        match self.lock().parallel.as_mut() {
            Some(parallel) => parallel.sum_multi_grads::<AB, M>(module, grads),
            None => Ok(grads),
        }
    }

    /// Runs one device-path optimizer step and hands the training steps since the last one
    /// to the step's outcome, for when the host reads it. Panics (burn-train's
    /// `Optimizer::step` cannot return an error) when the handle is not on the device path,
    /// and when a read found a stall: the run stops rather than go on in silence.
    pub(crate) fn device_step<AB, M>(
        &self,
        step: impl FnOnce(
            &mut DeviceLossScaler<AB::InnerBackend>,
        ) -> (M, Result<Vec<StepOutcome>, StepError>),
    ) -> M
    where
        AB: AutodiffBackend,
    {
        let mut guard = self.lock();
        let shared = &mut *guard;
        let Some(device) = shared.device.as_mut() else {
            drop(guard);
            panic!("a ScaledDeviceOptimizer steps a ScalerHandle that left the device path");
        };
        if let Some(stop) = device.awaiting.take_stop() {
            drop(guard);
            panic!("the run stopped: {stop}");
        }
        let slots = std::mem::take(&mut shared.pending);
        device.awaiting.push(slots);
        let (module, read) = step(device.scaler::<AB::InnerBackend>());
        device.learn(&read);
        shared.scaler = device.scaler.host();
        match read {
            Err(StepError::Stalled { .. }) => {
                let stop = device.awaiting.take_stop().unwrap_or_default();
                drop(guard);
                panic!("the run stopped: {stop}")
            }
            Err(err) => {
                log::warn!("the loss scaler's pending device steps were not read: {err}");
                shared.fail(err);
            }
            Ok(_) => {}
        }
        module
    }

    /// Runs one optimizer step with the scaler (`step` unscales, checks, steps or skips and
    /// updates the scale), then hands its outcome to every step that contributed gradients.
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
            // The device could not be read: nothing was applied and the scale is unchanged.
            Err(err) => {
                log::warn!("loss-scaled step not applied: {err}");
                shared.fail(err);
            }
        }
        module
    }

    fn lock(&self) -> MutexGuard<'_, Shared> {
        self.0.lock()
    }
}

impl Default for ScalerHandle {
    /// No scaling (bf16/f32 mode): non-finite steps are still skipped.
    fn default() -> Self {
        Self::new(LossScaler::noop())
    }
}

/// A module without parameters or devices: every operation keeps sharing the same scaler, and
/// the record is the scaler's state.
impl<B: Backend> Module<B> for ScalerHandle {
    type Record = LossScalerRecord;

    fn collect_devices(&self, devices: Devices<B>) -> Devices<B> {
        devices
    }

    fn fork(self, _device: &B::Device) -> Self {
        self
    }

    fn to_device(self, _device: &B::Device) -> Self {
        self
    }

    fn visit<V: ModuleVisitor<B>>(&self, _visitor: &mut V) {}

    fn map<M: ModuleMapper<B>>(self, _mapper: &mut M) -> Self {
        self
    }

    /// Restores `record` into the shared scaler (see [`ScalerHandle::restore`]). `load_record`
    /// cannot fail, so an invalid record is logged as an error and leaves the scaler unchanged;
    /// call [`ScalerHandle::restore`] to handle that error yourself.
    fn load_record(self, record: Self::Record) -> Self {
        if let Err(err) = self.restore(record) {
            log::error!("loss-scaler state not restored, the scaler keeps its state: {err}");
        }
        self
    }

    fn into_record(self) -> Self::Record {
        self.snapshot().to_record()
    }
}

impl<B: AutodiffBackend> AutodiffModule<B> for ScalerHandle {
    type InnerModule = ScalerHandle;

    /// The same shared scaler.
    fn valid(&self) -> Self::InnerModule {
        self.clone()
    }

    fn from_inner(module: Self::InnerModule) -> Self {
        module
    }
}

impl<B: AutodiffBackend> HasAutodiffModule<B> for ScalerHandle {
    type TrainModule = ScalerHandle;
}

impl ModuleDisplayDefault for ScalerHandle {
    fn content(&self, content: Content) -> Option<Content> {
        let (scale, stats) = {
            let shared = self.lock();
            (shared.scaler.scale(), shared.scaler.stats())
        };
        content
            .add_formatted(&format!(
                "LossScaler {{ scale: {scale}, steps: {}, skipped: {} }}",
                stats.steps, stats.skipped
            ))
            .optional()
    }
}

impl ModuleDisplay for ScalerHandle {}
