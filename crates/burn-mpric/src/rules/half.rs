//! The one `half` rule, and a policy checked against a device.

use burn::tensor::backend::Backend;
use burn::tensor::{DType, FloatDType};

use super::resolved::ResolvedPolicy;
use crate::{Policy, PolicyError};

/// Every float dtype Burn knows, in the order error messages list them.
const ALL_FLOAT_DTYPES: [FloatDType; 5] = [
    FloatDType::F64,
    FloatDType::F32,
    FloatDType::Flex32,
    FloatDType::F16,
    FloatDType::BF16,
];

/// What `half` stands for on `device`: bf16 where the device runs it (it keeps f32's range,
/// so it needs no loss scaling), else f16. The crate's one statement of that rule.
///
/// ```
/// use burn::backend::{Flex, NdArray};
/// use burn::tensor::FloatDType;
/// use burn_mpric::half_dtype;
///
/// assert_eq!(half_dtype::<Flex>(&Default::default()), FloatDType::BF16);
/// assert_eq!(half_dtype::<NdArray>(&Default::default()), FloatDType::F16);
/// ```
pub fn half_dtype<B: Backend>(device: &B::Device) -> FloatDType {
    if B::supports_dtype(device, DType::BF16) {
        FloatDType::BF16
    } else {
        FloatDType::F16
    }
}

impl Policy {
    /// Resolves the policy against a device: `half` becomes [`half_dtype`], then every dtype
    /// must be one the device supports ([`Backend::supports_dtype`]), or the error names the
    /// slot, the dtype and what the device does support.
    ///
    /// ```
    /// use burn::backend::{Flex, NdArray};
    /// use burn_mpric::{Policy, PolicyError};
    ///
    /// let p: Policy = "p=f32,c=half".parse().unwrap();
    /// let on_flex = p.resolve::<Flex>(&Default::default()).unwrap();
    /// assert_eq!(on_flex.to_string(), "p=f32,c=bf16,o=bf16");
    ///
    /// let err = "mixed_f16".parse::<Policy>().unwrap().resolve::<NdArray>(&Default::default());
    /// assert!(matches!(err, Err(PolicyError::UnsupportedByDevice { slot: "compute", .. })));
    /// ```
    pub fn resolve<B: Backend>(&self, device: &B::Device) -> Result<ResolvedPolicy, PolicyError> {
        let supports = |dtype: FloatDType| B::supports_dtype(device, DType::from(dtype));
        let resolved = self.resolve_half(half_dtype::<B>(device));
        for (slot, dtype) in resolved.slots() {
            if !supports(dtype) {
                return Err(PolicyError::UnsupportedByDevice {
                    slot,
                    dtype,
                    supported: ALL_FLOAT_DTYPES
                        .into_iter()
                        .filter(|d| supports(*d))
                        .collect(),
                });
            }
        }
        Ok(resolved)
    }
}
