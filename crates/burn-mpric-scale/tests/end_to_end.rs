//! PyTorch's end-to-end scaling cases (its `test_grad_scaling_*` tests: a skipped step,
//! gradient accumulation, clipping after unscale) with real `Linear` models and real
//! optimizers, and the skip semantics with Adam.

mod common;

use std::collections::BTreeMap;

use burn::backend::Flex;
use burn::module::ParamId;
use burn::nn::{Linear, LinearConfig};
use burn::optim::{
    AdamConfig, GradientsAccumulator, GradientsParams, MultiGradientsParams, Optimizer, SgdConfig,
};
use burn::prelude::DeviceOps;
use burn::record::{FullPrecisionSettings, Record};
use burn::tensor::Tensor;
use burn_mpric_scale::{LossScaleConfig, LossScaler, StepError, StepOutcome};
use common::{TB, TwoLayer, batches, max_abs_diff, param_data, param_values};

const SKIP_ITER: usize = 2;

/// PyTorch's scaler for `_run_scaling_case`: init 128, growth 2, interval 1.
fn torch_case_scaler() -> LossScaler {
    LossScaler::dynamic(
        LossScaleConfig::torch()
            .with_initial_scale(128.0)
            .with_growth_factor(2.0)
            .with_growth_interval(1),
    )
    .unwrap()
}

/// Replaces the layer-2 weight gradient by a tensor full of `value`.
fn poison(model: &TwoLayer<TB>, grads: &mut GradientsParams, value: f32) {
    let weight = &model.l2.weight;
    let device = Default::default();
    grads.register(
        weight.id,
        Tensor::<Flex, 2>::full(weight.shape(), value, &device),
    );
}

/// Runs the control model: plain SGD, skipping `SKIP_ITER` by hand. Returns the losses.
fn run_control(
    mut model: TwoLayer<TB>,
    data: &[(Tensor<TB, 2>, Tensor<TB, 2>)],
) -> (TwoLayer<TB>, Vec<f32>) {
    let mut optim = SgdConfig::new().init();
    let mut losses = Vec::new();
    for (i, (x, y)) in data.iter().enumerate() {
        let loss = model.mse(x.clone(), y.clone());
        losses.push(loss.clone().into_scalar());
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        if i != SKIP_ITER {
            model = optim.step(1.0, model, grads);
        }
    }
    (model, losses)
}

/// Runs the scaled model with an inf injected at `SKIP_ITER`.
fn run_scaled(
    mut model: TwoLayer<TB>,
    scaler: &mut LossScaler,
    data: &[(Tensor<TB, 2>, Tensor<TB, 2>)],
) -> (TwoLayer<TB>, Vec<StepOutcome>) {
    let mut optim = SgdConfig::new().init();
    let mut outcomes = Vec::new();
    for (i, (x, y)) in data.iter().enumerate() {
        let scaled = scaler.scale_loss(model.mse(x.clone(), y.clone()));
        let mut grads = GradientsParams::from_grads(scaled.backward(), &model);
        if i == SKIP_ITER {
            poison(&model, &mut grads, f32::INFINITY);
        }
        let (next, outcome) = scaler.step_with_loss(&mut optim, 1.0, model, grads, scaled);
        model = next;
        outcomes.push(outcome.unwrap());
    }
    (model, outcomes)
}

#[test]
fn f15_skipped_step_matches_a_control_that_skips_by_hand() {
    let device = Default::default();
    let data = batches::<TB>(4, 8, 15, &device);
    let model = TwoLayer::<TB>::new(8, &device);
    let initial = param_values(&model);
    let (control, control_losses) = run_control(model.clone(), &data);

    let mut scaler = torch_case_scaler();
    let (scaled, outcomes) = run_scaled(model, &mut scaler, &data);

    // 3 finite steps and 1 skipped: 128 * 2^3 * 0.5.
    assert_eq!(scaler.scale(), 512.0);
    let used: Vec<f32> = outcomes.iter().map(|o| o.scale_used).collect();
    assert_eq!(used, [128.0, 256.0, 512.0, 256.0]);
    for (i, outcome) in outcomes.iter().enumerate() {
        assert_eq!(outcome.is_skipped(), i == SKIP_ITER);
        // The loss is unscaled with the scale that was used, on growth and backoff steps alike.
        assert_eq!(outcome.loss, Some(control_losses[i]), "step {i}");
    }
    assert_eq!(scaler.stats().skipped, 1);

    let (c, s) = (param_values(&control), param_values(&scaled));
    assert!(
        max_abs_diff(&c, &s) <= 1e-6,
        "max diff {}",
        max_abs_diff(&c, &s)
    );
    assert!(
        max_abs_diff(&initial, &s) > 1e-3,
        "training moved the parameters"
    );
}

