//! The no-op loss scale (scale 1): for bf16 and f32 training.

/// A loss scale of exactly 1 that never changes: scaling and unscaling are the identity.
///
/// This is the bf16 mode: bf16 has f32's exponent range, so no scaling is needed, but a
/// loss scaler ([`ScalerState`](crate::scale::ScalerState)) built on it still checks every step's gradients and skips
/// (and counts) non-finite steps.
///
/// # Example
///
/// ```
/// use burn_mpric_core::scale::NoOpLossScale;
///
/// let s = NoOpLossScale;
/// assert_eq!(s.loss_scale(), 1.0);
/// assert_eq!(s.adjust(false), s);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NoOpLossScale;

impl NoOpLossScale {
    /// Always 1.
    ///
    /// # Example
    ///
    /// ```
    /// assert_eq!(burn_mpric_core::scale::NoOpLossScale.loss_scale(), 1.0);
    /// ```
    pub fn loss_scale(&self) -> f32 {
        1.0
    }

    /// Itself: nothing to update.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::scale::NoOpLossScale;
    ///
    /// assert_eq!(NoOpLossScale.adjust(false), NoOpLossScale);
    /// ```
    #[must_use]
    pub fn adjust(self, _grads_finite: bool) -> Self {
        self
    }
}
