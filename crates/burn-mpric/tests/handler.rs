//! `PrecisionHandler` against the defects of eformer's `PrecisionHandler` (gradients returned
//! scaled, the loss reported with the wrong scale, a default configuration that fails on its
//! first step) and eformer's cast API.

use burn::backend::{Autodiff, Flex};
use burn::module::{Module, Param};
use burn::nn::LinearConfig;
use burn::optim::{AdamConfig, SgdConfig};
use burn::tensor::backend::Backend;
use burn::tensor::{Bool, DType, FloatDType, Int, Tensor};
use burn_mpric::scale::{LossScaleConfig, LossScaler};
use burn_mpric::{Castable, ModuleParams, PrecisionHandler};

type B = Autodiff<Flex>;

#[derive(Module, Debug)]
struct W<B: Backend> {
    w: Param<Tensor<B, 1>>,
}

fn model() -> W<B> {
    W {
        w: Param::from_tensor(Tensor::from_floats([1.0, 2.0], &Default::default())),
    }
}

fn grads_of(step: &burn_mpric::TrainStepOutput, model: &W<B>) -> Vec<f32> {
    step.grads
        .get::<Flex, 1>(model.w.id)
        .unwrap()
        .into_data()
        .to_vec::<f32>()
        .unwrap()
}

#[test]
fn loss_and_grads_are_right_on_every_call_including_growth_and_backoff() {
    // S = 1024, growth interval 2: call 1 grows the scale (eformer reports loss 2.5 there),
    // call 2 overflows and backs off (eformer divides grads by the new scale).
    let scaler = LossScaler::dynamic(
        LossScaleConfig::new()
            .with_initial_scale(1024.0)
            .with_growth_interval(2),
    )
    .unwrap();
    let mut handler = PrecisionHandler::from_text("p=f32,c=f16,o=f32")
        .unwrap()
        .with_scaler(scaler);
    let model = model();
    let loss_fn = |m: &W<B>| m.w.val().powf_scalar(2.0).sum();
    // sqrt(0 * w) is 0 forward (the loss stays 5.0) but its gradient is NaN.
    let overflowing = |m: &W<B>| loss_fn(m) + (m.w.val() * 0.0).sqrt().sum();

    let expected_scales = [(1024.0, 1024.0), (1024.0, 2048.0)];
    for (call, (used, next)) in expected_scales.into_iter().enumerate() {
        let step = handler.train_step(&model, loss_fn).unwrap();
        assert_eq!(step.outcome.loss, Some(5.0), "call {call}");
        assert_eq!(grads_of(&step, &model), vec![2.0, 4.0], "call {call}");
        assert!(step.outcome.is_applied());
        assert_eq!(
            (step.outcome.scale_used, step.outcome.next_scale),
            (used, next)
        );
    }
    let step = handler.train_step(&model, overflowing).unwrap();
    assert_eq!(step.outcome.loss, Some(5.0), "backoff call");
    assert!(step.outcome.is_skipped());
    assert_eq!(
        (step.outcome.scale_used, step.outcome.next_scale),
        (2048.0, 1024.0)
    );
    let before = model.w.val().into_data();
    let model = handler.apply(&mut SgdConfig::new().init(), 0.1, model, step);
    assert_eq!(
        model.w.val().into_data(),
        before,
        "a skipped step is not applied"
    );

    let step = handler.train_step(&model, loss_fn).unwrap();
    assert_eq!(
        (step.outcome.loss, grads_of(&step, &model)),
        (Some(5.0), vec![2.0, 4.0])
    );
    assert_eq!(handler.scaler().stats().skipped, 1);
}

#[test]
fn the_default_configuration_works_on_its_first_step() {
    let mut handler = PrecisionHandler::from_text("p=f32,c=f16,o=f32").unwrap();
    assert_eq!(handler.scaler().scale(), 32768.0);
    let model = model();
    let step = handler
        .train_step(&model, |m| m.w.val().powf_scalar(2.0).sum())
        .unwrap();
    assert!(step.outcome.is_applied());
    assert_eq!(step.outcome.loss, Some(5.0));
    assert_eq!(grads_of(&step, &model), vec![2.0, 4.0]);
    let model = handler.apply(&mut AdamConfig::new().init(), 0.5, model, step);
    let w = model.w.val().into_data().to_vec::<f32>().unwrap();
    assert!(w[0] < 1.0 && w[1] < 2.0, "the step was applied: {w:?}");
}

