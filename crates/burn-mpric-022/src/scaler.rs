//! [`LossScaler`]: loss scaling around Burn 0.22's [`ModuleOptimizer`], every decision taken
//! by the core's [`ScalerState`].

use std::path::Path;

use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::lr_scheduler::module_lr_scheduler::ModuleLearningRate;
use burn::optim::{GradientsParams, ModuleOptimizer, MultiGradientsParams};
use burn::tensor::{FloatDType, Tensor};
use burn_mpric_core::ResolvedPolicy;
use burn_mpric_core::scale::{
    ClipNorm, DEFAULT_MAX_CONSECUTIVE_SKIPS, LossScale, LossScaleConfig, LossScaleError,
    LossScalePreset, ProbeRead, ScalerRecord, ScalerState, ScalerStats, SkipCause, StateError,
    StepOutcome,
};

use crate::error::StepError;
use crate::unscale::{CheckKind, Checked, GradCheck, read_checks};

/// Loss scaling for Burn 0.22: multiply the loss by `S` before backward, then unscale, check
/// and (optionally) clip every gradient, and step the optimizer only when all of them are
/// finite. The scale, the skip decision, the counters and the saved state are the core's
/// [`ScalerState`], so this edition and the Burn 0.21 one decide alike and read each other's
/// state files.
///
/// One training step:
///
/// 1. [`scale_loss`](Self::scale_loss) before backward (half losses are widened to f32
///    first: 2^15 times an f16 loss overflows f16);
/// 2. [`step`](Self::step) or [`step_with_loss`](Self::step_with_loss): every gradient is
///    cast to f32 (f64 stays f64), multiplied by `1/S` (computed in f64, rounded once) and
///    cast to its parameter's dtype; one f32 reduction per gradient (a sum, or with clipping
///    the largest magnitude and the normalized sum of squares) is concatenated with the
///    loss and read from the device **once**; the host decides. If any gradient is not
///    finite, the optimizer is not called, so parameters and optimizer state stay
///    bit-identical; the scale is updated and a [`StepOutcome`] reports what happened.
///
/// A run whose every step skips does not go on in silence: after
/// [`DEFAULT_MAX_CONSECUTIVE_SKIPS`] skipped steps in a row (see
/// [`with_max_consecutive_skips`](Self::with_max_consecutive_skips)) a step returns
/// [`StepError::Stalled`], which stops the loop. [`step_with`](Self::step_with), which runs the
/// loss itself, also tells a range problem from one no loss scale fixes ([`SkipCause`]).
///
/// # Example
///
/// ```
/// use burn::nn::{LinearConfig, loss::{MseLoss, Reduction}};
/// use burn::optim::{AdamConfig, GradientsParams};
/// use burn::tensor::{Device, Tensor};
/// use burn_mpric_022::LossScaler;
/// use burn_mpric_core::scale::LossScaleConfig;
///
/// let device = Device::flex().autodiff();
/// let mut model = LinearConfig::new(3, 1).init(&device);
/// let mut optim = AdamConfig::new().init();
/// let mut scaler = LossScaler::dynamic(LossScaleConfig::torch()).unwrap();
///
/// let x = Tensor::<2>::from_floats([[1.0, 2.0, 3.0]], &device);
/// let y = Tensor::<2>::from_floats([[1.0]], &device);
/// for _ in 0..3 {
///     let loss = MseLoss::new().forward(model.forward(x.clone()), y.clone(), Reduction::Mean);
///     let scaled = scaler.scale_loss(loss);
///     let grads = GradientsParams::from_grads(scaled.backward(), &model);
///     let (next, outcome) = scaler.step(&mut optim, 1e-2, model, grads);
///     model = next;
///     assert!(outcome.unwrap().is_applied());
/// }
/// assert_eq!(scaler.stats().steps, 3);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LossScaler {
    state: ScalerState,
    /// Skipped steps in a row that stop the run; 0 never stops.
    max_consecutive_skips: u64,
}

impl Default for LossScaler {
    fn default() -> Self {
        Self::new(ScalerState::default())
    }
}

impl From<ScalerState> for LossScaler {
    fn from(state: ScalerState) -> Self {
        Self::new(state)
    }
}

