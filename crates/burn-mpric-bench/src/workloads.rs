//! The workloads: what one iteration of each does, generic over the backend, with a
//! deterministic init so that every variant starts from the same numbers.

use burn::module::{AutodiffModule, Module, ModuleMapper, Param};
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::loss::{MseLoss, Reduction};
use burn::nn::transformer::{
    TransformerEncoder, TransformerEncoderConfig, TransformerEncoderInput,
};
use burn::nn::{Linear, LinearConfig, PaddingConfig2d, Relu};
use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::{Adam, AdamConfig, GradientsParams};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{FloatDType, Tensor, TensorData};
use burn_mpric::{Castable, ModuleParams, cast_grads_to_param_dtype};
use burn_mpric_scale::{
    DeviceAdamConfig, DeviceLossScaler, DeviceOptimizer, LossScaleConfig, LossScaler,
    apply_gradients,
};
use clap::ValueEnum;
use serde::Serialize;

use crate::harness::Case;

/// The workloads of the suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Workload {
    /// `a.matmul(b)` for square matrices.
    #[value(name = "matmul")]
    Matmul,
    /// A 3x3 `Conv2d` layer, forward.
    #[value(name = "conv2d")]
    Conv2d,
    /// An MLP training step: forward, backward, Adam.
    #[value(name = "mlp_step")]
    MlpStep,
    /// One transformer encoder block (Burn's `TransformerEncoder`, 1 layer): forward,
    /// backward, Adam; also at pure half.
    #[value(name = "transformer_block_step")]
    TransformerBlockStep,
    /// A 2-layer transformer encoder step whose activations dominate its memory; also at pure
    /// half.
    //
    // Batch x sequence is large against the parameters and the attention maps are as large as
    // the feed-forward activations: the shape mixed precision is meant to save memory on.
    #[value(name = "transformer_activations_step")]
    TransformerActivationsStep,
    /// The MLP training step with a dynamic loss scaler vs without one.
    #[value(name = "loss_scaler_step")]
    LossScalerStep,
    /// Casts per MLP training step, and their share of its time.
    #[value(name = "cast_overhead")]
    CastOverhead,
}

impl Workload {
    /// Every workload, in report order.
    pub const ALL: [Workload; 7] = [
        Workload::Matmul,
        Workload::Conv2d,
        Workload::MlpStep,
        Workload::TransformerBlockStep,
        Workload::TransformerActivationsStep,
        Workload::LossScalerStep,
        Workload::CastOverhead,
    ];

    /// The name used on the command line and in the report.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Matmul => "matmul",
            Workload::Conv2d => "conv2d",
            Workload::MlpStep => "mlp_step",
            Workload::TransformerBlockStep => "transformer_block_step",
            Workload::TransformerActivationsStep => "transformer_activations_step",
            Workload::LossScalerStep => "loss_scaler_step",
            Workload::CastOverhead => "cast_overhead",
        }
    }
}

/// The shape of one benchmarked computation.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Spec {
    /// `[n, n] x [n, n]`.
    Matmul {
        /// Matrix side.
        n: usize,
    },
    /// `Conv2d` 3x3, stride 1, "same" padding, on `[batch, c_in, hw, hw]`.
    Conv2d {
        /// Batch size.
        batch: usize,
        /// Input channels.
        c_in: usize,
        /// Output channels.
        c_out: usize,
        /// Image height and width.
        hw: usize,
    },
    /// An MLP `dims[0] -> dims[1] -> ... -> dims[last]` with ReLU between layers, MSE loss.
    Mlp {
        /// Batch size.
        batch: usize,
        /// Layer widths, input first.
        dims: Vec<usize>,
        /// The loss scaler the step trains with, if any.
        scaler: Scaling,
    },
    /// A post-norm transformer encoder, GELU, no dropout, MSE loss to a fixed target.
    Transformer {
        /// Batch size.
        batch: usize,
        /// Sequence length.
        seq: usize,
        /// Model width.
        d_model: usize,
        /// Attention heads.
        heads: usize,
        /// Feed-forward width.
        d_ff: usize,
        /// Encoder layers.
        layers: usize,
    },
}

impl Spec {
    /// A short description for the report.
    pub fn label(&self) -> String {
        match self {
            Spec::Matmul { n } => format!("{n}x{n}"),
            Spec::Conv2d {
                batch,
                c_in,
                c_out,
                hw,
            } => format!("b{batch} {c_in}->{c_out}ch {hw}x{hw}"),
            Spec::Mlp { batch, dims, .. } => {
                let dims: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
                format!("b{batch} {}", dims.join("-"))
            }
            Spec::Transformer {
                batch,
                seq,
                d_model,
                heads,
                d_ff,
                layers,
            } => format!("b{batch} s{seq} d{d_model} h{heads} ff{d_ff} l{layers}"),
        }
    }
}

