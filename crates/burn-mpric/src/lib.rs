#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

mod backend;
mod device;
mod handler;
#[cfg(any(test, feature = "instrument"))]
pub mod instrument;
mod ops;
mod policy;
mod rules;
mod tensor;

pub use backend::MixedPrecision;
pub use device::MpDevice;
pub use handler::{
    Castable, HandlerError, LossScaleSetting, ModuleParams, PrecisionHandler, TrainStepOutput,
};
pub use policy::{Policy, PolicyDType, PolicyError, dtype_name};
pub use rules::{
    MpSettings, Op, OpCategory, ResolvedPolicy, UnknownName, full_precision, half_dtype,
};
pub use tensor::{MpBool, MpFloat, MpInt, MpQuant, casts_made};

/// Casts every gradient of a module to its parameter's dtype: under mixed precision,
/// gradients come back in the dtype their backward op ran in (often the compute dtype), and
/// an optimizer must see them at the param dtype. Re-exported from `burn-mpric-scale`.
pub use burn_mpric_scale::cast_grads_to_param_dtype;

/// The loss-scaling crate, re-exported: `burn_mpric::scale::LossScaler` etc.
pub use burn_mpric_scale as scale;
