//! The precision audit for Burn 0.22 models: where f16 breaks, and a remedy that was tried.
//!
//! [`audit`] runs a few training steps of your model, optimizer and loss at bf16 (f32's range,
//! so values an f16 run would lose are seen as they are; at f32 on a device without bf16, see
//! [`measured_policy`]) and measures:
//!
//! - every parameter's gradient, by module path: magnitudes, headroom to f16 and bf16, the
//!   share that would flush to zero at f16 at a candidate scale;
//! - the loss, the output of every [`FullPrecision`](crate::FullPrecision) module before it
//!   is cast back to the compute dtype (`FullPrecision<Linear> output`), and every forward
//!   value your loss closure hands to [`observe`] (the model's output, say).
//!
//! The verdicts are the 0.21 audit's (burn-mpric-core's [`param_verdicts`]): not finite,
//! f16 safe at 2^k, use bf16, bf16 safe, plus a forward value over f16's range. Then it
//! *tries* the audited policy for a few steps with a dynamic loss scale from the proposed
//! initial scale ([`LossScaler::step_with`], so each skipped step's cause is known), and when
//! f16 fails there, it locates the hot spot (the forward values over f16, the parameters whose
//! gradients overflow first, the fields of your module that hold them) and tries each remedy
//! it can apply itself (bf16 for the model; a lower initial scale), reporting whether it
//! trained without skips after the first [`GRACE_STEPS`].
//!
//! # What it cannot see
//!
//! Burn 0.22 has no backend to decorate and no forward hooks, so activations inside a module
//! are invisible: an f16 overflow inside burn-nn's `TransformerEncoder` shows as a loss that
//! is not finite in the trial, located to the field that holds it only when its gradients or
//! an observed value say so. Wrapping a field in [`FullPrecision`](crate::FullPrecision)
//! changes your model's type, so that remedy is printed with its code but not run: audit the
//! wrapped model again to check it.
//!
//! # Example
//!
//! ```
//! use burn::nn::{Linear, LinearConfig};
//! use burn::optim::AdamConfig;
//! use burn::tensor::{Device, Tensor};
//! use burn_mpric_022::audit::{AuditConfig, audit};
//! use burn_mpric_022::{cast_for_compute, cast_for_output};
//!
//! let device = Device::flex().autodiff();
//! let model: Linear = LinearConfig::new(4, 2).init(&device);
//! let x = Tensor::<2>::ones([8, 4], &device);
//! let found = audit(
//!     model,
//!     || AdamConfig::new().init(),
//!     "mixed_f16".parse().unwrap(),
//!     AuditConfig::new(2),
//!     |m: &Linear, policy, _step| cast_for_output(m.forward(cast_for_compute(x.clone(), policy)), policy).powi_scalar(2).mean(),
//! )
//! .unwrap();
//! assert!(found.f16_trains(), "{found}");
//! assert!(found.remedies.is_empty(), "a model that is fine gets no remedy");
//! ```

mod measure;

pub use crate::observe::observe;

use std::fmt;

use burn::module::Module;
use burn::optim::{GradientsParams, ModuleOptimizer};
use burn::tensor::Tensor;
use burn_mpric_core::audit::{AuditReport, OpStats, ParamStats, Phase, Verdict};
pub use burn_mpric_core::audit::{
    GRACE_STEPS, HotSpot, Magnitudes, Remedy, Trial, param_verdicts, remedy_summary,
};
use burn_mpric_core::scale::{LossScaleConfig, SkipCause};
use burn_mpric_core::{FloatDType, ResolvedPolicy};

use crate::autocast::{Autocast, AutocastError};
use crate::dtype::supported_float_dtypes;
use crate::error::StepError;
use crate::scaler::LossScaler;

/// How an [`audit`] runs.
///
/// # Example
///
/// ```
/// use burn_mpric_022::audit::AuditConfig;
///
/// let config = AuditConfig::new(3).with_lr(0.01).with_trial_steps(6);
/// assert_eq!((config.steps, config.lr, config.trial_steps), (3, 0.01, 6));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AuditConfig {
    /// Steps measured at bf16 (at least 1).
    pub steps: usize,
    /// The learning rate of every step.
    pub lr: f64,
    /// Steps of each trial (the audited policy, each remedy): more than [`GRACE_STEPS`].
    pub trial_steps: usize,
}

impl AuditConfig {
    /// `steps` measured steps at a learning rate of 1e-3, trials of 8 steps.
    ///
    /// # Example
    ///
    /// ```
    /// assert_eq!(burn_mpric_022::audit::AuditConfig::new(2).trial_steps, 8);
    /// ```
    pub fn new(steps: usize) -> Self {
        Self {
            steps,
            lr: 1e-3,
            trial_steps: 8,
        }
    }

