//! [`PrecisionHandler`]: eformer's cast-and-wrap API, with loss scaling done right.

mod cast;

use burn::module::AutodiffModule;
use burn::optim::{GradientsParams, LearningRate, Optimizer};
use burn::tensor::Tensor;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn_mpric_scale::{
    LossScaleConfig, LossScaleError, LossScalePreset, LossScaler, StepError, StepOutcome,
};

pub use cast::{Castable, ModuleParams};

use crate::BurnDType;
use crate::{MpDevice, PolicyError, ResolvedPolicy};

/// Casts values by a [`ResolvedPolicy`] and runs training steps with loss scaling.
///
/// The handler holds a policy that is already resolved: the policy of the device its tensors
/// live on ([`from_device`](Self::from_device)), or one resolved against a device by
/// [`Policy::resolve`](crate::Policy::resolve). Text that names `half` needs a device, so
/// [`from_text`](Self::from_text) refuses it.
///
/// Unlike the API it comes from, the loss is multiplied by the scale *inside* the
/// differentiated computation, gradients come back unscaled (and at their parameters'
/// dtypes), the reported loss is divided by the scale that was actually used, the default
/// configuration works on its first step, and a non-finite step is reported and not applied.
///
/// ```
/// use burn::backend::{Autodiff, Flex};
/// use burn::module::{Module, Param};
/// use burn::optim::SgdConfig;
/// use burn::tensor::Tensor;
/// use burn_mpric::PrecisionHandler;
///
/// type B = Autodiff<Flex>;
/// #[derive(Module, Debug)]
/// struct W<B: burn::tensor::backend::Backend> { w: Param<Tensor<B, 1>> }
///
/// let device = Default::default();
/// let model = W::<B> { w: Param::from_tensor(Tensor::from_floats([1.0, 2.0], &device)) };
/// let mut handler = PrecisionHandler::from_text("p=f32,c=f16,o=f32")?; // dynamic scale 2^15
/// let step = handler.train_step(&model, |m| m.w.val().powf_scalar(2.0).sum())?;
/// assert_eq!(step.outcome.loss, Some(5.0));
/// assert_eq!(step.grads.get::<Flex, 1>(model.w.id).unwrap().to_data().to_vec::<f32>()?, vec![2.0, 4.0]);
/// assert!(step.outcome.is_applied() && step.outcome.scale_used == 32768.0);
/// let model = handler.apply(&mut SgdConfig::new().init(), 0.1, model, step);
/// assert_eq!(model.w.val().to_data().to_vec::<f32>()?, vec![0.8, 1.6]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct PrecisionHandler {
    policy: ResolvedPolicy,
    scaler: LossScaler,
}

/// What [`PrecisionHandler::train_step`] returns: the gradients and the scaler's report.
///
/// The report is the one owner of the step's facts: `outcome.loss` (the loss, or its mean for a
/// loss with several elements, divided by the scale used), `outcome.is_applied()` (every
/// gradient finite; [`PrecisionHandler::apply`] skips the step otherwise), the scale used and
/// the next scale.
#[derive(Debug)]
pub struct TrainStepOutput {
    /// The gradients, unscaled and at their parameters' dtypes.
    pub grads: GradientsParams,
    /// The scaler's report: applied or skipped, loss, scale used, next scale, counters.
    pub outcome: StepOutcome,
}

/// A loss-scale setting for [`PrecisionHandler::with_loss_scale`]: a preset (by value or
/// parsed from its name), a dynamic configuration, or a ready scaler.
///
/// ```
/// use burn_mpric::LossScaleSetting;
/// use burn_mpric::scale::{LossScaleConfig, LossScalePreset};
///
/// let a: LossScaleSetting = LossScalePreset::Torch.into();
/// let b: LossScaleSetting = LossScaleConfig::torch().into();
/// assert_ne!(a, b);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LossScaleSetting {
    /// A named preset; `auto` follows the policy.
    Preset(LossScalePreset),
    /// A dynamic scale with this configuration.
    Config(LossScaleConfig),
    /// This scaler as it is.
    Scaler(LossScaler),
}

impl From<LossScalePreset> for LossScaleSetting {
    fn from(preset: LossScalePreset) -> Self {
        Self::Preset(preset)
    }
}

impl From<LossScaleConfig> for LossScaleSetting {
    fn from(config: LossScaleConfig) -> Self {
        Self::Config(config)
    }
}

impl From<LossScaler> for LossScaleSetting {
    fn from(scaler: LossScaler) -> Self {
        Self::Scaler(scaler)
    }
}