#[test]
fn gradients_come_back_at_the_param_dtype() {
    // Under MixedPrecision the backward runs in f16; the handler hands back f32 gradients.
    use burn_mpric::{MixedPrecision, Policy};
    type Mp = Autodiff<MixedPrecision<Flex>>;
    let device =
        MixedPrecision::<Flex>::device(Default::default(), "mixed_f16".parse::<Policy>().unwrap())
            .unwrap();
    let linear = LinearConfig::new(4, 2).init::<Mp>(&device);
    let x = Tensor::<Mp, 2>::ones([3, 4], &device);
    let scaler = LossScaler::dynamic(LossScaleConfig::new().with_initial_scale(1024.0)).unwrap();
    let mut handler = PrecisionHandler::new(device.policy()).with_scaler(scaler);
    let step = handler
        .train_step(&linear, |m| m.forward(x.clone()).sum())
        .unwrap();
    let grad = step
        .grads
        .get::<MixedPrecision<Flex>, 2>(linear.weight.id)
        .unwrap();
    assert_eq!(grad.dtype(), DType::F32);
    assert!(step.outcome.is_applied());
    assert_eq!(grad.into_data().to_vec::<f32>().unwrap(), vec![3.0; 8]);
}

#[test]
fn casts_walk_tensors_tuples_vecs_and_modules_leaving_ints_and_bools() {
    let handler = PrecisionHandler::from_text("p=f32,c=bf16,o=f16").unwrap();
    let device = Default::default();
    let x = Tensor::<Flex, 2>::ones([2, 2], &device);
    let ids = Tensor::<Flex, 1, Int>::from_ints([1, 2], &device);
    let mask = Tensor::<Flex, 1, Bool>::from_bool([true, false].into(), &device);
    let int_dtype = ids.dtype();
    let (x, ids, mask, v) =
        handler.cast_for_compute((x, ids, mask, vec![Tensor::<Flex, 1>::ones([1], &device)]));
    assert_eq!(x.dtype(), DType::BF16);
    assert_eq!(v[0].dtype(), DType::BF16);
    assert_eq!(ids.dtype(), int_dtype);
    assert_eq!(
        mask.dtype(),
        Tensor::<Flex, 1, Bool>::empty([1], &device).dtype()
    );
    assert_eq!(
        handler.cast_for_output(Some(x)).unwrap().dtype(),
        DType::F16
    );

    let linear = LinearConfig::new(3, 2).init::<B>(&Default::default());
    let ModuleParams(compute) = handler.cast_for_compute(ModuleParams(linear));
    assert_eq!(compute.weight.val().dtype(), DType::BF16);
    assert!(
        compute.weight.val().is_require_grad(),
        "params stay trainable"
    );
    let params = handler.cast_params(compute);
    assert_eq!(params.weight.val().dtype(), DType::F32);
    assert_eq!(params.bias.as_ref().unwrap().val().dtype(), DType::F32);
    assert!(params.weight.val().is_require_grad());

    // A module cast to f16 by hand comes back to f32 params.
    let ModuleParams(half) = ModuleParams(params).cast_floats(FloatDType::F16);
    assert_eq!(half.weight.val().dtype(), DType::F16);
    assert_eq!(handler.cast_params(half).weight.val().dtype(), DType::F32);
}

#[test]
fn inference_wrapper_casts_inputs_and_outputs() {
    let handler = PrecisionHandler::from_text("p=f32,c=f16,o=f32").unwrap();
    let seen = std::cell::Cell::new(None);
    let f = handler.inference(|(x, ids): (Tensor<Flex, 1>, Tensor<Flex, 1, Int>)| {
        seen.set(Some(x.dtype()));
        (x.clone() * 2.0, ids)
    });
    let device = Default::default();
    let (y, ids) = f((
        Tensor::from_floats([1.5, 2.0], &device),
        Tensor::from_ints([3, 4], &device),
    ));
    assert_eq!(seen.get(), Some(DType::F16));
    assert_eq!(y.dtype(), DType::F32);
    assert_eq!(y.into_data().to_vec::<f32>().unwrap(), vec![3.0, 4.0]);
    assert_eq!(
        ids.into_data().convert::<i64>().to_vec::<i64>().unwrap(),
        vec![3, 4]
    );
}

