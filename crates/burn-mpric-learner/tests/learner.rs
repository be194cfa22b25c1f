//! burn-train's `Learner` over `Scaled<Classifier>` on `Autodiff<MixedPrecision<Flex>>` at f16
//! with dynamic loss scaling and a poisoned batch: every training path skips the step and
//! backs off, and every per-step metric describes its own step.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use burn::data::dataloader::batcher::Batcher;
use burn::tensor::{Int, Tensor};
use burn::train::MultiDeviceOptim;
use burn::train::metric::{Metric, MetricMetadata, MetricName, SerializedEntry};
use burn_mpric_learner::{ScaleRecord, ScalerHandle};

use common::*;

/// Holds the metric processor on each item until the training loop has run two more steps:
/// as far ahead as burn-train's one-item event queue lets it run within an epoch. It waits on
/// the scaler's step counter, not on time; the deadline only turns a hang into a failure.
#[derive(Clone)]
struct Lagging {
    handle: ScalerHandle,
    steps_per_epoch: usize,
    seen: usize,
    lags: Arc<Mutex<Vec<u64>>>,
}

impl Metric for Lagging {
    type Input = ();

    fn update(&mut self, _: &(), _: &MetricMetadata) -> SerializedEntry {
        self.seen += 1;
        let (epoch, index) = (
            (self.seen - 1) / self.steps_per_epoch,
            (self.seen - 1) % self.steps_per_epoch + 1,
        );
        let target = (epoch * self.steps_per_epoch + (index + 2).min(self.steps_per_epoch)) as u64;
        let deadline = Instant::now() + Duration::from_secs(300);
        while self.handle.stats().steps < target {
            assert!(Instant::now() < deadline, "step {target} never ran");
            std::thread::sleep(Duration::from_millis(1));
        }
        let lag = self.handle.stats().steps - self.seen as u64;
        self.lags.lock().unwrap().push(lag);
        SerializedEntry::new(lag.to_string(), lag.to_string())
    }

    fn clear(&mut self) {}

    fn name(&self) -> MetricName {
        Arc::new("Lag".to_string())
    }
}

fn all_logs(run: &Trained, epochs: usize, metric: &str) -> Vec<f64> {
    (1..=epochs).flat_map(|e| run.log(e, metric)).collect()
}

#[test]
fn per_step_logs_equal_the_scalers_decisions_when_metrics_run_behind() {
    const EPOCHS: usize = 4;
    let steps_per_epoch = SAMPLES / BATCH;
    let lags = Arc::new(Mutex::new(Vec::new()));
    let run = train_lagging(EPOCHS, steps_per_epoch, lags.clone());

    // Steps 2, 8, 14, 20 hold the poisoned batch: skipped, and the scale halves after each.
    let poisoned = POISONED_SAMPLE / BATCH;
    let skipped: Vec<usize> = (0..EPOCHS)
        .map(|e| e * steps_per_epoch + poisoned)
        .collect();
    let expected = expected_trace(1024.0, EPOCHS * steps_per_epoch, &skipped);
    let stats = run.handle.stats();
    assert_eq!((stats.steps, stats.skipped), (24, 4));
    assert_eq!(run.handle.scale(), 64.0);

    let scales = all_logs(&run, EPOCHS, "Loss_Scale");
    let skips = all_logs(&run, EPOCHS, "Skipped_Steps");
    let logged: Vec<(f64, f64)> = scales.into_iter().zip(skips).collect();
    assert_eq!(logged, expected);
    // Each poisoned batch ran once more at a far lower scale: an infinite input gives a loss
    // that is not finite at any scale (2); every other step has no cause (0).
    let causes = all_logs(&run, EPOCHS, "Skip_Cause");
    let expected_causes: Vec<f64> = (0..EPOCHS * steps_per_epoch)
        .map(|s| if skipped.contains(&s) { 2.0 } else { 0.0 })
        .collect();
    assert_eq!(causes, expected_causes);

    // The metrics really ran behind: items were read two steps after their own.
    let lags = lags.lock().unwrap();
    assert_eq!(lags.len(), EPOCHS * steps_per_epoch);
    assert_eq!(lags.iter().max(), Some(&2), "lags: {lags:?}");

    // Training still converges: the model classifies the clean data.
    let device = device();
    let (x, y): (Tensor<Mp, 2>, Tensor<Mp, 1, Int>) = SampleBatcher.batch(samples(false), &device);
    let out = run.model.classify(x, y.clone());
    let predicted = out.output.argmax(1).reshape([SAMPLES]);
    let correct: i64 = predicted.equal(y).int().sum().into_scalar().into();
    assert!(correct >= 90, "accuracy {correct}/96");
}

