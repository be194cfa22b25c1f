//! `LowPrecisionOptimizer` on Burn 0.22, on Flex: stochastic rounding unbiased and reproducible,
//! small updates kept by stochastic rounding and Kahan and lost by plain bf16, the state's
//! dtypes, a tiny model trained at bf16 through autocast and the loss scaler (a skipped step
//! changing nothing), and a run resumed from the optimizer's record repeating the
//! uninterrupted one.

mod common;

use std::collections::BTreeMap;

use burn::optim::{
    GradientsParams, ModuleOptimizer, Optimizer, RecordState, StateSink, StateSource,
};
use burn::tensor::{DType, Device, FloatDType, Tensor, TensorData};
use burn_mpric_022::optim::{
    DrawKeys, DrawSource, HeldBytes, LowPrecisionOptimizer, LowPrecisionState, MasterWeights,
    OptimizerPrecision, RoundingStream, StateDtype, device_uniforms, held_bytes, stochastic_round,
};
use burn_mpric_022::{DeviceRule, LossScaler, autocast};
use burn_mpric_core::ResolvedPolicy;
use burn_mpric_core::scale::{
    DeviceAdamConfig, DeviceAdamWConfig, DeviceSgdConfig, LossScalePreset,
};
use burn_store::burn_pack::{Reader, Scalar};
use common::{Mlp, dtypes, flex, matrix, param_bits};

/// A saved tensor: name, dtype, shape and bytes.
type Saved = (String, DType, Vec<usize>, Vec<u8>);

/// An optimizer's record as Burn saves it (burnpack), its tensors in name order: two equal
/// records can differ in bytes, as `ModuleOptimizer` writes its parameters in hash-map order.
fn saved(optim: &ModuleOptimizer) -> (Vec<Saved>, BTreeMap<String, Scalar>) {
    let reader = Reader::from_bytes(optim.into_bytes().unwrap()).unwrap();
    let scalars = reader.scalars().clone();
    let mut tensors: Vec<Saved> = reader
        .into_tensors()
        .unwrap()
        .into_iter()
        .map(|t| {
            let (name, dtype, shape, _, bytes) = t.into_parts().unwrap();
            (name, dtype, shape.as_slice().to_vec(), bytes.to_vec())
        })
        .collect();
    tensors.sort_by(|a, b| a.0.cmp(&b.0));
    (tensors, scalars)
}

fn f32s(t: Tensor<1>) -> Vec<f32> {
    t.cast(FloatDType::F32)
        .into_data()
        .try_to_vec::<f32>()
        .unwrap()
}

fn tensor(values: Vec<f32>) -> Tensor<1> {
    let len = values.len();
    Tensor::from_data(
        TensorData::new(values, [len]),
        (&Device::flex(), DType::F32),
    )
}

/// The bf16 neighbours of `x` (below, above), from bf16's bit pattern.
fn neighbours(x: f32) -> (f32, f32) {
    let truncated = f32::from_bits(x.to_bits() & 0xffff_0000);
    let next = f32::from_bits(truncated.to_bits() + 0x1_0000);
    if x >= 0.0 {
        (truncated, next)
    } else {
        (next, truncated)
    }
}

#[test]
fn the_mean_of_many_roundings_is_the_value() {
    const N: usize = 100_000;
    // Between neighbours at 1, just below a power of two (where the spacing halves), negative,
    // tiny and large.
    let values = [
        1.0 + 0.3 / 128.0,
        1.0 - 0.7 / 256.0,
        -3.0e-3 - 1.1e-6,
        1.234_567e-20,
        -7.654_321e30,
        0.9 / 128.0 + 1.0,
    ];
    for (i, &x) in values.iter().enumerate() {
        let (below, above) = neighbours(x);
        assert!(below < x && x < above, "{x} is between {below} and {above}");
        let spacing = f64::from(above - below);
        let host = tensor(RoundingStream::new(11).uniforms(i as u64, 0, N));
        let on_device = device_uniforms(&DrawKeys::new(11, i as u64, 0), N, &flex());
        for (source, uniforms) in [("host", host), ("device", on_device)] {
            let rounded = f32s(stochastic_round(tensor(vec![x; N]), uniforms));
            assert!(
                rounded.iter().all(|&r| r == below || r == above),
                "{x}: only the neighbours"
            );
            let mean = rounded.iter().map(|&r| f64::from(r)).sum::<f64>() / N as f64;
            let bias = (mean - f64::from(x)).abs() / spacing;
            assert!(
                bias < 0.01,
                "{x}, {source} draws: mean {mean}, {bias} of a spacing away"
            );
        }
    }
}