/// Errors building a handler from text.
#[derive(Debug, thiserror::Error)]
pub enum HandlerError {
    /// The policy text was rejected.
    #[error(transparent)]
    Policy(#[from] PolicyError),
    /// The loss-scale configuration was rejected.
    #[error(transparent)]
    LossScale(#[from] LossScaleError),
}

impl PrecisionHandler {
    /// A handler for `policy` with the loss scaling it calls for
    /// ([`LossScalePreset::Auto`]): a dynamic scale with the default configuration (initial
    /// 2^15, interval 2000) when compute is f16, and no scaling (non-finite steps still
    /// skipped) otherwise.
    ///
    /// ```
    /// use burn::backend::Flex;
    /// use burn_mpric::{Policy, PrecisionHandler, ResolveOnDevice, ResolvedPolicy};
    ///
    /// let h = PrecisionHandler::new("mixed_bf16".parse::<ResolvedPolicy>().unwrap());
    /// assert_eq!(h.scaler().scale(), 1.0);
    /// let h = PrecisionHandler::new("mixed_f16".parse::<ResolvedPolicy>().unwrap());
    /// assert_eq!(h.scaler().scale(), 32768.0);
    /// // `half` is decided by a device: bf16 on Flex, so no scaling.
    /// let half = "c=half".parse::<Policy>().unwrap().resolve::<Flex>(&Default::default()).unwrap();
    /// assert_eq!(PrecisionHandler::new(half).scaler().scale(), 1.0);
    /// ```
    pub fn new(policy: ResolvedPolicy) -> Self {
        let scaler = LossScaler::from_preset(LossScalePreset::Auto, policy.computes_in_f16())
            .expect("the default loss-scale configuration is valid");
        Self { policy, scaler }
    }

    /// A handler for the policy of `device`, a [`MixedPrecision`](crate::MixedPrecision)
    /// device: the handler's casts and loss scale follow what the device's tensors run.
    ///
    /// ```
    /// use burn::backend::Flex;
    /// use burn_mpric::{MixedPrecision, Policy, PrecisionHandler};
    ///
    /// let device = MixedPrecision::<Flex>::device(Default::default(), "mixed_f16".parse::<Policy>().unwrap()).unwrap();
    /// let h = PrecisionHandler::from_device(&device);
    /// assert_eq!(h.policy(), device.policy());
    /// assert_eq!(h.scaler().scale(), 32768.0);
    /// ```
    pub fn from_device<B: burn_backend::Backend>(device: &MpDevice<B>) -> Self {
        Self::new(device.policy())
    }

    /// A handler for `policy` with the loss scaling of `loss_scale`, in one call (eformer's
    /// `PrecisionHandler(policy, loss_scale_config=...)`): a preset, a [`LossScaleConfig`] or a
    /// ready [`LossScaler`].
    ///
    /// ```
    /// use burn_mpric::{PrecisionHandler, ResolvedPolicy};
    /// use burn_mpric::scale::{LossScaleConfig, LossScalePreset};
    ///
    /// let policy: ResolvedPolicy = "p=f32,c=f16,o=f32".parse().unwrap();
    /// let h = PrecisionHandler::with_loss_scale(policy, LossScalePreset::Torch).unwrap();
    /// assert_eq!(h.scaler().scale(), 65536.0);
    /// let config = LossScaleConfig::new().with_initial_scale(1024.0).with_growth_interval(100);
    /// let h = PrecisionHandler::with_loss_scale(policy, config).unwrap();
    /// assert_eq!(h.scaler().scale(), 1024.0);
    /// assert!(PrecisionHandler::with_loss_scale(policy, LossScaleConfig::new().with_initial_scale(0.0)).is_err());
    /// ```
    pub fn with_loss_scale(
        policy: ResolvedPolicy,
        loss_scale: impl Into<LossScaleSetting>,
    ) -> Result<Self, HandlerError> {
        let scaler = match loss_scale.into() {
            LossScaleSetting::Preset(preset) => {
                LossScaler::from_preset(preset, policy.computes_in_f16())?
            }
            LossScaleSetting::Config(config) => LossScaler::dynamic(config)?,
            LossScaleSetting::Scaler(scaler) => scaler,
        };
        Ok(Self { policy, scaler })
    }

    /// A handler from policy text and loss-scale preset text (`torch`, `static:1024`, `none`,
    /// `auto`, ...; see [`LossScalePreset`]).
    ///
    /// ```
    /// use burn_mpric::PrecisionHandler;
    ///
    /// let h = PrecisionHandler::from_texts("p=f32,c=f16,o=f32", "torch").unwrap();
    /// assert_eq!(h.scaler().scale(), 65536.0);
    /// let err = PrecisionHandler::from_texts("mixed_f16", "pytorh").unwrap_err();
    /// assert!(err.to_string().contains("accepted"));
    /// ```
    pub fn from_texts(policy: &str, loss_scale: &str) -> Result<Self, HandlerError> {
        let preset: LossScalePreset = loss_scale.parse()?;
        Self::with_loss_scale(policy.parse()?, preset)
    }

    /// A handler from policy text (see [`Policy`](crate::Policy)'s grammar) that names no
    /// `half` (resolve such a policy against a device first).
    ///
    /// ```
    /// use burn_mpric::{PolicyError, PrecisionHandler, HandlerError};
    ///
    /// assert!(PrecisionHandler::from_text("p=f32,c=bf16,o=f32").is_ok());
    /// assert!(PrecisionHandler::from_text("p=f32,c=bf61").is_err());
    /// let err = PrecisionHandler::from_text("c=half").unwrap_err();
    /// assert!(matches!(err, HandlerError::Policy(PolicyError::UnresolvedHalf { slot: "compute" })));
    /// ```
    pub fn from_text(policy: &str) -> Result<Self, HandlerError> {
        Ok(Self::new(policy.parse()?))
    }

    /// The same handler with another loss scaler.
    ///
    /// ```
    /// use burn_mpric::{PrecisionHandler, ResolvedPolicy};
    /// use burn_mpric_scale::LossScaler;
    ///
    /// let h = PrecisionHandler::new(ResolvedPolicy::F32).with_scaler(LossScaler::fixed(128.0).unwrap());
    /// assert_eq!(h.scaler().scale(), 128.0);
    /// ```
    pub fn with_scaler(mut self, scaler: LossScaler) -> Self {
        self.scaler = scaler;
        self
    }

    /// The policy.
    ///
    /// ```
    /// use burn_mpric::{PrecisionHandler, ResolvedPolicy};
    ///
    /// assert_eq!(PrecisionHandler::new(ResolvedPolicy::F32).policy(), ResolvedPolicy::F32);
    /// ```
    pub fn policy(&self) -> ResolvedPolicy {
        self.policy
    }

    /// The loss scaler (its scale, counters, configuration).
    ///
    /// ```
    /// use burn_mpric::{PrecisionHandler, ResolvedPolicy};
    ///
    /// assert_eq!(PrecisionHandler::new(ResolvedPolicy::F32).scaler().stats().steps, 0);
    /// ```
    pub fn scaler(&self) -> &LossScaler {
        &self.scaler
    }

    /// Casts the float tensors of `x` to the compute dtype.
    ///
    /// ```
    /// use burn::backend::Flex;
    /// use burn::tensor::{DType, Tensor};
    /// use burn_mpric::PrecisionHandler;
    ///
    /// let h = PrecisionHandler::from_text("c=bf16,o=f32").unwrap();
    /// let x = Tensor::<Flex, 1>::ones([2], &Default::default());
    /// assert_eq!(h.cast_for_compute(x).dtype(), DType::BF16);
    /// ```
    pub fn cast_for_compute<B: Backend, T: Castable<B>>(&self, x: T) -> T {
        x.cast_floats(self.policy.compute().to_burn())
    }

    /// Casts the float tensors of `x` to the output dtype.
    ///
    /// ```
    /// use burn::backend::Flex;
    /// use burn::tensor::{DType, FloatDType, Tensor};
    /// use burn_mpric::PrecisionHandler;
    ///
    /// let h = PrecisionHandler::from_text("c=bf16,o=f32").unwrap();
    /// let y = Tensor::<Flex, 1>::ones([2], &Default::default()).cast(FloatDType::BF16);
    /// assert_eq!(h.cast_for_output(y).dtype(), DType::F32);
    /// ```
    pub fn cast_for_output<B: Backend, T: Castable<B>>(&self, x: T) -> T {
        x.cast_floats(self.policy.output().to_burn())
    }

    /// Casts every float parameter of `module` to the param dtype.
    ///
    /// ```
    /// use burn::backend::Flex;
    /// use burn::nn::LinearConfig;
    /// use burn::tensor::{DType, FloatDType};
    /// use burn_mpric::{Castable, ModuleParams, PrecisionHandler};
    ///
    /// let h = PrecisionHandler::from_text("mixed_f16").unwrap();
    /// let half = ModuleParams(LinearConfig::new(2, 2).init::<Flex>(&Default::default()))
    ///     .cast_floats(FloatDType::F16).0;
    /// assert_eq!(h.cast_params(half).weight.val().dtype(), DType::F32);
    /// ```
    pub fn cast_params<B: Backend, M: burn::module::Module<B>>(&self, module: M) -> M {
        ModuleParams(module)
            .cast_floats(self.policy.param().to_burn())
            .0
    }

    /// Wraps an inference function: inputs are cast to the compute dtype, outputs to the
    /// output dtype.
    ///
    /// ```
    /// use burn::backend::Flex;
    /// use burn::tensor::{DType, Tensor};
    /// use burn_mpric::PrecisionHandler;
    ///
    /// let h = PrecisionHandler::from_text("p=f32,c=bf16,o=f32").unwrap();
    /// let f = h.inference(|x: Tensor<Flex, 1>| {
    ///     assert_eq!(x.dtype(), DType::BF16);
    ///     x * 2.0
    /// });
    /// let y = f(Tensor::ones([3], &Default::default()));
    /// assert_eq!(y.dtype(), DType::F32);
    /// ```
    pub fn inference<B, I, O, F>(&self, f: F) -> impl Fn(I) -> O
    where
        B: Backend,
        I: Castable<B>,
        O: Castable<B>,
        F: Fn(I) -> O,
    {
        let policy = self.policy;
        move |input| {
            f(input.cast_floats(policy.compute().to_burn())).cast_floats(policy.output().to_burn())
        }
    }

    /// One training step: runs `loss_fn`, multiplies the loss by the current scale (at f32)
    /// before backward, unscales every gradient and casts it to its parameter's dtype,
    /// checks them all for finiteness (one host read, shared with the loss), and updates the
    /// scale. Apply the result with [`apply`](Self::apply).
    ///
    /// ```
    /// use burn::backend::{Autodiff, Flex};
    /// use burn::nn::LinearConfig;
    /// use burn::tensor::Tensor;
    /// use burn_mpric::PrecisionHandler;
    ///
    /// type B = Autodiff<Flex>;
    /// let device = Default::default();
    /// let model = LinearConfig::new(2, 1).init::<B>(&device);
    /// let mut h = PrecisionHandler::from_text("mixed_f16").unwrap();
    /// let x = Tensor::<B, 2>::ones([1, 2], &device);
    /// let step = h.train_step(&model, |m| m.forward(x.clone()).sum()).unwrap();
    /// assert!(step.outcome.is_applied());
    /// ```
    pub fn train_step<B, M, const D: usize>(
        &mut self,
        module: &M,
        loss_fn: impl FnOnce(&M) -> Tensor<B, D>,
    ) -> Result<TrainStepOutput, StepError>
    where
        B: AutodiffBackend,
        M: AutodiffModule<B>,
    {
        let scaled = self.scaler.scale_loss(loss_fn(module));
        let grads = GradientsParams::from_grads(scaled.backward(), module);
        let checked = self.scaler.check(module, grads, Some(scaled))?;
        let outcome = self.scaler.update_checked(&checked);
        Ok(TrainStepOutput {
            grads: checked.grads,
            outcome,
        })
    }

    /// Runs the optimizer with the step's gradients if they were finite (parameters keep their
    /// dtypes, as in [`LossScaler::step`]); otherwise returns `module` unchanged (the optimizer
    /// state is not touched either).
    ///
    /// ```
    /// use burn::backend::{Autodiff, Flex};
    /// use burn::nn::LinearConfig;
    /// use burn::optim::AdamConfig;
    /// use burn::tensor::Tensor;
    /// use burn_mpric::PrecisionHandler;
    ///
    /// type B = Autodiff<Flex>;
    /// let device = Default::default();
    /// let model = LinearConfig::new(1, 1).init::<B>(&device);
    /// let before = model.weight.val().into_data();
    /// let mut h = PrecisionHandler::from_text("mixed_f16").unwrap();
    /// let x = Tensor::<B, 2>::from_floats([[f32::INFINITY]], &device);
    /// let step = h.train_step(&model, |m| m.forward(x.clone()).sum()).unwrap();
    /// assert!(step.outcome.is_skipped());
    /// let model = h.apply(&mut AdamConfig::new().init(), 1e-3, model, step);
    /// assert_eq!(model.weight.val().into_data(), before);
    /// ```
    pub fn apply<B, M, O>(
        &self,
        optim: &mut O,
        lr: LearningRate,
        module: M,
        step: TrainStepOutput,
    ) -> M
    where
        B: AutodiffBackend,
        M: AutodiffModule<B>,
        O: Optimizer<M, B>,
    {
        if step.outcome.is_applied() {
            // The optimizer step of the scaler's own step functions: parameters keep their dtypes.
            burn_mpric_scale::apply_gradients(optim, lr, module, step.grads)
        } else {
            module
        }
    }
}
