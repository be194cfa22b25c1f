//! Scaler state as a Burn record on disk: resume with the identical trajectory (reference f.17 as
//! a save/load analogue), and clear errors for corrupt or mismatched state.

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
    LossScaleConfig, LossScaleError, LossScaleKind, LossScaler, StateError, UpdateRule,
};
use common::{TB, TwoLayer, batches, param_data, temp_path};

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
    scaler
        .save_file::<TB, _>(&recorder, scaler_path.clone())
        .unwrap();
    model.save_file(model_path.clone(), &recorder).unwrap();
    Recorder::<TB>::record(&recorder, optim.to_record(), optim_path.clone()).unwrap();
    drop((optim, scaler));

    let mut scaler =
        LossScaler::load_file::<TB, _>(&recorder, scaler_path.clone(), &device).unwrap();
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
    for path in [scaler_path, model_path, optim_path] {
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
    let device = Default::default();
    let recorder = DefaultFileRecorder::<FullPrecisionSettings>::new();
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
    s0.save_file::<TB, _>(&recorder, path.clone()).unwrap();
    s1 = LossScaler::load_file::<TB, _>(&recorder, path.clone(), &device).unwrap();
    let d = s1.loss_scale().as_dynamic().unwrap();
    assert_eq!(d.loss_scale(), 3.0);
    assert_eq!(d.config().growth_factor, 4.0);
    assert_eq!(d.config().backoff_factor, 0.5);
    assert_eq!(d.config().growth_interval, 2);
    assert_eq!(d.counter(), 0);
    assert_eq!(s1.stats().steps, 0);
    assert_eq!(s1, s0);
    std::fs::remove_file(path.with_extension("mpk")).unwrap();
}

#[test]
fn static_and_noop_states_round_trip() {
    let device = Default::default();
    let recorder = DefaultFileRecorder::<FullPrecisionSettings>::new();
    for mut scaler in [LossScaler::fixed(3.0).unwrap(), LossScaler::noop()] {
        scaler.update(false);
        scaler.update(true);
        let path = temp_path("static-noop");
        scaler.save_file::<TB, _>(&recorder, path.clone()).unwrap();
        let loaded = LossScaler::load_file::<TB, _>(&recorder, path.clone(), &device).unwrap();
        assert_eq!(loaded, scaler);
        assert_eq!(loaded.stats().skipped, 1);
        std::fs::remove_file(path.with_extension("mpk")).unwrap();
    }
}

#[test]
fn missing_empty_corrupt_truncated_and_foreign_files_are_recorder_errors() {
    let device = Default::default();
    let recorder = DefaultFileRecorder::<FullPrecisionSettings>::new();
    let load = |path: &std::path::Path| {
        LossScaler::load_file::<TB, _>(&recorder, path.to_path_buf(), &device)
    };

    let missing = temp_path("missing");
    assert!(matches!(load(&missing), Err(StateError::Recorder(_))));

    let path = temp_path("corrupt");
    let file = path.with_extension("mpk");
    std::fs::write(&file, b"").unwrap();
    assert!(
        matches!(load(&path), Err(StateError::Recorder(_))),
        "empty file"
    );
    std::fs::write(&file, b"\x93not a loss scaler record at all").unwrap();
    assert!(
        matches!(load(&path), Err(StateError::Recorder(_))),
        "garbage"
    );

    LossScaler::default()
        .save_file::<TB, _>(&recorder, path.clone())
        .unwrap();
    let bytes = std::fs::read(&file).unwrap();
    std::fs::write(&file, &bytes[..bytes.len() / 2]).unwrap();
    assert!(
        matches!(load(&path), Err(StateError::Recorder(_))),
        "truncated"
    );

    // A record of another type (a model) at that path.
    let model = TwoLayer::<TB>::new(2, &device);
    model.save_file(path.clone(), &recorder).unwrap();
    let err = load(&path).unwrap_err();
    assert!(matches!(err, StateError::Recorder(_)), "{err}");
    assert!(!err.to_string().is_empty());
    std::fs::remove_file(&file).unwrap();
}

#[test]
fn readable_but_invalid_states_are_typed_errors() {
    let device = Default::default();
    let recorder = PrettyJsonFileRecorder::<FullPrecisionSettings>::new();
    let path = temp_path("edited");
    let file = path.with_extension("json");

    let edit = |change: &dyn Fn(&mut serde_json::Value)| {
        LossScaler::default()
            .save_file::<TB, _>(&recorder, path.clone())
            .unwrap();
        let mut json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        change(&mut json["item"]);
        std::fs::write(&file, serde_json::to_string(&json).unwrap()).unwrap();
        LossScaler::load_file::<TB, _>(&recorder, path.clone(), &device)
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
    assert!(matches!(err, StateError::Recorder(_)), "{err}");
    std::fs::remove_file(&file).unwrap();

    // In memory too.
    let mut record = LossScaler::default().to_record();
    record.kind = LossScaleKind::Static;
    record.scale = f32::INFINITY;
    assert!(matches!(
        LossScaler::from_record(record),
        Err(StateError::Invalid(_))
    ));
}
