//! The loss scaler's device path across processes: `DataParallel` sums the gradients, and the
//! device flag each process computes from the same sums takes the same decision everywhere,
//! with no exchange of its own: a non-finite gradient on one process skips the step on all,
//! and the processes' parameters stay bit-identical.

mod common;

use std::thread;

use burn::optim::GradientsParams;
use burn::tensor::TensorData;
use burn_mpric_cluster::{Coordinator, RunSpec, Tcp};
use burn_mpric_scale::{
    DataParallel, DeviceAdamConfig, DeviceLossScaler, DeviceOptimizer, LossScaleConfig, LossScaler,
    StepOutcome,
};
use common::{TB, TwoLayer, batches, param_data};

/// Steps taken and poisoned on rank 1 at this step only.
const STEPS: usize = 6;
const POISONED: usize = 2;

fn run_rank(
    rank: usize,
    addr: String,
    spec: RunSpec,
    coordinator: Option<Coordinator>,
) -> (Vec<StepOutcome>, Vec<TensorData>) {
    let device = Default::default();
    let transport = Tcp::join(coordinator, &addr, rank, &spec).unwrap();
    let mut dp = DataParallel::new(Box::new(transport));
    // The same initial model on every process: made once from a fixed seed.
    let mut model = TwoLayer::<TB>::new(8, &device);
    let mut optim = DeviceOptimizer::new(DeviceAdamConfig::new());
    let config = LossScaleConfig::new()
        .with_initial_scale(1024.0)
        .with_growth_interval(2);
    let mut scaler = DeviceLossScaler::new(LossScaler::dynamic(config).unwrap(), &device).unwrap();
    let data = batches::<TB>(STEPS, 8, 7 + rank as u64, &device);
    for (step, (x, y)) in data.into_iter().enumerate() {
        let mut loss = model.mse(x, y);
        if rank == 1 && step == POISONED {
            loss = loss.mul_scalar(f32::NAN);
        }
        let scaled = scaler.scale_loss(loss);
        let grads = GradientsParams::from_grads(scaled.backward(), &model);
        let grads = dp.mean_grads(&model, grads).unwrap();
        let (next, learned) = scaler.step(&mut optim, 1e-2, model, grads, Some(scaled));
        model = next;
        learned.unwrap();
    }
    dp.finish().unwrap();
    (scaler.sync().unwrap(), param_data(&model))
}

#[test]
fn a_non_finite_gradient_on_one_process_skips_the_step_on_every_process() {
    let spec = RunSpec::new(2, vec![]);
    let coordinator = Coordinator::bind("127.0.0.1:0", spec.clone()).unwrap();
    let addr = coordinator.local_addr().to_string();
    let mut coordinator = Some(coordinator);
    let ranks: Vec<_> = (0..2)
        .map(|rank| {
            let (addr, spec, coordinator) = (addr.clone(), spec.clone(), coordinator.take());
            thread::spawn(move || run_rank(rank, addr, spec, coordinator))
        })
        .collect();
    let results: Vec<_> = ranks.into_iter().map(|r| r.join().unwrap()).collect();
    let (outcomes, params) = (&results[0].0, &results[0].1);
    let skipped: Vec<usize> = (0..STEPS).filter(|&s| outcomes[s].is_skipped()).collect();
    assert_eq!(skipped, vec![POISONED]);
    // Rank 0's own gradients were finite: it skipped on the shared sums, as rank 1 did.
    // The same decisions and scales everywhere; each process's loss is its own batch's.
    let decisions = |outcomes: &[StepOutcome]| -> Vec<_> {
        outcomes
            .iter()
            .map(|o| (o.action, o.scale_used, o.next_scale, o.stats))
            .collect()
    };
    assert_eq!(decisions(&results[1].0), decisions(outcomes));
    assert_eq!(&results[1].1, params, "the processes' parameters differ");
    assert!(outcomes.iter().all(|o| o.loss.is_some()));
}
