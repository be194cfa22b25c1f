//! [`ClipNorm`]: the rules of global-norm gradient clipping, without the tensors.

use super::invalid::LossScaleError;

/// Global-norm clipping to `max_norm`, applied after unscaling: every gradient is multiplied
/// by [`coefficient`](Self::coefficient) of the global norm (PyTorch's
/// `clip_grad_norm_`: `max_norm / (norm + 1e-6)`, at most 1).
///
/// # Example
///
/// ```
/// use burn_mpric_core::scale::ClipNorm;
///
/// let clip = ClipNorm::new(5.0).unwrap();
/// assert!((clip.coefficient(50.0) - 0.1).abs() < 1e-6);
/// assert_eq!(clip.coefficient(1.0), 1.0);
/// assert!(ClipNorm::new(0.0).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClipNorm {
    max_norm: f32,
}

impl ClipNorm {
    /// Clipping to `max_norm`, which must be finite and positive.
    ///
    /// ```
    /// use burn_mpric_core::scale::ClipNorm;
    ///
    /// assert!(ClipNorm::new(f32::NAN).is_err());
    /// assert!(ClipNorm::new(-1.0).is_err());
    /// ```
    pub fn new(max_norm: f32) -> Result<Self, LossScaleError> {
        if max_norm.is_finite() && max_norm > 0.0 {
            Ok(Self { max_norm })
        } else {
            Err(LossScaleError::InvalidClipNorm(max_norm))
        }
    }

    /// The maximum global norm.
    ///
    /// ```
    /// assert_eq!(burn_mpric_core::scale::ClipNorm::new(2.0).unwrap().max_norm(), 2.0);
    /// ```
    pub fn max_norm(&self) -> f32 {
        self.max_norm
    }

    /// The factor every gradient is multiplied by when the global norm is `total_norm`.
    ///
    /// ```
    /// use burn_mpric_core::scale::ClipNorm;
    ///
    /// assert_eq!(ClipNorm::new(1.0).unwrap().coefficient(0.5), 1.0);
    /// ```
    pub fn coefficient(&self, total_norm: f64) -> f64 {
        (f64::from(self.max_norm) / (total_norm + 1e-6)).min(1.0)
    }
}

impl ClipNorm {
    /// Judges a step's global norm: a norm that is not finite, or not representable in f32,
    /// would clip every gradient to zero (or to NaN), so the step counts as non-finite.
    /// Returns whether the step stays finite and the norm to report (NaN, infinity, or the
    /// norm as f32).
    ///
    /// ```
    /// use burn_mpric_core::scale::ClipNorm;
    ///
    /// assert_eq!(ClipNorm::judge(true, 3.0), (true, 3.0));
    /// assert_eq!(ClipNorm::judge(true, 1e300), (false, f32::INFINITY));
    /// assert!(!ClipNorm::judge(true, f64::NAN).0);
    /// ```
    pub fn judge(finite: bool, norm: f64) -> (bool, f32) {
        let representable = norm.is_finite() && norm <= f64::from(f32::MAX);
        let reported = if norm.is_nan() {
            f32::NAN
        } else if representable {
            norm as f32
        } else {
            f32::INFINITY
        };
        (finite && representable, reported)
    }
}
