//! The policy (burn-mpric-core's [`Policy`], shared with the Burn 0.22 edition) and how a
//! Burn 0.21 device resolves it: the bridge between the core's dtypes and Burn's.

use burn::tensor::DType;
use burn::tensor::backend::Backend;
use burn_mpric_core::{FloatDType, Policy, PolicyError, ResolvedPolicy, half_for};
use burn_mpric_scale::BurnDType;

/// The float dtypes `device` runs ([`Backend::supports_dtype`]), in the core's terms.
///
/// ```
/// use burn::backend::{Flex, NdArray};
/// use burn_mpric::{FloatDType, supported_float_dtypes};
///
/// assert!(supported_float_dtypes::<Flex>(&Default::default()).contains(&FloatDType::BF16));
/// assert!(!supported_float_dtypes::<NdArray>(&Default::default()).contains(&FloatDType::F16));
/// ```
pub fn supported_float_dtypes<B: Backend>(device: &B::Device) -> Vec<FloatDType> {
    FloatDType::ALL
        .into_iter()
        .filter(|dtype| B::supports_dtype(device, DType::from(dtype.to_burn())))
        .collect()
}

/// What `half` stands for on `device`: bf16 where the device runs it, else f16
/// (burn-mpric-core's [`half_for`], asked with the device's dtypes).
///
/// ```
/// use burn::backend::{Flex, NdArray};
/// use burn::tensor::FloatDType;
/// use burn_mpric::half_dtype;
///
/// assert_eq!(half_dtype::<Flex>(&Default::default()), FloatDType::BF16);
/// assert_eq!(half_dtype::<NdArray>(&Default::default()), FloatDType::F16);
/// ```
pub fn half_dtype<B: Backend>(device: &B::Device) -> burn::tensor::FloatDType {
    half_for(&supported_float_dtypes::<B>(device)).to_burn()
}

/// Resolving a [`Policy`] against a Burn 0.21 device.
///
/// ```
/// use burn::backend::{Flex, NdArray};
/// use burn_mpric::{Policy, PolicyError, ResolveOnDevice};
///
/// let p: Policy = "p=f32,c=half".parse().unwrap();
/// let on_flex = p.resolve::<Flex>(&Default::default()).unwrap();
/// assert_eq!(on_flex.to_string(), "p=f32,c=bf16,o=bf16");
///
/// let err = "mixed_f16".parse::<Policy>().unwrap().resolve::<NdArray>(&Default::default());
/// assert!(matches!(err, Err(PolicyError::UnsupportedByDevice { slot: "compute", .. })));
/// ```
pub trait ResolveOnDevice {
    /// `half` becomes [`half_dtype`], then every dtype must be one the device supports, or the
    /// error names the slot, the dtype and what the device does support
    /// ([`Policy::resolve_with`]).
    fn resolve<B: Backend>(&self, device: &B::Device) -> Result<ResolvedPolicy, PolicyError>;
}

impl ResolveOnDevice for Policy {
    fn resolve<B: Backend>(&self, device: &B::Device) -> Result<ResolvedPolicy, PolicyError> {
        self.resolve_with(&supported_float_dtypes::<B>(device))
    }
}
