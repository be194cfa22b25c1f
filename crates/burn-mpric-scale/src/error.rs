//! Typed errors of this crate.

use std::path::PathBuf;

use burn::module::ParamId;
use burn::tensor::backend::ExecutionError;

use crate::invalid::LossScaleError;

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
