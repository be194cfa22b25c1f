//! Typed errors. Every message is one line; recipe errors name the file and the field.

use std::fmt;
use std::path::{Path, PathBuf};

use burn_mpric_cluster::ClusterError;

/// A problem with one field of a recipe: which field (dotted path, e.g. `optimizer.lr`) and
/// what is wrong with it, including what is accepted.
///
/// ```
/// use burn_mpric_train::RecipeError;
///
/// let err = RecipeError::new("optimizer.lr", "must be > 0, got -0.1");
/// assert_eq!(err.to_string(), "optimizer.lr: must be > 0, got -0.1");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecipeError {
    /// The dotted path of the field (`model.hidden[1]`, `policy`, ...).
    pub field: String,
    /// What is wrong and what is accepted.
    pub message: String,
}

impl RecipeError {
    /// A new field error.
    ///
    /// ```
    /// use burn_mpric_train::RecipeError;
    ///
    /// assert_eq!(RecipeError::new("steps", "must be > 0").field, "steps");
    /// ```
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }

    /// The same error attributed to a recipe file.
    ///
    /// ```
    /// use burn_mpric_train::RecipeError;
    ///
    /// let err = RecipeError::new("seed", "bad").in_file("r.toml");
    /// assert_eq!(err.to_string(), "r.toml: seed: bad");
    /// ```
    pub fn in_file(self, file: impl Into<String>) -> Error {
        Error::Recipe {
            file: file.into(),
            error: self,
        }
    }
}

impl fmt::Display for RecipeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.field, self.message)
        }
    }
}

impl std::error::Error for RecipeError {}

/// Everything that can go wrong in this crate.
///
/// [`exit_code`](Self::exit_code) maps each error to the CLI's exit status: 2 for a bad
/// recipe, bad arguments or a refused checkpoint, 3 for a diverged run, 1 for other failures.
///
/// ```
/// use burn_mpric_train::{Error, RecipeError};
///
/// let err = RecipeError::new("batch_size", "must be > 0, got 0").in_file("recipes/x.toml");
/// assert_eq!(err.exit_code(), 2);
/// assert_eq!(err.to_string(), "recipes/x.toml: batch_size: must be > 0, got 0");
/// ```
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The recipe file could not be read (missing, unreadable).
    #[error("{}: cannot read the recipe: {source}", path.display())]
    ReadRecipe {
        /// The recipe path as given.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A recipe field is invalid (syntax, type, value, or not runnable on the backend).
    #[error("{file}: {error}")]
    Recipe {
        /// The recipe file as given.
        file: String,
        /// The field and the problem.
        error: RecipeError,
    },
    /// A `--set key=value` argument is malformed.
    #[error("--set {arg}: {message}")]
    Override {
        /// The argument as given.
        arg: String,
        /// What is wrong.
        message: String,
    },
    /// A bad command-line argument (other than a recipe).
    #[error("{0}")]
    Usage(String),
    /// `--resume` cannot continue (no checkpoint, or a recipe that differs from the run's).
    #[error("--resume: {0}")]
    Resume(String),
    /// An input of `evaluate`, `predict` or `export` is refused: a checkpoint that fails
    /// verification or belongs to another recipe, a data file that does not fit the model,
    /// an empty prompt, an unwritable destination.
    #[error("{0}")]
    Input(String),
    /// A fresh run was asked for in an output folder that holds a run.
    #[error(
        "{}: the output folder already holds a run (checkpoint at step {step}); pass --resume to continue it or --overwrite to start over",
        path.display()
    )]
    OutputInUse {
        /// The output folder.
        path: PathBuf,
        /// The step of its latest checkpoint.
        step: u64,
    },
    /// Another run holds the output folder's lock.
    #[error(
        "{}: another mpric run is writing to this output folder; wait for it to finish or choose another output",
        path.display()
    )]
    Locked {
        /// The output folder.
        path: PathBuf,
    },
    /// The run diverged: parameters became non-finite, or too many steps in a row were
    /// skipped. The last good checkpoint is kept.
    #[error("step {step}: the run diverged: {reason}; {}", match last_checkpoint {
        Some(s) => format!("the last good checkpoint, step {s}, is kept"),
        None => "no checkpoint was written".to_string(),
    })]
    Diverged {
        /// The step at which the run stopped.
        step: u64,
        /// What happened.
        reason: String,
        /// The step of the newest checkpoint, if any.
        last_checkpoint: Option<u64>,
    },
    /// Reading or writing a file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A checkpoint file exists but cannot be loaded.
    #[error("{}: {message}", path.display())]
    Checkpoint {
        /// The file.
        path: PathBuf,
        /// What failed.
        message: String,
    },
    /// A training step failed (the device could not be read).
    #[error("step {step}: {source}")]
    Step {
        /// The step that failed.
        step: u64,
        /// The scaler's error.
        source: burn_mpric::scale::StepError,
    },
    /// A plot could not be drawn.
    #[error("{}: cannot draw the plot: {message}", path.display())]
    Plot {
        /// The plot file.
        path: PathBuf,
        /// What failed.
        message: String,
    },
    /// A multi-process run stopped: a rank was lost or refused, or the coordinator could not
    /// be reached; `rank` and `world` say which process this is.
    #[error("rank {rank} of {world}: {source}")]
    Cluster {
        /// This process's rank.
        rank: usize,
        /// The number of processes.
        world: usize,
        /// What happened.
        source: burn_mpric_cluster::ClusterError,
    },
    /// Processes started by `mpric launch` failed; the launcher exits with the status of the
    /// first one that did.
    #[error("{summary}")]
    Launched {
        /// Each failed process and how it ended, in the order they ended.
        summary: String,
        /// The rank that failed first.
        first: usize,
        /// Its exit status (1 when a signal ended it).
        code: u8,
    },
    /// An inconsistency inside the trainer (a bug, reported instead of a panic).
    #[error("internal error: {0}")]
    Internal(String),
}

