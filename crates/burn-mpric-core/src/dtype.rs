//! [`FloatDType`]: the float formats a policy names, without naming any Burn release.

use core::fmt;

/// A float format: the same five variants as Burn's `FloatDType` (0.21 and 0.22 alike), so
/// each edition converts both ways without loss.
///
/// # Example
///
/// ```
/// use burn_mpric_core::FloatDType;
///
/// assert_eq!(FloatDType::BF16.name(), "bf16");
/// assert_eq!(FloatDType::F16.to_string(), "f16");
/// assert_eq!(FloatDType::ALL.len(), 5);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FloatDType {
    /// 64-bit IEEE float.
    F64,
    /// 32-bit IEEE float.
    F32,
    /// Stored as f32, computed at whatever precision the backend finds fastest (Burn's
    /// `Flex32`).
    Flex32,
    /// 16-bit IEEE float: 5 exponent bits, 10 mantissa bits (largest finite 65504).
    F16,
    /// bfloat16: f32's 8 exponent bits, 7 mantissa bits.
    BF16,
}

impl FloatDType {
    /// Every format, in the order error messages list them.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::FloatDType;
    ///
    /// assert_eq!(FloatDType::ALL[0], FloatDType::F64);
    /// ```
    pub const ALL: [FloatDType; 5] = [
        FloatDType::F64,
        FloatDType::F32,
        FloatDType::Flex32,
        FloatDType::F16,
        FloatDType::BF16,
    ];

    /// Canonical short name (`f64`, `f32`, `flex32`, `f16`, `bf16`), as policies write it.
    ///
    /// # Example
    ///
    /// ```
    /// assert_eq!(burn_mpric_core::FloatDType::Flex32.name(), "flex32");
    /// ```
    pub const fn name(self) -> &'static str {
        match self {
            FloatDType::F64 => "f64",
            FloatDType::F32 => "f32",
            FloatDType::Flex32 => "flex32",
            FloatDType::F16 => "f16",
            FloatDType::BF16 => "bf16",
        }
    }

    /// Size of one element in bytes.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::FloatDType;
    ///
    /// assert_eq!(FloatDType::BF16.size(), 2);
    /// assert_eq!(FloatDType::Flex32.size(), 4);
    /// ```
    pub const fn size(self) -> usize {
        match self {
            FloatDType::F64 => 8,
            FloatDType::F32 | FloatDType::Flex32 => 4,
            FloatDType::F16 | FloatDType::BF16 => 2,
        }
    }
}

impl fmt::Display for FloatDType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
