//! Data-parallel replicas take one decision: the finiteness flags are ANDed and read once.

mod common;

use burn::backend::Flex;
use burn::optim::{GradientsParams, Optimizer, SgdConfig};
use burn::tensor::{Bool, Tensor};
use burn_mpric_scale::{LossScaleConfig, LossScaler, all_replicas_finite, combine_finite_flags};
use common::{TB, TwoLayer, batches, param_data};

/// The mean of two replicas' gradients for every parameter (an all-reduce emulated in process).
fn mean_grads(model: &TwoLayer<TB>, a: &GradientsParams, b: &GradientsParams) -> GradientsParams {
    let mut out = GradientsParams::new();
    for layer in [&model.l1, &model.l2] {
        let w = layer.weight.id;
        let (ga, gb) = (a.get::<Flex, 2>(w).unwrap(), b.get::<Flex, 2>(w).unwrap());
        out.register(w, (ga + gb).div_scalar(2.0));
        let bias = layer.bias.as_ref().unwrap().id;
        let (ga, gb) = (
            a.get::<Flex, 1>(bias).unwrap(),
            b.get::<Flex, 1>(bias).unwrap(),
        );
        out.register(bias, (ga + gb).div_scalar(2.0));
    }
    out
}

#[test]
fn a_non_finite_gradient_on_one_replica_makes_every_replica_skip() {
    let device = Default::default();
    let initial = TwoLayer::<TB>::new(8, &device);
    let (mut rep_a, mut rep_b) = (initial.clone(), initial.clone());
    let shard_a = batches::<TB>(4, 8, 41, &device);
    let shard_b = batches::<TB>(4, 8, 42, &device);
    let mut opt_a = SgdConfig::new().init();
    let mut opt_b = SgdConfig::new().init();
    let config = LossScaleConfig::new()
        .with_initial_scale(256.0)
        .with_growth_interval(1);
    // Each replica holds its own scaler; the shared decision keeps them equal.
    let mut scaler_a = LossScaler::dynamic(config).unwrap();
    let mut scaler_b = scaler_a;

    let mut decisions = Vec::new();
    for i in 0..4 {
        let (xa, ya) = &shard_a[i];
        let (xb, yb) = &shard_b[i];
        let la = scaler_a.scale_loss(rep_a.mse(xa.clone(), ya.clone()));
        let lb = scaler_b.scale_loss(rep_b.mse(xb.clone(), yb.clone()));
        let ga = GradientsParams::from_grads(la.backward(), &rep_a);
        let mut gb = GradientsParams::from_grads(lb.backward(), &rep_b);
        if i == 2 {
            let w = &rep_b.l2.weight;
            gb.register(w.id, Tensor::<Flex, 2>::full(w.shape(), f32::NAN, &device));
        }
        let ua = scaler_a.unscale_grads(&rep_a, ga).unwrap();
        let ub = scaler_b.unscale_grads(&rep_b, gb).unwrap();
        // Replica A alone would have stepped.
        assert!(ua.read_finite().unwrap());
        let finite = all_replicas_finite(&[&ua, &ub], &device).unwrap();
        decisions.push(finite);
        if finite {
            let (ga, gb) = (ua.into_grads(), ub.into_grads());
            let mean_a = mean_grads(&rep_a, &ga, &gb);
            let mean_b = mean_grads(&rep_b, &ga, &gb);
            rep_a = opt_a.step(0.1, rep_a, mean_a);
            rep_b = opt_b.step(0.1, rep_b, mean_b);
        }
        // The replicas never drift apart.
        for (a, b) in param_data(&rep_a).iter().zip(param_data(&rep_b)) {
            assert_eq!(a.as_bytes(), b.as_bytes());
        }
        let oa = scaler_a.update(finite);
        let ob = scaler_b.update(finite);
        assert_eq!(oa, ob);
    }
    assert_eq!(decisions, [true, true, false, true]);
    assert_eq!(scaler_a, scaler_b);
    assert_eq!(scaler_a.scale(), 256.0 * 2.0 * 2.0 * 0.5 * 2.0);
    assert_eq!(scaler_a.stats().skipped, 1);
    let moved = param_data(&rep_a)
        .iter()
        .zip(param_data(&initial))
        .any(|(a, b)| a.as_bytes() != b.as_bytes());
    assert!(moved, "the applied steps changed the parameters");
}

#[test]
fn flags_combine_as_a_logical_and() {
    let device = Default::default();
    let flag = |v: bool| Tensor::<Flex, 1, Bool>::from_bool([v].into(), &device);
    for (flags, expected) in [
        (vec![true, true, true], true),
        (vec![true, false, true], false),
        (vec![false], false),
        (vec![true], true),
    ] {
        let combined = combine_finite_flags(flags.into_iter().map(flag), &device).unwrap();
        assert_eq!(combined.into_scalar(), expected);
    }
    assert!(combine_finite_flags(Vec::<Tensor<Flex, 1, Bool>>::new(), &device).is_none());
    assert!(all_replicas_finite::<Flex>(&[], &device).unwrap());
}