impl LossScaler {
    /// A scaler around a core scaler state.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_022::LossScaler;
    /// use burn_mpric_core::scale::ScalerState;
    ///
    /// assert_eq!(LossScaler::new(ScalerState::fixed(256.0).unwrap()).scale(), 256.0);
    /// ```
    pub fn new(state: ScalerState) -> Self {
        Self {
            state,
            max_consecutive_skips: DEFAULT_MAX_CONSECUTIVE_SKIPS,
        }
    }

    /// Stops the run with [`StepError::Stalled`] once `max` steps in a row were skipped
    /// (default [`DEFAULT_MAX_CONSECUTIVE_SKIPS`]); `0` never stops, for loops that read
    /// [`ScalerStats::consecutive_skipped`] themselves.
    ///
    /// # Example
    ///
    /// ```
    /// use burn::nn::LinearConfig;
    /// use burn::optim::{GradientsParams, SgdConfig};
    /// use burn::tensor::{Device, Tensor};
    /// use burn_mpric_022::{LossScaler, StepError};
    ///
    /// let device = Device::flex().autodiff();
    /// let mut model = LinearConfig::new(1, 1).with_bias(false).init(&device);
    /// let mut scaler = LossScaler::default().with_max_consecutive_skips(2);
    /// let mut optim = SgdConfig::new().init();
    /// let nan = |model: &burn::nn::Linear| {
    ///     let mut grads = GradientsParams::new();
    ///     grads.register(model.weight.id, Tensor::<2>::from_floats([[f32::NAN]], &Device::flex()));
    ///     grads
    /// };
    /// let grads = nan(&model);
    /// let (next, first) = scaler.step(&mut optim, 1.0, model, grads);
    /// assert!(first.unwrap().is_skipped());
    /// let grads = nan(&next);
    /// let (_, second) = scaler.step(&mut optim, 1.0, next, grads);
    /// assert!(matches!(second, Err(StepError::Stalled { .. })));
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
    /// use burn_mpric_022::LossScaler;
    /// use burn_mpric_core::scale::DEFAULT_MAX_CONSECUTIVE_SKIPS;
    ///
    /// assert_eq!(LossScaler::noop().max_consecutive_skips(), DEFAULT_MAX_CONSECUTIVE_SKIPS);
    /// ```
    pub fn max_consecutive_skips(&self) -> u64 {
        self.max_consecutive_skips
    }

    /// A dynamic scaler; the configuration is validated.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_022::LossScaler;
    /// use burn_mpric_core::scale::LossScaleConfig;
    ///
    /// assert_eq!(LossScaler::dynamic(LossScaleConfig::torch()).unwrap().scale(), 65536.0);
    /// assert!(LossScaler::dynamic(LossScaleConfig::new().with_backoff_factor(1.5)).is_err());
    /// ```
    pub fn dynamic(config: LossScaleConfig) -> Result<Self, LossScaleError> {
        ScalerState::dynamic(config).map(Self::new)
    }

    /// A scaler with a fixed scale.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_022::LossScaler;
    ///
    /// assert!(LossScaler::fixed(0.0).is_err());
    /// ```
    pub fn fixed(scale: f32) -> Result<Self, LossScaleError> {
        ScalerState::fixed(scale).map(Self::new)
    }

    /// No scaling (scale 1, the bf16 and f32 mode); non-finite steps are still skipped.
    ///
    /// # Example
    ///
    /// ```
    /// assert_eq!(burn_mpric_022::LossScaler::noop().scale(), 1.0);
    /// ```
    pub fn noop() -> Self {
        Self::new(ScalerState::noop())
    }

    /// The scaler a preset stands for under `policy` (`auto`: dynamic when the policy
    /// computes in f16, no scaling otherwise).
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_022::LossScaler;
    /// use burn_mpric_core::ResolvedPolicy;
    /// use burn_mpric_core::scale::LossScalePreset;
    ///
    /// let f16: ResolvedPolicy = "mixed_f16".parse().unwrap();
    /// let bf16: ResolvedPolicy = "mixed_bf16".parse().unwrap();
    /// assert_eq!(LossScaler::for_policy(LossScalePreset::Auto, &f16).unwrap().scale(), 32768.0);
    /// assert_eq!(LossScaler::for_policy(LossScalePreset::Auto, &bf16).unwrap().scale(), 1.0);
    /// ```
    pub fn for_policy(
        preset: LossScalePreset,
        policy: &ResolvedPolicy,
    ) -> Result<Self, LossScaleError> {
        ScalerState::from_preset(preset, policy.computes_in_f16()).map(Self::new)
    }

