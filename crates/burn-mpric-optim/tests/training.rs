//! The low-precision optimizer in training, through the decorator (`Autodiff<MixedPrecision<Flex>>`,
//! `p=f32,c=bf16,o=f32`), Burn's optimizer adaptor and the loss scaler: a skipped step changes
//! nothing, a run resumed from files equals the uninterrupted run bit for bit, and a burn-nn
//! TransformerEncoder trains to the f32-master run's loss in every mode.

use std::path::PathBuf;
use std::sync::Mutex;

use burn::backend::{Autodiff, Flex};
use burn::module::{Module, Param};
use burn::nn::transformer::{
    TransformerEncoder, TransformerEncoderConfig, TransformerEncoderInput,
};
use burn::nn::{Linear, LinearConfig};
use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::{GradientsParams, Optimizer};
use burn::record::{BinFileRecorder, FullPrecisionSettings, Recorder};
use burn::tensor::backend::Backend;
use burn::tensor::{Distribution, Tensor};
use burn_mpric::{MixedPrecision, Policy};
use burn_mpric_optim::{
    DrawSource, LowPrecisionOptimizer, MasterWeights, OptimizerPrecision, StateDtype, held_bytes,
};
use burn_mpric_scale::{DeviceAdamConfig, DeviceAdamWConfig, LossScaleConfig, LossScaler};

type Mp = MixedPrecision<Flex>;
type B = Autodiff<Mp>;

fn device() -> burn::tensor::Device<B> {
    Mp::device(
        Default::default(),
        "p=f32,c=bf16,o=f32".parse::<Policy>().unwrap(),
    )
    .unwrap()
}

fn modes() -> Vec<OptimizerPrecision> {
    let mut modes = Vec::new();
    for state in [StateDtype::F32, StateDtype::Bf16] {
        for master in [
            MasterWeights::F32,
            MasterWeights::Stochastic,
            MasterWeights::Kahan,
        ] {
            modes.push(OptimizerPrecision::new(state, master).with_seed(17));
        }
    }
    // Stochastic rounding and Kahan with their uniforms made on the device (Flex would draw
    // them on the host): the same guarantees, from the other stream.
    for master in [MasterWeights::Stochastic, MasterWeights::Kahan] {
        modes.push(
            OptimizerPrecision::new(StateDtype::Bf16, master)
                .with_seed(17)
                .with_draws(DrawSource::Device),
        );
    }
    modes
}

#[derive(Module, Debug)]
struct Encoder<B: Backend> {
    encoder: TransformerEncoder<B>,
    head: Linear<B>,
}

impl<B: Backend> Encoder<B> {
    fn new(device: &B::Device) -> Self {
        Self {
            encoder: TransformerEncoderConfig::new(32, 64, 4, 1)
                .with_dropout(0.0)
                .init(device),
            head: LinearConfig::new(32, 1).init(device),
        }
    }

    fn loss(&self, x: Tensor<B, 3>, y: Tensor<B, 2>) -> Tensor<B, 1> {
        let hidden = self.encoder.forward(TransformerEncoderInput::new(x));
        let out = self.head.forward(hidden.mean_dim(1).squeeze_dim(1));
        out.sub(y).square().mean()
    }
}

/// Fixed batches: `[8, 8, 32]` sequences whose target is three times the mean of their first
/// feature, plus noise of variance 0.25 that no model can learn (so the loss stays away from 0,
/// where relative gaps would be noise).
fn batches(count: usize) -> Vec<(Tensor<B, 3>, Tensor<B, 2>)> {
    let device = device();
    let _seeded = SEEDED.lock().unwrap();
    Flex::seed(&Default::default(), 3);
    let flex = Default::default();
    (0..count)
        .map(|_| {
            let x = Tensor::<Flex, 3>::random([8, 8, 32], Distribution::Normal(0.0, 1.0), &flex);
            let noise = Tensor::<Flex, 2>::random([8, 1], Distribution::Normal(0.0, 0.5), &flex);
            let y = x
                .clone()
                .slice_dim(2, 0..1)
                .mean_dim(1)
                .reshape([8, 1])
                .mul_scalar(3.0)
                .add(noise);
            (
                Tensor::from_data(x.into_data(), &device),
                Tensor::from_data(y.into_data(), &device),
            )
        })
        .collect()
}

/// Held while Flex's global generator is seeded and drawn from, so that tests running in
/// parallel draw the same numbers.
static SEEDED: Mutex<()> = Mutex::new(());

