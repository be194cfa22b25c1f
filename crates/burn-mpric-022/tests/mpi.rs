//! Data-parallel training across MPI processes, through the `mpi_transformer_022` example's
//! own code: burn-nn's `TransformerEncoder` on 2 processes under `mpirun` equals one process
//! on the doubled batch, and a batch poisoned on one process skips the step on both.
//!
//! The test runs itself under `mpirun`: launched by MPI, it is a rank and writes what it
//! trained; launched by `cargo test`, it starts `mpirun` and compares (the Burn 0.21 edition's
//! test shares the rest: `examples/tests/support/doubled_batch.rs`).

#[path = "../../../examples/tests/support/doubled_batch.rs"]
mod doubled_batch;
#[path = "../examples/mpi_transformer.rs"]
#[allow(dead_code)]
mod example;

use std::path::Path;

use burn::tensor::Device;
use burn_mpric_cluster::launched_by_mpi;
use doubled_batch::{POISON, POLICY, Report, STEPS, compare, run_ranks, write_rank};

fn report(trained: example::Trained) -> Report {
    Report {
        losses: trained.losses,
        skipped: trained.skipped,
        params: trained.params,
    }
}

#[test]
fn two_mpi_processes_equal_one_process_on_the_doubled_batch() {
    let device = Device::flex().autodiff();
    if launched_by_mpi(|key| std::env::var(key).ok()) {
        let out = std::env::var("MPRIC_TEST_OUT").unwrap();
        let mut dp = example::join(POLICY, STEPS).unwrap();
        let world = dp.world();
        let trained =
            example::train(&device, POLICY, STEPS, world, Some(&mut dp), Some(POISON)).unwrap();
        write_rank(Path::new(&out), dp.rank(), &report(trained));
        dp.finish().unwrap();
        return;
    }
    let ranks = run_ranks(&Path::new(env!("CARGO_TARGET_TMPDIR")).join("mpi-022"));
    let alone = example::train(&device, POLICY, STEPS, 2, None, Some(POISON)).unwrap();
    compare(&ranks, &report(alone));
}