#[test]
fn f15_with_the_noop_scaler_the_same_code_path_runs() {
    let device = Default::default();
    let data = batches::<TB>(4, 8, 16, &device);
    let model = TwoLayer::<TB>::new(8, &device);
    let initial = param_values(&model);
    let (control, _) = run_control(model.clone(), &data);

    let mut scaler = LossScaler::noop();
    let (scaled, outcomes) = run_scaled(model, &mut scaler, &data);
    assert_eq!(scaler.scale(), 1.0);
    assert!(
        outcomes
            .iter()
            .all(|o| o.scale_used == 1.0 && o.next_scale == 1.0)
    );
    assert!(outcomes[SKIP_ITER].is_skipped());
    let (c, s) = (param_values(&control), param_values(&scaled));
    assert!(max_abs_diff(&c, &s) <= 1e-6);
    assert!(
        max_abs_diff(&initial, &s) > 1e-3,
        "training moved the parameters"
    );
}

#[test]
fn f16_gradient_accumulation_over_two_micro_batches() {
    let device = Default::default();
    let data = batches::<TB>(4, 8, 17, &device);
    let model = TwoLayer::<TB>::new(8, &device);
    let accumulate = 2;

    let mut control = model.clone();
    let mut optim = SgdConfig::new().init();
    let mut acc = GradientsAccumulator::new();
    for (i, (x, y)) in data.iter().enumerate() {
        let loss = control
            .mse(x.clone(), y.clone())
            .div_scalar(accumulate as f32);
        acc.accumulate(
            &control,
            GradientsParams::from_grads(loss.backward(), &control),
        );
        if (i + 1) % accumulate == 0 {
            control = optim.step(1.0, control, acc.grads());
        }
    }

    let mut scaled = model;
    let mut optim = SgdConfig::new().init();
    let mut acc = GradientsAccumulator::new();
    let mut scaler = torch_case_scaler();
    for (i, (x, y)) in data.iter().enumerate() {
        let loss = scaled
            .mse(x.clone(), y.clone())
            .div_scalar(accumulate as f32);
        let loss = scaler.scale_loss(loss);
        acc.accumulate(
            &scaled,
            GradientsParams::from_grads(loss.backward(), &scaled),
        );
        if (i + 1) % accumulate == 0 {
            let (next, outcome) = scaler.step(&mut optim, 1.0, scaled, acc.grads());
            scaled = next;
            assert!(outcome.unwrap().is_applied());
        }
    }
    // 128 * 2^2
    assert_eq!(scaler.scale(), 512.0);
    assert!(max_abs_diff(&param_values(&control), &param_values(&scaled)) <= 1e-6);
}

/// The global L2 norm of `grads` for every parameter of `model`, computed on the host in f64.
fn host_norm(model: &TwoLayer<TB>, grads: &GradientsParams) -> f64 {
    let mut sum = 0.0f64;
    for layer in [&model.l1, &model.l2] {
        let w = grads.get::<Flex, 2>(layer.weight.id).unwrap();
        let b = grads
            .get::<Flex, 1>(layer.bias.as_ref().unwrap().id)
            .unwrap();
        for v in w
            .into_data()
            .iter::<f32>()
            .chain(b.into_data().iter::<f32>())
        {
            sum += f64::from(v) * f64::from(v);
        }
    }
    sum.sqrt()
}

/// Multiplies every gradient of `model` by `coef`.
fn scale_grads(model: &TwoLayer<TB>, mut grads: GradientsParams, coef: f32) -> GradientsParams {
    for layer in [&model.l1, &model.l2] {
        let w = grads.remove::<Flex, 2>(layer.weight.id).unwrap();
        grads.register(layer.weight.id, w.mul_scalar(coef));
        let id = layer.bias.as_ref().unwrap().id;
        let b = grads.remove::<Flex, 1>(id).unwrap();
        grads.register(id, b.mul_scalar(coef));
    }
    grads
}

