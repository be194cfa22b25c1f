//! Typed errors of this crate.

use std::path::PathBuf;

use burn::module::ParamId;
use burn::tensor::backend::ExecutionError;

use crate::limits::MIN_SCALE;

/// A loss-scale configuration or state that this crate refuses to build.
///
/// Every constructor validates its input and returns this error instead of panicking, so a scale
/// can never be 0, negative, infinite or NaN.
///
/// # Example
///
/// ```
/// use burn_mpric_scale::{LossScaleError, StaticLossScale};
///
/// let err = StaticLossScale::new(f32::NAN).unwrap_err();
/// assert!(matches!(err, LossScaleError::InvalidScale { .. }));
/// ```
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LossScaleError {
    /// A scale value (initial, minimum, maximum or current) is not a finite f32 of at least
    /// [`MIN_SCALE`](crate::MIN_SCALE).
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

/// A failure while running one optimizer step through a [`LossScaler`](crate::LossScaler).
///
/// When a step fails, the scaler's state is unchanged, the optimizer was not called and the
/// parameters are untouched.
///
/// # Example
///
/// ```
/// use burn::module::ParamId;
/// use burn_mpric_scale::StepError;
///
/// let err = StepError::UnexpectedRead("flag had 0 values".into());
/// assert!(err.to_string().contains("flag had 0 values"));
///
/// let err = StepError::GradientShape { param: ParamId::new(), expected: vec![2, 2], got: vec![3] };
/// assert!(err.to_string().contains("[3]"));
/// ```
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    /// The device could not be read (the one host read of the step).
    #[error("reading the step's values from the device failed: {0}")]
    Read(#[from] ExecutionError),
    /// The device returned data of an unexpected shape or type.
    #[error("the device returned unexpected data: {0}")]
    UnexpectedRead(String),
    /// A gradient registered for a parameter of the module has another shape (or rank) than
    /// the parameter; it was registered under the wrong [`ParamId`] or computed wrongly.
    #[error(
        "the gradient of parameter {param} has shape {got:?}, but the parameter has shape {expected:?}"
    )]
    GradientShape {
        /// The parameter the gradient was registered for.
        param: ParamId,
        /// The parameter's shape.
        expected: Vec<usize>,
        /// The gradient's shape (its real dimensions, whatever rank it was registered with).
        got: Vec<usize>,
    },
    /// An all-reduce through burn-collective failed (a peer that did not register, tensors of
    /// different shapes on different peers, ...).
    #[cfg(feature = "collective")]
    #[error("the all-reduce through burn-collective failed: {0}")]
    Collective(String),
}

/// A saved scaler state that cannot be loaded.
///
/// # Example
///
/// ```
/// use burn_mpric_scale::{LossScaler, LossScalerRecord, StateError};
///
/// let mut record = LossScaler::default().to_record();
/// record.format_version = 99;
/// let err = LossScaler::from_record(record).unwrap_err();
/// assert!(matches!(err, StateError::UnsupportedVersion { found: 99, .. }));
/// ```
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The file could not be written or read (missing, unreadable, no space left, ...).
    #[error("the loss-scaler state file {path} could not be written or read: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The file is larger than any loss-scaler state
    /// ([`MAX_STATE_FILE_BYTES`](crate::MAX_STATE_FILE_BYTES)); it was not read further.
    #[error("the loss-scaler state file {path} is larger than {max} bytes")]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The limit, in bytes.
        max: usize,
    },
    /// The file's content is not a loss-scaler state (empty, truncated, corrupt, or another
    /// kind of file), or the state could not be encoded.
    #[error("{path} does not hold a loss-scaler state: {reason}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        reason: String,
    },
    /// The record was written by an unknown format version.
    #[error("loss-scaler record format version {found} is not supported (expected {expected})")]
    UnsupportedVersion {
        /// The version found in the record.
        found: u32,
        /// The version this crate writes.
        expected: u32,
    },
    /// The record's fields do not describe a valid state.
    #[error("the loss-scaler record holds an invalid state: {0}")]
    Invalid(#[from] LossScaleError),
    /// A dynamic record without its configuration.
    #[error("a dynamic loss-scale record must carry its configuration")]
    MissingConfig,
    /// Counters that cannot happen (more skipped steps than steps, ...).
    #[error("inconsistent step counters: {0:?}")]
    InconsistentStats(crate::ScalerStats),
}
