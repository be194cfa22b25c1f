//! [`LossScaler::step_with`]: a step that runs the loss itself, so that a step whose
//! gradients are not finite (or all zero) can be run once more at a scale 2^8 away and its
//! [`SkipCause`] told: a range problem, a loss that is not finite, or neither.

use burn::module::AutodiffModule;
use burn::optim::{GradientsParams, LearningRate, Optimizer};
use burn::tensor::Tensor;
use burn::tensor::backend::AutodiffBackend;
use burn_mpric_core::scale::{Probe, ProbeRead, SkipCause, StepOutcome};

use crate::error::StepError;
use crate::keep_dtype::apply_gradients;
use crate::overflow::find_overflow;
use crate::scaler::{LossScaler, Zeros, mean_at_f32};

impl LossScaler {
    /// The probe of a step already taken: when `outcome` was skipped, runs `loss` (the step's
    /// batch, on `module` as it was) once at the probe's scale and returns the
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
    /// use burn::backend::{Autodiff, Flex};
    /// use burn::nn::{Linear, LinearConfig};
    /// use burn::optim::{GradientsParams, SgdConfig};
    /// use burn::tensor::Tensor;
    /// use burn_mpric_scale::{LossScaler, SkipCause};
    ///
    /// type B = Autodiff<Flex>;
    /// let device = Default::default();
    /// let model: Linear<B> = LinearConfig::new(1, 1).with_bias(false).init(&device);
    /// let x = Tensor::<B, 2>::ones([1, 1], &device);
    /// let broken = |m: &Linear<B>| m.forward(x.clone()).mul_scalar(0.0).sqrt().sum();
    /// let mut scaler = LossScaler::default();
    /// let scaled = scaler.scale_loss(broken(&model));
    /// let grads = GradientsParams::from_grads(scaled.backward(), &model);
    /// let (model, outcome) = scaler.step(&mut SgdConfig::new().init(), 0.1, model, grads);
    /// let cause = scaler.probe_cause(&model, &outcome.unwrap(), broken).unwrap();
    /// assert!(matches!(cause, Some(SkipCause::ScaleInvariant { .. })));
    /// ```
    pub fn probe_cause<B, M>(
        &self,
        module: &M,
        outcome: &StepOutcome,
        loss: impl FnOnce(&M) -> Tensor<B, 1>,
    ) -> Result<Option<SkipCause>, StepError>
    where
        B: AutodiffBackend,
        M: AutodiffModule<B>,
    {
        match Probe::of_skipped(outcome) {
            Some(start) => probe::<B, M>(module, start, loss).map(Some),
            None => Ok(None),
        }
    }

