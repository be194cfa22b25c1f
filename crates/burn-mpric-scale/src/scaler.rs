//! The step contract: scale the loss, unscale and check all gradients, step or skip, update.

use burn::module::AutodiffModule;
use burn::optim::{GradientsParams, LearningRate, MultiGradientsParams, Optimizer};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{FloatDType, Tensor};

use crate::clip::{GlobalNormClip, GradSquares, global_norm_from_squares, grad_squares_of_sum};
use crate::error::StepError;
use crate::keep_dtype::{apply_gradients, keeping_dtypes};
use crate::overflow::find_overflow;
use crate::read::read_step_values;
use crate::replicas::combine_finite_flags;
use crate::scaling::LossScaling;
use crate::unscale::{UnscaledGrads, unscale_grads_with_norm, unscale_grads_with_zeros};
use burn_mpric_core::scale::LossScale;
use burn_mpric_core::scale::LossScaleConfig;
use burn_mpric_core::scale::LossScaleError;
use burn_mpric_core::scale::{ClipNorm, LossScalePreset, ScalerState};
use burn_mpric_core::scale::{DEFAULT_MAX_CONSECUTIVE_SKIPS, Overflow, ScalerStats, StepOutcome};

/// Loss scaling as a gradients transform around any Burn [`Optimizer`].
///
/// One training step with a scaler:
///
/// 1. [`scale_loss`](Self::scale_loss): multiply the loss by `S` (in f32) **before** backward;
/// 2. [`step`](Self::step) (or [`step_with_loss`](Self::step_with_loss)): over all gradients of
///    the module, cast to the parameter dtype, unscale by `1/S` and compute one finiteness flag
///    (one host read per step, shared with the loss and the gradient norm); optionally clip by
///    global norm; run the optimizer if everything is finite, otherwise skip it (parameters and
///    optimizer state stay bit-identical); update the scale; return a [`StepOutcome`].
///
/// The lower-level pieces are public for hand-written loops (jmp style):
/// [`unscale_grads`](Self::unscale_grads) → [`UnscaledGrads::read_finite`] → optimizer or not →
/// [`update`](Self::update).
///
/// With [`LossScaler::noop`] (bf16 mode) nothing is scaled, but non-finite steps are still
/// skipped and counted.
///
/// # Example
///
/// ```
/// use burn::backend::{Autodiff, Flex};
/// use burn::nn::{Linear, LinearConfig, loss::{MseLoss, Reduction}};
/// use burn::optim::{GradientsParams, SgdConfig};
/// use burn::tensor::Tensor;
/// use burn_mpric_scale::{LossScaleConfig, LossScaler};
///
/// type B = Autodiff<Flex>;
/// let device = Default::default();
/// let mut model: Linear<B> = LinearConfig::new(4, 4).init(&device);
/// let mut optim = SgdConfig::new().init();
/// let mut scaler = LossScaler::dynamic(LossScaleConfig::new().with_initial_scale(1024.0)).unwrap();
///
/// let x = Tensor::<B, 2>::ones([2, 4], &device);
/// let loss = MseLoss::new().forward(model.forward(x.clone()), x, Reduction::Mean);
/// let scaled = scaler.scale_loss(loss);
/// let grads = GradientsParams::from_grads(scaled.backward(), &model);
/// let (next, outcome) = scaler.step_with_loss(&mut optim, 0.1, model, grads, scaled);
/// model = next;
/// let outcome = outcome.unwrap();
/// assert!(outcome.is_applied());
/// assert_eq!(outcome.scale_used, 1024.0);
/// assert!(outcome.loss.unwrap() >= 0.0);
/// # let _ = model;
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LossScaler {
    // Every decision (skip, next scale, counters) is burn-mpric-core's, shared with the
    // Burn 0.22 edition; this type adds the tensor work.
    core: ScalerState,
    /// Skipped steps in a row that stop the run; 0 never stops.
    max_consecutive_skips: u64,
}

impl Default for LossScaler {
    /// A dynamic scaler with the default configuration ([`LossScaleConfig::new`]).
    fn default() -> Self {
        Self::new(LossScale::default())
    }
}

impl LossScaler {
    /// A scaler around an existing loss scale, with no clipping and zeroed counters.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_scale::{LossScaler, StaticLossScale};
    ///
    /// let scaler = LossScaler::new(StaticLossScale::new(256.0).unwrap());
    /// assert_eq!(scaler.scale(), 256.0);
    /// ```
    pub fn new(loss_scale: impl Into<LossScale>) -> Self {
        ScalerState::new(loss_scale).into()
    }

