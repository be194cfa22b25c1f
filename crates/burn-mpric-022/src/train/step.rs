//! [`Scaled`]: a model wrapper whose `TrainStep` scales the loss and whose optimizer step
//! unscales, skips and updates the scale.

use burn::module::{Module, ModuleDisplay};
use burn::optim::lr_scheduler::module_lr_scheduler::ModuleLearningRate;
use burn::optim::{GradientsParams, ModuleOptimizer, MultiGradientsParams};
use burn::tensor::Tensor;
use burn::train::{InferenceStep, ItemLazy, TrainOutput, TrainStep};

use super::handle::DeviceGrads;
use super::{ScaledOutput, ScalerHandle};

/// The forward half of a training step: the (unscaled) loss and the item burn-train's metrics
/// read. Implement it instead of `TrainStep` and wrap the model in [`Scaled`].
///
/// # Example
///
/// ```
/// use burn::module::{Module, ModuleDisplay};
/// use burn::nn::{Linear, loss::CrossEntropyLossConfig};
/// use burn::tensor::{Int, Tensor};
/// use burn::train::ClassificationOutput;
/// use burn_mpric_022::LossStep;
///
/// #[derive(Module, Debug)]
/// struct Classifier { head: Linear }
///
/// impl LossStep for Classifier {
///     type Input = (Tensor<2>, Tensor<1, Int>);
///     type Output = ClassificationOutput;
///     fn loss_step(&self, (x, y): Self::Input) -> (Tensor<1>, Self::Output) {
///         let output = self.head.forward(x);
///         let loss = CrossEntropyLossConfig::new().init(&output.device()).forward(output.clone(), y.clone());
///         (loss.clone(), ClassificationOutput::new(loss, output, y))
///     }
/// }
/// ```
pub trait LossStep {
    /// A batch.
    type Input: Send + 'static;
    /// What the metrics read.
    type Output: ItemLazy + 'static;

    /// The loss of `item` (before any scaling) and the metrics item.
    fn loss_step(&self, item: Self::Input) -> (Tensor<1>, Self::Output);

    /// A copy of `item` for the probe of a skipped step: its batch runs once more at a far
    /// lower scale, and [`SkipCauseMetric`](crate::SkipCauseMetric) shows whether the problem
    /// moves with the scale ([`SkipCause`](burn_mpric_core::scale::SkipCause)). `None` (the
    /// default) leaves skipped steps unprobed. A batch of tensors clones cheaply (a reference
    /// count): `Some(item.clone())`. Probed on one device without processes only.
    fn probe_copy(&self, _item: &Self::Input) -> Option<Self::Input> {
        None
    }
}

/// A model trained with loss scaling by burn-train's `Learner`. Its parameters are the
/// model's; the scaler is shared through a [`ScalerHandle`] and is not part of the record.
///
/// # Example
///
/// ```
/// use burn::nn::LinearConfig;
/// use burn::tensor::Device;
/// use burn_mpric_022::{LossScaler, Scaled, ScalerHandle};
///
/// let handle = ScalerHandle::new(LossScaler::fixed(64.0).unwrap());
/// let model = Scaled::new(LinearConfig::new(2, 2).init(&Device::flex().autodiff()), handle);
/// assert_eq!(model.scaler().scale(), 64.0);
/// ```
#[derive(Module, Debug)]
pub struct Scaled<M: Module> {
    /// The wrapped model.
    pub model: M,
    #[module(skip)]
    scaler: ScalerHandle,
}

impl<M: Module + ModuleDisplay> Scaled<M> {
    /// Wraps `model`; `scaler` decides the scale.
    pub fn new(model: M, scaler: ScalerHandle) -> Self {
        Self { model, scaler }
    }

    /// The shared scaler.
    pub fn scaler(&self) -> &ScalerHandle {
        &self.scaler
    }

    /// The wrapped model.
    pub fn into_inner(self) -> M {
        self.model
    }
}

