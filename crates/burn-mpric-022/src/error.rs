//! Typed errors of a loss-scaled step.

use burn::module::ParamId;
use burn::tensor::ExecutionError;

/// A failure while running one optimizer step through a [`LossScaler`](crate::LossScaler).
///
/// When a step fails, the optimizer was not called and the parameters are untouched; the
/// scaler's state is unchanged, except after [`StepError::Stalled`] (a skipped step, recorded).
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
    /// The step was skipped, and so were the `max - 1` before it: no loss scale lets this run
    /// train ([`LossScaler::with_max_consecutive_skips`](crate::LossScaler::with_max_consecutive_skips)).
    /// Unlike the other errors, this step was recorded: the scaler moved on as for any skipped
    /// step, and `outcome` is what it reported.
    #[error("{}", outcome.stalled_message(*max))]
    Stalled {
        /// The limit that was reached.
        max: u64,
        /// The last step's outcome (its overflowing parameters and, from
        /// [`step_with`](crate::LossScaler::step_with), its cause).
        outcome: Box<burn_mpric_core::scale::StepOutcome>,
    },
    /// The device path ([`DeviceLossScaler`](crate::DeviceLossScaler)) cannot take this
    /// scaler's steps as the host would; the reason says why and what to use instead.
    #[error("this scaler cannot decide on the device: {0}")]
    NotOnDevice(String),
    /// A sum across processes ([`DataParallel`](crate::DataParallel)) failed: a process was
    /// lost or refused, named in the message.
    #[error("the sum across processes failed: {0}")]
    Transport(#[from] burn_mpric_cluster::ClusterError),
}

impl From<burn_mpric_core::scale::SettleError> for StepError {
    fn from(error: burn_mpric_core::scale::SettleError) -> Self {
        use burn_mpric_core::scale::SettleError;
        match error {
            SettleError::UnexpectedRead(what) => StepError::UnexpectedRead(what),
            SettleError::Stalled { max, outcome } => StepError::Stalled { max, outcome },
        }
    }
}
