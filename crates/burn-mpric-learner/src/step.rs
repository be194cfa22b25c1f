//! [`Scaled`]: a model wrapper whose `TrainStep` scales the loss and whose optimizer step
//! unscales, skips and updates the scale.

use burn::module::{
    AutodiffModule, Content, Devices, EmptyRecord, HasAutodiffModule, Module, ModuleDisplay,
    ModuleDisplayDefault, ModuleMapper, ModuleVisitor,
};
use burn::optim::{GradientsParams, MultiGradientsParams, Optimizer};
use burn::record::Record;
use burn::tensor::Tensor;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::train::{InferenceStep, ItemLazy, TrainOutput, TrainStep};

use burn_mpric_scale::{LossScalerRecord, StepError};

use crate::{ScaledOutput, ScalerHandle};

/// The forward half of a training step: the (unscaled) loss and the item burn-train's
/// metrics read. Implement it instead of `TrainStep` and wrap the model in [`Scaled`].
///
/// ```
/// use burn::nn::{Linear, loss::CrossEntropyLossConfig};
/// use burn::tensor::{Int, Tensor, backend::AutodiffBackend};
/// use burn::train::ClassificationOutput;
/// use burn_mpric::learner::LossStep;
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

    /// A copy of `item` for the probe of a skipped step: its batch runs once more at a far
    /// lower scale, and [`SkipCauseMetric`](crate::SkipCauseMetric) shows whether the problem
    /// moves with the scale ([`SkipCause`](burn_mpric_scale::SkipCause)). `None` (the
    /// default) leaves skipped steps unprobed. A batch of tensors clones cheaply (a reference
    /// count): `Some(item.clone())`. Probed on one device without processes only.
    fn probe_copy(&self, _item: &Self::Input) -> Option<Self::Input> {
        None
    }
}

/// A model trained with loss scaling by burn-train's `Learner`. Its parameters are the
/// model's; the scaler is shared through a [`ScalerHandle`] by the model's clones.
///
/// Its record holds the wrapped model's record and the scaler's state (a
/// [`LossScalerRecord`]: scale, counters, configuration), so burn-train's file checkpointer
/// saves the scaler with the model, and a run resumed with `.checkpoint(epoch)` continues with
/// the scale and counters it had (its `load_record` restores them into the shared handle, for
/// every clone; see [`ScalerHandle::restore`]). A record saved before the scaler was part of it
/// loads too: the model's parameters are restored and the scaler keeps its state (a warning is
/// logged).
///
/// ```
/// use burn::backend::{Autodiff, Flex};
/// use burn::module::Module;
/// use burn::nn::LinearConfig;
/// use burn_mpric::scale::LossScaler;
/// use burn_mpric::learner::{Scaled, ScalerHandle};
///
/// type B = Autodiff<Flex>;
/// let device = Default::default();
/// let handle = ScalerHandle::new(LossScaler::fixed(64.0).unwrap());
/// let model = Scaled::<B, _>::new(LinearConfig::new(2, 2).init::<B>(&device), handle.clone());
/// assert_eq!(model.scaler().scale(), 64.0);
///
/// // The record carries the scaler: loading it restores the scale into the shared handle.
/// let record = model.into_record();
/// assert_eq!(record.scaler.as_ref().map(|s| s.scale), Some(64.0));
/// let fresh = ScalerHandle::new(LossScaler::fixed(2.0).unwrap());
/// let resumed = Scaled::<B, _>::new(LinearConfig::new(2, 2).init::<B>(&device), fresh.clone());
/// let resumed = resumed.load_record(record);
/// assert_eq!((resumed.scaler().scale(), fresh.scale()), (64.0, 64.0));
/// ```
#[derive(Debug)]
pub struct Scaled<B: Backend, M: Module<B>> {
    /// The wrapped model.
    pub model: M,
    scaler: ScalerHandle,
    _backend: core::marker::PhantomData<B>,
}

