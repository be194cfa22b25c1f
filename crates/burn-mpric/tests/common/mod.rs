//! Shared test fixtures: deterministic data, a 2-layer MLP, and its training loop.
#![allow(dead_code)]

use burn::module::{Module, Param};
use burn::nn::loss::{MseLoss, Reduction};
use burn::nn::{Linear, LinearConfig, Relu};
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{DType, ElementConversion, FloatDType, Tensor, TensorData};
use burn_mpric::cast_grads_to_param_dtype;

/// Deterministic normal-ish data from a local generator: Burn's backend RNG is shared by
/// every test thread of the process, so seeding it does not make parallel tests repeatable.
pub fn values(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            // Sum of four uniforms, centred: close enough to a normal for test data.
            let mut acc = 0.0f32;
            for _ in 0..4 {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                acc += (state >> 40) as f32 / (1u64 << 24) as f32;
            }
            (acc - 2.0) * scale
        })
        .collect()
}

pub fn data(shape: [usize; 2], seed: u64) -> TensorData {
    TensorData::new(values(shape[0] * shape[1], seed, 1.7), shape)
}

#[derive(Module, Debug)]
pub struct Mlp<B: Backend> {
    pub l1: Linear<B>,
    pub l2: Linear<B>,
    pub act: Relu,
}

impl<B: Backend> Mlp<B> {
    pub fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        self.l2.forward(self.act.forward(self.l1.forward(x)))
    }
}

/// A fixed regression problem: y = sum of sin(x).
pub fn problem<B: Backend>(device: &B::Device) -> (Tensor<B, 2>, Tensor<B, 2>) {
    let x = data([64, 8], 11);
    let y: Vec<f32> = x
        .to_vec::<f32>()
        .unwrap()
        .chunks(8)
        .map(|row| row.iter().map(|v| v.sin()).sum())
        .collect();
    (
        Tensor::from_data(x, device),
        Tensor::from_data(TensorData::new(y, [64, 1]), device),
    )
}

pub fn mse<B: Backend>(model: &Mlp<B>, x: Tensor<B, 2>, y: Tensor<B, 2>) -> Tensor<B, 1> {
    MseLoss::new().forward(model.forward(x).cast(FloatDType::F32), y, Reduction::Mean)
}

/// Trains the same initial model for `steps` Adam steps; returns the final loss and model.
pub fn train<B: AutodiffBackend>(device: &B::Device, init: &Mlp<B>, steps: usize) -> (f32, Mlp<B>) {
    let (x, y) = problem::<B>(device);
    let mut model = init.clone();
    let mut optim = AdamConfig::new().init();
    for _ in 0..steps {
        let loss = mse(&model, x.clone(), y.clone());
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        let grads = cast_grads_to_param_dtype(&model, grads);
        model = optim.step(2e-3, model, grads);
    }
    let loss = mse(&model, x, y).into_scalar().elem::<f32>();
    (loss, model)
}

pub fn same_init<B: Backend>(device: &B::Device) -> Mlp<B> {
    // The same deterministic f32 init on every backend, so all runs start equal.
    let layer = |d_in: usize, d_out: usize, seed: u64| {
        let bound = 1.0 / (d_in as f32).sqrt();
        let mut linear = LinearConfig::new(d_in, d_out).init::<B>(device);
        let weight = TensorData::new(values(d_in * d_out, seed, bound), [d_in, d_out]);
        let bias = TensorData::new(values(d_out, seed + 1, bound), [d_out]);
        linear.weight = Param::from_tensor(Tensor::from_data(weight, device));
        linear.bias = Some(Param::from_tensor(Tensor::from_data(bias, device)));
        linear
    };
    Mlp {
        l1: layer(8, 32, 100),
        l2: layer(32, 1, 200),
        act: Relu::new(),
    }
}

pub fn params_dtypes<B: Backend>(model: &Mlp<B>) -> Vec<DType> {
    vec![
        model.l1.weight.val().dtype(),
        model.l1.bias.as_ref().unwrap().val().dtype(),
        model.l2.weight.val().dtype(),
    ]
}
