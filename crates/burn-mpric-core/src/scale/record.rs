//! [`ScalerRecord`]: the saved state of a loss scaler, in one format for both editions, and
//! the files it is saved in.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use super::clip::ClipNorm;
use super::config::LossScaleConfig;
use super::dynamic::DynamicLossScale;
use super::invalid::LossScaleError;
use super::loss_scale::LossScale;
use super::noop::NoOpLossScale;
use super::outcome::ScalerStats;
use super::state::ScalerState;
use super::static_scale::StaticLossScale;

/// The record format both editions write and read.
///
/// # Example
///
/// ```
/// use burn_mpric_core::scale::{RECORD_FORMAT_VERSION, ScalerState};
///
/// assert_eq!(ScalerState::default().to_record().format_version, RECORD_FORMAT_VERSION);
/// ```
pub const RECORD_FORMAT_VERSION: u32 = 1;

/// The largest state file [`ScalerState::load_file`] reads (64 KiB; a saved state takes well
/// under 1 KiB).
///
/// # Example
///
/// ```
/// use burn_mpric_core::scale::{MAX_STATE_FILE_BYTES, ScalerState, StateError};
///
/// let path = std::env::temp_dir().join(format!("scaler-large-doc-{}", std::process::id()));
/// std::fs::write(&path, vec![b' '; MAX_STATE_FILE_BYTES + 1]).unwrap();
/// assert!(matches!(ScalerState::load_file(&path), Err(StateError::TooLarge { .. })));
/// # std::fs::remove_file(&path).unwrap();
/// ```
pub const MAX_STATE_FILE_BYTES: usize = 64 * 1024;

/// Which loss scale a record holds.
///
/// # Example
///
/// ```
/// use burn_mpric_core::scale::{LossScaleKind, ScalerState};
///
/// assert_eq!(ScalerState::noop().to_record().kind, LossScaleKind::NoOp);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LossScaleKind {
    /// [`NoOpLossScale`].
    NoOp,
    /// [`StaticLossScale`].
    Static,
    /// [`DynamicLossScale`].
    Dynamic,
}

/// The complete state of a loss scaler: scale, counters, configuration and clipping. Both
/// editions save exactly this (as JSON in a state file, or inside their Burn records), so a
/// state saved by one loads in the other. [`ScalerState::from_record`] validates every field.
///
/// # Example
///
/// ```
/// use burn_mpric_core::scale::{LossScaleConfig, ScalerState};
///
/// let mut scaler = ScalerState::dynamic(LossScaleConfig::new().with_initial_scale(8.0)).unwrap();
/// scaler.update(false);
/// let record = scaler.to_record();
/// assert_eq!(record.scale, 4.0);
/// assert_eq!(ScalerState::from_record(record).unwrap(), scaler);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScalerRecord {
    /// The record format ([`RECORD_FORMAT_VERSION`]).
    pub format_version: u32,
    /// Which loss scale this is.
    pub kind: LossScaleKind,
    /// The current scale.
    pub scale: f32,
    /// The growth counter (dynamic only; 0 otherwise).
    pub counter: u32,
    /// The hysteresis tracker (dynamic only; 0 otherwise).
    pub hysteresis_left: u32,
    /// The configuration (dynamic only).
    pub config: Option<LossScaleConfig>,
    /// The global-norm clipping threshold, if clipping is on.
    pub clip_norm: Option<f32>,
    /// The running counters.
    pub stats: ScalerStats,
}

/// Why a saved loss-scaler state could not be written, read or trusted.
///
/// # Example
///
/// ```
/// use burn_mpric_core::scale::{ScalerState, StateError};
///
/// let mut record = ScalerState::noop().to_record();
/// record.format_version = 99;
/// assert!(matches!(
///     ScalerState::from_record(record),
///     Err(StateError::UnsupportedVersion { found: 99, .. })
/// ));
/// ```
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The state file could not be written or read.
    #[error("the loss-scaler state file {path} could not be written or read: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// The state file is larger than [`MAX_STATE_FILE_BYTES`].
    #[error("the loss-scaler state file {path} is larger than {max} bytes")]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The limit.
        max: usize,
    },
    /// The file is not a loss-scaler state.
    #[error("{path} does not hold a loss-scaler state: {reason}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What the parser said.
        reason: String,
    },
    /// The record was written in a format this version cannot read.
    #[error("loss-scaler record format version {found} is not supported (expected {expected})")]
    UnsupportedVersion {
        /// The record's version.
        found: u32,
        /// [`RECORD_FORMAT_VERSION`].
        expected: u32,
    },
    /// A field holds a value no scaler can have.
    #[error("the loss-scaler record holds an invalid state: {0}")]
    Invalid(#[from] LossScaleError),
    /// A dynamic record without its configuration.
    #[error("a dynamic loss-scale record must carry its configuration")]
    MissingConfig,
    /// Counters that cannot have come from any sequence of steps.
    #[error("inconsistent step counters: {0:?}")]
    InconsistentStats(ScalerStats),
}

impl ScalerState {
    /// The complete state as a record.
    ///
    /// ```
    /// use burn_mpric_core::scale::{LossScaleKind, ScalerState};
    ///
    /// let record = ScalerState::fixed(512.0).unwrap().to_record();
    /// assert_eq!((record.kind, record.scale, record.config), (LossScaleKind::Static, 512.0, None));
    /// ```
    pub fn to_record(&self) -> ScalerRecord {
        let (kind, counter, hysteresis_left, config) = match self.loss_scale() {
            LossScale::NoOp(_) => (LossScaleKind::NoOp, 0, 0, None),
            LossScale::Static(_) => (LossScaleKind::Static, 0, 0, None),
            LossScale::Dynamic(s) => (
                LossScaleKind::Dynamic,
                s.counter(),
                s.hysteresis_left(),
                Some(*s.config()),
            ),
        };
        ScalerRecord {
            format_version: RECORD_FORMAT_VERSION,
            kind,
            scale: self.scale(),
            counter,
            hysteresis_left,
            config,
            clip_norm: self.clip().map(|clip| clip.max_norm()),
            stats: self.stats(),
        }
    }

