//! [`LossScaling`]: the loss scales as Burn sees them: their value and update, and the
//! tensor transforms built on them. The state machines themselves (`noop.rs`,
//! `static_scale.rs`, `dynamic.rs`, `loss_scale.rs`) name no Burn type.

use burn::module::AutodiffModule;
use burn::optim::GradientsParams;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{FloatDType, Tensor};

use crate::dtype::{float_dtype, inverse_of, mul_in_compute};
use crate::error::StepError;
use crate::unscale::{UnscaledGrads, unscale_grads};
use burn_mpric_core::scale::DynamicLossScale;
use burn_mpric_core::scale::LossScale;
use burn_mpric_core::scale::NoOpLossScale;
use burn_mpric_core::scale::StaticLossScale;

/// What every loss scale offers: its current value, the functional update, and the tensor
/// transforms built on them (jmp's `scale` / `unscale` / `adjust`).
///
/// # Example
///
/// ```
/// use burn::backend::Flex;
/// use burn::tensor::Tensor;
/// use burn_mpric_scale::{LossScaling, StaticLossScale};
///
/// let device = Default::default();
/// let s = StaticLossScale::new(4.0).unwrap();
/// let loss = Tensor::<Flex, 1>::from_floats([1.5], &device);
/// let scaled = s.scale(loss);
/// assert_eq!(scaled.clone().into_scalar(), 6.0);
/// assert_eq!(s.unscale(scaled).into_scalar(), 1.5);
/// ```
pub trait LossScaling: Copy {
    /// The current scale `S` (a finite f32 of at least [`MIN_SCALE`](crate::MIN_SCALE)).
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_scale::{LossScale, LossScaling};
    ///
    /// assert_eq!(LossScale::fixed(8.0).unwrap().loss_scale(), 8.0);
    /// ```
    fn loss_scale(&self) -> f32;

    /// The state after a step whose gradients were all finite (`true`) or not (`false`).
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_scale::{LossScale, LossScaleConfig, LossScaling};
    ///
    /// let s = LossScale::dynamic(LossScaleConfig::new().with_growth_interval(1)).unwrap();
    /// assert_eq!(s.adjust(true).loss_scale(), 65536.0);
    /// ```
    #[must_use]
    fn adjust(self, grads_finite: bool) -> Self;

    /// `1 / S`, computed in f64 and rounded to f32 once (as PyTorch does).
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_scale::{LossScaling, StaticLossScale};
    ///
    /// assert_eq!(StaticLossScale::new(3.0).unwrap().inverse_scale(), (1.0f64 / 3.0) as f32);
    /// ```
    fn inverse_scale(&self) -> f32 {
        inverse_of(self.loss_scale())
    }

    /// Multiplies a loss by `S` before backward. The loss is first cast to f32 (f64 stays f64):
    /// a 2^15 scale times an f16 loss would overflow. The backward of that cast returns the
    /// gradient to the loss's own dtype.
    ///
    /// # Example
    ///
    /// ```
    /// use burn::backend::Flex;
    /// use burn::tensor::{DType, FloatDType, Tensor};
    /// use burn_mpric_scale::{LossScaling, StaticLossScale};
    ///
    /// let loss = Tensor::<Flex, 1>::from_floats([3.0], &Default::default()).cast(FloatDType::BF16);
    /// let scaled = StaticLossScale::new(1024.0).unwrap().scale(loss);
    /// assert_eq!(scaled.dtype(), DType::F32);
    /// assert_eq!(scaled.into_scalar(), 3072.0);
    /// ```
    fn scale<B: Backend, const D: usize>(&self, loss: Tensor<B, D>) -> Tensor<B, D> {
        let wide = match float_dtype(loss.dtype()) {
            Some(FloatDType::F64) => loss,
            _ => loss.cast(FloatDType::F32),
        };
        wide.mul_scalar(self.loss_scale())
    }

