//! One skip decision for several replicas (see the crate docs, "Multiple devices").

use burn::tensor::backend::Backend;
use burn::tensor::{Bool, Tensor};

use crate::error::StepError;
use crate::read::read_bool;
use crate::unscale::UnscaledGrads;

/// ANDs several on-device finiteness flags into one flag on `device`. `None` when there are no
/// flags (no gradients anywhere counts as finite).
///
/// # Example
///
/// ```
/// use burn::backend::Flex;
/// use burn::tensor::{Bool, Tensor};
/// use burn_mpric_scale::combine_finite_flags;
///
/// let device = Default::default();
/// let yes = Tensor::<Flex, 1, Bool>::from_bool([true].into(), &device);
/// let no = Tensor::<Flex, 1, Bool>::from_bool([false].into(), &device);
/// let all = combine_finite_flags([yes.clone(), no], &device).unwrap();
/// assert!(!all.into_scalar());
/// assert!(combine_finite_flags([yes], &device).unwrap().into_scalar());
/// ```
pub fn combine_finite_flags<B: Backend>(
    flags: impl IntoIterator<Item = Tensor<B, 1, Bool>>,
    device: &B::Device,
) -> Option<Tensor<B, 1, Bool>> {
    flags
        .into_iter()
        .map(|flag| flag.to_device(device))
        .reduce(|acc, flag| acc.bool_and(flag))
}

/// Whether every replica's gradients are finite, with one host read for all of them.
///
/// # Example
///
/// ```
/// use burn::backend::{Autodiff, Flex};
/// use burn::nn::{Linear, LinearConfig};
/// use burn::optim::GradientsParams;
/// use burn::tensor::Tensor;
/// use burn_mpric_scale::{all_replicas_finite, unscale_grads};
///
/// let device = Default::default();
/// let model: Linear<Autodiff<Flex>> = LinearConfig::new(1, 1).init(&device);
/// let mut good = GradientsParams::new();
/// good.register(model.weight.id, Tensor::<Flex, 2>::from_floats([[1.0]], &device));
/// let mut bad = GradientsParams::new();
/// bad.register(model.weight.id, Tensor::<Flex, 2>::from_floats([[f32::NAN]], &device));
///
/// let a = unscale_grads(&model, good, 2.0).unwrap();
/// let b = unscale_grads(&model, bad, 2.0).unwrap();
/// assert!(!all_replicas_finite(&[&a, &b], &device).unwrap());
/// assert!(all_replicas_finite(&[&a], &device).unwrap());
/// ```
pub fn all_replicas_finite<B: Backend>(
    replicas: &[&UnscaledGrads<B>],
    device: &B::Device,
) -> Result<bool, StepError> {
    let flags = replicas.iter().filter_map(|replica| replica.finite_flag());
    match combine_finite_flags(flags, device) {
        None => Ok(true),
        Some(flag) => read_bool(flag.try_into_data()?),
    }
}