impl Error {
    /// The CLI exit status for this error: 2 for what the CLI refuses (bad recipes and
    /// arguments, a checkpoint that fails verification, a locked output folder), 3 for a run
    /// that diverged, 1 for other failures.
    ///
    /// ```
    /// use burn_mpric_train::Error;
    ///
    /// assert_eq!(Error::Internal("x".into()).exit_code(), 1);
    /// assert_eq!(Error::Resume("no checkpoint".into()).exit_code(), 2);
    /// let diverged = Error::Diverged { step: 3, reason: "x".into(), last_checkpoint: None };
    /// assert_eq!(diverged.exit_code(), 3);
    /// ```
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::ReadRecipe { .. }
            | Error::Recipe { .. }
            | Error::Override { .. }
            | Error::Usage(_)
            | Error::Resume(_)
            | Error::Input(_)
            | Error::OutputInUse { .. }
            | Error::Locked { .. } => 2,
            Error::Cluster { source, .. } => match source {
                // Nothing ran: the processes were started with different recipes or
                // arguments, or the address is unusable.
                ClusterError::Refused { .. }
                | ClusterError::RankRefused { .. }
                | ClusterError::Bind { .. }
                | ClusterError::Config(_) => 2,
                _ => 1,
            },
            Error::Launched { code, .. } => *code,
            Error::Diverged { .. } => 3,
            Error::Io { .. }
            | Error::Checkpoint { .. }
            | Error::Step { .. }
            | Error::Plot { .. }
            | Error::Internal(_) => 1,
        }
    }

    /// An I/O error on `path`.
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        Error::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    /// A checkpoint file that cannot be loaded.
    pub(crate) fn checkpoint(path: &Path, message: impl fmt::Display) -> Self {
        Error::Checkpoint {
            path: path.to_path_buf(),
            message: message.to_string(),
        }
    }
}
