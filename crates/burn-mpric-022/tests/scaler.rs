//! The loss scaler over Burn 0.22's optimizers, on Flex.

mod common;

use burn::module::{Module, Param};
use burn::optim::{AdamConfig, GradientsParams, ModuleOptimizer, MultiGradientsParams, SgdConfig};
use burn::tensor::{DType, Device, FloatDType, Tensor, TensorData};
use burn_mpric_022::{LossScaler, StepError, autocast};
use burn_mpric_core::ResolvedPolicy;
use burn_mpric_core::scale::{LossScaleConfig, LossScalePreset};
use common::{Mlp, dtypes, flex, matrix, param_bits};

#[derive(Module, Debug)]
struct W {
    w: Param<Tensor<1>>,
}

fn w(values: [f32; 2], device: &Device) -> W {
    W {
        w: Param::from_tensor(Tensor::from_floats(values, device).require_grad()),
    }
}

fn to_vec(tensor: Tensor<1>) -> Vec<f32> {
    tensor.into_data().convert::<f32>().try_to_vec().unwrap()
}

/// `loss = sum(w^2)`, `w = [1, 2]`: the gradients come back as [2, 4] and the loss as 5.0 on
/// every step, growth and backoff steps included (the loss is divided by the scale used).
#[test]
fn unscaled_gradients_and_loss_are_exact_on_growth_and_backoff() {
    let device = flex();
    let model = w([1.0, 2.0], &device);
    let config = LossScaleConfig::new()
        .with_initial_scale(4.0)
        .with_growth_interval(1);
    let mut scaler = LossScaler::dynamic(config).unwrap();
    let mut expected_scale = 4.0;
    for step in 0..6 {
        let scaled = scaler.scale_loss(model.w.val().square().sum());
        let mut grads = GradientsParams::from_grads(scaled.clone().backward(), &model);
        let poisoned = step == 3;
        if poisoned {
            let g: Tensor<1> = grads.remove(model.w.id).unwrap();
            grads.register(model.w.id, g.mul_scalar(f32::INFINITY));
        }
        let checked = scaler.check(&model, grads, Some(scaled)).unwrap();
        assert_eq!(checked.finite, !poisoned);
        if !poisoned {
            let g: Tensor<1> = checked.grads.get(model.w.id).unwrap();
            assert_eq!(g.dtype(), DType::F32);
            assert_eq!(to_vec(g), [2.0, 4.0], "step {step}");
        }
        let outcome = scaler.finish(&checked);
        assert_eq!(outcome.loss, Some(5.0), "step {step}");
        assert_eq!(outcome.scale_used, expected_scale);
        expected_scale = if poisoned {
            expected_scale / 2.0
        } else {
            expected_scale * 2.0
        };
        assert_eq!(outcome.next_scale, expected_scale);
    }
    assert_eq!(scaler.stats().skipped, 1);
}

