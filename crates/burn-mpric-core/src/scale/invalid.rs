//! [`LossScaleError`]: an invalid loss-scale setting (no Burn type: the state machines use it).

use super::limits::MIN_SCALE;

/// A loss-scale configuration or state that this crate refuses to build.
///
/// Every constructor validates its input and returns this error instead of panicking, so a scale
/// can never be 0, negative, infinite or NaN.
///
/// # Example
///
/// ```
/// use burn_mpric_core::scale::{LossScaleError, StaticLossScale};
///
/// let err = StaticLossScale::new(f32::NAN).unwrap_err();
/// assert!(matches!(err, LossScaleError::InvalidScale { .. }));
/// ```
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LossScaleError {
    /// A scale value (initial, minimum, maximum or current) is not a finite f32 of at least
    /// [`MIN_SCALE`](crate::scale::MIN_SCALE).
    #[error(
        "{name} must be a finite f32 of at least {min:e} (so that its inverse is finite), got {value}",
        min = MIN_SCALE
    )]
    InvalidScale {
        /// Which value was rejected (`"initial scale"`, `"min scale"`, ...).
        name: &'static str,
        /// The rejected value.
        value: f32,
    },
    /// The growth factor is not finite or not greater than 1.
    #[error("growth factor must be finite and greater than 1, got {0}")]
    InvalidGrowthFactor(f64),
    /// The backoff factor is not in the open interval (0, 1).
    #[error("backoff factor must satisfy 0 < backoff < 1, got {0}")]
    InvalidBackoffFactor(f64),
    /// A loss-scale preset name that is not known.
    #[error("{0}")]
    UnknownPreset(String),
    /// An update-rule name that is not known.
    #[error("{0}")]
    UnknownRule(String),
    /// The growth interval is 0.
    #[error("growth interval must be at least 1")]
    ZeroGrowthInterval,
    /// The hysteresis is 0 (1 means "back off on the first overflow").
    #[error("hysteresis must be at least 1 (1 turns it off)")]
    ZeroHysteresis,
    /// The minimum scale is above the maximum scale.
    #[error("min scale {min} is greater than max scale {max}")]
    MinAboveMax {
        /// The configured minimum.
        min: f32,
        /// The configured maximum.
        max: f32,
    },
    /// A scale lies outside `[min_scale, max_scale]`.
    #[error("{name} {value} lies outside the configured bounds [{min}, {max}]")]
    ScaleOutOfBounds {
        /// Which value was rejected.
        name: &'static str,
        /// The rejected value.
        value: f32,
        /// The configured minimum.
        min: f32,
        /// The configured maximum (`f32::MAX` when unbounded).
        max: f32,
    },
    /// A restored growth counter is not below (or, for the Flax rule, not at most) the interval.
    #[error("growth counter {counter} is out of range for growth interval {interval}")]
    CounterOutOfRange {
        /// The rejected counter.
        counter: u32,
        /// The configured growth interval.
        interval: u32,
    },
    /// A restored hysteresis tracker exceeds the configured hysteresis.
    #[error("hysteresis tracker {left} exceeds the configured hysteresis {hysteresis}")]
    HysteresisOutOfRange {
        /// The rejected tracker value.
        left: u32,
        /// The configured hysteresis.
        hysteresis: u32,
    },
    /// The clipping norm is not finite and positive.
    #[error("max gradient norm must be finite and positive, got {0}")]
    InvalidClipNorm(f32),
}