    /// The Burn-free state this scaler decides with (burn-mpric-core's [`ScalerState`]).
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_scale::LossScaler;
    ///
    /// assert_eq!(LossScaler::fixed(8.0).unwrap().core().scale(), 8.0);
    /// ```
    pub fn core(&self) -> &ScalerState {
        &self.core
    }

    /// The state, for the device path's replay of the steps it decided.
    pub(crate) fn core_mut(&mut self) -> &mut ScalerState {
        &mut self.core
    }

    /// Stops the run with [`StepError::Stalled`] once `max` steps in a row were skipped
    /// (default [`DEFAULT_MAX_CONSECUTIVE_SKIPS`], as `mpric train`'s
    /// `max_consecutive_skips`); `0` never stops, for loops that read
    /// [`ScalerStats::consecutive_skipped`] themselves.
    ///
    /// # Example
    ///
    /// ```
    /// use burn::backend::{Autodiff, Flex};
    /// use burn::nn::{Linear, LinearConfig};
    /// use burn::optim::{GradientsParams, SgdConfig};
    /// use burn::tensor::Tensor;
    /// use burn_mpric_scale::{LossScaler, StepError};
    ///
    /// type B = Autodiff<Flex>;
    /// let device = Default::default();
    /// let model: Linear<B> = LinearConfig::new(1, 1).with_bias(false).init(&device);
    /// let mut scaler = LossScaler::default().with_max_consecutive_skips(1);
    /// let mut grads = GradientsParams::new();
    /// grads.register(model.weight.id, Tensor::<Flex, 2>::from_floats([[f32::NAN]], &device));
    /// let (_, outcome) = scaler.step(&mut SgdConfig::new().init(), 1.0, model, grads);
    /// assert!(matches!(outcome, Err(StepError::Stalled { max: 1, .. })));
    /// ```
    #[must_use]
    pub fn with_max_consecutive_skips(self, max: u64) -> Self {
        Self {
            max_consecutive_skips: max,
            ..self
        }
    }

    /// Skipped steps in a row that stop the run (0: never).
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_scale::{DEFAULT_MAX_CONSECUTIVE_SKIPS, LossScaler};
    ///
    /// assert_eq!(LossScaler::noop().max_consecutive_skips(), DEFAULT_MAX_CONSECUTIVE_SKIPS);
    /// ```
    pub fn max_consecutive_skips(&self) -> u64 {
        self.max_consecutive_skips
    }

    /// The scaler a preset stands for, when computation runs in f16 (`f16_compute`) or not
    /// ([`LossScalePreset::loss_scale`]: `auto` is dynamic for f16 and none otherwise).
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_scale::{LossScalePreset, LossScaler};
    ///
    /// assert_eq!(LossScaler::from_preset(LossScalePreset::Auto, true).unwrap().scale(), 32768.0);
    /// assert_eq!(LossScaler::from_preset(LossScalePreset::Torch, false).unwrap().scale(), 65536.0);
    /// assert!(LossScaler::from_preset(LossScalePreset::Static(0.0), true).is_err());
    /// ```
    pub fn from_preset(preset: LossScalePreset, f16_compute: bool) -> Result<Self, LossScaleError> {
        ScalerState::from_preset(preset, f16_compute).map(Self::from)
    }

    /// A dynamic scaler; the configuration is validated.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_scale::{LossScaleConfig, LossScaler};
    ///
    /// assert!(LossScaler::dynamic(LossScaleConfig::deepspeed()).is_ok());
    /// assert!(LossScaler::dynamic(LossScaleConfig::new().with_backoff_factor(1.5)).is_err());
    /// ```
    pub fn dynamic(config: LossScaleConfig) -> Result<Self, LossScaleError> {
        LossScale::dynamic(config).map(Self::new)
    }

    /// A scaler with a fixed scale.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_scale::LossScaler;
    ///
    /// assert!(LossScaler::fixed(0.0).is_err());
    /// ```
    pub fn fixed(scale: f32) -> Result<Self, LossScaleError> {
        LossScale::fixed(scale).map(Self::new)
    }

    /// The bf16 mode: scale 1, but non-finite steps are still skipped and counted.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_scale::LossScaler;
    ///
    /// assert_eq!(LossScaler::noop().scale(), 1.0);
    /// ```
    pub fn noop() -> Self {
        Self::new(LossScale::noop())
    }