fn initial_model() -> Encoder<B> {
    let _seeded = SEEDED.lock().unwrap();
    Flex::seed(&Default::default(), 7);
    let model = Encoder::<Flex>::new(&Default::default());
    let recorder = burn::record::BinBytesRecorder::<FullPrecisionSettings>::new();
    let bytes = recorder.record(model.into_record(), ()).unwrap();
    Encoder::<B>::new(&device()).load_record(recorder.load(bytes, &device()).unwrap())
}

type Optim = OptimizerAdaptor<LowPrecisionOptimizer<DeviceAdamConfig>, Encoder<B>, B>;

/// One step through the loss scaler; a poisoned step's loss is NaN.
fn step(
    model: Encoder<B>,
    optim: &mut Optim,
    scaler: &mut LossScaler,
    batch: &(Tensor<B, 3>, Tensor<B, 2>),
    poison: bool,
    lr: f64,
) -> (Encoder<B>, f32, bool) {
    let mut loss = model.loss(batch.0.clone(), batch.1.clone());
    if poison {
        loss = loss.mul_scalar(f32::NAN);
    }
    let grads = GradientsParams::from_grads(scaler.scale_loss(loss.clone()).backward(), &model);
    let (model, outcome) = scaler.step(optim, lr, model, grads);
    let outcome = outcome.unwrap();
    (model, loss.into_scalar(), outcome.is_applied())
}

fn params(model: &Encoder<B>) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    struct Collect<'a>(&'a mut Vec<(String, Vec<u8>)>);
    impl<B: Backend> burn::module::ModuleVisitor<B> for Collect<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            let tensor = param.val();
            let dtype = format!("{:?}", tensor.dtype());
            self.0.push((dtype, tensor.into_data().as_bytes().to_vec()));
        }
    }
    model.visit(&mut Collect(&mut out));
    out
}

/// Each parameter's optimizer state as bytes, in parameter order (the record is a hash map).
fn optimizer_bytes(optim: &Optim) -> Vec<(String, Vec<u8>)> {
    let recorder = burn::record::BinBytesRecorder::<FullPrecisionSettings>::new();
    let mut states: Vec<_> = optim
        .to_record()
        .into_iter()
        .map(|(id, state)| (id.to_string(), recorder.record(state, ()).unwrap()))
        .collect();
    states.sort();
    states
}

fn new_scaler() -> LossScaler {
    LossScaler::dynamic(LossScaleConfig::new().with_initial_scale(256.0)).unwrap()
}

