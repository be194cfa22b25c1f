//! The cost of one step's all-reduce, per engine, as the buffer and the number of processes
//! grow. Run under MPI (`cargo xtask bench --allreduce` runs it for 2, 3 and 4 processes):
//!
//! ```text
//! mpirun -np 3 target/release/examples/allreduce [--sizes 1024,1048576] [--reps 20]
//! ```
//!
//! For each buffer size it times, in one run and interleaved, MPI `exact` (gather, add in
//! rank order), MPI `fast` (`MPI_Allreduce`) and the TCP star (rank 0's coordinator on
//! loopback), and checks that every engine's sum is right. Rank 0 prints one JSON object per
//! line: engine, processes, values, median and spread of the time per all-reduce, and the
//! bytes each rank receives per step by the engine's algorithm.

use std::time::{Duration, Instant};

use burn_mpric_cluster::{
    ClusterError, Coordinator, MpiWorld, Reduction, RunSpec, Tcp, Timeouts, Transport, end_mpi,
};

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        end_mpi(1);
        std::process::exit(1);
    }
}

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn run() -> Result<(), ClusterError> {
    let sizes: Vec<usize> = arg("--sizes")
        .unwrap_or_else(|| "1024,65536,1048576,8388608".into())
        .split(',')
        .map(|s| s.trim().parse().expect("--sizes: numbers of values"))
        .collect();
    let reps: usize = arg("--reps").map_or(15, |r| r.parse().expect("--reps: a number"));
    let world = MpiWorld::init()?;
    let (rank, n) = (world.rank(), world.world());
    let mut spec = RunSpec::new(n, vec![("bench".into(), "allreduce".into())]);
    spec.timeouts = Timeouts::new(Duration::from_secs(120));
    // Rank 0's coordinator listens on a free loopback port; MPI tells the others which.
    let coordinator = if rank == 0 {
        Some(Coordinator::bind("127.0.0.1:0", spec.clone())?)
    } else {
        None
    };
    let port = coordinator.as_ref().map_or(0, |c| c.local_addr().port());
    let mut exact = world.join(&spec, Reduction::Exact)?;
    let port = exact.broadcast_bytes(0, &port.to_le_bytes())?;
    let port = u16::from_le_bytes([port[0], port[1]]);
    let mut tcp = Tcp::join(coordinator, &format!("127.0.0.1:{port}"), rank, &spec)?;
    // `fast` shares the joined MPI job: only the reduction differs.
    let mut step = 0u64;
    for &len in &sizes {
        let values: Vec<f32> = (0..len)
            .map(|i| (rank + 1) as f32 + (i % 7) as f32)
            .collect();
        let want: Vec<f32> = (0..len)
            .map(|i| (1..=n).map(|r| r as f32 + (i % 7) as f32).sum())
            .collect();
        let mut times: [Vec<f64>; 3] = Default::default();
        for rep in 0..reps + 2 {
            for (engine, slot) in [0usize, 1, 2].iter().zip(0..) {
                step += 1;
                let started = Instant::now();
                let sum = match engine {
                    0 | 1 => {
                        let how = [Reduction::Exact, Reduction::Fast][*engine];
                        exact.set_reduction(how);
                        exact.all_reduce(step, &values)?
                    }
                    _ => tcp.all_reduce(step, &values)?,
                };
                let took = started.elapsed().as_secs_f64();
                assert!(
                    sum.iter()
                        .zip(&want)
                        .all(|(a, b)| (a - b).abs() <= 1e-3 * b.abs()),
                    "a wrong sum"
                );
                // The first two rounds warm the connections and the allocator.
                if rep >= 2 {
                    times[slot].push(took);
                }
            }
        }
        if rank == 0 {
            let m = (len * 4) as f64;
            let received = [
                (n - 1) as f64 * m,
                2.0 * (n - 1) as f64 / n as f64 * m,
                2.0 * (n - 1) as f64 * m,
            ];
            for (i, engine) in ["mpi exact", "mpi fast", "tcp star"].iter().enumerate() {
                let t = &mut times[i];
                t.sort_by(f64::total_cmp);
                let median = t[t.len() / 2];
                let spread = (t[t.len() * 3 / 4] - t[t.len() / 4]) / median;
                println!(
                    "{{\"engine\":\"{engine}\",\"processes\":{n},\"values\":{len},\"median_s\":{median:.6},\"iqr_over_median\":{spread:.3},\"rank0_bytes_per_step\":{:.0},\"other_rank_bytes_per_step\":{:.0}}}",
                    received[i],
                    if i == 2 { 2.0 * m } else { received[i] }
                );
            }
        }
    }
    Box::new(tcp).finish()?;
    Box::new(exact).finish()?;
    Ok(())
}
