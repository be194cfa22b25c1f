//! The arithmetic of unscaling, as both editions do it.

use crate::FloatDType;

/// The factor gradients are multiplied by to unscale them: `1 / scale` computed at f64 and
/// rounded to f32 once (PyTorch's `scale.double().reciprocal().float()`).
///
/// ```
/// use burn_mpric_core::scale::inverse_scale;
///
/// assert_eq!(inverse_scale(4.0), 0.25);
/// assert_eq!(inverse_scale(3.0), (1.0f64 / 3.0) as f32);
/// ```
pub fn inverse_scale(scale: f32) -> f32 {
    (1.0 / f64::from(scale)) as f32
}

/// The dtype a gradient is unscaled and reduced at, given its own dtype and its parameter's:
/// f64 when either is f64, else f32 (f16 and bf16 widened, as PyTorch's `opmath` does), so
/// the multiply and the finiteness sums never round at half precision.
///
/// ```
/// use burn_mpric_core::FloatDType::{BF16, F16, F32, F64};
/// use burn_mpric_core::scale::unscale_dtype;
///
/// assert_eq!(unscale_dtype(Some(F16), Some(F32)), F32);
/// assert_eq!(unscale_dtype(Some(BF16), None), F32);
/// assert_eq!(unscale_dtype(Some(F32), Some(F64)), F64);
/// ```
pub fn unscale_dtype(grad: Option<FloatDType>, param: Option<FloatDType>) -> FloatDType {
    if grad == Some(FloatDType::F64) || param == Some(FloatDType::F64) {
        FloatDType::F64
    } else {
        FloatDType::F32
    }
}
