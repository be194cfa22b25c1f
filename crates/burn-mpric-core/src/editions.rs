//! What each edition re-exports from the core, listed once: the 0.21 crates (`burn-mpric`,
//! `burn-mpric-scale`, `burn-mpric-optim`) and `burn-mpric-022` (and its `optim`) each
//! `pub use` these modules' items, so that a
//! user's one dependency per edition names the same items by the same names.
//!
//! ```
//! use burn_mpric_core::editions::{optim, policy, scale};
//!
//! let policy: policy::Policy = "mixed_bf16".parse().unwrap();
//! assert_eq!(policy, "p=f32,c=bf16,o=f32".parse().unwrap());
//! assert_eq!(scale::MIN_SCALE, burn_mpric_core::scale::MIN_SCALE);
//! assert_eq!(optim::StateDtype::Bf16.bytes(), 2);
//! ```

/// The policy, its grammar and the op table.
pub mod policy {
    pub use crate::{
        FloatDType, Op, OpCategory, Policy, PolicyDType, PolicyError, ResolvedPolicy, UnknownName,
        dtype_name,
    };
}

/// The loss-scale rules without tensors: scales, presets, the step decision, the device
/// path's rules and the saved state.
pub mod scale {
    pub use crate::scale::{
        AnyDeviceRule, AwaitingSteps, DEFAULT_MAX_CONSECUTIVE_SKIPS, DeviceAdamConfig,
        DeviceAdamWConfig, DeviceSgdConfig, DynamicLossScale, LossScale, LossScaleConfig,
        LossScaleError, LossScaleKind, LossScalePreset, MAX_PENDING_STEPS, MAX_STATE_FILE_BYTES,
        MIN_SCALE, NoOpLossScale, OVERFLOW_NAMES_SHOWN, Overflow, PROBE_SHIFT, ProbeRead,
        RECORD_FORMAT_VERSION, ScaleRecord, ScalerRecord, ScalerState, ScalerStats, SkipCause,
        StateError, StaticLossScale, StepAction, StepOutcome, StepSlot, UpdateRule, inverse_scale,
        unscale_dtype,
    };
}

/// Optimizer precision without tensors (state dtype, master weights, the rounding stream,
/// bytes held) and the update rules it takes, as the device path takes them too.
pub mod optim {
    pub use crate::optim::{
        BytesPerParameter, DrawKeys, DrawSource, HeldBytes, MasterWeights, OptimizerPrecision,
        PrecisionError, RoundingStream, StateDtype,
    };
    pub use crate::scale::{AnyDeviceRule, DeviceAdamConfig, DeviceAdamWConfig, DeviceSgdConfig};
}
