//! Scaler state on disk: resume with the identical trajectory (PyTorch's `GradScaler`
//! `state_dict` round trip, as a save/load analogue), bit-exact round trips, and typed errors (never an abort) for corrupt, foreign,
//! huge or mismatched files.

mod common;

use burn::backend::Flex;
use burn::module::Module;
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::record::{
    BinFileRecorder, DefaultFileRecorder, FileRecorder, FullPrecisionSettings,
    PrettyJsonFileRecorder, Recorder,
};
use burn::tensor::Tensor;
use burn_mpric_scale::{
    LossScaleConfig, LossScaleError, LossScaleKind, LossScaler, LossScalerRecord,
    MAX_STATE_FILE_BYTES, StateError, UpdateRule,
};
use common::{Normal, TB, TwoLayer, batches, param_data, temp_path};

const STEPS: usize = 8;
const SAVE_AFTER: usize = 4;
const POISONED: [usize; 3] = [1, 5, 6];

type Data = Vec<(Tensor<TB, 2>, Tensor<TB, 2>)>;

/// What a step looked like from the outside.
#[derive(Debug, PartialEq)]
struct Seen {
    applied: bool,
    scale_used: f32,
    next_scale: f32,
    counter: u32,
    hysteresis_left: u32,
    steps: u64,
    skipped: u64,
    loss: Option<f32>,
    grad_norm: Option<f32>,
}

fn new_scaler() -> LossScaler {
    let config = LossScaleConfig::new()
        .with_initial_scale(1024.0)
        .with_growth_interval(2)
        .with_hysteresis(2)
        .with_rule(UpdateRule::DeepSpeed {
            consecutive_hysteresis: false,
        });
    LossScaler::dynamic(config)
        .unwrap()
        .with_clip_norm(5.0)
        .unwrap()
}

fn train_step<O: Optimizer<TwoLayer<TB>, TB>>(
    model: TwoLayer<TB>,
    optim: &mut O,
    scaler: &mut LossScaler,
    data: &Data,
    i: usize,
) -> (TwoLayer<TB>, Seen) {
    let (x, y) = &data[i];
    let scaled = scaler.scale_loss(model.mse(x.clone(), y.clone()));
    let mut grads = GradientsParams::from_grads(scaled.backward(), &model);
    if POISONED.contains(&i) {
        let w = &model.l1.weight;
        grads.register(
            w.id,
            Tensor::<Flex, 2>::full(w.shape(), f32::INFINITY, &Default::default()),
        );
    }
    let (model, outcome) = scaler.step_with_loss(optim, 1e-2, model, grads, scaled);
    let outcome = outcome.unwrap();
    let dynamic = scaler.loss_scale().as_dynamic().unwrap();
    let seen = Seen {
        applied: outcome.is_applied(),
        scale_used: outcome.scale_used,
        next_scale: outcome.next_scale,
        counter: dynamic.counter(),
        hysteresis_left: dynamic.hysteresis_left(),
        steps: outcome.stats.steps,
        skipped: outcome.stats.skipped,
        loss: outcome.loss,
        grad_norm: outcome.grad_norm,
    };
    (model, seen)
}

fn resume_with<R: FileRecorder<TB>>(recorder: R, name: &str) {
    let device = Default::default();
    let data = batches::<TB>(STEPS, 8, 21, &device);
    let initial = TwoLayer::<TB>::new(8, &device);

    // Uninterrupted run.
    let mut model = initial.clone();
    let mut optim = AdamConfig::new().init();
    let mut scaler = new_scaler();
    let mut expected = Vec::new();
    for i in 0..STEPS {
        let (next, seen) = train_step(model, &mut optim, &mut scaler, &data, i);
        model = next;
        expected.push(seen);
    }
    assert!(expected.iter().any(|s| !s.applied) && expected.iter().any(|s| s.applied));
    assert!(
        expected
            .windows(2)
            .any(|w| w[0].next_scale != w[1].next_scale)
    );
    let expected_params = param_data(&model);

    // Interrupted run: save everything after SAVE_AFTER steps, reload into fresh values.
    let mut model = initial;
    let mut optim = AdamConfig::new().init();
    let mut scaler = new_scaler();
    let mut seen_all = Vec::new();
    for i in 0..SAVE_AFTER {
        let (next, seen) = train_step(model, &mut optim, &mut scaler, &data, i);
        model = next;
        seen_all.push(seen);
    }
    let (scaler_path, model_path, optim_path) = (
        temp_path(&format!("{name}-scaler")),
        temp_path(&format!("{name}-model")),
        temp_path(&format!("{name}-optim")),
    );
    scaler.save_file(&scaler_path).unwrap();
    model.save_file(model_path.clone(), &recorder).unwrap();
    Recorder::<TB>::record(&recorder, optim.to_record(), optim_path.clone()).unwrap();
    drop((optim, scaler));

    let mut scaler = LossScaler::load_file(&scaler_path).unwrap();
    let mut model = TwoLayer::<TB>::new(8, &device)
        .load_file(model_path.clone(), &recorder, &device)
        .unwrap();
    let mut optim = AdamConfig::new().init::<TB, TwoLayer<TB>>();
    optim =
        optim.load_record(Recorder::<TB>::load(&recorder, optim_path.clone(), &device).unwrap());
    for i in SAVE_AFTER..STEPS {
        let (next, seen) = train_step(model, &mut optim, &mut scaler, &data, i);
        model = next;
        seen_all.push(seen);
    }
    assert_eq!(seen_all, expected);
    for (a, b) in param_data(&model).iter().zip(&expected_params) {
        assert_eq!(a.as_bytes(), b.as_bytes());
    }
    let ext = <R as FileRecorder<TB>>::file_extension();
    std::fs::remove_file(scaler_path).unwrap();
    for path in [model_path, optim_path] {
        std::fs::remove_file(path.with_extension(ext)).unwrap();
    }
}

