//! The one-pass gradient transform: cast to the parameter dtype, unscale, check finiteness.

use std::collections::HashSet;

use burn::module::{AutodiffModule, ModuleVisitor, Param, ParamId};
use burn::optim::GradientsParams;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Bool, Tensor};

use crate::clip::GradSquares;
use crate::dtype::{float_dtype, inverse_of};
use crate::error::StepError;
use crate::pack::{Inverse, Packer, Reduce, Reduced};
use crate::read::read_step_values;

/// Gradients after [`unscale_grads`], with what decides their finiteness still on the device.
///
/// `B` is the inner (non-autodiff) backend the gradients live on. Nothing has been read from the
/// device yet: [`read_finite`](Self::read_finite) is the one host read (one sum per packed
/// buffer, judged on the host), and a [`LossScaler`](crate::LossScaler) folds it into a single
/// transaction with the loss.
///
/// # Example
///
/// ```
/// use burn::backend::{Autodiff, Flex};
/// use burn::nn::{Linear, LinearConfig};
/// use burn::optim::GradientsParams;
/// use burn::tensor::Tensor;
/// use burn_mpric_scale::unscale_grads;
///
/// type B = Autodiff<Flex>;
/// let device = Default::default();
/// let model: Linear<B> = LinearConfig::new(2, 1).init(&device);
/// let loss = model.forward(Tensor::<B, 2>::ones([1, 2], &device)).sum().mul_scalar(8.0);
/// let grads = GradientsParams::from_grads(loss.backward(), &model);
///
/// let unscaled = unscale_grads(&model, grads, 8.0).unwrap();
/// assert_eq!(unscaled.len(), 2); // weight and bias
/// assert!(unscaled.read_finite().unwrap());
/// let bias_grad = unscaled.grads().get::<Flex, 1>(model.bias.as_ref().unwrap().id).unwrap();
/// assert_eq!(bias_grad.into_scalar(), 1.0);
/// ```
#[derive(Debug)]
pub struct UnscaledGrads<B: Backend> {
    grads: GradientsParams,
    /// One f32 reduction per packed buffer (see `pack.rs`): finite exactly when its gradients
    /// are.
    reduced: Reduced<B>,
    /// Whether `reduced` holds sums of squares (the norm's shares) rather than sums.
    squares: bool,
    count: usize,
    scale: f32,
}

impl<B: Backend> UnscaledGrads<B> {
    /// The unscaled gradients.
    ///
    /// # Example
    ///
    /// ```
    /// use burn::backend::{Autodiff, Flex};
    /// use burn::nn::{Linear, LinearConfig};
    /// use burn::optim::GradientsParams;
    /// use burn_mpric_scale::unscale_grads;
    ///
    /// let model: Linear<Autodiff<Flex>> = LinearConfig::new(2, 2).init(&Default::default());
    /// assert!(unscale_grads(&model, GradientsParams::new(), 4.0).unwrap().grads().is_empty());
    /// ```
    pub fn grads(&self) -> &GradientsParams {
        &self.grads
    }

    /// Takes the unscaled gradients, for the optimizer.
    ///
    /// # Example
    ///
    /// ```
    /// use burn::backend::{Autodiff, Flex};
    /// use burn::nn::{Linear, LinearConfig};
    /// use burn::optim::GradientsParams;
    /// use burn_mpric_scale::unscale_grads;
    ///
    /// let model: Linear<Autodiff<Flex>> = LinearConfig::new(2, 2).init(&Default::default());
    /// let grads = unscale_grads(&model, GradientsParams::new(), 4.0).unwrap().into_grads();
    /// assert!(grads.is_empty());
    /// ```
    pub fn into_grads(self) -> GradientsParams {
        self.grads
    }

