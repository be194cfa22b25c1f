//! Shared helpers: devices, small burn-nn models, deterministic batches, parameter views.
#![allow(dead_code)]

use std::panic::{AssertUnwindSafe, catch_unwind};

use burn::module::{Module, ModuleVisitor, Param};
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::transformer::{
    TransformerEncoder, TransformerEncoderConfig, TransformerEncoderInput,
};
use burn::nn::{Embedding, EmbeddingConfig, LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::tensor::activation::gelu;
use burn::tensor::{DType, Device, DeviceType, Int, Tensor, TensorData};
use burn_mpric_022::{cast_for_compute, cast_for_output};
use burn_mpric_core::ResolvedPolicy;

/// Flex with autodiff: the CPU training device.
pub fn flex() -> Device {
    Device::flex().autodiff()
}

/// A wgpu device with autodiff when a Vulkan (or Metal/DX12) adapter exists; otherwise
/// `None`, after saying why on stderr.
pub fn wgpu(test: &str) -> Option<Device> {
    let icds = ["/usr/share/vulkan/icd.d", "/etc/vulkan/icd.d"];
    let has_icd = icds
        .iter()
        .any(|dir| std::fs::read_dir(dir).is_ok_and(|mut entries| entries.next().is_some()));
    if cfg!(target_os = "linux") && !has_icd {
        eprintln!(
            "skipping {test}: no Vulkan driver on this machine (no ICD in {icds:?}); \
             `apt-get install -y mesa-vulkan-drivers` provides lavapipe"
        );
        return None;
    }
    let devices = catch_unwind(AssertUnwindSafe(|| Device::enumerate(DeviceType::Wgpu)));
    match devices.ok().and_then(|d| d.into_iter().next()) {
        Some(device) => Some(device.autodiff()),
        None => {
            eprintln!("skipping {test}: wgpu found no adapter");
            None
        }
    }
}

/// Deterministic values in [-1, 1) from a seed (a 64-bit LCG), independent of any backend RNG.
pub fn values(seed: u64, n: usize) -> Vec<f32> {
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// A `[rows, cols]` float tensor of deterministic values.
pub fn matrix(seed: u64, rows: usize, cols: usize, device: &Device) -> Tensor<2> {
    Tensor::from_data(
        TensorData::new(values(seed, rows * cols), [rows, cols]),
        device,
    )
}

/// Every parameter's (stored dtype, used dtype), in visit order. A visitor sees stored
/// values only; `materialize` folds each reparameterization in, so the materialized copy
/// holds the values layers see.
pub fn dtypes<M: Module>(module: &M) -> Vec<(DType, DType)> {
    struct V(Vec<DType>);
    impl ModuleVisitor for V {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            self.0.push(param.val().dtype());
        }
    }
    let mut stored = V(Vec::new());
    module.visit(&mut stored);
    let mut used = V(Vec::new());
    module.clone().materialize().visit(&mut used);
    stored.0.into_iter().zip(used.0).collect()
}

/// Every parameter's stored value, as f32 bit patterns (exact comparisons).
pub fn param_bits<M: Module>(module: &M) -> Vec<Vec<u32>> {
    struct V(Vec<Vec<u32>>);
    impl ModuleVisitor for V {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            let data = param.base().into_data().convert::<f32>();
            self.0.push(
                data.try_to_vec::<f32>()
                    .unwrap()
                    .iter()
                    .map(|v| v.to_bits())
                    .collect(),
            );
        }
    }
    let mut v = V(Vec::new());
    module.visit(&mut v);
    v.0
}

/// Reads every parameter once, so that clones share the values (parameters are lazy).
pub fn init_params<M: Module>(module: &M) {
    let _ = param_bits(module);
}

/// A small MLP with a LayerNorm: Linear -> LayerNorm -> GELU -> Linear.
#[derive(Module, Debug)]
pub struct Mlp {
    pub input: Linear,
    pub norm: LayerNorm,
    pub output: Linear,
}

