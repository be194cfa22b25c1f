//! burn-train's `Learner` on the device path (`ScalerHandle::device_optimizer`): the skip is
//! decided on the device and the host learns the steps later. The same decisions as the
//! host-read path, a skipped step that leaves parameters and optimizer state as a run without
//! its batch, on one device and sharded over two, and a resume from a checkpoint that goes on
//! as the uninterrupted run.

// Helpers of the other Learner tests are not all used here.
#[allow(dead_code)]
mod common;

use burn::backend::{Autodiff, Flex};
use burn::data::dataloader::batcher::Batcher;
use burn::optim::{AdamConfig, Optimizer};
use burn::train::metric::LossMetric;
use burn::train::{Learner, MultiDeviceOptim};
use burn_mpric::instrument::{Instrumented, record};
use burn_mpric::scale::{DeviceAdamConfig, LossScaleConfig, LossScaler};
use burn_mpric::{MixedPrecision, Policy};
use burn_mpric_learner::{ScaleRecord, Scaled, ScalerHandle};

use common::*;

/// Trains on the device path, with every step's record kept.
fn device_run(run: Run, sync_every: usize) -> (Trained, Vec<ScaleRecord>) {
    let handle = handle(run.initial_scale);
    let optim = handle
        .device_optimizer::<Ad, _>(DeviceAdamConfig::new(), &device(), sync_every)
        .unwrap();
    let decisions = Decisions::default();
    let kept = decisions.clone();
    let trained = train_optimized(run, handle, |_| Some(kept), optim, |model| model);
    let records = decisions.0.lock().unwrap().clone();
    (trained, records)
}

/// Trains on the host-read path with Burn's Adam.
fn host_run(run: Run) -> (Trained, Vec<ScaleRecord>) {
    let decisions = Decisions::default();
    let kept = decisions.clone();
    let trained = train_optimized(
        run,
        handle(1024.0),
        |_| Some(kept),
        AdamConfig::new().init(),
        |model| model,
    );
    let records = decisions.0.lock().unwrap().clone();
    (trained, records)
}

fn run(name: &'static str, data: Vec<Sample>, epochs: usize) -> Run {
    Run {
        name,
        data,
        epochs,
        initial_scale: 1024.0,
        multi: None,
        accumulation: None,
        checkpoints: Checkpoints::Off,
    }
}

/// The samples without the batch holding the poisoned one (one device, data in order).
fn without_poisoned_batch() -> Vec<Sample> {
    let first = POISONED_SAMPLE / BATCH * BATCH;
    let mut data = samples(false);
    data.drain(first..first + BATCH);
    data
}

#[test]
fn the_device_path_takes_the_host_paths_decisions_and_skips_like_a_run_without_the_batch() {
    const EPOCHS: usize = 2;
    let steps = SAMPLES / BATCH;
    for sync_every in [0, 1, 4] {
        let (poisoned, records) =
            device_run(run("device-poisoned", samples(true), EPOCHS), sync_every);
        let (clean, _) = device_run(
            run("device-clean", without_poisoned_batch(), EPOCHS),
            sync_every,
        );
        let (host, host_records) = host_run(run("device-host", samples(true), EPOCHS));

        // One skip per epoch (the poisoned batch), the scale halved after each: the host-read
        // path's decisions, learned later.
        let stats = poisoned.handle.stats();
        assert_eq!(
            (stats.steps, stats.skipped),
            (12, 2),
            "sync every {sync_every}"
        );
        assert_eq!(poisoned.handle.scale(), 256.0);
        assert_eq!(stats, host.handle.stats());
        assert_eq!(
            poisoned.handle.snapshot().to_record(),
            host.handle.snapshot().to_record()
        );
        assert_eq!(clean.handle.stats().skipped, 0);

        // A skipped step leaves the parameters and Adam's state (through every later step) as
        // a run that never saw the batch.
        assert_eq!(
            poisoned.model.param_data(),
            clean.model.param_data(),
            "sync every {sync_every}"
        );
        // Burn's Adam on the host path computes the same updates to rounding.
        for (x, y) in poisoned
            .model
            .param_data()
            .into_iter()
            .zip(host.model.param_data())
        {
            let (x, y) = (x.to_vec::<f32>().unwrap(), y.to_vec::<f32>().unwrap());
            for (u, v) in x.iter().zip(&y) {
                assert!((u - v).abs() <= 1e-5 * (1.0 + v.abs()), "{u} vs {v}");
            }
        }

        assert!(
            host_records
                .iter()
                .any(|r| r.is_skipped() && r.outcome.as_ref().unwrap().overflow.is_some())
        );
        // Each step's metrics item shows its own step when the host learned it before the
        // item was processed, and otherwise the scaler as of the last read: never a later step.
        assert_eq!(records.len(), EPOCHS * steps);
        for (step, (record, own)) in records.iter().zip(&host_records).enumerate() {
            match &record.outcome {
                Some(outcome) => {
                    let expected = own.outcome.as_ref().unwrap();
                    assert_eq!(
                        (
                            outcome.action,
                            outcome.scale_used,
                            outcome.next_scale,
                            outcome.stats
                        ),
                        (
                            expected.action,
                            expected.scale_used,
                            expected.next_scale,
                            expected.stats
                        ),
                        "step {step}"
                    );
                    // The overflowed parameters, named at the read.
                    assert_eq!(outcome.overflow, expected.overflow, "step {step}");
                    assert_eq!(record.scale_used, own.scale_used);
                }
                None => {
                    assert!(record.scale_used >= own.scale_used, "step {step}");
                    assert!(record.skipped_total() <= own.skipped_total(), "step {step}");
                }
            }
        }
    }
}

