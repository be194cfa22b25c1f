//! The same guarantees on Wgpu, where a Vulkan adapter exists (Mesa's lavapipe on CI
//! machines without a GPU); skipped with a message otherwise.
//!
//! Wgpu matters because it fails quietly: a kernel fed two float dtypes reads one operand as
//! the other's type and returns wrong numbers with no error (see the `autocast` module
//! docs), so these tests compare values against Flex, not only dtypes.

mod common;

use burn::module::Module;
use burn::optim::{AdamConfig, GradientsParams};
use burn::tensor::{DType, Tensor, TensorData};
use burn_mpric_022::{Autocast, LossScaler, autocast, resolve_policy, supported_float_dtypes};
use burn_mpric_core::scale::LossScalePreset;
use burn_mpric_core::{FloatDType, ResolvedPolicy};
use common::{Mlp, dtypes, flex, matrix, param_bits, wgpu};

/// Wgpu reports its dtypes; a policy it cannot run (bf16 on lavapipe and most Vulkan
/// drivers) is an error naming the dtype, and `half` resolves to what it runs.
#[test]
fn wgpu_refuses_what_it_cannot_run() {
    let Some(device) = wgpu("wgpu_refuses_what_it_cannot_run") else {
        return;
    };
    let supported = supported_float_dtypes(&device);
    assert!(supported.contains(&FloatDType::F32), "{supported:?}");
    let half = resolve_policy("mixed_half".parse().unwrap(), &device).unwrap();
    if supported.contains(&FloatDType::BF16) {
        assert_eq!(half.compute(), FloatDType::BF16);
        eprintln!("this Wgpu adapter runs bf16; the refusal is not exercised");
        return;
    }
    assert_eq!(half.compute(), FloatDType::F16);
    let err = Autocast::for_device("mixed_bf16".parse().unwrap(), &device).unwrap_err();
    assert!(err.to_string().contains("bf16"), "{err}");
    let model = Mlp::new(4, 8, 2, &device);
    let bf16: ResolvedPolicy = "mixed_bf16".parse().unwrap();
    let err = autocast(model, bf16).unwrap_err();
    assert!(err.to_string().contains("bf16"), "{err}");
}

/// f16 training on Wgpu: parameters stay f32, the scaler applies every step, the loss
/// matches Flex's f32 loss on the same parameters (a mixed-dtype kernel would not), and a
/// poisoned step is skipped with parameters and optimizer state bit-identical.
#[test]
fn f16_training_on_wgpu_matches_flex() {
    let Some(device) = wgpu("f16_training_on_wgpu_matches_flex") else {
        return;
    };
    let policy: ResolvedPolicy = "mixed_f16".parse().unwrap();
    let f32_policy: ResolvedPolicy = "f32".parse().unwrap();
    let reference = Mlp::new(8, 16, 4, &flex());
    let (x, y) = (matrix(31, 16, 8, &flex()), matrix(32, 16, 4, &flex()));
    let expected = reference
        .loss(x.clone(), y.clone(), &f32_policy)
        .into_scalar::<f32>();

    let mut model = autocast(reference.fork(&device), policy).unwrap();
    let (x, y) = (x.to_device(&device), y.to_device(&device));
    let mut optim = AdamConfig::new().init();
    let mut scaler = LossScaler::for_policy(LossScalePreset::Auto, &policy).unwrap();
    let mut losses = Vec::new();
    for _ in 0..8 {
        let scaled = scaler.scale_loss(model.loss(x.clone(), y.clone(), &policy));
        let grads = GradientsParams::from_grads(scaled.clone().backward(), &model);
        let (next, outcome) = scaler.step_with_loss(&mut optim, 1e-2, model, grads, scaled);
        model = next;
        let outcome = outcome.unwrap();
        assert!(outcome.is_applied(), "{outcome:?}");
        losses.push(outcome.loss.unwrap());
    }
    let first = (losses[0] - expected).abs() / expected;
    assert!(
        first < 1e-2,
        "wgpu f16 loss {} vs flex f32 {expected}",
        losses[0]
    );
    assert!(losses[7] < losses[0], "{losses:?}");
    assert!(
        dtypes(&model)
            .iter()
            .all(|(stored, _)| *stored == DType::F32)
    );
    assert_eq!(model.input.weight.val().dtype(), DType::F16);

    let params = param_bits(&model);
    let state = optim.into_bytes().unwrap().to_vec();
    let mut data = x.to_data().convert::<f32>().try_to_vec::<f32>().unwrap();
    data[3] = f32::NAN;
    let poisoned = Tensor::<2>::from_data(TensorData::new(data, [16, 8]), &device);
    let scaled = scaler.scale_loss(model.loss(poisoned, y.clone(), &policy));
    let grads = GradientsParams::from_grads(scaled.backward(), &model);
    let (model, outcome) = scaler.step(&mut optim, 1e-2, model, grads);
    assert!(outcome.unwrap().is_skipped());
    assert_eq!(param_bits(&model), params);
    assert_eq!(optim.into_bytes().unwrap().to_vec(), state);
}

