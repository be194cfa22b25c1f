//! A burn-train `Learner` run on `Autodiff<MixedPrecision<Flex>>` at f16 with dynamic loss
//! scaling and a poisoned batch: the step is skipped, the scale backs off, the metrics show
//! it, and training still converges.

use burn::backend::{Autodiff, Flex};
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
use burn_mpric::{MixedPrecision, Policy};
use burn_mpric_learner::{LossScaleMetric, LossStep, Scaled, ScalerHandle, SkippedStepsMetric};

type Mp = MixedPrecision<Flex>;
type Ad = Autodiff<Mp>;

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

#[derive(Clone, Debug)]
struct Sample {
    x: [f32; 4],
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
            Tensor::from_data(TensorData::new(x, [n, 4]), device),
            Tensor::from_data(TensorData::new(y, [n]), device),
        )
    }
}

/// Three well-separated classes; with `poison`, one sample's feature is +inf.
fn samples(poison: bool) -> Vec<Sample> {
    let mut out = Vec::new();
    for i in 0..96 {
        let class = i % 3;
        let jitter = ((i * 37) % 11) as f32 / 11.0 - 0.5;
        let mut x = [jitter * 0.3; 4];
        x[class] += 2.0;
        x[3] = jitter;
        out.push(Sample { x, y: class as i64 });
    }
    if poison {
        out[40].x[0] = f32::INFINITY;
    }
    out
}

#[test]
fn a_poisoned_batch_is_skipped_the_scale_backs_off_and_training_converges() {
    let device = Mp::device(Default::default(), "mixed_f16".parse::<Policy>().unwrap()).unwrap();
    let handle = ScalerHandle::new(
        LossScaler::dynamic(LossScaleConfig::torch().with_initial_scale(1024.0)).unwrap(),
    );
    <Ad as Backend>::seed(&device, 3);
    let model = Classifier::<Ad> {
        l1: LinearConfig::new(4, 16).init(&device),
        l2: LinearConfig::new(16, 3).init(&device),
    };
    let train = DataLoaderBuilder::new(SampleBatcher)
        .batch_size(16)
        .set_device(device.clone())
        .build(InMemDataset::new(samples(true)));
    let valid = DataLoaderBuilder::new(SampleBatcher)
        .batch_size(32)
        .set_device(device.clone())
        .build(InMemDataset::new(samples(false)));

    let dir = std::env::temp_dir().join(format!("mpric-learner-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let learner = Learner::new(
        Scaled::new(model, handle.clone()),
        AdamConfig::new().init(),
        5e-2,
    );
    let result = SupervisedTraining::new(&dir, train, valid)
        .metric_train_numeric(LossScaleMetric::new(handle.clone()))
        .metric_train_numeric(SkippedStepsMetric::new(handle.clone()))
        .metric_train_numeric(LossMetric::new())
        .metric_valid_numeric(AccuracyMetric::new())
        .num_epochs(4)
        .launch(learner);

    // 6 batches per epoch, the third one poisoned: one skip per epoch, each a back-off.
    let stats = handle.stats();
    assert_eq!(stats.steps, 24);
    assert_eq!(stats.skipped, 4);
    assert!(
        handle.scale() < 1024.0,
        "the scale backed off: {}",
        handle.scale()
    );

    // The metric logs (one `value,count` line per step) show the back-off and the skips.
    let log = |file: &str| -> Vec<f64> {
        std::fs::read_to_string(dir.join(file))
            .unwrap_or_else(|e| panic!("{file}: {e}"))
            .lines()
            .map(|line| line.split(',').next().unwrap().parse().unwrap())
            .collect()
    };
    assert_eq!(
        log("train/epoch-1/Loss_Scale.log")[..3],
        [1024.0, 1024.0, 512.0]
    );
    assert_eq!(log("train/epoch-1/Skipped_Steps.log")[..3], [0.0, 0.0, 1.0]);
    assert_eq!(log("train/epoch-4/Skipped_Steps.log").last(), Some(&4.0));

    // Training still converges: the model classifies the clean data.
    let model = result.model.into_inner();
    let (x, y): (Tensor<Mp, 2>, Tensor<Mp, 1, Int>) = SampleBatcher.batch(samples(false), &device);
    let out = model.classify(x, y.clone());
    let predicted = out.output.argmax(1).reshape([96]);
    let correct: i64 = predicted.equal(y).int().sum().into_scalar().into();
    assert!(correct >= 90, "accuracy {correct}/96");
    std::fs::remove_dir_all(&dir).ok();
}