    /// Clips all gradients to a global L2 norm of `max_norm` after unscaling.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_scale::LossScaler;
    ///
    /// let scaler = LossScaler::noop().with_clip_norm(1.0).unwrap();
    /// assert_eq!(scaler.clip().unwrap().max_norm(), 1.0);
    /// assert!(LossScaler::noop().with_clip_norm(-1.0).is_err());
    /// ```
    pub fn with_clip_norm(self, max_norm: f32) -> Result<Self, LossScaleError> {
        Ok(self.with_clip(Some(GlobalNormClip::new(max_norm)?)))
    }

    /// Sets or removes global-norm clipping.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_scale::{GlobalNormClip, LossScaler};
    ///
    /// let clip = GlobalNormClip::new(2.0).unwrap();
    /// assert_eq!(LossScaler::noop().with_clip(Some(clip)).clip(), Some(clip));
    /// ```
    pub fn with_clip(mut self, clip: Option<GlobalNormClip>) -> Self {
        self.core = self.core.with_clip(clip.map(GlobalNormClip::rule));
        self
    }

    /// The global-norm clipping in effect, if any.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_scale::LossScaler;
    ///
    /// assert!(LossScaler::noop().clip().is_none());
    /// ```
    pub fn clip(&self) -> Option<GlobalNormClip> {
        self.core.clip().map(GlobalNormClip::from)
    }

    /// The loss scale's state (no-op, static or dynamic, with its counters); the whole
    /// step state is [`core`](Self::core). The same names in both editions.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_scale::LossScaler;
    ///
    /// assert!(LossScaler::default().loss_scale().as_dynamic().is_some());
    /// ```
    pub fn loss_scale(&self) -> &LossScale {
        self.core.loss_scale()
    }

