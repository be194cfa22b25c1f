//! The one-pass gradient transform over any rank and float dtype, shared parameters, and the
//! loss scaling before backward.

mod common;

use burn::backend::Flex;
use burn::module::{Module, Param};
use burn::nn::{Linear, LinearConfig};
use burn::optim::GradientsParams;
use burn::tensor::backend::Backend;
use burn::tensor::{DType, FloatDType, Tensor};
use burn_mpric_scale::{
    GlobalNormClip, LossScaler, LossScaling, StaticLossScale, global_grad_norm, unscale_grads,
};
use common::TB;

/// One parameter of each rank from 1 to 6, in several dtypes.
#[derive(Module, Debug)]
struct Ranks<B: Backend> {
    r1: Param<Tensor<B, 1>>,
    r2: Param<Tensor<B, 2>>,
    r3: Param<Tensor<B, 3>>,
    r4: Param<Tensor<B, 4>>,
    r5: Param<Tensor<B, 5>>,
    r6: Param<Tensor<B, 6>>,
}

fn param<const D: usize>(shape: [usize; D], dtype: FloatDType) -> Param<Tensor<TB, D>> {
    Param::from_tensor(Tensor::<TB, D>::zeros(shape, &Default::default()).cast(dtype))
}

fn grad<const D: usize>(shape: [usize; D], value: f32, dtype: FloatDType) -> Tensor<Flex, D> {
    Tensor::<Flex, D>::full(shape, value, &Default::default()).cast(dtype)
}

#[test]
fn every_rank_and_float_dtype_is_cast_unscaled_and_checked() {
    use FloatDType::{BF16, F16, F32, F64};
    let model = Ranks::<TB> {
        r1: param([3], F32),
        r2: param([2, 3], F16),
        r3: param([2, 1, 2], BF16),
        r4: param([1, 2, 1, 2], F64),
        r5: param([1, 1, 2, 1, 2], F32),
        r6: param([1, 2, 1, 1, 1, 2], F16),
    };
    let scale = 1024.0;
    // Gradients in other dtypes than their parameters (f16 for f32, f32 for f16, ...).
    let make = |bad: Option<usize>| {
        let v = |i: usize| {
            if bad == Some(i) {
                f32::INFINITY
            } else {
                3.0 * scale
            }
        };
        let mut grads = GradientsParams::new();
        grads.register(model.r1.id, grad([3], v(1), F16));
        grads.register(model.r2.id, grad([2, 3], v(2), F32));
        grads.register(model.r3.id, grad([2, 1, 2], v(3), F32));
        grads.register(model.r4.id, grad([1, 2, 1, 2], v(4), BF16));
        grads.register(model.r5.id, grad([1, 1, 2, 1, 2], v(5), F64));
        grads.register(model.r6.id, grad([1, 2, 1, 1, 1, 2], v(6), BF16));
        grads
    };

    let unscaled = unscale_grads(&model, make(None), scale).unwrap();
    assert_eq!(unscaled.len(), 6);
    assert!(unscaled.read_finite().unwrap());
    let grads = unscaled.into_grads();
    let check = |dtype: DType, data: burn::tensor::TensorData, expected: DType| {
        assert_eq!(dtype, expected);
        assert!(data.iter::<f32>().all(|v| v == 3.0), "{data:?}");
    };
    let g1 = grads.get::<Flex, 1>(model.r1.id).unwrap();
    check(g1.dtype(), g1.into_data(), DType::F32);
    let g2 = grads.get::<Flex, 2>(model.r2.id).unwrap();
    check(g2.dtype(), g2.into_data(), DType::F16);
    let g3 = grads.get::<Flex, 3>(model.r3.id).unwrap();
    check(g3.dtype(), g3.into_data(), DType::BF16);
    let g4 = grads.get::<Flex, 4>(model.r4.id).unwrap();
    check(g4.dtype(), g4.into_data(), DType::F64);
    let g5 = grads.get::<Flex, 5>(model.r5.id).unwrap();
    check(g5.dtype(), g5.into_data(), DType::F32);
    let g6 = grads.get::<Flex, 6>(model.r6.id).unwrap();
    check(g6.dtype(), g6.into_data(), DType::F16);

    for bad in 1..=6 {
        let unscaled = unscale_grads(&model, make(Some(bad)), scale).unwrap();
        assert!(!unscaled.read_finite().unwrap(), "inf in rank {bad}");
    }
}