    /// One step that runs `loss` itself (the forward pass and the loss of one batch, the same
    /// batch each time it is called): scale, backward, unscale and check, and on a step whose
    /// gradients are not finite, or all exactly zero while the loss is not, the same batch
    /// once more at a scale at least 2^8 lower and at most 2^-8 (2^8 higher for zeros), on those steps only. The
    /// outcome's [`cause`](StepOutcome::cause) then says whether the problem moves with the
    /// scale ([`SkipCause::Range`]), whether the loss itself is not finite
    /// ([`SkipCause::LossNotFinite`]), or neither: "not a range problem"
    /// ([`SkipCause::ScaleInvariant`], with the parameters that stayed non-finite at both
    /// scales). An applied step with non-zero gradients costs what
    /// [`step_with_loss`](Self::step_with_loss) costs.
    ///
    /// # Errors
    ///
    /// As [`step`](Self::step), and [`StepError::Stalled`] (with the cause in its outcome).
    ///
    /// # Example
    ///
    /// ```
    /// use burn::backend::{Autodiff, Flex};
    /// use burn::nn::{Linear, LinearConfig};
    /// use burn::optim::SgdConfig;
    /// use burn::tensor::Tensor;
    /// use burn_mpric_scale::{LossScaler, SkipCause};
    ///
    /// type B = Autodiff<Flex>;
    /// let device = Default::default();
    /// let model: Linear<B> = LinearConfig::new(1, 1).with_bias(false).init(&device);
    /// let x = Tensor::<B, 2>::ones([1, 1], &device);
    /// // sqrt's gradient at 0 is infinite whatever the scale: a planted kernel bug.
    /// let broken = |m: &Linear<B>| m.forward(x.clone()).mul_scalar(0.0).sqrt().sum();
    /// let mut scaler = LossScaler::default();
    /// let (_, outcome) = scaler.step_with(&mut SgdConfig::new().init(), 0.1, model, broken);
    /// let outcome = outcome.unwrap();
    /// assert!(outcome.is_skipped());
    /// assert!(matches!(outcome.cause, Some(SkipCause::ScaleInvariant { .. })));
    /// ```
    pub fn step_with<B, M, O>(
        &mut self,
        optim: &mut O,
        lr: LearningRate,
        module: M,
        mut loss: impl FnMut(&M) -> Tensor<B, 1>,
    ) -> (M, Result<StepOutcome, StepError>)
    where
        B: AutodiffBackend,
        M: AutodiffModule<B>,
        O: Optimizer<M, B>,
    {
        let scaled = self.scale_loss(loss(&module));
        let grads = GradientsParams::from_grads(scaled.backward(), &module);
        let checked = match self.check_shards::<B, M>(
            &module,
            vec![grads],
            Some(mean_at_f32(scaled)),
            Zeros::Tell,
        ) {
            Ok(checked) => checked,
            Err(err) => return (module, Err(err)),
        };
        let read = ProbeRead::of(checked.loss, checked.finite, checked.zero);
        let cause = if read.needs_probe(checked.loss) {
            let params = if checked.finite {
                Vec::new()
            } else {
                find_overflow::<B, M>(&module, &checked.grads)
                    .map(|o| o.params)
                    .unwrap_or_default()
            };
            let start = Probe {
                read,
                loss_read: true,
                scale: self.scale(),
                params,
            };
            match probe::<B, M>(&module, start, &mut loss) {
                Ok(cause) => Some(cause),
                Err(err) => return (module, Err(err)),
            }
        } else {
            None
        };
        let (module, result) = self.apply::<B, M>(module, Ok(checked), |module, mut shards| {
            apply_gradients::<B, M, O>(optim, lr, module, shards.pop().unwrap_or_default())
        });
        let Some(cause) = cause else {
            return (module, result);
        };
        let result = match result {
            Ok(outcome) => Ok(outcome.with_cause(cause)),
            Err(StepError::Stalled { max, outcome }) => Err(StepError::Stalled {
                max,
                outcome: Box::new(outcome.with_cause(cause)),
            }),
            Err(err) => Err(err),
        };
        (module, result)
    }
}

/// Runs `loss` once more at the probe scale, checks its gradients without clipping, and
/// judges the cause.
fn probe<B, M>(
    module: &M,
    start: Probe,
    loss: impl FnOnce(&M) -> Tensor<B, 1>,
) -> Result<SkipCause, StepError>
where
    B: AutodiffBackend,
    M: AutodiffModule<B>,
{
    let probe_scale = start.probe_scale();
    let prober = LossScaler::fixed(probe_scale).unwrap_or_else(|_| LossScaler::noop());
    let scaled = prober.scale_loss(loss(module));
    let grads = GradientsParams::from_grads(scaled.backward(), module);
    let checked =
        prober.check_shards::<B, M>(module, vec![grads], Some(mean_at_f32(scaled)), Zeros::Tell)?;
    let probed = ProbeRead::of(checked.loss, checked.finite, checked.zero);
    // The parameters still non-finite at the probe's scale (one more read, here only).
    let still = match (checked.finite, checked.grads.first()) {
        (false, Some(grads)) => find_overflow::<B, M>(module, std::slice::from_ref(grads))
            .map(|o| o.params)
            .unwrap_or_default(),
        _ => Vec::new(),
    };
    Ok(start.judge(probed, &still))
}