    /// The scale the gradients were divided by.
    ///
    /// # Example
    ///
    /// ```
    /// use burn::backend::{Autodiff, Flex};
    /// use burn::nn::{Linear, LinearConfig};
    /// use burn::optim::GradientsParams;
    /// use burn_mpric_scale::unscale_grads;
    ///
    /// let model: Linear<Autodiff<Flex>> = LinearConfig::new(2, 2).init(&Default::default());
    /// assert_eq!(unscale_grads(&model, GradientsParams::new(), 4.0).unwrap().scale(), 4.0);
    /// ```
    pub fn scale(&self) -> f32 {
        self.scale
    }

    /// Number of gradients that were transformed (parameters of the module that had one).
    ///
    /// # Example
    ///
    /// ```
    /// use burn::backend::{Autodiff, Flex};
    /// use burn::nn::{Linear, LinearConfig};
    /// use burn::optim::GradientsParams;
    /// use burn::tensor::Tensor;
    /// use burn_mpric_scale::unscale_grads;
    ///
    /// let device = Default::default();
    /// let model: Linear<Autodiff<Flex>> = LinearConfig::new(1, 1).init(&device);
    /// let mut grads = GradientsParams::new();
    /// grads.register(model.weight.id, Tensor::<Flex, 2>::from_floats([[1.0]], &device));
    /// assert_eq!(unscale_grads(&model, grads, 4.0).unwrap().len(), 1);
    /// ```
    pub fn len(&self) -> usize {
        self.count
    }

    /// `true` when the module had no gradient at all.
    ///
    /// # Example
    ///
    /// ```
    /// use burn::backend::{Autodiff, Flex};
    /// use burn::nn::{Linear, LinearConfig};
    /// use burn::optim::GradientsParams;
    /// use burn_mpric_scale::unscale_grads;
    ///
    /// let model: Linear<Autodiff<Flex>> = LinearConfig::new(2, 2).init(&Default::default());
    /// assert!(unscale_grads(&model, GradientsParams::new(), 1.0).unwrap().is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// An on-device flag, made on request from the buffers' sums: a one-element bool tensor,
    /// `true` when every gradient element is finite. `None` when there were no gradients (an
    /// empty set counts as finite, as in jmp).
    ///
    /// Flags of several replicas combine with [`combine_finite_flags`](crate::combine_finite_flags).
    ///
    /// # Example
    ///
    /// ```
    /// use burn::backend::{Autodiff, Flex};
    /// use burn::nn::{Linear, LinearConfig};
    /// use burn::optim::GradientsParams;
    /// use burn_mpric_scale::unscale_grads;
    ///
    /// let model: Linear<Autodiff<Flex>> = LinearConfig::new(2, 2).init(&Default::default());
    /// assert!(unscale_grads(&model, GradientsParams::new(), 1.0).unwrap().finite_flag().is_none());
    /// ```
    pub fn finite_flag(&self) -> Option<Tensor<B, 1, Bool>> {
        self.reduced.finite_flag()
    }

    /// Whether every gradient element is finite: the buffers' sums, read in one transaction
    /// (one device sync) and judged on the host.
    ///
    /// # Example
    ///
    /// ```
    /// use burn::backend::{Autodiff, Flex};
    /// use burn::nn::{Linear, LinearConfig};
    /// use burn::optim::GradientsParams;
    /// use burn::tensor::Tensor;
    /// use burn_mpric_scale::unscale_grads;
    ///
    /// let device = Default::default();
    /// let model: Linear<Autodiff<Flex>> = LinearConfig::new(1, 1).init(&device);
    /// let mut grads = GradientsParams::new();
    /// grads.register(model.weight.id, Tensor::<Flex, 2>::from_floats([[f32::NAN]], &device));
    /// assert!(!unscale_grads(&model, grads, 4.0).unwrap().read_finite().unwrap());
    /// ```
    pub fn read_finite(&self) -> Result<bool, StepError> {
        Ok(read_step_values(None, None, self.sums(), None)?.finite)
    }

