//! Multi-process runs under `mpirun` (feature `mpi`): rank and world from MPI, the same steps
//! as the in-process `ddp` run and the TCP star, `fast` within its stated distance of
//! `exact`, SIGKILL and SIGSTOP of a rank that end the job within the bound and name the
//! rank, exact resume after each, and a refused join.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use burn_mpric_train::checkpoint;

use crate::common::{fresh_dir, metrics, run_ok, write_recipe};
#[cfg(feature = "ddp")]
use crate::processes::train_ddp;
use crate::processes::{
    assert_same_steps, children_of, final_params, finish_within, recipe, running, text,
};

/// `mpirun -np N` from `dir`, each line tagged with its rank.
fn mpirun(dir: &Path, np: usize) -> Command {
    let mut cmd = burn_mpric_cluster::mpirun(np);
    cmd.current_dir(dir);
    cmd
}

/// `mpirun -np N mpric train <recipe> -q <extra>`, started.
fn spawn_mpi(dir: &Path, np: usize, recipe: &Path, extra: &[&str]) -> Child {
    mpirun(dir, np)
        .arg(env!("CARGO_BIN_EXE_mpric"))
        .args(["train", recipe.to_str().unwrap(), "-q"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mpirun runs (apt-get install openmpi-bin)")
}

/// Runs `mpirun -np N mpric train ...` to its end, at most 3 minutes.
fn run_mpi(dir: &Path, np: usize, recipe: &Path, extra: &[&str]) -> Output {
    finish_within(
        spawn_mpi(dir, np, recipe, extra),
        Duration::from_secs(180),
        "mpirun",
    )
}

fn run_mpi_ok(dir: &Path, np: usize, recipe: &Path, extra: &[&str]) -> String {
    let out = run_mpi(dir, np, recipe, extra);
    assert!(
        out.status.success(),
        "mpirun -np {np} {extra:?}: {}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// The `mpric` processes `mpirun` (process `launcher`) started, by rank.
fn ranks_of(launcher: u32, world: usize) -> Vec<u32> {
    let started = Instant::now();
    loop {
        let mut ranks: Vec<(usize, u32)> = descendants(launcher)
            .into_iter()
            .filter_map(|pid| {
                let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
                let rank = env
                    .split(|&b| b == 0)
                    .filter_map(|kv| std::str::from_utf8(kv).ok())
                    .find_map(|kv| kv.strip_prefix("OMPI_COMM_WORLD_RANK="))?
                    .parse()
                    .ok()?;
                Some((rank, pid))
            })
            .collect();
        ranks.sort();
        if ranks.len() == world {
            return ranks.into_iter().map(|(_, pid)| pid).collect();
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "mpirun's processes: {ranks:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn descendants(pid: u32) -> Vec<u32> {
    let mut all = Vec::new();
    let mut next = vec![pid];
    while let Some(p) = next.pop() {
        for child in children_of(p) {
            all.push(child);
            next.push(child);
        }
    }
    all
}

fn signal(pid: u32, name: &str) {
    let ok = Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -{name} {pid}");
}

/// Two processes started by `mpirun`, no rank flags: the in-process `ddp` run's steps, bit
/// for bit (`exact`); rank 1 (given another output folder through MPMD) writes nothing.
#[cfg(feature = "ddp")]
#[test]
fn mpirun_two_processes_take_the_in_process_ddp_run_s_steps_bit_for_bit() {
    let dir = fresh_dir("mpi-2");
    let ddp = train_ddp(&dir, 40, 10, "[0, 0]");
    let one = write_recipe(&dir, "r.toml", &recipe(40, 10, "[0]", ""));
    let mpric = env!("CARGO_BIN_EXE_mpric");
    let r = one.to_str().unwrap();
    let out = finish_within(
        mpirun(&dir, 1)
            .args([
                mpric, "train", r, "-q", ":", "-np", "1", mpric, "train", r, "-q",
            ])
            .args(["--set", "output=rank1"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
        Duration::from_secs(180),
        "mpirun",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        !dir.join("rank1").exists(),
        "rank 1 wrote its output folder"
    );
    let (m_ddp, m) = (metrics(&ddp), metrics(&dir.join("out")));
    assert!(m.steps.iter().any(|r| r.skipped), "no step was skipped");
    assert_same_steps(&m_ddp, &m);
    assert_eq!(final_params(&ddp), final_params(&dir.join("out")));
    let last = m.steps.last().unwrap();
    assert!(
        text(&out.stdout).contains(&format!(
            "rank 1 of 2: steps 0 -> 40, skipped steps {}, final loss scale {}",
            last.skipped_total, last.loss_scale
        )),
        "{}",
        text(&out.stdout)
    );
}

/// Three processes on two cores: `exact` over MPI adds as the TCP star does, bit for bit;
/// `fast` (MPI_Allreduce, which may regroup a sum of three) takes the same decisions, its
/// losses within 1e-5 relative and its parameters within 1e-4.
#[test]
fn three_mpi_processes_add_as_the_star_and_fast_stays_within_its_tolerance() {
    let dir = fresh_dir("mpi-3");
    let path = write_recipe(&dir, "r.toml", &recipe(40, 40, "[0]", ""));
    let p = path.to_str().unwrap();
    run_mpi_ok(&dir, 3, &path, &["--set", "output=exact"]);
    run_mpi_ok(
        &dir,
        3,
        &path,
        &["--set", "output=fast", "--reduce", "fast"],
    );
    run_ok(&dir, &["launch", "3", p, "-q", "--set", "output=star"]);
    let (exact, fast, star) = (dir.join("exact"), dir.join("fast"), dir.join("star"));
    assert_same_steps(&metrics(&star), &metrics(&exact));
    assert_eq!(final_params(&star), final_params(&exact));

    let (a, b) = (metrics(&exact), metrics(&fast));
    assert!(a.steps.iter().any(|r| r.skipped), "no step was skipped");
    for (x, y) in a.steps.iter().zip(&b.steps) {
        assert_eq!((x.skipped, x.loss_scale), (y.skipped, y.loss_scale));
        if let (Some(p), Some(q)) = (x.loss, y.loss) {
            assert!(
                (p - q).abs() <= 1e-5 * p.abs(),
                "step {}: {p} vs {q}",
                x.step
            );
        }
    }
    let worst = final_params(&exact)
        .iter()
        .flatten()
        .zip(final_params(&fast).iter().flatten())
        .map(|(p, q)| (p - q).abs())
        .fold(0f32, f32::max);
    assert!(worst <= 1e-4, "fast differs from exact by up to {worst}");
    eprintln!("fast vs exact, 3 processes, 40 steps: largest parameter difference {worst:e}");
}

/// SIGKILL of rank 1, then (resumed) SIGSTOP of rank 1, then of rank 0: each time the job
/// ends non-zero within the bound, a line names the lost rank, every checkpoint verifies, and
/// the run resumed after all three equals the uninterrupted run bit for bit.
#[test]
fn a_killed_or_stopped_rank_ends_the_job_within_the_bound_and_the_run_resumes_bit_for_bit() {
    let dir = fresh_dir("mpi-faults");
    let steps = 1500;
    let path = write_recipe(&dir, "r.toml", &recipe(steps, 50, "[0]", ""));
    let output = dir.join("out");
    let mut reached = 0;
    // (signal, victim, what a line of the job's stderr says, the bound on the job's end)
    let faults = [
        ("KILL", 1, "rank 1", Duration::from_secs(15)),
        ("STOP", 1, "rank 1 did not", Duration::from_secs(15)),
        ("STOP", 0, "rank 0 did not", Duration::from_secs(15)),
    ];
    for (sig, victim, says, bound) in faults {
        let mut extra = vec!["--timeout", "2"];
        if reached > 0 {
            extra.push("--resume");
        }
        let job = spawn_mpi(&dir, 2, &path, &extra);
        let pids = ranks_of(job.id(), 2);
        let mut job = job;
        let started = Instant::now();
        while checkpoint::latest(&output).unwrap().map_or(0, |c| c.step) < reached + 200 {
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "no checkpoint appeared"
            );
            assert!(
                job.try_wait().unwrap().is_none(),
                "the run ended before the fault"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        signal(pids[victim], sig);
        let hit = Instant::now();
        let out = finish_within(job, bound, "the job after a fault");
        let took = hit.elapsed();
        let stderr = text(&out.stderr);
        assert!(!out.status.success(), "{sig} of rank {victim}: {stderr}");
        assert!(stderr.contains(says), "{sig} of rank {victim}: {stderr}");
        // No process of the job outlives it (a stopped one included).
        let cleanup = Instant::now();
        while pids.iter().any(|&pid| running(pid)) {
            if cleanup.elapsed() > Duration::from_secs(5) {
                pids.iter().for_each(|&pid| {
                    let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
                });
                panic!("a process of the job outlived it after {sig}");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        eprintln!("{sig} of rank {victim}: the job ended {took:?} after it");

        let step = checkpoint::latest(&output).unwrap().unwrap().step;
        assert!(step > reached && step < steps, "stopped at {step}");
        reached = step;
        for found in checkpoint::list(&output).unwrap() {
            found
                .verify()
                .unwrap_or_else(|e| panic!("{}: {e}", found.dir.display()));
        }
    }
    let out = run_mpi_ok(&dir, 2, &path, &["--resume"]);
    let _ = out;
    run_mpi_ok(&dir, 2, &path, &["--set", "output=straight"]);
    assert_same_steps(&metrics(&output), &metrics(&dir.join("straight")));
    assert_eq!(final_params(&output), final_params(&dir.join("straight")));
}

/// A rank started with another recipe field: every rank refuses the run naming the rank and
/// the field, and exits 2; a resume with another number of processes is refused.
#[test]
fn an_mpi_rank_with_another_recipe_is_refused_by_every_rank() {
    let dir = fresh_dir("mpi-refused");
    let path = write_recipe(&dir, "r.toml", &recipe(20, 10, "[0]", ""));
    let (mpric, r) = (env!("CARGO_BIN_EXE_mpric"), path.to_str().unwrap());
    let out = finish_within(
        mpirun(&dir, 1)
            .args([
                mpric, "train", r, "-q", ":", "-np", "1", mpric, "train", r, "-q",
            ])
            .args(["--set", "seed=1"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
        Duration::from_secs(60),
        "a refused job",
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let said = "rank 1 was refused, so the run does not start: `seed` is 0 in the run and 1 here";
    for rank in [0, 1] {
        assert!(
            stderr.contains(&format!(
                "[1,{rank}]<stderr>:error: rank {rank} of 2: {said}"
            )),
            "rank {rank}: {stderr}"
        );
    }
    assert!(
        !dir.join("out").join("checkpoints").exists()
            || checkpoint::latest(&dir.join("out")).unwrap().is_none()
    );

    run_mpi_ok(&dir, 2, &path, &["--until", "10"]);
    let out = run_mpi(&dir, 3, &path, &["--resume"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("the run was trained by 2 process(es) of 1 device(s), this one has 3"),
        "{stderr}"
    );
}