/// A batch with a NaN or an infinity planted in it is skipped: parameters and the Adam
/// state are bit-identical afterwards, the scale backs off, and the next clean step applies.
#[test]
fn poisoned_step_is_skipped_with_params_and_optimizer_state_bit_identical() {
    let device = flex();
    let policy: ResolvedPolicy = "mixed_f16".parse().unwrap();
    let mut model = autocast(Mlp::new(8, 16, 4, &device), policy).unwrap();
    let mut optim = AdamConfig::new().init();
    let mut scaler = LossScaler::dynamic(LossScaleConfig::torch()).unwrap();
    let (x, y) = (matrix(11, 8, 8, &device), matrix(12, 8, 4, &device));
    let step = |model: Mlp, x: Tensor<2>, optim: &mut ModuleOptimizer, scaler: &mut LossScaler| {
        let scaled = scaler.scale_loss(model.loss(x, y.clone(), &policy));
        let grads = GradientsParams::from_grads(scaled.backward(), &model);
        let (model, outcome) = scaler.step(optim, 1e-2, model, grads);
        (model, outcome.unwrap())
    };
    for _ in 0..3 {
        let (next, outcome) = step(model, x.clone(), &mut optim, &mut scaler);
        model = next;
        assert!(outcome.is_applied());
    }
    for (i, poison) in [f32::NAN, f32::INFINITY].into_iter().enumerate() {
        let params = param_bits(&model);
        let state = optim.into_bytes().unwrap().to_vec();
        let scale = scaler.scale();
        let mut data = x.to_data().convert::<f32>().try_to_vec::<f32>().unwrap();
        data[5] = poison;
        let poisoned = Tensor::<2>::from_data(TensorData::new(data, [8, 8]), &device);

        let (next, outcome) = step(model, poisoned, &mut optim, &mut scaler);
        model = next;
        assert!(outcome.is_skipped(), "{poison}: {outcome:?}");
        assert_eq!(outcome.scale_used, scale);
        assert_eq!(outcome.next_scale, scale / 2.0);
        assert_eq!(outcome.stats.skipped, i as u64 + 1);
        assert_eq!(param_bits(&model), params, "{poison}: parameters changed");
        assert_eq!(
            optim.into_bytes().unwrap().to_vec(),
            state,
            "{poison}: optimizer state changed"
        );
    }
    let params = param_bits(&model);
    let (model, outcome) = step(model, x.clone(), &mut optim, &mut scaler);
    assert!(outcome.is_applied());
    assert_ne!(param_bits(&model), params);
    assert!(
        dtypes(&model)
            .iter()
            .all(|(stored, _)| *stored == DType::F32)
    );
}

/// A scale far too large for f16 overflows the f16 backward pass: the scaler skips and halves
/// until the gradients fit, without touching the parameters, then trains.
#[test]
fn f16_overflow_backs_off_until_finite() {
    let device = flex();
    let policy: ResolvedPolicy = "mixed_f16".parse().unwrap();
    let mut model = autocast(Mlp::new(8, 16, 4, &device), policy).unwrap();
    let initial = param_bits(&model);
    let mut optim = SgdConfig::new().init();
    let config = LossScaleConfig::new().with_initial_scale(2f32.powi(40));
    let mut scaler = LossScaler::dynamic(config).unwrap();
    let (x, y) = (matrix(13, 8, 8, &device), matrix(14, 8, 4, &device));
    let mut skipped = 0;
    let mut applied = false;
    for _ in 0..40 {
        let scale = scaler.scale();
        let scaled = scaler.scale_loss(model.loss(x.clone(), y.clone(), &policy));
        let grads = GradientsParams::from_grads(scaled.backward(), &model);
        let (next, outcome) = scaler.step(&mut optim, 1e-2, model, grads);
        model = next;
        let outcome = outcome.unwrap();
        assert_eq!(outcome.scale_used, scale);
        if outcome.is_skipped() {
            assert!(!applied, "skips come first");
            assert_eq!(param_bits(&model), initial);
            skipped += 1;
        } else {
            applied = true;
        }
    }
    assert!(applied, "the scale never fit f16");
    assert!(
        skipped >= 10,
        "2^40 should overflow f16 for many halvings, skipped {skipped}"
    );
    assert_eq!(scaler.stats().skipped, skipped);
    assert_ne!(param_bits(&model), initial);
}