    /// The on-device reductions the finiteness is read from: one-element f32 tensors, one per
    /// packed buffer, all finite exactly when every gradient is. The step's one transaction
    /// reads them with the loss, and the host decides.
    pub(crate) fn sums(&self) -> &[Tensor<B, 1>] {
        &self.reduced.values
    }

    /// The sums of squares of the unscaled gradients, one per packed buffer, computed in the
    /// same pass by [`unscale_grads_with_norm`] (`None` from [`unscale_grads`] or without
    /// gradients).
    pub(crate) fn squares(&self) -> Option<GradSquares<B>> {
        (self.squares && !self.reduced.values.is_empty()).then(|| GradSquares {
            values: self.reduced.values.clone(),
            groups: self.reduced.groups.clone(),
        })
    }
}

/// Casts each gradient of `module` to the dtype of its parameter.
///
/// Under mixed precision a gradient can come back in the compute dtype (f16 for an f32
/// parameter); optimizers expect the parameter's dtype. Gradients of parameters that are not in
/// `module` are left as they are; a parameter shared by several submodules is cast once. A
/// gradient whose shape differs from its parameter's is left as it is too ([`unscale_grads`]
/// and the [`LossScaler`](crate::LossScaler) steps report it as
/// [`StepError::GradientShape`]).
///
/// # Example
///
/// ```
/// use burn::backend::{Autodiff, Flex};
/// use burn::nn::{Linear, LinearConfig};
/// use burn::optim::GradientsParams;
/// use burn::tensor::{DType, FloatDType, Tensor};
/// use burn_mpric_scale::cast_grads_to_param_dtype;
///
/// let device = Default::default();
/// let model: Linear<Autodiff<Flex>> = LinearConfig::new(2, 3).init(&device);
/// let mut grads = GradientsParams::new();
/// let f16_grad = Tensor::<Flex, 2>::ones([2, 3], &device).cast(FloatDType::F16);
/// grads.register(model.weight.id, f16_grad);
///
/// let grads = cast_grads_to_param_dtype(&model, grads);
/// assert_eq!(grads.get::<Flex, 2>(model.weight.id).unwrap().dtype(), DType::F32);
/// ```
pub fn cast_grads_to_param_dtype<B: AutodiffBackend, M: AutodiffModule<B>>(
    module: &M,
    mut grads: GradientsParams,
) -> GradientsParams {
    let mut visitor = GradVisitor::<B>::new(&mut grads, Check::CastOnly);
    module.visit(&mut visitor);
    grads
}