/// Sharded gradients (burn-train's `OptimSharded`): one decision over all shards, and clipping
/// by the norm of the summed gradient, which is what the optimizer applies.
#[test]
fn step_multi_clips_by_the_norm_of_the_summed_gradient() {
    use burn::backend::Autodiff;
    use burn::nn::{Linear, LinearConfig};
    use burn::optim::MultiGradientsParams;
    use burn::prelude::DeviceOps;

    let device: burn::backend::flex::FlexDevice = Default::default();
    let model: Linear<Autodiff<Flex>> = LinearConfig::new(1, 1).with_bias(false).init(&device);
    let w0 = model.weight.val().into_scalar();
    let shard = |value: f32| {
        let mut grads = GradientsParams::new();
        // Scaled by 8: the scaler divides by 8 before anything else.
        grads.register(
            model.weight.id,
            Tensor::<Flex, 2>::from_floats([[value * 8.0]], &device),
        );
        (grads, device.to_id())
    };
    let config = LossScaleConfig::new().with_initial_scale(8.0);
    // Shards 3 and 1 sum to 4; clipped to norm 2, the applied gradient is 2 (per-shard norms,
    // 3 and 1, would clip only the first shard and apply 2 + 1 = 3).
    let mut scaler = LossScaler::dynamic(config)
        .unwrap()
        .with_clip_norm(2.0)
        .unwrap();
    let grads = MultiGradientsParams {
        grads: vec![shard(3.0), shard(1.0)],
    };
    let (model, outcome) = scaler.step_multi(&mut SgdConfig::new().init(), 1.0, model, grads);
    let outcome = outcome.unwrap();
    assert!(outcome.is_applied());
    assert!((outcome.grad_norm.unwrap() - 4.0).abs() < 1e-6);
    let w1 = model.weight.val().into_scalar();
    assert!((w0 - w1 - 2.0).abs() < 1e-5, "step {}", w0 - w1);
    assert_eq!(scaler.stats().steps, 1);
}

/// Sharded gradients whose squares overflow f32 (elements around 1e20): the norm of their sum
/// is computed without overflow, and shards that are finite but add up past `f32::MAX` (the
/// gradient the optimizer would apply is infinite) make the step non-finite.
#[test]
fn step_multi_clips_huge_finite_gradients_by_their_true_norm() {
    use burn::backend::Autodiff;
    use burn::nn::{Linear, LinearConfig};
    use burn::optim::MultiGradientsParams;
    use burn::prelude::DeviceOps;

    let device: burn::backend::flex::FlexDevice = Default::default();
    let model: Linear<Autodiff<Flex>> = LinearConfig::new(2, 1).with_bias(false).init(&device);
    let w0: Vec<f32> = model.weight.val().into_data().iter::<f32>().collect();
    let weight = model.weight.id;
    let shard = |values: [f32; 2]| {
        let mut grads = GradientsParams::new();
        grads.register(
            weight,
            Tensor::<Flex, 2>::from_floats([[values[0]], [values[1]]], &device),
        );
        (grads, device.to_id())
    };
    let mut scaler = LossScaler::noop().with_clip_norm(2.0).unwrap();
    // Summed: [4e20, -3e20], norm 5e20; clipped to norm 2: [1.6, -1.2].
    let grads = MultiGradientsParams {
        grads: vec![shard([3e20, -1e20]), shard([1e20, -2e20])],
    };
    let (model, outcome) = scaler.step_multi(&mut SgdConfig::new().init(), 1.0, model, grads);
    let outcome = outcome.unwrap();
    assert!(outcome.is_applied(), "{outcome:?}");
    assert!((outcome.grad_norm.unwrap() / 5e20 - 1.0).abs() < 1e-6);
    let w1: Vec<f32> = model.weight.val().into_data().iter::<f32>().collect();
    assert!((w0[0] - w1[0] - 1.6).abs() < 1e-5, "{w0:?} -> {w1:?}");
    assert!((w0[1] - w1[1] + 1.2).abs() < 1e-5, "{w0:?} -> {w1:?}");

    let grads = MultiGradientsParams {
        grads: vec![shard([3e38, 0.0]), shard([3e38, 0.0])],
    };
    let (model, outcome) = scaler.step_multi(&mut SgdConfig::new().init(), 1.0, model, grads);
    let outcome = outcome.unwrap();
    assert!(outcome.is_skipped(), "{outcome:?}");
    assert_eq!(outcome.grad_norm, Some(f32::INFINITY));
    let w2: Vec<f32> = model.weight.val().into_data().iter::<f32>().collect();
    assert_eq!(w1, w2);
}
