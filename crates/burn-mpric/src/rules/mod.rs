//! The rules: which dtype every float value and op of the crate gets. Whatever decides a
//! dtype reads this module, and nothing outside it holds a rule of its own.
//!
//! - [`MpSettings`] (`settings.rs`): a policy plus per-op overrides, as a user writes it.
//! - `DeviceRules` (`target.rs`): settings resolved for one device, and the target-dtype
//!   decision every op asks for.
//!
//! The policy, its resolution and the op table themselves ([`ResolvedPolicy`](crate::ResolvedPolicy),
//! [`Op`](crate::Op), [`OpCategory`](crate::OpCategory)) are burn-mpric-core's: they name no
//! Burn type, and the Burn 0.22 edition reads the same ones. `crate::policy` bridges their
//! dtypes to Burn 0.21's.

mod settings;
mod target;

pub use settings::{MpSettings, SoftmaxPrecision, full_precision};
pub(crate) use target::{DeviceRules, InputDTypes, Precision};
