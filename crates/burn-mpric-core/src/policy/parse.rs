//! The policy grammar: a strict superset of eformer's and jmp's.
//!
//! ```text
//! policy  := preset | dtype | part ("," part)*      ; parts iff the text has a `=`
//! part    := key "=" dtype                         ; whitespace around both is ignored
//! key     := p | param | params | c | compute | o | out | output   (any case)
//! dtype   := f16|fp16|float16 | bf16|bfloat16 | f32|fp32|float32|full|single
//!          | f64|fp64|float64|double | flex32 | half                (any case)
//! defaults: param = f32, compute = param, output = compute
//! ```
//!
//! Unlike eformer, nothing is silently ignored: unknown keys, duplicate keys, blank parts and
//! `a=b=c` are errors.

use core::str::FromStr;

use crate::FloatDType;

use super::dtype::{Lookup, PolicyDType, lookup};
use super::{Policy, PolicyError};

const F16: PolicyDType = PolicyDType::Float(FloatDType::F16);
const BF16: PolicyDType = PolicyDType::Float(FloatDType::BF16);
const F32: PolicyDType = PolicyDType::Float(FloatDType::F32);

/// Named policies (Keras' `mixed_*` names and their "pure" counterparts).
pub(crate) const PRESETS: &[(&str, Policy)] = &[
    ("mixed_f16", Policy::from_slots(F32, F16, F32)),
    ("mixed_float16", Policy::from_slots(F32, F16, F32)),
    ("mixed_bf16", Policy::from_slots(F32, BF16, F32)),
    ("mixed_bfloat16", Policy::from_slots(F32, BF16, F32)),
    (
        "mixed_half",
        Policy::from_slots(F32, PolicyDType::Half, F32),
    ),
    ("pure_f16", Policy::from_slots(F16, F16, F16)),
    ("pure_float16", Policy::from_slots(F16, F16, F16)),
    ("pure_bf16", Policy::from_slots(BF16, BF16, BF16)),
    ("pure_bfloat16", Policy::from_slots(BF16, BF16, BF16)),
    (
        "pure_half",
        Policy::from_slots(PolicyDType::Half, PolicyDType::Half, PolicyDType::Half),
    ),
];

/// The three slots, in the order of the text form.
const SLOTS: [(&str, &[&str]); 3] = [
    ("param", &["p", "param", "params"]),
    ("compute", &["c", "compute"]),
    ("output", &["o", "out", "output"]),
];

fn parse_dtype(raw: &str, preset_allowed: bool) -> Result<PolicyDType, PolicyError> {
    let name = raw.trim().to_lowercase();
    match lookup(&name) {
        Lookup::Found(dtype) => Ok(dtype),
        Lookup::Fp8 => Err(PolicyError::Fp8Unsupported {
            name: raw.trim().to_string(),
        }),
        Lookup::Unknown => Err(PolicyError::UnknownDType {
            name: raw.trim().to_string(),
            preset_allowed,
        }),
    }
}

fn parse_simple(text: &str) -> Result<Policy, PolicyError> {
    let name = text.to_lowercase();
    if let Some((_, policy)) = PRESETS.iter().find(|(preset, _)| *preset == name) {
        return Ok(*policy);
    }
    let dtype = parse_dtype(text, true)?;
    Ok(Policy::from_slots(dtype, dtype, dtype))
}

fn parse_parts(input: &str) -> Result<Policy, PolicyError> {
    let mut slots: [Option<PolicyDType>; 3] = [None; 3];
    for (index, raw_part) in input.split(',').enumerate() {
        let part = raw_part.trim();
        if part.is_empty() {
            return Err(PolicyError::EmptyPart {
                input: input.to_string(),
                index: index + 1,
            });
        }
        let mut pieces = part.split('=');
        let (Some(raw_key), Some(raw_value), None) = (pieces.next(), pieces.next(), pieces.next())
        else {
            return Err(PolicyError::MalformedPart {
                input: input.to_string(),
                part: part.to_string(),
            });
        };
        let key = raw_key.trim();
        let key_lower = key.to_lowercase();
        let Some(slot) = SLOTS
            .iter()
            .position(|(_, keys)| keys.contains(&key_lower.as_str()))
        else {
            return Err(PolicyError::UnknownKey {
                key: key.to_string(),
                part: part.to_string(),
            });
        };
        let dtype = parse_dtype(raw_value, false)?;
        if slots[slot].replace(dtype).is_some() {
            return Err(PolicyError::DuplicateKey {
                input: input.to_string(),
                key: key.to_string(),
                slot: SLOTS[slot].0,
            });
        }
    }
    let param = slots[0].unwrap_or(F32);
    let compute = slots[1].unwrap_or(param);
    let output = slots[2].unwrap_or(compute);
    Ok(Policy::from_slots(param, compute, output))
}

impl FromStr for Policy {
    type Err = PolicyError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let text = input.trim();
        if text.is_empty() {
            Err(PolicyError::Empty)
        } else if text.contains('=') {
            parse_parts(text)
        } else {
            parse_simple(text)
        }
    }
}

impl FromStr for PolicyDType {
    type Err = PolicyError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        parse_dtype(input, false)
    }
}
