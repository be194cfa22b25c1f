//! A `Scaled` model's record carries the loss scaler's state: `into_record`/`load_record` (and
//! so burn's file recorders, and burn-train's checkpoints) restore it into the shared handle,
//! for every clone; a record saved while the scaler was `#[module(skip)]` still loads.

use std::marker::PhantomData;

use burn::backend::{Autodiff, Flex};
use burn::module::{AutodiffModule, Module, Param};
use burn::nn::Linear;
use burn::optim::SgdConfig;
use burn::record::{BinFileRecorder, FileRecorder, FullPrecisionSettings, NamedMpkFileRecorder};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Tensor, TensorData};
use burn::train::{ItemLazy, TrainStep};
use burn_mpric::scale::{LossScaleConfig, LossScaleKind, LossScaler, LossScalerRecord};
use burn_mpric_learner::{LossStep, Scaled, ScalerHandle};

type B = Autodiff<Flex>;

#[derive(Module, Debug)]
struct Net<B: Backend> {
    linear: Linear<B>,
}

impl<B: AutodiffBackend> LossStep<B> for Net<B> {
    type Input = Tensor<B, 2>;
    type Output = ();

    fn loss_step(&self, x: Tensor<B, 2>) -> (Tensor<B, 1>, ()) {
        (self.linear.forward(x).powf_scalar(2.0).mean(), ())
    }
}

/// A 2x2 linear layer whose weights are `offset + 0, 1, 2, 3`.
fn net(offset: f32) -> Net<B> {
    let weights: Vec<f32> = (0..4).map(|i| offset + i as f32).collect();
    Net {
        linear: Linear {
            weight: Param::from_tensor(Tensor::from_data(
                TensorData::new(weights, [2, 2]),
                &Default::default(),
            )),
            bias: None,
        },
    }
}

fn weights<B: Backend>(net: &Net<B>) -> Vec<f32> {
    net.linear.weight.val().into_data().to_vec().unwrap()
}

fn config() -> LossScaleConfig {
    LossScaleConfig::new()
        .with_initial_scale(1024.0)
        .with_growth_interval(3)
}

/// A dynamic scaler some steps into training: two overflows, a growth, a growth counter
/// part-way to the next one.
fn trained_scaler() -> LossScaler {
    let mut scaler = LossScaler::dynamic(config()).unwrap();
    for finite in [false, true, true, true, false, true, true] {
        scaler.update(finite);
    }
    scaler
}

/// What a new run starts with: the same configuration, at the initial scale.
fn fresh_handle() -> ScalerHandle {
    ScalerHandle::new(LossScaler::dynamic(config()).unwrap())
}

#[test]
fn a_record_round_trip_restores_scale_and_counters_into_every_clone() {
    let saved = trained_scaler();
    assert_ne!(saved.scale(), 1024.0);
    assert!(saved.to_record().counter > 0);
    let record = Scaled::<B, _>::new(net(1.0), ScalerHandle::new(saved)).into_record();
    assert_eq!(record.scaler, Some(saved.to_record()));

    let handle = fresh_handle();
    let model = Scaled::<B, _>::new(net(0.0), handle.clone());
    let (clone, valid, forked) = (
        model.clone(),
        model.valid(),
        model.clone().fork(&Default::default()),
    );
    let loaded = model.load_record(record);

    // The parameters come from the record, the scaler state reaches every clone.
    assert_eq!(weights(&loaded.model), [1.0, 2.0, 3.0, 4.0]);
    for (name, scaler) in [
        ("loaded", loaded.scaler()),
        ("handle", &handle),
        ("clone", clone.scaler()),
        ("valid", valid.scaler()),
        ("forked", forked.scaler()),
    ] {
        assert_eq!(scaler.snapshot(), saved, "{name}");
        assert_eq!(scaler.stats(), saved.stats(), "{name}");
        assert_eq!(scaler.scale(), saved.scale(), "{name}");
    }
    // Burn's module display shows the wrapped model and the scaler.
    let shown = loaded.to_string();
    assert!(
        shown.contains("linear") && shown.contains("LossScaler"),
        "{shown}"
    );
    // It goes on from there: the next decision is the saved scaler's next decision.
    let mut expected = saved;
    let model = loaded.map(&mut NoOpMapper);
    assert_eq!(
        step(model.clone(), 1.0),
        Some(expected.update(true).next_scale)
    );
    assert_eq!(handle.snapshot(), expected);
}

struct NoOpMapper;
impl burn::module::ModuleMapper<B> for NoOpMapper {}

/// One training step with `x` as input, through `TrainStep` (the loss is scaled, the
/// optimizer step unscales and decides); the scale the decision chose for the next step.
fn step(model: Scaled<B, Net<B>>, x: f32) -> Option<f32> {
    let input = Tensor::<B, 2>::from_data(TensorData::new(vec![x, x], [1, 2]), &Default::default());
    let output = TrainStep::step(&model, input);
    let mut optim = SgdConfig::new().init();
    let _ = model.optimize(&mut optim, 1e-3, output.grads);
    output.item.sync().record.outcome.map(|o| o.next_scale)
}

