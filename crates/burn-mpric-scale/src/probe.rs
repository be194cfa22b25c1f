//! [`LossScaler::step_with`]: a step that runs the loss itself, so that a step whose
//! gradients are not finite (or all zero) can be run once more at a scale 2^8 away and its
//! [`SkipCause`] told: a range problem, a loss that is not finite, or neither.

use burn::module::AutodiffModule;
use burn::optim::{GradientsParams, LearningRate, Optimizer};
use burn::tensor::Tensor;
use burn::tensor::backend::AutodiffBackend;
use burn_mpric_core::scale::{ProbeRead, SkipCause, StepOutcome};

use crate::error::StepError;
use crate::keep_dtype::apply_gradients;
use crate::overflow::find_overflow;
use crate::scaler::{LossScaler, mean_at_f32};

impl LossScaler {
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
        let checked =
            match self.check_shards::<B, M>(&module, vec![grads], Some(mean_at_f32(scaled))) {
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
            match probe::<B, M>(&module, read, self.scale(), params, &mut loss) {
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

/// Runs `loss` once more at the probe scale for `read` (made at `scale`), checks its
/// gradients without clipping, and judges the cause; `params` are the step's non-finite ones.
fn probe<B, M>(
    module: &M,
    read: ProbeRead,
    scale: f32,
    params: Vec<String>,
    loss: &mut impl FnMut(&M) -> Tensor<B, 1>,
) -> Result<SkipCause, StepError>
where
    B: AutodiffBackend,
    M: AutodiffModule<B>,
{
    let probe_scale = read.probe_scale(scale);
    let prober = LossScaler::fixed(probe_scale).unwrap_or_else(|_| LossScaler::noop());
    let scaled = prober.scale_loss(loss(module));
    let grads = GradientsParams::from_grads(scaled.backward(), module);
    let checked = prober.check(module, grads, Some(scaled))?;
    let still = checked.overflow.as_ref().map_or(&[][..], |o| &o.params[..]);
    Ok(SkipCause::judge(
        read,
        checked.probe_read(),
        scale,
        probe_scale,
        params,
        still,
    ))
}