    /// Clips all gradients to a global L2 norm of `max_norm` after unscaling.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_022::LossScaler;
    ///
    /// assert_eq!(LossScaler::noop().with_clip_norm(1.0).unwrap().clip().unwrap().max_norm(), 1.0);
    /// assert!(LossScaler::noop().with_clip_norm(f32::NAN).is_err());
    /// ```
    pub fn with_clip_norm(self, max_norm: f32) -> Result<Self, LossScaleError> {
        let state = self.state.with_clip_norm(max_norm)?;
        Ok(Self { state, ..self })
    }

    /// The global-norm clipping in effect, if any.
    ///
    /// # Example
    ///
    /// ```
    /// assert!(burn_mpric_022::LossScaler::noop().clip().is_none());
    /// ```
    pub fn clip(&self) -> Option<ClipNorm> {
        self.state.clip()
    }

    /// The whole step state (the loss scale, counters, the stall limit): the core's
    /// [`ScalerState`], which both editions decide with. The same names in both editions.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_022::LossScaler;
    ///
    /// assert!(LossScaler::default().core().loss_scale().as_dynamic().is_some());
    /// ```
    pub fn core(&self) -> &ScalerState {
        &self.state
    }

    /// The whole step state: [`core`](Self::core), the name both editions give it (the
    /// 0.21 edition's `state()` was the loss scale alone).
    #[deprecated(
        note = "use `core()` (or `loss_scale()` for the loss scale alone): the same names in both editions"
    )]
    pub fn state(&self) -> &ScalerState {
        self.core()
    }

    /// The state, for the device path's replay of the steps it decided.
    pub(crate) fn core_mut(&mut self) -> &mut ScalerState {
        &mut self.state
    }

    /// The loss scale's state.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_022::LossScaler;
    /// use burn_mpric_core::scale::LossScale;
    ///
    /// assert_eq!(*LossScaler::noop().loss_scale(), LossScale::noop());
    /// ```
    pub fn loss_scale(&self) -> &LossScale {
        self.state.loss_scale()
    }

    /// The current scale `S`: the one the next step uses.
    ///
    /// # Example
    ///
    /// ```
    /// assert_eq!(burn_mpric_022::LossScaler::default().scale(), 32768.0);
    /// ```
    pub fn scale(&self) -> f32 {
        self.state.scale()
    }

    /// The running counters.
    ///
    /// # Example
    ///
    /// ```
    /// assert_eq!(burn_mpric_022::LossScaler::default().stats().steps, 0);
    /// ```
    pub fn stats(&self) -> ScalerStats {
        self.state.stats()
    }

    /// Multiplies `loss` by `S`, after widening an f16 or bf16 loss to f32 (f32 and f64
    /// losses keep their dtype). With `S = 1` the loss is only widened.
    ///
    /// # Example
    ///
    /// ```
    /// use burn::tensor::{DType, Device, FloatDType, Tensor};
    /// use burn_mpric_022::LossScaler;
    ///
    /// // 4 * 2^15 overflows f16 (largest finite 65504); the scaled loss is f32.
    /// let loss = Tensor::<1>::from_floats([4.0], &Device::flex()).cast(FloatDType::F16);
    /// let scaled = LossScaler::default().scale_loss(loss);
    /// assert_eq!(scaled.dtype(), burn::tensor::DType::F32);
    /// assert_eq!(scaled.into_scalar::<f32>(), 131072.0);
    /// ```
    pub fn scale_loss<const D: usize>(&self, loss: Tensor<D>) -> Tensor<D> {
        let loss = match crate::dtype::plain_float(loss.dtype()) {
            Some(FloatDType::F16 | FloatDType::BF16) => loss.cast(FloatDType::F32),
            _ => loss,
        };
        let scale = self.scale();
        if scale == 1.0 {
            loss
        } else {
            loss.mul_scalar(scale)
        }
    }

    /// Unscales, checks and (with clipping on) clips the gradients of `module` without
    /// stepping, with the loss read in the same host read when given; for loops that decide
    /// themselves whether to step. Follow it with [`finish`](Self::finish).
    ///
    /// # Errors
    ///
    /// [`StepError`]: a gradient of the wrong shape, or a failed read. The scaler is unchanged.
    ///
    /// # Example
    ///
    /// ```
    /// use burn::nn::LinearConfig;
    /// use burn::optim::GradientsParams;
    /// use burn::tensor::{Device, Tensor};
    /// use burn_mpric_022::LossScaler;
    ///
    /// let device = Device::flex().autodiff();
    /// let model = LinearConfig::new(1, 1).with_bias(false).init(&device);
    /// let mut scaler = LossScaler::fixed(8.0).unwrap();
    /// let x = Tensor::<2>::from_floats([[3.0]], &device);
    /// let scaled = scaler.scale_loss(model.forward(x).sum());
    /// let grads = GradientsParams::from_grads(scaled.backward(), &model);
    /// let checked = scaler.check(&model, grads, Some(scaled)).unwrap();
    /// assert!(checked.finite);
    /// let g = checked.grads.get::<2>(model.weight.id).unwrap();
    /// assert_eq!(g.into_data().to_vec::<f32>().unwrap(), vec![3.0]); // unscaled
    /// assert!(scaler.finish(&checked).is_applied());
    /// ```
    pub fn check<M: Module, const D: usize>(
        &self,
        module: &M,
        grads: GradientsParams,
        scaled_loss: Option<Tensor<D>>,
    ) -> Result<CheckedGrads, StepError> {
        self.check_inner(module, grads, scaled_loss, false)
    }

    /// [`check`](Self::check); with `zeros`, the sums are of magnitudes, so that gradients
    /// that are all zero are told (one more pass, for the probe of `step_with`).
    fn check_inner<M: Module, const D: usize>(
        &self,
        module: &M,
        grads: GradientsParams,
        scaled_loss: Option<Tensor<D>>,
        zeros: bool,
    ) -> Result<CheckedGrads, StepError> {
        let loss = scaled_loss.map(|loss| loss.without_autodiff().cast(FloatDType::F32).mean());
        let Checked {
            grads,
            finite,
            zero,
            loss,
            grad_norm,
        } = check_grads(module, grads, self.scale(), self.clip(), loss, zeros)?;
        // Only a skipped step pays for the names: one more read.
        let overflow = if finite {
            None
        } else {
            Some(crate::overflow::find_overflow(module, &grads)?)
        };
        Ok(CheckedGrads {
            grads,
            finite,
            zero,
            scaled_loss: loss,
            grad_norm,
            overflow,
        })
    }

    /// Records the decision of a step checked with [`check`](Self::check): the scale and
    /// counters move on (the core decides), and the outcome reports the loss unscaled by the
    /// scale that was used.
    ///
    /// # Example
    ///
    /// ```
    /// use burn::nn::LinearConfig;
    /// use burn::optim::GradientsParams;
    /// use burn::tensor::Device;
    /// use burn_mpric_022::LossScaler;
    /// use burn_mpric_core::scale::LossScaleConfig;
    ///
    /// let model = LinearConfig::new(1, 1).init(&Device::flex().autodiff());
    /// let mut scaler = LossScaler::dynamic(LossScaleConfig::new().with_initial_scale(8.0)).unwrap();
    /// let checked = scaler.check::<_, 1>(&model, GradientsParams::new(), None).unwrap();
    /// let outcome = scaler.finish(&checked);
    /// assert!(outcome.is_applied()); // no gradient at all counts as finite
    /// assert_eq!(outcome.scale_used, 8.0);
    /// ```
    pub fn finish(&mut self, checked: &CheckedGrads) -> StepOutcome {
        let outcome = self
            .state
            .finish(checked.finite, checked.scaled_loss, checked.grad_norm);
        match &checked.overflow {
            Some(overflow) => outcome.with_overflow(overflow.clone()),
            None => outcome,
        }
    }

    /// One optimizer step with loss scaling; see [`LossScaler`]. On a skipped step `module`
    /// comes back unchanged and `optim` was not called.
    ///
    /// # Errors
    ///
    /// [`StepError`] (a gradient of the wrong shape, or a failed read): nothing was applied
    /// and the scaler is unchanged.
    ///
    /// # Example
    ///
    /// ```
    /// use burn::nn::LinearConfig;
    /// use burn::optim::{GradientsParams, SgdConfig};
    /// use burn::tensor::{Device, Tensor};
    /// use burn_mpric_022::LossScaler;
    ///
    /// let device = Device::flex().autodiff();
    /// let model = LinearConfig::new(1, 1).init(&device);
    /// let before = model.weight.val().into_data();
    /// let mut optim = SgdConfig::new().init();
    /// let mut scaler = LossScaler::default();
    ///
    /// let mut grads = GradientsParams::new();
    /// grads.register(model.weight.id, Tensor::<2>::from_floats([[f32::NAN]], &Device::flex()));
    /// let (model, outcome) = scaler.step(&mut optim, 1.0, model, grads);
    /// let outcome = outcome.unwrap();
    /// assert!(outcome.is_skipped());
    /// assert_eq!(outcome.next_scale, 16384.0);
    /// assert_eq!(model.weight.val().into_data(), before);
    /// ```
    pub fn step<M: Module>(
        &mut self,
        optim: &mut ModuleOptimizer,
        lr: impl Into<ModuleLearningRate>,
        module: M,
        grads: GradientsParams,
    ) -> (M, Result<StepOutcome, StepError>) {
        self.step_inner::<M, 1>(optim, lr.into(), module, grads, None, None)
    }

    /// [`step`](Self::step), also reporting the loss: `scaled_loss` is the tensor backward
    /// ran on; its mean is read in the same host read as the gradients' checks and divided by
    /// the scale that was used.
    ///
    /// # Example
    ///
    /// ```
    /// use burn::nn::LinearConfig;
    /// use burn::optim::{GradientsParams, SgdConfig};
    /// use burn::tensor::{Device, Tensor};
    /// use burn_mpric_022::LossScaler;
    /// use burn_mpric_core::scale::LossScaleConfig;
    ///
    /// let device = Device::flex().autodiff();
    /// let model = LinearConfig::new(2, 1).with_bias(false).init(&device);
    /// // Interval 1: this step grows the scale from 4 to 8; the loss is divided by 4.
    /// let config = LossScaleConfig::new().with_initial_scale(4.0).with_growth_interval(1);
    /// let mut scaler = LossScaler::dynamic(config).unwrap();
    /// let loss = model.forward(Tensor::<2>::zeros([1, 2], &device)).sum().add_scalar(1.5);
    /// let scaled = scaler.scale_loss(loss);
    /// let grads = GradientsParams::from_grads(scaled.backward(), &model);
    /// let mut optim = SgdConfig::new().init();
    /// let (_model, outcome) = scaler.step_with_loss(&mut optim, 0.1, model, grads, scaled);
    /// let outcome = outcome.unwrap();
    /// assert_eq!((outcome.scale_used, outcome.next_scale), (4.0, 8.0));
    /// assert_eq!(outcome.loss, Some(1.5));
    /// ```
    pub fn step_with_loss<M: Module, const D: usize>(
        &mut self,
        optim: &mut ModuleOptimizer,
        lr: impl Into<ModuleLearningRate>,
        module: M,
        grads: GradientsParams,
        scaled_loss: Tensor<D>,
    ) -> (M, Result<StepOutcome, StepError>) {
        self.step_inner(optim, lr.into(), module, grads, Some(scaled_loss), None)
    }

    /// [`step`](Self::step) for gradients held on several devices, as burn-train's
    /// `MultiDeviceOptim::OptimSharded` passes them to `TrainStep::optimize_multi`: each
    /// parameter's gradients are summed on the device `ModuleOptimizer::step_multi` would
    /// sum them on, then checked and applied as one step, so a non-finite gradient on any
    /// device skips the step for all.
    ///
    /// # Example
    ///
    /// ```
    /// use burn::nn::LinearConfig;
    /// use burn::optim::{GradientsParams, MultiGradientsParams, SgdConfig};
    /// use burn::tensor::{Device, Tensor};
    /// use burn_mpric_022::LossScaler;
    ///
    /// let device = Device::flex().autodiff();
    /// let model = LinearConfig::new(1, 1).with_bias(false).init(&device);
    /// let before = model.weight.val().into_data();
    /// let shard = |value: f32| {
    ///     let mut grads = GradientsParams::new();
    ///     grads.register(model.weight.id, Tensor::<2>::from_floats([[value]], &Device::flex()));
    ///     (grads, Device::flex())
    /// };
    /// let grads = MultiGradientsParams { grads: vec![shard(2.0), shard(f32::INFINITY)] };
    /// let mut scaler = LossScaler::default();
    /// let (model, outcome) = scaler.step_multi(&mut SgdConfig::new().init(), 1.0, model, grads);
    /// assert!(outcome.unwrap().is_skipped());
    /// assert_eq!(model.weight.val().into_data(), before);
    /// ```
    pub fn step_multi<M: Module>(
        &mut self,
        optim: &mut ModuleOptimizer,
        lr: impl Into<ModuleLearningRate>,
        module: M,
        grads: MultiGradientsParams,
    ) -> (M, Result<StepOutcome, StepError>) {
        let grads = sum_shards(&module, grads);
        self.step_inner::<M, 1>(optim, lr.into(), module, grads, None, None)
    }

    pub(crate) fn step_inner<M: Module, const D: usize>(
        &mut self,
        optim: &mut ModuleOptimizer,
        lr: ModuleLearningRate,
        module: M,
        grads: GradientsParams,
        scaled_loss: Option<Tensor<D>>,
        probe: Option<&mut ProbeStep<'_, M>>,
    ) -> (M, Result<StepOutcome, StepError>) {
        let checked = match self.check_inner(&module, grads, scaled_loss, probe.is_some()) {
            Ok(checked) => checked,
            Err(err) => return (module, Err(err)),
        };
        let read = checked.probe_read();
        let cause = match probe {
            Some(probe) if read.needs_probe(checked.scaled_loss) => {
                let params = checked
                    .overflow
                    .as_ref()
                    .map(|o| o.params.clone())
                    .unwrap_or_default();
                match probe(&module, read, self.scale(), params) {
                    Ok(cause) => Some(cause),
                    Err(err) => return (module, Err(err)),
                }
            }
            _ => None,
        };
        let finite = checked.finite;
        let mut outcome = self.finish(&checked);
        if let Some(cause) = cause {
            outcome = outcome.with_cause(cause);
        }
        if finite {
            return (optim.step(lr, module, checked.grads), Ok(outcome));
        }
        let max = self.max_consecutive_skips;
        if outcome.stalls(max) {
            return (
                module,
                Err(StepError::Stalled {
                    max,
                    outcome: Box::new(outcome),
                }),
            );
        }
        (module, Ok(outcome))
    }

    /// The complete state (scale, counters, configuration, clipping) as the core's record:
    /// the format both editions save.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_022::LossScaler;
    ///
    /// let record = LossScaler::fixed(64.0).unwrap().to_record();
    /// assert_eq!(LossScaler::from_record(record).unwrap().scale(), 64.0);
    /// ```
    pub fn to_record(&self) -> ScalerRecord {
        self.state.to_record()
    }

    /// A scaler from a record; every field is validated.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_022::LossScaler;
    ///
    /// let mut record = LossScaler::noop().to_record();
    /// record.format_version = 99;
    /// assert!(LossScaler::from_record(record).is_err());
    /// ```
    pub fn from_record(record: ScalerRecord) -> Result<Self, StateError> {
        ScalerState::from_record(record).map(Self::new)
    }

    /// Writes the state to a JSON file (the format the Burn 0.21 edition writes too).
    ///
    /// Burn 0.22's `ModuleRecord` holds tensor parameters only, so the scaler state travels
    /// in its own file next to the module and optimizer records.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_022::LossScaler;
    ///
    /// let path = std::env::temp_dir().join(format!("scaler-doc-{}.json", std::process::id()));
    /// LossScaler::fixed(128.0).unwrap().save_file(&path).unwrap();
    /// assert_eq!(LossScaler::load_file(&path).unwrap().scale(), 128.0);
    /// # std::fs::remove_file(&path).unwrap();
    /// ```
    pub fn save_file(&self, path: impl AsRef<Path>) -> Result<(), StateError> {
        self.state.save_file(path)
    }

    /// Reads a state file written by either edition; see [`ScalerState::load_file`].
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_022::LossScaler;
    ///
    /// assert!(LossScaler::load_file("/nonexistent/scaler.json").is_err());
    /// ```
    pub fn load_file(path: impl AsRef<Path>) -> Result<Self, StateError> {
        ScalerState::load_file(path).map(Self::new)
    }
}