impl Mlp {
    pub fn new(d_in: usize, hidden: usize, d_out: usize, device: &Device) -> Self {
        let mlp = Self {
            input: LinearConfig::new(d_in, hidden).init(device),
            norm: LayerNormConfig::new(hidden).init(device),
            output: LinearConfig::new(hidden, d_out).init(device),
        };
        init_params(&mlp);
        mlp
    }

    pub fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        self.output
            .forward(gelu(self.norm.forward(self.input.forward(x))))
    }

    /// Mean squared error at the output dtype, after the compute-dtype forward pass.
    pub fn loss(&self, x: Tensor<2>, y: Tensor<2>, policy: &ResolvedPolicy) -> Tensor<1> {
        let prediction = cast_for_output(self.forward(cast_for_compute(x, policy)), policy);
        (prediction - y).square().mean()
    }
}

/// A token + position embedding, a `TransformerEncoder` (no dropout) and a linear head.
#[derive(Module, Debug)]
pub struct TinyTransformer {
    pub tokens: Embedding,
    pub positions: Embedding,
    pub encoder: TransformerEncoder,
    pub head: Linear,
}

impl TinyTransformer {
    pub fn new(vocab: usize, seq: usize, d_model: usize, layers: usize, device: &Device) -> Self {
        let model = Self {
            tokens: EmbeddingConfig::new(vocab, d_model).init(device),
            positions: EmbeddingConfig::new(seq, d_model).init(device),
            encoder: TransformerEncoderConfig::new(d_model, 2 * d_model, 2, layers)
                .with_dropout(0.0)
                .with_norm_first(true)
                .init(device),
            head: LinearConfig::new(d_model, vocab).init(device),
        };
        init_params(&model);
        model
    }

    /// Logits `[batch, seq, vocab]` at the compute dtype.
    pub fn forward(&self, tokens: Tensor<2, Int>) -> Tensor<3> {
        let [batch, seq] = tokens.dims();
        let device = tokens.device();
        let positions = Tensor::<1, Int>::arange(0..seq as i64, &device)
            .reshape([1, seq])
            .repeat_dim(0, batch);
        let x = self.tokens.forward(tokens) + self.positions.forward(positions);
        let x = self.encoder.forward(TransformerEncoderInput::new(x));
        self.head.forward(x)
    }

    /// Cross entropy over every position, at the output dtype.
    pub fn loss(
        &self,
        tokens: Tensor<2, Int>,
        targets: Tensor<2, Int>,
        policy: &ResolvedPolicy,
    ) -> Tensor<1> {
        let [batch, seq] = tokens.dims();
        let logits = cast_for_output(self.forward(tokens), policy);
        let vocab = logits.dims()[2];
        let logits = logits.reshape([batch * seq, vocab]);
        let targets = targets.reshape([batch * seq]);
        CrossEntropyLossConfig::new()
            .init(&logits.device())
            .forward(logits, targets)
    }
}

/// A batch of the sequence-reversal task: random tokens in `1..vocab`, targets reversed.
pub fn reversal_batch(
    seed: u64,
    batch: usize,
    seq: usize,
    vocab: usize,
    device: &Device,
) -> (Tensor<2, Int>, Tensor<2, Int>) {
    let tokens: Vec<i64> = values(seed, batch * seq)
        .into_iter()
        .map(|v| 1 + ((v + 1.0) * 0.5 * (vocab - 1) as f32) as i64 % (vocab as i64 - 1))
        .collect();
    let reversed: Vec<i64> = tokens
        .chunks(seq)
        .flat_map(|row| row.iter().rev().copied().collect::<Vec<_>>())
        .collect();
    (
        Tensor::from_data(TensorData::new(tokens, [batch, seq]), device),
        Tensor::from_data(TensorData::new(reversed, [batch, seq]), device),
    )
}
