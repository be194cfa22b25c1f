//! The precision audit: a few training steps measured op by op, and what they say about
//! running the model at f16 or bf16 ([`audit`], and [`Audit`] for a loop of your own).
//!
//! The steps run on `Autodiff<MixedPrecision<Instrumented<B>>>` at [`measurement_settings`]:
//! the audited settings with f16 replaced by bf16 (f32 on a device without bf16), whose range
//! is f32's, so that values an f16 run would lose (overflow to inf, flush to zero) are seen as
//! they are. Every float
//! output of every op is read to the host: an audit costs far more than a training step.

use std::cell::RefCell;
use std::rc::Rc;

use burn::module::AutodiffModule;
use burn::optim::{GradientsParams, Optimizer};
use burn::tensor::Tensor;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn_backend::DType;
use burn_mpric_core::OpCategory;

pub use burn_mpric_core::audit::{
    AuditReport, BF16_MAX, BF16_MIN_NORMAL_EXP, F16_MAX, F16_MIN_NORMAL_EXP, F16_MIN_SUBNORMAL_EXP,
    FLUSH_LIMIT, GRACE_STEPS, HotSpot, Magnitudes, OpStats, ParamStats, Phase, Remedy, Trial,
    Verdict, measured_policy, remedy_summary,
};

use crate::MpSettings;
use crate::instrument::{OpOutput, observe_outputs};

/// Why an audit could not run.
///
/// ```
/// use burn_mpric::audit::AuditError;
///
/// assert!(AuditError::NoSteps.to_string().contains("at least one step"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuditError {
    /// Zero steps were asked for.
    #[error("an audit measures at least one step; 0 were asked for")]
    NoSteps,
    /// No op output was seen: the model does not run on an `Instrumented` backend.
    #[error(
        "no op output was seen: the model must run on Autodiff<MixedPrecision<Instrumented<B>>> (burn_mpric::instrument::Instrumented)"
    )]
    NothingObserved,
}

/// The settings an audit of `audited` measures at, on a device that runs bf16 or not
/// (`bf16`): burn-mpric-core's [`measured_policy`] (every f16 slot at bf16, or at f32 without
/// bf16; the compute dtype at bf16, or at the measured param dtype without it, and which ops
/// run low is then read from the op table), with op overrides and modes kept. The Burn 0.22
/// edition measures at the same policy.
///
/// ```
/// use burn_mpric::{MpSettings, Op, OpCategory, Policy};
/// use burn_mpric::audit::measurement_settings;
///
/// let audited = MpSettings::new("mixed_f16".parse::<Policy>().unwrap())
///     .with_category(Op::Linear, OpCategory::FullPrecision);
/// let measured = measurement_settings(&audited, true);
/// assert_eq!(measured.policy().to_string(), "p=f32,c=bf16,o=f32");
/// assert_eq!(measured.category(Op::Linear), OpCategory::FullPrecision);
/// assert_eq!(measurement_settings(&MpSettings::new(Policy::F32), true).policy().to_string(), "p=f32,c=bf16,o=f32");
/// assert_eq!(measurement_settings(&audited, false).policy().to_string(), "p=f32,c=f32,o=f32");
/// let pure_f16 = MpSettings::new("p=f16,c=f16,o=f16".parse::<Policy>().unwrap());
/// assert_eq!(measurement_settings(&pure_f16, false).policy().to_string(), "p=f32,c=f32,o=f32");
/// ```
pub fn measurement_settings(audited: &MpSettings, bf16: bool) -> MpSettings {
    let measured = measured_policy(&audited.policy(), bf16);
    audited.clone().with_policy(measured.into())
}