#[test]
fn missing_and_foreign_gradients_are_left_alone() {
    let device = Default::default();
    let model: Linear<TB> = LinearConfig::new(2, 2).init(&device);
    let other: Linear<TB> = LinearConfig::new(2, 2).init(&device);
    let mut grads = GradientsParams::new();
    grads.register(model.weight.id, grad([2, 2], 8.0, FloatDType::F32));
    // A gradient of a parameter that is not in `model`, holding an inf.
    grads.register(
        other.weight.id,
        grad([2, 2], f32::INFINITY, FloatDType::F16),
    );

    let unscaled = unscale_grads(&model, grads, 4.0).unwrap();
    assert_eq!(
        unscaled.len(),
        1,
        "only the module's own gradient is transformed"
    );
    assert!(unscaled.read_finite().unwrap());
    let grads = unscaled.into_grads();
    let foreign = grads.get::<Flex, 2>(other.weight.id).unwrap();
    assert_eq!(foreign.dtype(), DType::F16);
    assert!(foreign.into_data().iter::<f32>().all(f32::is_infinite));
    let own = grads.get::<Flex, 2>(model.weight.id).unwrap();
    assert!(own.into_data().iter::<f32>().all(|v| v == 2.0));
}

#[test]
fn no_gradients_count_as_finite() {
    let model: Linear<TB> = LinearConfig::new(2, 2).init(&Default::default());
    let unscaled = unscale_grads(&model, GradientsParams::new(), 4.0).unwrap();
    assert!(unscaled.is_empty());
    assert!(unscaled.finite_flag().is_none());
    assert!(unscaled.read_finite().unwrap());
}

/// The same `Linear` reachable through two fields.
#[derive(Module, Debug)]
struct Tied<B: Backend> {
    first: Linear<B>,
    second: Linear<B>,
}

#[test]
fn a_shared_parameter_is_unscaled_once() {
    let device = Default::default();
    let layer: Linear<TB> = LinearConfig::new(2, 2).init(&device);
    let model = Tied {
        first: layer.clone(),
        second: layer,
    };
    let mut grads = GradientsParams::new();
    grads.register(model.first.weight.id, grad([2, 2], 8.0, FloatDType::F32));
    let unscaled = unscale_grads(&model, grads, 2.0).unwrap();
    assert_eq!(unscaled.len(), 1);
    let g = unscaled
        .into_grads()
        .get::<Flex, 2>(model.second.weight.id)
        .unwrap();
    assert!(g.into_data().iter::<f32>().all(|v| v == 4.0));

    let mut grads = GradientsParams::new();
    grads.register(model.first.weight.id, grad([2, 2], 1.0, FloatDType::F32));
    let norm = global_grad_norm(&model, &grads).unwrap().into_scalar();
    assert_eq!(norm, 2.0, "counted once: sqrt(4 * 1)");
}

#[test]
fn unscaling_multiplies_by_the_f32_rounded_inverse() {
    // PyTorch: inv_scale = float32(1 / float64(scale)); grads are multiplied by it.
    let device = Default::default();
    let model: Linear<TB> = LinearConfig::new(1, 1).init(&device);
    for scale in [3.0f32, 10.0, 1000.0, 65536.0] {
        let inverse = (1.0 / f64::from(scale)) as f32;
        let mut grads = GradientsParams::new();
        grads.register(
            model.weight.id,
            Tensor::<Flex, 2>::from_floats([[7.0]], &device),
        );
        let g = unscale_grads(&model, grads, scale).unwrap().into_grads();
        let got = g.get::<Flex, 2>(model.weight.id).unwrap().into_scalar();
        assert_eq!(got, 7.0 * inverse, "scale {scale}");
        assert_eq!(
            StaticLossScale::new(scale).unwrap().inverse_scale(),
            inverse
        );
    }
}

#[test]
fn scaling_an_f16_loss_does_not_overflow() {
    let device = Default::default();
    // 40000 * 2^15 overflows f16 and f16 * 2^15 would overflow for any loss above 2.
    let loss = Tensor::<Flex, 1>::from_floats([40000.0], &device).cast(FloatDType::F16);
    let scaled = LossScaler::default().scale_loss(loss);
    assert_eq!(scaled.dtype(), DType::F32);
    assert_eq!(scaled.into_scalar(), 40000.0 * 32768.0);
    let f64_loss = Tensor::<Flex, 1>::from_floats([0.1], &device).cast(FloatDType::F64);
    assert_eq!(
        LossScaler::default().scale_loss(f64_loss).dtype(),
        DType::F64
    );
}