/// Global-norm clipping after unscaling, with the norm from the same read.
#[test]
fn clipping_uses_the_global_norm_of_the_unscaled_gradients() {
    let device = flex();
    let model = w([0.0, 0.0], &device);
    let inner = Device::flex();
    let grads_of = |values: [f32; 2]| {
        let mut grads = GradientsParams::new();
        grads.register(model.w.id, Tensor::<1>::from_floats(values, &inner));
        grads
    };
    let scaler = LossScaler::fixed(2.0).unwrap().with_clip_norm(5.0).unwrap();

    // Scaled [60, 80] -> unscaled [30, 40], norm 50 -> clipped to norm 5.
    let checked = scaler
        .check::<_, 1>(&model, grads_of([60.0, 80.0]), None)
        .unwrap();
    assert!(checked.finite);
    assert_eq!(checked.grad_norm, Some(50.0));
    let g = to_vec(checked.grads.get(model.w.id).unwrap());
    assert!(
        (g[0] - 3.0).abs() < 1e-5 && (g[1] - 4.0).abs() < 1e-5,
        "{g:?}"
    );

    // Within the norm: untouched.
    let checked = scaler
        .check::<_, 1>(&model, grads_of([2.0, 0.0]), None)
        .unwrap();
    assert_eq!(to_vec(checked.grads.get(model.w.id).unwrap()), [1.0, 0.0]);

    // Squares beyond f32's range: the norm is still finite and exact.
    let checked = scaler
        .check::<_, 1>(&model, grads_of([6e20, 8e20]), None)
        .unwrap();
    assert!(checked.finite);
    let norm = checked.grad_norm.unwrap();
    assert!((norm / 5e20 - 1.0).abs() < 1e-6, "{norm}");

    // Non-finite elements: skipped, reported as infinite or NaN.
    let checked = scaler
        .check::<_, 1>(&model, grads_of([f32::INFINITY, 1.0]), None)
        .unwrap();
    assert!(!checked.finite);
    assert_eq!(checked.grad_norm, Some(f32::INFINITY));
    let checked = scaler
        .check::<_, 1>(&model, grads_of([f32::NAN, 1.0]), None)
        .unwrap();
    assert!(!checked.finite);
    assert!(checked.grad_norm.unwrap().is_nan());
}

/// Gradients of one step on two "devices" (shards): one infinite shard skips the step for
/// all; finite shards are summed before the step.
#[test]
fn step_multi_takes_one_decision_for_all_shards() {
    let device = flex();
    let inner = Device::flex();
    let shard = |model: &W, values: [f32; 2]| {
        let mut grads = GradientsParams::new();
        grads.register(model.w.id, Tensor::<1>::from_floats(values, &inner));
        (grads, inner.clone())
    };
    let model = w([1.0, 1.0], &device);
    let before = param_bits(&model);
    let mut scaler = LossScaler::fixed(2.0).unwrap();
    let mut optim = SgdConfig::new().init();
    let grads = MultiGradientsParams {
        grads: vec![
            shard(&model, [2.0, 2.0]),
            shard(&model, [f32::INFINITY, 0.0]),
        ],
    };
    let (model, outcome) = scaler.step_multi(&mut optim, 1.0, model, grads);
    assert!(outcome.unwrap().is_skipped());
    assert_eq!(param_bits(&model), before);

    let grads = MultiGradientsParams {
        grads: vec![shard(&model, [2.0, 4.0]), shard(&model, [2.0, 0.0])],
    };
    let (model, outcome) = scaler.step_multi(&mut optim, 1.0, model, grads);
    assert!(outcome.unwrap().is_applied());
    // Summed [4, 4], unscaled by 2 -> [2, 2]; SGD with lr 1: [1, 1] - [2, 2].
    assert_eq!(to_vec(model.w.val()), [-1.0, -1.0]);
}

/// A gradient registered with the wrong shape is a typed error; nothing is applied and the
/// scaler does not move.
#[test]
fn wrong_gradient_shape_is_an_error_and_nothing_changes() {
    let device = flex();
    let model = w([1.0, 2.0], &device);
    let before = param_bits(&model);
    let mut grads = GradientsParams::new();
    grads.register(model.w.id, Tensor::<1>::ones([3], &Device::flex()));
    let mut scaler = LossScaler::default();
    let (model, result) = scaler.step(&mut AdamConfig::new().init(), 1.0, model, grads);
    let err = result.unwrap_err();
    assert!(
        matches!(err, StepError::GradientShape { ref got, .. } if got == &[3]),
        "{err}"
    );
    assert_eq!(param_bits(&model), before);
    assert_eq!(scaler.stats().steps, 0);
    assert_eq!(scaler.scale(), 32768.0);
}

