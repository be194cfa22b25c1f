//! A fixed loss scale.

use super::invalid::LossScaleError;
use super::limits::MIN_SCALE;

/// A loss scale `S` that never changes (jmp `StaticLossScale`, DeepSpeed's static `loss_scale`).
///
/// Non-finite steps are still detected and skipped by a loss scaler ([`ScalerState`](crate::scale::ScalerState)); only
/// the scale stays the same.
///
/// # Example
///
/// ```
/// use burn_mpric_core::scale::StaticLossScale;
///
/// let s = StaticLossScale::new(1024.0).unwrap();
/// assert_eq!(s.adjust(false).loss_scale(), 1024.0);
/// assert!(StaticLossScale::new(0.0).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StaticLossScale {
    scale: f32,
}

impl StaticLossScale {
    /// A static scale; rejects anything that is not a finite f32 of at least
    /// [`MIN_SCALE`](MIN_SCALE).
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::scale::StaticLossScale;
    ///
    /// assert!(StaticLossScale::new(128.0).is_ok());
    /// assert!(StaticLossScale::new(f32::INFINITY).is_err());
    /// assert!(StaticLossScale::new(-2.0).is_err());
    /// ```
    pub fn new(scale: f32) -> Result<Self, LossScaleError> {
        if scale.is_finite() && scale >= MIN_SCALE {
            Ok(Self { scale })
        } else {
            Err(LossScaleError::InvalidScale {
                name: "static scale",
                value: scale,
            })
        }
    }

    /// The fixed scale.
    ///
    /// # Example
    ///
    /// ```
    /// assert_eq!(burn_mpric_core::scale::StaticLossScale::new(4.0).unwrap().loss_scale(), 4.0);
    /// ```
    pub fn loss_scale(&self) -> f32 {
        self.scale
    }

    /// Itself: a static scale never changes.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::scale::StaticLossScale;
    ///
    /// let s = StaticLossScale::new(4.0).unwrap();
    /// assert_eq!(s.adjust(false), s);
    /// ```
    #[must_use]
    pub fn adjust(self, _grads_finite: bool) -> Self {
        self
    }
}