#[test]
fn f16_global_norm_clipping_after_unscale_matches_control() {
    let device = Default::default();
    let data = batches::<TB>(4, 8, 18, &device);
    let model = TwoLayer::<TB>::new(8, &device);
    let max_norm = 0.2f32;

    // Control: clip_grad_norm_ by hand, skipping SKIP_ITER.
    let mut control = model.clone();
    let mut optim = SgdConfig::new().init();
    let mut norms = Vec::new();
    for (i, (x, y)) in data.iter().enumerate() {
        let loss = control.mse(x.clone(), y.clone());
        let grads = GradientsParams::from_grads(loss.backward(), &control);
        let norm = host_norm(&control, &grads);
        norms.push(norm);
        let coef = (f64::from(max_norm) / (norm + 1e-6)).min(1.0) as f32;
        let grads = scale_grads(&control, grads, coef);
        if i != SKIP_ITER {
            control = optim.step(1.0, control, grads);
        }
    }

    let mut scaler = torch_case_scaler().with_clip_norm(max_norm).unwrap();
    let (scaled, outcomes) = run_scaled(model, &mut scaler, &data);
    assert_eq!(scaler.scale(), 512.0);
    for (i, outcome) in outcomes.iter().enumerate() {
        if i == SKIP_ITER {
            assert!(outcome.is_skipped());
            continue;
        }
        let reported = f64::from(outcome.grad_norm.unwrap());
        assert!(
            (reported - norms[i]).abs() <= 1e-5 * norms[i],
            "{reported} vs {}",
            norms[i]
        );
        assert!(norms[i] > f64::from(max_norm), "the case does clip");
    }
    let diff = max_abs_diff(&param_values(&control), &param_values(&scaled));
    assert!(diff <= 1e-5, "max diff {diff}");
}

type AdamState = BTreeMap<ParamId, String>;

/// The optimizer's state, serialized per parameter.
fn adam_state<O: Optimizer<TwoLayer<TB>, TB>>(optim: &O) -> AdamState
where
    O::Record: IntoIterator<
        Item = (
            ParamId,
            burn::optim::record::AdaptorRecord<burn::optim::Adam, TB>,
        ),
    >,
{
    optim
        .to_record()
        .into_iter()
        .map(|(id, record)| {
            let item = Record::<TB>::into_item::<FullPrecisionSettings>(record);
            (id, serde_json::to_string(&item).unwrap())
        })
        .collect()
}

#[test]
fn adam_moments_step_counter_and_params_are_bit_identical_across_a_skipped_step() {
    let device = Default::default();
    let data = batches::<TB>(3, 8, 19, &device);
    let mut model = TwoLayer::<TB>::new(8, &device);
    let mut optim = AdamConfig::new().init();
    let mut scaler =
        LossScaler::dynamic(LossScaleConfig::new().with_initial_scale(1024.0)).unwrap();

    let step =
        |model: TwoLayer<TB>, optim: &mut _, scaler: &mut LossScaler, i: usize, poisoned: bool| {
            let (x, y): &(Tensor<TB, 2>, Tensor<TB, 2>) = &data[i];
            let scaled = scaler.scale_loss(model.mse(x.clone(), y.clone()));
            let mut grads = GradientsParams::from_grads(scaled.backward(), &model);
            if poisoned {
                poison(&model, &mut grads, f32::NAN);
            }
            let (model, outcome) = scaler.step(optim, 1e-2, model, grads);
            (model, outcome.unwrap())
        };

    let (next, outcome) = step(model, &mut optim, &mut scaler, 0, false);
    model = next;
    assert!(outcome.is_applied());
    let state_before = adam_state(&optim);
    assert_eq!(
        state_before.len(),
        4,
        "moments exist for all four parameters"
    );
    let params_before = param_data(&model);
    let (mut reference_model, mut reference_optim) = (model.clone(), optim.clone());
    let mut reference_scaler = scaler;

    let (next, outcome) = step(model, &mut optim, &mut scaler, 1, true);
    model = next;
    assert!(outcome.is_skipped());
    assert_eq!(adam_state(&optim), state_before);
    for (before, after) in params_before.iter().zip(param_data(&model)) {
        assert_eq!(before.dtype, after.dtype);
        assert_eq!(before.as_bytes(), after.as_bytes());
    }

    // The next applied step matches a run that never saw the bad batch: Adam's step counter
    // did not advance.
    let (next, outcome) = step(model, &mut optim, &mut scaler, 2, false);
    model = next;
    assert!(outcome.is_applied());
    let (next, _) = step(
        reference_model,
        &mut reference_optim,
        &mut reference_scaler,
        2,
        false,
    );
    reference_model = next;
    assert_ne!(adam_state(&optim), state_before);
    assert_eq!(adam_state(&optim), adam_state(&reference_optim));
    for (a, b) in param_data(&model).iter().zip(param_data(&reference_model)) {
        assert_eq!(a.as_bytes(), b.as_bytes());
    }
}

