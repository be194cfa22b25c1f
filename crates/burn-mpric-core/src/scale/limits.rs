//! The bounds every loss scale stays within.

/// The smallest scale this crate accepts: `f32::MIN_POSITIVE` (2^-126).
///
/// Every scale is at least this value, so both the scale and its inverse (at most 2^126) are
/// finite, positive f32 values. Backoff stops at the configured `min_scale`, which cannot be lower.
///
/// # Example
///
/// ```
/// use burn_mpric_core::scale::MIN_SCALE;
///
/// assert_eq!(MIN_SCALE, 2f32.powi(-126));
/// assert!((1.0 / MIN_SCALE).is_finite());
/// ```
pub const MIN_SCALE: f32 = f32::MIN_POSITIVE;
