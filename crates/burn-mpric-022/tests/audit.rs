//! The 0.22 precision audit on Flex with burn-nn modules of a user's own model: a planted hot
//! field is located and the remedy printed for it trains; a model that is fine gets no
//! remedy; a planted NaN kernel is told apart from an overflow; bad input is one clear error.

mod common;

use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::optim::{AdamConfig, ModuleOptimizer};
use burn::tensor::{Device, Tensor};
use burn_mpric_022::audit::{AuditConfig, AuditError, ModelAudit, audit, observe};
use burn_mpric_022::{FullPrecision, cast_for_compute, cast_for_output};
use burn_mpric_core::ResolvedPolicy;
use burn_mpric_core::audit::Verdict;
use burn_mpric_core::scale::SkipCause;
use common::{flex, matrix};

/// Raw inputs of about 3e4: they fit f16, but the gradient of the first layer's weight (the
/// inputs times the output's gradient, summed over the batch) does not, at any loss scale.
const RAW: f32 = 3e4;

#[derive(Module, Debug)]
struct Net {
    first: Linear,
    body: Linear,
    head: Linear,
}

#[derive(Module, Debug)]
struct Kept {
    first: FullPrecision<Linear>,
    body: Linear,
    head: Linear,
}

fn layers(device: &Device) -> (Linear, Linear, Linear) {
    let first = LinearConfig::new(4, 8).init(device);
    // Small weights, so the first layer's output stays well inside f16.
    let first = Linear {
        weight: first
            .weight
            .map(|w| w.mul_scalar(1e-5).detach().require_grad()),
        ..first
    };
    (
        first,
        LinearConfig::new(8, 8).init(device),
        LinearConfig::new(8, 1).init(device),
    )
}

fn batch(step: usize, device: &Device) -> (Tensor<2>, Tensor<2>) {
    let x = matrix(step as u64 + 1, 64, 4, device).mul_scalar(RAW);
    let y = matrix(step as u64 + 100, 64, 1, device);
    (x, y)
}

fn loss_of(h: Tensor<2>, y: Tensor<2>, policy: &ResolvedPolicy) -> Tensor<1> {
    observe("prediction", &h);
    let h = cast_for_output(h, policy);
    // Summed over the batch and weighted: the first layer's gradients reach about 2^18.
    (h - y).square().sum().mul_scalar(16.0)
}

fn net_loss(m: &Net, policy: &ResolvedPolicy, step: usize) -> Tensor<1> {
    let (x, y) = batch(step, &m.head.weight.device());
    let h = m.first.forward(cast_for_compute(x, policy)).tanh();
    let h = m.body.forward(h).tanh();
    loss_of(m.head.forward(h), y, policy)
}

