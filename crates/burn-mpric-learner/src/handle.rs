//! [`ScalerHandle`]: one loss scaler shared by a model's clones and the metrics.

use std::sync::{Arc, Mutex, MutexGuard};

use burn_mpric::scale::{LossScaler, ScalerStats};

/// A [`LossScaler`] shared between the training step, the optimizer step and the metrics
/// (burn-train clones the model; every clone sees the same scaler).
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
pub struct ScalerHandle(Arc<Mutex<LossScaler>>);

impl ScalerHandle {
    /// Shares `scaler`.
    pub fn new(scaler: LossScaler) -> Self {
        Self(Arc::new(Mutex::new(scaler)))
    }

    /// The current scale.
    ///
    /// ```
    /// use burn_mpric_learner::ScalerHandle;
    ///
    /// assert_eq!(ScalerHandle::default().scale(), 1.0);
    /// ```
    pub fn scale(&self) -> f32 {
        self.lock().scale()
    }

    /// The scaler's counters (steps, skipped steps).
    ///
    /// ```
    /// use burn_mpric_learner::ScalerHandle;
    ///
    /// assert_eq!(ScalerHandle::default().stats().skipped, 0);
    /// ```
    pub fn stats(&self) -> ScalerStats {
        self.lock().stats()
    }

    /// A copy of the scaler (to checkpoint it, for example).
    ///
    /// ```
    /// use burn_mpric_learner::ScalerHandle;
    ///
    /// assert_eq!(ScalerHandle::default().snapshot().scale(), 1.0);
    /// ```
    pub fn snapshot(&self) -> LossScaler {
        *self.lock()
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, LossScaler> {
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
