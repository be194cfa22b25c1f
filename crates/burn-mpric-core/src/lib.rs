//! The Burn-independent core of burn-mpric.
//!
//! Everything here is a rule that must read the same whatever Burn release runs the tensors,
//! so it lives once and depends on no Burn crate:
//!
//! - [`FloatDType`]: the float formats a policy can name (the same variants as Burn's
//!   `FloatDType`; each edition converts);
//! - [`Policy`], its text grammar (`p=f32,c=bf16,o=f32`, presets, aliases), and its
//!   resolution to concrete dtypes ([`ResolvedPolicy`], [`Policy::resolve_with`]: `half`
//!   means bf16 where the device runs it, else f16);
//! - [`Op`] and [`OpCategory`]: the op table (which precision each float op runs at);
//! - [`scale`]: the loss-scale state machines, their configuration and presets, the step's
//!   decision ([`scale::ScalerState`]) and the saved scaler state ([`scale::ScalerRecord`]),
//!   which either edition writes and the other reads;
//! - [`optim`]: optimizer state and master weights below f32 (the settings, the bytes per
//!   parameter, stochastic rounding's seeded stream).
//!
//! The editions: `burn-mpric` (+ `burn-mpric-scale`, `burn-mpric-learner`) for Burn 0.21, a
//! backend decorator; `burn-mpric-022` for Burn 0.22, tensor-level mixed precision through
//! parameter reparameterization.
//!
//! # Example
//!
//! ```
//! use burn_mpric_core::{FloatDType, Policy};
//! use burn_mpric_core::scale::{LossScaleConfig, ScalerState};
//!
//! let policy: Policy = "p=f32,c=half".parse().unwrap();
//! // A device that runs f16 but not bf16: `half` is f16 there.
//! let resolved = policy.resolve_with(&[FloatDType::F32, FloatDType::F16]).unwrap();
//! assert_eq!(resolved.to_string(), "p=f32,c=f16,o=f16");
//!
//! let mut scaler = ScalerState::dynamic(LossScaleConfig::new().with_initial_scale(8.0)).unwrap();
//! let outcome = scaler.finish(false, None, None); // a step whose gradients overflowed
//! assert!(outcome.is_skipped());
//! assert_eq!((outcome.scale_used, outcome.next_scale), (8.0, 4.0));
//! ```
#![warn(missing_docs)]

pub mod audit;
mod dtype;
pub mod editions;
pub mod export;
pub mod lane;
mod op_table;
pub mod optim;
mod policy;
pub mod scale;

pub use dtype::FloatDType;
pub use op_table::{Op, OpCategory, UnknownName};
pub use policy::{Policy, PolicyDType, PolicyError, ResolvedPolicy, dtype_name, half_for};
