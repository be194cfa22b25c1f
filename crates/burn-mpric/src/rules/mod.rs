//! The rules: which dtype every float value and op of the crate gets. Whatever decides a
//! dtype reads this module, and nothing outside it holds a rule of its own.
//!
//! - [`ResolvedPolicy`] (`resolved.rs`): a policy as three concrete dtypes.
//! - [`half_dtype`] (`half.rs`): the one `half` rule, and a policy checked against a device.
//! - [`Op`] and [`OpCategory`] (`op_table.rs`): the op table, as data.
//! - [`MpSettings`] (`settings.rs`): a policy plus per-op overrides, as a user writes it.
//! - `DeviceRules` (`target.rs`): settings resolved for one device, and the target-dtype
//!   decision every op asks for.
//!
//! `resolved.rs` and `op_table.rs` name no Burn tensor or backend type (only Burn's dtype
//! enum): with `policy/`, they are the part a port to another Burn release leaves alone.

mod half;
mod op_table;
mod resolved;
mod settings;
mod target;

pub use half::half_dtype;
pub use op_table::{Op, OpCategory, UnknownName};
pub use resolved::ResolvedPolicy;
pub use settings::{MpSettings, full_precision};
pub(crate) use target::{DeviceRules, InputDTypes, Precision};