#[test]
fn sharded_over_two_devices_a_poisoned_shard_skips_the_step_on_both() {
    // burn-train gives each device a contiguous half of the data: the poisoned batch is the
    // third iteration's first shard, and the clean run drops that iteration's two batches.
    let half = SAMPLES / 2;
    let first = POISONED_SAMPLE / BATCH * BATCH;
    let clean: Vec<Sample> = samples(false)
        .into_iter()
        .enumerate()
        .filter(|(i, _)| !(first..first + BATCH).contains(&(i % half)))
        .map(|(_, s)| s)
        .collect();
    let sharded = |name, data| Run {
        multi: Some(MultiDeviceOptim::OptimSharded),
        ..run(name, data, 2)
    };
    let (poisoned, _) = device_run(sharded("device-sharded-poisoned", samples(true)), 0);
    let (clean, _) = device_run(sharded("device-sharded-clean", clean), 0);
    let stats = poisoned.handle.stats();
    assert_eq!((stats.steps, stats.skipped), (6, 2));
    assert_eq!(poisoned.handle.scale(), 256.0);
    assert_eq!(clean.handle.stats().skipped, 0);
    assert_eq!(poisoned.model.param_data(), clean.model.param_data());
}

#[test]
fn a_device_path_run_resumed_from_a_checkpoint_equals_the_uninterrupted_run() {
    // At 2^24, f16 gradients overflow: the first steps skip while the scale backs off on the
    // device, then the poisoned batch skips once per epoch. The checkpoint holds the scaler
    // as of every step (read at the checkpoint) and the device optimizer's state.
    const EPOCHS: usize = 4;
    const STOP: usize = 2;
    let data = samples(true);
    let at = |name, epochs, checkpoints| Run {
        initial_scale: 2f32.powi(24),
        checkpoints,
        ..run(name, data.clone(), epochs)
    };
    let (whole, whole_steps) = device_run(at("device-whole", EPOCHS, Checkpoints::Off), 3);
    let (first, _) = device_run(at("device-split", STOP, Checkpoints::Save), 3);
    let at_stop = first.handle.snapshot();
    assert!(at_stop.scale() < 2f32.powi(20), "{at_stop:?}");
    let (resumed, _) = device_run(at("device-split", EPOCHS, Checkpoints::ResumeFrom(STOP)), 3);
    drop(first);

    let skipped = whole_steps
        .iter()
        .filter(|r| r.outcome.is_some() && r.is_skipped())
        .count();
    assert!(skipped <= whole.handle.stats().skipped as usize);
    assert!(
        whole.handle.stats().skipped > EPOCHS as u64,
        "{:?}",
        whole.handle.stats()
    );
    assert_eq!(
        resumed.handle.snapshot().to_record(),
        whole.handle.snapshot().to_record()
    );
    assert_eq!(resumed.model.param_data(), whole.model.param_data());
}

#[test]
#[should_panic(expected = "the one ScalerHandle::device_optimizer made")]
fn a_handle_on_the_device_path_refuses_another_optimizer() {
    let handle = handle(1024.0);
    handle
        .device_optimizer::<Ad, _>(DeviceAdamConfig::new(), &device(), 0)
        .unwrap();
    train_optimized(
        run("device-refused", samples(false), 1),
        handle,
        |_| None::<LossMetric<Flex>>,
        AdamConfig::new().init(),
        |model| model,
    );
}