/// `train` with the lagging metric reading the run's own scaler handle.
fn train_lagging(epochs: usize, steps_per_epoch: usize, lags: Arc<Mutex<Vec<u64>>>) -> Trained {
    train_with(
        Run {
            name: "lagging",
            data: samples(true),
            epochs,
            initial_scale: 1024.0,
            multi: None,
            accumulation: None,
            checkpoints: Checkpoints::Off,
        },
        |handle| {
            Some(Lagging {
                handle: handle.clone(),
                steps_per_epoch,
                seen: 0,
                lags,
            })
        },
    )
}

/// The samples minus the ones that share an iteration with the poisoned sample under two
/// devices (burn-train gives each device a contiguous half of the data).
fn without_poisoned_iteration() -> Vec<Sample> {
    let half = SAMPLES / 2;
    let first = POISONED_SAMPLE / BATCH * BATCH;
    samples(false)
        .into_iter()
        .enumerate()
        .filter(|(i, _)| {
            let offset = i % half;
            !(first..first + BATCH).contains(&offset)
        })
        .map(|(_, s)| s)
        .collect()
}

#[test]
fn every_multi_device_mode_skips_a_poisoned_step_like_a_run_without_it() {
    const EPOCHS: usize = 2;
    let mut traces = Vec::new();
    for (mode, name) in [
        (MultiDeviceOptim::OptimMainDevice, "main"),
        (MultiDeviceOptim::OptimSharded, "sharded"),
    ] {
        let poisoned = train(
            Run {
                name: if name == "main" {
                    "main-poisoned"
                } else {
                    "sharded-poisoned"
                },
                data: samples(true),
                epochs: EPOCHS,
                initial_scale: 1024.0,
                multi: Some(mode),
                accumulation: None,
                checkpoints: Checkpoints::Off,
            },
            None::<Lagging>,
        );
        let clean = train(
            Run {
                name: if name == "main" {
                    "main-clean"
                } else {
                    "sharded-clean"
                },
                data: without_poisoned_iteration(),
                epochs: EPOCHS,
                initial_scale: 1024.0,
                multi: Some(mode),
                accumulation: None,
                checkpoints: Checkpoints::Off,
            },
            None::<Lagging>,
        );

        // Three iterations per epoch, the third one poisoned on one device: skipped on both.
        let stats = poisoned.handle.stats();
        assert_eq!((stats.steps, stats.skipped), (6, 2), "{name}");
        assert_eq!(poisoned.handle.scale(), 256.0, "{name}");
        assert_eq!(clean.handle.stats().skipped, 0, "{name}");
        for data in poisoned.model.param_data() {
            let values = data.to_vec::<f32>().unwrap();
            assert!(
                values.iter().all(|v| v.is_finite()),
                "{name}: NaN in params"
            );
        }
        // Params (and through every later Adam step, the optimizer state) are bit-identical
        // to a run that never saw the poisoned iteration.
        assert_eq!(
            poisoned.model.param_data(),
            clean.model.param_data(),
            "{name}"
        );

        // One item per device per iteration, each logging its own step's scale and skips.
        let per_step = expected_trace(1024.0, 6, &[2, 5]);
        let expected: Vec<(f64, f64)> = per_step.iter().flat_map(|s| [*s, *s]).collect();
        let scales = all_logs(&poisoned, EPOCHS, "Loss_Scale");
        let skips = all_logs(&poisoned, EPOCHS, "Skipped_Steps");
        let logged: Vec<(f64, f64)> = scales.into_iter().zip(skips).collect();
        assert_eq!(logged, expected, "{name}");
        traces.push((stats, poisoned.handle.scale(), logged));
    }
    // The same decisions whichever mode runs.
    assert_eq!(traces[0], traces[1]);
}

/// The batches a two-device run processes together, one after the other: the first device
/// takes the first half of the data, the second the second half, batch by batch.
fn interleaved(data: Vec<Sample>) -> Vec<Sample> {
    let half = data.len() / 2;
    let (first, second) = data.split_at(half);
    first
        .chunks(BATCH)
        .zip(second.chunks(BATCH))
        .flat_map(|(a, b)| a.iter().chain(b).cloned())
        .collect()
}