/// Deterministic values, uniform in `[-bound, bound]`, from a local generator: every backend
/// and variant gets the same numbers, whatever its RNG.
pub fn values(n: usize, seed: u64, bound: f32) -> Vec<f32> {
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407)
        | 1;
    (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let unit = (state >> 40) as f32 / (1u64 << 24) as f32;
            (2.0 * unit - 1.0) * bound
        })
        .collect()
}

pub(crate) fn tensor<B: Backend, const D: usize>(
    shape: [usize; D],
    seed: u64,
    bound: f32,
    device: &B::Device,
) -> Tensor<B, D> {
    let n = shape.iter().product();
    Tensor::from_data(TensorData::new(values(n, seed, bound), shape), device)
}

/// The bound of the deterministic values that replace a parameter of shape `dims` holding
/// `host`: `1/sqrt(fan_in)`; `None` for a constant parameter (a norm's scale or shift), which
/// is kept. Both editions' rows initialise their models by this rule.
pub fn init_bound(dims: &[usize], host: &[f32]) -> Option<f32> {
    if host.windows(2).all(|w| w[0] == w[1]) {
        return None;
    }
    let fan_in: usize = match dims.len() {
        1 | 2 => dims[0],
        _ => dims[1..].iter().product(),
    };
    Some(1.0 / (fan_in.max(1) as f32).sqrt())
}

/// Replaces every randomly initialised float parameter with deterministic values (uniform,
/// bound `1/sqrt(fan_in)`); constant ones (norm scales and shifts) are kept.
struct DeterministicInit<'a, B: Backend> {
    device: &'a B::Device,
    seed: u64,
}

impl<B: Backend> ModuleMapper<B> for DeterministicInit<'_, B> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        self.seed += 1;
        let seed = self.seed;
        let device = self.device.clone();
        param.map(|t| {
            let dims = t.dims();
            let host = t
                .clone()
                .cast(FloatDType::F32)
                .into_data()
                .to_vec::<f32>()
                .expect("f32 data");
            let Some(bound) = init_bound(&dims, &host) else {
                return t;
            };
            let require_grad = t.is_require_grad();
            tensor::<B, D>(dims, seed, bound, &device).set_require_grad(require_grad)
        })
    }
}

pub(crate) fn deterministic<B: Backend, M: Module<B>>(
    module: M,
    device: &B::Device,
    seed: u64,
) -> M {
    module.map(&mut DeterministicInit { device, seed })
}

fn sync<B: Backend>(device: &B::Device) {
    B::sync(device).expect("device sync");
}

fn to_f32<B: Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f32> {
    t.cast(FloatDType::F32)
        .into_data()
        .to_vec::<f32>()
        .expect("f32 data")
}

struct MatmulCase<B: Backend> {
    a: Tensor<B, 2>,
    b: Tensor<B, 2>,
    device: B::Device,
}

impl<B: Backend> Case for MatmulCase<B> {
    fn step(&mut self) {
        self.step_sampled(&|| {});
    }

    fn step_sampled(&mut self, sample: &dyn Fn()) {
        let c = self.a.clone().matmul(self.b.clone());
        sample();
        sync::<B>(&self.device);
        drop(c);
    }

    fn output(&mut self) -> Vec<f32> {
        to_f32(self.a.clone().matmul(self.b.clone()))
    }
}

struct ConvCase<B: Backend> {
    conv: Conv2d<B>,
    x: Tensor<B, 4>,
    device: B::Device,
}

impl<B: Backend> Case for ConvCase<B> {
    fn step(&mut self) {
        self.step_sampled(&|| {});
    }

    fn step_sampled(&mut self, sample: &dyn Fn()) {
        let y = self.conv.forward(self.x.clone());
        sample();
        sync::<B>(&self.device);
        drop(y);
    }

    fn output(&mut self) -> Vec<f32> {
        to_f32(self.conv.forward(self.x.clone()))
    }
}