/// The device makes the numbers the core computes on the host, at every length the index is
/// built in one, two and three digits of 1024 (and past 2^15).
#[test]
fn device_draws_are_the_cores_numbers() {
    let keys = DrawKeys::new(3, 5, 8);
    for len in [1, 1023, 1024, 1025, 40_000, 1_048_577] {
        assert_eq!(
            f32s(device_uniforms(&keys, len, &flex())),
            keys.uniforms(len),
            "{len} elements"
        );
    }
}

#[test]
fn values_bf16_holds_and_non_finite_values_round_as_a_cast_does() {
    let exact = vec![
        1.0,
        -2.5,
        0.0,
        2f32.powi(127),
        f32::INFINITY,
        f32::NEG_INFINITY,
    ];
    let uniforms = tensor(vec![0.0; exact.len()]);
    assert_eq!(
        f32s(stochastic_round(tensor(exact.clone()), uniforms)),
        exact
    );
    let nan = f32s(stochastic_round(tensor(vec![f32::NAN]), tensor(vec![0.5])));
    assert!(nan[0].is_nan());
}

#[test]
fn the_same_seed_gives_the_same_bits_and_another_seed_others() {
    let x = tensor((0..4096).map(|i| 1.0 + i as f32 * 1e-5).collect());
    let round = |seed| {
        let u = tensor(RoundingStream::new(seed).uniforms(0, 0, 4096));
        stochastic_round(x.clone(), u).into_data()
    };
    assert_eq!(round(5).as_bytes(), round(5).as_bytes());
    assert_ne!(round(5).as_bytes(), round(6).as_bytes());
}

/// `steps` steps of `optim` on `len` weights starting at `start`, each with gradient `grad`.
fn run<R: DeviceRule>(
    optim: &LowPrecisionOptimizer<R>,
    lr: f64,
    start: Tensor<1>,
    grad: f32,
    steps: usize,
) -> Vec<f32> {
    let len = start.dims()[0];
    let grad = Tensor::<1>::full([len], grad, &Device::flex()).cast(FloatDType::F32);
    let mut weight = start;
    let mut state: Option<LowPrecisionState<1>> = None;
    for _ in 0..steps {
        let (w, s) = optim.step(lr, weight, grad.clone(), state);
        (weight, state) = (w, s);
    }
    f32s(weight)
}

