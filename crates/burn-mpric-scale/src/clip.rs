//! Global-norm gradient clipping over all gradients of a module (Burn's own clipping is per
//! tensor).

use std::collections::HashSet;

use burn::module::{AutodiffModule, ModuleVisitor, Param, ParamId};
use burn::optim::GradientsParams;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{FloatDType, Tensor};
use serde::{Deserialize, Serialize};

use crate::dtype::{compute_dtype, float_dtype};
use crate::error::LossScaleError;

/// The L2 norm of all gradients of `module` taken together, as a one-element f32 tensor on the
/// device (nothing is read). `None` when the module has no gradient in `grads`.
///
/// Each gradient is widened to f32 before squaring, so f16 gradients do not overflow.
///
/// # Example
///
/// ```
/// use burn::backend::{Autodiff, Flex};
/// use burn::nn::{Linear, LinearConfig};
/// use burn::optim::GradientsParams;
/// use burn::tensor::Tensor;
/// use burn_mpric_scale::global_grad_norm;
///
/// let device = Default::default();
/// let model: Linear<Autodiff<Flex>> = LinearConfig::new(2, 2).init(&device);
/// let mut grads = GradientsParams::new();
/// grads.register(model.weight.id, Tensor::<Flex, 2>::from_floats([[3.0, 0.0], [0.0, 0.0]], &device));
/// grads.register(model.bias.as_ref().unwrap().id, Tensor::<Flex, 1>::from_floats([0.0, 4.0], &device));
/// let norm = global_grad_norm(&model, &grads).unwrap();
/// assert_eq!(norm.into_scalar(), 5.0);
/// ```
pub fn global_grad_norm<B: AutodiffBackend, M: AutodiffModule<B>>(
    module: &M,
    grads: &GradientsParams,
) -> Option<Tensor<B::InnerBackend, 1>> {
    global_grad_norm_of_sum::<B, M>(module, &[grads])
}

/// The L2 norm of the gradients of `module` summed over `shards` (gradients of one step held on
/// several devices, as in burn-train's sharded multi-device optimization). Each parameter's
/// gradients are added on the device of its first shard before squaring, so the norm is the one
/// the optimizer's summed gradient has. The result lives on the device of the first gradient.
pub(crate) fn global_grad_norm_of_sum<B: AutodiffBackend, M: AutodiffModule<B>>(
    module: &M,
    shards: &[&GradientsParams],
) -> Option<Tensor<B::InnerBackend, 1>> {
    let mut visitor = NormVisitor::<B> {
        shards,
        sum: None,
        seen: HashSet::new(),
    };
    module.visit(&mut visitor);
    visitor.sum.map(Tensor::sqrt)
}

/// Clipping of all gradients by their global L2 norm, as PyTorch's `clip_grad_norm_`:
/// every gradient is multiplied by `min(1, max_norm / (total_norm + 1e-6))`.
///
/// Apply it after unscaling (a [`LossScaler`](crate::LossScaler) does so when configured with
/// [`with_clip_norm`](crate::LossScaler::with_clip_norm)).
///
/// # Example
///
/// ```
/// use burn::backend::{Autodiff, Flex};
/// use burn::nn::{Linear, LinearConfig};
/// use burn::optim::GradientsParams;
/// use burn::tensor::Tensor;
/// use burn_mpric_scale::GlobalNormClip;
///
/// let device = Default::default();
/// let model: Linear<Autodiff<Flex>> = LinearConfig::new(2, 2).init(&device);
/// let mut grads = GradientsParams::new();
/// grads.register(model.weight.id, Tensor::<Flex, 2>::from_floats([[30.0, 0.0], [0.0, 0.0]], &device));
/// grads.register(model.bias.as_ref().unwrap().id, Tensor::<Flex, 1>::from_floats([0.0, 40.0], &device));
///
/// let grads = GlobalNormClip::new(5.0).unwrap().clip(&model, grads);
/// let bias = grads.get::<Flex, 1>(model.bias.as_ref().unwrap().id).unwrap();
/// let value = bias.into_data().to_vec::<f32>().unwrap()[1];
/// assert!((value - 4.0).abs() < 1e-5);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GlobalNormClip {
    max_norm: f32,
}

impl GlobalNormClip {
    /// Clipping to `max_norm`, which must be finite and positive.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_scale::GlobalNormClip;
    ///
    /// assert!(GlobalNormClip::new(1.0).is_ok());
    /// assert!(GlobalNormClip::new(0.0).is_err());
    /// assert!(GlobalNormClip::new(f32::NAN).is_err());
    /// ```
    pub fn new(max_norm: f32) -> Result<Self, LossScaleError> {
        if max_norm.is_finite() && max_norm > 0.0 {
            Ok(Self { max_norm })
        } else {
            Err(LossScaleError::InvalidClipNorm(max_norm))
        }
    }

    /// The maximum global norm.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_scale::GlobalNormClip;
    ///
    /// assert_eq!(GlobalNormClip::new(2.5).unwrap().max_norm(), 2.5);
    /// ```
    pub fn max_norm(&self) -> f32 {
        self.max_norm
    }

