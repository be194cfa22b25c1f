//! Data-parallel training across MPI processes, through the `mpi_transformer` example's own
//! code: burn-nn's `TransformerEncoder` on 2 processes under `mpirun` equals one process on
//! the doubled batch, and a batch poisoned on one process skips the step on both.
//!
//! The test runs itself under `mpirun`: launched by MPI, it is a rank and writes what it
//! trained; launched by `cargo test`, it starts `mpirun` and compares.

#[path = "../examples/mpi_transformer.rs"]
#[allow(dead_code)]
mod example;

use std::path::{Path, PathBuf};

use burn::tensor::Device;
use burn_mpric_cluster::{launched_by_mpi, mpirun_test};

const STEPS: usize = 12;
const POLICY: &str = "mixed_bf16";
/// Rank 1's loss is NaN at step 5.
const POISON: (usize, usize) = (5, 1);
const TEST: &str = "two_mpi_processes_equal_one_process_on_the_doubled_batch";

fn encode(values: &[f32]) -> String {
    values
        .iter()
        .map(|v| format!("{:08x}", v.to_bits()))
        .collect::<Vec<_>>()
        .join(" ")
}

fn decode(line: &str) -> Vec<f32> {
    line.split_whitespace()
        .map(|w| f32::from_bits(u32::from_str_radix(w, 16).unwrap()))
        .collect()
}

fn rank_file(dir: &Path, rank: usize) -> PathBuf {
    dir.join(format!("rank{rank}.txt"))
}

/// One rank's part: train, write what it saw.
fn as_rank(dir: &Path) {
    let mut dp = example::join(POLICY, STEPS).unwrap();
    let device = Device::flex().autodiff();
    let trained = example::train(
        &device,
        POLICY,
        STEPS,
        dp.world(),
        Some(&mut dp),
        Some(POISON),
    )
    .unwrap();
    let skipped: Vec<f32> = trained.skipped.iter().map(|&s| s as f32).collect();
    let text = [&trained.losses, &skipped, &trained.params]
        .map(|v| encode(v))
        .join("\n");
    std::fs::write(rank_file(dir, dp.rank()), text).unwrap();
    dp.finish().unwrap();
}

#[test]
fn two_mpi_processes_equal_one_process_on_the_doubled_batch() {
    let env = |key: &str| std::env::var(key).ok();
    if launched_by_mpi(env) {
        as_rank(Path::new(&env("MPRIC_TEST_OUT").unwrap()));
        return;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("mpi-022");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let out = mpirun_test(TEST, 2, &dir).expect("mpirun runs (apt-get install openmpi-bin)");
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let read = |rank| -> Vec<Vec<f32>> {
        std::fs::read_to_string(rank_file(&dir, rank))
            .unwrap()
            .lines()
            .map(decode)
            .collect()
    };
    let (zero, one) = (read(0), read(1));
    let bits = |v: &[Vec<f32>]| -> Vec<Vec<u32>> {
        v.iter()
            .map(|l| l.iter().map(|x| x.to_bits()).collect())
            .collect()
    };
    // Both processes reported the same losses, skipped the same step, and hold the same
    // parameters, bit for bit.
    assert_eq!(bits(&zero), bits(&one));
    assert_eq!(
        zero[1],
        [POISON.0 as f32],
        "the poisoned step is skipped on both"
    );

    let alone = example::train(
        &Device::flex().autodiff(),
        POLICY,
        STEPS,
        2,
        None,
        Some(POISON),
    )
    .unwrap();
    assert_eq!(alone.skipped, [POISON.0]);
    // The same examples, in two shards or one batch: at bf16 compute a sum over 8 or 16
    // sequences may round differently in its last bit (2^-8 relative), and Adam carries that
    // into later steps, so the runs agree within a few bf16 units, not bit for bit.
    let close = |a: f32, b: f32, tol: f32| (a - b).abs() <= tol * a.abs().max(b.abs()).max(1e-2);
    for (step, (&a, &b)) in alone.losses.iter().zip(&zero[0]).enumerate() {
        if step != POISON.0 {
            assert!(close(a, b, 2e-2), "step {step}: one process {a}, two {b}");
        }
    }
    // Adam moves a parameter by about lr per step whatever the gradient's size, so where a
    // gradient is at rounding level its sign may differ between the two runs: a parameter can
    // drift by up to 2 lr per applied step. Most do not move apart at all.
    let diffs: Vec<f32> = alone
        .params
        .iter()
        .zip(&zero[2])
        .map(|(a, b)| (a - b).abs())
        .collect();
    let worst = diffs.iter().copied().fold(0f32, f32::max);
    let mean = diffs.iter().sum::<f32>() / diffs.len() as f32;
    eprintln!("one process vs two: parameters differ by {mean:e} on average, {worst:e} at most");
    let applied = (STEPS - 1) as f32;
    assert!(
        worst <= 2.0 * 1e-3 * applied,
        "parameters differ by up to {worst}"
    );
    assert!(mean <= 1e-4, "parameters differ by {mean} on average");
}
