//! [`ScalerHandle`]: one loss scaler shared by a model's clones, and the steps waiting for
//! its decision.

use std::any::Any;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use burn::module::{
    AutodiffModule, Content, Devices, HasAutodiffModule, Module, ModuleDisplay,
    ModuleDisplayDefault, ModuleMapper, ModuleVisitor,
};
use burn::tensor::Tensor;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn_mpric::scale::{
    DataParallel, LossScaler, LossScalerRecord, ScalerStats, StateError, StepError, StepOutcome,
};

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
/// use burn_mpric_learner::ScalerHandle;
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
pub struct ScalerHandle(Arc<Mutex<Shared>>);

#[derive(Debug)]
struct Shared {
    scaler: LossScaler,
    /// Steps whose loss was scaled and whose optimizer step has not run yet (one per device,
    /// or several with gradient accumulation).
    pending: Vec<StepSlot>,
    /// The other processes of a run across processes, whose gradients each step adds.
    parallel: Option<DataParallel>,
    /// Copies of the pending steps' batches, for the probe of a skipped step.
    probe: ProbeInputs,
}

/// The batches of the steps since the last optimizer step, kept for the probe of a skipped
/// step ([`LossStep::probe_copy`](crate::LossStep::probe_copy)).
#[derive(Default)]
pub(crate) struct ProbeInputs(pub(crate) Vec<Box<dyn Any + Send>>);

impl fmt::Debug for ProbeInputs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} batches kept for the probe", self.0.len())
    }
}

impl ScalerHandle {
    /// Shares `scaler`.
    pub fn new(scaler: LossScaler) -> Self {
        Self(Arc::new(Mutex::new(Shared {
            scaler,
            pending: Vec::new(),
            parallel: None,
            probe: ProbeInputs::default(),
        })))
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
    /// use burn_mpric_learner::ScalerHandle;
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

    /// The current scale (the one the next step's loss will be multiplied by).
    ///
    /// ```
    /// use burn_mpric_learner::ScalerHandle;
    ///
    /// assert_eq!(ScalerHandle::default().scale(), 1.0);
    /// ```
    pub fn scale(&self) -> f32 {
        self.lock().scaler.scale()
    }

    /// The scaler's counters (steps, skipped steps).
    ///
    /// ```
    /// use burn_mpric_learner::ScalerHandle;
    ///
    /// assert_eq!(ScalerHandle::default().stats().skipped, 0);
    /// ```
    pub fn stats(&self) -> ScalerStats {
        self.lock().scaler.stats()
    }

    /// A copy of the scaler (to checkpoint it, for example).
    ///
    /// ```
    /// use burn_mpric_learner::ScalerHandle;
    ///
    /// assert_eq!(ScalerHandle::default().snapshot().scale(), 1.0);
    /// ```
    pub fn snapshot(&self) -> LossScaler {
        self.lock().scaler
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
    ///
    /// ```
    /// use burn_mpric::scale::{LossScaleConfig, LossScaler};
    /// use burn_mpric_learner::ScalerHandle;
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
        shared.scaler = restored;
        shared.pending.clear();
        shared.probe.0.clear();
        Ok(())
    }

    /// Scales `loss` with the current scale and opens the slot that the step's optimizer
    /// decision will fill.
    pub(crate) fn scale_loss<B: Backend, const D: usize>(
        &self,
        loss: Tensor<B, D>,
    ) -> (Tensor<B, D>, StepSlot) {
        let mut shared = self.lock();
        let slot = StepSlot::new(shared.scaler.scale(), shared.scaler.stats().skipped);
        shared.pending.push(slot.clone());
        (shared.scaler.scale_loss(loss), slot)
    }

    /// Runs one optimizer step with the scaler (`step` unscales, checks, steps or skips and
    /// updates the scale), then hands its outcome to every step that contributed gradients.
    /// Keeps a copy of a step's batch for the probe of the next optimizer step.
    pub(crate) fn keep_for_probe(&self, input: Box<dyn Any + Send>) {
        self.lock().probe.0.push(input);
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
            Err(err) => log::warn!("loss-scaled step not applied: {err}"),
        }
        module
    }

    fn lock(&self) -> MutexGuard<'_, Shared> {
        // A panic elsewhere while holding the lock leaves a consistent scaler (every
        // update replaces it whole), so a poisoned lock is still usable.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
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