/// A `Linear(2, 3)` (weight [2, 3], bias [3]) with its parameters read once (they are lazy).
fn linear_2x3() -> Linear<TB> {
    let model: Linear<TB> = LinearConfig::new(2, 3).init(&Default::default());
    let _ = param_data(&model);
    model
}

/// The parameters of a `Linear` as f64 values, weight then bias.
fn linear_values(model: &Linear<TB>) -> Vec<f64> {
    param_values(model).into_iter().map(f64::from).collect()
}

/// Gradients for `linear_2x3`, multiplied by `scale`.
fn linear_grads(
    model: &Linear<TB>,
    weight: [[f32; 3]; 2],
    bias: [f32; 3],
    scale: f32,
) -> GradientsParams {
    let device = Default::default();
    let mut grads = GradientsParams::new();
    let weight = Tensor::<Flex, 2>::from_floats(weight, &device).mul_scalar(scale);
    let bias = Tensor::<Flex, 1>::from_floats(bias, &device).mul_scalar(scale);
    grads.register(model.weight.id, weight);
    grads.register(model.bias.as_ref().unwrap().id, bias);
    grads
}

/// Finite f32 gradients whose squares overflow f32 (elements around 1e20), or whose
/// per-gradient sums of squares are finite but add up past `f32::MAX`: the step is applied with
/// the norm computed in f64 terms, and SGD moves every parameter by `lr * g * max_norm / norm`.
#[test]
fn finite_gradients_around_1e20_are_clipped_by_their_true_norm() {
    let cases: [([[f32; 3]; 2], [f32; 3]); 3] = [
        ([[1e20, -3e20, 0.0], [2e19, 0.0, 7e18]], [5e19, 1e20, -1e20]),
        // Each gradient's sum of squares (1.8225e38) is finite; their total is not.
        ([[1.35e19, 0.0, 0.0], [0.0, 0.0, 0.0]], [0.0, -1.35e19, 0.0]),
        // Only the bias overflows.
        ([[1.0, -2.0, 3.0], [0.5, 0.0, 0.0]], [3e19, 0.0, -3e19]),
    ];
    let (lr, max_norm, scale) = (0.5, 2.0f32, 1024.0f32);
    for (weight, bias) in cases {
        let model = linear_2x3();
        let before = linear_values(&model);
        let flat: Vec<f64> = weight
            .iter()
            .flatten()
            .chain(&bias)
            .map(|&g| f64::from(g))
            .collect();
        let norm = flat.iter().map(|g| g * g).sum::<f64>().sqrt();
        assert!(norm > 1.0e19 && norm < f64::from(f32::MAX));

        let config = LossScaleConfig::new().with_initial_scale(scale);
        let mut scaler = LossScaler::dynamic(config)
            .unwrap()
            .with_clip_norm(max_norm)
            .unwrap();
        let grads = linear_grads(&model, weight, bias, scale);
        let (model, outcome) = scaler.step(&mut SgdConfig::new().init(), lr, model, grads);
        let outcome = outcome.unwrap();
        assert!(outcome.is_applied(), "{weight:?} {bias:?}: {outcome:?}");
        assert_eq!(outcome.next_scale, scale, "no backoff");
        let reported = f64::from(outcome.grad_norm.unwrap());
        assert!(
            (reported - norm).abs() <= 1e-6 * norm,
            "norm {reported} vs {norm}"
        );

        let coefficient = f64::from(max_norm) / (norm + 1e-6);
        let after = linear_values(&model);
        for ((b, a), g) in before.iter().zip(&after).zip(&flat) {
            let expected = -lr * g * coefficient;
            assert!(
                (a - b - expected).abs() <= 1e-6 * (1.0 + expected.abs()),
                "moved by {} instead of {expected}",
                a - b
            );
        }
        // The clipped step has the norm `lr * max_norm`: the parameters did move.
        let moved = before
            .iter()
            .zip(&after)
            .map(|(b, a)| (a - b) * (a - b))
            .sum::<f64>()
            .sqrt();
        assert!(
            (moved - lr * f64::from(max_norm)).abs() < 1e-5,
            "moved {moved}"
        );
    }
}