/// Unscales all gradients of `module` in one pass.
///
/// For every parameter of `module` that has a gradient in `grads` (any rank, any float dtype,
/// f16 and bf16 included): the gradient is widened to f32 (f64 stays f64), multiplied by `1/S`
/// (computed in f64 and rounded to f32, as PyTorch does; skipped when `S == 1`), cast to the
/// parameter's dtype, and summed at f32. The gradients of one device and dtype are packed into
/// one flat buffer first (up to 32 MiB each; a larger gradient is its own buffer), so a
/// typical model costs one copy per gradient, then one multiply and one reduction in all; each
/// gradient comes back as a slice of its buffer. A sum is finite exactly when every element
/// is (an infinity or NaN anywhere makes it inf or NaN; f16 and bf16 gradients summed in f32
/// cannot overflow it). Only finite f32 gradients whose sum exceeds f32's range (elements near
/// 3e38) would count as non-finite (f64 gradients are checked at f64). Non-finite gradients
/// are unscaled too. Nothing is read from the device: [`UnscaledGrads::read_finite`] reads the
/// sums in one transaction.
///
/// Unlike PyTorch, f16 gradients of f16 parameters are accepted: the multiplication runs in f32
/// and is rounded once. `scale` should be a valid scale (see [`LossScaling`](crate::LossScaling));
/// a degenerate one (0, infinity, NaN) makes the gradients non-finite, which the check reports.
///
/// # Errors
///
/// [`StepError::GradientShape`] when a gradient's shape or rank differs from its parameter's
/// (checked on the host, from the shapes alone); the gradients are dropped then.
///
/// # Example
///
/// ```
/// use burn::backend::{Autodiff, Flex};
/// use burn::nn::{Linear, LinearConfig};
/// use burn::optim::GradientsParams;
/// use burn::tensor::{DType, FloatDType, Tensor};
/// use burn_mpric_scale::{StepError, unscale_grads};
///
/// let device = Default::default();
/// let model: Linear<Autodiff<Flex>> = LinearConfig::new(1, 1).init(&device);
/// let mut grads = GradientsParams::new();
/// // An f16 gradient of an f32 parameter, scaled by 1024.
/// let g = Tensor::<Flex, 2>::from_floats([[2048.0]], &device).cast(FloatDType::F16);
/// grads.register(model.weight.id, g);
/// let unscaled = unscale_grads(&model, grads, 1024.0).unwrap();
/// assert!(unscaled.read_finite().unwrap());
/// let g = unscaled.into_grads().get::<Flex, 2>(model.weight.id).unwrap();
/// assert_eq!(g.dtype(), DType::F32);
/// assert_eq!(g.into_scalar(), 2.0);
///
/// // A gradient of the wrong shape for the [1, 1] weight.
/// let mut grads = GradientsParams::new();
/// grads.register(model.weight.id, Tensor::<Flex, 2>::ones([1, 3], &device));
/// let err = unscale_grads(&model, grads, 1024.0).unwrap_err();
/// assert!(matches!(err, StepError::GradientShape { ref got, .. } if got == &[1, 3]));
/// ```
pub fn unscale_grads<B: AutodiffBackend, M: AutodiffModule<B>>(
    module: &M,
    grads: GradientsParams,
    scale: f32,
) -> Result<UnscaledGrads<B::InnerBackend>, StepError> {
    unscale_and_check::<B, M>(module, grads, scale, Check::Sum)
}

/// [`unscale_grads`] summing magnitudes, so that the read also tells gradients that are all
/// exactly zero (the probe of [`LossScaler::step_with`](crate::LossScaler::step_with)).
pub(crate) fn unscale_grads_with_zeros<B: AutodiffBackend, M: AutodiffModule<B>>(
    module: &M,
    grads: GradientsParams,
    scale: f32,
) -> Result<UnscaledGrads<B::InnerBackend>, StepError> {
    unscale_and_check::<B, M>(module, grads, scale, Check::MagnitudeSum)
}

/// [`unscale_grads`], with each unscaled gradient's sum of squares from the same reduction:
/// it serves as the gradient's finiteness check and its share of the global norm, which
/// the caller combines on the host (see [`crate::clip::global_norm_from_squares`]).
pub(crate) fn unscale_grads_with_norm<B: AutodiffBackend, M: AutodiffModule<B>>(
    module: &M,
    grads: GradientsParams,
    scale: f32,
) -> Result<UnscaledGrads<B::InnerBackend>, StepError> {
    unscale_and_check::<B, M>(module, grads, scale, Check::SumOfSquares)
}

fn unscale_and_check<B: AutodiffBackend, M: AutodiffModule<B>>(
    module: &M,
    grads: GradientsParams,
    scale: f32,
    check: Check,
) -> Result<UnscaledGrads<B::InnerBackend>, StepError> {
    let inverse = (scale != 1.0).then(|| Inverse::Host(inverse_of(scale)));
    let (grads, reduced, count) = unscale_packed::<B, M>(module, grads, inverse.as_ref(), check)?;
    Ok(UnscaledGrads {
        grads,
        reduced,
        squares: check == Check::SumOfSquares,
        count,
        scale,
    })
}

/// Unscaled gradients and their finiteness flag on the device (`None`: no gradients).
pub(crate) type DeviceChecked<B> = (GradientsParams, Option<Tensor<B, 1, Bool>>);