/// The check reduces each gradient to one f32 sum: f16 gradients whose total is far above
/// f16's maximum (65504) are still finite, and one infinity or NaN anywhere is caught, for
/// f16 and f32 gradients, with and without clipping (sum of squares).
#[test]
fn f16_gradients_summing_past_65504_are_finite_and_a_single_inf_or_nan_is_not() {
    let device = Default::default();
    let model = Ranks::<TB> {
        r1: param([4], FloatDType::F32),
        r2: param([64, 64], FloatDType::F32),
        r3: param([1, 1, 1], FloatDType::F32),
        r4: param([1, 1, 1, 1], FloatDType::F32),
        r5: param([1, 1, 1, 1, 1], FloatDType::F32),
        r6: param([1, 1, 1, 1, 1, 1], FloatDType::F32),
    };
    let grads = |poison: Option<f32>| {
        let mut grads = GradientsParams::new();
        // 4096 f16 elements of 60000 each: a sum of 2.5e8, scaled by 2.
        let mut big = Tensor::<Flex, 2>::full([64, 64], 60000.0, &device).cast(FloatDType::F16);
        if let Some(value) = poison {
            let value = Tensor::<Flex, 2>::full([1, 1], value, &device).cast(FloatDType::F16);
            big = big.slice_assign([5..6, 7..8], value);
        }
        grads.register(model.r2.id, big);
        grads.register(model.r1.id, grad([4], 1.0, FloatDType::F32));
        grads
    };
    let clipped = LossScaler::fixed(2.0).unwrap().with_clip_norm(1.0).unwrap();
    for scaler in [LossScaler::fixed(2.0).unwrap(), clipped] {
        let checked = scaler
            .check(&model, grads(None), None::<Tensor<TB, 1>>)
            .unwrap();
        assert!(checked.finite, "clip: {:?}", scaler.clip());
        let w = checked.grads.get::<Flex, 2>(model.r2.id).unwrap();
        assert_eq!(w.dtype(), DType::F32);
        for poison in [f32::INFINITY, f32::NEG_INFINITY, f32::NAN] {
            let checked = scaler
                .check(&model, grads(Some(poison)), None::<Tensor<TB, 1>>)
                .unwrap();
            assert!(!checked.finite, "{poison} with clip {:?}", scaler.clip());
        }
    }
    // The norm comes from the same pass: sqrt(4096 * 30000^2 + 4 * 0.5^2), summed in f32.
    let checked = LossScaler::fixed(2.0)
        .unwrap()
        .with_clip_norm(1.0)
        .unwrap()
        .check(&model, grads(None), None::<Tensor<TB, 1>>)
        .unwrap();
    let expected = (4096.0f64 * 30000.0 * 30000.0 + 4.0 * 0.25).sqrt();
    let norm = f64::from(checked.grad_norm.unwrap());
    assert!(
        (norm - expected).abs() / expected < 1e-4,
        "{norm} vs {expected}"
    );
}

