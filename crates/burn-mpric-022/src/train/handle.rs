//! [`ScalerHandle`]: one loss scaler shared by a model's clones, and the steps waiting for its
//! decision.

use std::any::Any;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use burn::tensor::Tensor;
use burn_mpric_core::scale::{ScalerStats, StepOutcome};

use super::record::StepSlot;
use crate::{DataParallel, LossScaler, StepError};

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
pub struct ScalerHandle(Arc<Mutex<Shared>>);

#[derive(Debug)]
struct Shared {
    scaler: LossScaler,
    /// Steps whose loss was scaled and whose optimizer step has not run yet (one per device,
    /// or several with gradient accumulation).
    pending: Vec<StepSlot>,
    /// The last optimizer step that failed (the device could not be read).
    last_error: Option<String>,
    /// The other processes of a run across processes, whose gradients each step adds.
    parallel: Option<DataParallel>,
    /// Copies of the pending steps' batches, for the probe of a skipped step.
    probe: ProbeInputs,
}

/// The batches of the steps since the last optimizer step, kept for the probe of a skipped
/// step ([`LossStep::probe_copy`](super::LossStep::probe_copy)).
#[derive(Default)]
pub(crate) struct ProbeInputs(pub(crate) Vec<Box<dyn Any + Send>>);

impl fmt::Debug for ProbeInputs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} batches kept for the probe", self.0.len())
    }
}

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
        Self(Arc::new(Mutex::new(Shared {
            scaler,
            pending: Vec::new(),
            last_error: None,
            parallel: None,
            probe: ProbeInputs::default(),
        })))
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
    ///
    /// # Example
    ///
    /// ```
    /// assert_eq!(burn_mpric_022::ScalerHandle::default().scale(), 1.0);
    /// ```
    pub fn scale(&self) -> f32 {
        self.lock().scaler.scale()
    }

    /// The scaler's counters (steps, skipped steps).
    ///
    /// # Example
    ///
    /// ```
    /// assert_eq!(burn_mpric_022::ScalerHandle::default().stats().skipped, 0);
    /// ```
    pub fn stats(&self) -> ScalerStats {
        self.lock().scaler.stats()
    }

    /// A copy of the scaler, to checkpoint it.
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
        self.lock().scaler
    }

    /// Replaces the shared scaler (a resumed run puts its saved state back); every clone of
    /// the handle sees it.
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
        self.lock().scaler = scaler;
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
    /// will fill.
    pub(crate) fn scale_loss<const D: usize>(&self, loss: Tensor<D>) -> (Tensor<D>, StepSlot) {
        let mut shared = self.lock();
        let slot = StepSlot::new(shared.scaler.scale(), shared.scaler.stats().skipped);
        shared.pending.push(slot.clone());
        (shared.scaler.scale_loss(loss), slot)
    }

    /// Runs one optimizer step with the scaler, then hands its outcome to every step that
    /// contributed gradients.
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
            Err(err) => shared.last_error = Some(err.to_string()),
        }
        module
    }

    fn lock(&self) -> MutexGuard<'_, Shared> {
        // Every update replaces the scaler whole, so a lock poisoned by a panic elsewhere
        // still holds a consistent state.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Default for ScalerHandle {
    /// No scaling (bf16 and f32 policies); non-finite steps are still skipped.
    fn default() -> Self {
        Self::new(LossScaler::noop())
    }
}
