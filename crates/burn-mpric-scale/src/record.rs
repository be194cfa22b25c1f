//! Checkpointable state of a [`LossScaler`] as a Burn [`Record`].

use std::io::{Read, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use burn::record::{PrecisionSettings, Record};
use burn::tensor::backend::Backend;
use serde::{Deserialize, Serialize};

use crate::clip::GlobalNormClip;
use crate::config::LossScaleConfig;
use crate::dynamic::DynamicLossScale;
use crate::error::StateError;
use crate::invalid::LossScaleError;
use crate::loss_scale::LossScale;
use crate::noop::NoOpLossScale;
use crate::outcome::ScalerStats;
use crate::scaler::LossScaler;
use crate::static_scale::StaticLossScale;

/// The record format this crate writes and reads.
///
/// # Example
///
/// ```
/// use burn_mpric_scale::{LossScaler, RECORD_FORMAT_VERSION};
///
/// assert_eq!(LossScaler::default().to_record().format_version, RECORD_FORMAT_VERSION);
/// ```
pub const RECORD_FORMAT_VERSION: u32 = 1;

/// The largest file [`LossScaler::load_file`] reads (64 KiB; a saved state takes well under
/// 1 KiB).
///
/// # Example
///
/// ```
/// use burn_mpric_scale::{LossScaler, MAX_STATE_FILE_BYTES, StateError};
///
/// let path = std::env::temp_dir().join(format!("scaler-large-doc-{}", std::process::id()));
/// std::fs::write(&path, vec![b' '; MAX_STATE_FILE_BYTES + 1]).unwrap();
/// assert!(matches!(LossScaler::load_file(&path), Err(StateError::TooLarge { .. })));
/// # std::fs::remove_file(&path).unwrap();
/// ```
pub const MAX_STATE_FILE_BYTES: usize = 64 * 1024;

/// Which loss scale a record holds.
///
/// # Example
///
/// ```
/// use burn_mpric_scale::{LossScaleKind, LossScaler};
///
/// assert_eq!(LossScaler::noop().to_record().kind, LossScaleKind::NoOp);
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

/// The complete state of a [`LossScaler`]: scale, counters, configuration and clipping.
///
/// It implements Burn's [`Record`] (its item is the struct itself, so every recorder stores the
/// scale as an exact f32 whatever its precision settings), so it can be embedded in records of
/// your own, and loads back through [`LossScaler::from_record`], which validates every field.
/// On its own it is saved and loaded with [`LossScaler::save_file`] and
/// [`LossScaler::load_file`].
///
/// # Example
///
/// ```
/// use burn_mpric_scale::{LossScaleConfig, LossScaler};
///
/// let mut scaler = LossScaler::dynamic(LossScaleConfig::new().with_initial_scale(8.0)).unwrap();
/// scaler.update(false);
/// let record = scaler.to_record();
/// assert_eq!(record.scale, 4.0);
/// let restored = LossScaler::from_record(record).unwrap();
/// assert_eq!(restored, scaler);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LossScalerRecord {
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

impl<B: Backend> Record<B> for LossScalerRecord {
    type Item<S: PrecisionSettings> = LossScalerRecord;

    fn into_item<S: PrecisionSettings>(self) -> Self::Item<S> {
        self
    }

    fn from_item<S: PrecisionSettings>(item: Self::Item<S>, _device: &B::Device) -> Self {
        item
    }
}

impl LossScaler {
    /// The scaler's complete state as a record.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_scale::{LossScaleKind, LossScaler};
    ///
    /// let record = LossScaler::fixed(512.0).unwrap().to_record();
    /// assert_eq!((record.kind, record.scale, record.config), (LossScaleKind::Static, 512.0, None));
    /// ```
    pub fn to_record(&self) -> LossScalerRecord {
        let (kind, counter, hysteresis_left, config) = match self.state() {
            LossScale::NoOp(_) => (LossScaleKind::NoOp, 0, 0, None),
            LossScale::Static(_) => (LossScaleKind::Static, 0, 0, None),
            LossScale::Dynamic(s) => (
                LossScaleKind::Dynamic,
                s.counter(),
                s.hysteresis_left(),
                Some(*s.config()),
            ),
        };
        LossScalerRecord {
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

    /// Rebuilds a scaler from a record, rejecting any inconsistent field with a typed error.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_scale::{LossScaler, StateError};
    ///
    /// let mut record = LossScaler::default().to_record();
    /// record.scale = -1.0;
    /// assert!(matches!(LossScaler::from_record(record), Err(StateError::Invalid(_))));
    /// ```
    pub fn from_record(record: LossScalerRecord) -> Result<Self, StateError> {
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
        let clip = record.clip_norm.map(GlobalNormClip::new).transpose()?;
        let stats = record.stats;
        if stats.skipped > stats.steps || stats.consecutive_skipped > stats.skipped {
            return Err(StateError::InconsistentStats(stats));
        }
        Ok(Self::from_state(loss_scale, clip, stats))
    }

    /// Saves the state to `path` (used as given, no extension added) as a small JSON document
    /// that [`load_file`](Self::load_file) reads back bit-exactly.
    ///
    /// The file is written next to `path` first and then renamed over it, so an interrupted
    /// save leaves the previous state in place. The state does not depend on a backend or a
    /// Burn recorder; to store it inside a record of your own, embed the
    /// [`LossScalerRecord`] from [`to_record`](Self::to_record) (it implements Burn's
    /// [`Record`]).
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_scale::{LossScaleConfig, LossScaler};
    ///
    /// let path = std::env::temp_dir().join(format!("scaler-doc-{}.json", std::process::id()));
    /// let mut scaler = LossScaler::dynamic(LossScaleConfig::torch()).unwrap();
    /// scaler.update(false);
    /// scaler.save_file(&path).unwrap();
    /// assert_eq!(LossScaler::load_file(&path).unwrap(), scaler);
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

    /// Loads a state saved by [`save_file`](Self::save_file).
    ///
    /// Whatever the file holds, loading returns an error instead of aborting or allocating
    /// from lengths found in the file: at most [`MAX_STATE_FILE_BYTES`] bytes are read (a
    /// larger file is a [`StateError::TooLarge`]), and they are parsed as JSON from memory
    /// (JSON declares no lengths, and the state holds no sequence or string of its own).
    ///
    /// # Errors
    ///
    /// - [`StateError::Io`]: the file is missing or unreadable;
    /// - [`StateError::TooLarge`]: it is larger than [`MAX_STATE_FILE_BYTES`];
    /// - [`StateError::Format`]: it is empty, truncated, corrupt or another kind of file;
    /// - any other [`StateError`]: it is readable but the state is inconsistent
    ///   (see [`from_record`](Self::from_record)).
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_scale::{LossScaler, StateError};
    ///
    /// let dir = std::env::temp_dir();
    /// let missing = dir.join("no-such-loss-scaler-state.json");
    /// assert!(matches!(LossScaler::load_file(&missing), Err(StateError::Io { .. })));
    ///
    /// let garbage = dir.join(format!("scaler-garbage-doc-{}.bin", std::process::id()));
    /// std::fs::write(&garbage, [0xff, 0x76, 0x0c, 0x1e, 0x0a, 0xb5, 0xa2, 0x8c, 0x17]).unwrap();
    /// assert!(matches!(LossScaler::load_file(&garbage), Err(StateError::Format { .. })));
    /// # std::fs::remove_file(&garbage).unwrap();
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
        let record: LossScalerRecord =
            serde_json::from_slice(&bytes).map_err(|err| StateError::Format {
                path: path.to_path_buf(),
                reason: err.to_string(),
            })?;
        Self::from_record(record)
    }
}