/// A global norm above `f32::MAX` (finite elements) cannot be applied: the step counts as
/// non-finite, is skipped, backs the scale off, and reports an infinite norm.
#[test]
fn a_norm_beyond_f32_is_a_skipped_step_not_a_zero_update() {
    let model = linear_2x3();
    let before = param_data(&model);
    let config = LossScaleConfig::new()
        .with_initial_scale(2.0)
        .with_min_scale(1.0);
    let mut scaler = LossScaler::dynamic(config)
        .unwrap()
        .with_clip_norm(1.0)
        .unwrap();
    // Unscaled: six elements of 1.5e38, a norm of 3.7e38.
    let grads = linear_grads(&model, [[1.5e38; 3]; 2], [0.0; 3], 2.0);
    let (model, outcome) = scaler.step(&mut AdamConfig::new().init(), 1e-2, model, grads);
    let outcome = outcome.unwrap();
    assert!(outcome.is_skipped(), "{outcome:?}");
    assert_eq!(outcome.grad_norm, Some(f32::INFINITY));
    assert_eq!(outcome.next_scale, 1.0);
    for (a, b) in param_data(&model).iter().zip(&before) {
        assert_eq!(a.as_bytes(), b.as_bytes());
    }
}

/// With clipping on, an infinity or NaN still makes the step non-finite, also next to (or
/// inside) a gradient whose finite elements overflow the f32 sum of squares.
#[test]
fn non_finite_gradients_are_skipped_with_clipping_on() {
    let (inf, nan) = (f32::INFINITY, f32::NAN);
    let cases: [([[f32; 3]; 2], [f32; 3], bool); 6] = [
        ([[inf, 0.0, 0.0], [0.0, 0.0, 0.0]], [1.0, 1.0, 1.0], false),
        ([[nan, 0.0, 0.0], [0.0, 0.0, 0.0]], [1.0, 1.0, 1.0], true),
        (
            [[1e20, 1e20, 0.0], [0.0, 0.0, 0.0]],
            [-inf, 0.0, 0.0],
            false,
        ),
        ([[1e20, inf, 0.0], [0.0, 0.0, 0.0]], [0.0, 0.0, 0.0], false),
        ([[1e20, nan, 0.0], [0.0, 0.0, 0.0]], [0.0, 0.0, 0.0], true),
        ([[1e20, 0.0, 0.0], [0.0, 0.0, 0.0]], [nan, 0.0, 0.0], true),
    ];
    for (weight, bias, is_nan) in cases {
        let model = linear_2x3();
        let before = param_data(&model);
        let config = LossScaleConfig::new()
            .with_initial_scale(4.0)
            .with_min_scale(1.0);
        let mut scaler = LossScaler::dynamic(config)
            .unwrap()
            .with_clip_norm(1.0)
            .unwrap();
        let grads = linear_grads(&model, weight, bias, 4.0);
        let (model, outcome) = scaler.step(&mut AdamConfig::new().init(), 1e-2, model, grads);
        let outcome = outcome.unwrap();
        assert!(outcome.is_skipped(), "{weight:?} {bias:?}");
        assert_eq!(outcome.next_scale, 2.0);
        let norm = outcome.grad_norm.unwrap();
        if is_nan {
            assert!(norm.is_nan(), "{weight:?} {bias:?}: {norm}");
        } else {
            assert_eq!(norm, f32::INFINITY, "{weight:?} {bias:?}");
        }
        for (a, b) in param_data(&model).iter().zip(&before) {
            assert_eq!(a.as_bytes(), b.as_bytes());
        }
    }
}