/// The device path's unscale: casts, multiplies by `inverse` (the device's `1/S`, never
/// read) and returns the gradients with a finiteness flag on the device (`None`: there were
/// no gradients).
pub(crate) fn unscale_on_device<B: AutodiffBackend, M: AutodiffModule<B>>(
    module: &M,
    grads: GradientsParams,
    inverse: Tensor<B::InnerBackend, 1>,
) -> Result<DeviceChecked<B::InnerBackend>, StepError> {
    let inverse = Inverse::Device(inverse);
    let (grads, reduced, _) = unscale_packed::<B, M>(module, grads, Some(&inverse), Check::Sum)?;
    Ok((grads, reduced.finite_flag()))
}

/// Casts, unscales (when `inverse` is given) and reduces every gradient of `module` as
/// `check` asks: the gradients, their reductions and how many there were.
fn unscale_packed<B: AutodiffBackend, M: AutodiffModule<B>>(
    module: &M,
    mut grads: GradientsParams,
    inverse: Option<&Inverse<B::InnerBackend>>,
    check: Check,
) -> Result<(GradientsParams, Reduced<B::InnerBackend>, usize), StepError> {
    let mut visitor = GradVisitor::<B>::new(&mut grads, check);
    module.visit(&mut visitor);
    if let Some(err) = visitor.error {
        return Err(err);
    }
    let (packer, count) = (visitor.packer, visitor.count);
    let reduce = match check {
        Check::SumOfSquares => Reduce::SumOfSquares,
        Check::MagnitudeSum => Reduce::MagnitudeSum,
        Check::CastOnly | Check::Sum => Reduce::Sum,
    };
    let reduced = packer.finish(&mut grads, inverse, reduce);
    Ok((grads, reduced, count))
}

/// What the visitor does with each gradient.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Check {
    /// Cast it to its parameter's dtype, nothing more.
    CastOnly,
    /// Pack it to be unscaled and summed (finiteness).
    Sum,
    /// Pack it to be unscaled and its magnitudes summed (finiteness and all-zero).
    MagnitudeSum,
    /// Pack it to be unscaled and summed in squares (finiteness and the norm).
    SumOfSquares,
}

struct GradVisitor<'a, B: AutodiffBackend> {
    grads: &'a mut GradientsParams,
    check: Check,
    packer: Packer<B::InnerBackend>,
    seen: HashSet<ParamId>,
    count: usize,
    /// The first gradient whose shape differs from its parameter's (checks only).
    error: Option<StepError>,
}

impl<'a, B: AutodiffBackend> GradVisitor<'a, B> {
    fn new(grads: &'a mut GradientsParams, check: Check) -> Self {
        Self {
            grads,
            check,
            packer: Packer::new(),
            seen: HashSet::new(),
            count: 0,
            error: None,
        }
    }
}

impl<B: AutodiffBackend> ModuleVisitor<B> for GradVisitor<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        if self.error.is_some() || !self.seen.insert(param.id) {
            return;
        }
        let Some(grad) = self.grads.remove::<B::InnerBackend, D>(param.id) else {
            return;
        };
        // `remove::<_, D>` does not check the rank: compare the real dimensions before any
        // tensor operation can panic on them.
        let (expected, got) = (param.lazy_shape(), grad.shape());
        if expected != got {
            if self.check == Check::CastOnly {
                self.grads.register::<B::InnerBackend, D>(param.id, grad);
            } else {
                self.error = Some(StepError::GradientShape {
                    param: param.id,
                    expected: expected.to_vec(),
                    got: got.to_vec(),
                });
            }
            return;
        }
        let target = float_dtype(param.dtype());
        self.count += 1;
        if self.check == Check::CastOnly {
            let grad = match target {
                Some(target) => grad.cast(target),
                None => grad,
            };
            self.grads.register::<B::InnerBackend, D>(param.id, grad);
        } else {
            self.packer.push(param.id, grad, target);
        }
    }
}