    /// The loss scale's state: [`loss_scale`](Self::loss_scale), under the name that
    /// burn-mpric-022 gave the whole step state.
    #[deprecated(
        note = "use `loss_scale()` (or `core()` for the whole step state): the same names in both editions"
    )]
    pub fn state(&self) -> &LossScale {
        self.loss_scale()
    }

    /// The current scale `S` (the one the next step uses).
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_scale::LossScaler;
    ///
    /// assert_eq!(LossScaler::default().scale(), 32768.0);
    /// ```
    pub fn scale(&self) -> f32 {
        self.core.scale()
    }

    /// The running counters.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_scale::LossScaler;
    ///
    /// assert_eq!(LossScaler::default().stats().steps, 0);
    /// ```
    pub fn stats(&self) -> ScalerStats {
        self.core.stats()
    }

    /// Multiplies the loss by `S` (after casting it to f32) before backward; see
    /// [`LossScaling::scale`].
    ///
    /// # Example
    ///
    /// ```
    /// use burn::backend::Flex;
    /// use burn::tensor::{DType, FloatDType, Tensor};
    /// use burn_mpric_scale::LossScaler;
    ///
    /// // An f16 loss times 2^15 would overflow f16 (max 65504); the scaled loss is f32.
    /// let loss = Tensor::<Flex, 1>::from_floats([4.0], &Default::default()).cast(FloatDType::F16);
    /// let scaled = LossScaler::default().scale_loss(loss);
    /// assert_eq!(scaled.dtype(), DType::F32);
    /// assert_eq!(scaled.into_scalar(), 131072.0);
    /// ```
    pub fn scale_loss<B: Backend, const D: usize>(&self, loss: Tensor<B, D>) -> Tensor<B, D> {
        self.loss_scale().scale(loss)
    }

    /// Casts, unscales and checks all gradients of `module` with the current scale; see
    /// [`unscale_grads`](crate::unscale_grads) (and its errors). Nothing is read from the device.
    ///
    /// # Example
    ///
    /// ```
    /// use burn::backend::{Autodiff, Flex};
    /// use burn::nn::{Linear, LinearConfig};
    /// use burn::optim::GradientsParams;
    /// use burn::tensor::Tensor;
    /// use burn_mpric_scale::LossScaler;
    ///
    /// let device = Default::default();
    /// let model: Linear<Autodiff<Flex>> = LinearConfig::new(1, 1).init(&device);
    /// let mut grads = GradientsParams::new();
    /// grads.register(model.weight.id, Tensor::<Flex, 2>::from_floats([[f32::INFINITY]], &device));
    /// let unscaled = LossScaler::default().unscale_grads(&model, grads).unwrap();
    /// assert!(!unscaled.read_finite().unwrap());
    /// ```
    pub fn unscale_grads<B: AutodiffBackend, M: AutodiffModule<B>>(
        &self,
        module: &M,
        grads: GradientsParams,
    ) -> Result<UnscaledGrads<B::InnerBackend>, StepError> {
        self.loss_scale().unscale_grads::<B, M>(module, grads)
    }

    /// Records a step whose gradients were finite or not: updates the scale and the counters and
    /// returns the outcome (without loss or norm). Call it once per step, after deciding whether
    /// the optimizer ran.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_scale::{LossScaleConfig, LossScaler};
    ///
    /// let config = LossScaleConfig::new().with_initial_scale(4.0).with_growth_interval(1);
    /// let mut scaler = LossScaler::dynamic(config).unwrap();
    /// let outcome = scaler.update(true);
    /// assert!(outcome.is_applied());
    /// assert_eq!((outcome.scale_used, outcome.next_scale), (4.0, 8.0));
    /// assert_eq!(scaler.scale(), 8.0);
    /// ```
    pub fn update(&mut self, grads_finite: bool) -> StepOutcome {
        self.core.update(grads_finite)
    }

    /// [`update`](Self::update) after [`check`](Self::check): updates the scale by the
    /// checked step's finiteness and reports the step with its loss and gradient norm, as
    /// every step function of this type does. For loops that run the optimizer themselves.
    ///
    /// # Example
    ///
    /// ```
    /// use burn::backend::{Autodiff, Flex};
    /// use burn::nn::{Linear, LinearConfig};
    /// use burn::optim::GradientsParams;
    /// use burn::tensor::Tensor;
    /// use burn_mpric_scale::{LossScaleConfig, LossScaler};
    ///
    /// type B = Autodiff<Flex>;
    /// let device = Default::default();
    /// let model: Linear<B> = LinearConfig::new(1, 1).with_bias(false).init(&device);
    /// let mut scaler = LossScaler::dynamic(LossScaleConfig::new().with_initial_scale(4.0)).unwrap();
    /// let scaled = scaler.scale_loss(model.forward(Tensor::<B, 2>::ones([1, 1], &device)).sum());
    /// let grads = GradientsParams::from_grads(scaled.backward(), &model);
    /// let checked = scaler.check(&model, grads, Some(scaled.clone())).unwrap();
    /// let outcome = scaler.update_checked(&checked);
    /// assert!(outcome.is_applied());
    /// assert_eq!(outcome.loss, Some(scaled.into_scalar() / 4.0));
    /// ```
    pub fn update_checked(&mut self, checked: &CheckedGrads) -> StepOutcome {
        let mut outcome = self.update_finished(checked.finite, checked.loss, checked.grad_norm);
        outcome.overflow = checked.overflow.clone();
        outcome
    }

    fn update_finished(
        &mut self,
        finite: bool,
        loss: Option<f32>,
        grad_norm: Option<f32>,
    ) -> StepOutcome {
        let mut outcome = self.update(finite);
        outcome.loss = loss;
        outcome.grad_norm = grad_norm;
        outcome
    }

    /// One optimizer step over `grads` (computed from a loss scaled by
    /// [`scale_loss`](Self::scale_loss)): unscale and check all gradients, clip if configured,
    /// run `optim` if all are finite or skip it, then update the scale.
    ///
    /// With clipping on, the global norm is combined on the host in f64 and cannot overflow
    /// for finite gradients (elements around 1e20 included); a norm that is not representable
    /// in f32 makes the step non-finite (skipped), never applied with zeroed gradients.
    ///
    /// The module always comes back. On `Err` (the device could not be read, or a gradient's
    /// shape differs from its parameter's: [`StepError::GradientShape`]) nothing changed: the
    /// optimizer was not called, the parameters and the scaler state are the same.
    ///
    /// # Example
    ///
    /// ```
    /// use burn::backend::{Autodiff, Flex};
    /// use burn::nn::{Linear, LinearConfig};
    /// use burn::optim::{GradientsParams, SgdConfig};
    /// use burn::tensor::Tensor;
    /// use burn_mpric_scale::LossScaler;
    ///
    /// type B = Autodiff<Flex>;
    /// let device = Default::default();
    /// let model: Linear<B> = LinearConfig::new(1, 1).init(&device);
    /// let before = model.weight.val().into_data();
    /// let mut optim = SgdConfig::new().init();
    /// let mut scaler = LossScaler::default();
    ///
    /// let mut grads = GradientsParams::new();
    /// grads.register(model.weight.id, Tensor::<Flex, 2>::from_floats([[f32::NAN]], &device));
    /// let (model, outcome) = scaler.step(&mut optim, 1.0, model, grads);
    /// let outcome = outcome.unwrap();
    /// assert!(outcome.is_skipped());
    /// assert_eq!(outcome.next_scale, 16384.0);
    /// assert_eq!(model.weight.val().into_data(), before);
    /// ```
    pub fn step<B, M, O>(
        &mut self,
        optim: &mut O,
        lr: LearningRate,
        module: M,
        grads: GradientsParams,
    ) -> (M, Result<StepOutcome, StepError>)
    where
        B: AutodiffBackend,
        M: AutodiffModule<B>,
        O: Optimizer<M, B>,
    {
        self.step_inner::<B, M, O>(optim, lr, module, grads, None)
    }

    /// Like [`step`](Self::step), and also reports the loss: `scaled_loss` is the tensor that
    /// backward ran on; its mean is read in the same host read as the finiteness flag and divided
    /// by the scale that was used.
    ///
    /// # Example
    ///
    /// ```
    /// use burn::backend::{Autodiff, Flex};
    /// use burn::nn::{Linear, LinearConfig};
    /// use burn::optim::{GradientsParams, SgdConfig};
    /// use burn::tensor::Tensor;
    /// use burn_mpric_scale::{LossScaleConfig, LossScaler};
    ///
    /// type B = Autodiff<Flex>;
    /// let device = Default::default();
    /// let model: Linear<B> = LinearConfig::new(2, 1).with_bias(false).init(&device);
    /// let mut optim = SgdConfig::new().init();
    /// // Interval 1: this step grows the scale from 4 to 8, and the loss is still divided by 4.
    /// let config = LossScaleConfig::new().with_initial_scale(4.0).with_growth_interval(1);
    /// let mut scaler = LossScaler::dynamic(config).unwrap();
    ///
    /// let loss = model.forward(Tensor::<B, 2>::zeros([1, 2], &device)).sum().add_scalar(1.5);
    /// let scaled = scaler.scale_loss(loss);
    /// let grads = GradientsParams::from_grads(scaled.backward(), &model);
    /// let (_model, outcome) = scaler.step_with_loss(&mut optim, 0.1, model, grads, scaled);
    /// let outcome = outcome.unwrap();
    /// assert_eq!((outcome.scale_used, outcome.next_scale), (4.0, 8.0));
    /// assert_eq!(outcome.loss, Some(1.5));
    /// ```
    pub fn step_with_loss<B, M, O, const D: usize>(
        &mut self,
        optim: &mut O,
        lr: LearningRate,
        module: M,
        grads: GradientsParams,
        scaled_loss: Tensor<B, D>,
    ) -> (M, Result<StepOutcome, StepError>)
    where
        B: AutodiffBackend,
        M: AutodiffModule<B>,
        O: Optimizer<M, B>,
    {
        self.step_inner(optim, lr, module, grads, Some(mean_at_f32(scaled_loss)))
    }

    /// Unscales and checks all gradients of `module` without stepping: casts each gradient
    /// to its parameter's dtype, divides it by the current scale, clips by global norm when
    /// clipping is on, and reads the finiteness flag (and the mean of `scaled_loss`, divided
    /// by the scale used) in one host read. For loops that decide themselves whether to run
    /// the optimizer; follow it with [`update`](Self::update).
    ///
    /// # Example
    ///
    /// ```
    /// use burn::backend::{Autodiff, Flex};
    /// use burn::nn::{Linear, LinearConfig};
    /// use burn::optim::GradientsParams;
    /// use burn::tensor::Tensor;
    /// use burn_mpric_scale::{LossScaleConfig, LossScaler};
    ///
    /// type B = Autodiff<Flex>;
    /// let device = Default::default();
    /// let model: Linear<B> = LinearConfig::new(1, 1).with_bias(false).init(&device);
    /// let mut scaler = LossScaler::dynamic(LossScaleConfig::new().with_initial_scale(8.0)).unwrap();
    /// let x = Tensor::<B, 2>::from_floats([[3.0]], &device);
    /// let scaled = scaler.scale_loss(model.forward(x).sum());
    /// let grads = GradientsParams::from_grads(scaled.backward(), &model);
    /// let checked = scaler.check(&model, grads, Some(scaled)).unwrap();
    /// assert!(checked.finite);
    /// let w = checked.grads.get::<Flex, 2>(model.weight.id).unwrap();
    /// assert_eq!(w.into_data().to_vec::<f32>().unwrap(), vec![3.0]); // unscaled
    /// assert!(scaler.update(checked.finite).is_applied());
    /// ```
    pub fn check<B, M, const D: usize>(
        &self,
        module: &M,
        grads: GradientsParams,
        scaled_loss: Option<Tensor<B, D>>,
    ) -> Result<CheckedGrads, StepError>
    where
        B: AutodiffBackend,
        M: AutodiffModule<B>,
    {
        let loss = scaled_loss.map(mean_at_f32);
        let checked = self.check_shards::<B, M>(module, vec![grads], loss, Zeros::Ignore)?;
        let Shards {
            mut grads,
            finite,
            zero,
            loss,
            grad_norm,
        } = checked;
        let grads = grads.pop().unwrap_or_default();
        // Skipped steps only: one more read names the parameters that overflowed.
        let overflow = if finite {
            None
        } else {
            find_overflow::<B, M>(module, std::slice::from_ref(&grads)).ok()
        };
        Ok(CheckedGrads {
            grads,
            finite,
            zero,
            loss,
            grad_norm,
            overflow,
        })
    }

    /// Unscales, checks and (when configured) clips the gradients of one step held in several
    /// shards (one per device), with one finiteness flag and one global norm over all of them:
    /// the norm is the norm of the summed gradient, which is what the optimizer applies.
    ///
    /// The finiteness, the loss and the sums of squares are read in one transaction;
    /// the norm is combined from them on the host in f64. Only when a sum of squares overflowed
    /// f32 are those gradients read again (see [`global_norm_from_squares`]). A step whose
    /// norm is not finite or not representable in f32 counts as non-finite (skipped).
    pub(crate) fn check_shards<B, M>(
        &self,
        module: &M,
        shards: Vec<GradientsParams>,
        loss: Option<Tensor<B::InnerBackend, 1>>,
        zeros: Zeros,
    ) -> Result<Shards, StepError>
    where
        B: AutodiffBackend,
        M: AutodiffModule<B>,
    {
        let scale_used = self.scale();
        // One shard with clipping: the sums of squares come from the same reduction as the
        // check, and decide finiteness on their own (a NaN or infinite element makes its
        // gradient's sum NaN or infinite).
        let fused_norm = self.clip().is_some() && shards.len() == 1;
        let unscaled = shards
            .into_iter()
            .map(|grads| {
                if fused_norm {
                    unscale_grads_with_norm::<B, M>(module, grads, scale_used)
                } else if zeros == Zeros::Tell {
                    unscale_grads_with_zeros::<B, M>(module, grads, scale_used)
                } else {
                    self.unscale_grads::<B, M>(module, grads)
                }
            })
            .collect::<Result<Vec<_>, StepError>>()?;
        // One shard: its sums are read with the loss and judged on the host. Several: their
        // flags are ANDed on the device, and the one flag is read.
        let (flag, sums) = match unscaled.as_slice() {
            _ if fused_norm => (None, Vec::new()),
            [one] => (None, one.sums().to_vec()),
            many => {
                let flags: Vec<_> = many.iter().filter_map(|u| u.finite_flag()).collect();
                let flag = match flags.first().map(|flag| flag.device()) {
                    Some(device) => combine_finite_flags(flags, &device),
                    None => None,
                };
                (flag, Vec::new())
            }
        };
        let squares = match (self.clip(), fused_norm) {
            (None, _) => None,
            (Some(_), true) => unscaled[0].squares(),
            (Some(_), false) => {
                let shards: Vec<&GradientsParams> = unscaled.iter().map(|u| u.grads()).collect();
                grad_squares_of_sum::<B, M>(module, &shards)
            }
        };
        let (squares, groups) = match squares {
            Some(GradSquares { values, groups }) => (Some(values), groups),
            None => (None, Vec::new()),
        };
        let values = read_step_values(flag, loss, &sums, squares.as_deref())?;
        let mut grads: Vec<_> = unscaled
            .into_iter()
            .map(UnscaledGrads::into_grads)
            .collect();
        let mut finite = values.finite;
        let mut grad_norm = None;
        if let (Some(clip), Some(squares)) = (self.clip(), values.squares) {
            let norm = if finite {
                let shards: Vec<&GradientsParams> = grads.iter().collect();
                global_norm_from_squares::<B, M>(module, &shards, &squares, &groups)?
            } else if squares.iter().any(|square| square.is_nan()) {
                // Some element is not finite: nothing to recompute.
                f64::NAN
            } else {
                f64::INFINITY
            };
            let (still_finite, reported) = ClipNorm::judge(finite, norm);
            finite = still_finite;
            grad_norm = Some(reported);
            if finite {
                grads = grads
                    .into_iter()
                    .map(|shard| clip.clip_with_host_norm::<B, M>(module, shard, norm))
                    .collect();
            }
        }
        Ok(Shards {
            grads,
            finite,
            // Sums of magnitudes or of squares are zero only for zero gradients; plain sums
            // can cancel.
            zero: values.zero && (fused_norm || zeros == Zeros::Tell),
            loss: values.loss.map(|loss| self.core.unscale_loss(loss)),
            grad_norm,
        })
    }

    /// [`step`](Self::step) for gradients held on several devices, as burn-train's
    /// `MultiDeviceOptim::OptimSharded` passes them to `TrainStep::optimize_multi`: every shard
    /// is unscaled and checked, one decision is taken for all of them (a non-finite gradient on
    /// any device skips the whole step), clipping uses the norm of the summed gradient, and the
    /// optimizer's `step_multi` runs only when everything is finite.
    ///
    /// # Example
    ///
    /// ```
    /// use burn::backend::{Autodiff, Flex};
    /// use burn::nn::{Linear, LinearConfig};
    /// use burn::optim::{GradientsParams, MultiGradientsParams, SgdConfig};
    /// use burn::tensor::Tensor;
    /// use burn::prelude::DeviceOps;
    /// use burn_mpric_scale::LossScaler;
    ///
    /// type B = Autodiff<Flex>;
    /// let device = Default::default();
    /// let model: Linear<B> = LinearConfig::new(1, 1).with_bias(false).init(&device);
    /// let before = model.weight.val().into_data();
    /// let shard = |value: f32| {
    ///     let mut grads = GradientsParams::new();
    ///     grads.register(model.weight.id, Tensor::<Flex, 2>::from_floats([[value]], &device));
    ///     (grads, device.to_id())
    /// };
    /// // One shard overflowed: the whole step is skipped and the scale backs off.
    /// let grads = MultiGradientsParams { grads: vec![shard(2.0), shard(f32::INFINITY)] };
    /// let mut scaler = LossScaler::default();
    /// let (model, outcome) = scaler.step_multi(&mut SgdConfig::new().init(), 1.0, model, grads);
    /// assert!(outcome.unwrap().is_skipped());
    /// assert_eq!(model.weight.val().into_data(), before);
    /// assert_eq!(scaler.scale(), 16384.0);
    /// ```
    pub fn step_multi<B, M, O>(
        &mut self,
        optim: &mut O,
        lr: LearningRate,
        module: M,
        grads: MultiGradientsParams,
    ) -> (M, Result<StepOutcome, StepError>)
    where
        B: AutodiffBackend,
        M: AutodiffModule<B>,
        O: Optimizer<M, B>,
    {
        let (shards, devices): (Vec<_>, Vec<_>) = grads.grads.into_iter().unzip();
        let checked = self.check_shards::<B, M>(&module, shards, None, Zeros::Ignore);
        self.apply::<B, M>(module, checked, |module, shards| {
            let grads = shards.into_iter().zip(devices).collect();
            keeping_dtypes::<B, M>(module, |module| {
                optim.step_multi(lr, module, MultiGradientsParams { grads })
            })
        })
    }

    /// Runs `optimize` on the checked gradients when they are all finite, then updates the
    /// scale; on an error nothing changes. A skipped step names the parameters whose
    /// gradients overflowed (one more read, on skipped steps only).
    pub(crate) fn apply<B, M>(
        &mut self,
        module: M,
        checked: Result<Shards, StepError>,
        optimize: impl FnOnce(M, Vec<GradientsParams>) -> M,
    ) -> (M, Result<StepOutcome, StepError>)
    where
        B: AutodiffBackend,
        M: AutodiffModule<B>,
    {
        let checked = match checked {
            Ok(checked) => checked,
            Err(err) => return (module, Err(err)),
        };
        if checked.finite {
            let module = optimize(module, checked.grads);
            let outcome = self.update_finished(true, checked.loss, checked.grad_norm);
            return (module, Ok(outcome));
        }
        let overflow = find_overflow::<B, M>(&module, &checked.grads);
        let outcome = self.update_finished(false, checked.loss, checked.grad_norm);
        // The step is skipped and the scale updated all the same when the names cannot be
        // read; only they are missing (`overflow: None`).
        let outcome = match overflow {
            Ok(overflow) => outcome.with_overflow(overflow),
            Err(_) => outcome,
        };
        (module, self.stalled(outcome))
    }

    /// `Err(StepError::Stalled)` when a skipped `outcome` reaches the limit of skips in a row.
    fn stalled(&self, outcome: StepOutcome) -> Result<StepOutcome, StepError> {
        let max = self.max_consecutive_skips;
        if outcome.stalls(max) {
            Err(StepError::Stalled {
                max,
                outcome: Box::new(outcome),
            })
        } else {
            Ok(outcome)
        }
    }

    /// One step on one set of gradients; `loss` is the mean of the scaled loss at f32.
    pub(crate) fn step_inner<B, M, O>(
        &mut self,
        optim: &mut O,
        lr: LearningRate,
        module: M,
        grads: GradientsParams,
        loss: Option<Tensor<B::InnerBackend, 1>>,
    ) -> (M, Result<StepOutcome, StepError>)
    where
        B: AutodiffBackend,
        M: AutodiffModule<B>,
        O: Optimizer<M, B>,
    {
        let checked = self.check_shards::<B, M>(&module, vec![grads], loss, Zeros::Ignore);
        self.apply::<B, M>(module, checked, |module, mut shards| {
            apply_gradients::<B, M, O>(optim, lr, module, shards.pop().unwrap_or_default())
        })
    }
}