#[test]
fn two_replicas_equal_one_device_summing_the_same_two_batches_per_step() {
    // burn-train's MultiDevice (OptimMainDevice) sums the two replicas' gradients on the main
    // device; one device with gradient accumulation 2 over the same batches sums the same
    // gradients. Both go through one loss-scaler decision per step.
    for poison in [false, true] {
        let multi = train(
            Run {
                name: if poison {
                    "pair-multi-poisoned"
                } else {
                    "pair-multi"
                },
                data: samples(poison),
                epochs: 2,
                initial_scale: 1024.0,
                multi: Some(MultiDeviceOptim::OptimMainDevice),
                accumulation: None,
                checkpoints: Checkpoints::Off,
            },
            None::<Lagging>,
        );
        let single = train(
            Run {
                name: if poison {
                    "pair-single-poisoned"
                } else {
                    "pair-single"
                },
                data: interleaved(samples(poison)),
                epochs: 2,
                initial_scale: 1024.0,
                multi: None,
                accumulation: Some(2),
                checkpoints: Checkpoints::Off,
            },
            None::<Lagging>,
        );
        let (a, b) = (multi.handle.stats(), single.handle.stats());
        assert_eq!(
            (a.steps, a.skipped),
            (b.steps, b.skipped),
            "poison {poison}"
        );
        assert_eq!(a.skipped, if poison { 2 } else { 0 });
        assert_eq!(multi.handle.scale(), single.handle.scale());
        let (multi_params, single_params) = (multi.model.param_data(), single.model.param_data());
        assert_eq!(multi_params.len(), single_params.len());
        for (x, y) in multi_params.into_iter().zip(single_params) {
            let (x, y) = (x.to_vec::<f32>().unwrap(), y.to_vec::<f32>().unwrap());
            for (u, v) in x.iter().zip(&y) {
                assert!(
                    u.is_finite() && (u - v).abs() <= 1e-5 * (1.0 + u.abs()),
                    "{u} vs {v}"
                );
            }
        }
    }
}

/// Trains `epochs` epochs (or, with `ResumeFrom`, up to `epochs`) and returns the run with
/// the loss-scaling record of each step it ran.
fn train_recorded(
    name: &'static str,
    data: &[Sample],
    initial_scale: f32,
    epochs: usize,
    checkpoints: Checkpoints,
) -> (Trained, Vec<ScaleRecord>) {
    let decisions = Decisions::default();
    let run = train(
        Run {
            name,
            data: data.to_vec(),
            epochs,
            initial_scale,
            multi: None,
            accumulation: None,
            checkpoints,
        },
        Some(decisions.clone()),
    );
    let records = decisions.0.lock().unwrap().clone();
    (run, records)
}

#[test]
fn a_run_resumed_from_a_checkpoint_goes_on_with_the_scale_and_skips_it_had() {
    // At 2^24, f16 gradients overflow: the first steps are skipped while the scale backs off
    // (a fresh scaler at 2^24 would skip them again). The poisoned batch is then skipped once
    // per epoch, halving the scale each time, on both sides of the checkpoint.
    const EPOCHS: usize = 4;
    const STOP: usize = 2;
    let steps = SAMPLES / BATCH;
    let initial = 2f32.powi(24);
    let data = samples(true);

    let (whole, whole_steps) =
        train_recorded("resume-whole", &data, initial, EPOCHS, Checkpoints::Off);
    let (first, first_steps) =
        train_recorded("resume-split", &data, initial, STOP, Checkpoints::Save);
    // A fresh Learner: a fresh model, optimizer and scaler handle at 2^24, then the checkpoint.
    let (resumed, resumed_steps) = train_recorded(
        "resume-split",
        &data,
        initial,
        EPOCHS,
        Checkpoints::ResumeFrom(STOP),
    );
    drop(first);

    assert_eq!(whole_steps.len(), EPOCHS * steps);
    assert_eq!(first_steps[..], whole_steps[..STOP * steps]);
    // The first part backed off (overflows, then the poisoned batch) before the checkpoint.
    let at_stop = first_steps.last().unwrap().outcome.clone().unwrap();
    assert!(at_stop.next_scale < initial / 16.0, "{at_stop:?}");
    assert!(at_stop.stats.skipped > STOP as u64, "{at_stop:?}");

    // The resumed run starts from the checkpoint's scale and counters, not from 2^24, and makes
    // every decision the uninterrupted run made: the same scales, skips, counters and losses.
    assert_eq!(resumed_steps.len(), (EPOCHS - STOP) * steps);
    assert_eq!(resumed_steps[0].scale_used, at_stop.next_scale);
    assert_eq!(resumed_steps[..], whole_steps[STOP * steps..]);
    let skipped_after_resume = resumed_steps.iter().filter(|r| r.is_skipped()).count();
    assert_eq!(
        skipped_after_resume,
        EPOCHS - STOP,
        "the poisoned batch of each epoch"
    );
    assert_eq!(resumed.handle.stats(), whole.handle.stats());
    assert_eq!(resumed.handle.scale(), whole.handle.scale());
    assert_eq!(
        resumed.handle.snapshot().to_record(),
        whole.handle.snapshot().to_record()
    );

    // Each skipped step's item names the parameters whose gradients overflowed, by their path
    // in the `Scaled` model, in module order; applied steps name none.
    let params = [
        "model.l1.weight",
        "model.l1.bias",
        "model.l2.weight",
        "model.l2.bias",
    ];
    for record in &whole_steps {
        let outcome = record.outcome.as_ref().unwrap();
        match &outcome.overflow {
            None => assert!(outcome.is_applied(), "{outcome:?}"),
            Some(overflow) => {
                assert!(
                    outcome.is_skipped() && !overflow.params.is_empty(),
                    "{outcome:?}"
                );
                let at: Vec<usize> = overflow
                    .params
                    .iter()
                    .map(|p| params.iter().position(|q| q == p).expect("a parameter"))
                    .collect();
                assert!(at.windows(2).all(|w| w[0] < w[1]), "{overflow:?}");
            }
        }
    }

    // The parameters (and, through every Adam step since, the optimizer state) are the
    // uninterrupted run's.
    assert_eq!(resumed.model.param_data(), whole.model.param_data());
}

