//! A model of your own with one hot field, audited for f16, then trained at f16 with the
//! remedy the audit prints.
//!
//! The model regresses a target from raw features of about 3e4 (a sensor's counts, say).
//! They fit f16, but the first layer's weight gradient (features times the output's gradient,
//! summed over the batch) does not, at any loss scale: at `mixed_f16` every step skips. The
//! audit locates the hot field (`first`), prints the line that wraps it in `FullPrecision`,
//! and tries bf16 for the whole model. The example then applies the FullPrecision line and
//! trains at f16: no step skips after the first few.
//!
//! ```sh
//! cargo run -p burn-mpric-022 --example audit
//! ```

use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::optim::{AdamConfig, ModuleOptimizer};
use burn::tensor::{Device, Tensor, TensorData};
use burn_mpric_022::audit::{AuditConfig, audit, observe};
use burn_mpric_022::{Autocast, FullPrecision, LossScaler, cast_for_compute, cast_for_output};
use burn_mpric_core::ResolvedPolicy;
use burn_mpric_core::scale::LossScaleConfig;

const RAW: f32 = 3e4;
const BATCH: usize = 64;
const STEPS: usize = 40;

/// The model as first written.
#[derive(Module, Debug)]
struct Net {
    first: Linear,
    body: Linear,
    head: Linear,
}

/// The same model with the remedy the audit prints: `first: FullPrecision<Linear>`.
#[derive(Module, Debug)]
struct Fixed {
    first: FullPrecision<Linear>,
    body: Linear,
    head: Linear,
}

/// A batch: features of about `RAW`, a target that depends on them.
fn batch(step: usize, device: &Device) -> (Tensor<2>, Tensor<2>) {
    let mut state = step as u64 * 0x9E37_79B9 + 1;
    let mut next = || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    };
    let x: Vec<f32> = (0..BATCH * 4).map(|_| next()).collect();
    let y: Vec<f32> = x
        .chunks(4)
        .map(|r| (r[0] - r[1] + 0.5 * r[2]).tanh())
        .collect();
    let x = Tensor::<2>::from_data(TensorData::new(x, [BATCH, 4]), device).mul_scalar(RAW);
    let y = Tensor::<2>::from_data(TensorData::new(y, [BATCH, 1]), device);
    (x, y)
}

fn loss_of(prediction: Tensor<2>, y: Tensor<2>, policy: &ResolvedPolicy) -> Tensor<1> {
    observe("prediction", &prediction);
    (cast_for_output(prediction, policy) - y)
        .square()
        .sum()
        .mul_scalar(16.0)
}

fn net_loss(m: &Net, policy: &ResolvedPolicy, step: usize) -> Tensor<1> {
    let (x, y) = batch(step, &m.head.weight.device());
    let h = m.first.forward(cast_for_compute(x, policy)).tanh();
    let h = m.body.forward(h).tanh();
    loss_of(m.head.forward(h), y, policy)
}

fn fixed_loss(m: &Fixed, policy: &ResolvedPolicy, step: usize) -> Tensor<1> {
    let (x, y) = batch(step, &m.head.weight.device());
    let h = m
        .first
        .forward_with(cast_for_compute(x, policy), |l, x| l.forward(x))
        .tanh();
    let h = m.body.forward(h).tanh();
    loss_of(m.head.forward(h), y, policy)
}

fn adam() -> ModuleOptimizer {
    AdamConfig::new().init()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let device = Device::flex().autodiff();
    let first = LinearConfig::new(4, 16).init(&device);
    // Raw features call for small weights: the layer's output stays near 1.
    let first = Linear {
        weight: first
            .weight
            .map(|w| w.mul_scalar(1.0 / RAW).detach().require_grad()),
        ..first
    };
    let net = Net {
        first,
        body: LinearConfig::new(16, 16).init(&device),
        head: LinearConfig::new(16, 1).init(&device),
    };
    let policy: ResolvedPolicy = "mixed_f16".parse()?;

    let found = audit(net.clone(), adam, policy, AuditConfig::new(3), net_loss)?;
    println!("{found}");
    let spot = found
        .hot_spot
        .as_ref()
        .ok_or("the audit found no hot spot")?;
    println!("the audit locates the field `{}`", spot.fields[0].0);

    // The printed remedy, applied: `first` in FullPrecision, the rest at f16.
    let Net { first, body, head } = net;
    let fixed = Fixed {
        first: FullPrecision::new(first),
        body,
        head,
    };
    // Audited again, as the remedy says: f16 now trains, from the scale the audit proposes.
    let again = audit(fixed.clone(), adam, policy, AuditConfig::new(3), fixed_loss)?;
    println!("{again}");
    if !again.f16_trains() {
        return Err("the audit of the changed model still fails".into());
    }
    let initial = again.trial.initial_scale;
    let mut model = Autocast::new(policy).apply(fixed)?;
    let mut optim = adam();
    let mut scaler = LossScaler::dynamic(LossScaleConfig::new().with_initial_scale(initial))?;
    let mut late_skips = 0;
    let mut last = f32::NAN;
    for step in 0..STEPS {
        let (next, outcome) =
            scaler.step_with(&mut optim, 1e-3, model, |m| fixed_loss(m, &policy, step));
        model = next;
        let outcome = outcome?;
        if outcome.is_skipped() && step >= 3 {
            late_skips += 1;
        }
        last = outcome.loss.unwrap_or(f32::NAN);
    }
    println!(
        "trained {STEPS} steps at {policy} with `first` in FullPrecision from a loss scale of {initial}: {} skipped ({late_skips} after the first 3), last loss {last:.3}",
        scaler.stats().skipped
    );
    if late_skips > 0 || !last.is_finite() {
        return Err("the remedy did not train without skips".into());
    }
    Ok(())
}
