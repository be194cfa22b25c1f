//! What both editions' `mpi_transformer` tests share: the settings, a rank's record of what
//! it trained (f32 bits, so that it reads back exactly), the job under `mpirun`, and the
//! comparison with one process on the doubled batch. Each edition's `tests/mpi.rs` includes
//! this file and runs its own example's code.

use std::path::{Path, PathBuf};

use burn_mpric_cluster::mpirun_test;

pub const STEPS: usize = 12;
pub const POLICY: &str = "mixed_bf16";
/// Rank 1's loss is NaN at step 5.
pub const POISON: (usize, usize) = (5, 1);
pub const TEST: &str = "two_mpi_processes_equal_one_process_on_the_doubled_batch";
/// Adam's learning rate in the examples.
const LR: f32 = 1e-3;

/// What one run reports: each step's loss, the steps skipped, every parameter at the end.
pub struct Report {
    pub losses: Vec<f32>,
    pub skipped: Vec<usize>,
    pub params: Vec<f32>,
}

fn encode(values: impl IntoIterator<Item = f32>) -> String {
    values
        .into_iter()
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

/// A rank's part: writes its report under `dir`.
pub fn write_rank(dir: &Path, rank: usize, report: &Report) {
    let text = [
        encode(report.losses.iter().copied()),
        encode(report.skipped.iter().map(|&s| s as f32)),
        encode(report.params.iter().copied()),
    ]
    .join("\n");
    std::fs::write(rank_file(dir, rank), text).unwrap();
}

/// Runs the test as 2 MPI processes with `dir` for their reports, and reads them back.
pub fn run_ranks(dir: &Path) -> [Report; 2] {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    let out = mpirun_test(TEST, 2, dir).expect("mpirun runs (apt-get install openmpi-bin)");
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    [0, 1].map(|rank| {
        let text = std::fs::read_to_string(rank_file(dir, rank)).unwrap();
        let lines: Vec<Vec<f32>> = text.lines().map(decode).collect();
        Report {
            losses: lines[0].clone(),
            skipped: lines[1].iter().map(|&s| s as usize).collect(),
            params: lines[2].clone(),
        }
    })
}

/// Both ranks agree bit for bit and skipped the poisoned step; one process on the doubled
/// batch (`alone`) agrees with them within bf16's rounding.
pub fn compare(ranks: &[Report; 2], alone: &Report) {
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    let [zero, one] = ranks;
    assert_eq!(bits(&zero.losses), bits(&one.losses));
    assert_eq!(zero.skipped, one.skipped);
    assert_eq!(bits(&zero.params), bits(&one.params));
    assert_eq!(
        zero.skipped,
        [POISON.0],
        "the poisoned step is skipped on both"
    );
    assert_eq!(alone.skipped, [POISON.0]);

    // The same examples, in two shards or one batch: at bf16 compute a sum over 8 or 16
    // sequences may round differently in its last bit (2^-8 relative), and Adam carries that
    // into later steps, so the runs agree within a few bf16 units, not bit for bit.
    let close = |a: f32, b: f32| (a - b).abs() <= 2e-2 * a.abs().max(b.abs()).max(1e-2);
    for (step, (&a, &b)) in alone.losses.iter().zip(&zero.losses).enumerate() {
        if step != POISON.0 {
            assert!(close(a, b), "step {step}: one process {a}, two {b}");
        }
    }
    // Adam moves a parameter by about lr per step whatever the gradient's size, so where a
    // gradient is at rounding level its sign may differ between the two runs: a parameter can
    // drift by up to 2 lr per applied step. Most do not move apart at all.
    let diffs: Vec<f32> = alone
        .params
        .iter()
        .zip(&zero.params)
        .map(|(a, b)| (a - b).abs())
        .collect();
    let worst = diffs.iter().copied().fold(0f32, f32::max);
    let mean = diffs.iter().sum::<f32>() / diffs.len() as f32;
    eprintln!("one process vs two: parameters differ by {mean:e} on average, {worst:e} at most");
    let applied = (STEPS - 1) as f32;
    assert!(
        worst <= 2.0 * LR * applied,
        "parameters differ by up to {worst}"
    );
    assert!(mean <= 1e-4, "parameters differ by {mean} on average");
}
