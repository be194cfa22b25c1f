//! A coordinator and its workers over real loopback sockets, one thread per rank: the sums,
//! lost ranks (closed, silent, never joined), refused joins and stray connections.

use std::io::Write;
use std::net::TcpStream;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use burn_mpric_cluster::{ClusterError, Coordinator, RunSpec, Timeouts, Worker};

fn spec(world: usize, step: Duration) -> RunSpec {
    let mut spec = RunSpec::new(
        world,
        vec![
            ("optimizer.lr".into(), "0.01".into()),
            ("seed".into(), "0".into()),
        ],
    );
    spec.timeouts = Timeouts::new(step);
    spec
}

fn start(spec: &RunSpec) -> (String, JoinHandle<Result<u64, ClusterError>>) {
    let coordinator = Coordinator::bind("127.0.0.1:0", spec.clone()).unwrap();
    let addr = coordinator.local_addr().to_string();
    (addr, thread::spawn(move || coordinator.run()))
}

/// One thread per rank of `spec`: each joins as its rank, then runs `body` with its worker.
fn spawn_ranks<T: Send + 'static>(
    addr: &str,
    spec: &RunSpec,
    body: impl Fn(usize, Worker) -> T + Clone + Send + 'static,
) -> Vec<JoinHandle<T>> {
    (0..spec.world)
        .map(|rank| {
            let (addr, spec, body) = (addr.to_string(), spec.clone(), body.clone());
            thread::spawn(move || body(rank, Worker::join(&addr, rank, &spec).unwrap()))
        })
        .collect()
}

/// The values rank `rank` sends at `step`: magnitudes spread so that the order of the sum
/// shows in its bits.
fn values(rank: usize, step: u64) -> Vec<f32> {
    (0..64)
        .map(|i| {
            ((rank * 7 + i) as f32 * 0.37 + step as f32).sin() * 10f32.powi((i % 9) as i32 - 4)
        })
        .collect()
}

#[test]
fn every_rank_gets_the_same_sum_added_in_rank_order() {
    let spec = spec(3, Duration::from_secs(10));
    let (addr, coordinator) = start(&spec);
    let ranks = spawn_ranks(&addr, &spec, move |rank, mut worker| {
        let sums: Vec<Vec<f32>> = (1..=5)
            .map(|step| worker.all_reduce(step, &values(rank, step)).unwrap())
            .collect();
        worker.finish().unwrap();
        sums
    });
    let got: Vec<Vec<Vec<f32>>> = ranks.into_iter().map(|r| r.join().unwrap()).collect();
    assert_eq!(coordinator.join().unwrap().unwrap(), 5);
    for step in 1..=5u64 {
        let expected: Vec<u32> = (0..64)
            .map(|i| (values(0, step)[i] + values(1, step)[i] + values(2, step)[i]).to_bits())
            .collect();
        for (rank, sums) in got.iter().enumerate() {
            let bits: Vec<u32> = sums[step as usize - 1]
                .iter()
                .map(|v| v.to_bits())
                .collect();
            assert_eq!(bits, expected, "rank {rank} step {step}");
        }
    }
}

#[test]
fn a_rank_that_closes_its_connection_mid_run_ends_the_others_at_once() {
    let spec = spec(3, Duration::from_secs(20));
    let (addr, coordinator) = start(&spec);
    let ranks = spawn_ranks(&addr, &spec, move |rank, mut worker| {
        for step in 1..=2 {
            worker.all_reduce(step, &values(rank, step)).unwrap();
        }
        if rank == 2 {
            // As a killed process: the connection closes without a word.
            drop(worker);
            return Ok(Duration::ZERO);
        }
        let t0 = Instant::now();
        worker.all_reduce(3, &values(rank, 3)).map(|_| t0.elapsed())
    });
    let results: Vec<_> = ranks.into_iter().map(|r| r.join().unwrap()).collect();
    for (rank, result) in results.iter().enumerate().take(2) {
        match result {
            Err(ClusterError::Aborted { rank: lost, reason }) => {
                assert_eq!(*lost, 2, "rank {rank}");
                assert!(reason.contains("closed its connection"), "{reason}");
            }
            other => panic!("rank {rank}: {other:?}"),
        }
    }
    let err = coordinator.join().unwrap().unwrap_err();
    assert!(
        matches!(err, ClusterError::RankLost { rank: 2, .. }),
        "{err}"
    );
    assert_eq!(err.to_string(), "rank 2 was lost: closed its connection");
}