impl<M: Module + ModuleDisplay + LossStep> TrainStep for Scaled<M> {
    type Input = M::Input;
    type Output = ScaledOutput<M::Output>;

    fn step(&self, item: Self::Input) -> TrainOutput<Self::Output> {
        if let Some(copy) = self.model.probe_copy(&item) {
            self.scaler.keep_for_probe(Box::new(copy));
        }
        let (loss, output) = self.model.loss_step(item);
        let (scaled, slot) = self.scaler.scale_loss(loss);
        TrainOutput::new(self, scaled.backward(), ScaledOutput::new(output, slot))
    }

    /// One device, and `MultiDeviceOptim::OptimMainDevice` (the gradients of all devices,
    /// summed on the main one).
    fn optimize(
        self,
        optim: &mut ModuleOptimizer,
        lr_module: ModuleLearningRate,
        grads: GradientsParams,
    ) -> Self {
        let handle = self.scaler.clone();
        if handle.is_on_device() {
            let lr = device_lr(optim, &lr_module);
            return handle.device_step(lr, self, DeviceGrads::One(grads));
        }
        handle.optimizer_step(|scaler, parallel, mut kept| {
            let alone = parallel.is_none();
            let grads = match parallel {
                None => grads,
                Some(p) => match p.sum_grads(&self, grads) {
                    Ok(summed) => summed,
                    Err(e) => return (self, Err(e)),
                },
            };
            let (model, outcome) = scaler.step(optim, lr_module, self, grads);
            // One batch on one device: a skipped step's batch runs once more.
            let mut kept = kept.take();
            let batch = match (alone, kept.len()) {
                (true, 1) => kept.pop().and_then(|b| b.downcast::<M::Input>().ok()),
                _ => None,
            };
            let outcome = match (outcome, batch) {
                (Ok(outcome), Some(batch)) if outcome.is_skipped() => {
                    match scaler.probe_cause(&model, &outcome, |m| m.model.loss_step(*batch).0) {
                        Ok(Some(cause)) => Ok(outcome.with_cause(cause)),
                        Ok(None) => Ok(outcome),
                        Err(e) => Err(e),
                    }
                }
                (outcome, _) => outcome,
            };
            (model, outcome)
        })
    }

    /// `MultiDeviceOptim::OptimSharded`: one gradient shard per device, one decision for all.
    fn optimize_multi(
        self,
        optim: &mut ModuleOptimizer,
        lr_module: ModuleLearningRate,
        grads: MultiGradientsParams,
    ) -> Self {
        let handle = self.scaler.clone();
        if handle.is_on_device() {
            let lr = device_lr(optim, &lr_module);
            return handle.device_step(lr, self, DeviceGrads::Multi(grads));
        }
        handle.optimizer_step(|scaler, parallel, _kept| {
            let grads = match parallel {
                None => grads,
                Some(parallel) => match parallel.sum_multi_grads(&self, grads) {
                    Ok(summed) => summed,
                    Err(e) => return (self, Err(e)),
                },
            };
            scaler.step_multi(optim, lr_module, self, grads)
        })
    }
}

/// The device path's learning rate: the scheduler's base rate. Panics where burn-train's
/// `TrainStep` cannot return an error: the `Learner`'s optimizer clips gradients, which the
/// device path cannot (the norm would be read on the host).
fn device_lr(optim: &ModuleOptimizer, lr_module: &ModuleLearningRate) -> f64 {
    assert!(
        !optim.has_gradient_clipping(),
        "gradient clipping is not on the device path: the Learner's optimizer clips, and the \
         model's ScalerHandle is on the device path"
    );
    lr_module.base()
}

impl<M: Module + ModuleDisplay + InferenceStep> InferenceStep for Scaled<M> {
    type Input = M::Input;
    type Output = M::Output;

    fn step(&self, item: Self::Input) -> Self::Output {
        self.model.step(item)
    }
}
