//! burn-train's `Learner` across processes: two Learners (threads here, each with its own
//! half of the data) whose `ScalerHandle`s sum every step's gradients through the TCP star.
//! The poisoned batch is in rank 0's half only: both ranks skip its steps, keep the same
//! scale and end with the same parameters, and the run follows burn-train's own two-device
//! run over the same two halves bit for bit.

// Helpers of the other Learner tests are not all used here.
#[allow(dead_code)]
mod common;

use std::thread;

use burn::backend::Flex;
use burn::train::MultiDeviceOptim;
use burn_mpric::scale::DataParallel;
use burn_mpric_cluster::{Coordinator, RunSpec, Tcp};

use common::*;

/// The type of `train_handled`'s extra metric, which these runs leave out.
type NoMetric = burn::train::metric::LossMetric<Flex>;

#[test]
fn two_processes_skip_the_steps_one_of_them_poisoned_and_follow_the_two_device_run() {
    const EPOCHS: usize = 2;
    let data = samples(true);
    let half = SAMPLES / 2;
    assert!(POISONED_SAMPLE < half, "the poison is in rank 0's half");
    let shards = [data[..half].to_vec(), data[half..].to_vec()];

    let spec = RunSpec::new(2, vec![("test".into(), "learner".into())]);
    let coordinator = Coordinator::bind("127.0.0.1:0", spec.clone()).unwrap();
    let addr = coordinator.local_addr().to_string();
    let mut coordinator = Some(coordinator);
    let ranks: Vec<_> = shards
        .into_iter()
        .enumerate()
        .map(|(rank, shard)| {
            let (addr, spec, coordinator) = (addr.clone(), spec.clone(), coordinator.take());
            thread::spawn(move || {
                let transport = Tcp::join(coordinator, &addr, rank, &spec).unwrap();
                let handle =
                    handle(1024.0).across_processes(DataParallel::new(Box::new(transport)));
                let run = Run {
                    name: ["processes-rank0", "processes-rank1"][rank],
                    data: shard,
                    epochs: EPOCHS,
                    initial_scale: 1024.0,
                    multi: None,
                    accumulation: None,
                    checkpoints: Checkpoints::Off,
                };
                let trained = train_handled(run, handle.clone(), |_| None::<NoMetric>);
                handle.leave_processes().unwrap().finish().unwrap();
                let stats = trained.handle.stats();
                (
                    stats.steps,
                    stats.skipped,
                    trained.handle.scale(),
                    trained.model.param_data(),
                )
            })
        })
        .collect();
    let results: Vec<_> = ranks.into_iter().map(|r| r.join().unwrap()).collect();

    // Three steps per epoch on each rank, the poisoned one (rank 0's third) skipped on both.
    assert_eq!((results[0].0, results[0].1), (6, 2));
    assert_eq!(results[0].2, 256.0);
    assert_eq!(results[0], results[1], "the two ranks disagree");

    // burn-train's two devices get the same halves and sum their gradients on the main one.
    let devices = train(
        Run {
            name: "processes-two-devices",
            data: samples(true),
            epochs: EPOCHS,
            initial_scale: 1024.0,
            multi: Some(MultiDeviceOptim::OptimMainDevice),
            accumulation: None,
            checkpoints: Checkpoints::Off,
        },
        None::<NoMetric>,
    );
    let stats = devices.handle.stats();
    assert_eq!((stats.steps, stats.skipped), (6, 2));
    // The same sums in the same order: bit for bit.
    assert_eq!(results[0].3, devices.model.param_data());
}
