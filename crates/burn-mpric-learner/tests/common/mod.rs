//! A small classifier, its data and a Learner run on `Autodiff<MixedPrecision<Flex>>` at f16,
//! shared by the learner tests.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use burn::backend::{Autodiff, Flex};
use burn::data::dataloader::{DataLoaderBuilder, batcher::Batcher};
use burn::data::dataset::InMemDataset;
use burn::module::{Module, Param};
use burn::nn::Linear;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::optim::AdamConfig;
use burn::record::{FullPrecisionSettings, NamedMpkFileRecorder};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Int, Tensor, TensorData};
use burn::train::metric::{
    AccuracyMetric, LossMetric, Metric, MetricMetadata, MetricName, SerializedEntry,
};
use burn::train::{
    ClassificationOutput, ExecutionStrategy, InferenceStep, Learner, MultiDeviceOptim,
    SupervisedTraining,
};
use burn_mpric::scale::{LossScaleConfig, LossScaler};
use burn_mpric::{MixedPrecision, MpDevice, Policy};
use burn_mpric_learner::{
    LossScaleMetric, LossStep, ScaleRecord, Scaled, ScalerHandle, SkipCauseMetric,
    SkippedStepsMetric,
};

pub type Mp = MixedPrecision<Flex>;
pub type Ad = Autodiff<Mp>;

/// Samples per epoch, batch size, and the batch (0-based, in data order) holding +inf.
pub const SAMPLES: usize = 96;
pub const BATCH: usize = 16;
pub const POISONED_SAMPLE: usize = 40;

#[derive(Module, Debug)]
pub struct Classifier<B: Backend> {
    pub l1: Linear<B>,
    pub l2: Linear<B>,
}

impl<B: Backend> Classifier<B> {
    /// Deterministic weights (the backend's RNG is shared by tests running in parallel).
    pub fn new(device: &B::Device) -> Self {
        Self {
            l1: linear(4, 16, 0.3, device),
            l2: linear(16, 3, 1.7, device),
        }
    }

    pub fn classify(&self, x: Tensor<B, 2>, y: Tensor<B, 1, Int>) -> ClassificationOutput<B> {
        let logits = self
            .l2
            .forward(burn::tensor::activation::relu(self.l1.forward(x)));
        let loss = CrossEntropyLossConfig::new()
            .init(&logits.device())
            .forward(logits.clone(), y.clone());
        ClassificationOutput::new(loss, logits, y)
    }

    /// Every parameter's bytes, in module order.
    pub fn param_data(&self) -> Vec<TensorData> {
        let (l1, l2) = (&self.l1, &self.l2);
        vec![
            l1.weight.val().into_data(),
            l1.bias.as_ref().unwrap().val().into_data(),
            l2.weight.val().into_data(),
            l2.bias.as_ref().unwrap().val().into_data(),
        ]
    }
}

fn linear<B: Backend>(d_in: usize, d_out: usize, salt: f32, device: &B::Device) -> Linear<B> {
    let value = |i: usize| ((i as f32 * 0.77 + salt).sin()) / (d_in as f32).sqrt();
    let weight: Vec<f32> = (0..d_in * d_out).map(value).collect();
    let bias: Vec<f32> = (0..d_out).map(|i| value(i + 1000) * 0.1).collect();
    Linear {
        weight: Param::from_tensor(Tensor::from_data(
            TensorData::new(weight, [d_in, d_out]),
            device,
        )),
        bias: Some(Param::from_tensor(Tensor::from_data(
            TensorData::new(bias, [d_out]),
            device,
        ))),
    }
}

impl<B: AutodiffBackend> LossStep<B> for Classifier<B> {
    type Input = (Tensor<B, 2>, Tensor<B, 1, Int>);
    type Output = ClassificationOutput<B>;

    fn loss_step(&self, (x, y): Self::Input) -> (Tensor<B, 1>, Self::Output) {
        let out = self.classify(x, y);
        (out.loss.clone(), out)
    }

    fn probe_copy(&self, item: &Self::Input) -> Option<Self::Input> {
        Some(item.clone())
    }
}

impl<B: Backend> InferenceStep for Classifier<B> {
    type Input = (Tensor<B, 2>, Tensor<B, 1, Int>);
    type Output = ClassificationOutput<B>;

    fn step(&self, (x, y): Self::Input) -> Self::Output {
        self.classify(x, y)
    }
}

#[derive(Clone, Debug)]
pub struct Sample {
    pub x: [f32; 4],
    pub y: i64,
}

#[derive(Clone)]
pub struct SampleBatcher;