/// How an [`audit`] runs.
///
/// ```
/// use burn_mpric::audit::AuditConfig;
///
/// let config = AuditConfig::new(3).with_lr(0.01).with_loss_scale(1024.0);
/// assert_eq!((config.steps, config.lr, config.loss_scale), (3, 0.01, 1024.0));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AuditConfig {
    /// Training steps to measure (at least 1).
    pub steps: usize,
    /// The optimizer's learning rate for them.
    pub lr: f64,
    /// The loss scale the report gives the backward shares at (the run's first scale). The
    /// steps themselves run unscaled: at the measured precision scaling changes nothing.
    pub loss_scale: f32,
}

impl AuditConfig {
    /// `steps` steps at a learning rate of 1e-3, shares at a loss scale of 1.
    ///
    /// ```
    /// use burn_mpric::audit::AuditConfig;
    ///
    /// assert_eq!(AuditConfig::new(5).loss_scale, 1.0);
    /// ```
    pub fn new(steps: usize) -> Self {
        Self {
            steps,
            lr: 1e-3,
            loss_scale: 1.0,
        }
    }

    /// Another learning rate.
    ///
    /// ```
    /// use burn_mpric::audit::AuditConfig;
    ///
    /// assert_eq!(AuditConfig::new(1).with_lr(0.5).lr, 0.5);
    /// ```
    #[must_use]
    pub fn with_lr(self, lr: f64) -> Self {
        Self { lr, ..self }
    }

    /// Another loss scale for the shares.
    ///
    /// ```
    /// use burn_mpric::audit::AuditConfig;
    ///
    /// assert_eq!(AuditConfig::new(1).with_loss_scale(8.0).loss_scale, 8.0);
    /// ```
    #[must_use]
    pub fn with_loss_scale(self, loss_scale: f32) -> Self {
        Self { loss_scale, ..self }
    }
}

/// Audits `audited` on a model: runs `config.steps` training steps, each with the loss
/// `loss(&model, step)` and an optimizer step, and reports every op's outputs and every
/// parameter's gradient with the [`Verdict`]s they imply.
///
/// The model must live on a device of `Autodiff<MixedPrecision<Instrumented<B>>>` made with
/// [`measurement_settings`]`(audited, ...)`. A step whose gradients are not finite is not
/// applied (the report's verdict says so).
///
/// ```
/// use burn::backend::{Autodiff, Flex};
/// use burn::nn::{Linear, LinearConfig};
/// use burn::optim::SgdConfig;
/// use burn::tensor::Tensor;
/// use burn_mpric::{MixedPrecision, MpSettings, Policy};
/// use burn_mpric::audit::{AuditConfig, Verdict, audit, measurement_settings};
/// use burn_mpric::instrument::Instrumented;
///
/// type B = Autodiff<MixedPrecision<Instrumented<Flex>>>;
/// let audited = MpSettings::new("mixed_f16".parse::<Policy>()?);
/// let device = MixedPrecision::<Instrumented<Flex>>::device(
///     Default::default(),
///     measurement_settings(&audited, true),
/// )?;
/// let model: Linear<B> = LinearConfig::new(4, 2).init(&device);
/// let x = Tensor::<B, 2>::ones([8, 4], &device);
/// let report = audit(model, SgdConfig::new().init(), &audited, AuditConfig::new(2), |m: &Linear<B>, _| {
///     m.forward(x.clone()).powi_scalar(2).mean()
/// })?;
/// assert_eq!(report.steps, 2);
/// assert!(report.ops.iter().any(|r| r.method == "linear" && r.low));
/// assert_eq!(report.params.len(), 2, "weight and bias");
/// assert!(report.verdicts.iter().any(|v| matches!(v, Verdict::F16Safe { .. })));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn audit<B, M, O>(
    mut model: M,
    mut optim: O,
    audited: &MpSettings,
    config: AuditConfig,
    mut loss: impl FnMut(&M, usize) -> Tensor<B, 1>,
) -> Result<AuditReport, AuditError>
where
    B: AutodiffBackend,
    M: AutodiffModule<B>,
    O: Optimizer<M, B>,
{
    if config.steps == 0 {
        return Err(AuditError::NoSteps);
    }
    let mut audit = Audit::new(audited);
    for step in 0..config.steps {
        let value = audit.forward(|| loss(&model, step));
        let grads = audit.backward(value);
        let grads = GradientsParams::from_grads(grads, &model);
        if audit.gradients(&model, &grads) {
            model = optim.step(config.lr, model, grads);
        }
    }
    audit.report(config.steps, config.loss_scale)
}

