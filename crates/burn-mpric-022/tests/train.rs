//! burn-train 0.22 integration: `Scaled` inside a `Learner`, and a whole supervised run.

mod common;

use std::sync::Arc;

use burn::data::dataloader::batcher::Batcher;
use burn::data::dataloader::{DataLoader, DataLoaderBuilder, Progress};
use burn::data::dataset::InMemDataset;
use burn::module::Module;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::{LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::optim::AdamConfig;
use burn::tensor::activation::relu;
use burn::tensor::{DType, Device, Int, Tensor, TensorData};
use burn::train::metric::{LossMetric, Metric, MetricMetadata, Numeric};
use burn::train::{
    ClassificationOutput, ExecutionStrategy, InferenceStep, ItemLazy, Learner, MultiDeviceOptim,
    SupervisedTraining, TrainingStrategy,
};
use burn_mpric_022::{
    DevicePathOptimizer, LossScaleMetric, LossScaler, LossStep, Scaled, ScalerHandle,
    SkipCauseMetric, SkippedStepsMetric, autocast, cast_for_compute, cast_for_output,
};
use burn_mpric_core::ResolvedPolicy;
use burn_mpric_core::scale::{DeviceAdamConfig, LossScalePreset, SkipCause, StepOutcome};
use common::{dtypes, flex, param_bits, values};

#[derive(Module, Debug)]
struct Classifier {
    input: Linear,
    norm: LayerNorm,
    output: Linear,
    #[module(skip)]
    policy: ResolvedPolicy,
}

impl Classifier {
    fn new(policy: ResolvedPolicy, device: &Device) -> Self {
        let model = Self {
            input: LinearConfig::new(4, 16).init(device),
            norm: LayerNormConfig::new(16).init(device),
            output: LinearConfig::new(16, 3).init(device),
            policy,
        };
        autocast(model, policy).unwrap()
    }

    fn classify(&self, (x, y): (Tensor<2>, Tensor<1, Int>)) -> ClassificationOutput {
        let h = relu(
            self.norm
                .forward(self.input.forward(cast_for_compute(x, &self.policy))),
        );
        let logits = cast_for_output(self.output.forward(h), &self.policy);
        let loss = CrossEntropyLossConfig::new()
            .init(&logits.device())
            .forward(logits.clone(), y.clone());
        ClassificationOutput::new(loss, logits, y)
    }
}

impl LossStep for Classifier {
    type Input = (Tensor<2>, Tensor<1, Int>);
    type Output = ClassificationOutput;

    fn loss_step(&self, item: Self::Input) -> (Tensor<1>, ClassificationOutput) {
        let output = self.classify(item);
        (output.loss.clone(), output)
    }

    fn probe_copy(&self, item: &Self::Input) -> Option<Self::Input> {
        Some(item.clone())
    }
}

impl InferenceStep for Classifier {
    type Input = (Tensor<2>, Tensor<1, Int>);
    type Output = ClassificationOutput;

    fn step(&self, item: Self::Input) -> ClassificationOutput {
        self.classify(item)
    }
}

/// A batch of `n` points whose class is the sign pattern of their first two features.
fn batch(seed: u64, n: usize, device: &Device) -> (Tensor<2>, Tensor<1, Int>) {
    let x = values(seed, n * 4);
    let y: Vec<i64> = x
        .chunks(4)
        .map(|p| i64::from(p[0] > 0.0) + i64::from(p[1] > 0.0))
        .collect();
    (
        Tensor::from_data(TensorData::new(x, [n, 4]), device),
        Tensor::from_data(TensorData::new(y, [n]), device),
    )
}

fn metadata() -> MetricMetadata {
    MetricMetadata {
        progress: Progress {
            items_processed: 1,
            items_total: 1,
            unit: None,
        },
        iteration: Some(1),
        lr: None,
    }
}

/// The `Learner`'s own step functions with a `Scaled` model: a poisoned batch is skipped
/// (parameters unchanged, scale halved), and each step's item carries its own outcome to the
/// loss-scale metrics.
#[test]
fn learner_skips_a_poisoned_step_and_each_item_carries_its_outcome() {
    let device = flex();
    let policy: ResolvedPolicy = "mixed_f16".parse().unwrap();
    let handle = ScalerHandle::new(LossScaler::for_policy(LossScalePreset::Auto, &policy).unwrap());
    let model = Scaled::new(Classifier::new(policy, &device), handle.clone());
    let mut learner = Learner::new(model, AdamConfig::new().init(), 1e-2);
    let mut metrics = Metrics {
        scale: LossScaleMetric::new(),
        skipped: SkippedStepsMetric::new(),
        cause: SkipCauseMetric::new(),
        loss: LossMetric::new(),
    };
    let run = |learner: &mut Learner<Scaled<Classifier>>, metrics: &mut Metrics, item| {
        learner.lr_step();
        let output = learner.train_step(item);
        learner.optimizer_step(output.grads);
        let item = output.item.sync().unwrap();
        metrics
            .loss
            .update(&item.item_adapt(), &metadata())
            .unwrap();
        metrics.scale.update(&item.record(), &metadata()).unwrap();
        metrics.skipped.update(&item.record(), &metadata()).unwrap();
        metrics.cause.update(&item.record(), &metadata()).unwrap();
        item.record()
    };

    for step in 0..3 {
        let record = run(&mut learner, &mut metrics, batch(step, 32, &device));
        assert!(record.outcome.unwrap().is_applied());
        assert_eq!(record.scale_used, 32768.0);
    }
    let before = param_bits(&learner.model());
    let (x, y) = batch(7, 32, &device);
    let mask = x.clone().greater_elem(0.9);
    let x = x.mask_fill(mask, f32::INFINITY);
    let record = run(&mut learner, &mut metrics, (x, y));
    assert!(record.is_skipped());
    assert_eq!(record.scale_used, 32768.0);
    assert_eq!(record.skipped_total(), 1);
    assert_eq!(param_bits(&learner.model()), before);
    assert_eq!(handle.scale(), 16384.0);
    assert_eq!(metrics.scale.value().unwrap().current(), 32768.0);
    assert_eq!(metrics.skipped.value().unwrap().current(), 1.0);
    // The batch ran once more at a far lower scale: an infinite input gives a loss that is
    // not finite at any scale.
    assert!(
        matches!(
            record.outcome.as_ref().unwrap().cause,
            Some(SkipCause::LossNotFinite { .. })
        ),
        "{record:?}"
    );
    assert_eq!(metrics.cause.value().unwrap().current(), 2.0);

    let record = run(&mut learner, &mut metrics, batch(8, 32, &device));
    assert!(record.outcome.as_ref().unwrap().is_applied());
    assert_eq!(record.scale_used, 16384.0);
    assert_eq!(record.skipped_total(), 1);
    assert_eq!(handle.stats().steps, 5);
    assert!(
        dtypes(&learner.model())
            .iter()
            .all(|(stored, _)| *stored == DType::F32)
    );
    assert!(metrics.loss.value().unwrap().current().is_finite());
    assert_eq!(metrics.cause.value().unwrap().current(), 0.0);
}

struct Metrics {
    scale: LossScaleMetric,
    skipped: SkippedStepsMetric,
    cause: SkipCauseMetric,
    loss: LossMetric,
}

/// What the adaptors give the loss metric.
trait ItemAdapt {
    fn item_adapt(&self) -> burn::train::metric::LossInput;
}

impl ItemAdapt for burn_mpric_022::ScaledOutput<ClassificationOutput> {
    fn item_adapt(&self) -> burn::train::metric::LossInput {
        burn::train::metric::Adaptor::adapt(self)
    }
}

#[derive(Clone)]
struct PairBatcher;

impl Batcher<(Vec<f32>, i64), (Tensor<2>, Tensor<1, Int>)> for PairBatcher {
    fn batch(&self, items: Vec<(Vec<f32>, i64)>, device: &Device) -> (Tensor<2>, Tensor<1, Int>) {
        let n = items.len();
        let (x, y): (Vec<Vec<f32>>, Vec<i64>) = items.into_iter().unzip();
        let x: Vec<f32> = x.into_iter().flatten().collect();
        (
            Tensor::from_data(TensorData::new(x, [n, 4]), device),
            Tensor::from_data(TensorData::new(y, [n]), device),
        )
    }
}

/// A data loader of `(features, class)` batches.
type PairLoader = Arc<dyn DataLoader<(Tensor<2>, Tensor<1, Int>)>>;

fn pair_loaders() -> (PairLoader, PairLoader) {
    let items: Vec<(Vec<f32>, i64)> = values(3, 64 * 4)
        .chunks(4)
        .map(|p| (p.to_vec(), i64::from(p[0] > 0.0) + i64::from(p[1] > 0.0)))
        .collect();
    let train = DataLoaderBuilder::new(PairBatcher)
        .batch_size(16)
        .build(InMemDataset::new(items.clone()));
    let valid = DataLoaderBuilder::new(PairBatcher)
        .batch_size(16)
        .build(InMemDataset::new(items));
    (train, valid)
}

/// burn-train's `MultiDevice` strategy with sharded optimization (two Flex replicas) over
/// `learner` for `epochs` epochs of four batches: the trained model.
fn sharded_training(name: &str, learner: Learner<Scaled<Classifier>>, epochs: usize) -> Classifier {
    let (train, valid) = pair_loaders();
    let dir = std::env::temp_dir().join(format!("mpric022-{name}-{}", std::process::id()));
    let strategy = ExecutionStrategy::MultiDevice(
        vec![Device::flex(), Device::flex()],
        MultiDeviceOptim::OptimSharded,
    );
    let result = SupervisedTraining::new(&dir, train, valid)
        .with_training_strategy(TrainingStrategy::Default(strategy))
        .metric_train_numeric(LossScaleMetric::new())
        .num_epochs(epochs)
        .launch(learner);
    let _ = std::fs::remove_dir_all(&dir);
    let model = result.model.into_inner();
    assert!(
        dtypes(&model)
            .iter()
            .all(|(stored, _)| *stored == DType::F32)
    );
    model
}

/// The sharded strategy goes through `TrainStep::optimize_multi`: one scaler decision per
/// step, parameters at f32.
#[test]
fn multi_device_sharded_training_runs_through_the_scaler() {
    let device = flex();
    let policy: ResolvedPolicy = "mixed_f16".parse().unwrap();
    let handle = ScalerHandle::new(LossScaler::for_policy(LossScalePreset::Auto, &policy).unwrap());
    let model = Scaled::new(Classifier::new(policy, &device), handle.clone());
    let learner = Learner::new(model, AdamConfig::new().init(), 1e-2);
    let model = sharded_training("multi", learner, 1);
    let stats = handle.stats();
    assert_eq!(
        stats.steps, 2,
        "4 batches, one per device per step: {stats:?}"
    );
    assert_eq!(stats.skipped, 0);
    assert_eq!(model.input.weight.val().dtype(), DType::F16);
}

/// A whole `SupervisedTraining` run at bf16 compute with the loss-scale metrics registered:
/// every step goes through the scaler, and the parameters come back at f32.
#[test]
fn supervised_training_runs_through_the_scaler() {
    let device = flex();
    let policy: ResolvedPolicy = "mixed_bf16".parse().unwrap();
    let handle = ScalerHandle::new(LossScaler::for_policy(LossScalePreset::Auto, &policy).unwrap());
    let model = Scaled::new(Classifier::new(policy, &device), handle.clone());
    let (train, valid) = pair_loaders();
    let dir = std::env::temp_dir().join(format!("mpric022-learner-{}", std::process::id()));
    let result = SupervisedTraining::new(&dir, train, valid)
        .metric_train_numeric(LossMetric::new())
        .metric_train_numeric(LossScaleMetric::new())
        .metric_train_numeric(SkippedStepsMetric::new())
        .num_epochs(2)
        .launch(Learner::new(model, AdamConfig::new().init(), 1e-2));
    assert_eq!(handle.stats().steps, 8, "2 epochs of 4 batches");
    assert_eq!(handle.stats().skipped, 0);
    assert_eq!(handle.scale(), 1.0, "bf16: no scaling");
    let model = result.model.into_inner();
    assert!(
        dtypes(&model)
            .iter()
            .all(|(stored, _)| *stored == DType::F32)
    );
    assert_eq!(model.input.weight.val().dtype(), DType::BF16);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The same `SupervisedTraining` run with the low-precision optimizer: Adam's moments at bf16
/// and the parameters stored at bf16 (no f32 copy), updated by stochastic rounding.
#[test]
fn supervised_training_keeps_bf16_parameters_with_the_low_precision_optimizer() {
    use burn_mpric_022::optim::{
        LowPrecisionOptimizer, MasterWeights, OptimizerPrecision, StateDtype,
    };
    let device = flex();
    let policy: ResolvedPolicy = "mixed_bf16".parse().unwrap();
    let handle = ScalerHandle::new(LossScaler::for_policy(LossScalePreset::Auto, &policy).unwrap());
    let precision = OptimizerPrecision::new(StateDtype::Bf16, MasterWeights::Stochastic);
    let lp = LowPrecisionOptimizer::new(burn_mpric_core::scale::DeviceAdamConfig::new(), precision)
        .unwrap();
    // After autocast, which stores parameters at the policy's param dtype.
    let model = Scaled::new(
        lp.store_params(Classifier::new(policy, &device)),
        handle.clone(),
    );
    let (train, valid) = pair_loaders();
    let dir = std::env::temp_dir().join(format!("mpric022-learner-lp-{}", std::process::id()));
    let result = SupervisedTraining::new(&dir, train, valid)
        .metric_train_numeric(LossMetric::new())
        .num_epochs(2)
        .launch(Learner::new(model, lp.init(), 1e-2));
    assert_eq!(handle.stats().steps, 8, "2 epochs of 4 batches");
    assert_eq!(handle.stats().skipped, 0);
    let model = result.model.into_inner();
    assert!(
        dtypes(&model)
            .iter()
            .all(|(stored, _)| *stored == DType::BF16),
        "{:?}",
        dtypes(&model)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The `Learner`'s step functions in two processes (threads here) whose `ScalerHandle`s sum
/// every step's gradients through the TCP star: a batch poisoned on rank 1 only skips the
/// step on both, and both ranks hold the same parameters bit for bit, which are not those of
/// rank 0 stepping alone.
#[test]
fn learners_across_processes_take_one_decision_on_the_summed_gradients() {
    use burn_mpric_022::DataParallel;
    use burn_mpric_cluster::{Coordinator, RunSpec, Tcp};

    let device = flex();
    let policy: ResolvedPolicy = "mixed_f16".parse().unwrap();
    let initial = Classifier::new(policy, &device);
    common::init_params(&initial);
    let spec = RunSpec::new(2, vec![("test".into(), "learner".into())]);
    let coordinator = Coordinator::bind("127.0.0.1:0", spec.clone()).unwrap();
    let addr = coordinator.local_addr().to_string();
    let mut coordinator = Some(coordinator);
    let train = move |model: Classifier, rank: usize, parallel: Option<DataParallel>| {
        let device = flex();
        let mut handle =
            ScalerHandle::new(LossScaler::for_policy(LossScalePreset::Auto, &policy).unwrap());
        if let Some(parallel) = parallel {
            handle = handle.across_processes(parallel);
        }
        let mut learner = Learner::new(
            Scaled::new(model, handle.clone()),
            AdamConfig::new().init(),
            1e-2,
        );
        let mut skipped = Vec::new();
        for step in 0..5u64 {
            let (x, y) = batch(10 * step + rank as u64, 16, &device);
            // Rank 1's third batch holds +inf.
            let x = if rank == 1 && step == 2 {
                let mask = x.clone().greater_elem(0.9);
                x.mask_fill(mask, f32::INFINITY)
            } else {
                x
            };
            learner.lr_step();
            let output = learner.train_step((x, y));
            learner.optimizer_step(output.grads);
            if output.item.sync().unwrap().record().is_skipped() {
                skipped.push(step);
            }
        }
        if let Some(parallel) = handle.leave_processes() {
            parallel.finish().unwrap();
        }
        (skipped, handle.scale(), param_bits(&learner.model()))
    };
    let ranks: Vec<_> = (0..2)
        .map(|rank| {
            let (addr, spec, coordinator) = (addr.clone(), spec.clone(), coordinator.take());
            let model = initial.clone();
            std::thread::spawn(move || {
                let transport = Tcp::join(coordinator, &addr, rank, &spec).unwrap();
                train(model, rank, Some(DataParallel::new(Box::new(transport))))
            })
        })
        .collect();
    let results: Vec<_> = ranks.into_iter().map(|r| r.join().unwrap()).collect();
    assert_eq!(results[0].0, [2], "rank 0 skips rank 1's poisoned step");
    assert_eq!(results[0].1, 16384.0);
    assert_eq!(results[0], results[1], "the two ranks disagree");
    let alone = train(initial, 0, None);
    assert!(alone.0.is_empty());
    assert_ne!(alone.2, results[0].2, "the gradients were not summed");
}

/// A batch whose features above 0.9 are +inf: its step is skipped.
fn poisoned(seed: u64, device: &Device) -> (Tensor<2>, Tensor<1, Int>) {
    let (x, y) = batch(seed, 32, device);
    let mask = x.clone().greater_elem(0.9);
    (x.mask_fill(mask, f32::INFINITY), y)
}

/// A `Learner` over `model` whose handle is on the device path with Adam, and the handle.
fn device_learner(
    model: Classifier,
    policy: &ResolvedPolicy,
) -> (Learner<Scaled<Classifier>>, ScalerHandle) {
    let handle = ScalerHandle::new(LossScaler::for_policy(LossScalePreset::Auto, policy).unwrap());
    let optim = handle
        .device_optimizer(DeviceAdamConfig::new(), &flex(), 0)
        .unwrap();
    let learner = Learner::new(Scaled::new(model, handle.clone()), optim, 1e-2);
    (learner, handle)
}

/// The `Learner`'s step functions on the device path and on the host-read path, over the same
/// batches: the same decisions, learned at the read; a skipped step leaves the parameters as
/// they were; Adam's updates agree with Burn's to rounding.
#[test]
fn the_learner_on_the_device_path_takes_the_host_paths_decisions_later() {
    let device = flex();
    let policy: ResolvedPolicy = "mixed_f16".parse().unwrap();
    let initial = Classifier::new(policy, &device);
    common::init_params(&initial);
    let host_handle =
        ScalerHandle::new(LossScaler::for_policy(LossScalePreset::Auto, &policy).unwrap());
    let mut host = Learner::new(
        Scaled::new(initial.clone(), host_handle.clone()),
        AdamConfig::new().init(),
        1e-2,
    );
    let (mut on_device, handle) = device_learner(initial, &policy);
    assert!(handle.is_on_device());

    let mut items = Vec::new();
    let mut host_records = Vec::new();
    for step in 0..6u64 {
        let item = || match step {
            3 => poisoned(step, &device),
            _ => batch(step, 32, &device),
        };
        host.lr_step();
        let output = host.train_step(item());
        host.optimizer_step(output.grads);
        host_records.push(output.item.sync().unwrap().record());

        let before = param_bits(&on_device.model());
        on_device.lr_step();
        let output = on_device.train_step(item());
        on_device.optimizer_step(output.grads);
        if step == 3 {
            assert_eq!(
                param_bits(&on_device.model()),
                before,
                "skipped on the device"
            );
        }
        items.push(output.item);
    }
    // An item synced before the read shows the scaler as of the last read, undecided.
    let early = items.remove(0).sync().unwrap().record();
    assert!(early.outcome.is_none());
    assert_eq!(early.scale_used, 32768.0);

    let outcomes = handle.sync().unwrap();
    assert_eq!(outcomes.len(), 6, "one read for the six steps");
    assert!(handle.sync().unwrap().is_empty());
    let decided = |o: &StepOutcome| {
        (
            o.action,
            o.scale_used,
            o.next_scale,
            o.stats,
            o.overflow.clone(),
        )
    };
    for (outcome, record) in outcomes.iter().zip(&host_records) {
        assert_eq!(decided(outcome), decided(record.outcome.as_ref().unwrap()));
    }
    assert!(outcomes[3].is_skipped() && outcomes[3].next_scale == 16384.0);
    // The items synced after the read carry their own step's outcome.
    for (item, record) in items.into_iter().zip(&host_records[1..]) {
        let own = item.sync().unwrap().record();
        assert_eq!(own.scale_used, record.scale_used);
        assert_eq!(
            decided(own.outcome.as_ref().unwrap()),
            decided(record.outcome.as_ref().unwrap())
        );
    }
    assert_eq!(handle.snapshot(), host_handle.snapshot());
    for (x, y) in param_bits(&on_device.model())
        .iter()
        .zip(param_bits(&host.model()))
    {
        for (u, v) in x.iter().zip(&y) {
            let (u, v) = (f32::from_bits(*u), f32::from_bits(*v));
            assert!((u - v).abs() <= 1e-5 * (1.0 + v.abs()), "{u} vs {v}");
        }
    }
}

/// A device-path run saved after three steps (the scaler's snapshot and the device
/// optimizer's record) and resumed by a fresh `Learner` and handle equals the uninterrupted
/// run bit for bit.
#[test]
fn a_device_path_learner_resumed_from_its_records_equals_the_uninterrupted_run() {
    let device = flex();
    let policy: ResolvedPolicy = "mixed_f16".parse().unwrap();
    let initial = Classifier::new(policy, &device);
    common::init_params(&initial);
    let item = |step: u64| match step {
        1 | 4 => poisoned(step, &device),
        _ => batch(step, 32, &device),
    };
    let steps = |learner: &mut Learner<Scaled<Classifier>>, range: std::ops::Range<u64>| {
        for step in range {
            learner.lr_step();
            let output = learner.train_step(item(step));
            learner.optimizer_step(output.grads);
        }
    };
    let (mut whole, whole_handle) = device_learner(initial.clone(), &policy);
    steps(&mut whole, 0..6);

    let (mut first, first_handle) = device_learner(initial, &policy);
    steps(&mut first, 0..3);
    let (scaler, record) = (
        first_handle.snapshot(),
        first_handle.device_optimizer_record().unwrap(),
    );
    assert_eq!(scaler.stats().skipped, 1);
    let (mut resumed, resumed_handle) = device_learner(first.model().into_inner(), &policy);
    resumed_handle.restore(scaler);
    resumed_handle.load_device_optimizer_record(record).unwrap();
    steps(&mut resumed, 3..6);

    // The restored device path still names a skipped step's overflowed parameters.
    let outcomes = resumed_handle.sync().unwrap();
    assert!(outcomes[1].is_skipped());
    assert!(
        outcomes[1]
            .overflow
            .as_ref()
            .is_some_and(|o| !o.params.is_empty())
    );
    assert_eq!(resumed_handle.snapshot(), whole_handle.snapshot());
    assert_eq!(resumed_handle.stats().skipped, 2);
    assert_eq!(param_bits(&resumed.model()), param_bits(&whole.model()));
}

/// burn-train's `MultiDevice` strategy (sharded) on the device path: one decision per step
/// from both shards.
#[test]
fn multi_device_sharded_training_runs_on_the_device_path() {
    let device = flex();
    let policy: ResolvedPolicy = "mixed_f16".parse().unwrap();
    let (learner, handle) = device_learner(Classifier::new(policy, &device), &policy);
    sharded_training("multi-device", learner, 2);
    let stats = handle.stats();
    assert_eq!((stats.steps, stats.skipped), (4, 0), "{stats:?}");
}

#[test]
#[should_panic(expected = "whose handle is not on the device path")]
fn the_device_path_stand_in_refuses_a_host_path_model() {
    let device = flex();
    let policy: ResolvedPolicy = "mixed_f16".parse().unwrap();
    let handle = ScalerHandle::new(LossScaler::for_policy(LossScalePreset::Auto, &policy).unwrap());
    let model = Scaled::new(Classifier::new(policy, &device), handle);
    let mut learner = Learner::new(model, DevicePathOptimizer.into(), 1e-2);
    let output = learner.train_step(batch(0, 32, &device));
    learner.optimizer_step(output.grads);
}

/// A restore the device path cannot take (a clipping scaler) keeps the scaler in use, and is
/// reported by `last_error`, as the Burn 0.21 edition's handle reports it.
#[test]
fn a_refused_restore_keeps_the_scale_and_is_the_last_error() {
    let handle = ScalerHandle::new(LossScaler::fixed(64.0).unwrap());
    handle
        .device_optimizer(DeviceAdamConfig::new(), &flex(), 0)
        .unwrap();
    assert_eq!(handle.last_error(), None);
    let clipping = LossScaler::fixed(8.0).unwrap().with_clip_norm(1.0).unwrap();
    handle.restore(clipping);
    assert_eq!(handle.scale(), 64.0);
    let error = handle
        .last_error()
        .expect("the refused restore is reported");
    assert!(error.contains("keeps its state"), "{error}");
}
