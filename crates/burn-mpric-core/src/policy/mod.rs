//! [`Policy`]: which float dtype parameters, computation and outputs use.

mod dtype;
mod error;
mod parse;
mod resolved;

use core::fmt;

use crate::FloatDType;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

pub use dtype::{PolicyDType, dtype_name};
pub use error::PolicyError;
pub use resolved::{ResolvedPolicy, half_for};

/// A mixed-precision policy: the dtype parameters are stored in, the dtype computation runs
/// in, and the dtype results are handed back in.
///
/// Its text form is `p=<dtype>,c=<dtype>,o=<dtype>` (any subset, any order; param defaults to
/// f32, compute to param, output to compute), a single dtype name, or a preset such as
/// `mixed_bf16`. `Display` writes the canonical form, which parses back to the same policy.
///
/// ```
/// use burn_mpric_core::FloatDType;
/// use burn_mpric_core::{Policy, PolicyDType};
///
/// let policy: Policy = "params=float32, compute=BF16".parse().unwrap();
/// assert_eq!(policy.param(), PolicyDType::Float(FloatDType::F32));
/// assert_eq!(policy.compute(), PolicyDType::Float(FloatDType::BF16));
/// assert_eq!(policy.output(), PolicyDType::Float(FloatDType::BF16)); // output <- compute
/// assert_eq!(policy.to_string(), "p=f32,c=bf16,o=bf16");
/// assert_eq!(policy.to_string().parse::<Policy>().unwrap(), policy);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Policy {
    param: PolicyDType,
    compute: PolicyDType,
    output: PolicyDType,
}

impl Policy {
    /// All three dtypes f32: plain full-precision training.
    pub const F32: Policy = Policy::uniform(FloatDType::F32);

    /// A policy from its three dtypes.
    ///
    /// ```
    /// use burn_mpric_core::FloatDType;
    /// use burn_mpric_core::{Policy, PolicyDType};
    ///
    /// let p = Policy::new(FloatDType::F32, PolicyDType::Half, FloatDType::F32);
    /// assert_eq!(p.to_string(), "p=f32,c=half,o=f32");
    /// ```
    pub fn new(
        param: impl Into<PolicyDType>,
        compute: impl Into<PolicyDType>,
        output: impl Into<PolicyDType>,
    ) -> Self {
        Self::from_slots(param.into(), compute.into(), output.into())
    }

    pub(crate) const fn from_slots(
        param: PolicyDType,
        compute: PolicyDType,
        output: PolicyDType,
    ) -> Self {
        Self {
            param,
            compute,
            output,
        }
    }

    /// The same dtype for parameters, compute and output.
    ///
    /// ```
    /// use burn_mpric_core::FloatDType;
    /// use burn_mpric_core::Policy;
    ///
    /// assert!(Policy::uniform(FloatDType::BF16).is_identity());
    /// assert_eq!(Policy::uniform(FloatDType::F32), Policy::F32);
    /// ```
    pub const fn uniform(dtype: FloatDType) -> Self {
        let d = PolicyDType::Float(dtype);
        Self::from_slots(d, d, d)
    }

    /// The classic mixed policy: f32 parameters and outputs, `compute` for computation.
    ///
    /// ```
    /// use burn_mpric_core::FloatDType;
    /// use burn_mpric_core::Policy;
    ///
    /// assert_eq!(Policy::mixed(FloatDType::F16), "mixed_f16".parse().unwrap());
    /// ```
    pub const fn mixed(compute: FloatDType) -> Self {
        let f32 = PolicyDType::Float(FloatDType::F32);
        Self::from_slots(f32, PolicyDType::Float(compute), f32)
    }

    /// The dtype parameters are created and stored in.
    ///
    /// ```
    /// use burn_mpric_core::FloatDType;
    /// use burn_mpric_core::{Policy, PolicyDType};
    ///
    /// let p: Policy = "c=f16".parse().unwrap();
    /// assert_eq!(p.param(), PolicyDType::Float(FloatDType::F32));
    /// ```
    pub fn param(&self) -> PolicyDType {
        self.param
    }

    /// The dtype compute-heavy ops (matmul, convolutions, attention) run in.
    ///
    /// ```
    /// use burn_mpric_core::FloatDType;
    /// use burn_mpric_core::{Policy, PolicyDType};
    ///
    /// let p: Policy = "c=f16".parse().unwrap();
    /// assert_eq!(p.compute(), PolicyDType::Float(FloatDType::F16));
    /// ```
    pub fn compute(&self) -> PolicyDType {
        self.compute
    }

    /// The dtype results are handed back in.
    ///
    /// ```
    /// use burn_mpric_core::FloatDType;
    /// use burn_mpric_core::{Policy, PolicyDType};
    ///
    /// let p: Policy = "c=f16,o=f32".parse().unwrap();
    /// assert_eq!(p.output(), PolicyDType::Float(FloatDType::F32));
    /// ```
    pub fn output(&self) -> PolicyDType {
        self.output
    }

    /// A copy with another parameter dtype.
    ///
    /// ```
    /// use burn_mpric_core::FloatDType;
    /// use burn_mpric_core::Policy;
    ///
    /// assert_eq!(Policy::F32.with_param(FloatDType::BF16).to_string(), "p=bf16,c=f32,o=f32");
    /// ```
    pub fn with_param(self, dtype: impl Into<PolicyDType>) -> Self {
        Self {
            param: dtype.into(),
            ..self
        }
    }

    /// A copy with another compute dtype.
    ///
    /// ```
    /// use burn_mpric_core::FloatDType;
    /// use burn_mpric_core::Policy;
    ///
    /// assert_eq!(Policy::F32.with_compute(FloatDType::F16), Policy::mixed(FloatDType::F16));
    /// ```
    pub fn with_compute(self, dtype: impl Into<PolicyDType>) -> Self {
        Self {
            compute: dtype.into(),
            ..self
        }
    }

    /// A copy with another output dtype.
    ///
    /// ```
    /// use burn_mpric_core::FloatDType;
    /// use burn_mpric_core::Policy;
    ///
    /// let p: Policy = "c=bf16".parse().unwrap();
    /// assert_eq!(p.with_output(FloatDType::F32).to_string(), "p=f32,c=bf16,o=f32");
    /// ```
    pub fn with_output(self, dtype: impl Into<PolicyDType>) -> Self {
        Self {
            output: dtype.into(),
            ..self
        }
    }

    /// True when parameters, compute and output share one dtype: the policy changes nothing.
    ///
    /// ```
    /// use burn_mpric_core::Policy;
    ///
    /// assert!("f32".parse::<Policy>().unwrap().is_identity());
    /// assert!(!"mixed_bf16".parse::<Policy>().unwrap().is_identity());
    /// ```
    pub fn is_identity(&self) -> bool {
        self.param == self.compute && self.compute == self.output
    }

    /// True when no slot is a symbolic `half`.
    ///
    /// ```
    /// use burn_mpric_core::Policy;
    ///
    /// assert!(!"c=half".parse::<Policy>().unwrap().is_resolved());
    /// assert!("c=f16".parse::<Policy>().unwrap().is_resolved());
    /// ```
    pub fn is_resolved(&self) -> bool {
        [self.param, self.compute, self.output]
            .iter()
            .all(|d| d.float().is_some())
    }
}

impl Default for Policy {
    /// Full precision everywhere ([`Policy::F32`]): wrapping a backend changes nothing until
    /// a policy is chosen.
    fn default() -> Self {
        Policy::F32
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "p={},c={},o={}", self.param, self.compute, self.output)
    }
}

impl Serialize for Policy {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Policy {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}
