//! [`LossScaler::step_with`]: a step that runs the loss itself, so that a step whose
//! gradients are not finite (or all zero) can be run once more at a scale 2^8 away and its
//! [`SkipCause`] told; and [`LossScaler::probe_cause`], the same probe for a step already
//! taken. The 0.21 edition's twin is burn-mpric-scale's `probe.rs`.

use burn::module::Module;
use burn::optim::lr_scheduler::module_lr_scheduler::ModuleLearningRate;
use burn::optim::{GradientsParams, ModuleOptimizer};
use burn::tensor::{FloatDType, Tensor};
use burn_mpric_core::scale::{Probe, ProbeRead, SkipCause, StepOutcome};

use crate::error::StepError;
use crate::scaler::{LossScaler, check_grads};

impl LossScaler {
    /// One step that runs `loss` itself, so that a step whose gradients are not finite, or
    /// all zero, can be told apart: the same batch runs once more at a scale at least 2^8 lower and at most 2^-8 (2^8
    /// higher for zero gradients), on those steps only, and the outcome's
    /// [`cause`](StepOutcome::cause) says whether the problem moves with the scale
    /// ([`SkipCause::Range`]), whether the loss itself is not finite
    /// ([`SkipCause::LossNotFinite`]), or neither: "not a range problem"
    /// ([`SkipCause::ScaleInvariant`], a kernel that computes wrongly at this dtype). Applied
    /// steps with non-zero gradients cost what [`step_with_loss`](Self::step_with_loss)
    /// costs. `loss` must compute the same batch each time it is called.
    ///
    /// # Errors
    ///
    /// As [`step`](Self::step).
    ///
    /// # Example
    ///
    /// ```
    /// use burn::nn::LinearConfig;
    /// use burn::optim::SgdConfig;
    /// use burn::tensor::{Device, Tensor};
    /// use burn_mpric_022::LossScaler;
    /// use burn_mpric_core::scale::SkipCause;
    ///
    /// let device = Device::flex().autodiff();
    /// let model = LinearConfig::new(1, 1).with_bias(false).init(&device);
    /// let x = Tensor::<2>::from_floats([[1.0]], &device);
    /// // sqrt's gradient at 0 is infinite whatever the scale: a planted kernel bug.
    /// let broken = |m: &burn::nn::Linear| m.forward(x.clone()).mul_scalar(0.0).sqrt().sum();
    /// let mut scaler = LossScaler::default();
    /// let (_, outcome) = scaler.step_with(&mut SgdConfig::new().init(), 0.1, model, broken);
    /// let outcome = outcome.unwrap();
    /// assert!(outcome.is_skipped());
    /// assert!(matches!(outcome.cause, Some(SkipCause::ScaleInvariant { .. })));
    /// ```
    pub fn step_with<M: Module>(
        &mut self,
        optim: &mut ModuleOptimizer,
        lr: impl Into<ModuleLearningRate>,
        module: M,
        mut loss: impl FnMut(&M) -> Tensor<1>,
    ) -> (M, Result<StepOutcome, StepError>) {
        let scaled = self.scale_loss(loss(&module));
        let grads = GradientsParams::from_grads(scaled.backward(), &module);
        let mut probe = |module: &M, read: ProbeRead, scale: f32, params: Vec<String>| {
            let probe = Probe {
                read,
                loss_read: true,
                scale,
                params,
            };
            self_probe(module, probe, &mut loss)
        };
        self.step_inner(
            optim,
            lr.into(),
            module,
            grads,
            Some(scaled),
            Some(&mut probe),
        )
    }

    /// The probe of a step already taken: when `outcome` was skipped, runs `loss` (the
    /// step's batch, on `module` as it was) once at the probe's scale and returns the
    /// [`SkipCause`]; `None` for an applied step. [`step_with`](Self::step_with) does this
    /// itself; this is for loops, like burn-train's `Learner`, where the step and the batch
    /// part ways.
    ///
    /// # Errors
    ///
    /// [`StepError`]: a failed read.
    ///
    /// # Example
    ///
    /// ```
    /// use burn::nn::LinearConfig;
    /// use burn::optim::{GradientsParams, SgdConfig};
    /// use burn::tensor::{Device, Tensor};
    /// use burn_mpric_022::LossScaler;
    /// use burn_mpric_core::scale::SkipCause;
    ///
    /// let device = Device::flex().autodiff();
    /// let model = LinearConfig::new(1, 1).with_bias(false).init(&device);
    /// let x = Tensor::<2>::ones([1, 1], &device);
    /// let broken = |m: &burn::nn::Linear| m.forward(x.clone()).mul_scalar(0.0).sqrt().sum();
    /// let mut scaler = LossScaler::default();
    /// let scaled = scaler.scale_loss(broken(&model));
    /// let grads = GradientsParams::from_grads(scaled.backward(), &model);
    /// let (model, outcome) = scaler.step_with_loss(&mut SgdConfig::new().init(), 0.1, model, grads, scaled);
    /// let outcome = outcome.unwrap();
    /// let cause = scaler.probe_cause(&model, &outcome, broken).unwrap();
    /// assert!(matches!(cause, Some(SkipCause::ScaleInvariant { .. })));
    /// ```
    pub fn probe_cause<M: Module>(
        &self,
        module: &M,
        outcome: &StepOutcome,
        loss: impl FnOnce(&M) -> Tensor<1>,
    ) -> Result<Option<SkipCause>, StepError> {
        match Probe::of_skipped(outcome) {
            Some(probe) => self_probe(module, probe, loss).map(Some),
            None => Ok(None),
        }
    }
}

/// Runs `loss` once more at the probe scale, unscales and checks its gradients without
/// clipping, and judges the cause.
fn self_probe<M: Module>(
    module: &M,
    probe: Probe,
    loss: impl FnOnce(&M) -> Tensor<1>,
) -> Result<SkipCause, StepError> {
    let probe_scale = probe.probe_scale();
    let value = loss(module);
    let value = match crate::dtype::plain_float(value.dtype()) {
        Some(FloatDType::F16 | FloatDType::BF16) => value.cast(FloatDType::F32),
        _ => value,
    };
    let scaled = value.mul_scalar(probe_scale);
    let grads = GradientsParams::from_grads(scaled.backward(), module);
    let mean = scaled.without_autodiff().cast(FloatDType::F32).mean();
    let checked = check_grads(module, grads, probe_scale, None, Some(mean), true)?;
    let probed = ProbeRead::of(checked.loss, checked.finite, checked.zero);
    // The parameters still non-finite at the probe's scale (one more read, here only).
    let still = if checked.finite {
        Vec::new()
    } else {
        crate::overflow::find_overflow(module, &checked.grads)?.params
    };
    Ok(probe.judge(probed, &still))
}