    /// Computes the global norm and clips every gradient of `module` with it.
    ///
    /// # Example
    ///
    /// ```
    /// use burn::backend::{Autodiff, Flex};
    /// use burn::nn::{Linear, LinearConfig};
    /// use burn::optim::GradientsParams;
    /// use burn::tensor::Tensor;
    /// use burn_mpric_scale::GlobalNormClip;
    ///
    /// let device = Default::default();
    /// let model: Linear<Autodiff<Flex>> = LinearConfig::new(1, 1).init(&device);
    /// let mut grads = GradientsParams::new();
    /// grads.register(model.weight.id, Tensor::<Flex, 2>::from_floats([[-8.0]], &device));
    /// let grads = GlobalNormClip::new(2.0).unwrap().clip(&model, grads);
    /// let g = grads.get::<Flex, 2>(model.weight.id).unwrap().into_scalar();
    /// assert!((g + 2.0).abs() < 1e-5);
    /// ```
    pub fn clip<B: AutodiffBackend, M: AutodiffModule<B>>(
        &self,
        module: &M,
        grads: GradientsParams,
    ) -> GradientsParams {
        match global_grad_norm(module, &grads) {
            Some(norm) => self.clip_with_norm(module, grads, norm),
            None => grads,
        }
    }

    /// Clips every gradient of `module` with a global norm computed earlier by
    /// [`global_grad_norm`] (so the norm can be read in the same transaction as other values).
    ///
    /// # Example
    ///
    /// ```
    /// use burn::backend::{Autodiff, Flex};
    /// use burn::nn::{Linear, LinearConfig};
    /// use burn::optim::GradientsParams;
    /// use burn::tensor::Tensor;
    /// use burn_mpric_scale::{GlobalNormClip, global_grad_norm};
    ///
    /// let device = Default::default();
    /// let model: Linear<Autodiff<Flex>> = LinearConfig::new(1, 1).init(&device);
    /// let mut grads = GradientsParams::new();
    /// grads.register(model.weight.id, Tensor::<Flex, 2>::from_floats([[0.5]], &device));
    /// let norm = global_grad_norm(&model, &grads).unwrap();
    /// // Below the threshold: unchanged.
    /// let grads = GlobalNormClip::new(1.0).unwrap().clip_with_norm(&model, grads, norm);
    /// assert_eq!(grads.get::<Flex, 2>(model.weight.id).unwrap().into_scalar(), 0.5);
    /// ```
    pub fn clip_with_norm<B: AutodiffBackend, M: AutodiffModule<B>>(
        &self,
        module: &M,
        mut grads: GradientsParams,
        total_norm: Tensor<B::InnerBackend, 1>,
    ) -> GradientsParams {
        let coefficient = total_norm
            .cast(FloatDType::F32)
            .add_scalar(1e-6)
            .recip()
            .mul_scalar(self.max_norm)
            .clamp_max(1.0);
        let mut visitor = ClipVisitor::<B> {
            grads: &mut grads,
            coefficient,
            seen: HashSet::new(),
        };
        module.visit(&mut visitor);
        grads
    }
}

struct NormVisitor<'a, B: AutodiffBackend> {
    shards: &'a [&'a GradientsParams],
    sum: Option<Tensor<B::InnerBackend, 1>>,
    seen: HashSet<ParamId>,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for NormVisitor<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        if !self.seen.insert(param.id) {
            return;
        }
        let Some(grad) = self
            .shards
            .iter()
            .filter_map(|grads| grads.get::<B::InnerBackend, D>(param.id))
            .map(|grad| grad.cast(FloatDType::F32))
            .reduce(|acc, grad| {
                let device = acc.device();
                acc + grad.to_device(&device)
            })
        else {
            return;
        };
        let squares = grad.square().sum();
        self.sum = Some(match self.sum.take() {
            Some(acc) => {
                let device = acc.device();
                acc + squares.to_device(&device)
            }
            None => squares,
        });
    }
}

struct ClipVisitor<'a, B: AutodiffBackend> {
    grads: &'a mut GradientsParams,
    coefficient: Tensor<B::InnerBackend, 1>,
    seen: HashSet<ParamId>,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for ClipVisitor<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        if !self.seen.insert(param.id) {
            return;
        }
        let Some(grad) = self.grads.remove::<B::InnerBackend, D>(param.id) else {
            return;
        };
        let own = float_dtype(grad.dtype());
        let compute = compute_dtype(own, None);
        let mut coefficient = self.coefficient.clone();
        let device = grad.device();
        if coefficient.device() != device {
            coefficient = coefficient.to_device(&device);
        }
        let coefficient = coefficient.cast(compute).unsqueeze::<D>();
        let clipped = grad.cast(compute).mul(coefficient);
        let clipped = match own {
            Some(own) => clipped.cast(own),
            None => clipped,
        };
        self.grads.register::<B::InnerBackend, D>(param.id, clipped);
    }
}