/// Gradients after [`LossScaler::check`]: unscaled, at their parameters' dtypes, clipped when
/// clipping is on and the step is finite.
#[derive(Debug)]
pub struct CheckedGrads {
    /// The unscaled gradients.
    pub grads: GradientsParams,
    /// Whether every gradient was finite (and, with clipping on, the global norm finite and
    /// representable in f32).
    pub finite: bool,
    /// Whether every gradient was exactly zero, where the check looked: with clipping on (the
    /// largest magnitudes tell it) and in [`LossScaler::step_with`]; `false` otherwise.
    pub zero: bool,
    /// The mean of the scaled loss at f32, when one was given (still scaled:
    /// [`LossScaler::finish`] divides it by the scale that was used).
    pub scaled_loss: Option<f32>,
    /// The global L2 norm before clipping, as the core judged it, when clipping is on and the
    /// module had gradients.
    pub grad_norm: Option<f32>,
    /// On a step judged non-finite, the parameters whose gradients held inf or NaN (found by
    /// one more read); `None` on a finite step.
    pub overflow: Option<burn_mpric_core::scale::Overflow>,
}

impl CheckedGrads {
    /// What the check read, as the probe of a skipped step compares it
    /// ([`SkipCause::judge`]).
    ///
    /// # Example
    ///
    /// ```
    /// use burn::nn::LinearConfig;
    /// use burn::optim::GradientsParams;
    /// use burn::tensor::{Device, Tensor};
    /// use burn_mpric_022::LossScaler;
    ///
    /// let device = Device::flex().autodiff();
    /// let model = LinearConfig::new(1, 1).with_bias(false).init(&device);
    /// // With clipping on, the largest magnitudes also tell gradients that are all zero.
    /// let scaler = LossScaler::noop().with_clip_norm(1.0).unwrap();
    /// let scaled = model.forward(Tensor::<2>::zeros([1, 1], &device)).sum().add_scalar(1.0);
    /// let grads = GradientsParams::from_grads(scaled.backward(), &model);
    /// let read = scaler.check(&model, grads, Some(scaled)).unwrap().probe_read();
    /// assert!(read.grads_finite && read.grads_zero, "x = 0: the weight's gradient is 0");
    /// ```
    pub fn probe_read(&self) -> ProbeRead {
        ProbeRead::of(self.scaled_loss, self.finite, self.zero)
    }
}

