//! Burn's own `TransformerEncoder` trained under the mixed policies ends where f32 training
//! ends: mixed f16 with the dynamic loss scaler within 1% of f32's final loss, mixed bf16
//! within 2%, under every setting of the softmax's precision. The same initial parameters and
//! the same batches in every run; Adam; real burn-nn modules on Flex.

use burn::backend::{Autodiff, Flex};
use burn::module::{Module, ModuleMapper, Param};
use burn::nn::loss::{MseLoss, Reduction};
use burn::nn::transformer::{
    TransformerEncoder, TransformerEncoderConfig, TransformerEncoderInput,
};
use burn::optim::{AdamConfig, GradientsParams};
use burn::tensor::backend::Backend;
use burn::tensor::{FloatDType, Tensor, TensorData};
use burn_mpric::scale::{LossScaleConfig, LossScaler};
use burn_mpric::{MixedPrecision, MpDevice, MpSettings, Policy, SoftmaxPrecision};

type Mp = MixedPrecision<Flex>;
type Ad = Autodiff<Mp>;

const STEPS: usize = 60;
const BATCHES: u64 = 4;
const BATCH: usize = 8;
const SEQ: usize = 16;
const D_MODEL: usize = 32;
const HEADS: usize = 4;
const D_FF: usize = 64;
const LAYERS: usize = 2;

/// Deterministic values in [-bound, bound] (a small linear congruential stream).
fn values(n: usize, seed: u64, bound: f32) -> Vec<f32> {
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * bound
        })
        .collect()
}

/// Every parameter set from the seeded stream (the same numbers at every policy).
struct SameInit(u64);

impl<B: Backend> ModuleMapper<B> for SameInit {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let (id, tensor, mapper) = param.consume();
        let shape = tensor.shape();
        self.0 += 1;
        let fan: usize = shape.iter().sum();
        let bound: f32 = if D == 1 {
            0.1
        } else {
            (6.0 / fan as f32).sqrt()
        };
        let data = TensorData::new(values(shape.num_elements(), self.0, bound), shape);
        let mut fresh = Tensor::from_data(data, &tensor.device());
        if D == 1 && id.to_string().contains("gamma") {
            fresh = fresh.ones_like();
        }
        Param::from_mapped_value(id, fresh.require_grad(), mapper)
    }
}

/// A batch and its target: the target mixes the positions, so attention has work to do.
fn batch(step: u64, device: &MpDevice<Flex>) -> (Tensor<Ad, 3>, Tensor<Ad, 3>) {
    let i = step % BATCHES;
    let n = BATCH * SEQ * D_MODEL;
    let x = Tensor::<Ad, 3>::from_data(
        TensorData::new(values(n, 100 + i, 1.0), [BATCH, SEQ, D_MODEL]),
        device,
    );
    let y = x.clone() * 0.5 + x.clone().mean_dim(1) * 2.0;
    (x, y.detach())
}

/// The training loss before each step of `settings` (f16 with PyTorch's dynamic loss
/// scaler, the others with none), and the steps the scaler skipped.
fn train(settings: MpSettings, scaled: bool) -> (Vec<f32>, u64) {
    let device = Mp::device(Default::default(), settings).unwrap();
    let model: TransformerEncoder<Ad> = TransformerEncoderConfig::new(D_MODEL, D_FF, HEADS, LAYERS)
        .with_dropout(0.0)
        .init(&device);
    let mut model = model.map(&mut SameInit(7));
    let mut optim = AdamConfig::new().init();
    let mut scaler = if scaled {
        LossScaler::dynamic(LossScaleConfig::torch()).unwrap()
    } else {
        LossScaler::noop()
    };
    let mut losses = Vec::new();
    for step in 0..STEPS as u64 {
        let (x, y) = batch(step, &device);
        let out = model
            .forward(TransformerEncoderInput::new(x))
            .cast(FloatDType::F32);
        let loss = MseLoss::new().forward(out, y, Reduction::Mean);
        losses.push(loss.clone().into_scalar());
        let grads = GradientsParams::from_grads(scaler.scale_loss(loss).backward(), &model);
        let (next, outcome) = scaler.step(&mut optim, 3e-3, model, grads);
        outcome.unwrap();
        model = next;
    }
    (losses, scaler.stats().skipped)
}

fn tail(losses: &[f32]) -> f32 {
    let tail = &losses[losses.len() - 5..];
    tail.iter().sum::<f32>() / tail.len() as f32
}

#[test]
fn mixed_training_of_burns_transformer_encoder_ends_within_tolerance_of_f32() {
    let (reference, _) = train(MpSettings::new(Policy::F32), false);
    let full = tail(&reference);
    assert!(
        full < 0.5 * reference[0],
        "the f32 run learns: {} -> {full} ({reference:?})",
        reference[0]
    );
    for softmax in [
        SoftmaxPrecision::Full,
        SoftmaxPrecision::Stored,
        SoftmaxPrecision::Half,
    ] {
        for (policy, tolerance, scaled) in [("mixed_f16", 0.01, true), ("mixed_bf16", 0.02, false)]
        {
            let settings =
                MpSettings::new(policy.parse::<Policy>().unwrap()).softmax_precision(softmax);
            let (losses, skipped) = train(settings, scaled);
            let mixed = tail(&losses);
            let gap = (mixed - full).abs() / full;
            eprintln!(
                "{policy} {softmax:?}: final {mixed} vs f32 {full} ({gap:.4}), {skipped} skipped"
            );
            assert!(
                gap <= tolerance,
                "{policy}, softmax {softmax:?}: final loss {mixed} against f32's {full} \
                 ({:.2}% apart, tolerance {:.0}%; {skipped} steps skipped)",
                gap * 100.0,
                tolerance * 100.0
            );
        }
    }
}
