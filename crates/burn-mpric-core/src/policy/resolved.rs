//! [`ResolvedPolicy`]: a policy as three concrete dtypes, ready to decide casts.

use core::fmt;
use core::str::FromStr;

use crate::FloatDType;
use serde::{Deserialize, Serialize};

use crate::{Policy, PolicyDType, PolicyError};

/// A [`Policy`] whose three slots are concrete dtypes (no `half` left): what a device runs,
/// and what the handler's casts and the loss-scale rule read.
///
/// It comes from [`Policy::resolve_with`] (checked against a device), from
/// [`Policy::resolve_half`], or from a policy that names no `half` (`TryFrom`). Its text form
/// is the policy's.
///
/// ```
/// use burn_mpric_core::FloatDType::{BF16, F32};
/// use burn_mpric_core::{Policy, ResolvedPolicy};
///
/// let policy: Policy = "mixed_bf16".parse().unwrap();
/// let resolved = ResolvedPolicy::try_from(policy).unwrap();
/// assert_eq!(resolved.dtypes(), (F32, BF16, F32));
/// assert_eq!(resolved.to_string(), "p=f32,c=bf16,o=f32");
/// assert_eq!(Policy::from(resolved), policy);
/// assert!(ResolvedPolicy::try_from("c=half".parse::<Policy>().unwrap()).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "Policy", into = "Policy")]
pub struct ResolvedPolicy {
    param: FloatDType,
    compute: FloatDType,
    output: FloatDType,
}

impl ResolvedPolicy {
    /// All three dtypes f32.
    ///
    /// ```
    /// use burn_mpric_core::{Policy, ResolvedPolicy};
    ///
    /// assert_eq!(Policy::from(ResolvedPolicy::F32), Policy::F32);
    /// ```
    pub const F32: ResolvedPolicy =
        ResolvedPolicy::new(FloatDType::F32, FloatDType::F32, FloatDType::F32);

    /// The policy of these three dtypes.
    ///
    /// ```
    /// use burn_mpric_core::FloatDType::{F16, F32};
    /// use burn_mpric_core::ResolvedPolicy;
    ///
    /// assert_eq!(ResolvedPolicy::new(F32, F16, F32).to_string(), "p=f32,c=f16,o=f32");
    /// ```
    pub const fn new(param: FloatDType, compute: FloatDType, output: FloatDType) -> Self {
        Self {
            param,
            compute,
            output,
        }
    }

    /// The dtype parameters are stored in.
    ///
    /// ```
    /// use burn_mpric_core::FloatDType;
    /// use burn_mpric_core::ResolvedPolicy;
    ///
    /// assert_eq!(ResolvedPolicy::F32.param(), FloatDType::F32);
    /// ```
    pub const fn param(&self) -> FloatDType {
        self.param
    }

    /// The dtype compute-heavy ops run in.
    ///
    /// ```
    /// use burn_mpric_core::FloatDType;
    /// use burn_mpric_core::ResolvedPolicy;
    ///
    /// let p: ResolvedPolicy = "mixed_f16".parse().unwrap();
    /// assert_eq!(p.compute(), FloatDType::F16);
    /// ```
    pub const fn compute(&self) -> FloatDType {
        self.compute
    }

    /// The dtype results are handed back in.
    ///
    /// ```
    /// use burn_mpric_core::FloatDType;
    /// use burn_mpric_core::ResolvedPolicy;
    ///
    /// let p: ResolvedPolicy = "c=bf16".parse().unwrap();
    /// assert_eq!(p.output(), FloatDType::BF16);
    /// ```
    pub const fn output(&self) -> FloatDType {
        self.output
    }

    /// (param, compute, output).
    ///
    /// ```
    /// use burn_mpric_core::FloatDType::{F16, F32};
    /// use burn_mpric_core::ResolvedPolicy;
    ///
    /// assert_eq!("pure_f16".parse::<ResolvedPolicy>().unwrap().dtypes(), (F16, F16, F16));
    /// # assert_eq!(ResolvedPolicy::F32.dtypes(), (F32, F32, F32));
    /// ```
    pub const fn dtypes(&self) -> (FloatDType, FloatDType, FloatDType) {
        (self.param, self.compute, self.output)
    }

    /// Whether computation runs at another dtype than parameters are stored in (values get
    /// cast to the compute dtype).
    ///
    /// ```
    /// use burn_mpric_core::ResolvedPolicy;
    ///
    /// assert!("mixed_bf16".parse::<ResolvedPolicy>().unwrap().lowers());
    /// assert!(!"pure_bf16".parse::<ResolvedPolicy>().unwrap().lowers());
    /// ```
    pub fn lowers(&self) -> bool {
        self.compute != self.param
    }

    /// Whether computation runs in f16: the policies that call for loss scaling (f16 has
    /// five exponent bits; see
    /// [`LossScalePreset::Auto`](burn_mpric_scale::LossScalePreset::Auto)).
    ///
    /// ```
    /// use burn_mpric_core::ResolvedPolicy;
    ///
    /// assert!("mixed_f16".parse::<ResolvedPolicy>().unwrap().computes_in_f16());
    /// assert!(!"mixed_bf16".parse::<ResolvedPolicy>().unwrap().computes_in_f16());
    /// ```
    pub fn computes_in_f16(&self) -> bool {
        self.compute == FloatDType::F16
    }