fn kept_loss(m: &Kept, policy: &ResolvedPolicy, step: usize) -> Tensor<1> {
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

fn f16() -> ResolvedPolicy {
    "mixed_f16".parse().unwrap()
}

fn show(found: &ModelAudit) -> String {
    found.to_string()
}

/// The hot field is located by its gradients, the printed FullPrecision remedy names it and,
/// applied to the model, trains at f16 without skips; bf16, tried by the audit, trains too.
#[test]
fn a_hot_field_is_located_and_its_remedies_train() {
    let device = flex().autodiff();
    let (first, body, head) = layers(&device);
    let net = Net { first, body, head };
    let found = audit(net.clone(), adam, f16(), AuditConfig::new(3), net_loss).unwrap();
    let text = show(&found);
    assert!(!found.f16_trains(), "{text}");
    assert!(
        matches!(
            found.report.verdicts[0],
            Verdict::UseBf16 {
                overflows_unscaled: true,
                ..
            }
        ),
        "{text}"
    );
    let spot = found.hot_spot.as_ref().expect("a hot spot");
    assert_eq!(spot.params[0], "first.weight", "{text}");
    assert_eq!(
        spot.fields,
        [("first".to_string(), "Linear".to_string())],
        "{text}"
    );
    assert!(text.contains("first: FullPrecision<Linear>"), "{text}");
    let bf16 = found
        .working_remedies()
        .find(|r| r.what.contains("bf16"))
        .unwrap_or_else(|| panic!("bf16 trains: {text}"));
    assert!(bf16.lines[0].contains("p=f32,c=bf16,o=f32"), "{text}");

    // The printed remedy, applied: the field in FullPrecision. f16 now trains.
    let Net { first, body, head } = net;
    let kept = Kept {
        first: FullPrecision::new(first),
        body,
        head,
    };
    let again = audit(kept, adam, f16(), AuditConfig::new(3), kept_loss).unwrap();
    assert!(again.f16_trains(), "{}", show(&again));
    assert!(again.remedies.is_empty());
    assert!(again.hot_spot.is_none());
}

/// A model whose values all fit f16 at the proposed scale trains in the trial and gets no
/// remedy; at bf16 the audit proposes no scaling.
#[test]
fn a_model_that_is_fine_gets_no_remedy() {
    let device = flex().autodiff();
    let (_, body, head) = layers(&device);
    let first = LinearConfig::new(4, 8).init(&device);
    let net = Net { first, body, head };
    let fine = |m: &Net, policy: &ResolvedPolicy, step: usize| {
        let (x, y) = batch(step, &m.head.weight.device());
        let x = x.div_scalar(RAW);
        let h = m.first.forward(cast_for_compute(x, policy)).tanh();
        loss_of(m.head.forward(m.body.forward(h).tanh()), y, policy)
    };
    let found = audit(net.clone(), adam, f16(), AuditConfig::new(2), fine).unwrap();
    assert!(found.f16_trains(), "{}", show(&found));
    assert!(found.remedies.is_empty() && found.hot_spot.is_none());
    assert!(matches!(found.report.verdicts[0], Verdict::F16Safe { .. }));
    assert!(show(&found).contains("no remedy needed"));

    let bf16: ResolvedPolicy = "mixed_bf16".parse().unwrap();
    let found = audit(net, adam, bf16, AuditConfig::new(2), fine).unwrap();
    assert!(found.f16_trains());
    assert_eq!(found.trial.initial_scale, 1.0);
}

/// A NaN planted in the forward pass is not finite at the measured precision (no precision
/// setting causes or cures it); a NaN planted in the backward pass is "not a range problem"
/// in the trial; the overflow above is neither.
#[test]
fn a_planted_nan_kernel_is_told_apart_from_an_overflow() {
    let device = flex().autodiff();
    let (_, body, head) = layers(&device);
    let first = LinearConfig::new(4, 8).init(&device);
    let net = Net { first, body, head };
    let forward_nan = |m: &Net, policy: &ResolvedPolicy, step: usize| {
        let (x, y) = batch(step, &m.head.weight.device());
        let h = m.first.forward(cast_for_compute(x.div_scalar(RAW), policy));
        let h = h.mul_scalar(f32::NAN); // a kernel returning NaN whatever its input
        loss_of(m.head.forward(m.body.forward(h)), y, policy)
    };
    let found = audit(net.clone(), adam, f16(), AuditConfig::new(2), forward_nan).unwrap();
    assert!(
        matches!(
            found.report.verdicts.as_slice(),
            [Verdict::NotFinite { .. }]
        ),
        "{}",
        show(&found)
    );
    assert!(matches!(
        found.trial.cause,
        Some(SkipCause::LossNotFinite { .. })
    ));

    let backward_nan = |m: &Net, policy: &ResolvedPolicy, step: usize| {
        let (x, y) = batch(step, &m.head.weight.device());
        let h = m.first.forward(cast_for_compute(x.div_scalar(RAW), policy));
        // Finite forward, NaN backward: sqrt's gradient at 0 times 0.
        let h = h.clone() + h.abs().mul_scalar(0.0).sqrt();
        // A mean: no gradient here comes near f16's end at the probe's scale.
        let prediction = cast_for_output(m.head.forward(m.body.forward(h)), policy);
        (prediction - y).square().mean()
    };
    let found = audit(net, adam, f16(), AuditConfig::new(2), backward_nan).unwrap();
    let text = show(&found);
    match &found.trial.cause {
        Some(SkipCause::ScaleInvariant { params, .. }) => {
            assert!(params.iter().all(|p| p.starts_with("first.")), "{text}")
        }
        other => panic!("{other:?}: {text}"),
    }
    assert!(text.contains("not a range problem"), "{text}");
    assert_eq!(
        found.hot_spot.as_ref().unwrap().fields[0].0,
        "first",
        "{text}"
    );
}

/// Zero steps, a trial too short to judge, and a policy the device cannot run are one clear
/// error each.
#[test]
fn bad_input_is_one_clear_error() {
    let device = flex().autodiff();
    let (first, body, head) = layers(&device);
    let net = Net { first, body, head };
    let err = audit(net.clone(), adam, f16(), AuditConfig::new(0), net_loss).unwrap_err();
    assert!(matches!(err, AuditError::NoSteps), "{err}");
    let short = AuditConfig::new(1).with_trial_steps(2);
    let err = audit(net.clone(), adam, f16(), short, net_loss).unwrap_err();
    assert!(err.to_string().contains("more than 2 steps"), "{err}");
    let supported = burn_mpric_022::supported_float_dtypes(&device);
    let missing = burn_mpric_core::FloatDType::ALL
        .into_iter()
        .find(|d| !supported.contains(d))
        .expect("Flex lacks a float dtype");
    let policy: ResolvedPolicy = format!("p=f32,c={}", missing.name()).parse().unwrap();
    let err = audit(net, adam, policy, AuditConfig::new(1), net_loss).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains(missing.name()) && !text.contains('\n'),
        "{text}"
    );
}

