//! Replicas on their own threads summing their gradients through burn-collective's all-reduce
//! (feature `collective`): a poisoned batch on one replica makes every replica skip, scales and
//! parameters stay identical across replicas, and the result equals one device training on the
//! whole batch. Three ways to combine: the all-reduce before unscaling (as burn-train's DDP
//! does inside backward), `step_all_reduced`, and a loop that unscales and checks each
//! replica's own gradients first.

mod common;

use burn::backend::Flex;
use burn::collective::{CollectiveConfig, PeerId, ReduceOperation, finish_collective, register};
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::tensor::Tensor;
use burn_mpric_scale::{LossScaleConfig, LossScaler, all_peers_finite};
use common::{TB, TwoLayer, batches, max_abs_diff, param_values};

const STEPS: usize = 7;
const WIDTH: usize = 8;
/// The step at which replica 1's half of the batch holds infinities.
const POISONED: usize = 2;
const LR: f64 = 1e-2;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    /// `GradientsParams::all_reduce`, then `LossScaler::step`.
    BeforeUnscaling,
    /// `LossScaler::step_all_reduced`.
    StepAllReduced,
    /// `LossScaler::check` on the replica's own gradients, the unscaled gradients all-reduced,
    /// the answers combined with `all_peers_finite`, then `update`.
    AfterUnscaling,
}

/// What one step did on one replica: skipped, the scale used, the scale after.
type Decision = (bool, f32, f32);

fn scaler() -> LossScaler {
    LossScaler::dynamic(
        LossScaleConfig::new()
            .with_initial_scale(1024.0)
            .with_growth_interval(2),
    )
    .unwrap()
}

/// The global batches: 8 rows per step, rows 0..4 for replica 0 and 4..8 for replica 1.
fn global_batches() -> Vec<(Tensor<TB, 2>, Tensor<TB, 2>)> {
    batches::<TB>(STEPS, WIDTH, 11, &Default::default())
}

fn poison(x: Tensor<TB, 2>, rows: std::ops::Range<usize>) -> Tensor<TB, 2> {
    let inf = Tensor::<TB, 2>::full([rows.len(), WIDTH], f32::INFINITY, &x.device());
    x.slice_assign([rows, 0..WIDTH], inf)
}

fn replica(peer: usize, mode: Mode, initial: TwoLayer<TB>) -> (Vec<Decision>, Vec<f32>, Vec<bool>) {
    let (id, device) = (PeerId::from(peer), Default::default());
    register::<Flex>(id, device, CollectiveConfig::default().with_num_devices(2)).unwrap();
    let (mut model, mut optim, mut scaler) = (initial, AdamConfig::new().init(), scaler());
    let (mut decisions, mut local_answers) = (Vec::new(), Vec::new());
    for (step, (x, y)) in global_batches().into_iter().enumerate() {
        let rows = peer * 4..peer * 4 + 4;
        let mut x = x.slice([rows.clone()]);
        let y = y.slice([rows]);
        if peer == 1 && step == POISONED {
            x = poison(x, 0..4);
        }
        // This replica's share (half) of the global batch's mean loss.
        let scaled = scaler.scale_loss(model.mse(x, y).mul_scalar(0.5));
        let grads = GradientsParams::from_grads(scaled.backward(), &model);
        let scale_used = scaler.scale();
        let skipped = match mode {
            Mode::BeforeUnscaling => {
                let grads = grads.all_reduce::<Flex>(id, ReduceOperation::Sum).unwrap();
                let (next, outcome) = scaler.step(&mut optim, LR, model, grads);
                model = next;
                outcome.unwrap().is_skipped()
            }
            Mode::StepAllReduced => {
                let (next, outcome) =
                    scaler.step_all_reduced(id, &mut optim, LR, model, grads, scaled);
                model = next;
                let outcome = outcome.unwrap();
                // The loss is the global batch's.
                assert_eq!(outcome.loss.is_some_and(f32::is_finite), step != POISONED);
                outcome.is_skipped()
            }
            Mode::AfterUnscaling => {
                let checked = scaler.check(&model, grads, None::<Tensor<TB, 1>>).unwrap();
                local_answers.push(checked.finite);
                let grads = checked
                    .grads
                    .all_reduce::<Flex>(id, ReduceOperation::Sum)
                    .unwrap();
                let finite = all_peers_finite::<Flex>(id, checked.finite, &device).unwrap();
                if finite {
                    model = optim.step(LR, model, grads);
                }
                scaler.update(finite).is_skipped()
            }
        };
        decisions.push((skipped, scale_used, scaler.scale()));
    }
    finish_collective::<Flex>(id).unwrap();
    (decisions, param_values(&model), local_answers)
}

/// One device training on the whole batch, for comparison.
fn single_device(initial: TwoLayer<TB>) -> (Vec<Decision>, Vec<f32>) {
    let (mut model, mut optim, mut scaler) = (initial, AdamConfig::new().init(), scaler());
    let mut decisions = Vec::new();
    for (step, (x, y)) in global_batches().into_iter().enumerate() {
        let x = if step == POISONED { poison(x, 4..8) } else { x };
        let scaled = scaler.scale_loss(model.mse(x, y));
        let grads = GradientsParams::from_grads(scaled.backward(), &model);
        let scale_used = scaler.scale();
        let (next, outcome) = scaler.step(&mut optim, LR, model, grads);
        model = next;
        decisions.push((outcome.unwrap().is_skipped(), scale_used, scaler.scale()));
    }
    (decisions, param_values(&model))
}

// One test: burn-collective's local server is one per backend type and process, so the runs
// take turns.
#[test]
fn replicas_take_one_decision_and_end_where_one_device_ends() {
    let initial = TwoLayer::<TB>::new(WIDTH, &Default::default());
    let (want, single_params) = single_device(initial.clone());
    // The poisoned step is skipped and backs off; the growth interval of 2 grows the scale
    // on both sides of it.
    assert!(want[POISONED].0 && want.iter().filter(|d| d.0).count() == 1);
    assert!(want.iter().any(|d| d.2 > d.1) && want[POISONED].2 < want[POISONED].1);

    for mode in [
        Mode::BeforeUnscaling,
        Mode::StepAllReduced,
        Mode::AfterUnscaling,
    ] {
        let (a, b) = std::thread::scope(|s| {
            let a = s.spawn(|| replica(0, mode, initial.clone()));
            let b = s.spawn(|| replica(1, mode, initial.clone()));
            (a.join().unwrap(), b.join().unwrap())
        });
        let ((decisions_a, params_a, local_a), (decisions_b, params_b, local_b)) = (a, b);
        assert_eq!(decisions_a, want, "{mode:?}: replica 0");
        assert_eq!(decisions_b, want, "{mode:?}: replica 1");
        assert_eq!(params_a, params_b, "{mode:?}: the replicas drifted apart");
        let diff = max_abs_diff(&params_a, &single_params);
        assert!(diff < 1e-5, "{mode:?}: {diff} from the single-device run");
        if mode == Mode::AfterUnscaling {
            // Replica 0 alone would have applied the poisoned step.
            assert!(local_a[POISONED] && !local_b[POISONED]);
        }
    }
}
