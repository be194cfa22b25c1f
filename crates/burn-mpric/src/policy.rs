//! The policy (burn-mpric-core's [`Policy`], shared with the Burn 0.22 edition) and how a
//! Burn 0.21 device resolves it: the bridge between the core's dtypes and Burn's.

use burn::tensor::DType;
use burn::tensor::backend::Backend;
use burn_mpric_core::{FloatDType, Policy, PolicyError, ResolvedPolicy, half_for};

/// Conversions between the policy's float dtypes (burn-mpric-core's [`FloatDType`], which
/// names no Burn release) and Burn 0.21's `burn::tensor::FloatDType`. Both have the same five
/// variants, so the conversions are exact.
///
/// ```
/// use burn_mpric::{BurnDType, FloatDType};
///
/// assert_eq!(FloatDType::BF16.to_burn(), burn::tensor::FloatDType::BF16);
/// assert_eq!(FloatDType::from_burn(burn::tensor::FloatDType::F16), FloatDType::F16);
/// ```
pub trait BurnDType {
    /// Burn 0.21's dtype of the same format.
    fn to_burn(self) -> burn::tensor::FloatDType;
    /// The policy dtype of Burn 0.21's `dtype`.
    fn from_burn(dtype: burn::tensor::FloatDType) -> Self;
}

impl BurnDType for FloatDType {
    fn to_burn(self) -> burn::tensor::FloatDType {
        use burn::tensor::FloatDType as Burn;
        match self {
            FloatDType::F64 => Burn::F64,
            FloatDType::F32 => Burn::F32,
            FloatDType::Flex32 => Burn::Flex32,
            FloatDType::F16 => Burn::F16,
            FloatDType::BF16 => Burn::BF16,
        }
    }

    fn from_burn(dtype: burn::tensor::FloatDType) -> Self {
        use burn::tensor::FloatDType as Burn;
        match dtype {
            Burn::F64 => FloatDType::F64,
            Burn::F32 => FloatDType::F32,
            Burn::Flex32 => FloatDType::Flex32,
            Burn::F16 => FloatDType::F16,
            Burn::BF16 => FloatDType::BF16,
        }
    }
}

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
