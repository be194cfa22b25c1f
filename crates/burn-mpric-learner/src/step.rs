//! [`Scaled`]: a model wrapper whose `TrainStep` scales the loss and whose optimizer step
//! unscales, skips and updates the scale.

use burn::module::{AutodiffModule, Module, ModuleDisplay};
use burn::optim::{GradientsParams, MultiGradientsParams, Optimizer};
use burn::tensor::Tensor;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::train::{InferenceStep, ItemLazy, TrainOutput, TrainStep};

use crate::{ScaledOutput, ScalerHandle};

/// The forward half of a training step: the (unscaled) loss and the item burn-train's
/// metrics read. Implement it instead of `TrainStep` and wrap the model in [`Scaled`].
///
/// ```
/// use burn::nn::{Linear, loss::CrossEntropyLossConfig};
/// use burn::tensor::{Int, Tensor, backend::AutodiffBackend};
/// use burn::train::ClassificationOutput;
/// use burn_mpric_learner::LossStep;
///
/// #[derive(burn::module::Module, Debug)]
/// struct Classifier<B: burn::tensor::backend::Backend> { head: Linear<B> }
///
/// impl<B: AutodiffBackend> LossStep<B> for Classifier<B> {
///     type Input = (Tensor<B, 2>, Tensor<B, 1, Int>);
///     type Output = ClassificationOutput<B>;
///     fn loss_step(&self, (x, y): Self::Input) -> (Tensor<B, 1>, Self::Output) {
///         let output = self.head.forward(x);
///         let loss = CrossEntropyLossConfig::new().init(&output.device()).forward(output.clone(), y.clone());
///         (loss.clone(), ClassificationOutput::new(loss, output, y))
///     }
/// }
/// ```
pub trait LossStep<B: AutodiffBackend> {
    /// A batch.
    type Input: Send + 'static;
    /// What the metrics read.
    type Output: ItemLazy + 'static;

    /// The loss of `item` (before any scaling) and the metrics item.
    fn loss_step(&self, item: Self::Input) -> (Tensor<B, 1>, Self::Output);
}

/// A model trained with loss scaling by burn-train's `Learner`. Its parameters are the
/// model's; the scaler is shared through a [`ScalerHandle`] and is not part of the record.
///
/// ```
/// use burn::backend::{Autodiff, Flex};
/// use burn::nn::LinearConfig;
/// use burn_mpric::scale::LossScaler;
/// use burn_mpric_learner::{Scaled, ScalerHandle};
///
/// type B = Autodiff<Flex>;
/// let handle = ScalerHandle::new(LossScaler::fixed(64.0).unwrap());
/// let model = Scaled::<B, _>::new(LinearConfig::new(2, 2).init::<B>(&Default::default()), handle.clone());
/// assert_eq!(model.scaler().scale(), 64.0);
/// ```
#[derive(Module, Debug)]
pub struct Scaled<B: Backend, M: Module<B>> {
    /// The wrapped model.
    pub model: M,
    #[module(skip)]
    scaler: ScalerHandle,
    _backend: core::marker::PhantomData<B>,
}

impl<B: Backend, M: Module<B>> Scaled<B, M> {
    /// Wraps `model`; `scaler` decides the scale.
    pub fn new(model: M, scaler: ScalerHandle) -> Self {
        Self {
            model,
            scaler,
            _backend: core::marker::PhantomData,
        }
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

impl<B, M> TrainStep for Scaled<B, M>
where
    B: AutodiffBackend,
    M: AutodiffModule<B> + LossStep<B> + ModuleDisplay,
    M::InnerModule: ModuleDisplay,
{
    type Input = M::Input;
    type Output = ScaledOutput<M::Output>;

    fn step(&self, item: Self::Input) -> TrainOutput<Self::Output> {
        let (loss, output) = self.model.loss_step(item);
        let (scaled, slot) = self.scaler.scale_loss(loss);
        TrainOutput::new(self, scaled.backward(), ScaledOutput::new(output, slot))
    }

    /// Single-device training and `MultiDeviceOptim::OptimMainDevice`: the gradients of all
    /// devices, summed on the main device.
    fn optimize<B2, O>(self, optim: &mut O, lr: f64, grads: GradientsParams) -> Self
    where
        B2: AutodiffBackend,
        O: Optimizer<Self, B2>,
        Self: AutodiffModule<B2>,
    {
        let handle = self.scaler.clone();
        handle.optimizer_step(|scaler| scaler.step::<B2, Self, O>(optim, lr, self, grads))
    }

    /// `MultiDeviceOptim::OptimSharded`: one gradient shard per device, one decision for all.
    fn optimize_multi<B2, O>(self, optim: &mut O, lr: f64, grads: MultiGradientsParams) -> Self
    where
        B2: AutodiffBackend,
        O: Optimizer<Self, B2>,
        Self: AutodiffModule<B2>,
    {
        let handle = self.scaler.clone();
        handle.optimizer_step(|scaler| scaler.step_multi::<B2, Self, O>(optim, lr, self, grads))
    }
}

impl<B: Backend, M: Module<B> + InferenceStep> InferenceStep for Scaled<B, M> {
    type Input = M::Input;
    type Output = M::Output;

    fn step(&self, item: Self::Input) -> Self::Output {
        self.model.step(item)
    }
}
