//! Loss scaling without tensors: the scales' state machines, their configuration and presets,
//! the step's decision and the saved state.
//!
//! An edition does the tensor work (multiply the loss, unscale the gradients, read their
//! finiteness once) and hands the answer to [`ScalerState::finish`], which decides everything
//! else: applied or skipped, the next scale, the counters, the reported loss and norm. Two
//! editions fed the same sequence of finite and non-finite steps therefore reach the same
//! scale, and each reads the state the other saved ([`ScalerRecord`]).
//!
//! # Example
//!
//! ```
//! use burn_mpric_core::scale::{LossScalePreset, ScalerState};
//!
//! let mut scaler = ScalerState::from_preset(LossScalePreset::Torch, true).unwrap();
//! assert_eq!(scaler.scale(), 65536.0);
//! let outcome = scaler.finish(false, Some(65536.0 * 2.5), None);
//! assert!(outcome.is_skipped());
//! assert_eq!(outcome.loss, Some(2.5)); // unscaled with the scale that was used
//! assert_eq!(scaler.scale(), 32768.0);
//! ```

pub(crate) mod cause;
mod clip;
mod config;
mod device;
mod device_optim;
mod dynamic;
mod handle;
mod invalid;
mod limits;
mod loss_scale;
mod noop;
mod outcome;
mod overflow;
mod pending;
mod preset;
mod probe;
mod record;
mod state;
mod static_scale;
mod step_record;
mod unscale;

pub use cause::{PROBE_SHIFT, ProbeRead, SkipCause};
pub use clip::ClipNorm;
pub use config::{LossScaleConfig, UpdateRule};
pub use device::{DeviceScaleRule, DeviceScaleState, DeviceStepRead, MAX_PENDING_STEPS};
pub use device_optim::{AnyDeviceRule, DeviceAdamConfig, DeviceAdamWConfig, DeviceSgdConfig};
pub use dynamic::DynamicLossScale;
pub use handle::{HandleState, ProbeInputs, SharedHandle};
pub use invalid::LossScaleError;
pub use limits::{DEFAULT_MAX_CONSECUTIVE_SKIPS, MIN_SCALE};
pub use loss_scale::LossScale;
pub use noop::NoOpLossScale;
pub use outcome::{ScalerStats, StepAction, StepOutcome};
pub use overflow::{OVERFLOW_NAMES_SHOWN, Overflow};
pub use pending::{PendingStep, PendingSteps, ReadHandle, ReadValue, SettleError, merge_by_name};
pub use preset::LossScalePreset;
pub use probe::Probe;
pub use record::{
    LossScaleKind, MAX_STATE_FILE_BYTES, RECORD_FORMAT_VERSION, ScalerRecord, StateError,
};
pub use state::ScalerState;
pub use static_scale::StaticLossScale;
pub use step_record::{AwaitingSteps, ScaleRecord, StepSlot};
pub use unscale::{inverse_scale, unscale_dtype};