/// How a training workload scales its loss.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Scaling {
    /// No loss scaler: Burn's Adam on the gradients cast to the parameters' dtypes.
    None,
    /// `LossScaler` (PyTorch's defaults) around Burn's Adam: one host read between backward
    /// and the optimizer.
    HostRead,
    /// `DeviceLossScaler` (PyTorch's defaults) with the device path's Adam: no host read in
    /// the step; the pending outcomes are read every 64 steps.
    OnDevice,
}

/// The MLP of `mlp_step`, `loss_scaler_step` and `cast_overhead`.
#[derive(Module, Debug)]
pub struct Mlp<B: Backend> {
    layers: Vec<Linear<B>>,
    act: Relu,
}

impl<B: Backend> Mlp<B> {
    pub(crate) fn new(dims: &[usize], device: &B::Device) -> Self {
        let layers = dims
            .windows(2)
            .map(|w| LinearConfig::new(w[0], w[1]).init(device))
            .collect();
        Self {
            layers,
            act: Relu::new(),
        }
    }

    pub(crate) fn forward(&self, mut x: Tensor<B, 2>) -> Tensor<B, 2> {
        let last = self.layers.len() - 1;
        for (i, layer) in self.layers.iter().enumerate() {
            x = layer.forward(x);
            if i < last {
                x = self.act.forward(x);
            }
        }
        x
    }
}

/// A model, its data and its loss, for [`TrainCase`].
trait Task<B: AutodiffBackend> {
    type Model: AutodiffModule<B>;

    /// The loss at f32 (the prediction is cast to f32 before the loss, whatever the policy).
    fn loss(&self, model: &Self::Model) -> Tensor<B, 1>;

    /// The model's prediction on the batch, as f32.
    fn prediction(&self, model: &Self::Model) -> Vec<f32>;
}

/// A step's input batch, made from host data at every step as a training loop's data loader
/// makes it: a new value each time, so no cast of it outlives the step.
struct Batch<B: Backend> {
    data: TensorData,
    device: B::Device,
}

impl<B: Backend> Batch<B> {
    /// The batch `tensor` holds, at its dtype.
    fn of<const D: usize>(tensor: Tensor<B, D>) -> Self {
        Self {
            device: tensor.device(),
            data: tensor.into_data(),
        }
    }

    fn load<const D: usize>(&self) -> Tensor<B, D> {
        Tensor::from_data(self.data.clone(), (&self.device, self.data.dtype))
    }
}

struct MlpTask<B: Backend> {
    x: Batch<B>,
    y: Tensor<B, 2>,
}

impl<B: AutodiffBackend> Task<B> for MlpTask<B> {
    type Model = Mlp<B>;

    fn loss(&self, model: &Mlp<B>) -> Tensor<B, 1> {
        let pred = model.forward(self.x.load()).cast(FloatDType::F32);
        MseLoss::new().forward(pred, self.y.clone(), Reduction::Mean)
    }

    fn prediction(&self, model: &Mlp<B>) -> Vec<f32> {
        to_f32(model.forward(self.x.load()))
    }
}

struct TransformerTask<B: Backend> {
    x: Batch<B>,
    y: Tensor<B, 3>,
}

impl<B: AutodiffBackend> Task<B> for TransformerTask<B> {
    type Model = TransformerEncoder<B>;

    fn loss(&self, model: &TransformerEncoder<B>) -> Tensor<B, 1> {
        let out = model
            .forward(TransformerEncoderInput::new(self.x.load()))
            .cast(FloatDType::F32);
        MseLoss::new().forward(out, self.y.clone(), Reduction::Mean)
    }

    fn prediction(&self, model: &TransformerEncoder<B>) -> Vec<f32> {
        to_f32(model.forward(TransformerEncoderInput::new(self.x.load())))
    }
}

/// The learning rate of every training workload.
const LR: f64 = 1e-3;
/// Training steps before the prediction the numeric error is computed on.
const ERROR_STEPS: usize = 3;

/// One training step per iteration: loss, backward, gradients cast to the param dtype, Adam
/// (or the loss scaler's step around Adam).
struct TrainCase<B: AutodiffBackend, T: Task<B>> {
    task: T,
    model: Option<T::Model>,
    optim: OptimizerAdaptor<Adam, T::Model, B>,
    scaler: StepScaler<B>,
    device: B::Device,
}

/// The scaler of a [`TrainCase`], as [`Scaling`] chose it.
enum StepScaler<B: AutodiffBackend> {
    None,
    Host(LossScaler),
    Device(
        Box<DeviceLossScaler<B::InnerBackend>>,
        DeviceOptimizer<DeviceAdamConfig, B::InnerBackend>,
    ),
}