#[test]
fn the_overflowed_parameters_metric_names_them_on_skipped_steps_only() {
    const EPOCHS: usize = 2;
    let run = train(
        Run {
            name: "overflow-metric",
            data: samples(true),
            epochs: EPOCHS,
            initial_scale: 1024.0,
            multi: None,
            accumulation: None,
            checkpoints: Checkpoints::Off,
        },
        Some(burn_mpric_learner::OverflowedParamsMetric::new()),
    );
    let params = [
        "model.l1.weight",
        "model.l1.bias",
        "model.l2.weight",
        "model.l2.bias",
    ];
    let skips = all_logs(&run, EPOCHS, "Skipped_Steps");
    let mut named = 0;
    for epoch in 1..=EPOCHS {
        let file = run
            .dir
            .join(format!("train/epoch-{epoch}/Overflowed_Parameters.log"));
        let lines = std::fs::read_to_string(&file).unwrap();
        let offset = (epoch - 1) * (SAMPLES / BATCH);
        for (i, line) in lines.lines().enumerate() {
            let step = offset + i;
            let skipped = skips[step] > if step == 0 { 0.0 } else { skips[step - 1] };
            if skipped {
                // The poisoned batch: its NaN reaches parameters of the model, named in
                // module order.
                let names: Vec<&str> = line.split(';').collect();
                assert!(names.iter().all(|n| params.contains(n)), "{line}");
                named += 1;
            } else {
                assert_eq!(line, "-", "step {step} was applied");
            }
        }
    }
    assert_eq!(named, EPOCHS, "one poisoned batch per epoch");
}

/// burn-mpric-optim's optimizer in the Learner: Adam's moments and the parameters at bf16,
/// updated by stochastic rounding; the poisoned batch is still skipped once per epoch.
#[test]
fn the_learner_trains_bf16_parameters_and_state_and_skips_the_poisoned_step() {
    const EPOCHS: usize = 3;
    use burn_mpric_optim::{LowPrecisionOptimizer, MasterWeights, OptimizerPrecision, StateDtype};
    let precision = OptimizerPrecision::new(StateDtype::Bf16, MasterWeights::Stochastic);
    let adam = burn_mpric_scale::DeviceAdamConfig::new();
    let lp = LowPrecisionOptimizer::new(adam, precision).unwrap();
    let run = Run {
        name: "low-precision",
        data: samples(true),
        epochs: EPOCHS,
        initial_scale: 1024.0,
        multi: None,
        accumulation: None,
        checkpoints: Checkpoints::Off,
    };
    let trained = train_optimized::<burn_mpric_learner::SkippedStepsMetric, _>(
        run,
        handle(1024.0),
        |_| None,
        lp.init(),
        |model| lp.store_params(model),
    );

    for weight in [trained.model.l1.weight.val(), trained.model.l2.weight.val()] {
        assert_eq!(weight.dtype(), burn::tensor::DType::BF16);
    }
    // The poisoned batch is skipped once per epoch, every other step applied.
    let stats = trained.handle.stats();
    assert_eq!(stats.skipped, EPOCHS as u64, "{stats:?}");
    assert_eq!(stats.steps, (EPOCHS * SAMPLES / BATCH) as u64);
    // It learns: the last epoch's finite losses are below the first epoch's.
    let mean = |epoch| {
        let finite: Vec<f64> = trained
            .log(epoch, "Loss")
            .into_iter()
            .filter(|l| l.is_finite())
            .collect();
        finite.iter().sum::<f64>() / finite.len() as f64
    };
    assert!(
        mean(EPOCHS) < 0.9 * mean(1),
        "{} -> {}",
        mean(1),
        mean(EPOCHS)
    );
}
