//! PyTorch `GradScaler` vectors (the scale update, the unscale kernel, growth saturation, the
//! backoff floor) and Keras 3 `LossScaleOptimizer` vectors.

mod common;

use burn::backend::Flex;
use burn::module::{Module, Param};
use burn::optim::{GradientsParams, SgdConfig};
use burn::tensor::backend::Backend;
use burn::tensor::{DType, FloatDType, Tensor};
use burn_mpric_scale::{LossScaleConfig, LossScaler, MIN_SCALE, unscale_grads};
use common::TB;

fn torch(initial: f32, growth: f64, backoff: f64, interval: u32) -> LossScaleConfig {
    LossScaleConfig::torch()
        .with_initial_scale(initial)
        .with_growth_factor(growth)
        .with_backoff_factor(backoff)
        .with_growth_interval(interval)
}

#[test]
fn f13_update_scale() {
    let s = torch(4.0, 2.0, 0.25, 2).init().unwrap();
    let s = s.adjust(true);
    assert_eq!((s.loss_scale(), s.counter()), (4.0, 1));
    let s = s.adjust(true);
    assert_eq!((s.loss_scale(), s.counter()), (8.0, 0));
    let s = s.adjust(false);
    assert_eq!((s.loss_scale(), s.counter()), (2.0, 0));
}

#[test]
fn f19_growth_never_produces_infinity() {
    let mut s = torch(1e38, 16.0, 0.5, 1).init().unwrap();
    for _ in 0..5 {
        s = s.adjust(true);
        assert_eq!(s.loss_scale(), 1e38);
    }
    let mut s = torch(2f32.powi(126), 2.0, 0.5, 1).init().unwrap();
    for _ in 0..3 {
        s = s.adjust(true);
        assert_eq!(s.loss_scale(), 1.7014118e38);
        assert_eq!(s.loss_scale(), 2f32.powi(127));
    }
}

#[test]
fn f22_backoff_clamps_at_min_scale_and_never_reaches_zero() {
    // PyTorch reaches 0.0 after 150 backoffs from 1.0 (2^-149 is its last non-zero value).
    let mut s = torch(1.0, 2.0, 0.5, 2000).init().unwrap();
    for _ in 0..150 {
        s = s.adjust(false);
        assert!(s.loss_scale() > 0.0);
        assert!((1.0 / s.loss_scale()).is_finite());
    }
    assert_eq!(s.loss_scale(), MIN_SCALE);
    assert_eq!(s.loss_scale(), 2f32.powi(-126));
    // Unlike PyTorch's 0.0, the floor can grow again.
    let s = torch(1.0, 2.0, 0.5, 1).init().unwrap();
    let s = (0..150).fold(s, |s, _| s.adjust(false)).adjust(true);
    assert_eq!(s.loss_scale(), 2f32.powi(-125));

    // The default floor is 1.0, and a configured floor below 1 is honoured.
    let s = LossScaleConfig::new()
        .with_initial_scale(1.0)
        .init()
        .unwrap();
    assert_eq!((0..150).fold(s, |s, _| s.adjust(false)).loss_scale(), 1.0);
    let s = LossScaleConfig::new().with_min_scale(0.125).init().unwrap();
    assert_eq!((0..150).fold(s, |s, _| s.adjust(false)).loss_scale(), 0.125);
}

/// Parameters whose gradients are contiguous, transposed, sliced, and f16.
#[derive(Module, Debug)]
struct Grid<B: Backend> {
    contiguous: Param<Tensor<B, 2>>,
    transposed: Param<Tensor<B, 2>>,
    sliced: Param<Tensor<B, 2>>,
    half: Param<Tensor<B, 2>>,
}

fn grid(device: &burn::tensor::Device<TB>) -> Grid<TB> {
    Grid {
        contiguous: Param::from_tensor(Tensor::zeros([10, 10], device)),
        transposed: Param::from_tensor(Tensor::zeros([10, 10], device)),
        sliced: Param::from_tensor(Tensor::zeros([10, 5], device)),
        half: Param::from_tensor(Tensor::<TB, 2>::zeros([10, 10], device).cast(FloatDType::F16)),
    }
}

/// 10x10 of 4.0, with `bad` at [2, 2] if given.
fn fours(bad: Option<f32>, device: &burn::tensor::Device<Flex>) -> Tensor<Flex, 2> {
    let mut values = vec![4.0f32; 100];
    if let Some(bad) = bad {
        values[2 * 10 + 2] = bad;
    }
    Tensor::from_data(burn::tensor::TensorData::new(values, [10, 10]), device)
}

