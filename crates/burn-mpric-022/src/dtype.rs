//! Dtype conversions between the core's [`FloatDType`] and Burn 0.22's, and what a device runs.

use burn::module::Param;
use burn::tensor::{DType, Device, Tensor};
use burn_mpric_core::{FloatDType, Policy, PolicyError, ResolvedPolicy};

/// Burn's float dtype for the core's.
///
/// # Example
///
/// ```
/// use burn_mpric_022::{from_burn_dtype, to_burn_dtype};
/// use burn_mpric_core::FloatDType;
///
/// assert_eq!(to_burn_dtype(FloatDType::BF16), burn::tensor::FloatDType::BF16);
/// assert_eq!(from_burn_dtype(to_burn_dtype(FloatDType::F16)), FloatDType::F16);
/// ```
pub fn to_burn_dtype(dtype: FloatDType) -> burn::tensor::FloatDType {
    match dtype {
        FloatDType::F64 => burn::tensor::FloatDType::F64,
        FloatDType::F32 => burn::tensor::FloatDType::F32,
        FloatDType::Flex32 => burn::tensor::FloatDType::Flex32,
        FloatDType::F16 => burn::tensor::FloatDType::F16,
        FloatDType::BF16 => burn::tensor::FloatDType::BF16,
    }
}

/// The core's float dtype for Burn's.
///
/// # Example
///
/// ```
/// use burn_mpric_022::from_burn_dtype;
/// use burn_mpric_core::FloatDType;
///
/// assert_eq!(from_burn_dtype(burn::tensor::FloatDType::F32), FloatDType::F32);
/// ```
pub fn from_burn_dtype(dtype: burn::tensor::FloatDType) -> FloatDType {
    match dtype {
        burn::tensor::FloatDType::F64 => FloatDType::F64,
        burn::tensor::FloatDType::F32 => FloatDType::F32,
        burn::tensor::FloatDType::Flex32 => FloatDType::Flex32,
        burn::tensor::FloatDType::F16 => FloatDType::F16,
        burn::tensor::FloatDType::BF16 => FloatDType::BF16,
    }
}

/// The plain float dtype of a tensor dtype; `None` for int, bool and quantized dtypes (which
/// nothing in this crate casts: Burn's `FloatDType::from(DType)` panics on them).
pub(crate) fn plain_float(dtype: DType) -> Option<burn::tensor::FloatDType> {
    match dtype {
        DType::F64 => Some(burn::tensor::FloatDType::F64),
        DType::F32 => Some(burn::tensor::FloatDType::F32),
        DType::Flex32 => Some(burn::tensor::FloatDType::Flex32),
        DType::F16 => Some(burn::tensor::FloatDType::F16),
        DType::BF16 => Some(burn::tensor::FloatDType::BF16),
        _ => None,
    }
}

/// The float dtypes `device` runs for general computation (storage, conversion and
/// arithmetic), as Burn 0.22's [`Device::supports_dtype`] reports them, in the core's order.
///
/// Wgpu over a Vulkan driver without bf16 arithmetic (Mesa's lavapipe, most Vulkan GPUs)
/// leaves bf16 out; Flex lists f64, f32, f16 and bf16.
///
/// # Example
///
/// ```
/// use burn::tensor::Device;
/// use burn_mpric_022::supported_float_dtypes;
/// use burn_mpric_core::FloatDType;
///
/// let supported = supported_float_dtypes(&Device::flex());
/// assert!(supported.contains(&FloatDType::F32));
/// assert!(supported.contains(&FloatDType::BF16));
/// ```
pub fn supported_float_dtypes(device: &Device) -> Vec<FloatDType> {
    FloatDType::ALL
        .into_iter()
        .filter(|dtype| device.supports_dtype(to_burn_dtype(*dtype)))
        .collect()
}

/// Resolves `policy` against `device`: `half` becomes bf16 where the device runs it (else
/// f16), and a dtype the device cannot run is an error naming the slot, the dtype and the
/// dtypes the device does run.
///
/// # Example
///
/// ```
/// use burn::tensor::Device;
/// use burn_mpric_022::resolve_policy;
/// use burn_mpric_core::{FloatDType, Policy};
///
/// let policy: Policy = "p=f32,c=half".parse().unwrap();
/// let resolved = resolve_policy(policy, &Device::flex()).unwrap();
/// assert_eq!(resolved.compute(), FloatDType::BF16);
/// ```
pub fn resolve_policy(policy: Policy, device: &Device) -> Result<ResolvedPolicy, PolicyError> {
    policy.resolve_with(&supported_float_dtypes(device))
}

/// The dtype a parameter is stored at, without initializing a lazy one (which will be created
/// at its device's default float dtype).
pub(crate) fn stored_dtype<const D: usize>(param: &Param<Tensor<D>>) -> DType {
    if param.is_initialized() {
        param.base().dtype()
    } else {
        param.lazy_device().settings().float_dtype.into()
    }
}

/// `tensor` as a new leaf at `dtype`, taking a gradient where it did: casting a tracked leaf
/// would make a non-leaf, whose gradient would flow to the old value instead.
pub(crate) fn leaf_at<const D: usize>(
    tensor: Tensor<D>,
    dtype: burn::tensor::FloatDType,
) -> Tensor<D> {
    let require_grad = tensor.is_require_grad();
    let tensor = tensor.cast(dtype).detach();
    if require_grad {
        tensor.require_grad()
    } else {
        tensor
    }
}