/// The measuring part of [`audit`], for a training loop of your own: run the forward pass
/// in [`Audit::forward`], the backward pass through [`Audit::backward`], hand the
/// parameters' gradients to [`Audit::gradients`], then take the [`Audit::report`].
///
/// ```
/// use burn::backend::{Autodiff, Flex};
/// use burn::optim::GradientsParams;
/// use burn::nn::{Linear, LinearConfig};
/// use burn::tensor::Tensor;
/// use burn_mpric::{MixedPrecision, MpSettings, Policy};
/// use burn_mpric::audit::{Audit, Phase, measurement_settings};
/// use burn_mpric::instrument::Instrumented;
///
/// type B = Autodiff<MixedPrecision<Instrumented<Flex>>>;
/// let audited = MpSettings::new("mixed_bf16".parse::<Policy>()?);
/// let device = MixedPrecision::<Instrumented<Flex>>::device(Default::default(), measurement_settings(&audited, true))?;
/// let model: Linear<B> = LinearConfig::new(3, 1).init(&device);
/// let mut audit = Audit::new(&audited);
/// let loss = audit.forward(|| model.forward(Tensor::<B, 2>::ones([2, 3], &device)).sum());
/// let grads = GradientsParams::from_grads(audit.backward(loss), &model);
/// assert!(audit.gradients(&model, &grads), "finite");
/// let report = audit.report(1, 1.0)?;
/// assert!(report.ops.iter().any(|r| r.phase == Phase::Backward));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Audit {
    audited: MpSettings,
    ops: Rc<RefCell<Vec<Seen>>>,
    params: Vec<ParamStats>,
}

/// One op's outputs so far, keyed by pass, method and dtype.
struct Seen {
    phase: Phase,
    method: &'static str,
    op: Option<crate::Op>,
    dtype: DType,
    calls: u64,
    values: Magnitudes,
}

impl Audit {
    /// An empty audit of `audited`.
    ///
    /// ```
    /// use burn_mpric::{MpSettings, Policy};
    /// use burn_mpric::audit::{Audit, AuditError};
    ///
    /// let audit = Audit::new(&MpSettings::new(Policy::F32));
    /// assert_eq!(audit.report(1, 1.0).unwrap_err(), AuditError::NothingObserved);
    /// ```
    pub fn new(audited: &MpSettings) -> Self {
        Self {
            audited: audited.clone(),
            ops: Rc::new(RefCell::new(Vec::new())),
            params: Vec::new(),
        }
    }