#[test]
fn loading_a_record_forgets_the_steps_waiting_for_an_optimizer_step() {
    let handle = fresh_handle();
    let model = Scaled::<B, _>::new(net(0.0), handle.clone());
    let input =
        Tensor::<B, 2>::from_data(TensorData::new(vec![1.0, 1.0], [1, 2]), &Default::default());
    // A step whose loss was scaled at 1024, then a checkpoint loaded before its optimizer step.
    let pending = TrainStep::step(&model, input);
    let saved = trained_scaler();
    let model =
        model.load_record(Scaled::<B, _>::new(net(1.0), ScalerHandle::new(saved)).into_record());
    // Its loss was scaled by 1024, not by the restored scale: the decision of the optimizer step
    // that follows is not handed to it. The next step, scaled after the load, gets its own.
    let mut optim = SgdConfig::new().init();
    let model = model.optimize(&mut optim, 1e-3, pending.grads);
    assert_eq!(pending.item.sync().record.outcome, None);
    let mut expected = saved;
    expected.update(true);
    assert_eq!(step(model, 1.0), Some(expected.update(true).next_scale));
}

#[test]
fn a_record_of_another_kind_replaces_the_scaler_whole() {
    // The checkpoint wins, as `LossScaler::from_record` and PyTorch's `load_state_dict` do.
    let handle = fresh_handle();
    let model = Scaled::<B, _>::new(net(0.0), handle.clone());
    let fixed = LossScaler::fixed(64.0).unwrap();
    let record = Scaled::<B, _>::new(net(1.0), ScalerHandle::new(fixed)).into_record();
    let _model = model.load_record(record);
    assert_eq!(handle.snapshot(), fixed);
    assert_eq!(handle.snapshot().to_record().kind, LossScaleKind::Static);
}

#[test]
fn an_invalid_scaler_record_leaves_the_scaler_as_it_is_and_loads_the_parameters() {
    let handle = fresh_handle();
    let before = handle.snapshot();
    let model = Scaled::<B, _>::new(net(0.0), handle.clone());
    let mut record =
        Scaled::<B, _>::new(net(1.0), ScalerHandle::new(trained_scaler())).into_record();
    let mut invalid: LossScalerRecord = record.scaler.take().unwrap();
    invalid.scale = -1.0;
    assert!(handle.restore(invalid.clone()).is_err());
    record.scaler = Some(invalid);
    // `load_record` cannot fail: it logs the error and keeps the scaler.
    let loaded = model.load_record(record);
    assert_eq!(handle.snapshot(), before);
    assert_eq!(weights(&loaded.model), [1.0, 2.0, 3.0, 4.0]);
}

/// `Scaled` as `#[derive(Module)]` wrote it before the scaler was part of its record.
#[derive(Module, Debug)]
struct OldScaled<B: Backend, M: Module<B>> {
    model: M,
    #[module(skip)]
    scaler: ScalerHandle,
    _backend: PhantomData<B>,
}

fn recorder_round_trips<R: FileRecorder<B> + Default>(name: &str) {
    let dir = std::env::temp_dir().join(format!(
        "mpric-learner-record-{name}-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let recorder = R::default();
    let saved = trained_scaler();

    // Saved and loaded through the recorder: the scaler state comes back.
    let model = Scaled::<B, _>::new(net(1.0), ScalerHandle::new(saved));
    model.save_file(dir.join("new"), &recorder).unwrap();
    let handle = fresh_handle();
    let loaded = Scaled::<B, _>::new(net(0.0), handle.clone())
        .load_file(dir.join("new"), &recorder, &Default::default())
        .unwrap();
    assert_eq!(handle.snapshot(), saved, "{name}");
    assert_eq!(weights(&loaded.model), [1.0, 2.0, 3.0, 4.0], "{name}");

    // A checkpoint saved before (no scaler state): the parameters load, the scaler stays.
    let old = OldScaled::<B, _> {
        model: net(1.0),
        scaler: ScalerHandle::new(saved),
        _backend: PhantomData,
    };
    old.save_file(dir.join("old"), &recorder).unwrap();
    let handle = fresh_handle();
    let before = handle.snapshot();
    let loaded = Scaled::<B, _>::new(net(0.0), handle.clone())
        .load_file(dir.join("old"), &recorder, &Default::default())
        .unwrap();
    assert_eq!(handle.snapshot(), before, "{name}");
    assert_eq!(weights(&loaded.model), [1.0, 2.0, 3.0, 4.0], "{name}");

    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn file_recorders_save_the_scaler_and_read_checkpoints_saved_without_it() {
    // burn-train's usual checkpoint recorders: named MessagePack (self-describing) and
    // bincode (positional).
    recorder_round_trips::<NamedMpkFileRecorder<FullPrecisionSettings>>("mpk");
    recorder_round_trips::<BinFileRecorder<FullPrecisionSettings>>("bin");
}
