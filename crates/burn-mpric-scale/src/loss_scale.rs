//! The [`LossScaling`] trait and the [`LossScale`] enum over the three scalers.

use burn::module::AutodiffModule;
use burn::optim::GradientsParams;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{FloatDType, Tensor};

use crate::dtype::{float_dtype, inverse_of, mul_in_compute};
use crate::dynamic::DynamicLossScale;
use crate::error::StepError;
use crate::noop::NoOpLossScale;
use crate::static_scale::StaticLossScale;
use crate::unscale::{UnscaledGrads, unscale_grads};

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

/// One of the three loss scales, chosen at run time (jmp's `LossScale` union).
///
/// # Example
///
/// ```
/// use burn_mpric_scale::{LossScale, LossScaleConfig, LossScaling};
///
/// let dynamic = LossScale::dynamic(LossScaleConfig::new().with_initial_scale(8.0)).unwrap();
/// assert_eq!(dynamic.adjust(false).loss_scale(), 4.0);
/// assert_eq!(LossScale::fixed(3.0).unwrap().adjust(false).loss_scale(), 3.0);
/// assert_eq!(LossScale::noop().loss_scale(), 1.0);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LossScale {
    /// Scale 1, never changes.
    NoOp(NoOpLossScale),
    /// A fixed scale.
    Static(StaticLossScale),
    /// A scale that grows after finite steps and backs off after overflows.
    Dynamic(DynamicLossScale),
}

impl Default for LossScale {
    /// The default dynamic scale ([`LossScaleConfig::new`](crate::LossScaleConfig::new)).
    fn default() -> Self {
        Self::Dynamic(
            DynamicLossScale::new(crate::LossScaleConfig::new())
                .expect("the default configuration is valid"),
        )
    }
}

impl LossScale {
    /// The no-op scale (bf16 mode).
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_scale::LossScale;
    ///
    /// assert!(matches!(LossScale::noop(), LossScale::NoOp(_)));
    /// ```
    pub fn noop() -> Self {
        Self::NoOp(NoOpLossScale)
    }

    /// A static scale; see [`StaticLossScale::new`].
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_scale::LossScale;
    ///
    /// assert!(LossScale::fixed(f32::NAN).is_err());
    /// ```
    pub fn fixed(scale: f32) -> Result<Self, crate::LossScaleError> {
        StaticLossScale::new(scale).map(Self::Static)
    }

    /// A dynamic scale; see [`DynamicLossScale::new`].
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_scale::{LossScale, LossScaleConfig};
    ///
    /// assert!(LossScale::dynamic(LossScaleConfig::torch()).is_ok());
    /// ```
    pub fn dynamic(config: crate::LossScaleConfig) -> Result<Self, crate::LossScaleError> {
        DynamicLossScale::new(config).map(Self::Dynamic)
    }

    /// The dynamic state, if this is a dynamic scale.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_scale::LossScale;
    ///
    /// assert_eq!(LossScale::default().as_dynamic().unwrap().counter(), 0);
    /// assert!(LossScale::noop().as_dynamic().is_none());
    /// ```
    pub fn as_dynamic(&self) -> Option<&DynamicLossScale> {
        match self {
            Self::Dynamic(s) => Some(s),
            _ => None,
        }
    }
}

impl LossScaling for LossScale {
    fn loss_scale(&self) -> f32 {
        match self {
            Self::NoOp(s) => s.loss_scale(),
            Self::Static(s) => s.loss_scale(),
            Self::Dynamic(s) => s.loss_scale(),
        }
    }

    fn adjust(self, grads_finite: bool) -> Self {
        match self {
            Self::NoOp(s) => Self::NoOp(s.adjust(grads_finite)),
            Self::Static(s) => Self::Static(s.adjust(grads_finite)),
            Self::Dynamic(s) => Self::Dynamic(s.adjust(grads_finite)),
        }
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

impl LossScaling for DynamicLossScale {
    fn loss_scale(&self) -> f32 {
        DynamicLossScale::loss_scale(self)
    }

    fn adjust(self, grads_finite: bool) -> Self {
        DynamicLossScale::adjust(self, grads_finite)
    }
}

impl From<NoOpLossScale> for LossScale {
    fn from(s: NoOpLossScale) -> Self {
        Self::NoOp(s)
    }
}

impl From<StaticLossScale> for LossScale {
    fn from(s: StaticLossScale) -> Self {
        Self::Static(s)
    }
}

impl From<DynamicLossScale> for LossScale {
    fn from(s: DynamicLossScale) -> Self {
        Self::Dynamic(s)
    }
}
