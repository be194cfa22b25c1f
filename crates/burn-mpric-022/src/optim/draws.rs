//! Stochastic rounding's uniforms made on the device: burn-mpric-core's keyed permutation
//! ([`DrawKeys`]) of each element's index, the index itself made there too.

use burn::tensor::{Device, FloatDType, Int, Tensor};
use burn_mpric_core::optim::{DrawKeys, UNIT};

use crate::device::Burn022;

/// The widest run of ones a cumulative sum adds up: Burn's cube backends sum each element's
/// whole prefix, so a cumulative sum costs the square of its length.
const DIGIT: usize = 1024;

/// `len` uniforms in `[0, 1)` at f32 for draw `keys`, made on `device`: the numbers
/// [`DrawKeys::uniforms`] computes on the host, with nothing per element uploaded.
///
/// # Example
///
/// ```
/// use burn::tensor::Device;
/// use burn_mpric_core::optim::DrawKeys;
/// use burn_mpric_022::optim::device_uniforms;
///
/// let keys = DrawKeys::new(42, 0, 7);
/// let made = device_uniforms(&keys, 3000, &Device::default());
/// assert_eq!(made.into_data().try_to_vec::<f32>().unwrap(), keys.uniforms(3000));
/// ```
pub fn device_uniforms(keys: &DrawKeys, len: usize, device: &Device) -> Tensor<1> {
    keys.bits::<Burn022, _>(iota(len, device))
        .cast(FloatDType::F32)
        .mul_scalar(UNIT)
}

/// Whether `device` is a cube backend's (Wgpu, CUDA, ...): where the draws are made on the
/// device when the precision leaves it to the backend
/// ([`DrawSource::Auto`](burn_mpric_core::optim::DrawSource)). Burn 0.22's device says so
/// only in its description (`Device<Cube(...)>`); its dispatch enum's variants exist per
/// build feature.
pub(crate) fn on_gpu(device: &Device) -> bool {
    format!("{device:?}").contains("Cube")
}

/// `0, 1, ..., n - 1` made on the device from ones and cumulative sums of at most
/// [`DIGIT`] of them, a digit at a time (Burn's `arange` copies its values from the host).
fn iota(n: usize, device: &Device) -> Tensor<1, Int> {
    if n <= DIGIT {
        return Tensor::<1, Int>::ones([n], device).cumsum(0).sub_scalar(1);
    }
    let rows = n.div_ceil(DIGIT);
    let high = iota(rows, device)
        .mul_scalar(DIGIT as i64)
        .reshape([rows, 1]);
    let low = iota(DIGIT, device).reshape([1, DIGIT]);
    high.add(low).reshape([rows * DIGIT]).slice(0..n)
}
