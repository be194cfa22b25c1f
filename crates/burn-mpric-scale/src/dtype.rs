//! Small dtype helpers shared by the tensor transforms.

use burn::tensor::backend::Backend;
use burn::tensor::{DType, FloatDType, Tensor};

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
    if a == Some(FloatDType::F64) || b == Some(FloatDType::F64) {
        FloatDType::F64
    } else {
        FloatDType::F32
    }
}

/// `1 / scale` computed in f64 and rounded to f32 once (PyTorch's
/// `scale.double().reciprocal().float()`).
pub(crate) fn inverse_of(scale: f32) -> f32 {
    (1.0 / f64::from(scale)) as f32
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
