//! [`ScalerHandle`]: one loss scaler shared by a model's clones, and the steps waiting for
//! its decision.

use std::sync::{Arc, Mutex, MutexGuard};

use burn::tensor::Tensor;
use burn::tensor::backend::Backend;
use burn_mpric::scale::{LossScaler, ScalerStats, StepError, StepOutcome};

use crate::record::StepSlot;

/// A [`LossScaler`] shared between the training steps and the optimizer steps (burn-train
/// clones the model, and runs one clone per device; every clone sees the same scaler).
///
/// Metrics do not read it: each step's outcome travels with the step's output item (see
/// [`ScaleRecord`](crate::ScaleRecord)), so a metric processed several steps later still
/// describes its own step.
///
/// ```
/// use burn_mpric::scale::LossScaler;
/// use burn_mpric_learner::ScalerHandle;
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
}

impl ScalerHandle {
    /// Shares `scaler`.
    pub fn new(scaler: LossScaler) -> Self {
        Self(Arc::new(Mutex::new(Shared {
            scaler,
            pending: Vec::new(),
        })))
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
    pub(crate) fn optimizer_step<M>(
        &self,
        step: impl FnOnce(&mut LossScaler) -> (M, Result<StepOutcome, StepError>),
    ) -> M {
        let mut shared = self.lock();
        let (module, outcome) = step(&mut shared.scaler);
        let pending = std::mem::take(&mut shared.pending);
        match outcome {
            Ok(outcome) => pending.iter().for_each(|slot| slot.decide(outcome)),
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