fn modes<R: DeviceRule>(rule: R) -> [(&'static str, LowPrecisionOptimizer<R>, FloatDType); 4] {
    let with = |master| {
        LowPrecisionOptimizer::new(
            rule.clone(),
            OptimizerPrecision::new(StateDtype::F32, master),
        )
        .unwrap()
    };
    [
        ("f32", with(MasterWeights::F32), FloatDType::F32),
        // f32 master weights of a bf16 parameter: each update rounded to nearest.
        ("plain bf16", with(MasterWeights::F32), FloatDType::BF16),
        (
            "stochastic",
            with(MasterWeights::Stochastic),
            FloatDType::F32,
        ),
        ("kahan", with(MasterWeights::Kahan), FloatDType::F32),
    ]
}

fn ones(len: usize, dtype: FloatDType) -> Tensor<1> {
    Tensor::<1>::ones([len], &Device::flex()).cast(dtype)
}

fn mean(values: &[f32]) -> f64 {
    values.iter().map(|&v| f64::from(v)).sum::<f64>() / values.len() as f64
}

/// 10^4 updates of 1e-4 to weights of 1.0. Round-to-nearest bf16 loses every one (bf16's spacing
/// at 1.0 is 2^-7). Stochastic rounding is exact on average: each weight is a random walk whose
/// spread is about 0.09 here, so the mean of 1024 weights is compared (and each weight is within
/// six of its standard deviations); Kahan is deterministic and each weight is compared.
#[test]
fn small_updates_are_kept_by_stochastic_rounding_and_kahan_and_lost_by_plain_bf16() {
    const LEN: usize = 1024;
    let sgd = DeviceSgdConfig::new();
    let mut results = Vec::new();
    for (name, optim, dtype) in modes(sgd) {
        // SGD: w -= lr * g, with g = -1: +1e-4 per step.
        results.push((name, run(&optim, 1e-4, ones(LEN, dtype), -1.0, 10_000)));
    }
    let f32_result = mean(&results[0].1);
    assert!((f32_result - 2.0).abs() < 1e-3, "f32: {f32_result}");
    for (name, weights) in &results[1..] {
        match *name {
            "plain bf16" => assert!(weights.iter().all(|&w| w == 1.0), "{name}: {weights:?}"),
            "stochastic" => {
                let m = mean(weights);
                assert!(
                    (m - f32_result).abs() < 0.01 * f32_result,
                    "{name}: mean {m}"
                );
                // Binomial(10^4, 1e-4 / 2^-7) steps of 2^-7.
                let sd = (10_000.0 * 1e-4 / 128.0f64).sqrt();
                assert!(
                    weights
                        .iter()
                        .all(|&w| (f64::from(w) - f32_result).abs() < 6.0 * sd)
                );
            }
            _ => assert!(
                weights
                    .iter()
                    .all(|&w| (f64::from(w) - f32_result).abs() < 0.01 * f32_result),
                "{name}: {:?}",
                &weights[..4]
            ),
        }
    }
}

/// AdamW's decoupled weight decay with zero gradients: 10^4 steps at lr 1e-3 and decay 1e-2
/// multiply a weight by (1 - 1e-5) each, to about 0.905. Each step's change is far below half
/// of bf16's spacing under 1.0, so plain bf16 never decays.
#[test]
fn weight_decay_on_a_bf16_weight_decays() {
    const LEN: usize = 512;
    let adamw = DeviceAdamWConfig::new().with_weight_decay(1e-2);
    let expected = (1.0f64 - 1e-5).powi(10_000);
    for (name, optim, dtype) in modes(adamw) {
        let weights = run(&optim, 1e-3, ones(LEN, dtype), 0.0, 10_000);
        let m = mean(&weights);
        if name == "plain bf16" {
            assert_eq!(m, 1.0, "{name}");
        } else {
            assert!(
                (m - expected).abs() < 0.01 * expected,
                "{name}: {m} against {expected}"
            );
        }
    }
}

#[test]
fn state_is_stored_at_bf16_and_its_scalars_at_f32() {
    let precision = OptimizerPrecision::new(StateDtype::Bf16, MasterWeights::Kahan);
    let optim = LowPrecisionOptimizer::new(DeviceAdamWConfig::new(), precision).unwrap();
    let weight = Tensor::<2>::ones([3, 5], &Device::flex()).cast(FloatDType::F32);
    let grad = weight.clone().mul_scalar(0.5);
    let (weight, state) = optim.step(1e-2, weight, grad, None);
    let state = state.unwrap();
    assert_eq!(weight.dtype(), DType::BF16);
    assert_eq!(weight.dims(), [3, 5]);
    use DType::{BF16, F32};
    let slots: Vec<_> = state.slots.iter().map(|s| (s.dtype(), s.dims())).collect();
    assert_eq!(slots, vec![(BF16, [3, 5]), (BF16, [3, 5])]);
    let scalars: Vec<_> = state
        .scalars
        .iter()
        .map(|s| (s.dtype(), s.dims()))
        .collect();
    assert_eq!(scalars, vec![(F32, [1]), (F32, [1])]);
    assert_eq!(
        state.compensation.as_ref().map(|c| (c.dtype(), c.dims())),
        Some((BF16, [3, 5]))
    );
    // Moments 2 x 2 bytes, compensation 2, the two f32 powers.
    assert_eq!(state.bytes(), 15 * 6 + 8);
    assert_eq!((state.stream, state.draws), (0, 1));
}

/// One step of the usual training path: the loss at the output dtype, the loss scaler around
/// the optimizer; the outcome's loss is the unscaled loss before the step.
fn train_step(
    model: Mlp,
    x: Tensor<2>,
    y: &Tensor<2>,
    policy: &ResolvedPolicy,
    optim: &mut ModuleOptimizer,
    scaler: &mut LossScaler,
) -> (Mlp, burn_mpric_core::scale::StepOutcome) {
    let scaled = scaler.scale_loss(model.loss(x, y.clone(), policy));
    let grads = GradientsParams::from_grads(scaled.backward(), &model);
    let (model, outcome) = scaler.step_with_loss(optim, 1e-2, model, grads, scaled);
    (model, outcome.unwrap())
}

/// A Linear -> LayerNorm -> GELU -> Linear model under `mixed_bf16` autocast, its parameters
/// stored at bf16 and Adam's moments at bf16, trained by stochastic rounding through the loss
/// scaler: the loss goes down, the parameters stay bf16, the model and the state hold the
/// bytes the core's accounting says, and a step whose gradients are NaN is skipped with the
/// parameters and the optimizer's state (moments, powers, rounding positions) bit-identical.
#[test]
fn a_tiny_model_trains_at_bf16_and_a_skipped_step_changes_nothing() {
    let device = flex();
    let policy: ResolvedPolicy = "mixed_bf16".parse().unwrap();
    let precision =
        OptimizerPrecision::new(StateDtype::Bf16, MasterWeights::Stochastic).with_seed(7);
    let lp = LowPrecisionOptimizer::new(DeviceAdamConfig::new(), precision).unwrap();
    let mut model = lp.store_params(autocast(Mlp::new(8, 16, 4, &device), policy).unwrap());
    let all_bf16 = |model: &Mlp| {
        dtypes(model)
            .iter()
            .all(|&(stored, used)| stored == DType::BF16 && used == DType::BF16)
    };
    assert!(all_bf16(&model), "{:?}", dtypes(&model));
    let mut optim = lp.init();
    let mut scaler = LossScaler::for_policy(LossScalePreset::Auto, &policy).unwrap();
    let (x, y) = (matrix(11, 8, 8, &device), matrix(12, 8, 4, &device));

    let mut losses = Vec::new();
    for _ in 0..20 {
        let (next, outcome) = train_step(model, x.clone(), &y, &policy, &mut optim, &mut scaler);
        model = next;
        assert!(outcome.is_applied(), "{outcome:?}");
        losses.push(outcome.loss.unwrap());
    }
    let (first, last) = (losses[0], losses[losses.len() - 1]);
    assert!(last < 0.25 * first, "losses {losses:?}");
    assert!(all_bf16(&model), "{:?}", dtypes(&model));

    // Input 8 x 16 + 16, norm 16 + 16, output 16 x 4 + 4: 244 elements in 6 tensors, each
    // with two f32 powers of the betas beside its moments.
    let per = lp.bytes_per_parameter();
    let held = held_bytes(&model, &optim);
    let expected = HeldBytes {
        params: 244 * per.param,
        state: 244 * per.state + 6 * 2 * 4,
        elements: 244,
    };
    assert_eq!(held, expected);

    let params = param_bits(&model);
    let state = saved(&optim);
    let mut data = x.to_data().convert::<f32>().try_to_vec::<f32>().unwrap();
    data[5] = f32::NAN;
    let poisoned = Tensor::<2>::from_data(TensorData::new(data, [8, 8]), &device);
    let (next, outcome) = train_step(model, poisoned, &y, &policy, &mut optim, &mut scaler);
    model = next;
    assert!(outcome.is_skipped(), "{outcome:?}");
    assert!(param_bits(&model) == params, "parameters changed");
    assert!(saved(&optim) == state, "optimizer state changed");

    let (model, outcome) = train_step(model, x, &y, &policy, &mut optim, &mut scaler);
    assert!(outcome.is_applied(), "{outcome:?}");
    assert_ne!(param_bits(&model), params);
    assert!(all_bf16(&model));
}

/// Kahan with SGD momentum at bf16: six steps in one go, and three steps, the optimizer saved
/// (burnpack bytes), a new optimizer loaded from them and three more steps, end bit for bit
/// alike, the state at the same dtypes. The three module optimizers come from one
/// `LowPrecisionOptimizer`: each `init` numbers its rounding streams from 0.
#[test]
fn a_run_resumed_from_the_optimizer_record_repeats_the_uninterrupted_one() {
    let device = flex();
    let policy: ResolvedPolicy = "mixed_bf16".parse().unwrap();
    let rule = DeviceSgdConfig::new().with_momentum(0.9, 0.0, false);
    for draws in [DrawSource::Host, DrawSource::Device] {
        let precision = OptimizerPrecision::new(StateDtype::Bf16, MasterWeights::Kahan)
            .with_seed(3)
            .with_draws(draws);
        resumed_run_repeats_the_uninterrupted_one(&device, policy, rule, precision);
    }
}

fn resumed_run_repeats_the_uninterrupted_one(
    device: &Device,
    policy: ResolvedPolicy,
    rule: DeviceSgdConfig,
    precision: OptimizerPrecision,
) {
    let device = device.clone();
    let lp = LowPrecisionOptimizer::new(rule, precision).unwrap();
    let start = lp.store_params(autocast(Mlp::new(8, 16, 4, &device), policy).unwrap());
    let (x, y) = (matrix(21, 8, 8, &device), matrix(22, 8, 4, &device));
    let steps = |mut model: Mlp, optim: &mut ModuleOptimizer, n: usize| {
        for _ in 0..n {
            let loss = model.loss(x.clone(), y.clone(), &policy);
            let grads = GradientsParams::from_grads(loss.backward(), &model);
            model = optim.step(1e-2, model, grads);
        }
        model
    };

    let mut uninterrupted = lp.init();
    let straight = steps(start.clone(), &mut uninterrupted, 6);

    let mut first = lp.init();
    let halfway = steps(start, &mut first, 3);
    let bytes = first.into_bytes().unwrap();
    let mut resumed = lp.init().from_bytes(bytes).unwrap();
    let resumed_model = steps(halfway, &mut resumed, 3);

    assert!(param_bits(&resumed_model) == param_bits(&straight));
    assert_eq!(
        held_bytes(&resumed_model, &resumed),
        held_bytes(&straight, &uninterrupted)
    );
    let (resumed, uninterrupted) = (saved(&resumed), saved(&uninterrupted));
    assert_eq!(
        resumed.1, uninterrupted.1,
        "moments, powers or positions differ"
    );
    assert!(resumed.0 == uninterrupted.0, "the state's tensors differ");
    // Each parameter's moment and compensation stay bf16 through the save and the load.
    assert!(resumed.0.iter().all(|(name, dtype, _, _)| {
        *dtype
            == if name.contains(".scalars.") {
                DType::F32
            } else {
                DType::BF16
            }
    }));
}

/// The state's record names its leaves as Burn's derive would (`slots.len`, `slots.0`, ...,
/// `compensation`, `stream`, `draws`, `drawn_on_device`), brings each tensor back at the dtype
/// it was saved at, reads a record from before `drawn_on_device` as a host stream's, and is
/// refused when another leaf is missing.
#[test]
fn the_state_record_round_trips_at_its_dtypes() {
    let precision = OptimizerPrecision::new(StateDtype::Bf16, MasterWeights::Kahan);
    let optim = LowPrecisionOptimizer::new(DeviceAdamConfig::new(), precision).unwrap();
    let weight = tensor(vec![1.0, 2.0, 3.0]);
    let (_, state) = optim.step(1e-2, weight.clone(), weight.mul_scalar(0.1), None);
    let state = state.unwrap();

    let mut sink = StateSink::default();
    state.state_flatten("7", &mut sink);
    let mut names: Vec<&str> = sink.tensors.iter().map(|(n, _)| n.as_str()).collect();
    names.extend(sink.scalars.iter().map(|(n, _)| n.as_str()));
    names.sort_unstable();
    let expected = [
        "7.compensation",
        "7.drawn_on_device",
        "7.draws",
        "7.scalars.0",
        "7.scalars.1",
        "7.scalars.len",
        "7.slots.0",
        "7.slots.1",
        "7.slots.len",
        "7.stream",
    ];
    assert_eq!(names, expected);

    // A record saved before the draws' source was recorded loads as a host stream's.
    let mut before = StateSource::new(
        sink.scalars
            .iter()
            .filter(|(name, _)| name.as_str() != "7.drawn_on_device")
            .cloned()
            .collect(),
    );
    for (name, data) in &sink.tensors {
        before.insert_tensor(name.clone(), data.clone());
    }
    let old = LowPrecisionState::<1>::state_unflatten("7", &mut before, &Device::flex()).unwrap();
    assert_eq!(
        (old.stream, old.draws, old.drawn_on_device),
        (state.stream, state.draws, None)
    );

    let mut source = StateSource::new(sink.scalars.into_iter().collect());
    for (name, data) in sink.tensors {
        source.insert_tensor(name, data);
    }
    let back = LowPrecisionState::<1>::state_unflatten("7", &mut source, &Device::flex()).unwrap();
    let view = |s: &LowPrecisionState<1>| {
        let tensors: Vec<_> = s
            .slots
            .iter()
            .chain(&s.scalars)
            .chain(&s.compensation)
            .map(|t| (t.dtype(), t.to_data().as_bytes().to_vec()))
            .collect();
        (tensors, s.stream, s.draws, s.drawn_on_device)
    };
    assert!(view(&back) == view(&state));
    // Flex draws on the host unless told otherwise.
    assert_eq!(back.drawn_on_device, Some(false));
    assert_eq!(back.bytes(), 3 * 6 + 8);

    let mut empty = StateSource::new(BTreeMap::new());
    assert!(LowPrecisionState::<1>::state_unflatten("7", &mut empty, &Device::flex()).is_none());
}