impl<B: AutodiffBackend, T: Task<B>> TrainCase<B, T> {
    fn new(task: T, model: T::Model, scaling: Scaling, device: &B::Device) -> Self {
        let torch = || LossScaler::dynamic(LossScaleConfig::torch()).expect("valid preset");
        let scaler = match scaling {
            Scaling::None => StepScaler::None,
            Scaling::HostRead => StepScaler::Host(torch()),
            Scaling::OnDevice => StepScaler::Device(
                Box::new(
                    DeviceLossScaler::new(torch(), device)
                        .expect("the torch preset's factors are exact in f32")
                        .with_sync_every(64),
                ),
                DeviceOptimizer::new(DeviceAdamConfig::new()),
            ),
        };
        Self {
            task,
            model: Some(model),
            optim: AdamConfig::new().init(),
            scaler,
            device: device.clone(),
        }
    }

    /// One step; `sample` is called after the forward pass, after backward and at the end.
    fn train_step(&mut self, sample: &dyn Fn()) {
        let model = self.model.take().expect("model");
        let loss = self.task.loss(&model);
        sample();
        let model = match &mut self.scaler {
            StepScaler::None => {
                let grads = GradientsParams::from_grads(loss.backward(), &model);
                sample();
                let grads = cast_grads_to_param_dtype(&model, grads);
                // The scaler's own optimizer step, without its checks: the baseline it is
                // measured against.
                apply_gradients(&mut self.optim, LR, model, grads)
            }
            StepScaler::Host(scaler) => {
                let scaled = scaler.scale_loss(loss);
                let grads = GradientsParams::from_grads(scaled.backward(), &model);
                sample();
                let (model, outcome) = scaler.step(&mut self.optim, LR, model, grads);
                outcome.expect("device read");
                model
            }
            StepScaler::Device(scaler, optim) => {
                let scaled = scaler.scale_loss(loss);
                let grads = GradientsParams::from_grads(scaled.backward(), &model);
                sample();
                let (model, learned) = scaler.step::<B, _, _, 1>(optim, LR, model, grads, None);
                learned.expect("device read");
                model
            }
        };
        self.model = Some(model);
        sample();
    }
}

impl<B: AutodiffBackend, T: Task<B>> Case for TrainCase<B, T> {
    fn step(&mut self) {
        self.train_step(&|| {});
        sync::<B>(&self.device);
    }

    fn step_sampled(&mut self, sample: &dyn Fn()) {
        self.train_step(sample);
        sync::<B>(&self.device);
    }

    fn output(&mut self) -> Vec<f32> {
        for _ in 0..ERROR_STEPS {
            self.train_step(&|| {});
        }
        self.task.prediction(self.model.as_ref().expect("model"))
    }
}

/// The dtype a case stores its parameters and inputs at (loss targets stay f32: the loss is
/// computed at f32 in every variant).
///
/// f32 for the bare backend and every `MixedPrecision` variant (the decorator casts to its
/// compute dtype itself). A half dtype gives the "pure half" variants: the bare backend
/// training a model whose parameters, gradients and Adam moments are all f16 or bf16, the
/// ideal that mixed precision's time and memory are compared with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Storage(pub FloatDType);

impl Storage {
    /// Parameters and inputs at f32.
    pub const F32: Storage = Storage(FloatDType::F32);

    fn tensor<B: Backend, const D: usize>(self, tensor: Tensor<B, D>) -> Tensor<B, D> {
        if self == Self::F32 {
            tensor
        } else {
            tensor.cast(self.0)
        }
    }

    /// The module with its float parameters cast, trainable ones kept trainable leaves.
    fn module<B: Backend, M: Module<B>>(self, module: M) -> M {
        if self == Self::F32 {
            module
        } else {
            ModuleParams(module).cast_floats(self.0).0
        }
    }
}

