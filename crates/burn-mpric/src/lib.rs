#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

mod policy;

pub use policy::{Policy, PolicyDType, PolicyError, dtype_name};
