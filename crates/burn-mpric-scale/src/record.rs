//! Checkpointable state of a [`LossScaler`] as a Burn [`Record`].

use std::ops::{Deref, DerefMut};
use std::path::Path;

use burn::record::{PrecisionSettings, Record};
use burn::tensor::backend::Backend;
use burn_mpric_core::scale::{ScalerRecord, ScalerState, StateError};
use serde::{Deserialize, Serialize};

use crate::scaler::LossScaler;

/// The complete state of a [`LossScaler`] (scale, counters, configuration and clipping) as a
/// Burn 0.21 [`Record`].
///
/// It is burn-mpric-core's [`ScalerRecord`] (fields reached through `Deref`), serialized
/// exactly as that record is, so a state saved here loads in the Burn 0.22 edition and back.
/// Its record item is the struct itself, so every recorder stores the scale as an exact f32
/// whatever its precision settings, and it embeds in records of your own. It loads back through
/// [`LossScaler::from_record`], which validates every field; on its own it is saved and loaded
/// with [`LossScaler::save_file`] and [`LossScaler::load_file`].
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
#[serde(transparent)]
pub struct LossScalerRecord(pub ScalerRecord);

impl Deref for LossScalerRecord {
    type Target = ScalerRecord;

    fn deref(&self) -> &ScalerRecord {
        &self.0
    }
}

impl DerefMut for LossScalerRecord {
    fn deref_mut(&mut self) -> &mut ScalerRecord {
        &mut self.0
    }
}

impl From<ScalerRecord> for LossScalerRecord {
    fn from(record: ScalerRecord) -> Self {
        Self(record)
    }
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
        LossScalerRecord(self.core().to_record())
    }

    /// Restores a scaler from a record, validating every field (format version, scale within
    /// its configured bounds, counters consistent): a corrupted or hand-edited record is an
    /// error, never a scaler with an impossible state.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_scale::{LossScaler, StateError};
    ///
    /// let mut record = LossScaler::fixed(8.0).unwrap().to_record();
    /// record.scale = 0.0;
    /// assert!(matches!(LossScaler::from_record(record), Err(StateError::Invalid(_))));
    /// ```
    pub fn from_record(record: LossScalerRecord) -> Result<Self, StateError> {
        ScalerState::from_record(record.0).map(Self::from)
    }

    /// Saves the state as JSON (atomically: a temporary file renamed over `path`), in the
    /// format both editions read.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_scale::LossScaler;
    ///
    /// let path = std::env::temp_dir().join(format!("scaler-save-{}.json", std::process::id()));
    /// let scaler = LossScaler::fixed(64.0).unwrap();
    /// scaler.save_file(&path).unwrap();
    /// assert_eq!(LossScaler::load_file(&path).unwrap(), scaler);
    /// # std::fs::remove_file(&path).unwrap();
    /// ```
    pub fn save_file(&self, path: impl AsRef<Path>) -> Result<(), StateError> {
        self.core().save_file(path)
    }

    /// Loads a state saved by [`save_file`](Self::save_file) (or by the Burn 0.22 edition),
    /// reading at most [`MAX_STATE_FILE_BYTES`](crate::MAX_STATE_FILE_BYTES) and validating
    /// every field.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_scale::{LossScaler, StateError};
    ///
    /// let path = std::env::temp_dir().join(format!("scaler-missing-{}.json", std::process::id()));
    /// assert!(matches!(LossScaler::load_file(&path), Err(StateError::Io { .. })));
    /// ```
    pub fn load_file(path: impl AsRef<Path>) -> Result<Self, StateError> {
        ScalerState::load_file(path).map(Self::from)
    }
}
