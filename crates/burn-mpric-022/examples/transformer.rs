//! Trains burn-nn's `TransformerEncoder` on a sequence-reversal task three times, from the
//! same initial parameters on the same batches: at f32, at f16 with PyTorch's dynamic loss
//! scale, and at bf16; then prints the losses and skipped steps side by side.
//!
//! ```sh
//! cargo run -p burn-mpric-022 --example transformer            # Flex (CPU)
//! cargo run -p burn-mpric-022 --example transformer -- wgpu    # Wgpu, where an adapter exists
//! ```

use std::time::Instant;

use burn::module::{Module, ModuleVisitor, Param};
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::transformer::{
    TransformerEncoder, TransformerEncoderConfig, TransformerEncoderInput,
};
use burn::nn::{Embedding, EmbeddingConfig, Linear, LinearConfig};
use burn::optim::{AdamConfig, GradientsParams};
use burn::tensor::{Device, DeviceKind, Int, Tensor, TensorData};
use burn_mpric_022::{Autocast, LossScaler, cast_for_output};
use burn_mpric_core::scale::LossScaleConfig;
use burn_mpric_core::{Policy, ResolvedPolicy};

const VOCAB: usize = 16;
const SEQ: usize = 8;
const BATCH: usize = 32;
const D_MODEL: usize = 64;
const STEPS: usize = 100;

/// Token and position embeddings, a 2-layer encoder, a linear head.
#[derive(Module, Debug)]
struct Reverser {
    tokens: Embedding,
    positions: Embedding,
    encoder: TransformerEncoder,
    head: Linear,
}

impl Reverser {
    fn new(device: &Device) -> Self {
        Self {
            tokens: EmbeddingConfig::new(VOCAB, D_MODEL).init(device),
            positions: EmbeddingConfig::new(SEQ, D_MODEL).init(device),
            encoder: TransformerEncoderConfig::new(D_MODEL, 2 * D_MODEL, 4, 2)
                .with_dropout(0.0)
                .with_norm_first(true)
                .init(device),
            head: LinearConfig::new(D_MODEL, VOCAB).init(device),
        }
    }

    /// The mean cross entropy over all positions, computed at the policy's output dtype.
    fn loss(
        &self,
        tokens: Tensor<2, Int>,
        targets: Tensor<2, Int>,
        policy: &ResolvedPolicy,
    ) -> Tensor<1> {
        let device = tokens.device();
        let positions = Tensor::<1, Int>::arange(0..SEQ as i64, &device)
            .reshape([1, SEQ])
            .repeat_dim(0, BATCH);
        // The embeddings are used at the compute dtype, so the activations start there.
        let x = self.tokens.forward(tokens) + self.positions.forward(positions);
        let x = self.encoder.forward(TransformerEncoderInput::new(x));
        let logits = cast_for_output(self.head.forward(x), policy);
        CrossEntropyLossConfig::new().init(&device).forward(
            logits.reshape([BATCH * SEQ, VOCAB]),
            targets.reshape([BATCH * SEQ]),
        )
    }
}

/// `STEPS` batches of random tokens (a 64-bit LCG, the same for every run) and their
/// reversals.
fn batches(device: &Device) -> Vec<(Tensor<2, Int>, Tensor<2, Int>)> {
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    (0..STEPS)
        .map(|_| {
            let tokens: Vec<i64> = (0..BATCH * SEQ)
                .map(|_| {
                    state = state
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    ((state >> 33) % VOCAB as u64) as i64
                })
                .collect();
            let reversed: Vec<i64> = tokens
                .chunks(SEQ)
                .flat_map(|row| row.iter().rev().copied().collect::<Vec<_>>())
                .collect();
            (
                Tensor::from_data(TensorData::new(tokens, [BATCH, SEQ]), device),
                Tensor::from_data(TensorData::new(reversed, [BATCH, SEQ]), device),
            )
        })
        .collect()
}

struct Run {
    policy: String,
    losses: Vec<f32>,
    skipped: u64,
    scale: f32,
    seconds: f64,
}

fn train(
    initial: &Reverser,
    policy: &str,
    scaler: LossScaler,
    device: &Device,
) -> Result<Run, Box<dyn std::error::Error>> {
    let autocast = Autocast::for_device(policy.parse::<Policy>()?, device)?;
    let policy = autocast.policy();
    let mut model = autocast.apply(initial.clone())?;
    let mut optim = AdamConfig::new().init();
    let mut scaler = scaler;
    let batches = batches(device);
    let started = Instant::now();
    let mut losses = Vec::with_capacity(STEPS);
    for (tokens, targets) in batches {
        let scaled = scaler.scale_loss(model.loss(tokens, targets, &policy));
        let grads = GradientsParams::from_grads(scaled.clone().backward(), &model);
        let (next, outcome) = scaler.step_with_loss(&mut optim, 1e-3, model, grads, scaled);
        model = next;
        losses.push(outcome?.loss.unwrap_or(f32::NAN));
    }
    Ok(Run {
        policy: policy.to_string(),
        losses,
        skipped: scaler.stats().skipped,
        scale: scaler.scale(),
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Reads every parameter once: parameters are lazy, and the three runs must start from the
/// same values.
fn init(model: &Reverser) {
    struct Touch;
    impl ModuleVisitor for Touch {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            let _ = param.val();
        }
    }
    model.visit(&mut Touch);
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let wgpu = std::env::args().any(|arg| arg == "wgpu");
    let device = if wgpu {
        Device::wgpu(DeviceKind::DefaultDevice).autodiff()
    } else {
        Device::flex().autodiff()
    };
    let initial = Reverser::new(&device);
    init(&initial);
    println!(
        "sequence reversal: vocab {VOCAB}, length {SEQ}, batch {BATCH}, d_model {D_MODEL}, \
         2 layers, Adam, {STEPS} steps, the same initial parameters and batches in every run\n"
    );
    let runs = [
        ("f32", LossScaler::noop()),
        ("mixed_f16", LossScaler::dynamic(LossScaleConfig::torch())?),
        ("mixed_bf16", LossScaler::noop()),
    ];
    let mut results = Vec::new();
    for (policy, scaler) in runs {
        match train(&initial, policy, scaler, &device) {
            Ok(run) => results.push(run),
            Err(err) => println!("{policy}: not run on this device: {err}"),
        }
    }
    println!(
        "{:<20} {:>10} {:>10} {:>10} {:>8} {:>10} {:>8}",
        "policy", "loss@1", "loss@50", "final", "skipped", "scale", "time"
    );
    for run in &results {
        let last5 = &run.losses[run.losses.len() - 5..];
        println!(
            "{:<20} {:>10.4} {:>10.4} {:>10.4} {:>8} {:>10} {:>7.1}s",
            run.policy,
            run.losses[0],
            run.losses[STEPS / 2 - 1],
            last5.iter().sum::<f32>() / 5.0,
            run.skipped,
            run.scale,
            run.seconds
        );
    }
    println!("\n(final: mean of the last 5 losses; scale: the loss scale after the run)");
    Ok(())
}