    /// True when parameters, compute and output share one dtype: the policy changes nothing.
    ///
    /// ```
    /// use burn_mpric_core::ResolvedPolicy;
    ///
    /// assert!(ResolvedPolicy::F32.is_identity());
    /// assert!(!"mixed_f16".parse::<ResolvedPolicy>().unwrap().is_identity());
    /// ```
    pub fn is_identity(&self) -> bool {
        self.param == self.compute && self.compute == self.output
    }

    /// The three slots with their names (`param`, `compute`, `output`).
    ///
    /// ```
    /// use burn_mpric_core::ResolvedPolicy;
    ///
    /// assert_eq!(ResolvedPolicy::F32.slots()[1].0, "compute");
    /// ```
    pub fn slots(&self) -> [(&'static str, FloatDType); 3] {
        [
            ("param", self.param),
            ("compute", self.compute),
            ("output", self.output),
        ]
    }
}

impl Policy {
    /// Replaces every `half` slot with `half`, without asking a device (see
    /// [`Policy::resolve_with`] for that).
    ///
    /// ```
    /// use burn_mpric_core::FloatDType;
    /// use burn_mpric_core::Policy;
    ///
    /// let p: Policy = "c=half,o=f32".parse().unwrap();
    /// assert_eq!(p.resolve_half(FloatDType::F16).to_string(), "p=f32,c=f16,o=f32");
    /// ```
    pub fn resolve_half(self, half: FloatDType) -> ResolvedPolicy {
        let r = |d: PolicyDType| d.resolve_half(half);
        ResolvedPolicy::new(r(self.param()), r(self.compute()), r(self.output()))
    }
}

/// What `half` stands for on a device that runs `supported`: bf16 where it is supported (it
/// keeps f32's range, so it needs no loss scaling), else f16. The one statement of that rule,
/// which every edition asks.
///
/// ```
/// use burn_mpric_core::{FloatDType, half_for};
///
/// assert_eq!(half_for(&[FloatDType::F32, FloatDType::BF16]), FloatDType::BF16);
/// assert_eq!(half_for(&[FloatDType::F32, FloatDType::F16]), FloatDType::F16);
/// ```
pub fn half_for(supported: &[FloatDType]) -> FloatDType {
    if supported.contains(&FloatDType::BF16) {
        FloatDType::BF16
    } else {
        FloatDType::F16
    }
}

impl Policy {
    /// Resolves the policy against a device that runs the float dtypes `supported`: `half`
    /// becomes [`half_for`], then every slot must be a supported dtype, or the error names the
    /// slot, the dtype and what the device does support. Each edition lists its device's
    /// dtypes and calls this.
    ///
    /// ```
    /// use burn_mpric_core::{FloatDType::*, Policy, PolicyError};
    ///
    /// let p: Policy = "p=f32,c=half".parse().unwrap();
    /// assert_eq!(p.resolve_with(&[F32, F16, BF16]).unwrap().to_string(), "p=f32,c=bf16,o=bf16");
    ///
    /// let err = "mixed_f16".parse::<Policy>().unwrap().resolve_with(&[F64, F32]);
    /// assert!(matches!(err, Err(PolicyError::UnsupportedByDevice { slot: "compute", .. })));
    /// ```
    pub fn resolve_with(&self, supported: &[FloatDType]) -> Result<ResolvedPolicy, PolicyError> {
        let resolved = self.resolve_half(half_for(supported));
        for (slot, dtype) in resolved.slots() {
            if !supported.contains(&dtype) {
                return Err(PolicyError::UnsupportedByDevice {
                    slot,
                    dtype,
                    supported: FloatDType::ALL
                        .into_iter()
                        .filter(|d| supported.contains(d))
                        .collect(),
                });
            }
        }
        Ok(resolved)
    }
}

impl TryFrom<Policy> for ResolvedPolicy {
    type Error = PolicyError;

    /// The policy's dtypes, or [`PolicyError::UnresolvedHalf`] when a slot is `half` (which
    /// only a device can decide).
    fn try_from(policy: Policy) -> Result<Self, Self::Error> {
        let slot = |slot: &'static str, d: PolicyDType| {
            d.float().ok_or(PolicyError::UnresolvedHalf { slot })
        };
        Ok(Self::new(
            slot("param", policy.param())?,
            slot("compute", policy.compute())?,
            slot("output", policy.output())?,
        ))
    }
}

impl From<ResolvedPolicy> for Policy {
    fn from(resolved: ResolvedPolicy) -> Self {
        Policy::new(resolved.param, resolved.compute, resolved.output)
    }
}

impl FromStr for ResolvedPolicy {
    type Err = PolicyError;

    /// Policy text that names no `half`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.parse::<Policy>()?.try_into()
    }
}

impl fmt::Display for ResolvedPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        Policy::from(*self).fmt(f)
    }
}
