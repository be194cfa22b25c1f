//! The dtype vocabulary of a policy: Burn's [`FloatDType`] plus a symbolic `half`.

use core::fmt;

use crate::FloatDType;

/// One slot of a [`Policy`](crate::Policy): a concrete float dtype, or `half`, which
/// stands for "the device's preferred 16-bit float" until the policy is resolved against a
/// device (bf16 where the device supports it, else f16).
///
/// ```
/// use burn_mpric_core::FloatDType;
/// use burn_mpric_core::PolicyDType;
///
/// let d: PolicyDType = "bfloat16".parse().unwrap();
/// assert_eq!(d, PolicyDType::Float(FloatDType::BF16));
/// assert_eq!(d.to_string(), "bf16");
/// assert_eq!("HALF".parse::<PolicyDType>().unwrap(), PolicyDType::Half);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PolicyDType {
    /// A concrete float dtype.
    Float(FloatDType),
    /// The device's preferred 16-bit float, chosen by [`Policy::resolve_with`](crate::Policy::resolve_with).
    Half,
}

/// Accepted spellings, first one canonical (used by `Display`). Union of the names eformer,
/// jmp, Keras and PyTorch users write.
pub(crate) const ALIASES: &[(PolicyDType, &[&str])] = &[
    (
        PolicyDType::Float(FloatDType::F16),
        &["f16", "fp16", "float16", "half-precision"],
    ),
    (PolicyDType::Float(FloatDType::BF16), &["bf16", "bfloat16"]),
    (
        PolicyDType::Float(FloatDType::F32),
        &["f32", "fp32", "float32", "full", "single"],
    ),
    (
        PolicyDType::Float(FloatDType::F64),
        &["f64", "fp64", "float64", "double"],
    ),
    (PolicyDType::Float(FloatDType::Flex32), &["flex32"]),
    (PolicyDType::Half, &["half"]),
];

/// fp8 spellings: recognised so that the error can say why they are refused.
pub(crate) const FP8_NAMES: &[&str] = &[
    "fp8",
    "f8",
    "f8_e4m3",
    "f8_e5m2",
    "fp8_e4m3",
    "fp8_e5m2",
    "fp8_e4m3fn",
    "fp8_e4m3fnuz",
    "fp8_e4m3b11fnuz",
    "fp8_e5m2fnuz",
    "float8_e4m3",
    "float8_e5m2",
    "float8_e4m3fn",
    "float8_e4m3fnuz",
    "float8_e4m3b11fnuz",
    "float8_e5m2fnuz",
];

/// What the error messages list as accepted dtype names.
pub(crate) fn accepted_dtype_names() -> String {
    ALIASES
        .iter()
        .map(|(_, names)| names.join("|"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Outcome of looking a (trimmed, lower-cased) name up.
pub(crate) enum Lookup {
    Found(PolicyDType),
    Fp8,
    Unknown,
}

pub(crate) fn lookup(name: &str) -> Lookup {
    if let Some((dtype, _)) = ALIASES.iter().find(|(_, names)| names.contains(&name)) {
        Lookup::Found(*dtype)
    } else if FP8_NAMES.contains(&name) {
        Lookup::Fp8
    } else {
        Lookup::Unknown
    }
}

impl PolicyDType {
    /// The concrete dtype, or `None` for an unresolved `half`.
    ///
    /// ```
    /// use burn_mpric_core::FloatDType;
    /// use burn_mpric_core::PolicyDType;
    ///
    /// assert_eq!(PolicyDType::Float(FloatDType::F16).float(), Some(FloatDType::F16));
    /// assert_eq!(PolicyDType::Half.float(), None);
    /// ```
    pub fn float(self) -> Option<FloatDType> {
        match self {
            PolicyDType::Float(dtype) => Some(dtype),
            PolicyDType::Half => None,
        }
    }

    /// Replaces `half` with the given dtype; concrete dtypes are kept.
    ///
    /// ```
    /// use burn_mpric_core::FloatDType;
    /// use burn_mpric_core::PolicyDType;
    ///
    /// assert_eq!(PolicyDType::Half.resolve_half(FloatDType::BF16), FloatDType::BF16);
    /// assert_eq!(PolicyDType::Float(FloatDType::F32).resolve_half(FloatDType::BF16), FloatDType::F32);
    /// ```
    pub fn resolve_half(self, half: FloatDType) -> FloatDType {
        self.float().unwrap_or(half)
    }

    /// Canonical short name, as written by `Display` (`f16`, `bf16`, `f32`, `f64`, `flex32`, `half`).
    ///
    /// ```
    /// use burn_mpric_core::FloatDType;
    /// use burn_mpric_core::PolicyDType;
    ///
    /// assert_eq!(PolicyDType::from(FloatDType::F64).name(), "f64");
    /// ```
    pub fn name(self) -> &'static str {
        ALIASES
            .iter()
            .find(|(dtype, _)| *dtype == self)
            .map(|(_, names)| names[0])
            .expect("every PolicyDType has an alias entry")
    }
}

impl From<FloatDType> for PolicyDType {
    fn from(dtype: FloatDType) -> Self {
        PolicyDType::Float(dtype)
    }
}

impl fmt::Display for PolicyDType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Canonical short name of a Burn float dtype (`f16`, `bf16`, `f32`, `f64`, `flex32`).
///
/// ```
/// use burn_mpric_core::FloatDType;
///
/// assert_eq!(burn_mpric_core::dtype_name(FloatDType::BF16), "bf16");
/// ```
pub fn dtype_name(dtype: FloatDType) -> &'static str {
    PolicyDType::Float(dtype).name()
}
