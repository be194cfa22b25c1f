//! Developer tasks, run as `cargo xtask <command>`.
//!
//! - `check`: the Vulkan and MPI preflights (burn-mpric-preflight, `mpi.rs`), the layout
//!   rules (no import circles, a Burn-independent core; see `layout.rs`), the documentation
//!   rules (no path outside the repository, relative links that resolve, the op table's
//!   document; see `docs.rs`), formatting, lints and the whole test suite with the MPI
//!   transport built in (`mpi::FEATURES`), as CI runs them; the export test's Python
//!   (`python.rs`) is installed into `target/python` first.
//! - `burn023`: the Burn 0.22 edition's tests against Burn 0.23.0-pre.1 (outside CI; see
//!   `burn023.rs`).
//! - `bench`: builds the benchmark suite (`mpric-bench`) in release mode and runs it; the
//!   report goes to `target/bench/` (`report.md`, `report.json`, `report.svg`);
//!   `--allreduce` (`mpi.rs`) and `--inference` (`inference.rs`) run their own comparisons.

mod burn023;
mod docs;
mod inference;
mod layout;
mod mpi;
mod python;

use std::path::Path;
use std::process::{Command, ExitCode};

use burn_mpric_preflight::Vulkan;

fn cargo(args: &[&str]) -> Result<(), String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    eprintln!("$ cargo {}", args.join(" "));
    let status = Command::new(&cargo)
        .args(args)
        .status()
        .map_err(|e| format!("could not start `{cargo}`: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`cargo {}` failed ({status})", args.join(" ")))
    }
}

/// What needs a Vulkan adapter when `cargo xtask check` runs.
const WGPU_TESTS: &str = "the wgpu tests";

/// On Linux, the wgpu tests need a Vulkan loader (`libvulkan.so.1`) and a driver (an ICD
/// manifest). Without them they fail deep inside cubecl; this says what is missing first.
fn vulkan_preflight() -> Result<(), String> {
    match Vulkan::probe().missing() {
        Some(missing) => Err(missing.message(WGPU_TESTS)),
        None => Ok(()),
    }
}

fn check() -> Result<(), String> {
    vulkan_preflight()?;
    mpi::preflight()?;
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .ok_or("xtask has no parent directory")?;
    layout::check(root)?;
    docs::check(root)?;
    cargo(&["fmt", "--all", "--", "--check"])?;
    // One feature set for lints and tests, so that both share one build: the MPI transport
    // and its tests under `mpirun` are in it.
    cargo(&[
        "clippy",
        "--workspace",
        "--all-targets",
        "--features",
        mpi::FEATURES,
        "--",
        "-D",
        "warnings",
    ])?;
    if let Some(python) = python::prepare(root) {
        // SAFETY: as below.
        unsafe { std::env::set_var("MPRIC_PYTHON", python) };
    }
    for (key, value) in burn_mpric_cluster::MPIRUN_ENV {
        if std::env::var_os(key).is_none() {
            // SAFETY: xtask runs one thread here; the variables reach the MPI tests.
            unsafe { std::env::set_var(key, value) };
        }
    }
    cargo(&["test", "--workspace", "--features", mpi::FEATURES])
}

/// A benchmark with a report of its own: `(cargo, workspace root, arguments)`.
type Comparison = fn(&str, &Path, &[String]) -> Result<(), String>;

/// `cargo run --release -p burn-mpric-bench -- ARGS`, with the report in the workspace's
/// `target/bench` unless `--out` is given, the `cuda` feature when `--backend cuda` is, and
/// the `fusion` feature (Burn's default kernel fusion and autotuning) for `--fusion`.
fn bench(args: &[String]) -> Result<(), String> {
    // The comparisons with their own reports: the all-reduce, inference at half precision.
    let special: Option<Comparison> = match args.first().map(String::as_str) {
        Some("--allreduce") => Some(mpi::bench),
        Some("--inference") => Some(inference::bench),
        _ => None,
    };
    if let Some(run) = special {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .ok_or("xtask has no parent directory")?;
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        return run(&cargo, root, &args[1..]);
    }
    let mut cmd: Vec<String> = ["run", "--release", "-p", "burn-mpric-bench"]
        .map(String::from)
        .to_vec();
    let cuda = args
        .windows(2)
        .any(|w| w[0] == "--backend" && w[1] == "cuda")
        || args.iter().any(|a| a == "--backend=cuda");
    let fusion = args.iter().any(|a| a == "--fusion");
    let features: Vec<&str> = [(cuda, "cuda"), (fusion, "fusion")]
        .into_iter()
        .filter_map(|(on, feature)| on.then_some(feature))
        .collect();
    if !features.is_empty() {
        cmd.extend(["--features".to_string(), features.join(",")]);
    }
    cmd.push("--".into());
    cmd.extend(args.iter().filter(|a| *a != "--fusion").cloned());
    if !args.iter().any(|a| a == "--out" || a.starts_with("--out=")) {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .ok_or("xtask has no parent directory")?;
        cmd.push("--out".into());
        cmd.push(root.join("target").join("bench").display().to_string());
    }
    let cmd: Vec<&str> = cmd.iter().map(String::as_str).collect();
    cargo(&cmd)
}

const USAGE: &str = "usage: cargo xtask <command>

commands:
  check    layout and documentation rules, cargo fmt --check, clippy -D warnings, and the
           whole test suite
  burn023  the Burn 0.22 edition (burn-mpric-022) built and tested against Burn
           0.23.0-pre.1 in target/burn023/ (not part of `check`; arguments go to
           `cargo test`)
  bench    the benchmark suite in release mode; report in target/bench/
           options: --full, --backend flex|wgpu|cuda, --workload NAME (both repeatable),
           --out DIR, --fusion (Wgpu and CUDA with Burn's default kernel fusion and
           autotuning); `cargo xtask bench --help` lists them all
  bench --allreduce [--sizes N,M] [--reps N]
           instead: the cost of one step's all-reduce under mpirun (MPI exact, MPI fast,
           the TCP star) for 2, 3 and 4 processes; report in target/bench/allreduce.md
  bench --inference [--reps N]
           instead: trained recipes evaluated at f32, mixed and pure bf16/f16 (metric
           change, weight bytes, time); report in target/bench/inference.md";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("check") => check(),
        Some("bench") => bench(&args[1..]),
        Some("burn023") => Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .ok_or_else(|| "xtask has no parent directory".to_string())
            .and_then(|root| burn023::run(root, &args[1..])),
        Some("-h" | "--help" | "help") => {
            println!("{USAGE}");
            Ok(())
        }
        Some(other) => Err(format!("unknown command `{other}`\n\n{USAGE}")),
        None => Err(USAGE.to_string()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::from(2)
        }
    }
}