#[test]
fn resume_from_a_file_gives_the_identical_trajectory() {
    resume_with(DefaultFileRecorder::<FullPrecisionSettings>::new(), "mpk");
    resume_with(BinFileRecorder::<FullPrecisionSettings>::new(), "bin");
}

#[test]
fn f17_loading_a_saved_state_replaces_every_field() {
    let s0 = LossScaler::dynamic(
        LossScaleConfig::torch()
            .with_initial_scale(3.0)
            .with_growth_factor(4.0)
            .with_backoff_factor(0.5)
            .with_growth_interval(2),
    )
    .unwrap();
    let mut s1 = LossScaler::dynamic(
        LossScaleConfig::torch()
            .with_initial_scale(6.0)
            .with_growth_factor(7.0)
            .with_backoff_factor(0.8)
            .with_growth_interval(10),
    )
    .unwrap();
    for _ in 0..7 {
        s1.update(true);
    }
    assert_eq!(s1.loss_scale().as_dynamic().unwrap().counter(), 7);

    let path = temp_path("f17");
    s0.save_file(&path).unwrap();
    s1 = LossScaler::load_file(&path).unwrap();
    let d = s1.loss_scale().as_dynamic().unwrap();
    assert_eq!(d.loss_scale(), 3.0);
    assert_eq!(d.config().growth_factor, 4.0);
    assert_eq!(d.config().backoff_factor, 0.5);
    assert_eq!(d.config().growth_interval, 2);
    assert_eq!(d.counter(), 0);
    assert_eq!(s1.stats().steps, 0);
    assert_eq!(s1, s0);
    std::fs::remove_file(path).unwrap();
}

#[test]
fn static_and_noop_states_round_trip() {
    for mut scaler in [LossScaler::fixed(3.0).unwrap(), LossScaler::noop()] {
        scaler.update(false);
        scaler.update(true);
        let path = temp_path("static-noop");
        scaler.save_file(&path).unwrap();
        let loaded = LossScaler::load_file(&path).unwrap();
        assert_eq!(loaded, scaler);
        assert_eq!(loaded.stats().skipped, 1);
        std::fs::remove_file(path).unwrap();
    }
}