/// The probe on Wgpu at f16: a gradient overflow moves with the scale, a planted op that
/// returns NaN whatever its input is a loss that is not finite at any scale (Wgpu computes
/// sqrt's gradient at 0 times 0 as 0, so the backward-only plant of the Flex tests stays
/// finite here), and the audit (measured at f32 where the
/// adapter has no bf16) locates a hot first layer and tries its remedies there.
#[test]
fn the_probe_and_the_audit_tell_the_causes_apart_on_wgpu() {
    use burn::nn::{Linear, LinearConfig};
    use burn_mpric_022::audit::{AuditConfig, audit};
    use burn_mpric_022::{cast_for_compute, cast_for_output};
    use burn_mpric_core::scale::SkipCause;

    let Some(device) = wgpu("the_probe_and_the_audit_tell_the_causes_apart_on_wgpu") else {
        return;
    };
    let device = device.autodiff();
    let policy: ResolvedPolicy = "mixed_f16".parse().unwrap();
    let x = matrix(5, 8, 4, &flex()).to_device(&device);
    let cause = |gain: f32, nan_op: bool| {
        let model = autocast(LinearConfig::new(4, 4).init(&device), policy).unwrap();
        let mut scaler = LossScaler::for_policy(LossScalePreset::Auto, &policy).unwrap();
        let (_, outcome) =
            scaler.step_with(&mut AdamConfig::new().init(), 1e-3, model, |m: &Linear| {
                let h = m.forward(cast_for_compute(x.clone(), &policy));
                let h = if nan_op { h.mul_scalar(f32::NAN) } else { h };
                cast_for_output(h, &policy).sum().mul_scalar(gain)
            });
        outcome.unwrap().cause
    };
    // Gradients of gain * 2^15 * (the batch's column sums, about 8).
    assert_eq!(
        cause(1.0 / 64.0, false),
        None,
        "a healthy step is not probed"
    );
    assert!(matches!(cause(64.0, false), Some(SkipCause::Range { .. })));
    let bug = cause(1.0 / 64.0, true);
    assert!(
        matches!(bug, Some(SkipCause::LossNotFinite { .. })),
        "{bug:?}"
    );

    // Raw inputs of 3e4: the weight's gradient overflows f16 at any scale.
    let raw = x.clone().mul_scalar(3e4);
    let first = LinearConfig::new(4, 4).init(&device);
    let first = Linear {
        weight: first
            .weight
            .map(|w| w.mul_scalar(1e-5).detach().require_grad()),
        ..first
    };
    let found = audit(
        first,
        || AdamConfig::new().init(),
        policy,
        AuditConfig::new(2),
        |m: &Linear, p, _| {
            let h = cast_for_output(m.forward(cast_for_compute(raw.clone(), p)), p);
            h.square().sum().mul_scalar(16.0)
        },
    )
    .unwrap();
    assert!(!found.f16_trains(), "{found}");
    let spot = found.hot_spot.as_ref().expect("a hot spot");
    assert_eq!(spot.params[0], "weight", "{found}");
}

/// Stochastic rounding's uniforms made on Wgpu, whose ints are i32: the same numbers the core
/// computes on the host in i64 (every product of the permutation stays below 2^31), at lengths
/// that build the index in one to three digits of 1024.
#[test]
fn device_draws_on_wgpu_are_the_cores_numbers() {
    use burn_mpric_022::optim::{DrawKeys, device_uniforms};

    let Some(device) = wgpu("device_draws_on_wgpu_are_the_cores_numbers") else {
        return;
    };
    let keys = DrawKeys::new(9, 2, 4);
    for len in [1, 1025, 40_000, 1_048_577] {
        let made = device_uniforms(&keys, len, &device);
        assert_eq!(made.dtype(), DType::F32);
        let made: Vec<f32> = made.into_data().try_to_vec().unwrap();
        assert_eq!(made, keys.uniforms(len), "{len} elements");
    }
}
