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

/// Skipped steps in a row after which a loss-scaled run stops, by default (optax's
/// `max_consecutive_errors`): a dynamic scale reaches its floor from 2^16 in 16 skips, so 50
/// in a row means that no scale helps.
///
/// # Example
///
/// ```
/// use burn_mpric_core::scale::DEFAULT_MAX_CONSECUTIVE_SKIPS;
///
/// assert!(DEFAULT_MAX_CONSECUTIVE_SKIPS > 16);
/// ```
pub const DEFAULT_MAX_CONSECUTIVE_SKIPS: u64 = 50;
