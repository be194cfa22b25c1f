//! A mixed-precision run's loss curve stays close to the f32 run's: a small model around
//! Burn's own `TransformerEncoder` on the sequence-reversal task, the same initial parameters
//! and the same batches; mixed f16 with the loss scaler ends within 1% of f32's final loss,
//! mixed bf16 within 2%. Burn 0.22 runs the attention maps, the softmax and their backward
//! at the compute dtype already (its reductions accumulate at f32 inside); its `LayerNorm`
//! runs at f32 under f16 (`accumulation_dtype`) and at bf16 under bf16.

mod common;

use burn::optim::{AdamConfig, GradientsParams};
use burn_mpric_022::{LossScaler, autocast};
use burn_mpric_core::ResolvedPolicy;
use burn_mpric_core::scale::LossScalePreset;
use common::{TinyTransformer, flex, reversal_batch};

const STEPS: usize = 40;

/// The losses of `STEPS` Adam steps under `policy`, and the skipped steps.
fn run(model: &TinyTransformer, policy: &str) -> (Vec<f32>, u64) {
    let device = flex();
    let policy: ResolvedPolicy = policy.parse().unwrap();
    let mut model = autocast(model.clone(), policy).unwrap();
    let mut optim = AdamConfig::new().init();
    let mut scaler = LossScaler::for_policy(LossScalePreset::Auto, &policy).unwrap();
    let mut losses = Vec::new();
    for step in 0..STEPS {
        let (tokens, targets) = reversal_batch(step as u64 % 4, 16, 6, 8, &device);
        let scaled = scaler.scale_loss(model.loss(tokens, targets, &policy));
        let grads = GradientsParams::from_grads(scaled.clone().backward(), &model);
        let (next, outcome) = scaler.step_with_loss(&mut optim, 3e-3, model, grads, scaled);
        model = next;
        losses.push(outcome.unwrap().loss.unwrap());
    }
    (losses, scaler.stats().skipped)
}

fn tail_mean(losses: &[f32]) -> f32 {
    let tail = &losses[losses.len() - 5..];
    tail.iter().sum::<f32>() / tail.len() as f32
}

#[test]
fn mixed_loss_curves_track_f32() {
    let model = TinyTransformer::new(8, 6, 32, 1, &flex());
    let (f32_losses, _) = run(&model, "p=f32,c=f32");
    let (f16_losses, f16_skipped) = run(&model, "mixed_f16");
    let (bf16_losses, bf16_skipped) = run(&model, "mixed_bf16");
    eprintln!("f32  {f32_losses:?}\nf16  {f16_losses:?}\nbf16 {bf16_losses:?}");

    let reference = tail_mean(&f32_losses);
    assert!(
        reference < 0.8 * f32_losses[0],
        "the f32 run learns: {} -> {reference}",
        f32_losses[0]
    );
    // Same initial model, same batches: the curves differ by rounding only. Observed on
    // Flex: at most about 0.1% (f16) and 0.5% (bf16) apart at any step.
    for (name, losses, tolerance) in [("f16", &f16_losses, 0.01), ("bf16", &bf16_losses, 0.03)] {
        for (step, (mixed, full)) in losses.iter().zip(&f32_losses).enumerate() {
            let relative = (mixed - full).abs() / full;
            assert!(
                relative < tolerance,
                "{name} step {step}: loss {mixed} vs f32 {full} (relative {relative}, tolerance {tolerance})"
            );
        }
    }
    // The final loss (the last five steps' mean): within 1% of f32's at f16, 2% at bf16.
    for (name, losses, tolerance) in [("f16", &f16_losses, 0.01), ("bf16", &bf16_losses, 0.02)] {
        let gap = (tail_mean(losses) - reference).abs() / reference;
        assert!(
            gap <= tolerance,
            "{name}: final loss {} vs f32 {reference} ({:.2}% apart, tolerance {:.0}%)",
            tail_mean(losses),
            gap * 100.0,
            tolerance * 100.0
        );
    }
    assert_eq!(f16_skipped, 0, "the default f16 scale fits this model");
    assert_eq!(bf16_skipped, 0);
}