    fn observing<R>(&self, phase: Phase, f: impl FnOnce() -> R) -> R {
        let ops = self.ops.clone();
        let hook = Rc::new(move |out: OpOutput<'_>| {
            let mut ops = ops.borrow_mut();
            let index = match ops
                .iter()
                .position(|s| s.phase == phase && s.method == out.method && s.dtype == out.dtype)
            {
                Some(i) => i,
                None => {
                    ops.push(Seen {
                        phase,
                        method: out.method,
                        op: out.op,
                        dtype: out.dtype,
                        calls: 0,
                        values: Magnitudes::default(),
                    });
                    ops.len() - 1
                }
            };
            let seen = &mut ops[index];
            seen.calls += 1;
            seen.values.add(out.values);
        });
        observe_outputs(hook, f)
    }

    /// Runs the forward pass `f` (the model and the loss), measuring its ops.
    ///
    /// See [`Audit`] for an example.
    pub fn forward<R>(&self, f: impl FnOnce() -> R) -> R {
        self.observing(Phase::Forward, f)
    }

    /// The backward pass of `loss`, measuring its ops.
    ///
    /// See [`Audit`] for an example.
    pub fn backward<B: AutodiffBackend>(&self, loss: Tensor<B, 1>) -> B::Gradients {
        self.observing(Phase::Backward, || loss.backward())
    }

    /// Measures the gradients of `model`'s parameters, by module path; returns whether all
    /// are finite (whether the step may be applied).
    ///
    /// See [`Audit`] for an example.
    pub fn gradients<B: AutodiffBackend, M: AutodiffModule<B>>(
        &mut self,
        model: &M,
        grads: &GradientsParams,
    ) -> bool {
        let mut finite = true;
        for (path, grad) in burn_mpric_scale::named_grads(model, std::slice::from_ref(grads)) {
            let values = grad.into_data().iter::<f32>().collect::<Vec<f32>>();
            let index = match self.params.iter().position(|p| p.path == path) {
                Some(i) => i,
                None => {
                    self.params.push(ParamStats {
                        path,
                        grad: Magnitudes::default(),
                    });
                    self.params.len() - 1
                }
            };
            let before = self.params[index].grad.non_finite;
            self.params[index].grad.add(&values);
            finite &= self.params[index].grad.non_finite == before;
        }
        finite
    }

    /// The report of `steps` measured steps, with backward shares at `loss_scale`.
    ///
    /// See [`Audit`] for an example.
    pub fn report(self, steps: usize, loss_scale: f32) -> Result<AuditReport, AuditError> {
        if steps == 0 {
            return Err(AuditError::NoSteps);
        }
        let seen = std::mem::take(&mut *self.ops.borrow_mut());
        if seen.is_empty() {
            return Err(AuditError::NothingObserved);
        }
        let is_half = |d: DType| matches!(d, DType::F16 | DType::BF16);
        // Measured at a half dtype, the ops that ran at it are the low ones; measured wide
        // (a device without bf16), the op table says which would be.
        let measured_low = seen.iter().any(|s| is_half(s.dtype));
        let audited_policy = self.audited.policy();
        let compute = audited_policy.compute().to_string();
        let mut ops: Vec<OpStats> = seen
            .into_iter()
            .map(|s| {
                let low = if measured_low {
                    is_half(s.dtype)
                } else {
                    s.op.is_some_and(|op| self.audited.category(op) != OpCategory::FullPrecision)
                };
                OpStats {
                    method: s.method.to_string(),
                    op: s.op.map(|op| op.name().to_string()),
                    phase: s.phase,
                    dtype: if low {
                        compute.clone()
                    } else {
                        float_name(s.dtype)
                    },
                    low,
                    calls: s.calls,
                    values: s.values,
                }
            })
            .collect();
        ops.sort_by_key(|r| r.phase);
        let measured = measurement_settings(&self.audited, measured_low).policy();
        Ok(AuditReport::new(
            steps,
            audited_policy.to_string(),
            measured.to_string(),
            loss_scale,
            ops,
            self.params,
        ))
    }
}

/// Whether `B`'s device runs bf16: the audit measures there when it does.
///
/// ```
/// use burn::backend::Flex;
/// use burn_mpric::audit::supports_bf16;
///
/// assert!(supports_bf16::<Flex>(&Default::default()));
/// ```
pub fn supports_bf16<B: Backend>(device: &B::Device) -> bool {
    B::supports_dtype(device, DType::BF16)
}

/// A float dtype's short name (`f32`, `bf16`).
fn float_name(dtype: DType) -> String {
    match dtype {
        DType::F64 => "f64".into(),
        DType::F32 => "f32".into(),
        DType::Flex32 => "flex32".into(),
        DType::F16 => "f16".into(),
        DType::BF16 => "bf16".into(),
        other => format!("{other:?}").to_lowercase(),
    }
}
