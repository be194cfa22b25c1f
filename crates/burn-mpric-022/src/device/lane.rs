//! Burn 0.22's one-dimensional tensors as burn-mpric-core's [`Lane`]s: what the update rules
//! written once in the core ([`LaneRule`](burn_mpric_core::optim::LaneRule)) run on here.

use burn::tensor::{Bool, Device, FloatDType, Int, Tensor};
use burn_mpric_core::lane::{IntLane, Lane};

/// The Burn 0.22 edition, as the core's rules name it.
pub struct Burn022;

impl Lane<Burn022> for Tensor<1> {
    type Mask = Tensor<1, Bool>;
    type Device = Device;

    burn_mpric_core::lane_arithmetic!();

    fn f32_zeros(len: usize, device: &Device) -> Self {
        Tensor::<1>::zeros([len], device).cast(FloatDType::F32)
    }

    fn f32_value(value: f32, device: &Device) -> Self {
        f32_value(value, device)
    }
}

impl IntLane<Burn022> for Tensor<1, Int> {
    type Mask = Tensor<1, Bool>;

    burn_mpric_core::int_lane_arithmetic!();
}

/// A one-element f32 tensor holding `value` exactly. Made from ones and scaled at f32, since
/// a device may make new float tensors at a narrower default dtype, where a scale such as
/// 2^16 does not exist.
pub(crate) fn f32_value(value: f32, device: &Device) -> Tensor<1> {
    Tensor::<1>::ones([1], device)
        .cast(FloatDType::F32)
        .mul_scalar(value)
}