/// Every float field is stored exactly: random (valid) scales, factors and clipping thresholds
/// with full mantissas come back with the same bits.
#[test]
fn saved_states_round_trip_bit_exactly() {
    let path = temp_path("bit-exact");
    let mut normal = Normal::new(0xb175);
    let mut random = |low: f64, high: f64| {
        let u = (f64::from(normal.sample()).tanh() + 1.0) / 2.0;
        low + (high - low) * u
    };
    let rules = [
        UpdateRule::Standard,
        UpdateRule::Flax,
        UpdateRule::DeepSpeed {
            consecutive_hysteresis: true,
        },
    ];
    for i in 0..64 {
        let min_scale = random(1e-30, 1.0) as f32;
        let max_scale = (random(1e3, 1e38) as f32).max(min_scale);
        let initial =
            (random(f64::from(min_scale), f64::from(max_scale)) as f32).clamp(min_scale, max_scale);
        let config = LossScaleConfig {
            initial_scale: initial,
            growth_interval: 1 + i,
            growth_factor: random(1.0 + 1e-12, 1e6),
            backoff_factor: random(1e-12, 1.0 - 1e-12),
            min_scale,
            max_scale: (i % 2 == 0).then_some(max_scale),
            hysteresis: 1 + i % 5,
            rule: rules[i as usize % rules.len()],
        };
        let mut scaler = LossScaler::dynamic(config)
            .unwrap()
            .with_clip_norm(random(1e-20, 1e30) as f32)
            .unwrap();
        for step in 0..(i % 7) {
            scaler.update(step % 3 != 0);
        }
        scaler.save_file(&path).unwrap();
        let loaded = LossScaler::load_file(&path).unwrap();
        assert_eq!(loaded, scaler);
        let (a, b) = (scaler.to_record(), loaded.to_record());
        let config = (a.config.unwrap(), b.config.unwrap());
        assert_eq!(a.scale.to_bits(), b.scale.to_bits());
        assert_eq!(
            a.clip_norm.unwrap().to_bits(),
            b.clip_norm.unwrap().to_bits()
        );
        assert_eq!(
            config.0.growth_factor.to_bits(),
            config.1.growth_factor.to_bits()
        );
        assert_eq!(
            config.0.backoff_factor.to_bits(),
            config.1.backoff_factor.to_bits()
        );
        assert_eq!(config.0.min_scale.to_bits(), config.1.min_scale.to_bits());
        assert_eq!(
            config.0.initial_scale.to_bits(),
            config.1.initial_scale.to_bits()
        );
    }
    std::fs::remove_file(path).unwrap();
}

/// The state also travels inside Burn records (users embed it in their own).
#[test]
fn the_record_still_works_with_burn_recorders() {
    let device = Default::default();
    let recorder = PrettyJsonFileRecorder::<FullPrecisionSettings>::new();
    let mut scaler = new_scaler();
    scaler.update(false);
    let path = temp_path("burn-recorder");
    Recorder::<TB>::record(&recorder, scaler.to_record(), path.clone()).unwrap();
    let record: LossScalerRecord = Recorder::<TB>::load(&recorder, path.clone(), &device).unwrap();
    assert_eq!(LossScaler::from_record(record).unwrap(), scaler);
    std::fs::remove_file(path.with_extension("json")).unwrap();
}

/// A deterministic byte stream (xorshift64*).
fn random_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            (state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 56) as u8
        })
        .collect()
}