/// A gradient registered with another shape, or another rank, than its parameter is a typed
/// error on every step path, with Adam: the optimizer is not called, its state, the parameters
/// and the scaler stay as they were.
#[test]
fn gradients_of_the_wrong_shape_or_rank_are_typed_errors() {
    type Build = fn(&Linear<TB>) -> GradientsParams;
    fn valid(model: &Linear<TB>) -> GradientsParams {
        linear_grads(model, [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], [1.0; 3], 8.0)
    }
    fn with_weight<const D: usize>(model: &Linear<TB>, shape: [usize; D]) -> GradientsParams {
        let mut grads = valid(model);
        let wrong = Tensor::<Flex, D>::ones(shape, &Default::default());
        grads.register(model.weight.id, wrong);
        grads
    }
    let cases: [(&str, Build, bool, Vec<usize>); 4] = [
        (
            "transposed weight",
            |m| with_weight(m, [3, 2]),
            true,
            vec![3, 2],
        ),
        (
            "rank-1 tensor for the rank-2 weight",
            |m| with_weight(m, [3]),
            true,
            vec![3],
        ),
        (
            "same element count, rank 1",
            |m| with_weight(m, [6]),
            true,
            vec![6],
        ),
        (
            "rank-2 tensor for the rank-1 bias",
            |m| {
                let mut grads = valid(m);
                let wrong = Tensor::<Flex, 2>::ones([1, 3], &Default::default());
                grads.register(m.bias.as_ref().unwrap().id, wrong);
                grads
            },
            false,
            vec![1, 3],
        ),
    ];

    let device: burn::backend::flex::FlexDevice = Default::default();
    let mut model = linear_2x3();
    let reference_model = model.clone();
    let before = param_data(&model);
    let mut optim = AdamConfig::new().init();
    let plain = LossScaler::dynamic(LossScaleConfig::new().with_initial_scale(8.0)).unwrap();
    for (what, build, is_weight, got) in cases {
        let (param, expected) = if is_weight {
            (model.weight.id, vec![2, 3])
        } else {
            (model.bias.as_ref().unwrap().id, vec![3])
        };
        for clipped in [false, true] {
            let mut scaler = if clipped {
                plain.with_clip_norm(1.0).unwrap()
            } else {
                plain
            };
            let untouched = scaler;
            let check = |result: Result<StepOutcome, StepError>, path: &str| match result {
                Err(StepError::GradientShape {
                    param: p,
                    expected: e,
                    got: g,
                }) => {
                    assert_eq!((p, &e, &g), (param, &expected, &got), "{what}, {path}");
                }
                other => panic!("{what}, {path} (clipped: {clipped}): {other:?}"),
            };
            let (next, result) = scaler.step(&mut optim, 1e-2, model, build(&reference_model));
            check(result, "step");
            let x = Tensor::<TB, 2>::ones([1, 2], &Default::default());
            let scaled = scaler.scale_loss(next.forward(x).sum());
            let grads = build(&reference_model);
            let (next, result) = scaler.step_with_loss(&mut optim, 1e-2, next, grads, scaled);
            check(result, "step_with_loss");
            let shards = MultiGradientsParams {
                grads: vec![
                    (valid(&reference_model), device.to_id()),
                    (build(&reference_model), device.to_id()),
                ],
            };
            let (next, result) = scaler.step_multi(&mut optim, 1e-2, next, shards);
            check(result, "step_multi");
            let result = scaler.check(&next, build(&reference_model), None::<Tensor<TB, 1>>);
            check(result.map(|_| unreachable!("checked")), "check");
            let result = scaler.unscale_grads(&next, build(&reference_model));
            check(result.map(|_| unreachable!("unscaled")), "unscale_grads");
            model = next;
            assert_eq!(scaler, untouched, "{what}: scaler state");
        }
    }
    for (a, b) in param_data(&model).iter().zip(&before) {
        assert_eq!(a.as_bytes(), b.as_bytes(), "parameters");
    }
    assert!(
        Optimizer::<Linear<TB>, TB>::to_record(&optim).is_empty(),
        "Adam was never called"
    );

    // The same optimizer and model then step exactly as fresh ones do.
    let mut scaler = plain;
    let (model, outcome) = scaler.step(&mut optim, 1e-2, model, valid(&reference_model));
    assert!(outcome.unwrap().is_applied());
    let mut reference_scaler = plain;
    let mut reference_optim = AdamConfig::new().init();
    let grads = valid(&reference_model);
    let (reference_model, outcome) =
        reference_scaler.step(&mut reference_optim, 1e-2, reference_model, grads);
    assert!(outcome.unwrap().is_applied());
    let after = param_data(&model);
    assert_ne!(after[0].as_bytes(), before[0].as_bytes());
    for (a, b) in after.iter().zip(param_data(&reference_model)) {
        assert_eq!(a.as_bytes(), b.as_bytes());
    }
}