#[test]
fn f14_unscale_all_views_and_dtypes_and_flag_non_finite() {
    let device = Default::default();
    let model = grid(&device);
    let ids = [
        model.contiguous.id,
        model.transposed.id,
        model.sliced.id,
        model.half.id,
    ];
    let names = ["contiguous", "transposed", "sliced", "half"];

    let cases = [None, Some(f32::INFINITY), Some(f32::NAN)];
    for bad in cases {
        for (target, name) in names.iter().enumerate() {
            if bad.is_none() && target > 0 {
                continue;
            }
            let pick = |i: usize| if i == target { bad } else { None };
            let mut grads = GradientsParams::new();
            grads.register(ids[0], fours(pick(0), &device));
            grads.register(ids[1], fours(pick(1), &device).transpose());
            grads.register(ids[2], fours(pick(2), &device).slice([0..10, 0..5]));
            grads.register(ids[3], fours(pick(3), &device).cast(FloatDType::F16));

            // Scale 4: inv_scale 0.25.
            let unscaled = unscale_grads(&model, grads, 4.0).unwrap();
            assert_eq!(unscaled.len(), 4);
            assert_eq!(
                unscaled.read_finite().unwrap(),
                bad.is_none(),
                "{name} {bad:?}"
            );
            let grads = unscaled.into_grads();
            for (i, id) in ids.iter().enumerate() {
                let g = grads.get::<Flex, 2>(*id).unwrap();
                let expected_dtype = if i == 3 { DType::F16 } else { DType::F32 };
                assert_eq!(g.dtype(), expected_dtype);
                let values: Vec<f32> = g.into_data().iter::<f32>().collect();
                for (k, v) in values.iter().enumerate() {
                    let cols = if i == 2 { 5 } else { 10 };
                    let at_bad = k == 2 * cols + 2 && i == target && bad.is_some();
                    if at_bad {
                        // Non-finite values are unscaled too and stay non-finite.
                        assert!(!v.is_finite());
                    } else {
                        assert!(
                            (v - 1.0).abs() <= 1e-7,
                            "{name} {bad:?} grad {i}[{k}] = {v}"
                        );
                    }
                }
            }
        }
    }
}

/// One parameter of 4 values, as in Keras' tests.
#[derive(Module, Debug)]
struct Vars<B: Backend> {
    v: Param<Tensor<B, 1>>,
}

#[test]
fn f23_keras_sgd_step_with_scaled_grads() {
    let device = Default::default();
    let vars = Vars::<TB> {
        v: Param::from_tensor(Tensor::from_floats([1.0, 2.0, 3.0, 4.0], &device)),
    };
    let mut optim = SgdConfig::new().init::<TB, Vars<TB>>();
    let mut scaler = LossScaler::dynamic(LossScaleConfig::keras()).unwrap();
    let s = scaler.scale();
    assert_eq!(s, 32768.0);

    let mut grads = GradientsParams::new();
    grads.register(
        vars.v.id,
        Tensor::<Flex, 1>::from_floats([1.0, 6.0, 7.0, 2.0], &device).mul_scalar(s),
    );
    let (vars, outcome) = scaler.step(&mut optim, 0.5, vars, grads);
    assert!(outcome.unwrap().is_applied());
    let got: Vec<f32> = vars.v.val().into_data().iter::<f32>().collect();
    for (g, e) in got.iter().zip([0.5f32, -1.0, -0.5, 3.0]) {
        assert!((g - e).abs() <= 1e-4 + 1e-4 * e.abs(), "{got:?}");
    }

    // All-inf gradients: variables unchanged.
    let before = vars.v.val().into_data();
    let mut grads = GradientsParams::new();
    grads.register(
        vars.v.id,
        Tensor::<Flex, 1>::full([4], f32::INFINITY, &device),
    );
    let (vars, outcome) = scaler.step(&mut optim, 0.5, vars, grads);
    assert!(outcome.unwrap().is_skipped());
    assert_eq!(vars.v.val().into_data(), before);
}

#[test]
fn f23_keras_scale_after_inf_and_finite_steps() {
    let device = Default::default();
    let one = || Tensor::<Flex, 1>::from_floats([1.0], &device);

    let mut scaler =
        LossScaler::dynamic(LossScaleConfig::keras().with_initial_scale(400.0)).unwrap();
    for _ in 0..4 {
        scaler.update(false);
    }
    assert_eq!(scaler.scale_loss(one()).into_scalar(), 25.0);

    let mut scaler = LossScaler::dynamic(
        LossScaleConfig::keras()
            .with_initial_scale(2.0)
            .with_growth_interval(2),
    )
    .unwrap();
    for _ in 0..8 {
        scaler.update(true);
    }
    assert_eq!(scaler.scale_loss(one()).into_scalar(), 32.0);
}