#[test]
fn casts_walk_arrays_maps_and_long_tuples() {
    use std::collections::{BTreeMap, HashMap};

    let device = Default::default();
    let f = || Tensor::<Flex, 1>::ones([2], &device);
    let half = FloatDType::F16;

    let array = [f(), f(), f()].cast_floats(half);
    assert!(array.iter().all(|t| t.dtype() == DType::F16));

    let hashed: HashMap<&str, Tensor<Flex, 1>> = [("a", f()), ("b", f())].into();
    let hashed = hashed.cast_floats(half);
    assert_eq!(hashed.len(), 2);
    assert!(hashed.values().all(|t| t.dtype() == DType::F16));

    let ordered: BTreeMap<u8, Vec<Tensor<Flex, 1>>> = [(1, vec![f()]), (2, vec![f(), f()])].into();
    let ordered = ordered.cast_floats(half);
    assert_eq!(ordered[&2].len(), 2);
    assert!(ordered.values().flatten().all(|t| t.dtype() == DType::F16));

    let ids = Tensor::<Flex, 1, Int>::ones([2], &device);
    let twelve = (
        f(),
        f(),
        f(),
        f(),
        f(),
        f(),
        f(),
        f(),
        f(),
        f(),
        f(),
        ids.clone(),
    );
    let twelve = twelve.cast_floats(half);
    assert_eq!(
        (twelve.0.dtype(), twelve.10.dtype()),
        (DType::F16, DType::F16)
    );
    assert_eq!(twelve.11.dtype(), ids.dtype());
}

#[test]
fn the_loss_scale_is_chosen_next_to_the_policy() {
    use burn_mpric::scale::LossScalePreset;

    let policy = "p=f32,c=f16,o=f32".parse().unwrap();
    let torch = PrecisionHandler::with_loss_scale(policy, LossScalePreset::Torch).unwrap();
    assert_eq!(torch.scaler().scale(), 65536.0);
    let config = LossScaleConfig::new().with_initial_scale(1024.0);
    let configured = PrecisionHandler::with_loss_scale(policy, config).unwrap();
    assert_eq!(configured.scaler().scale(), 1024.0);
    let fixed = PrecisionHandler::from_texts("mixed_bf16", "static:64").unwrap();
    assert_eq!(fixed.scaler().scale(), 64.0);
    // `auto` follows the policy: dynamic at 2^15 for f16 compute, none for bf16.
    assert_eq!(
        PrecisionHandler::from_texts("mixed_f16", "auto")
            .unwrap()
            .scaler()
            .scale(),
        32768.0
    );
    assert_eq!(
        PrecisionHandler::from_texts("mixed_bf16", "auto")
            .unwrap()
            .scaler()
            .scale(),
        1.0
    );
    // Bad input is an error naming what is wrong, not a panic.
    let err =
        PrecisionHandler::with_loss_scale(policy, LossScaleConfig::new().with_growth_factor(0.5))
            .unwrap_err();
    assert!(err.to_string().contains("growth factor"), "{err}");
    assert!(PrecisionHandler::from_texts("mixed_f16", "static:zero").is_err());
}

#[test]
fn a_half_model_keeps_its_dtype_through_apply() {
    // Pure f16 on the decorator: the parameters are made at f16, and Adam's second moment (a
    // square, which runs at f32) is f32, so its update hands back f32 parameters. The
    // handler's apply, like the scaler's step, casts them back.
    use burn_mpric::MixedPrecision;
    type Mp = Autodiff<MixedPrecision<Flex>>;
    let device = MixedPrecision::<Flex>::device(
        Default::default(),
        "pure_f16".parse::<burn_mpric::Policy>().unwrap(),
    )
    .unwrap();
    let model = LinearConfig::new(3, 2).init::<Mp>(&device);
    assert_eq!(model.weight.val().dtype(), DType::F16);
    let before = model.weight.val().cast(FloatDType::F32).into_data();
    // No scaling: at 2^15 the f16 gradients of this sum would overflow and skip the step.
    let mut handler = PrecisionHandler::from_device(&device).with_scaler(LossScaler::noop());
    let x = Tensor::<Mp, 2>::ones([4, 3], &device);
    let step = handler
        .train_step(&model, |m| m.forward(x.clone()).sum())
        .unwrap();
    assert!(step.outcome.is_applied());
    let model = handler.apply(&mut AdamConfig::new().init(), 1e-2, model, step);
    assert_eq!(model.weight.val().dtype(), DType::F16);
    assert_eq!(model.bias.as_ref().unwrap().val().dtype(), DType::F16);
    assert_ne!(model.weight.val().cast(FloatDType::F32).into_data(), before);
}