/// A `FullPrecision` field computes at f32 but hands its output back at the compute dtype:
/// an output over f16's range is seen by the audit (measured before the cast back) and named
/// as the forward value that overflows, and the trial at f16 does not train.
#[test]
fn a_full_precision_output_over_f16_is_named() {
    let device = flex().autodiff();
    let (_, body, head) = layers(&device);
    let first = LinearConfig::new(4, 8).init(&device);
    // Outputs of about 1e5: fine at f32 inside the wrapper, inf once cast back to f16.
    let first = Linear {
        weight: first
            .weight
            .map(|w| w.mul_scalar(3e5).detach().require_grad()),
        ..first
    };
    let kept = Kept {
        first: FullPrecision::new(first),
        body,
        head,
    };
    let loss = |m: &Kept, policy: &ResolvedPolicy, step: usize| {
        let (x, y) = batch(step, &m.head.weight.device());
        let h = m
            .first
            .forward_with(cast_for_compute(x.div_scalar(RAW), policy), |l, x| {
                l.forward(x)
            });
        let prediction = cast_for_output(m.head.forward(m.body.forward(h)), policy);
        (prediction - y).square().mean()
    };
    let found = audit(kept, adam, f16(), AuditConfig::new(2), loss).unwrap();
    let text = format!(
        "{}{:?}",
        show(&found),
        found
            .report
            .ops
            .iter()
            .map(|r| (&r.method, r.values.max_abs))
            .collect::<Vec<_>>()
    );
    assert!(
        found.report.verdicts.iter().any(|v| matches!(v,
            Verdict::ForwardOverflow { value, .. } if value == "FullPrecision<Linear> output")),
        "{text}"
    );
    assert!(!found.f16_trains(), "{text}");
    let spot = found.hot_spot.as_ref().expect("a hot spot");
    assert!(
        spot.forward
            .contains(&"FullPrecision<Linear> output".to_string()),
        "{text}"
    );
}