    /// Another learning rate.
    ///
    /// # Example
    ///
    /// ```
    /// assert_eq!(burn_mpric_022::audit::AuditConfig::new(1).with_lr(0.1).lr, 0.1);
    /// ```
    #[must_use]
    pub fn with_lr(self, lr: f64) -> Self {
        Self { lr, ..self }
    }

    /// Another trial length.
    ///
    /// # Example
    ///
    /// ```
    /// assert_eq!(burn_mpric_022::audit::AuditConfig::new(1).with_trial_steps(4).trial_steps, 4);
    /// ```
    #[must_use]
    pub fn with_trial_steps(self, trial_steps: usize) -> Self {
        Self {
            trial_steps,
            ..self
        }
    }
}

/// Why an audit could not run.
///
/// # Example
///
/// ```
/// use burn_mpric_022::audit::AuditError;
///
/// assert!(AuditError::NoSteps.to_string().contains("at least one step"));
/// ```
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// Zero measured steps were asked for.
    #[error("an audit measures at least one step; 0 were asked for")]
    NoSteps,
    /// Trials too short to tell a backoff from a failure.
    #[error(
        "a trial runs more than {GRACE_STEPS} steps (the first {GRACE_STEPS} may skip while the scale fits); {0} were asked for"
    )]
    ShortTrial(usize),
    /// The policy cannot be applied to the model (a device that cannot run it, ...).
    #[error(transparent)]
    Autocast(#[from] AutocastError),
    /// A loss scale the audit would try is not valid.
    #[error(transparent)]
    Scale(#[from] burn_mpric_core::scale::LossScaleError),
    /// A step failed (a read from the device, a gradient of the wrong shape).
    #[error(transparent)]
    Step(#[from] StepError),
}

/// What [`audit`] found.
#[derive(Debug, Clone)]
pub struct ModelAudit {
    /// The measured steps and the verdicts (burn-mpric-core's report: `ops` holds the
    /// forward values seen, `params` the gradients).
    pub report: AuditReport,
    /// The audited policy tried for a few steps.
    pub trial: Trial,
    /// Where f16 breaks, when the trial failed.
    pub hot_spot: Option<HotSpot>,
    /// The remedies, each tried where the audit can apply it; empty when the trial trained.
    pub remedies: Vec<Remedy>,
}

impl ModelAudit {
    /// Whether the audited policy trained without skips after the first few steps.
    ///
    /// See the [module docs](self) for an example.
    pub fn f16_trains(&self) -> bool {
        self.trial.trains()
    }

    /// The remedies whose trial trained.
    ///
    /// See the [module docs](self) for an example.
    pub fn working_remedies(&self) -> impl Iterator<Item = &Remedy> {
        self.remedies
            .iter()
            .filter(|r| r.tried.as_ref().is_some_and(Trial::trains))
    }
}

impl fmt::Display for ModelAudit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = &self.report;
        writeln!(
            f,
            "audit of {} (measured at {}, {} steps)",
            r.audited, r.measured_at, r.steps
        )?;
        for verdict in &r.verdicts {
            // A verdict the trial below contradicts says so on its own line.
            writeln!(f, "- {}", verdict.line_with(&self.trial))?;
        }
        writeln!(f, "trial: {}", self.trial)?;
        if let Some(spot) = &self.hot_spot {
            writeln!(f, "hot spot: {spot}")?;
        }
        if let Some(summary) = remedy_summary(&self.trial, &self.remedies) {
            writeln!(f, "{summary}")?;
        }
        for remedy in &self.remedies {
            writeln!(f, "remedy: {remedy}")?;
        }
        Ok(())
    }
}