/// Unscales and checks `grads` for `module` with one host read; see [`LossScaler`].
pub(crate) fn check_grads<M: Module>(
    module: &M,
    mut grads: GradientsParams,
    scale: f32,
    clip: Option<ClipNorm>,
    loss: Option<Tensor<1>>,
    zeros: bool,
) -> Result<Checked, StepError> {
    let kind = match (clip.is_some(), zeros) {
        (true, _) => CheckKind::Norm,
        (false, true) => CheckKind::MagnitudeSum,
        (false, false) => CheckKind::Sum,
    };
    let mut visitor = GradCheck::new(&mut grads, scale, kind);
    module.visit(&mut visitor);
    let (checks, error) = visitor.finish();
    if let Some(err) = error {
        return Err(err);
    }
    let read = read_checks(loss, &checks, kind)?;
    let mut finite = read.finite;
    let mut grad_norm = None;
    if let (Some(clip), Some(norm)) = (clip, read.norm) {
        let (still_finite, reported) = ClipNorm::judge(finite, norm);
        finite = still_finite;
        grad_norm = Some(reported);
        let coefficient = clip.coefficient(norm);
        if finite && coefficient < 1.0 {
            crate::unscale::scale_grads(module, &mut grads, coefficient);
        }
    }
    Ok(Checked {
        grads,
        finite,
        zero: read.zero,
        loss: read.loss,
        grad_norm,
    })
}

/// Sums each parameter's gradient shards the way `ModuleOptimizer::step_multi` does (on the
/// device it picks for that parameter), into one set of gradients on those devices.
pub(crate) fn sum_shards<M: Module>(module: &M, grads: MultiGradientsParams) -> GradientsParams {
    struct Summer {
        shards: MultiGradientsParams,
        out: GradientsParams,
    }
    impl ModuleVisitor for Summer {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            if let Some((grad, _device)) = self.shards.remove::<D>(param.id) {
                self.out.register::<D>(param.id, grad);
            }
        }
    }
    let mut summer = Summer {
        shards: grads,
        out: GradientsParams::new(),
    };
    module.visit(&mut summer);
    summer.out
}

/// A step's probe: re-runs the batch at the probe scale and judges the cause (`probe.rs`).
pub(crate) type ProbeStep<'a, M> =
    dyn FnMut(&M, ProbeRead, f32, Vec<String>) -> Result<SkipCause, StepError> + 'a;