#[test]
fn a_skipped_step_leaves_parameters_state_and_stream_bit_identical() {
    let data = batches(2);
    for precision in modes() {
        let lp = LowPrecisionOptimizer::new(DeviceAdamConfig::new(), precision).unwrap();
        let mut optim: Optim = lp.init();
        let mut scaler = new_scaler();
        let model = lp.store_params(initial_model());
        let (model, _, applied) = step(model, &mut optim, &mut scaler, &data[0], false, 1e-3);
        assert!(applied);
        let (before, state) = (params(&model), optimizer_bytes(&optim));
        let (model, _, applied) = step(model, &mut optim, &mut scaler, &data[1], true, 1e-3);
        assert!(!applied, "{precision}");
        assert!(params(&model) == before, "{precision}: parameters changed");
        assert!(
            optimizer_bytes(&optim) == state,
            "{precision}: optimizer state changed"
        );
        let dtype = if precision.master.is_bf16() {
            "BF16"
        } else {
            "F32"
        };
        let dtypes: Vec<_> = before.iter().map(|(d, b)| (d.clone(), b.len())).collect();
        assert!(
            before.iter().all(|(d, _)| d == dtype),
            "{precision}: {dtypes:?}"
        );
    }
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("burn-mpric-optim-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn a_run_resumed_from_files_equals_the_uninterrupted_run_in_every_mode() {
    const STEPS: usize = 6;
    const SAVE_AFTER: usize = 3;
    let data = batches(STEPS);
    let poisoned = |i: usize| i == 1 || i == 4;
    let dir = temp_dir("resume");
    let recorder = BinFileRecorder::<FullPrecisionSettings>::new();
    for (n, precision) in modes().into_iter().enumerate() {
        let lp = LowPrecisionOptimizer::new(DeviceAdamWConfig::new(), precision).unwrap();
        let run = |model: Encoder<B>,
                   optim: &mut OptimizerAdaptor<_, _, _>,
                   scaler: &mut LossScaler,
                   range: std::ops::Range<usize>| {
            let mut model = model;
            for i in range {
                let mut loss = model.loss(data[i].0.clone(), data[i].1.clone());
                if poisoned(i) {
                    loss = loss.mul_scalar(f32::NAN);
                }
                let grads = GradientsParams::from_grads(scaler.scale_loss(loss).backward(), &model);
                model = scaler.step(optim, 1e-3, model, grads).0;
            }
            model
        };

        let (mut optim, mut scaler) = (lp.init(), new_scaler());
        let uninterrupted = run(
            lp.store_params(initial_model()),
            &mut optim,
            &mut scaler,
            0..STEPS,
        );

        let (mut optim, mut scaler) = (lp.init(), new_scaler());
        let model = run(
            lp.store_params(initial_model()),
            &mut optim,
            &mut scaler,
            0..SAVE_AFTER,
        );
        let (model_file, optim_file) = (
            dir.join(format!("model-{n}")),
            dir.join(format!("optim-{n}")),
        );
        recorder
            .record(model.into_record(), model_file.clone())
            .unwrap();
        recorder
            .record(optim.to_record(), optim_file.clone())
            .unwrap();
        let scaler_record = scaler.to_record();
        drop(optim);

        // A new process: a fresh optimizer (its stream counter at 0) and the files.
        let lp = LowPrecisionOptimizer::new(DeviceAdamWConfig::new(), precision).unwrap();
        let model = initial_model().load_record(recorder.load(model_file, &device()).unwrap());
        let model = lp.store_params(model);
        let mut optim = lp
            .init()
            .load_record(recorder.load(optim_file, &device()).unwrap());
        let mut scaler = LossScaler::from_record(scaler_record).unwrap();
        let resumed = run(model, &mut optim, &mut scaler, SAVE_AFTER..STEPS);
        assert!(
            params(&resumed) == params(&uninterrupted),
            "{precision}: resumed run differs"
        );
    }
    std::fs::remove_dir_all(dir).ok();
}

/// 160 Adam steps, 5 passes over 32 fixed batches; the last pass's mean loss in each mode against the
/// f32-master run's (same policy, same data, same initial weights), and the bytes the
/// parameters and the state hold, read from the tensors, against the bytes the mode promises.
#[test]
fn a_transformer_encoder_trains_to_the_f32_master_loss_in_every_mode() {
    const STEPS: usize = 160;
    const BATCHES: usize = 32;
    let data = batches(BATCHES);
    // Linear decay from 2e-3 to 1e-4, as recipes schedule it.
    let lr = |i: usize| 2e-3 - 1.9e-3 * i as f64 / (STEPS - 1) as f64;
    let mut finals = Vec::new();
    for precision in modes() {
        let lp = LowPrecisionOptimizer::new(DeviceAdamConfig::new(), precision).unwrap();
        let mut optim: Optim = lp.init();
        let mut scaler = new_scaler();
        let mut model = lp.store_params(initial_model());
        let mut losses = Vec::new();
        for i in 0..STEPS {
            let (m, loss, _) = step(
                model,
                &mut optim,
                &mut scaler,
                &data[i % BATCHES],
                false,
                lr(i),
            );
            model = m;
            losses.push(loss);
        }
        let last = losses[STEPS - BATCHES..].iter().sum::<f32>() / BATCHES as f32;
        assert!(
            last < 0.8 * losses[..BATCHES].iter().sum::<f32>() / BATCHES as f32,
            "{precision}: {} -> {last}",
            losses[0]
        );
        let held = held_bytes(&model, &optim).per_parameter();
        let promised = lp.bytes_per_parameter().without_grad() as f64;
        // Adam's two f32 step-count scalars per parameter tensor come on top.
        assert!(
            held >= promised && held < promised + 0.05,
            "{precision}: {held} bytes, {promised}"
        );
        finals.push((precision, last, held));
    }
    let (_, reference, reference_bytes) = finals[0];
    for (precision, last, bytes) in &finals {
        eprintln!(
            "{precision}: loss {last} ({reference}), {bytes:.2} bytes/param ({reference_bytes:.2})"
        );
    }
    for (precision, last, _) in &finals[1..] {
        let gap = (last - reference).abs() / reference;
        assert!(
            gap < 0.01,
            "{precision}: {last} against {reference} ({:.2}%)",
            gap * 100.0
        );
    }
}