/// bf16 (no scaling) still skips non-finite steps; f16 half gradients of half parameters are
/// unscaled in f32 and keep their dtype.
#[test]
fn noop_scaler_skips_and_half_parameters_keep_their_dtype() {
    let device = flex();
    let bf16: ResolvedPolicy = "mixed_bf16".parse().unwrap();
    let mut scaler = LossScaler::for_policy(LossScalePreset::Auto, &bf16).unwrap();
    assert_eq!(scaler.scale(), 1.0);
    let model = w([1.0, 2.0], &device);
    let mut grads = GradientsParams::new();
    grads.register(
        model.w.id,
        Tensor::<1>::from_floats([f32::NAN, 0.0], &Device::flex()),
    );
    let (_, outcome) = scaler.step(&mut SgdConfig::new().init(), 1.0, model, grads);
    assert!(outcome.unwrap().is_skipped());

    let half = W {
        w: Param::from_tensor(
            Tensor::<1>::from_floats([1.0, 2.0], &device)
                .cast(FloatDType::F16)
                .require_grad(),
        ),
    };
    let scaler = LossScaler::fixed(1024.0).unwrap();
    let mut grads = GradientsParams::new();
    let g = Tensor::<1>::from_floats([2048.0, 4096.0], &Device::flex()).cast(FloatDType::F16);
    grads.register(half.w.id, g);
    let checked = scaler.check::<_, 1>(&half, grads, None).unwrap();
    let g: Tensor<1> = checked.grads.get(half.w.id).unwrap();
    assert_eq!(g.dtype(), DType::F16);
    assert_eq!(to_vec(g), [2.0, 4.0]);
}

