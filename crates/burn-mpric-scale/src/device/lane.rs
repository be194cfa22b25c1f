//! Burn 0.21's one-dimensional tensors as burn-mpric-core's [`Lane`]s: what the update rules
//! written once in the core ([`LaneRule`](burn_mpric_core::optim::LaneRule)) run on here.

use burn::tensor::backend::Backend;
use burn::tensor::{Bool, FloatDType, Int, Tensor};
use burn_mpric_core::lane::{IntLane, Lane};

/// The Burn 0.21 edition, as the core's lane arithmetic names it: Burn 0.21's
/// one-dimensional tensors are the core's [`Lane`]s (float) and [`IntLane`]s (int) under it.
///
/// # Example
///
/// ```
/// use burn::backend::Flex;
/// use burn::tensor::{Int, Tensor};
/// use burn_mpric_core::lane::IntLane;
/// use burn_mpric_scale::Burn021;
///
/// let t = Tensor::<Flex, 1, Int>::from_ints([7, 9], &Default::default());
/// let r = IntLane::<Burn021>::rem_scalar(t, 4);
/// assert_eq!(r.into_data().convert::<i64>().to_vec::<i64>().unwrap(), vec![3, 1]);
/// ```
pub struct Burn021;

impl<B: Backend> Lane<Burn021> for Tensor<B, 1> {
    type Mask = Tensor<B, 1, Bool>;
    type Device = B::Device;

    burn_mpric_core::lane_arithmetic!();

    fn f32_zeros(len: usize, device: &B::Device) -> Self {
        Tensor::<B, 1>::zeros([len], device).cast(FloatDType::F32)
    }

    fn f32_value(value: f32, device: &B::Device) -> Self {
        f32_value::<B>(value, device)
    }
}

impl<B: Backend> IntLane<Burn021> for Tensor<B, 1, Int> {
    type Mask = Tensor<B, 1, Bool>;

    burn_mpric_core::int_lane_arithmetic!();
}

/// A one-element f32 tensor holding `value` exactly. Made from ones and scaled at f32, since
/// a backend decorator may make new float tensors at a narrower parameter dtype, where a
/// scale such as 2^16 does not exist.
pub(crate) fn f32_value<B: Backend>(value: f32, device: &B::Device) -> Tensor<B, 1> {
    Tensor::<B, 1>::ones([1], device)
        .cast(FloatDType::F32)
        .mul_scalar(value)
}
