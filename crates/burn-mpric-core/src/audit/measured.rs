//! [`measured_policy`]: the policy an audit's steps run at, the one rule both editions ask.

use crate::{FloatDType, Policy, PolicyDType, ResolvedPolicy};

/// The policy an audit of `audited` measures its steps at, on a device that runs bf16 or not
/// (`bf16`): every f16 (or `half`) slot becomes a dtype with f32's exponent range, so that
/// the values an f16 run would lose (overflow to inf, flush to zero) are seen as they are:
/// bf16 where the device runs it, else f32, which every device runs. The compute dtype is
/// bf16 where the device runs it, even for an f32 policy (so the ops that run at a half dtype
/// show), else the measured param dtype (the op table then says which ops run low). Other
/// slots (f32, f64, flex32, bf16) are kept.
///
/// Measuring pure f16 at f16 on a device without bf16 would turn the very values the audit
/// looks for into inf, which its verdicts would blame on the model; bf16 there cannot run.
///
/// # Example
///
/// ```
/// use burn_mpric_core::Policy;
/// use burn_mpric_core::audit::measured_policy;
///
/// let measured = |p: &str, bf16| measured_policy(&p.parse::<Policy>().unwrap(), bf16).to_string();
/// assert_eq!(measured("mixed_f16", true), "p=f32,c=bf16,o=f32");
/// assert_eq!(measured("mixed_f16", false), "p=f32,c=f32,o=f32");
/// assert_eq!(measured("p=f16,c=f16,o=f16", true), "p=bf16,c=bf16,o=bf16");
/// assert_eq!(measured("p=f16,c=f16,o=f16", false), "p=f32,c=f32,o=f32");
/// assert_eq!(measured("f32", true), "p=f32,c=bf16,o=f32");
/// ```
pub fn measured_policy(audited: &Policy, bf16: bool) -> ResolvedPolicy {
    let wide = if bf16 {
        FloatDType::BF16
    } else {
        FloatDType::F32
    };
    let measured = |d: PolicyDType| match d {
        PolicyDType::Float(FloatDType::F16) | PolicyDType::Half => wide,
        PolicyDType::Float(other) => other,
    };
    let param = measured(audited.param());
    let compute = if bf16 { FloatDType::BF16 } else { param };
    ResolvedPolicy::new(param, compute, measured(audited.output()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measured(policy: &str, bf16: bool) -> String {
        measured_policy(&policy.parse::<Policy>().unwrap(), bf16).to_string()
    }

    /// Hand-checked: each f16 or half slot at bf16 (with bf16) or f32 (without); the
    /// compute slot at bf16, else at the measured param dtype.
    #[test]
    fn every_f16_slot_gets_f32_range() {
        let cases = [
            (
                "p=f16,c=f16,o=f16",
                "p=bf16,c=bf16,o=bf16",
                "p=f32,c=f32,o=f32",
            ),
            (
                "p=f32,c=f16,o=f16",
                "p=f32,c=bf16,o=bf16",
                "p=f32,c=f32,o=f32",
            ),
            (
                "p=f32,c=half,o=f32",
                "p=f32,c=bf16,o=f32",
                "p=f32,c=f32,o=f32",
            ),
            (
                "p=half,c=half,o=half",
                "p=bf16,c=bf16,o=bf16",
                "p=f32,c=f32,o=f32",
            ),
            (
                "p=f64,c=f16,o=f64",
                "p=f64,c=bf16,o=f64",
                "p=f64,c=f64,o=f64",
            ),
            (
                "p=f32,c=bf16,o=f32",
                "p=f32,c=bf16,o=f32",
                "p=f32,c=f32,o=f32",
            ),
            (
                "p=f32,c=f32,o=f32",
                "p=f32,c=bf16,o=f32",
                "p=f32,c=f32,o=f32",
            ),
        ];
        for (audited, with_bf16, without) in cases {
            assert_eq!(measured(audited, true), with_bf16, "{audited} with bf16");
            assert_eq!(measured(audited, false), without, "{audited} without bf16");
        }
    }

    #[test]
    fn without_bf16_no_measured_slot_is_a_half_dtype() {
        for audited in [
            "p=f16,c=f16,o=f16",
            "p=f32,c=f16,o=f16",
            "p=half,c=half,o=half",
        ] {
            let policy = measured_policy(&audited.parse::<Policy>().unwrap(), false);
            for (slot, dtype) in policy.slots() {
                assert!(
                    !matches!(dtype, FloatDType::F16 | FloatDType::BF16),
                    "{audited}: {slot} measured at {dtype}"
                );
            }
        }
    }
}