/// The scaler state goes through a real file and comes back identical.
#[test]
fn scaler_state_round_trips_through_a_file() {
    let dir = std::env::temp_dir().join(format!("mpric022-scaler-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("scaler.json");
    let mut scaler = LossScaler::dynamic(LossScaleConfig::torch())
        .unwrap()
        .with_clip_norm(1.5)
        .unwrap();
    let model = w([1.0, 2.0], &flex());
    for poisoned in [false, true, false] {
        let mut grads = GradientsParams::new();
        let value = if poisoned { f32::NAN } else { 1.0 };
        grads.register(
            model.w.id,
            Tensor::<1>::from_floats([value, 0.0], &Device::flex()),
        );
        let checked = scaler.check::<_, 1>(&model, grads, None).unwrap();
        scaler.finish(&checked);
    }
    scaler.save_file(&path).unwrap();
    let loaded = LossScaler::load_file(&path).unwrap();
    assert_eq!(loaded, scaler);
    assert_eq!(loaded.stats().skipped, 1);
    assert_eq!(loaded.clip().unwrap().max_norm(), 1.5);
    std::fs::write(&path, b"{ not json").unwrap();
    assert!(LossScaler::load_file(&path).is_err());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A hidden layer and a head whose input carries a constant `offset`: the offset enlarges the
/// head's weight gradient (input × output gradient) and nothing else, so at f16 with a large
/// scale only `head.weight` overflows.
#[derive(Module, Debug)]
struct Planted {
    hidden: burn::nn::Linear,
    head: burn::nn::Linear,
}

impl Planted {
    fn new(device: &Device) -> Self {
        Self {
            hidden: burn::nn::LinearConfig::new(4, 8).init(device),
            head: burn::nn::LinearConfig::new(8, 2).init(device),
        }
    }

    fn loss(&self, x: Tensor<2>, offset: f32, policy: &ResolvedPolicy) -> Tensor<1> {
        let x = burn_mpric_022::cast_for_compute(x, policy);
        let h = burn::tensor::activation::relu(self.hidden.forward(x));
        self.head.forward(h.add_scalar(offset)).mean()
    }
}

#[test]
fn a_skipped_step_names_exactly_the_planted_layer() {
    let device = flex();
    let policy: ResolvedPolicy = "mixed_f16".parse().unwrap();
    let model = autocast(Planted::new(&device), policy).unwrap();
    let x = matrix(21, 3, 4, &device);
    let mut optim = SgdConfig::new().init();
    let scaler =
        || LossScaler::dynamic(LossScaleConfig::new().with_initial_scale(32768.0)).unwrap();

    // The head's input is about 3000: its weight gradient exceeds f16's 65504 at 2^15.
    let mut stepper = scaler();
    let scaled = stepper.scale_loss(model.loss(x.clone(), 3000.0, &policy));
    let grads = GradientsParams::from_grads(scaled.backward(), &model);
    let (model, outcome) = stepper.step(&mut optim, 0.1, model, grads);
    let outcome = outcome.unwrap();
    assert!(outcome.is_skipped());
    assert_eq!(outcome.overflow.unwrap().params, vec!["head.weight"]);

    // check + finish report the same names.
    let checker = scaler();
    let scaled = checker.scale_loss(model.loss(x.clone(), 3000.0, &policy));
    let grads = GradientsParams::from_grads(scaled.backward(), &model);
    let checked = checker.check(&model, grads, Some(scaled)).unwrap();
    assert!(!checked.finite);
    assert_eq!(
        checked.overflow.as_ref().unwrap().params,
        vec!["head.weight"]
    );
    assert_eq!(scaler().finish(&checked).overflow, checked.overflow);

    // Without the offset the model trains at the backed-off scale: nothing is named.
    let scaled = stepper.scale_loss(model.loss(x, 0.0, &policy));
    let grads = GradientsParams::from_grads(scaled.backward(), &model);
    let (_, outcome) = stepper.step(&mut optim, 0.1, model, grads);
    let outcome = outcome.unwrap();
    assert!(outcome.is_applied(), "{outcome:?}");
    assert_eq!(outcome.overflow, None);
}

/// A linear layer and a planted fault after it, at f16 compute.
#[derive(Module, Debug)]
struct Faulty {
    body: burn::nn::Linear,
    head: burn::nn::Linear,
}

#[derive(Clone, Copy, Debug)]
enum Fault {
    /// sqrt at 0 after a multiply by 0: a finite forward whose backward is NaN whatever the
    /// loss scale (a broken kernel).
    NanBackward,
    /// Gradients of 4 * S at f16: inf at 2^15, finite at 2^7 (a real overflow).
    GradientOverflow,
    /// An activation of about 1e6 in the forward pass: over f16's range whatever the scale.
    ForwardOverflow,
    /// A loss of 1 whose gradients are exactly zero (a kernel returning zeros).
    ZeroGradients,
}

fn faulty(device: &Device) -> Faulty {
    let linear = |value: f32| {
        let mut l = burn::nn::LinearConfig::new(1, 1).init(device);
        l.weight = Param::from_tensor(Tensor::from_floats([[value]], device).require_grad());
        l.bias = None;
        l
    };
    Faulty {
        body: linear(1.0),
        head: linear(1.0),
    }
}

fn faulty_loss(model: &Faulty, fault: Fault, policy: &ResolvedPolicy) -> Tensor<1> {
    let device = model.body.weight.device();
    let x = Tensor::<2>::from_floats([[1.0]], &device);
    let x = burn_mpric_022::cast_for_compute(x, policy);
    let h = model.body.forward(x);
    let h = match fault {
        Fault::NanBackward => h.clone() + h.abs().mul_scalar(0.0).sqrt(),
        Fault::GradientOverflow => h.mul_scalar(4.0),
        Fault::ForwardOverflow => h.mul_scalar(1e6),
        Fault::ZeroGradients => h.mul_scalar(0.0),
    };
    let y = model.head.forward(h);
    let loss = burn_mpric_022::cast_for_output(y, policy).sum();
    match fault {
        Fault::ZeroGradients => loss.add_scalar(1.0),
        _ => loss,
    }
}

/// Each planted fault gets its own cause from `step_with`'s probe at a scale 2^8 away, and
/// a healthy step is not probed.
#[test]
fn the_probe_tells_a_kernel_bug_from_an_overflow() {
    use burn_mpric_core::scale::SkipCause;
    let device = flex().autodiff();
    let policy: ResolvedPolicy = "mixed_f16".parse().unwrap();
    let run = |fault: Fault| {
        let model = autocast(faulty(&device), policy).unwrap();
        let mut scaler = LossScaler::for_policy(LossScalePreset::Auto, &policy).unwrap();
        let mut optim = SgdConfig::new().init();
        let (_, outcome) = scaler.step_with(&mut optim, 1e-3, model, |m: &Faulty| {
            faulty_loss(m, fault, &policy)
        });
        outcome.unwrap()
    };

    let nan = run(Fault::NanBackward);
    assert!(nan.is_skipped());
    match nan.cause.as_ref().unwrap() {
        SkipCause::ScaleInvariant {
            zero: false,
            params,
            probe_scale,
            ..
        } => {
            assert_eq!(*probe_scale, 1.0 / 256.0);
            assert_eq!(params, &["body.weight"]);
        }
        other => panic!("{other:?}"),
    }
    assert!(
        nan.cause
            .unwrap()
            .to_string()
            .starts_with("not a range problem")
    );

    let overflow = run(Fault::GradientOverflow);
    assert!(overflow.is_skipped());
    assert!(
        matches!(overflow.cause, Some(SkipCause::Range { zero: false, .. })),
        "{overflow:?}"
    );

    let forward = run(Fault::ForwardOverflow);
    assert!(forward.is_skipped());
    assert!(
        matches!(forward.cause, Some(SkipCause::LossNotFinite { .. })),
        "{forward:?}"
    );

    let zero = run(Fault::ZeroGradients);
    assert!(zero.is_applied(), "zero gradients are finite");
    assert!(
        matches!(
            zero.cause,
            Some(SkipCause::ScaleInvariant { zero: true, .. })
        ),
        "{zero:?}"
    );

    // The same model without a fault: applied, not probed.
    let model = autocast(faulty(&device), policy).unwrap();
    let mut scaler = LossScaler::for_policy(LossScalePreset::Auto, &policy).unwrap();
    let mut calls = 0;
    let (_, healthy) = scaler.step_with(&mut SgdConfig::new().init(), 1e-3, model, |m: &Faulty| {
        calls += 1;
        let x =
            burn_mpric_022::cast_for_compute(Tensor::<2>::from_floats([[1.0]], &device), &policy);
        burn_mpric_022::cast_for_output(m.head.forward(m.body.forward(x)), &policy).sum()
    });
    let healthy = healthy.unwrap();
    assert!(healthy.is_applied() && healthy.cause.is_none());
    assert_eq!(calls, 1, "an applied step runs the loss once");
}

/// A run whose every step skips stops at the limit with the cause in the error, and the
/// model is the one before the first skipped step.
#[test]
fn a_run_that_skips_every_step_stops() {
    let device = flex().autodiff();
    let policy: ResolvedPolicy = "mixed_f16".parse().unwrap();
    let mut model = autocast(faulty(&device), policy).unwrap();
    let before = param_bits(&model);
    let mut scaler = LossScaler::for_policy(LossScalePreset::Auto, &policy)
        .unwrap()
        .with_max_consecutive_skips(3);
    let mut optim = SgdConfig::new().init();
    let mut results = Vec::new();
    for _ in 0..3 {
        let (next, outcome) = scaler.step_with(&mut optim, 1e-3, model, |m: &Faulty| {
            faulty_loss(m, Fault::NanBackward, &policy)
        });
        model = next;
        results.push(outcome);
    }
    assert!(
        results[..2]
            .iter()
            .all(|r| r.as_ref().unwrap().is_skipped())
    );
    let err = results.pop().unwrap().unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, StepError::Stalled { max: 3, .. }), "{text}");
    assert!(text.starts_with("3 steps in a row were skipped"), "{text}");
    assert!(text.contains("not a range problem"), "{text}");
    assert_eq!(param_bits(&model), before);
}