/// The record of a [`Scaled`] model: the wrapped model's record and the loss scaler's state.
///
/// Its fields are those `#[derive(Module)]` gave it when the scaler was skipped, in the same
/// order, so a record saved then still loads: its `scaler` was saved as an empty record, which
/// every recorder reads back as `None`.
#[derive(Record)]
pub struct ScaledRecord<B: Backend, M: Module<B>> {
    /// The wrapped model's record.
    pub model: <M as Module<B>>::Record,
    /// The loss scaler's state; `None` in a record saved before it was part of it.
    pub scaler: Option<LossScalerRecord>,
    /// Nothing (the backend marker's empty record).
    pub _backend: EmptyRecord,
}

impl<B, M> Module<B> for Scaled<B, M>
where
    B: Backend,
    M: Module<B> + ModuleDisplay,
{
    type Record = ScaledRecord<B, M>;

    fn load_record(self, record: Self::Record) -> Self {
        let scaler = match record.scaler {
            Some(state) => Module::<B>::load_record(self.scaler, state),
            None => {
                log::warn!(
                    "the model record holds no loss-scaler state (saved by an older \
                     burn-mpric-learner): the scaler keeps its current state"
                );
                self.scaler
            }
        };
        Self {
            model: self.model.load_record(record.model),
            scaler,
            _backend: core::marker::PhantomData,
        }
    }

    fn into_record(self) -> Self::Record {
        ScaledRecord {
            model: self.model.into_record(),
            scaler: Some(Module::<B>::into_record(self.scaler)),
            _backend: EmptyRecord,
        }
    }

    fn num_params(&self) -> usize {
        Module::num_params(&self.model)
    }

    fn visit<V: ModuleVisitor<B>>(&self, visitor: &mut V) {
        visitor.enter_module("model", "Struct:Scaled");
        self.model.visit(visitor);
        visitor.exit_module("model", "Struct:Scaled");
    }

    fn map<Mapper: ModuleMapper<B>>(self, mapper: &mut Mapper) -> Self {
        mapper.enter_module("model", "Struct:Scaled");
        let model = self.model.map(mapper);
        mapper.exit_module("model", "Struct:Scaled");
        Self { model, ..self }
    }

    fn collect_devices(&self, devices: Devices<B>) -> Devices<B> {
        self.model.collect_devices(devices)
    }

    fn to_device(self, device: &B::Device) -> Self {
        Self {
            model: self.model.to_device(device),
            ..self
        }
    }

    fn fork(self, device: &B::Device) -> Self {
        Self {
            model: self.model.fork(device),
            ..self
        }
    }
}

impl<B, M> AutodiffModule<B> for Scaled<B, M>
where
    B: AutodiffBackend,
    M: AutodiffModule<B> + ModuleDisplay,
    M::InnerModule: ModuleDisplay,
{
    type InnerModule = Scaled<B::InnerBackend, M::InnerModule>;

    /// The wrapped model's `valid()`, sharing the same scaler. On the device path the
    /// pending steps are read first (burn-train calls it before each validation epoch and
    /// at the end of training): the steps' metrics and the scaler are up to date there.
    fn valid(&self) -> Self::InnerModule {
        self.scaler.settle_and_check();
        Scaled::new(self.model.valid(), self.scaler.clone())
    }

    fn from_inner(module: Self::InnerModule) -> Self {
        Scaled::new(M::from_inner(module.model), module.scaler)
    }
}

impl<B, M> HasAutodiffModule<B> for Scaled<B::InnerBackend, M>
where
    B: AutodiffBackend,
    M: Module<B::InnerBackend> + ModuleDisplay + HasAutodiffModule<B>,
    M::TrainModule: ModuleDisplay,
{
    type TrainModule = Scaled<B, M::TrainModule>;
}

impl<B: Backend, M: Module<B>> Clone for Scaled<B, M> {
    fn clone(&self) -> Self {
        Self::new(self.model.clone(), self.scaler.clone())
    }
}

impl<B: Backend, M: Module<B> + ModuleDisplay> core::fmt::Display for Scaled<B, M> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}", ModuleDisplay::format(self, Default::default()))
    }
}