/// Gradients after [`LossScaler::check`]: unscaled, at their parameters' dtypes, clipped
/// when clipping is on, with the step's finiteness and loss.
#[derive(Debug)]
pub struct CheckedGrads {
    /// The unscaled gradients.
    pub grads: GradientsParams,
    /// Whether every gradient was finite (and, with clipping on, the global norm finite and
    /// representable in f32).
    pub finite: bool,
    /// Whether every gradient was exactly zero, where the check looked: with clipping on (the
    /// sums of squares tell it) and in [`LossScaler::step_with`]; `false` otherwise.
    pub zero: bool,
    /// The loss divided by the scale that was used, when a loss was given.
    pub loss: Option<f32>,
    /// The global L2 norm before clipping, when clipping is on and the module had gradients:
    /// infinite when an element is infinite or the norm exceeds `f32::MAX`, NaN when an
    /// element is NaN.
    pub grad_norm: Option<f32>,
    /// When the gradients were not finite, the parameters whose gradients held inf or NaN
    /// (read only then); `None` when they were finite.
    pub overflow: Option<Overflow>,
}

impl CheckedGrads {
    /// What the check read, as the probe of a skipped step compares it
    /// ([`SkipCause::judge`](burn_mpric_core::scale::SkipCause::judge)).
    ///
    /// # Example
    ///
    /// ```
    /// use burn::backend::{Autodiff, Flex};
    /// use burn::nn::{Linear, LinearConfig};
    /// use burn::optim::GradientsParams;
    /// use burn::tensor::Tensor;
    /// use burn_mpric_scale::LossScaler;
    ///
    /// type B = Autodiff<Flex>;
    /// let device = Default::default();
    /// let model: Linear<B> = LinearConfig::new(1, 1).with_bias(false).init(&device);
    /// // With clipping on, the sums of squares also tell gradients that are all zero.
    /// let scaler = LossScaler::noop().with_clip_norm(1.0).unwrap();
    /// let scaled = model.forward(Tensor::<B, 2>::zeros([1, 1], &device)).sum().add_scalar(1.0);
    /// let grads = GradientsParams::from_grads(scaled.backward(), &model);
    /// let read = scaler.check(&model, grads, Some(scaled)).unwrap().probe_read();
    /// assert!(read.grads_finite && read.grads_zero, "x = 0: the weight's gradient is 0");
    /// ```
    pub fn probe_read(&self) -> burn_mpric_core::scale::ProbeRead {
        burn_mpric_core::scale::ProbeRead::of(self.loss, self.finite, self.zero)
    }
}