/// No file content can abort the process (Burn's bincode recorder allocates whatever length
/// prefix it reads: 1696937481553319030 bytes for one 511-byte garbage file) or allocate
/// beyond the size limit: every one is an `Err`.
#[test]
fn garbage_files_are_errors_not_aborts() {
    let path = temp_path("garbage");
    let load = |bytes: &[u8]| {
        std::fs::write(&path, bytes).unwrap();
        LossScaler::load_file(&path)
    };
    let format = |bytes: &[u8], what: &str| {
        let result = load(bytes);
        assert!(
            matches!(result, Err(StateError::Format { .. })),
            "{what}: {result:?}"
        );
        assert!(!result.unwrap_err().to_string().is_empty());
    };

    format(b"", "empty file");
    for seed in 0..32 {
        format(
            &random_bytes(seed, 511),
            &format!("random bytes, seed {seed}"),
        );
        format(
            &random_bytes(seed, 7),
            &format!("short random bytes, seed {seed}"),
        );
    }
    // What bincode and MessagePack read as a huge length, then garbage.
    let mut huge_length = 1_696_937_481_553_319_030u64.to_le_bytes().to_vec();
    huge_length.extend(random_bytes(99, 503));
    format(&huge_length, "bincode-style length prefix");
    let mut huge_map = vec![0xdf, 0xff, 0xff, 0xff, 0xff];
    huge_map.extend(random_bytes(98, 506));
    format(&huge_map, "MessagePack map32 header");
    // JSON that nests deeper than the parser follows, and a huge string, within the limit.
    format(&vec![b'['; MAX_STATE_FILE_BYTES - 1], "deep nesting");
    let mut long = br#"{"format_version": 1, "kind": ""#.to_vec();
    long.extend(std::iter::repeat_n(b'x', MAX_STATE_FILE_BYTES - 64));
    long.extend(br#""}"#);
    format(&long, "long string");
    format(br#"{"format_version": 1}"#, "missing fields");
    // A valid state, truncated.
    LossScaler::default().save_file(&path).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    format(&bytes[..bytes.len() / 2], "truncated state");
    format(&bytes[..bytes.len() - 1], "state without its last byte");

    // Files of Burn's recorders: a scaler record in bincode, a model in MessagePack.
    let device = Default::default();
    let bin = BinFileRecorder::<FullPrecisionSettings>::new();
    Recorder::<TB>::record(&bin, LossScaler::default().to_record(), path.clone()).unwrap();
    format(
        &std::fs::read(path.with_extension("bin")).unwrap(),
        "bincode record",
    );
    std::fs::remove_file(path.with_extension("bin")).unwrap();
    let mpk = DefaultFileRecorder::<FullPrecisionSettings>::new();
    TwoLayer::<TB>::new(2, &device)
        .save_file(path.clone(), &mpk)
        .unwrap();
    format(
        &std::fs::read(path.with_extension("mpk")).unwrap(),
        "model record",
    );
    std::fs::remove_file(path.with_extension("mpk")).unwrap();

    // Too large: refused after reading one byte past the limit.
    for len in [MAX_STATE_FILE_BYTES + 1, 10 * 1024 * 1024] {
        let result = load(&random_bytes(7, len));
        assert!(
            matches!(result, Err(StateError::TooLarge { max, .. }) if max == MAX_STATE_FILE_BYTES),
            "{len} bytes: {result:?}"
        );
    }
    // Exactly at the limit is read (and here rejected as JSON, not for its size).
    let mut padded = b"  ".repeat(MAX_STATE_FILE_BYTES / 2);
    padded[0] = b'!';
    format(&padded, "largest readable file");
    std::fs::remove_file(&path).unwrap();

    // An endless device reports size 0; it is not read past the limit either.
    #[cfg(unix)]
    assert!(matches!(
        LossScaler::load_file("/dev/zero"),
        Err(StateError::TooLarge { .. })
    ));

    let missing = temp_path("missing");
    assert!(matches!(
        LossScaler::load_file(&missing),
        Err(StateError::Io { .. })
    ));
    let dir = std::env::temp_dir();
    assert!(LossScaler::load_file(&dir).is_err(), "a directory");
    assert!(matches!(
        LossScaler::default().save_file(missing.join("no-such-dir").join("state")),
        Err(StateError::Io { .. })
    ));
}

#[test]
fn readable_but_invalid_states_are_typed_errors() {
    let path = temp_path("edited");

    let edit = |change: &dyn Fn(&mut serde_json::Value)| {
        LossScaler::default().save_file(&path).unwrap();
        let mut json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        change(&mut json);
        std::fs::write(&path, serde_json::to_string(&json).unwrap()).unwrap();
        LossScaler::load_file(&path)
    };

    assert!(edit(&|_| {}).is_ok(), "an unedited file loads");
    let err = edit(&|item| item["scale"] = (-1.0).into()).unwrap_err();
    assert!(
        matches!(
            err,
            StateError::Invalid(LossScaleError::InvalidScale { .. })
        ),
        "{err}"
    );
    let err = edit(&|item| item["counter"] = 2000.into()).unwrap_err();
    assert!(
        matches!(
            err,
            StateError::Invalid(LossScaleError::CounterOutOfRange { .. })
        ),
        "{err}"
    );
    let err = edit(&|item| item["config"]["growth_factor"] = 0.5.into()).unwrap_err();
    assert!(
        matches!(
            err,
            StateError::Invalid(LossScaleError::InvalidGrowthFactor(_))
        ),
        "{err}"
    );
    let err = edit(&|item| item["format_version"] = 2.into()).unwrap_err();
    assert!(
        matches!(
            err,
            StateError::UnsupportedVersion {
                found: 2,
                expected: 1
            }
        ),
        "{err}"
    );
    let err = edit(&|item| item["config"] = serde_json::Value::Null).unwrap_err();
    assert!(matches!(err, StateError::MissingConfig), "{err}");
    let err = edit(&|item| item["stats"]["skipped"] = 5.into()).unwrap_err();
    assert!(matches!(err, StateError::InconsistentStats(_)), "{err}");
    let err = edit(&|item| item["clip_norm"] = (-3.0).into()).unwrap_err();
    assert!(
        matches!(err, StateError::Invalid(LossScaleError::InvalidClipNorm(_))),
        "{err}"
    );
    let err = edit(&|item| item["kind"] = "NoOp".into()).unwrap_err();
    assert!(
        matches!(
            err,
            StateError::Invalid(LossScaleError::InvalidScale { .. })
        ),
        "{err}"
    );
    let err = edit(&|item| item["kind"] = "Sideways".into()).unwrap_err();
    assert!(matches!(err, StateError::Format { .. }), "{err}");
    let err = edit(&|item| item["scale"] = 1e39.into()).unwrap_err();
    assert!(matches!(err, StateError::Format { .. }), "{err}");
    std::fs::remove_file(&path).unwrap();

    // In memory too.
    let mut record = LossScaler::default().to_record();
    record.kind = LossScaleKind::Static;
    record.scale = f32::INFINITY;
    assert!(matches!(
        LossScaler::from_record(record),
        Err(StateError::Invalid(_))
    ));
}