/// Audits `policy` on `model` (bare, on an autodiff device): measures `config.steps` steps at
/// bf16, tries the policy, and when it fails locates the hot spot and tries the remedies; see
/// the [module docs](self). `loss(&model, &policy, step)` computes a step's loss under
/// `policy` (cast the batch with [`cast_for_compute`](crate::cast_for_compute)); it must
/// compute the same batch for the same step. `optimizer` makes a fresh optimizer for each run.
///
/// # Errors
///
/// [`AuditError`]: no steps, a trial of at most [`GRACE_STEPS`] steps, a policy the model's
/// device cannot run (or a model the policy cannot be applied to), a failed read.
///
/// See the [module docs](self) for an example.
pub fn audit<M: Module>(
    model: M,
    optimizer: impl Fn() -> ModuleOptimizer,
    policy: ResolvedPolicy,
    config: AuditConfig,
    mut loss: impl FnMut(&M, &ResolvedPolicy, usize) -> Tensor<1>,
) -> Result<ModelAudit, AuditError> {
    if config.steps == 0 {
        return Err(AuditError::NoSteps);
    }
    if config.trial_steps <= GRACE_STEPS {
        return Err(AuditError::ShortTrial(config.trial_steps));
    }
    // The audited policy must run here (the same error a training run would meet).
    Autocast::new(policy).apply(model.clone())?;
    let measured = measured_policy(policy, &supported_float_dtypes(&first_device(&model)));

    let (forward, params) = measure(&model, &optimizer, measured, config, &mut loss)?;
    // Parameters the audited policy keeps at full precision (FullPrecision fields, ...) get
    // their gradients at the param dtype: no loss scale has to fit them into f16.
    let low: Vec<String> = Autocast::new(policy)
        .plan(&model)?
        .into_iter()
        .filter(|p| p.kept.is_none() && p.used != p.stored)
        .map(|p| p.path)
        .collect();
    let scaled: Vec<ParamStats> = params
        .iter()
        .filter(|p| low.contains(&p.path))
        .cloned()
        .collect();
    let verdicts = param_verdicts(&forward, &scaled);
    let proposed = verdicts.iter().find_map(|v| match v {
        Verdict::F16Safe { initial_scale, .. } | Verdict::UseBf16 { initial_scale, .. } => {
            Some(*initial_scale)
        }
        _ => None,
    });
    let initial = if policy.computes_in_f16() {
        proposed.unwrap_or(LossScaleConfig::new().initial_scale)
    } else {
        1.0
    };
    let report = AuditReport {
        verdicts,
        ..AuditReport::new(
            config.steps,
            policy.to_string(),
            measured.to_string(),
            initial,
            forward,
            params,
        )
    };
    let trial = try_policy(&model, &optimizer, policy, initial, config, &mut loss)?;
    if trial.trains() {
        return Ok(ModelAudit {
            report,
            trial,
            hot_spot: None,
            remedies: Vec::new(),
        });
    }

    let hot_spot = HotSpot::locate(&report, &scaled, &trial, &measure::fields(&model));
    let mut remedies = Vec::new();
    if let Some(spot) = &hot_spot {
        for (field, ty) in &spot.fields {
            remedies.push(Remedy::keep_field(field, ty));
        }
    }
    if policy.computes_in_f16() {
        let range = trial.cause.as_ref().is_none_or(SkipCause::is_range);
        if range && initial > 1.0 {
            let lower = Remedy::lower_scale(initial);
            let tried = try_policy(&model, &optimizer, policy, lower, config, &mut loss)?;
            remedies.push(Remedy::initial_scale(lower, tried));
        }
        let bf16 = ResolvedPolicy::new(policy.param(), FloatDType::BF16, policy.output());
        if supported_float_dtypes(&first_device(&model)).contains(&FloatDType::BF16) {
            let tried = try_policy(&model, &optimizer, bf16, 1.0, config, &mut loss)?;
            remedies.push(Remedy::compute_at_bf16(bf16, tried));
        }
    }
    Ok(ModelAudit {
        report,
        trial,
        hot_spot,
        remedies,
    })
}

/// The policy an audit of `policy` measures its steps at on a device that runs the float
/// dtypes `supported`: burn-mpric-core's [`measured_policy`](burn_mpric_core::audit::measured_policy),
/// the rule the Burn 0.21 edition's `measurement_settings` follows too (every f16 slot at
/// bf16, or at f32 where the device has no bf16, so that values f16 would lose are seen).
///
/// # Example
///
/// ```
/// use burn_mpric_core::FloatDType::{BF16, F16, F32};
/// use burn_mpric_022::audit::measured_policy;
///
/// let pure_f16 = "p=f16,c=f16,o=f16".parse().unwrap();
/// assert_eq!(measured_policy(pure_f16, &[F32, F16, BF16]).to_string(), "p=bf16,c=bf16,o=bf16");
/// assert_eq!(measured_policy(pure_f16, &[F32, F16]).to_string(), "p=f32,c=f32,o=f32");
/// ```
pub fn measured_policy(policy: ResolvedPolicy, supported: &[FloatDType]) -> ResolvedPolicy {
    burn_mpric_core::audit::measured_policy(&policy.into(), supported.contains(&FloatDType::BF16))
}

fn first_device<M: Module>(model: &M) -> burn::tensor::Device {
    model
        .devices()
        .into_iter()
        .next()
        .unwrap_or_else(burn::tensor::Device::flex)
}