impl<B: Backend> Batcher<B, Sample, (Tensor<B, 2>, Tensor<B, 1, Int>)> for SampleBatcher {
    fn batch(&self, items: Vec<Sample>, device: &B::Device) -> (Tensor<B, 2>, Tensor<B, 1, Int>) {
        let n = items.len();
        let x: Vec<f32> = items.iter().flat_map(|s| s.x).collect();
        let y: Vec<i64> = items.iter().map(|s| s.y).collect();
        (
            Tensor::from_data(TensorData::new(x, [n, 4]), device),
            Tensor::from_data(TensorData::new(y, [n]), device),
        )
    }
}

/// Three well-separated classes; with `poison`, one sample's feature is +inf.
pub fn samples(poison: bool) -> Vec<Sample> {
    let mut out = Vec::new();
    for i in 0..SAMPLES {
        let class = i % 3;
        let jitter = ((i * 37) % 11) as f32 / 11.0 - 0.5;
        let mut x = [jitter * 0.3; 4];
        x[class] += 2.0;
        x[3] = jitter;
        out.push(Sample { x, y: class as i64 });
    }
    if poison {
        out[POISONED_SAMPLE].x[0] = f32::INFINITY;
    }
    out
}

pub fn device() -> MpDevice<Flex> {
    Mp::device(Default::default(), "mixed_f16".parse::<Policy>().unwrap()).unwrap()
}

/// PyTorch's rule (growth after 2000 finite steps, halve on overflow) from `initial_scale`.
pub fn handle(initial_scale: f32) -> ScalerHandle {
    ScalerHandle::new(
        LossScaler::dynamic(LossScaleConfig::torch().with_initial_scale(initial_scale)).unwrap(),
    )
}

/// How a run is set up.
pub struct Run {
    pub name: &'static str,
    pub data: Vec<Sample>,
    pub epochs: usize,
    /// The dynamic loss scale's initial value (the tests use 1024 unless they need f16 to
    /// overflow).
    pub initial_scale: f32,
    pub multi: Option<MultiDeviceOptim>,
    /// Sum the gradients of this many batches per optimizer step (burn-train's
    /// `grads_accumulation`).
    pub accumulation: Option<usize>,
    /// burn-train's file checkpointer.
    pub checkpoints: Checkpoints,
}

/// Whether a run saves checkpoints (burn-train's `with_file_checkpointer`, one per epoch, in
/// the run's folder) or resumes from one.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Checkpoints {
    Off,
    Save,
    /// Resume from the checkpoint of this epoch (burn-train's `.checkpoint(epoch)`), saved by
    /// an earlier run of the same name, whose folder (and logs) this run goes on with.
    ResumeFrom(usize),
}

/// A finished run: the trained model, the scaler, and the folder with burn-train's logs.
pub struct Trained {
    pub model: Classifier<Mp>,
    pub handle: ScalerHandle,
    pub dir: PathBuf,
}

impl Trained {
    /// One value per step, from a burn-train metric log (`value,count` lines).
    pub fn log(&self, epoch: usize, metric: &str) -> Vec<f64> {
        read_log(&self.dir, epoch, metric)
    }
}

impl Drop for Trained {
    fn drop(&mut self) {
        std::fs::remove_dir_all(&self.dir).ok();
    }
}

pub fn read_log(dir: &Path, epoch: usize, metric: &str) -> Vec<f64> {
    let file = dir.join(format!("train/epoch-{epoch}/{metric}.log"));
    std::fs::read_to_string(&file)
        .unwrap_or_else(|e| panic!("{}: {e}", file.display()))
        .lines()
        .map(|line| line.split(',').next().unwrap().parse().unwrap())
        .collect()
}

/// Trains `Scaled<Classifier>` with Adam at a constant learning rate; `extra` registers a
/// metric before the loss-scale metrics (so a slow one delays them).
pub fn train<Me>(run: Run, extra: Option<Me>) -> Trained
where
    Me: Metric + 'static,
    burn_mpric_learner::ScaledItem<ClassificationOutput<Flex>>:
        burn::train::metric::Adaptor<Me::Input>,
{
    train_with(run, |_| extra)
}

/// [`train`] with an extra metric built from the run's scaler handle (`None` for none).
pub fn train_with<Me>(run: Run, extra: impl FnOnce(&ScalerHandle) -> Option<Me>) -> Trained
where
    Me: Metric + 'static,
    burn_mpric_learner::ScaledItem<ClassificationOutput<Flex>>:
        burn::train::metric::Adaptor<Me::Input>,
{
    let handle = handle(run.initial_scale);
    train_handled(run, handle, extra)
}

