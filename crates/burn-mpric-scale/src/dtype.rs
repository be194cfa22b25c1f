//! Small dtype helpers shared by the tensor transforms.

use burn::tensor::backend::Backend;
use burn::tensor::{DType, FloatDType, Tensor};
use burn_mpric_core::scale::{inverse_scale, unscale_dtype};

/// The float dtype of `dtype`, or `None` for non-float (int, bool, quantized) dtypes.
pub(crate) fn float_dtype(dtype: DType) -> Option<FloatDType> {
    match dtype {
        DType::F64 => Some(FloatDType::F64),
        DType::F32 => Some(FloatDType::F32),
        DType::Flex32 => Some(FloatDType::Flex32),
        DType::F16 => Some(FloatDType::F16),
        DType::BF16 => Some(FloatDType::BF16),
        _ => None,
    }
}

/// The dtype arithmetic on `a` and `b` runs in: f64 if either is f64, f32 otherwise (f16 and bf16
/// values are widened, as PyTorch's `opmath` does).
pub(crate) fn compute_dtype(a: Option<FloatDType>, b: Option<FloatDType>) -> FloatDType {
    let core = |d: FloatDType| burn_mpric_core::FloatDType::from_burn(d);
    unscale_dtype(a.map(core), b.map(core)).to_burn()
}

/// `1 / scale` computed in f64 and rounded to f32 once (PyTorch's
/// `scale.double().reciprocal().float()`).
pub(crate) fn inverse_of(scale: f32) -> f32 {
    inverse_scale(scale)
}

/// Multiplies `tensor` by `factor` in the compute dtype and returns it as `out`.
pub(crate) fn mul_in_compute<B: Backend, const D: usize>(
    tensor: Tensor<B, D>,
    factor: f32,
    out: Option<FloatDType>,
) -> Tensor<B, D> {
    let own = float_dtype(tensor.dtype());
    let out = out.or(own);
    let wide = tensor.cast(compute_dtype(own, out)).mul_scalar(factor);
    match out {
        Some(out) => wide.cast(out),
        None => wide,
    }
}

/// Conversions between the policy's float dtypes (burn-mpric-core's `FloatDType`, which
/// names no Burn release) and Burn 0.21's `burn::tensor::FloatDType`. Both have the same five
/// variants, so the conversions are exact.
///
/// ```
/// use burn_mpric_core::FloatDType;
/// use burn_mpric_scale::BurnDType;
///
/// assert_eq!(FloatDType::BF16.to_burn(), burn::tensor::FloatDType::BF16);
/// assert_eq!(FloatDType::from_burn(burn::tensor::FloatDType::F16), FloatDType::F16);
/// ```
pub trait BurnDType {
    /// Burn 0.21's dtype of the same format.
    fn to_burn(self) -> FloatDType;
    /// The policy dtype of Burn 0.21's `dtype`.
    fn from_burn(dtype: FloatDType) -> Self;
}

impl BurnDType for burn_mpric_core::FloatDType {
    fn to_burn(self) -> FloatDType {
        use burn_mpric_core::FloatDType as Core;
        match self {
            Core::F64 => FloatDType::F64,
            Core::F32 => FloatDType::F32,
            Core::Flex32 => FloatDType::Flex32,
            Core::F16 => FloatDType::F16,
            Core::BF16 => FloatDType::BF16,
        }
    }

    fn from_burn(dtype: FloatDType) -> Self {
        use burn_mpric_core::FloatDType as Core;
        match dtype {
            FloatDType::F64 => Core::F64,
            FloatDType::F32 => Core::F32,
            FloatDType::Flex32 => Core::Flex32,
            FloatDType::F16 => Core::F16,
            FloatDType::BF16 => Core::BF16,
        }
    }
}
