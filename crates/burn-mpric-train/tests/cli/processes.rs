//! Multi-process runs, as real `mpric` processes on loopback: the same steps as the
//! in-process `ddp` run, one writer, one skip decision, killed and absent ranks that end the
//! others within the timeout, exact resume, refused joins and stray connections.

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

use burn_mpric_train::checkpoint;
use burn_mpric_train::report::metrics::{MetricsFile, StepRow};

use crate::common::{fresh_dir, metrics, mpric, run, run_ok, write_recipe};

/// Iris with f16 compute and a first loss scale of 1e9: the first steps overflow, so skips
/// and back-offs are part of what the processes must agree on.
pub(crate) fn recipe(steps: u64, checkpoint_every: u64, devices: &str, strategy: &str) -> String {
    format!(
        r#"seed = 0
batch_size = 32
steps = {steps}
checkpoint_every = {checkpoint_every}
output = "out"
policy = "mixed_f16"
loss_scale = {{ preset = "torch", initial_scale = 1e9, growth_interval = 4 }}
{strategy}
[model]
kind = "mlp"
hidden = [16]

[dataset]
name = "iris"

[backend]
name = "flex"
devices = {devices}

[optimizer]
kind = "adam"
lr = 0.01
"#
    )
}

/// A free port on loopback for a coordinator.
pub(crate) fn free_port() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().to_string()
}

