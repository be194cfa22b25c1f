//! Typed errors of a loss-scaled step.

use burn::module::ParamId;
use burn::tensor::ExecutionError;

/// A failure while running one optimizer step through a [`LossScaler`](crate::LossScaler).
///
/// When a step fails, the scaler's state is unchanged, the optimizer was not called and the
/// parameters are untouched.
///
/// # Example
///
/// ```
/// use burn::module::ParamId;
/// use burn_mpric_022::StepError;
///
/// let err = StepError::GradientShape { param: ParamId::new(), expected: vec![2, 2], got: vec![3] };
/// assert!(err.to_string().contains("[3]"));
/// ```
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    /// The device could not be read (the one host read of the step).
    #[error("reading the step's values from the device failed: {0}")]
    Read(#[from] ExecutionError),
    /// The device returned data of an unexpected length or type.
    #[error("the device returned unexpected data: {0}")]
    UnexpectedRead(String),
    /// A gradient registered for a parameter of the module has another shape than the
    /// parameter: it was registered under the wrong [`ParamId`] or computed wrongly.
    #[error(
        "the gradient of parameter {param} has shape {got:?}, but the parameter has shape {expected:?}"
    )]
    GradientShape {
        /// The parameter the gradient was registered for.
        param: ParamId,
        /// The parameter's shape.
        expected: Vec<usize>,
        /// The gradient's shape.
        got: Vec<usize>,
    },
    /// A sum across processes ([`DataParallel`](crate::DataParallel)) failed: a process was
    /// lost or refused, named in the message.
    #[error("the sum across processes failed: {0}")]
    Transport(#[from] burn_mpric_cluster::ClusterError),
}
