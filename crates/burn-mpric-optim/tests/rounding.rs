//! Stochastic rounding and the compensated update, on Flex: unbiased, reproducible, and neither
//! loses the small updates that round-to-nearest bf16 loses; with its uniforms drawn on the host
//! or made on the device, the latter uploading nothing.

use burn::backend::Flex;
use burn::optim::SimpleOptimizer;
use burn::tensor::{FloatDType, Tensor, TensorData};
use burn_mpric_optim::{
    DrawKeys, DrawSource, LowPrecisionOptimizer, LowPrecisionState, MasterWeights,
    OptimizerPrecision, RoundingStream, StateDtype, device_uniforms, stochastic_round,
};
use burn_mpric_scale::{DeviceAdamWConfig, DeviceRule, DeviceSgdConfig};

fn f32s(t: Tensor<Flex, 1>) -> Vec<f32> {
    t.cast(FloatDType::F32).into_data().to_vec::<f32>().unwrap()
}

fn tensor(values: Vec<f32>) -> Tensor<Flex, 1> {
    let len = values.len();
    Tensor::from_data(TensorData::new(values, [len]), &Default::default())
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
        let on_device =
            device_uniforms::<Flex>(&DrawKeys::new(11, i as u64, 0), N, &Default::default());
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
/// built in one, two and three digits of 1024 (and past 2^15, where the permutation's high
/// half starts to change).
#[test]
fn device_draws_are_the_cores_numbers() {
    let keys = DrawKeys::new(3, 5, 8);
    for len in [1, 1023, 1024, 1025, 40_000, 1_048_577] {
        let made = device_uniforms::<Flex>(&keys, len, &Default::default());
        assert_eq!(f32s(made), keys.uniforms(len), "{len} elements");
    }
}

/// A step with device draws makes its uniforms without a single upload; with host draws it
/// uploads them (one tensor per parameter and step). The precision's choice is kept in the
/// parameter's state, so a resumed run draws as it did.
#[test]
fn device_draws_upload_nothing_and_are_kept_in_the_state() {
    type I = burn_mpric::instrument::Instrumented<Flex>;
    let device = Default::default();
    for (draws, uploads, on_device) in [
        (DrawSource::Host, 1, false),
        (DrawSource::Device, 0, true),
        // Flex's device is the host's memory: left to the backend, it draws on the host.
        (DrawSource::Auto, 1, false),
    ] {
        let precision =
            OptimizerPrecision::new(StateDtype::Bf16, MasterWeights::Stochastic).with_draws(draws);
        let optim = LowPrecisionOptimizer::new(DeviceAdamWConfig::new(), precision).unwrap();
        let weight = Tensor::<I, 1>::ones([5000], &device).cast(FloatDType::BF16);
        let grad = Tensor::<I, 1>::full([5000], 0.25, &device);
        let (weight, state) = optim.step(1e-3, weight, grad.clone(), None);
        assert_eq!(state.as_ref().unwrap().drawn_on_device, Some(on_device));
        let ((), log) = burn_mpric::instrument::record(|| {
            let (_, state) = optim.step(1e-3, weight, grad, state);
            assert_eq!(state.unwrap().drawn_on_device, Some(on_device));
        });
        let made = log.iter().filter(|op| op.op.ends_with("from_data")).count();
        assert_eq!(
            made,
            uploads,
            "{draws}: {:?}",
            log.iter().map(|op| op.op).collect::<Vec<_>>()
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
    start: Tensor<Flex, 1>,
    grad: f32,
    steps: usize,
) -> Vec<f32> {
    let len = start.dims()[0];
    let grad = Tensor::<Flex, 1>::full([len], grad, &Default::default());
    let mut weight = start;
    let mut state: Option<LowPrecisionState<Flex, 1>> = None;
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
        let start = Tensor::<Flex, 1>::ones([LEN], &Default::default()).cast(dtype);
        // SGD: w -= lr * g, with g = -1: +1e-4 per step.
        results.push((name, run(&optim, 1e-4, start, -1.0, 10_000)));
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
        let start = Tensor::<Flex, 1>::ones([LEN], &Default::default()).cast(dtype);
        let weights = run(&optim, 1e-3, start, 0.0, 10_000);
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
    let weight = Tensor::<Flex, 2>::ones([3, 5], &Default::default());
    let grad = weight.clone().mul_scalar(0.5);
    let (weight, state) = optim.step(1e-2, weight, grad, None);
    let state = state.unwrap();
    assert_eq!(weight.dtype(), burn::tensor::DType::BF16);
    use burn::tensor::DType::{BF16, F32};
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
}

/// Under a pure bf16 policy (the device's default float is bf16) the rounding's draws are still
/// f32: a weight 0.999 of a spacing above 1.0 rounds up with probability 0.999, where draws
/// stored at bf16 (spacing 2^-8 below 1) would round up only below 0.996.
#[test]
fn the_draws_stay_f32_under_a_pure_bf16_policy() {
    use burn_mpric::{MixedPrecision, Policy};
    type Mp = MixedPrecision<Flex>;
    const N: usize = 100_000;
    let device = Mp::device(Default::default(), "pure_bf16".parse::<Policy>().unwrap()).unwrap();
    let precision = OptimizerPrecision::new(StateDtype::F32, MasterWeights::Stochastic);
    let optim = LowPrecisionOptimizer::new(DeviceSgdConfig::new(), precision).unwrap();
    let spacing = 1.0 / 128.0;
    let weight = Tensor::<Mp, 1>::ones([N], &device);
    // The gradient is bf16 here: it carries the spacing, the learning rate the 0.999.
    let grad = Tensor::<Mp, 1>::full([N], -spacing, &device);
    let (weight, _) = optim.step(0.999, weight, grad, None);
    let values = weight
        .cast(FloatDType::F32)
        .into_data()
        .to_vec::<f32>()
        .unwrap();
    let up = values.iter().filter(|&&v| v > 1.0).count() as f64 / N as f64;
    // The share's standard deviation is 1e-4.
    assert!((up - 0.999).abs() < 6e-4, "rounded up {up}");
}

/// A state saved before the draws' source was recorded, as the `mpric` CLI's checkpoints and
/// Burn's named recorders keep it (fields by name), loads with the source unset: drawn on the
/// host, as it was.
#[test]
fn a_state_saved_before_the_draws_source_loads_as_a_host_stream() {
    use burn::record::{FullPrecisionSettings, NamedMpkBytesRecorder, Record, Recorder};
    use burn::tensor::backend::Backend;

    /// The state's fields before `drawn_on_device`.
    #[derive(Record)]
    struct Before<B: Backend> {
        slots: Vec<Tensor<B, 1>>,
        scalars: Vec<Tensor<B, 1>>,
        compensation: Option<Tensor<B, 1>>,
        stream: u64,
        draws: u64,
    }
    let recorder = NamedMpkBytesRecorder::<FullPrecisionSettings>::new();
    let before = Before::<Flex> {
        slots: vec![tensor(vec![0.5, 0.25])],
        scalars: vec![tensor(vec![0.9])],
        compensation: None,
        stream: 4,
        draws: 12,
    };
    let bytes = Recorder::<Flex>::record(&recorder, before, ()).unwrap();
    let state: LowPrecisionState<Flex, 1> =
        Recorder::<Flex>::load(&recorder, bytes, &Default::default()).unwrap();
    assert_eq!(
        (state.stream, state.draws, state.drawn_on_device),
        (4, 12, None)
    );
    assert_eq!(f32s(state.slots[0].clone()), vec![0.5, 0.25]);
}