/// The measured steps: forward values and gradients at `measured`.
fn measure<M: Module>(
    model: &M,
    optimizer: &impl Fn() -> ModuleOptimizer,
    measured: ResolvedPolicy,
    config: AuditConfig,
    loss: &mut impl FnMut(&M, &ResolvedPolicy, usize) -> Tensor<1>,
) -> Result<(Vec<OpStats>, Vec<ParamStats>), AuditError> {
    let mut model = Autocast::new(measured).apply(model.clone())?;
    let mut optim = optimizer();
    let mut forward: Vec<OpStats> = Vec::new();
    let mut params = Vec::new();
    for step in 0..config.steps {
        let (value, mut seen) = crate::observe::observing(|| {
            let value = loss(&model, &measured, step);
            observe("loss", &value);
            value
        });
        // The loss last; values seen at the compute dtype are the ones f16 would hold.
        let loss_row = seen.iter().position(|(n, _)| n == "loss");
        for (i, (name, values)) in seen.drain(..).enumerate() {
            match forward.iter_mut().find(|r| r.method == name) {
                Some(row) => {
                    row.calls += 1;
                    row.values.merge(&values);
                }
                None => forward.push(OpStats {
                    method: name,
                    op: None,
                    phase: Phase::Forward,
                    dtype: measured.compute().to_string(),
                    low: Some(i) != loss_row,
                    calls: 1,
                    values,
                }),
            }
        }
        let grads = GradientsParams::from_grads(value.backward(), &model);
        if measure::add_gradients(&model, &grads, &mut params)? {
            model = optim.step(config.lr, model, grads);
        }
    }
    Ok((forward, params))
}

/// `config.trial_steps` steps at `policy` from `initial_scale` (dynamic when above 1).
fn try_policy<M: Module>(
    model: &M,
    optimizer: &impl Fn() -> ModuleOptimizer,
    policy: ResolvedPolicy,
    initial_scale: f32,
    config: AuditConfig,
    loss: &mut impl FnMut(&M, &ResolvedPolicy, usize) -> Tensor<1>,
) -> Result<Trial, AuditError> {
    let mut model = Autocast::new(policy).apply(model.clone())?;
    let mut optim = optimizer();
    let scaler = if initial_scale > 1.0 {
        LossScaler::dynamic(LossScaleConfig::new().with_initial_scale(initial_scale))?
    } else {
        LossScaler::noop()
    };
    let mut scaler = scaler.with_max_consecutive_skips(0);
    let mut trial = Trial::new(policy.to_string(), initial_scale, config.trial_steps);
    for step in 0..config.trial_steps {
        // The measured steps' batches, in order, again.
        let batch = step % config.steps;
        let (next, outcome) =
            scaler.step_with(&mut optim, config.lr, model, |m| loss(m, &policy, batch));
        model = next;
        let outcome = outcome?;
        let skipped = outcome.is_skipped();
        trial.record(step, skipped, outcome.overflow.as_ref(), outcome.cause);
    }
    Ok(trial)
}

#[cfg(test)]
mod tests {
    use burn_mpric_core::scale::SkipCause;

    use super::*;

    /// An overflow inside a library module: the measured gradients fit f16 at 2^18, the trial
    /// at f16 finds the loss itself not finite at every step.
    #[test]
    fn a_verdict_the_trial_contradicts_says_so_next_to_it() {
        let safe = Verdict::F16Safe {
            initial_scale: 262144.0,
            largest_exp: -20,
            flushed: 0.0,
            keeping_full: vec![],
        };
        let audited = "p=f32,c=f16,o=f32";
        let report = AuditReport {
            verdicts: vec![safe],
            ..AuditReport::new(2, audited, "p=f32,c=bf16,o=f32", 262144.0, vec![], vec![])
        };
        let cause = SkipCause::LossNotFinite {
            scale: 262144.0,
            probe_scale: 1.0 / 256.0,
        };
        let trial = Trial {
            skipped: (0..8).collect(),
            cause: Some(cause),
            ..Trial::new(audited, 262144.0, 8)
        };
        let found = ModelAudit {
            report,
            trial,
            hot_spot: None,
            remedies: vec![],
        };
        let text = found.to_string();
        let verdict = text.lines().nth(1).unwrap();
        assert_eq!(
            verdict,
            "- f16 is safe with an initial scale of 2^18: the largest gradient then reaches 2^-2 (f16 ends at 2^15) and 0.00% of the gradient values flush to zero — but the trial below did not train: 6 of its 8 steps skipped after the first 2 (the loss itself was not finite)"
        );
        assert!(
            text.lines()
                .any(|l| l == "no remedy the audit could run trained without skips"),
            "{text}"
        );
    }
}