#[test]
fn a_clipping_scaler_cannot_take_the_device_path() {
    let clipped = ScalerHandle::new(
        burn_mpric::scale::LossScaler::default()
            .with_clip_norm(1.0)
            .unwrap(),
    );
    let err = clipped
        .device_optimizer::<Ad, _>(DeviceAdamConfig::new(), &device(), 0)
        .err()
        .unwrap();
    assert!(err.to_string().contains("clipping"), "{err}");
    assert!(!clipped.is_on_device());
}

type Logged = MixedPrecision<Instrumented<Flex>>;
type LoggedAd = Autodiff<Logged>;

/// The host reads of each of three Learner steps (`train_step` then `optimizer_step`).
fn reads_per_step<O>(model: Scaled<LoggedAd, Classifier<LoggedAd>>, optim: O) -> Vec<usize>
where
    O: Optimizer<Scaled<LoggedAd, Classifier<LoggedAd>>, LoggedAd> + 'static,
{
    let device = model.model.l1.weight.val().device();
    let mut learner = Learner::new(model, optim, 1e-2);
    (0..3)
        .map(|_| {
            let batch = SampleBatcher.batch(samples(false)[..BATCH].to_vec(), &device);
            let (_, ops) = record(|| {
                let output = learner.train_step(batch);
                learner.optimizer_step(output.grads);
            });
            assert!(ops.len() > 50, "the step ran through the logged backend");
            ops.iter()
                .filter(|op| op.op.ends_with("_into_data") || op.op == "tr_execute")
                .count()
        })
        .collect()
}

#[test]
fn a_learner_step_on_the_device_path_reads_nothing_on_the_host() {
    let device =
        Logged::device(Default::default(), "mixed_f16".parse::<Policy>().unwrap()).unwrap();
    let on_device = handle(1024.0);
    let optim = on_device
        .device_optimizer::<LoggedAd, _>(DeviceAdamConfig::new(), &device, 0)
        .unwrap();
    let model = Scaled::new(Classifier::new(&device), on_device.clone());
    assert_eq!(
        reads_per_step(model, optim),
        [0, 0, 0],
        "a device-path step read the device"
    );
    assert_eq!(on_device.stats().steps, 3);

    let host = handle(1024.0);
    let model = Scaled::new(Classifier::new(&device), host.clone());
    let reads = reads_per_step(model, AdamConfig::new().init());
    assert!(
        reads.iter().all(|&r| r > 0),
        "the host-read step reads: {reads:?}"
    );
    assert_eq!(host.stats().steps, 3);
}

#[test]
fn a_restored_handle_steps_from_the_checkpoints_scale_and_still_names_overflows() {
    let device = device();
    let handle = handle(1024.0);
    let optim = handle
        .device_optimizer::<Ad, _>(DeviceAdamConfig::new(), &device, 0)
        .unwrap();
    let saved = LossScaler::dynamic(LossScaleConfig::torch().with_initial_scale(64.0)).unwrap();
    handle.restore(saved.to_record()).unwrap();
    let model = Scaled::new(Classifier::<Ad>::new(&device), handle.clone());
    let mut learner = Learner::new(model, optim, 1e-2);
    // The batch that holds the poisoned sample.
    let first = POISONED_SAMPLE / BATCH * BATCH;
    let batch = SampleBatcher.batch(samples(true)[first..first + BATCH].to_vec(), &device);
    let output = learner.train_step(batch);
    learner.optimizer_step(output.grads);
    let outcomes = handle.sync().unwrap();
    assert_eq!(outcomes.len(), 1);
    assert_eq!(
        outcomes[0].scale_used, 64.0,
        "the restored scale, on the device"
    );
    assert!(outcomes[0].is_skipped());
    let names = &outcomes[0].overflow.as_ref().unwrap().params;
    assert!(
        names.iter().all(|n| n.starts_with("model.")) && !names.is_empty(),
        "{names:?}"
    );
}

/// A restore the device path cannot take (a clipping scaler) keeps the scaler in use, and is
/// reported by `last_error`, as the Burn 0.22 edition's handle reports it.
#[test]
fn a_refused_restore_keeps_the_scale_and_is_the_last_error() {
    let handle = ScalerHandle::new(LossScaler::fixed(64.0).unwrap());
    handle
        .device_optimizer::<Ad, _>(DeviceAdamConfig::new(), &device(), 0)
        .unwrap();
    assert_eq!(handle.last_error(), None);
    let clipping = LossScaler::fixed(8.0).unwrap().with_clip_norm(1.0).unwrap();
    handle.restore(clipping.to_record()).unwrap();
    assert_eq!(handle.scale(), 64.0);
    let error = handle
        .last_error()
        .expect("the refused restore is reported");
    assert!(error.contains("keeps its state"), "{error}");
}
