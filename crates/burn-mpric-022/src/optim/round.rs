//! Rounding an f32 update to bf16 without losing it: stochastically, or keeping the remainder.

use burn::tensor::{FloatDType, Tensor};

/// `|y| * (1 + STEP)` rounds to `|y|`'s upper bf16 neighbour and `|y| * (1 - STEP)` to its
/// lower one, for any normal bf16 `y`: the products are exact in f32 (8 + 11 significant bits)
/// and land between 0.5 and 1.5 spacings away, also where the spacing halves below a power of
/// two.
const STEP: f32 = 1.0 / 256.0 + 1.0 / 1024.0;

/// `value` rounded to bf16 stochastically: to the bf16 neighbour above or below with
/// probabilities that make the expected result `value` itself, where the rounding draws
/// `uniforms` (one per element, in `[0, 1)`). Runs on the device with element-wise ops only.
///
/// Values that bf16 holds exactly, infinities and NaN round as a cast does; so do values in
/// bf16's subnormal range (below 2^-126), which round to the nearest.
///
/// # Example
///
/// ```
/// use burn::tensor::{DType, Device, FloatDType, Tensor};
/// use burn_mpric_022::optim::stochastic_round;
///
/// let device = Device::flex();
/// // 1 + 2^-9 lies a quarter of the way from 1 to its upper neighbour 1 + 2^-7.
/// let x = Tensor::<1>::from_floats([1.0 + 1.0 / 512.0; 4], &device);
/// let u = Tensor::<1>::from_floats([0.1, 0.2, 0.3, 0.9], &device);
/// let rounded = stochastic_round(x, u);
/// assert_eq!(rounded.dtype(), DType::BF16);
/// let values = rounded.cast(FloatDType::F32).into_data().try_to_vec::<f32>().unwrap();
/// assert_eq!(values, vec![1.0 + 1.0 / 128.0, 1.0 + 1.0 / 128.0, 1.0, 1.0]);
/// ```
pub fn stochastic_round(value: Tensor<1>, uniforms: Tensor<1>) -> Tensor<1> {
    let x = value.cast(FloatDType::F32);
    let near_bf16 = x.clone().cast(FloatDType::BF16);
    let near = near_bf16.clone().cast(FloatDType::F32);
    // Exact in f32: `near` is within half a bf16 spacing of `x`.
    let residual = x.sub(near.clone());
    // 1 where the residual points away from zero, -1 where towards it, 0 where `x` is exact.
    let direction = residual.clone().sign().mul(near.clone().sign());
    let other_bf16 = near
        .clone()
        .mul(direction.mul_scalar(STEP).add_scalar(1.0))
        .cast(FloatDType::BF16);
    let gap = other_bf16.clone().cast(FloatDType::F32).sub(near).abs();
    // Up with probability |residual| / gap; never where the gap is 0 or NaN.
    let take = uniforms
        .cast(FloatDType::F32)
        .mul(gap)
        .lower(residual.abs());
    near_bf16.mask_where(take, other_bf16)
}

/// `value` split into its bf16 rounding and the bf16 remainder: `value ≈ weight + compensation`
/// to about 16 significant bits. The compensated (Kahan) update keeps both and adds the
/// remainder back before the next update.
///
/// The remainder is itself rounded to bf16 stochastically (drawing `uniforms`): rounded to
/// nearest, a buffer that receives the same small update every step drops the same part of it
/// every step, and the weight drifts (10^4 updates of 1e-4 to 1.0 end at 2.03 rather than 2.0).
///
/// # Example
///
/// ```
/// use burn::tensor::{Device, FloatDType, Tensor};
/// use burn_mpric_022::optim::kahan_split;
///
/// let device = Device::flex();
/// let x = Tensor::<1>::from_floats([1.0 + 1.0 / 512.0], &device);
/// let u = Tensor::<1>::from_floats([0.5], &device);
/// let (weight, compensation) = kahan_split(x, u);
/// let f32s = |t: Tensor<1>| t.cast(FloatDType::F32).into_scalar::<f32>();
/// assert_eq!((f32s(weight), f32s(compensation)), (1.0, 1.0 / 512.0));
/// ```
pub fn kahan_split(value: Tensor<1>, uniforms: Tensor<1>) -> (Tensor<1>, Tensor<1>) {
    let x = value.cast(FloatDType::F32);
    let weight = x.clone().cast(FloatDType::BF16);
    let remainder = x.sub(weight.clone().cast(FloatDType::F32));
    (weight, stochastic_round(remainder, uniforms))
}