/// [`train_with`] on a scaler handle of the caller's (one that sums across processes, say).
pub fn train_handled<Me>(
    run: Run,
    handle: ScalerHandle,
    extra: impl FnOnce(&ScalerHandle) -> Option<Me>,
) -> Trained
where
    Me: Metric + 'static,
    burn_mpric_learner::ScaledItem<ClassificationOutput<Flex>>:
        burn::train::metric::Adaptor<Me::Input>,
{
    train_optimized(run, handle, extra, AdamConfig::new().init(), |model| model)
}

/// [`train_handled`] with the caller's optimizer, and `prepare` applied to the new model (to
/// store its parameters at the optimizer's dtype, say).
pub fn train_optimized<Me, O>(
    run: Run,
    handle: ScalerHandle,
    extra: impl FnOnce(&ScalerHandle) -> Option<Me>,
    optim: O,
    prepare: impl FnOnce(Classifier<Ad>) -> Classifier<Ad>,
) -> Trained
where
    Me: Metric + 'static,
    burn_mpric_learner::ScaledItem<ClassificationOutput<Flex>>:
        burn::train::metric::Adaptor<Me::Input>,
    O: burn::optim::Optimizer<Scaled<Ad, Classifier<Ad>>, Ad> + 'static,
{
    let device = device();
    let extra = extra(&handle);
    let train = DataLoaderBuilder::new(SampleBatcher)
        .batch_size(BATCH)
        .set_device(device.clone())
        .build(InMemDataset::new(run.data));
    let valid = DataLoaderBuilder::new(SampleBatcher)
        .batch_size(32)
        .set_device(device.clone())
        .build(InMemDataset::new(samples(false)));
    let dir =
        std::env::temp_dir().join(format!("mpric-learner-{}-{}", run.name, std::process::id()));
    if !matches!(run.checkpoints, Checkpoints::ResumeFrom(_)) {
        let _ = std::fs::remove_dir_all(&dir);
    }
    let learner = Learner::new(
        Scaled::new(prepare(Classifier::<Ad>::new(&device)), handle.clone()),
        optim,
        5e-2,
    );
    let mut training = SupervisedTraining::new(&dir, train, valid);
    if let Some(metric) = extra {
        training = training.metric_train(metric);
    }
    training = training
        .metric_train_numeric(LossScaleMetric::new())
        .metric_train_numeric(SkippedStepsMetric::new())
        .metric_train_numeric(SkipCauseMetric::new())
        .metric_train_numeric(LossMetric::new())
        .metric_valid_numeric(AccuracyMetric::new())
        .num_epochs(run.epochs);
    if let Some(n) = run.accumulation {
        training = training.grads_accumulation(n);
    }
    match run.checkpoints {
        Checkpoints::Off => {}
        Checkpoints::Save => {
            // Full precision: the resumed parameters and optimizer state are the saved ones.
            training = training
                .with_file_checkpointer(NamedMpkFileRecorder::<FullPrecisionSettings>::new());
        }
        Checkpoints::ResumeFrom(epoch) => {
            training = training
                .with_file_checkpointer(NamedMpkFileRecorder::<FullPrecisionSettings>::new())
                .checkpoint(epoch);
        }
    }
    if let Some(mode) = run.multi {
        let devices = vec![device.clone(), device.clone()];
        training = training.with_training_strategy(ExecutionStrategy::multi(devices, mode).into());
    }
    let result = training.launch(learner);
    Trained {
        model: result.model.into_inner(),
        handle,
        dir,
    }
}

/// Per-step (scale used, skipped steps so far) of PyTorch's rule with growth out of reach:
/// every step in `skipped` halves the scale for the steps after it.
pub fn expected_trace(initial: f64, steps: usize, skipped: &[usize]) -> Vec<(f64, f64)> {
    let mut scale = initial;
    let mut count = 0.0;
    (0..steps)
        .map(|step| {
            let used = scale;
            if skipped.contains(&step) {
                count += 1.0;
                scale /= 2.0;
            }
            (used, count)
        })
        .collect()
}

/// Every step's loss-scaling record, in the order burn-train's metric processor reads them.
/// (Kept in memory: burn-train 0.21 logs the first epoch of a resumed run into `epoch-1`, so
/// its files cannot tell a resumed run's epochs apart.)
#[derive(Clone, Default)]
pub struct Decisions(pub Arc<Mutex<Vec<ScaleRecord>>>);

impl Metric for Decisions {
    type Input = ScaleRecord;

    fn update(&mut self, record: &ScaleRecord, _: &MetricMetadata) -> SerializedEntry {
        self.0.lock().unwrap().push(record.clone());
        let scale = record.scale_used.to_string();
        SerializedEntry::new(scale.clone(), scale)
    }

    fn clear(&mut self) {}

    fn name(&self) -> MetricName {
        Arc::new("Decisions".to_string())
    }
}
