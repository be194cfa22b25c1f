#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

mod backend;
mod category;
mod device;
mod ops;
mod policy;
mod settings;
mod tensor;

pub use backend::MixedPrecision;
pub use category::{Op, OpCategory, UnknownName};
pub use device::MpDevice;
pub use policy::{Policy, PolicyDType, PolicyError, dtype_name};
pub use settings::{PrecisionSettings, full_precision};
pub use tensor::{MpBool, MpFloat, MpInt, MpQuant};
