//! Typed errors for policy text and policy resolution.

use crate::FloatDType;
use thiserror::Error;

use super::dtype::accepted_dtype_names;

const KEYS: &str = "p|param|params, c|compute, o|out|output";
const FORMS: &str = "a dtype name, a preset (mixed_f16, mixed_bf16, mixed_half, pure_f16, pure_bf16, f32, full), or `key=dtype` parts separated by commas, e.g. `p=f32,c=bf16,o=f32`";

/// Why a policy string or a policy/device pair was rejected. Every message names the
/// offending fragment and lists what is accepted.
///
/// ```
/// use burn_mpric_core::{Policy, PolicyError};
///
/// let err = "p=f32,x=bf16".parse::<Policy>().unwrap_err();
/// assert!(matches!(err, PolicyError::UnknownKey { ref key, .. } if key == "x"));
/// assert!(err.to_string().contains("p|param|params"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PolicyError {
    /// The whole string was empty or blank.
    #[error("empty policy string; expected {FORMS}")]
    Empty,
    /// A comma-separated part was blank (`p=f32,,c=bf16` or a trailing comma).
    #[error(
        "empty part #{index} in policy `{input}`; expected `key=dtype` parts separated by commas (keys: {KEYS})"
    )]
    EmptyPart {
        /// The whole policy string.
        input: String,
        /// One-based position of the blank part.
        index: usize,
    },
    /// A part that is not exactly `key=dtype` (`a=b=c`, or no `=` at all).
    #[error(
        "malformed part `{part}` in policy `{input}`; each part must be exactly `key=dtype` (keys: {KEYS})"
    )]
    MalformedPart {
        /// The whole policy string.
        input: String,
        /// The offending part.
        part: String,
    },
    /// A key other than the accepted ones.
    #[error("unknown key `{key}` in part `{part}`; accepted keys: {KEYS}")]
    UnknownKey {
        /// The key as written.
        key: String,
        /// The part it appeared in.
        part: String,
    },
    /// The same slot given twice (`p=f32,params=f16`).
    #[error("duplicate key `{key}` in policy `{input}`: the {slot} dtype is given more than once")]
    DuplicateKey {
        /// The whole policy string.
        input: String,
        /// The second spelling of the key.
        key: String,
        /// Which slot (`param`, `compute` or `output`).
        slot: &'static str,
    },
    /// A dtype (or preset) name nobody knows.
    #[error("unknown dtype `{name}`; accepted dtypes: {}{}", accepted_dtype_names(), if *.preset_allowed { format!("; or {FORMS}") } else { String::new() })]
    UnknownDType {
        /// The name as written.
        name: String,
        /// Whether a preset or a full policy would also have been accepted here.
        preset_allowed: bool,
    },
    /// An fp8 name: recognised, but Burn 0.21 has no fp8 float tensors.
    #[error(
        "fp8 dtype `{name}` is not supported: Burn has no fp8 float tensors, and fp8 compute needs per-tensor scaling; use f16 or bf16 (accepted dtypes: {})",
        accepted_dtype_names()
    )]
    Fp8Unsupported {
        /// The name as written.
        name: String,
    },
    /// The device cannot run one of the policy's dtypes.
    #[error(
        "the {slot} dtype {dtype} is not supported by this device; it supports {}",
        supported.iter().map(|d| d.name()).collect::<Vec<_>>().join(", ")
    )]
    UnsupportedByDevice {
        /// Which slot (`param`, `compute` or `output`).
        slot: &'static str,
        /// The dtype asked for.
        dtype: FloatDType,
        /// The float dtypes the device does support.
        supported: Vec<FloatDType>,
    },
    /// A slot is `half`, which only a device can turn into a dtype.
    #[error(
        "the {slot} dtype is `half`, which depends on the device (bf16 where it runs bf16, else f16): resolve the policy against a device (`Policy::resolve_with`, or an edition's device resolution), or name f16 or bf16"
    )]
    UnresolvedHalf {
        /// Which slot (`param`, `compute` or `output`).
        slot: &'static str,
    },
}