    /// Multiplies a tensor by `1 / S`, computing in f32 (f64 for f64 tensors) and keeping the
    /// tensor's dtype.
    ///
    /// # Example
    ///
    /// ```
    /// use burn::backend::Flex;
    /// use burn::tensor::{DType, FloatDType, Tensor};
    /// use burn_mpric_scale::{LossScaling, StaticLossScale};
    ///
    /// // 1 / 2^25 underflows f16, so the product is formed in f32.
    /// let g = Tensor::<Flex, 1>::from_floats([8192.0], &Default::default()).cast(FloatDType::F16);
    /// let g = StaticLossScale::new(2f32.powi(25)).unwrap().unscale(g);
    /// assert_eq!(g.dtype(), DType::F16);
    /// assert_eq!(g.into_data().iter::<f32>().next(), Some(2f32.powi(-12)));
    /// ```
    fn unscale<B: Backend, const D: usize>(&self, tensor: Tensor<B, D>) -> Tensor<B, D> {
        mul_in_compute(tensor, self.inverse_scale(), None)
    }

    /// Casts every gradient of `module` to its parameter's dtype, unscales it, and builds one
    /// on-device finiteness flag; see [`unscale_grads`](crate::unscale_grads) (and its errors).
    ///
    /// # Example
    ///
    /// ```
    /// use burn::backend::{Autodiff, Flex};
    /// use burn::nn::{Linear, LinearConfig};
    /// use burn::optim::GradientsParams;
    /// use burn::tensor::Tensor;
    /// use burn_mpric_scale::{LossScaling, StaticLossScale};
    ///
    /// let device = Default::default();
    /// let model: Linear<Autodiff<Flex>> = LinearConfig::new(1, 1).init(&device);
    /// let mut grads = GradientsParams::new();
    /// grads.register(model.weight.id, Tensor::<Flex, 2>::from_floats([[6.0]], &device));
    /// let unscaled = StaticLossScale::new(2.0).unwrap().unscale_grads(&model, grads).unwrap();
    /// let g = unscaled.into_grads().get::<Flex, 2>(model.weight.id).unwrap();
    /// assert_eq!(g.into_scalar(), 3.0);
    /// ```
    fn unscale_grads<B: AutodiffBackend, M: AutodiffModule<B>>(
        &self,
        module: &M,
        grads: GradientsParams,
    ) -> Result<UnscaledGrads<B::InnerBackend>, StepError> {
        unscale_grads::<B, M>(module, grads, self.loss_scale())
    }
}

impl LossScaling for NoOpLossScale {
    fn loss_scale(&self) -> f32 {
        NoOpLossScale::loss_scale(self)
    }

    fn adjust(self, grads_finite: bool) -> Self {
        NoOpLossScale::adjust(self, grads_finite)
    }

    fn scale<B: burn::tensor::backend::Backend, const D: usize>(
        &self,
        loss: burn::Tensor<B, D>,
    ) -> burn::Tensor<B, D> {
        loss
    }

    fn unscale<B: burn::tensor::backend::Backend, const D: usize>(
        &self,
        tensor: burn::Tensor<B, D>,
    ) -> burn::Tensor<B, D> {
        tensor
    }
}

impl LossScaling for StaticLossScale {
    fn loss_scale(&self) -> f32 {
        StaticLossScale::loss_scale(self)
    }

    fn adjust(self, grads_finite: bool) -> Self {
        StaticLossScale::adjust(self, grads_finite)
    }
}

impl LossScaling for DynamicLossScale {
    fn loss_scale(&self) -> f32 {
        DynamicLossScale::loss_scale(self)
    }

    fn adjust(self, grads_finite: bool) -> Self {
        DynamicLossScale::adjust(self, grads_finite)
    }
}

impl LossScaling for LossScale {
    fn loss_scale(&self) -> f32 {
        LossScale::loss_scale(self)
    }

    fn adjust(self, grads_finite: bool) -> Self {
        LossScale::adjust(self, grads_finite)
    }

    fn scale<B: Backend, const D: usize>(&self, loss: Tensor<B, D>) -> Tensor<B, D> {
        match self {
            Self::NoOp(s) => s.scale(loss),
            Self::Static(s) => s.scale(loss),
            Self::Dynamic(s) => s.scale(loss),
        }
    }

    fn unscale<B: Backend, const D: usize>(&self, tensor: Tensor<B, D>) -> Tensor<B, D> {
        match self {
            Self::NoOp(s) => s.unscale(tensor),
            Self::Static(s) => s.unscale(tensor),
            Self::Dynamic(s) => s.unscale(tensor),
        }
    }
}