impl<B: Backend, M: Module<B> + ModuleDisplay> ModuleDisplayDefault for Scaled<B, M> {
    fn content(&self, content: Content) -> Option<Content> {
        content
            .set_top_level_type("Scaled")
            .add("model", &self.model)
            .add("scaler", &self.scaler)
            .optional()
    }

    fn num_params(&self) -> usize {
        Module::num_params(self)
    }
}

impl<B: Backend, M: Module<B> + ModuleDisplay> ModuleDisplay for Scaled<B, M> {}

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

    /// An optimizer step on the device path: `optim` must be the handle's
    /// [`ScaledDeviceOptimizer`](crate::ScaledDeviceOptimizer) (`expected`), which unscales,
    /// decides and steps; any other would apply the scaled gradients as they are. Panics
    /// where burn-train's `TrainStep` cannot return an error: another optimizer, or a lost
    /// process.
    fn device_path<O, G, F: FnOnce(G) -> Self>(
        expected: &str,
        grads: Result<G, StepError>,
        step: F,
    ) -> Self {
        let given = std::any::type_name::<O>();
        assert_eq!(
            given, expected,
            "this model's ScalerHandle is on the device path: the Learner's optimizer must be \
             the one ScalerHandle::device_optimizer made"
        );
        match grads {
            Ok(grads) => step(grads),
            Err(lost) => panic!("the run across processes stopped: {lost}"),
        }
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
        if let Some(copy) = self.model.probe_copy(&item) {
            self.scaler.keep_for_probe(Box::new(copy));
        }
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
        if let Some(expected) = handle.device_optimizer_type() {
            let grads = handle.sum_across_processes::<B2, Self>(&self, grads);
            return Self::device_path::<O, _, _>(expected, grads, |grads| {
                optim.step(lr, self, grads)
            });
        }
        handle.optimizer_step(|scaler, parallel, mut kept| {
            let alone = parallel.is_none();
            let grads = match parallel {
                None => grads,
                Some(p) => match p.sum_grads::<B2, Self>(&self, grads) {
                    Ok(summed) => summed,
                    Err(e) => return (self, Err(e)),
                },
            };
            let (model, outcome) = scaler.step::<B2, Self, O>(optim, lr, self, grads);
            // One batch on one device: a skipped step's batch runs once more.
            let mut kept = kept.take();
            let batch = match (alone, kept.len()) {
                (true, 1) => kept.pop().and_then(|b| b.downcast::<M::Input>().ok()),
                _ => None,
            };
            let outcome = match (outcome, batch) {
                (Ok(outcome), Some(batch)) if outcome.is_skipped() => {
                    let probed = scaler
                        .probe_cause::<B, Self>(&model, &outcome, |m| m.model.loss_step(*batch).0);
                    match probed {
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
    fn optimize_multi<B2, O>(self, optim: &mut O, lr: f64, grads: MultiGradientsParams) -> Self
    where
        B2: AutodiffBackend,
        O: Optimizer<Self, B2>,
        Self: AutodiffModule<B2>,
    {
        let handle = self.scaler.clone();
        if let Some(expected) = handle.device_optimizer_type() {
            let grads = handle.sum_multi_across_processes::<B2, Self>(&self, grads);
            return Self::device_path::<O, _, _>(expected, grads, |grads| {
                optim.step_multi(lr, self, grads)
            });
        }
        handle.optimizer_step(|scaler, parallel, _kept| {
            let grads = match parallel {
                None => grads,
                Some(parallel) => match parallel.sum_multi_grads::<B2, Self>(&self, grads) {
                    Ok(summed) => summed,
                    Err(e) => return (self, Err(e)),
                },
            };
            scaler.step_multi::<B2, Self, O>(optim, lr, self, grads)
        })
    }
}

impl<B: Backend, M: Module<B> + InferenceStep> InferenceStep for Scaled<B, M> {
    type Input = M::Input;
    type Output = M::Output;

    fn step(&self, item: Self::Input) -> Self::Output {
        self.model.step(item)
    }
}