/// The mean of a (scaled) loss at f32, on the inner backend, for the step's one host read.
pub(crate) fn mean_at_f32<B: AutodiffBackend, const D: usize>(
    loss: Tensor<B, D>,
) -> Tensor<B::InnerBackend, 1> {
    loss.inner().cast(FloatDType::F32).mean()
}

/// Whether a check tells gradients that are all exactly zero: summing magnitudes costs one
/// more pass over the gradients, paid only by [`LossScaler::step_with`], whose probe uses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Zeros {
    /// Plain sums (finiteness only).
    Ignore,
    /// Sums of magnitudes (finiteness, and zero exactly when every element is).
    Tell,
}

/// The gradient shards of one step after unscaling, checking and clipping.
pub(crate) struct Shards {
    pub(crate) grads: Vec<GradientsParams>,
    pub(crate) finite: bool,
    pub(crate) zero: bool,
    pub(crate) loss: Option<f32>,
    pub(crate) grad_norm: Option<f32>,
}

impl From<ScalerState> for LossScaler {
    /// The scaler that decides with this state (a preset's, a restored record's, ...).
    fn from(core: ScalerState) -> Self {
        Self {
            core,
            max_consecutive_skips: DEFAULT_MAX_CONSECUTIVE_SKIPS,
        }
    }
}