    /// The state a record holds, after checking every field: the format version, the scale
    /// against its configuration, the counters against each other.
    ///
    /// ```
    /// use burn_mpric_core::scale::{ScalerState, StateError};
    ///
    /// let mut record = ScalerState::fixed(8.0).unwrap().to_record();
    /// record.scale = f32::INFINITY;
    /// assert!(matches!(ScalerState::from_record(record), Err(StateError::Invalid(_))));
    /// ```
    pub fn from_record(record: ScalerRecord) -> Result<Self, StateError> {
        if record.format_version != RECORD_FORMAT_VERSION {
            return Err(StateError::UnsupportedVersion {
                found: record.format_version,
                expected: RECORD_FORMAT_VERSION,
            });
        }
        let loss_scale = match record.kind {
            LossScaleKind::NoOp => {
                if record.scale != NoOpLossScale.loss_scale() {
                    return Err(LossScaleError::InvalidScale {
                        name: "no-op scale",
                        value: record.scale,
                    }
                    .into());
                }
                LossScale::NoOp(NoOpLossScale)
            }
            LossScaleKind::Static => LossScale::Static(StaticLossScale::new(record.scale)?),
            LossScaleKind::Dynamic => {
                let config = record.config.ok_or(StateError::MissingConfig)?;
                LossScale::Dynamic(DynamicLossScale::from_parts(
                    record.scale,
                    record.counter,
                    record.hysteresis_left,
                    config,
                )?)
            }
        };
        let clip = record.clip_norm.map(ClipNorm::new).transpose()?;
        let stats = record.stats;
        if stats.skipped > stats.steps || stats.consecutive_skipped > stats.skipped {
            return Err(StateError::InconsistentStats(stats));
        }
        Ok(Self::from_parts(loss_scale, clip, stats))
    }

    /// Saves the state as JSON, atomically: a temporary file in the same folder, synced, then
    /// renamed over `path`, so a crash leaves the old file or the new one, never a torn one.
    ///
    /// ```
    /// use burn_mpric_core::scale::ScalerState;
    ///
    /// let path = std::env::temp_dir().join(format!("scaler-save-doc-{}.json", std::process::id()));
    /// let scaler = ScalerState::fixed(64.0).unwrap();
    /// scaler.save_file(&path).unwrap();
    /// assert_eq!(ScalerState::load_file(&path).unwrap(), scaler);
    /// # std::fs::remove_file(&path).unwrap();
    /// ```
    pub fn save_file(&self, path: impl AsRef<Path>) -> Result<(), StateError> {
        let path = path.as_ref();
        let bytes =
            serde_json::to_vec_pretty(&self.to_record()).map_err(|err| StateError::Format {
                path: path.to_path_buf(),
                reason: err.to_string(),
            })?;
        let io = |source| StateError::Io {
            path: path.to_path_buf(),
            source,
        };
        // A name no other save (in this process or another) writes at the same time.
        static SAVES: AtomicU64 = AtomicU64::new(0);
        let save = SAVES.fetch_add(1, Ordering::Relaxed);
        let mut name = path.file_name().unwrap_or_default().to_os_string();
        name.push(format!(".{}-{save}.tmp", std::process::id()));
        let temp = path.with_file_name(name);
        let written = std::fs::File::create(&temp)
            .and_then(|mut file| file.write_all(&bytes).and_then(|()| file.sync_all()))
            .and_then(|()| std::fs::rename(&temp, path));
        if let Err(err) = written {
            let _ = std::fs::remove_file(&temp);
            return Err(io(err));
        }
        Ok(())
    }

    /// Loads a state saved by [`save_file`](Self::save_file) (by either edition), reading at
    /// most [`MAX_STATE_FILE_BYTES`] and validating every field.
    ///
    /// ```
    /// use burn_mpric_core::scale::{ScalerState, StateError};
    ///
    /// let path = std::env::temp_dir().join(format!("scaler-bad-doc-{}.json", std::process::id()));
    /// std::fs::write(&path, "{\"scale\": 1}").unwrap();
    /// assert!(matches!(ScalerState::load_file(&path), Err(StateError::Format { .. })));
    /// # std::fs::remove_file(&path).unwrap();
    /// ```
    pub fn load_file(path: impl AsRef<Path>) -> Result<Self, StateError> {
        let path = path.as_ref();
        let io = |source| StateError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        // Read one byte past the limit (never trusting the reported size, which is 0 for
        // devices and pipes) to tell a full-size file from a larger one.
        let mut bytes = Vec::new();
        file.take(MAX_STATE_FILE_BYTES as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(io)?;
        if bytes.len() > MAX_STATE_FILE_BYTES {
            return Err(StateError::TooLarge {
                path: path.to_path_buf(),
                max: MAX_STATE_FILE_BYTES,
            });
        }
        let record: ScalerRecord =
            serde_json::from_slice(&bytes).map_err(|err| StateError::Format {
                path: path.to_path_buf(),
                reason: err.to_string(),
            })?;
        Self::from_record(record)
    }
}
