//! Checkpointable state of a [`LossScaler`] as a Burn [`Record`].

use std::path::PathBuf;

use burn::record::{FileRecorder, PrecisionSettings, Record};
use burn::tensor::backend::Backend;
use serde::{Deserialize, Serialize};

use crate::clip::GlobalNormClip;
use crate::config::LossScaleConfig;
use crate::dynamic::DynamicLossScale;
use crate::error::{LossScaleError, StateError};
use crate::loss_scale::{LossScale, LossScaling};
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
/// scale as an exact f32 whatever its precision settings), and loads back through
/// [`LossScaler::from_record`], which validates every field.
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

    /// Saves the state to a file with a Burn file recorder (the recorder adds its extension).
    ///
    /// The backend type only selects the recorder implementation; the state holds no tensor.
    ///
    /// # Example
    ///
    /// ```
    /// use burn::backend::Flex;
    /// use burn::record::{DefaultFileRecorder, FullPrecisionSettings};
    /// use burn_mpric_scale::LossScaler;
    ///
    /// let path = std::env::temp_dir().join(format!("scaler-doc-{}", std::process::id()));
    /// let recorder = DefaultFileRecorder::<FullPrecisionSettings>::new();
    /// let scaler = LossScaler::default();
    /// scaler.save_file::<Flex, _>(&recorder, path.clone()).unwrap();
    /// let loaded = LossScaler::load_file::<Flex, _>(&recorder, path.clone(), &Default::default());
    /// assert_eq!(loaded.unwrap(), scaler);
    /// # std::fs::remove_file(path.with_extension("mpk")).unwrap();
    /// ```
    pub fn save_file<B: Backend, R: FileRecorder<B>>(
        &self,
        recorder: &R,
        path: impl Into<PathBuf>,
    ) -> Result<(), StateError> {
        recorder.record(self.to_record(), path.into())?;
        Ok(())
    }

    /// Loads a state saved by [`save_file`](Self::save_file). A missing, truncated or foreign
    /// file is a [`StateError::Recorder`]; a readable but inconsistent state is another
    /// [`StateError`].
    ///
    /// # Example
    ///
    /// ```
    /// use burn::backend::Flex;
    /// use burn::record::{DefaultFileRecorder, FullPrecisionSettings};
    /// use burn_mpric_scale::{LossScaler, StateError};
    ///
    /// let recorder = DefaultFileRecorder::<FullPrecisionSettings>::new();
    /// let missing = std::env::temp_dir().join("no-such-loss-scaler-state");
    /// let err = LossScaler::load_file::<Flex, _>(&recorder, missing, &Default::default());
    /// assert!(matches!(err, Err(StateError::Recorder(_))));
    /// ```
    pub fn load_file<B: Backend, R: FileRecorder<B>>(
        recorder: &R,
        path: impl Into<PathBuf>,
        device: &B::Device,
    ) -> Result<Self, StateError> {
        let record: LossScalerRecord = recorder.load(path.into(), device)?;
        Self::from_record(record)
    }
}