/// `mpric train <recipe> -q` as rank `rank` of `world`, with `extra` arguments.
fn spawn_rank(
    dir: &Path,
    recipe: &Path,
    world: usize,
    rank: usize,
    addr: &str,
    extra: &[&str],
) -> Child {
    mpric(dir)
        .args(["train", recipe.to_str().unwrap(), "-q"])
        .args(["--world", &world.to_string(), "--rank", &rank.to_string()])
        .args(["--coordinator", addr])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits for a process, at most `bound`; kills it and fails when it takes longer.
pub(crate) fn finish_within(child: Child, bound: Duration, what: &str) -> Output {
    let started = Instant::now();
    let mut child = child;
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > bound {
            let _ = child.kill();
            panic!("{what} still ran after {bound:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child.wait_with_output().unwrap()
}

pub(crate) fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// What each step decided and measured, wall time aside.
fn decided(row: &StepRow) -> impl PartialEq + std::fmt::Debug {
    (
        row.step,
        row.loss.map(f32::to_bits),
        row.accuracy.map(f32::to_bits),
        row.loss_scale.to_bits(),
        row.skipped,
        row.skipped_total,
        row.lr.to_bits(),
        row.overflowed.clone(),
    )
}

pub(crate) fn assert_same_steps(a: &MetricsFile, b: &MetricsFile) {
    assert_eq!(a.steps.len(), b.steps.len());
    for (x, y) in a.steps.iter().zip(&b.steps) {
        assert_eq!(decided(x), decided(y), "step {}", x.step);
    }
    assert_eq!(a.eval, b.eval);
}

/// Trains `recipe(steps, checkpoint_every, devices)` in one process with `strategy = "ddp"`
/// (one replica per device) into `dir/ddp`, and returns that output folder.
#[cfg(feature = "ddp")]
pub(crate) fn train_ddp(dir: &Path, steps: u64, checkpoint_every: u64, devices: &str) -> PathBuf {
    let text = recipe(steps, checkpoint_every, devices, "strategy = \"ddp\"");
    let path = write_recipe(dir, "ddp.toml", &text.replace("\"out\"", "\"ddp\""));
    run_ok(dir, &["train", path.to_str().unwrap(), "-q"]);
    dir.join("ddp")
}

/// The parameters of the newest checkpoint in `output`, verified.
pub(crate) fn final_params(output: &Path) -> Vec<Vec<f32>> {
    let latest = checkpoint::latest(output).unwrap().unwrap();
    latest.verify().unwrap().params
}

#[cfg(feature = "ddp")]
#[test]
fn two_processes_take_the_in_process_ddp_run_s_steps_bit_for_bit_and_only_rank_0_writes() {
    let dir = fresh_dir("processes-2x1");
    let ddp = train_ddp(&dir, 40, 10, "[0, 0]");
    let one = write_recipe(&dir, "r.toml", &recipe(40, 10, "[0]", ""));

    // Rank 1 is given another output folder (only the recipe's other fields must agree): it
    // must not appear.
    let addr = free_port();
    let rank0 = spawn_rank(&dir, &one, 2, 0, &addr, &[]);
    let rank1 = spawn_rank(&dir, &one, 2, 1, &addr, &["--set", "output=rank1"]);
    // A stray connection sending garbage while the run goes on changes nothing.
    if let Ok(mut stray) = TcpStream::connect(&addr) {
        let _ = stray.write_all(b"GET / HTTP/1.1\r\n\r\n");
    }
    let (a, b) = (
        finish_within(rank0, Duration::from_secs(120), "rank 0"),
        finish_within(rank1, Duration::from_secs(120), "rank 1"),
    );
    assert!(a.status.success(), "{}", text(&a.stderr));
    assert!(b.status.success(), "{}", text(&b.stderr));
    assert!(
        !dir.join("rank1").exists(),
        "rank 1 wrote its output folder"
    );

    let (m_ddp, m) = (metrics(&ddp), metrics(&dir.join("out")));
    assert!(m.steps.iter().any(|r| r.skipped), "no step was skipped");
    assert_same_steps(&m_ddp, &m);
    assert_eq!(final_params(&ddp), final_params(&dir.join("out")));
    // Rank 1 says what it decided: the same skips and final scale.
    let last = m.steps.last().unwrap();
    assert_eq!(
        text(&b.stdout).trim(),
        format!(
            "rank 1 of 2: steps 0 -> 40, skipped steps {}, final loss scale {}",
            last.skipped_total, last.loss_scale
        )
    );
}

/// bf16 optimizer state and stochastically rounded bf16 parameters: every process draws the
/// same rounding stream, so two processes take the in-process `ddp` run's steps bit for bit
/// and end with the same bf16 parameters.
#[cfg(feature = "ddp")]
#[test]
fn two_processes_with_bf16_state_and_stochastic_master_weights_take_the_ddp_run_s_steps() {
    let dir = fresh_dir("processes-bf16");
    let bf16 = |text: String| {
        text.replacen(
            "lr = 0.01",
            "lr = 0.01\nstate = \"bf16\"\nmaster = \"stochastic\"",
            1,
        )
    };
    let ddp_text =
        bf16(recipe(20, 10, "[0, 0]", "strategy = \"ddp\"")).replace("\"out\"", "\"ddp\"");
    let ddp = write_recipe(&dir, "ddp.toml", &ddp_text);
    run_ok(&dir, &["train", ddp.to_str().unwrap(), "-q"]);
    let one = write_recipe(&dir, "r.toml", &bf16(recipe(20, 10, "[0]", "")));
    run_ok(&dir, &["launch", "2", one.to_str().unwrap(), "-q"]);

    let (m_ddp, m) = (metrics(&dir.join("ddp")), metrics(&dir.join("out")));
    assert_same_steps(&m_ddp, &m);
    let params = final_params(&dir.join("out"));
    assert_eq!(final_params(&dir.join("ddp")), params);
    let values: Vec<f32> = params.iter().flatten().copied().collect();
    assert!(!values.is_empty() && values.iter().all(|v| v.to_bits() & 0xffff == 0));
}

/// The same recipe in one process and in two: at f32 the two shards' gradients add up to the
/// whole batch's within rounding, so the curves agree to a few units in the last place.
#[test]
fn two_processes_follow_the_one_process_run_of_the_same_recipe() {
    let dir = fresh_dir("processes-curve");
    let text = recipe(60, 30, "[0]", "").replace("\"mixed_f16\"", "\"f32\"");
    let path = write_recipe(&dir, "r.toml", &text);
    let path = path.to_str().unwrap();
    run_ok(&dir, &["train", path, "-q", "--set", "output=one"]);
    run_ok(&dir, &["launch", "2", path, "-q", "--set", "output=two"]);
    let (a, b) = (metrics(&dir.join("one")), metrics(&dir.join("two")));
    assert_eq!(a.steps.len(), 60);
    assert_eq!(a.steps.len(), b.steps.len());
    let close = |p: f32, q: f32| (p - q).abs() <= 1e-5 * p.abs().max(1e-3);
    for (x, y) in a.steps.iter().zip(&b.steps) {
        assert_eq!((x.skipped, x.loss_scale), (y.skipped, y.loss_scale));
        assert!(
            close(x.loss.unwrap(), y.loss.unwrap()),
            "step {}: {:?} {:?}",
            x.step,
            x.loss,
            y.loss
        );
    }
    for (x, y) in a.eval.iter().zip(&b.eval) {
        assert!(close(x.loss.unwrap(), y.loss.unwrap()), "{x:?} {y:?}");
    }
}

/// burn-collective's tree all-reduce takes the replicas in the order of a `HashMap` (a
/// different order in each process), so a 4-replica `ddp` run's sums round differently from
/// run to run; the processes add in rank order. Every decision is the same, the loss within
/// a few units in the last place.
#[cfg(feature = "ddp")]
#[test]
fn two_processes_of_two_devices_follow_the_four_replica_ddp_run() {
    let dir = fresh_dir("processes-2x2");
    let ddp = train_ddp(&dir, 40, 40, "[0, 0, 0, 0]");
    // Launched on one machine, the two processes split the four devices.
    let two = write_recipe(&dir, "r.toml", &recipe(40, 40, "[0, 0, 0, 0]", ""));
    let out = run_ok(&dir, &["launch", "2", two.to_str().unwrap(), "-q"]);
    assert!(out.contains("[rank 1] rank 1 of 2: steps 0 -> 40"), "{out}");

    let (a, b) = (metrics(&ddp), metrics(&dir.join("out")));
    assert_eq!(a.steps.len(), b.steps.len());
    assert!(b.steps.iter().any(|r| r.skipped), "no step was skipped");
    for (x, y) in a.steps.iter().zip(&b.steps) {
        let same = |r: &StepRow| (r.accuracy, r.loss_scale, r.skipped, r.overflowed.clone());
        assert_eq!(same(x), same(y), "step {}", x.step);
        if let (Some(p), Some(q)) = (x.loss, y.loss) {
            assert!(
                (p - q).abs() <= 1e-5 * p.abs(),
                "step {}: {p} vs {q}",
                x.step
            );
        }
    }
    for (x, y) in a.eval.iter().zip(&b.eval) {
        assert_eq!(x.accuracy, y.accuracy);
        let (p, q) = (x.loss.unwrap(), y.loss.unwrap());
        assert!((p - q).abs() <= 1e-4 * p.abs(), "held-out {p} vs {q}");
    }
}

/// A batch of two over two processes: each holds one example, so the poisoned one (a target
/// of 1e30 among values near 1, whose f16 gradient overflows at the static scale) is in one
/// process's shard; the step is skipped on both, as the one-process run skips it.
#[test]
fn a_poisoned_example_in_one_process_s_shard_skips_the_step_on_every_process() {
    let dir = fresh_dir("processes-poison");
    let mut csv = String::from("x1,x2,y\n");
    for i in 0..20 {
        let (x1, x2) = ((i as f32 * 0.37).sin(), (i as f32 * 0.91).cos());
        let y = if i == 7 { 1e30 } else { x1 + 0.5 * x2 };
        csv.push_str(&format!("{x1:.4},{x2:.4},{y}\n"));
    }
    std::fs::write(dir.join("poison.csv"), csv).unwrap();
    let path = write_recipe(
        &dir,
        "p.toml",
        r#"seed = 0
batch_size = 2
epochs = 4
output = "one"
policy = "mixed_f16"
loss_scale = "static:32768"

[model]
kind = "mlp"
hidden = [8]

[dataset]
kind = "csv"
path = "poison.csv"
target = "y"
task = "regression"
eval_fraction = 0.2

[optimizer]
kind = "sgd"
lr = 0.01
"#,
    );
    let path = path.to_str().unwrap();
    run_ok(&dir, &["train", path, "-q"]);
    let out = run_ok(&dir, &["launch", "2", path, "-q", "--set", "output=two"]);

    let skips = |m: &MetricsFile| -> Vec<u64> {
        m.steps
            .iter()
            .filter(|r| r.skipped)
            .map(|r| r.step)
            .collect()
    };
    // The same with the skip decided on each process's device and read every 3 steps: the
    // flag comes from the summed gradients, the same on every process.
    run_ok(
        &dir,
        &[
            "launch",
            "2",
            path,
            "-q",
            "--set",
            "output=three",
            "--set",
            "sync_every=3",
        ],
    );
    let (one, two) = (metrics(&dir.join("one")), metrics(&dir.join("two")));
    // Once per epoch, where the poisoned example falls.
    assert_eq!(skips(&two).len(), 4, "{:?}", skips(&two));
    assert_eq!(skips(&one), skips(&two));
    assert_eq!(skips(&metrics(&dir.join("three"))), skips(&one));
    assert!(
        out.contains(
            "[rank 1] rank 1 of 2: steps 0 -> 32, skipped steps 4, final loss scale 32768"
        ),
        "{out}"
    );
}

#[test]
fn a_killed_process_ends_the_other_within_the_timeout_and_the_run_resumes_bit_for_bit() {
    let dir = fresh_dir("processes-kill");
    let steps = 1500;
    let path = write_recipe(&dir, "r.toml", &recipe(steps, 50, "[0]", ""));
    let output = dir.join("out");
    let timeout = ["--timeout", "5"];

    // Kill rank 1, then (resumed) rank 0: the survivor ends at once, naming the lost rank.
    let mut killed_at = 0;
    for (victim, survivor_says) in [(1, "rank 1 was lost"), (0, "lost rank 0")] {
        let addr = free_port();
        let mut extra: Vec<&str> = timeout.to_vec();
        if killed_at > 0 {
            extra.push("--resume");
        }
        let mut ranks = vec![
            spawn_rank(&dir, &path, 2, 0, &addr, &extra),
            spawn_rank(&dir, &path, 2, 1, &addr, &extra),
        ];
        let started = Instant::now();
        while checkpoint::latest(&output).unwrap().map_or(0, |c| c.step) < killed_at + 200 {
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "no checkpoint appeared"
            );
            assert!(
                ranks[0].try_wait().unwrap().is_none(),
                "the run ended before the kill"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        let mut killed = ranks.remove(victim);
        killed.kill().unwrap(); // SIGKILL
        let _ = killed.wait();
        let survivor = finish_within(ranks.remove(0), Duration::from_secs(15), "the survivor");
        let stderr = text(&survivor.stderr);
        assert_eq!(survivor.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains(survivor_says), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");

        let step = checkpoint::latest(&output).unwrap().unwrap().step;
        assert!(step > killed_at && step < steps, "killed at {step}");
        killed_at = step;
        for found in checkpoint::list(&output).unwrap() {
            found
                .verify()
                .unwrap_or_else(|e| panic!("{}: {e}", found.dir.display()));
        }
    }

    let out = run_ok(
        &dir,
        &["launch", "2", path.to_str().unwrap(), "-q", "--resume"],
    );
    assert!(
        out.contains(&format!("steps {killed_at} -> {steps}")),
        "{out}"
    );
    run_ok(
        &dir,
        &[
            "launch",
            "2",
            path.to_str().unwrap(),
            "-q",
            "--set",
            "output=straight",
        ],
    );
    assert_same_steps(&metrics(&output), &metrics(&dir.join("straight")));
    assert_eq!(final_params(&output), final_params(&dir.join("straight")));
}

#[test]
fn a_process_with_another_recipe_or_world_is_refused_by_every_process() {
    let dir = fresh_dir("processes-refused");
    let path = write_recipe(&dir, "r.toml", &recipe(20, 10, "[0]", ""));
    // Rank 1's world, its other arguments, and what both ranks' last line names.
    for (world, other, names) in [
        (
            2,
            vec!["--set", "optimizer.lr=0.02"],
            "`optimizer.lr` is 0.01 in the run and 0.02 here",
        ),
        (
            2,
            vec!["--set", "seed=1"],
            "`seed` is 0 in the run and 1 here",
        ),
        (3, vec![], "the run has 2 ranks, this process expects 3"),
    ] {
        let addr = free_port();
        let rank0 = spawn_rank(&dir, &path, 2, 0, &addr, &["--overwrite"]);
        let rank1 = spawn_rank(&dir, &path, world, 1, &addr, &other);
        for (rank, child) in [(1, rank1), (0, rank0)] {
            let out = finish_within(child, Duration::from_secs(30), "a refused run");
            let stderr = text(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "rank {rank}: {stderr}");
            let line = stderr.lines().last().unwrap_or_default();
            assert!(line.contains(names), "rank {rank}: {stderr}");
        }
    }
}

#[test]
fn a_process_that_never_joins_ends_the_others_within_the_join_timeout() {
    let dir = fresh_dir("processes-absent");
    let path = write_recipe(&dir, "r.toml", &recipe(20, 10, "[0]", ""));
    // --timeout 1: joining may take 2 s.
    let alone = spawn_rank(&dir, &path, 2, 0, &free_port(), &["--timeout", "1"]);
    let out = finish_within(alone, Duration::from_secs(20), "rank 0 alone");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(
        stderr.trim(),
        "error: rank 0 of 2: the run was stopped: rank 1 did not join within 2 s"
    );
    let alone = spawn_rank(&dir, &path, 2, 1, &free_port(), &["--timeout", "1"]);
    let out = finish_within(alone, Duration::from_secs(20), "rank 1 alone");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.starts_with("error: rank 1 of 2: lost rank 0, the coordinator at"),
        "{stderr}"
    );
}

/// A launcher killed mid-run takes its processes with it (left alone they would train on,
/// holding the output folder and the port), and the relaunched run resumes; a launched
/// process whose launcher is gone says so.
#[cfg(target_os = "linux")]
#[test]
fn a_killed_launcher_takes_its_processes_with_it() {
    let dir = fresh_dir("processes-launcher");
    // Long enough that orphans would still train when the test gives up on them.
    let steps = 100_000;
    let path = write_recipe(&dir, "r.toml", &recipe(steps, 50, "[0]", ""));
    let output = dir.join("out");
    let mut launcher = mpric(&dir)
        .args(["launch", "2", path.to_str().unwrap(), "-q"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while checkpoint::latest(&output).unwrap().map_or(0, |c| c.step) < 200 {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "no checkpoint appeared"
        );
        assert!(
            launcher.try_wait().unwrap().is_none(),
            "the run ended before the kill"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let ranks = children_of(launcher.id());
    assert_eq!(ranks.len(), 2, "the launcher's processes: {ranks:?}");
    launcher.kill().unwrap(); // SIGKILL: the launcher cannot pass anything on
    let _ = launcher.wait();
    let killed = Instant::now();
    while ranks.iter().any(|&pid| running(pid)) {
        if killed.elapsed() > Duration::from_secs(10) {
            for pid in &ranks {
                let _ = std::process::Command::new("kill")
                    .args(["-9", &pid.to_string()])
                    .status();
            }
            panic!("a process of the killed launcher still ran after 10 s");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let step = checkpoint::latest(&output).unwrap().unwrap().step;
    let until = (step + 100).to_string();
    let out = run_ok(
        &dir,
        &[
            "launch",
            "2",
            path.to_str().unwrap(),
            "-q",
            "--resume",
            "--until",
            &until,
        ],
    );
    assert!(out.contains(&format!("steps {step} -> {until}")), "{out}");

    // The line a launched process prints, seen from a process whose "launcher" is this test.
    let mut orphan = mpric(&dir)
        .args(["train", path.to_str().unwrap(), "-q", "--overwrite"])
        .args(["--world", "2", "--rank", "0", "--coordinator", &free_port()])
        .env("MPRIC_LAUNCHER", "4242")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(orphan.stdin.take());
    let out = finish_within(orphan, Duration::from_secs(10), "the orphan");
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr).trim(),
        "error: rank 0 of 2: its launcher (process 4242) ended, so it stops"
    );
}

/// The processes whose parent is `parent`, from `/proc`.
#[cfg(target_os = "linux")]
pub(crate) fn children_of(parent: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| stat(pid).is_some_and(|(_, ppid)| ppid == parent))
        .collect()
}

/// Whether `pid` is a process that has not ended (a zombie has).
#[cfg(target_os = "linux")]
pub(crate) fn running(pid: u32) -> bool {
    stat(pid).is_some_and(|(state, _)| state != 'Z' && state != 'X')
}

/// A process's state and parent, from `/proc/<pid>/stat` (`pid (name) state ppid ...`; the
/// name may hold spaces and parentheses, so the fields are read after the last `)`).
#[cfg(target_os = "linux")]
pub(crate) fn stat(pid: u32) -> Option<(char, u32)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut fields = text.get(text.rfind(')')? + 1..)?.split_whitespace();
    let state = fields.next()?.chars().next()?;
    Some((state, fields.next()?.parse().ok()?))
}

#[test]
fn a_run_resumes_only_with_its_number_of_processes_and_bad_flags_are_refused() {
    let dir = fresh_dir("processes-world");
    let path = write_recipe(&dir, "r.toml", &recipe(20, 10, "[0]", ""));
    let path = path.to_str().unwrap();
    run_ok(&dir, &["launch", "2", path, "-q", "--until", "10"]);
    let out = run(&dir, &["train", path, "-q", "--resume"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "the run was trained by 2 process(es) of 1 device(s), this one has 1 process(es); resume with --world 2"
        ),
        "{stderr}"
    );

    for (args, says) in [
        (
            vec!["--world", "2", "--rank", "2"],
            "--rank 2: a run of 2 processes has ranks 0 to 1",
        ),
        (vec!["--rank", "1"], "--rank 1 needs --world"),
        (vec!["--world", "2"], "--world 2 needs --rank"),
        (
            vec!["--world", "2", "--rank", "0", "--timeout", "0"],
            "--timeout 0",
        ),
        (
            vec!["--world", "40", "--rank", "0"],
            "need a batch_size of at least 40",
        ),
        (
            vec!["--world", "5000", "--rank", "0"],
            "a run has 1 to 1024 processes",
        ),
    ] {
        let mut all = vec!["train", path, "-q"];
        all.extend(args);
        let out = run(&dir, &all);
        assert_eq!(out.status.code(), Some(2), "{all:?}");
        assert!(text(&out.stderr).contains(says), "{}", text(&out.stderr));
    }
    let out = run(&dir, &["launch", "2", path, "--rank", "1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("--rank is set by the launcher"),
        "{}",
        text(&out.stderr)
    );
}