/// The global norm of f64 and bf16 gradients whose squares overflow f32: finite while the norm
/// fits in f32, a non-finite (skipped) step beyond, and the clipped values follow the norm.
#[test]
fn wide_and_bf16_gradients_beyond_f32_squares_give_their_true_norm() {
    use FloatDType::{BF16, F32, F64};
    let model = Ranks::<TB> {
        r1: param([2], F64),
        r2: param([2, 2], BF16),
        r3: param([1, 1, 1], F32),
        r4: param([1, 1, 1, 1], F32),
        r5: param([1, 1, 1, 1, 1], F32),
        r6: param([1, 1, 1, 1, 1, 1], F32),
    };
    let device = Default::default();
    let grads = |wide: [f64; 2], half: f32| {
        let mut grads = GradientsParams::new();
        let wide = Tensor::<Flex, 1>::from_data(
            burn::tensor::TensorData::new(wide.to_vec(), [2]),
            (&device, DType::F64),
        );
        grads.register(model.r1.id, wide);
        grads.register(model.r2.id, grad([2, 2], half, BF16));
        grads
    };
    let scaler = LossScaler::noop().with_clip_norm(1.0).unwrap();
    let check = |wide: [f64; 2], half: f32| {
        scaler
            .check(&model, grads(wide, half), None::<Tensor<TB, 1>>)
            .unwrap()
    };
    let half = f64::from(burn::tensor::bf16::from_f32(1e20).to_f32());

    // f64 elements of 1e30 (squares fit f64, not f32) and bf16 elements of 1e20.
    let checked = check([1e30, -2e30], 1e20);
    assert!(checked.finite);
    let norm = (1e60f64 + 4e60 + 4.0 * half * half).sqrt();
    let reported = f64::from(checked.grad_norm.unwrap());
    assert!(
        (reported - norm).abs() <= 1e-6 * norm,
        "{reported} vs {norm}"
    );
    let g = checked.grads.get::<Flex, 1>(model.r1.id).unwrap();
    assert_eq!(g.dtype(), DType::F64);
    let clipped: Vec<f64> = g.into_data().iter::<f64>().collect();
    assert!((clipped[0] - 1e30 / norm).abs() < 1e-6, "{clipped:?}");
    assert!((clipped[1] + 2e30 / norm).abs() < 1e-6, "{clipped:?}");
    let h = checked.grads.get::<Flex, 2>(model.r2.id).unwrap();
    assert_eq!(h.dtype(), DType::BF16);
    assert!(h.into_data().iter::<f32>().all(|v| v > 0.0 && v < 1.0));

    // A finite f64 norm beyond f32::MAX cannot be clipped in f32 terms: non-finite.
    let checked = check([1e200, 0.0], 1.0);
    assert!(!checked.finite);
    assert_eq!(checked.grad_norm, Some(f32::INFINITY));
    // Without clipping the same gradients are finite (their f64 sum, too, is checked at f64).
    let unclipped = LossScaler::noop()
        .check(&model, grads([1e200, 0.0], 1.0), None::<Tensor<TB, 1>>)
        .unwrap();
    assert!(unclipped.finite);
    assert_eq!(unclipped.grad_norm, None);
}

/// The standalone norm and clip cannot overflow either, and still report non-finite elements.
#[test]
fn global_grad_norm_is_overflow_safe() {
    let device = Default::default();
    let model: Linear<TB> = LinearConfig::new(2, 2).init(&device);
    let bias = model.bias.as_ref().unwrap().id;
    let grads = |weight: [[f32; 2]; 2], b: [f32; 2]| {
        let mut grads = GradientsParams::new();
        grads.register(
            model.weight.id,
            Tensor::<Flex, 2>::from_floats(weight, &device),
        );
        grads.register(bias, Tensor::<Flex, 1>::from_floats(b, &device));
        grads
    };
    let norm = |g: &GradientsParams| global_grad_norm(&model, g).unwrap().into_scalar();

    let big = grads([[1e20, -2e20], [0.0, 3e19]], [4e19, -1.35e19]);
    let expected = [1e20f64, 2e20, 3e19, 4e19, 1.35e19]
        .iter()
        .map(|&v| f64::from(v as f32).powi(2))
        .sum::<f64>()
        .sqrt();
    let got = f64::from(norm(&big));
    assert!(
        (got - expected).abs() <= 1e-6 * expected,
        "{got} vs {expected}"
    );
    let clipped = GlobalNormClip::new(1.0).unwrap().clip(&model, big);
    let w: Vec<f32> = clipped
        .get::<Flex, 2>(model.weight.id)
        .unwrap()
        .into_data()
        .iter::<f32>()
        .collect();
    assert!((f64::from(w[1]) + 2e20 / expected).abs() < 1e-6, "{w:?}");

    assert_eq!(norm(&grads([[0.0; 2]; 2], [0.0; 2])), 0.0);
    assert_eq!(norm(&grads([[1e-30, 0.0], [0.0, 0.0]], [0.0; 2])), 1e-30);
    assert_eq!(
        norm(&grads([[f32::INFINITY, 1.0], [0.0, 0.0]], [0.0; 2])),
        f32::INFINITY
    );
    assert_eq!(
        norm(&grads([[1e20, 0.0], [0.0, 0.0]], [f32::NEG_INFINITY, 0.0])),
        f32::INFINITY
    );
    assert!(norm(&grads([[f32::NAN, 1.0], [0.0, 0.0]], [0.0; 2])).is_nan());
    assert_eq!(
        norm(&grads([[3e38, 3e38], [0.0, 0.0]], [0.0; 2])),
        f32::INFINITY
    );
}
