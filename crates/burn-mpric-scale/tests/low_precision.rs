//! f16 and bf16 models on plain Flex (no mixed-precision backend): they train with this crate,
//! f16 gradients are unscaled without error, and gradients come back in the parameter dtype.

mod common;

use burn::backend::Flex;
use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::optim::{GradientsParams, SgdConfig};
use burn::tensor::{DType, FloatDType, Tensor};
use burn_mpric_scale::{LossScaleConfig, LossScaler, cast_grads_to_param_dtype, unscale_grads};
use common::{CastParams, TB, TwoLayer, batches};

/// Trains a `dtype` copy of a small model for `steps` steps on one fixed batch; returns the
/// losses (as f32) and the skip count.
fn train(dtype: FloatDType, mut scaler: LossScaler, steps: usize) -> (Vec<f32>, u64) {
    let device = Default::default();
    let mut model = TwoLayer::<TB>::new(8, &device).map(&mut CastParams(dtype));
    assert_eq!(model.l1.weight.val().dtype(), DType::from(dtype));
    let (x, y) = batches::<TB>(1, 8, 31, &device).remove(0);
    let (x, y) = (x.cast(dtype), y.mul_scalar(0.1).cast(dtype));
    let mut optim = SgdConfig::new().init();
    let mut losses = Vec::new();
    for _ in 0..steps {
        let loss = model.mse(x.clone(), y.clone());
        assert_eq!(loss.dtype(), DType::from(dtype));
        let scaled = scaler.scale_loss(loss);
        // A scaled loss is f32; the no-op scale leaves the loss as it is.
        let expected = if scaler.scale() == 1.0 {
            DType::from(dtype)
        } else {
            DType::F32
        };
        assert_eq!(scaled.dtype(), expected);
        let grads = GradientsParams::from_grads(scaled.backward(), &model);
        let (next, outcome) = scaler.step_with_loss(&mut optim, 0.05, model, grads, scaled);
        model = next;
        let outcome = outcome.unwrap();
        if outcome.is_applied() {
            losses.push(outcome.loss.unwrap());
        }
    }
    // The parameters keep their dtype through the optimizer.
    assert_eq!(model.l2.weight.val().dtype(), DType::from(dtype));
    (losses, scaler.stats().skipped)
}

#[test]
fn f16_model_trains_with_dynamic_loss_scaling() {
    let scaler = LossScaler::dynamic(LossScaleConfig::new().with_growth_interval(5)).unwrap();
    let (losses, _) = train(FloatDType::F16, scaler, 20);
    assert!(losses.len() >= 10, "most steps applied: {losses:?}");
    let (first, last) = (losses[0], *losses.last().unwrap());
    assert!(last < 0.5 * first, "loss went down: {first} -> {last}");
}

#[test]
fn f16_model_with_a_too_large_scale_backs_off_and_still_trains() {
    // 2^20 times the loss gradient overflows f16 (max 65504): the first steps are skipped.
    let config = LossScaleConfig::new()
        .with_initial_scale(2f32.powi(20))
        .with_growth_interval(1000);
    let scaler = LossScaler::dynamic(config).unwrap();
    let (losses, skipped) = train(FloatDType::F16, scaler, 20);
    assert!(skipped >= 1, "overflowing steps were skipped");
    assert!(losses.len() >= 10);
    assert!(*losses.last().unwrap() < losses[0]);
}

#[test]
fn bf16_model_trains_without_scaling() {
    let (losses, skipped) = train(FloatDType::BF16, LossScaler::noop(), 20);
    assert_eq!(skipped, 0);
    assert_eq!(losses.len(), 20);
    assert!(*losses.last().unwrap() < 0.5 * losses[0], "{losses:?}");
}

#[test]
fn bf16_mode_still_skips_and_counts_non_finite_steps() {
    let device = Default::default();
    let model = TwoLayer::<TB>::new(4, &device).map(&mut CastParams(FloatDType::BF16));
    let before = common::param_data(&model);
    let mut optim = SgdConfig::new().init();
    let mut scaler = LossScaler::noop();
    let x = Tensor::<TB, 2>::ones([2, 4], &device).cast(FloatDType::BF16);
    for _ in 0..2 {
        let loss = model.forward(x.clone()).sum().mul_scalar(f32::NAN);
        let grads = GradientsParams::from_grads(scaler.scale_loss(loss).backward(), &model);
        let (next, outcome) = scaler.step(&mut optim, 0.1, model.clone(), grads);
        let outcome = outcome.unwrap();
        assert!(outcome.is_skipped());
        assert_eq!(outcome.next_scale, 1.0);
        for (a, b) in before.iter().zip(common::param_data(&next)) {
            assert_eq!(a.as_bytes(), b.as_bytes());
        }
    }
    let stats = scaler.stats();
    assert_eq!(
        (stats.steps, stats.skipped, stats.consecutive_skipped),
        (2, 2, 2)
    );
}

