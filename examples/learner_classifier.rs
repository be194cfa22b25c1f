//! Trains a classifier with burn-train's `Learner` under mixed precision with loss scaling:
//! on `Autodiff<MixedPrecision<Flex>>` (bf16 compute, no scaling needed) and on
//! `Autodiff<MixedPrecision<Wgpu>>` (f16 compute, dynamic loss scale). The loss scale and the
//! skipped steps are logged as metrics next to the loss and the accuracy.
//!
//! `cargo run -p burn-mpric-examples --example learner_classifier`

use burn::backend::{Autodiff, Flex, Wgpu};
use burn::data::dataloader::{DataLoaderBuilder, batcher::Batcher};
use burn::data::dataset::InMemDataset;
use burn::module::Module;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::{Linear, LinearConfig};
use burn::optim::AdamConfig;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Int, Tensor, TensorData};
use burn::train::metric::{AccuracyMetric, LossMetric};
use burn::train::{ClassificationOutput, InferenceStep, Learner, SupervisedTraining};
use burn_mpric::scale::{LossScaleConfig, LossScaler};
use burn_mpric::{MixedPrecision, MpDevice, Policy};
use burn_mpric_learner::{LossScaleMetric, LossStep, Scaled, ScalerHandle, SkippedStepsMetric};

#[derive(Module, Debug)]
struct Classifier<B: Backend> {
    l1: Linear<B>,
    l2: Linear<B>,
}

impl<B: Backend> Classifier<B> {
    fn classify(&self, x: Tensor<B, 2>, y: Tensor<B, 1, Int>) -> ClassificationOutput<B> {
        let logits = self
            .l2
            .forward(burn::tensor::activation::relu(self.l1.forward(x)));
        let loss = CrossEntropyLossConfig::new()
            .init(&logits.device())
            .forward(logits.clone(), y.clone());
        ClassificationOutput::new(loss, logits, y)
    }
}

impl<B: AutodiffBackend> LossStep<B> for Classifier<B> {
    type Input = (Tensor<B, 2>, Tensor<B, 1, Int>);
    type Output = ClassificationOutput<B>;

    fn loss_step(&self, (x, y): Self::Input) -> (Tensor<B, 1>, Self::Output) {
        let out = self.classify(x, y);
        (out.loss.clone(), out)
    }
}

impl<B: Backend> InferenceStep for Classifier<B> {
    type Input = (Tensor<B, 2>, Tensor<B, 1, Int>);
    type Output = ClassificationOutput<B>;

    fn step(&self, (x, y): Self::Input) -> Self::Output {
        self.classify(x, y)
    }
}

/// Points around three centres in 8 dimensions.
#[derive(Clone, Debug)]
struct Sample {
    x: [f32; 8],
    y: i64,
}

#[derive(Clone)]
struct SampleBatcher;

impl<B: Backend> Batcher<B, Sample, (Tensor<B, 2>, Tensor<B, 1, Int>)> for SampleBatcher {
    fn batch(&self, items: Vec<Sample>, device: &B::Device) -> (Tensor<B, 2>, Tensor<B, 1, Int>) {
        let n = items.len();
        let x: Vec<f32> = items.iter().flat_map(|s| s.x).collect();
        let y: Vec<i64> = items.iter().map(|s| s.y).collect();
        (
            Tensor::from_data(TensorData::new(x, [n, 8]), device),
            Tensor::from_data(TensorData::new(y, [n]), device),
        )
    }
}

fn dataset(n: usize, offset: usize) -> InMemDataset<Sample> {
    let samples = (offset..offset + n)
        .map(|i| {
            let class = i % 3;
            let mut x = [0.0; 8];
            for (d, v) in x.iter_mut().enumerate() {
                *v = (((i * 7919 + d * 104_729) % 1000) as f32 / 1000.0 - 0.5) * 1.5;
            }
            x[class] += 1.5;
            Sample { x, y: class as i64 }
        })
        .collect();
    InMemDataset::new(samples)
}

fn train<B: Backend>(name: &str, device: MpDevice<B>, scaler: LossScaler) {
    type M<B> = Classifier<Autodiff<MixedPrecision<B>>>;
    let handle = ScalerHandle::new(scaler);
    let model: M<B> = Classifier {
        l1: LinearConfig::new(8, 32).init(&device),
        l2: LinearConfig::new(32, 3).init(&device),
    };
    let train = DataLoaderBuilder::new(SampleBatcher)
        .batch_size(32)
        .shuffle(7)
        .set_device(device.clone())
        .build(dataset(960, 0));
    let valid = DataLoaderBuilder::new(SampleBatcher)
        .batch_size(64)
        .set_device(device.clone())
        .build(dataset(192, 5000));
    let dir = std::env::temp_dir().join(format!("mpric-learner-example-{name}"));
    let learner = Learner::new(
        Scaled::new(model, handle.clone()),
        AdamConfig::new().init(),
        1e-2,
    );
    SupervisedTraining::new(&dir, train, valid)
        .metric_train_numeric(LossMetric::new())
        .metric_train_numeric(LossScaleMetric::new())
        .metric_train_numeric(SkippedStepsMetric::new())
        .metric_valid_numeric(AccuracyMetric::new())
        .num_epochs(3)
        .launch(learner);
    let stats = handle.stats();
    println!(
        "{name}: {} steps, {} skipped, final loss scale {}; metrics in {}",
        stats.steps,
        stats.skipped,
        handle.scale(),
        dir.display()
    );
}

fn main() {
    let bf16: Policy = "p=f32,c=bf16,o=f32".parse().expect("valid policy");
    let device = MixedPrecision::<Flex>::device(Default::default(), bf16).expect("Flex runs bf16");
    // bf16 has f32's range: no scaling, but non-finite steps are still skipped.
    train("flex-bf16", device, LossScaler::noop());

    let f16: Policy = "p=f32,c=f16,o=f32".parse().expect("valid policy");
    match MixedPrecision::<Wgpu>::device(Default::default(), f16) {
        Ok(device) => {
            let scaler = LossScaler::dynamic(LossScaleConfig::torch()).expect("valid preset");
            train("wgpu-f16", device, scaler);
        }
        Err(err) => println!("wgpu-f16: skipped: {err}"),
    }
}