/// Builds the case of `spec` on `device`, its parameters and inputs stored as `storage` says.
/// Forward-only workloads run on the backend under autodiff (`B::InnerBackend`), training ones
/// on `B`.
pub fn build<B: AutodiffBackend>(
    spec: &Spec,
    storage: Storage,
    device: &B::Device,
) -> Box<dyn Case> {
    match spec {
        Spec::Matmul { n } => {
            let n = *n;
            Box::new(MatmulCase::<B::InnerBackend> {
                a: storage.tensor(tensor([n, n], 1, 1.0, device)),
                b: storage.tensor(tensor([n, n], 2, 1.0, device)),
                device: device.clone(),
            })
        }
        Spec::Conv2d {
            batch,
            c_in,
            c_out,
            hw,
        } => {
            let conv = Conv2dConfig::new([*c_in, *c_out], [3, 3])
                .with_padding(PaddingConfig2d::Same)
                .init::<B::InnerBackend>(device);
            Box::new(ConvCase::<B::InnerBackend> {
                conv: storage.module(deterministic(conv, device, 10)),
                x: storage.tensor(tensor([*batch, *c_in, *hw, *hw], 3, 1.0, device)),
                device: device.clone(),
            })
        }
        Spec::Mlp {
            batch,
            dims,
            scaler,
        } => {
            let model = deterministic(Mlp::<B>::new(dims, device), device, 20);
            let task = MlpTask {
                x: Batch::of(storage.tensor(tensor([*batch, dims[0]], 4, 1.0, device))),
                y: tensor([*batch, *dims.last().expect("dims")], 5, 1.0, device),
            };
            Box::new(TrainCase::new(task, storage.module(model), *scaler, device))
        }
        Spec::Transformer {
            batch,
            seq,
            d_model,
            heads,
            d_ff,
            layers,
        } => {
            let model = TransformerEncoderConfig::new(*d_model, *d_ff, *heads, *layers)
                .with_dropout(0.0)
                .init::<B>(device);
            let model = deterministic(model, device, 30);
            let task = TransformerTask {
                x: Batch::of(storage.tensor(tensor([*batch, *seq, *d_model], 6, 1.0, device))),
                y: tensor([*batch, *seq, *d_model], 7, 1.0, device),
            };
            Box::new(TrainCase::new(
                task,
                storage.module(model),
                Scaling::None,
                device,
            ))
        }
    }
}

/// Max absolute and relative error of `got` against `reference`; the relative error is the
/// max absolute error over the largest reference magnitude (robust to reference values near
/// zero). `None` when the lengths differ.
pub fn error(got: &[f32], reference: &[f32]) -> Option<(f64, f64)> {
    if got.len() != reference.len() {
        return None;
    }
    let mut max_abs = 0.0f64;
    let mut scale = 0.0f64;
    for (g, r) in got.iter().zip(reference) {
        let diff = (*g as f64 - *r as f64).abs();
        max_abs = if diff.is_nan() {
            f64::NAN
        } else {
            max_abs.max(diff)
        };
        scale = scale.max((*r as f64).abs());
    }
    let rel = if scale > 0.0 {
        max_abs / scale
    } else {
        max_abs
    };
    Some((max_abs, rel))
}

#[cfg(test)]
mod tests {
    use burn::backend::{Autodiff, Flex};
    use burn::tensor::DType;

    use super::*;

    #[test]
    fn half_storage_trains_half_params() {
        let _heap = crate::memory::heap_tests();
        type B = Autodiff<Flex>;
        let device = Default::default();
        let f16 = Storage(FloatDType::F16);
        let linear = f16.module(LinearConfig::new(4, 3).init::<B>(&device));
        let weight = linear.weight.val();
        assert_eq!(weight.dtype(), DType::F16);
        assert!(weight.is_require_grad());
        let x = f16.tensor(Tensor::<B, 2>::ones([2, 4], &device));
        let grads = linear.forward(x).sum().backward();
        let grad = linear
            .weight
            .grad(&grads)
            .expect("a gradient for the weight");
        assert_eq!(grad.dtype(), DType::F16);

        // A whole pure-f16 training run of the transformer workload.
        let spec = Spec::Transformer {
            batch: 2,
            seq: 4,
            d_model: 8,
            heads: 2,
            d_ff: 16,
            layers: 2,
        };
        let out = build::<B>(&spec, f16, &device).output();
        assert_eq!(out.len(), 2 * 4 * 8);
        assert!(out.iter().all(|v| v.is_finite()));
    }

    #[test]
    fn values_are_deterministic_and_bounded() {
        let a = values(1000, 7, 0.5);
        assert_eq!(a, values(1000, 7, 0.5));
        assert_ne!(a, values(1000, 8, 0.5));
        assert!(a.iter().all(|v| v.abs() <= 0.5));
    }

    #[test]
    fn error_is_max_abs_over_reference_scale() {
        let (abs, rel) = error(&[1.0, 2.5, -4.0], &[1.0, 2.0, -4.0]).unwrap();
        assert_eq!(abs, 0.5);
        assert_eq!(rel, 0.125);
        assert!(error(&[1.0], &[1.0, 2.0]).is_none());
    }
}