#[test]
fn f16_gradients_of_an_f16_model_are_unscaled() {
    // PyTorch raises "Attempting to unscale FP16 gradients." here.
    let device = Default::default();
    let model: Linear<TB> = LinearConfig::new(3, 2).init(&device);
    let model = model.map(&mut CastParams(FloatDType::F16));
    let mut grads = GradientsParams::new();
    let scale = 4096.0f32;
    // 3 * 2^12 and 0.5 * 2^12 are exact in f16; 1e-3 * 2^12 is rounded.
    let raw = Tensor::<Flex, 2>::from_floats([[3.0, 0.5], [1e-3, -2.0], [0.25, 1.0]], &device);
    grads.register(
        model.weight.id,
        raw.clone().mul_scalar(scale).cast(FloatDType::F16),
    );
    let unscaled = unscale_grads(&model, grads, scale).unwrap();
    assert!(unscaled.read_finite().unwrap());
    let g = unscaled
        .into_grads()
        .get::<Flex, 2>(model.weight.id)
        .unwrap();
    assert_eq!(g.dtype(), DType::F16);
    let got: Vec<f32> = g.into_data().iter::<f32>().collect();
    let expected = [3.0f32, 0.5, 1e-3, -2.0, 0.25, 1.0];
    for (g, e) in got.iter().zip(expected) {
        // f16 has an 11-bit significand: relative error at most 2^-11 per rounding.
        assert!((g - e).abs() <= e.abs() * 2.0f32.powi(-10), "{got:?}");
    }
    assert_eq!(got[0], 3.0);
    assert_eq!(got[1], 0.5);

    // 1/2^25 is not an f16 value (it rounds to 0), so the product is computed in f32.
    let mut grads = GradientsParams::new();
    let tiny = 2f32.powi(-12);
    let scaled = Tensor::<Flex, 2>::full([3, 2], tiny * 2f32.powi(25), &device);
    grads.register(model.weight.id, scaled.cast(FloatDType::F16));
    let g = unscale_grads(&model, grads, 2f32.powi(25))
        .unwrap()
        .into_grads();
    let g = g.get::<Flex, 2>(model.weight.id).unwrap();
    assert!(g.into_data().iter::<f32>().all(|v| v == tiny));

    // An f16 gradient scaled past f16's range is reported, not hidden.
    let mut grads = GradientsParams::new();
    grads.register(
        model.weight.id,
        raw.mul_scalar(65536.0).cast(FloatDType::F16),
    );
    assert!(
        !unscale_grads(&model, grads, 65536.0)
            .unwrap()
            .read_finite()
            .unwrap()
    );
}

#[test]
fn f16_gradients_of_f32_parameters_come_back_as_f32() {
    let device = Default::default();
    let model = TwoLayer::<TB>::new(4, &device);
    let x = Tensor::<TB, 2>::ones([2, 4], &device);
    let loss = model.forward(x).sum();
    let mut grads = GradientsParams::from_grads(loss.backward(), &model);
    // Simulate a mixed-precision backward: every gradient arrives in f16.
    let ids = [
        (model.l1.weight.id, model.l1.bias.as_ref().unwrap().id),
        (model.l2.weight.id, model.l2.bias.as_ref().unwrap().id),
    ];
    let mut expected = Vec::new();
    for (w, b) in ids {
        let gw = grads.remove::<Flex, 2>(w).unwrap();
        let gb = grads.remove::<Flex, 1>(b).unwrap();
        let (gw, gb) = (gw.cast(FloatDType::F16), gb.cast(FloatDType::F16));
        expected.push((
            gw.clone().into_data().convert::<f32>(),
            gb.clone().into_data().convert::<f32>(),
        ));
        grads.register(w, gw);
        grads.register(b, gb);
    }

    let cast = cast_grads_to_param_dtype(&model, grads);
    for ((w, b), (ew, eb)) in ids.iter().zip(&expected) {
        let gw = cast.get::<Flex, 2>(*w).unwrap();
        let gb = cast.get::<Flex, 1>(*b).unwrap();
        assert_eq!((gw.dtype(), gb.dtype()), (DType::F32, DType::F32));
        // The cast is exact: every f16 value is an f32 value.
        assert_eq!(gw.into_data().as_bytes(), ew.as_bytes());
        assert_eq!(gb.into_data().as_bytes(), eb.as_bytes());
    }
}