#[test]
fn a_silent_rank_is_given_up_after_the_step_timeout() {
    // Long enough that rank 0's first send is never late on a loaded machine.
    let step = Duration::from_secs(1);
    let spec = spec(2, step);
    let (addr, coordinator) = start(&spec);
    let silent = {
        let (addr, spec) = (addr.clone(), spec.clone());
        thread::spawn(move || {
            let mut worker = Worker::join(&addr, 1, &spec).unwrap();
            worker.all_reduce(1, &[1.0]).unwrap();
            // Alive but hung: holds its connection and sends nothing.
            thread::sleep(Duration::from_secs(3));
            drop(worker);
        })
    };
    let mut worker = Worker::join(&addr, 0, &spec).unwrap();
    assert_eq!(worker.all_reduce(1, &[1.0]).unwrap(), [2.0]);
    let t0 = Instant::now();
    let err = worker.all_reduce(2, &[1.0]).unwrap_err();
    let waited = t0.elapsed();
    assert!(
        matches!(&err, ClusterError::Aborted { rank: 1, reason } if reason == "did not finish its step within 1 s"),
        "{err}"
    );
    assert!(
        waited >= step && waited < spec.timeouts.reply(),
        "{waited:?}"
    );
    assert!(matches!(
        coordinator.join().unwrap(),
        Err(ClusterError::RankLost { rank: 1, .. })
    ));
    silent.join().unwrap();
}

#[test]
fn a_rank_that_never_joins_ends_the_run_within_the_join_timeout() {
    let spec = spec(3, Duration::from_millis(300));
    let (addr, coordinator) = start(&spec);
    let t0 = Instant::now();
    let err = Worker::join(&addr, 0, &spec).unwrap_err();
    assert!(
        matches!(&err, ClusterError::Aborted { rank: 1, reason } if reason.contains("did not join within 0.6 s")),
        "{err}"
    );
    assert!(t0.elapsed() < Duration::from_secs(5));
    let err = coordinator.join().unwrap().unwrap_err();
    assert_eq!(err.to_string(), "ranks 1, 2 did not join within 0.6 s");
}

#[test]
fn a_process_of_another_recipe_or_world_stops_the_run_on_every_rank_by_name() {
    let spec = spec(2, Duration::from_secs(10));
    let (addr, coordinator) = start(&spec);
    let first = {
        let (addr, spec) = (addr.clone(), spec.clone());
        thread::spawn(move || Worker::join(&addr, 0, &spec).map(|_| ()))
    };
    let mut other = spec.clone();
    other.identity[0].1 = "0.02".into();
    let difference = "the recipe differs: `optimizer.lr` is 0.01 in the run and 0.02 here";
    let err = Worker::join(&addr, 1, &other).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("the coordinator refused rank 1: {difference}")
    );
    // The rank that had joined hears why the run does not start, as does the coordinator.
    let stopped = format!("rank 1 was refused, so the run does not start: {difference}");
    assert_eq!(first.join().unwrap().unwrap_err().to_string(), stopped);
    assert_eq!(
        coordinator.join().unwrap().unwrap_err().to_string(),
        stopped
    );

    let (addr, coordinator) = start(&spec);
    let mut bigger = spec.clone();
    bigger.world = 4;
    let err = Worker::join(&addr, 1, &bigger).unwrap_err();
    assert!(
        err.to_string()
            .contains("the run has 2 ranks, this process expects 4"),
        "{err}"
    );
    let err = coordinator.join().unwrap().unwrap_err();
    assert!(
        matches!(err, ClusterError::RankRefused { rank: 1, .. }),
        "{err}"
    );
}

#[test]
fn stray_connections_neither_crash_nor_stall_a_run() {
    let spec = spec(2, Duration::from_secs(10));
    let (addr, coordinator) = start(&spec);
    // Before the run: an HTTP request, a port scan's silent connection, a huge length.
    let mut http = TcpStream::connect(&addr).unwrap();
    http.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let _silent = TcpStream::connect(&addr).unwrap();
    let mut huge = TcpStream::connect(&addr).unwrap();
    huge.write_all(&[b'M', b'P', b'R', b'C', 1, 1, 255, 255, 255, 255])
        .unwrap();

    let (ready, ready_rx) = std::sync::mpsc::channel();
    let ranks = spawn_ranks(&addr, &spec, move |rank, mut worker| {
        let first = worker.all_reduce(1, &[rank as f32]).unwrap();
        ready.send(()).unwrap();
        // Give the strays below time to arrive mid-run.
        thread::sleep(Duration::from_millis(300));
        let second = worker.all_reduce(2, &[rank as f32]).unwrap();
        worker.finish().unwrap();
        (first, second)
    });
    ready_rx.recv().unwrap();
    // During the run: garbage, and a second run started by mistake with the same address.
    let mut garbage = TcpStream::connect(&addr).unwrap();
    garbage.write_all(&[0u8; 64]).unwrap();
    let err = Worker::join(&addr, 0, &spec).unwrap_err();
    assert!(err.to_string().contains("the run has started"), "{err}");
    // Once the run has started, another recipe is only turned away.
    let mut other = spec.clone();
    other.identity[1].1 = "7".into();
    let err = Worker::join(&addr, 1, &other).unwrap_err();
    assert!(
        err.to_string().contains("`seed` is 0 in the run and 7"),
        "{err}"
    );

    for rank in ranks {
        assert_eq!(rank.join().unwrap(), (vec![1.0], vec![1.0]));
    }
    assert_eq!(coordinator.join().unwrap().unwrap(), 2);
}
