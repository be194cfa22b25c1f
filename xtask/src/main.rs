//! Developer tasks, run as `cargo xtask <command>`.
//!
//! - `check`: the Vulkan and MPI preflights (burn-mpric-preflight, `mpi.rs`), the layout
//!   rules (no import circles, a Burn-independent core; see `layout.rs`), the documentation
//!   rules (no path outside the repository, relative links that resolve, the op table's
//!   document; see `docs.rs`), the crate READMEs' layout and public items (`readme.rs`),
//!   formatting, lints and the whole test suite with the MPI
//!   transport built in (`mpi::FEATURES`), as CI runs them, `cargo package` of every
//!   publishable crate (`package.rs`), and README.md's quick starts built and run as a
//!   user's project on the packaged crates (`user_project.rs`); the export test's Python
//!   (`python.rs`) is installed into `target/python` first.
//! - `burn023`: the Burn 0.22 edition's tests against Burn 0.23.0-pre.1 (outside CI; see
//!   `burn023.rs`).
//! - `bench`: builds the benchmark suite (`mpric-bench`) in release mode and runs it; the
//!   report goes to `target/bench/` (`report.md`, `report.json`, `report.svg`);
//!   `--allreduce` (`mpi.rs`) and `--inference` (`inference.rs`) run their own comparisons;
//!   `--optimizer` runs the bench's optimizer modes (`optimizer.md`) and then trains the recipes
//!   in each optimizer mode through `mpric` (`optimizer-recipes.md`, [`optimizer_recipes`]).

mod burn023;
mod docs;
mod inference;
mod layout;
mod mirror;
mod mpi;
mod package;
mod python;
mod readme;
mod source;
mod user_project;

use std::path::Path;
use std::process::{Command, ExitCode};

use burn_mpric_preflight::Vulkan;

/// A rule's problems as its result: none, or one line each.
fn verdict(problems: Vec<String>) -> Result<(), String> {
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}

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
    mirror::check(root)?;
    docs::check(root)?;
    // The published crates' READMEs name their files and public items.
    let workspace = package::workspace()?;
    let dirs: Vec<&Path> = workspace.published().map(|m| m.dir.as_path()).collect();
    readme::check(&dirs)?;
    cargo(&["fmt", "--all", "--", "--check"])?;
    // Every crate a user depends on packages as crates.io takes it (versions on its path
    // dependencies, its metadata); the tools are not published.
    package::check(&workspace)?;
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
    cargo(&["test", "--workspace", "--features", mpi::FEATURES])?;
    // Wgpu as users build it (`burn = { features = ["wgpu"] }` turns on Burn's fusion and
    // autotuning): both editions' Wgpu and device-path tests once more on fused kernels. A
    // build of its own, since features unify across a workspace build. Then
    // `MixedPrecision<Vulkan>`: the same Wgpu backend compiled to SPIR-V by cubecl's Vulkan
    // compiler (Burn's `vulkan` feature switches the compiler of the one `Wgpu` type), over the
    // same driver, without and with fusion.
    for (package, features) in [
        ("burn-mpric", "instrument,fusion"),
        ("burn-mpric-022", "fusion"),
        ("burn-mpric", "instrument,vulkan"),
        ("burn-mpric", "instrument,vulkan,fusion"),
    ] {
        let tests = ["--test", "wgpu", "--test", "device_path"];
        cargo(&[&["test", "-p", package, "--features", features][..], &tests].concat())?;
    }
    // `backend = "vulkan"` in a recipe: `mpric devices` and the quickstart trained on SPIR-V.
    cargo(&[
        "test",
        "-p",
        "burn-mpric-train",
        "--features",
        "vulkan",
        "--test",
        "cli",
        "--",
        "backends::",
    ])?;
    // `MixedPrecision<Metal>` cannot run off Apple hardware; it must still build.
    cargo(&["check", "-p", "burn-mpric", "--features", "metal"])?;
    // A new user's project outside the workspace: each edition's quick start from README.md
    // on the packaged crates.
    user_project::check(root, &workspace)?;
    Ok(())
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
    // `--optimizer`: the bench's modes, then the recipes in each mode (unless `--no-recipes`;
    // `--recipes-only` skips the bench).
    let optimizer = args.iter().any(|a| a == "--optimizer");
    let has = |flag: &str| args.iter().any(|a| a == flag);
    if optimizer && has("--recipes-only") {
        return optimizer_recipes(args);
    }
    let args: Vec<String> = args
        .iter()
        .filter(|a| *a != "--no-recipes")
        .cloned()
        .collect();
    let args = args.as_slice();
    let mut cmd: Vec<String> = ["run", "--release", "-p", "burn-mpric-bench"]
        .map(String::from)
        .to_vec();
    // A backend the default build lacks is a feature of the bench's: CUDA, and Burn's Wgpu
    // compiled to SPIR-V (`vulkan`) or MSL (`metal`), one compiler per build.
    let backend = |name: &str| {
        args.windows(2).any(|w| w[0] == "--backend" && w[1] == name)
            || args.iter().any(|a| *a == format!("--backend={name}"))
    };
    let fusion = args.iter().any(|a| a == "--fusion");
    let features: Vec<&str> = ["cuda", "vulkan", "metal"]
        .into_iter()
        .map(|name| (backend(name), name))
        .chain([(fusion, "fusion")])
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
    cargo(&cmd)?;
    if optimizer && !has("--no-recipes") {
        optimizer_recipes(args)?;
    }
    Ok(())
}

/// The recipes trained in each optimizer mode, each as written (its own steps: in release on 2
/// cores, about 1 s for quickstart and csv_pumps, a minute or two for tiny_lm).
const OPTIMIZER_RECIPES: [&str; 3] = ["quickstart.toml", "tiny_lm.toml", "csv_pumps.toml"];

/// The optimizer modes of the recipes: name, `optimizer.state`, `optimizer.master`. State f32
/// with f32 master weights trains with Burn's own optimizer (the recipes' default).
const OPTIMIZER_MODES: [(&str, &str, &str); 4] = [
    ("f32 (Burn's optimizer)", "f32", "f32"),
    ("state bf16, master f32", "bf16", "f32"),
    ("state bf16, master stochastic", "bf16", "stochastic"),
    ("state bf16, master kahan", "bf16", "kahan"),
];

/// The recipes whose final training loss should stay within 1% of the f32 run's.
const WITHIN_ONE_PERCENT: [&str; 2] = ["quickstart", "tiny_lm"];

/// Mean training loss over the last 10% of a run's steps (at least one), of the finite losses:
/// `burn_mpric_train::Summary::tail_loss`'s rule, read from the run's `metrics.json`.
fn tail_loss(metrics: &serde_json::Value) -> Option<f64> {
    let steps = metrics["steps"].as_array()?;
    let tail = (steps.len() / 10).max(1);
    let losses: Vec<f64> = steps
        .iter()
        .rev()
        .take(tail)
        .filter_map(|s| s["loss"].as_f64())
        .collect();
    (!losses.is_empty()).then(|| losses.iter().sum::<f64>() / losses.len() as f64)
}

/// `cargo xtask bench --optimizer`'s second part: builds `mpric` in release, trains each recipe
/// of [`OPTIMIZER_RECIPES`] in each mode of [`OPTIMIZER_MODES`] (`--set optimizer.state=...
/// --set optimizer.master=...`, output in a temporary folder), and writes each run's final
/// training loss and its gap to the f32 run to `optimizer-recipes.md` and
/// `optimizer-recipes.json` in the bench's output folder. A separate binary rather than the
/// library inside the bench: burn-mpric-train would bring its dependencies (plotting, images,
/// datasets, burn-collective) and another feature set of Burn into every bench build.
fn optimizer_recipes(args: &[String]) -> Result<(), String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .ok_or("xtask has no parent directory")?;
    let out = args
        .iter()
        .position(|a| a == "--out")
        .and_then(|i| args.get(i + 1).map(std::path::PathBuf::from))
        .or_else(|| {
            args.iter()
                .find_map(|a| a.strip_prefix("--out=").map(std::path::PathBuf::from))
        })
        .unwrap_or_else(|| root.join("target").join("bench"));
    cargo(&[
        "build",
        "--release",
        "-p",
        "burn-mpric-train",
        "--bin",
        "mpric",
    ])?;
    let mpric = root.join("target/release/mpric");
    let scratch =
        std::env::temp_dir().join(format!("mpric-optimizer-recipes-{}", std::process::id()));
    let mut md = String::from(
        "## The recipes in each optimizer mode (`cargo xtask bench --optimizer`)\n\n\
         Each recipe trained by `mpric train` (release) with `--set optimizer.state=... --set \
         optimizer.master=...`; final training loss = the mean of the last 10% of the steps' \
         losses (`Summary::tail_loss`); gap = against the f32 run (Burn's own optimizer, the \
         recipe's default). State f32 with f32 master weights is Burn's own optimizer in a \
         recipe, so there is no separate wrapper-at-f32 run here.\n",
    );
    let mut json = Vec::new();
    let mut targets = Vec::new();
    for file in OPTIMIZER_RECIPES {
        let name = file.trim_end_matches(".toml");
        let recipe = root.join("recipes").join(file);
        let mut rows = Vec::new();
        for (mode, state, master) in OPTIMIZER_MODES {
            let output = scratch.join(format!("{name}-{state}-{master}"));
            let mut cmd = Command::new(&mpric);
            cmd.arg("train")
                .arg(&recipe)
                .args(["-q", "--overwrite", "--set"])
                .arg(format!("output={}", output.display()))
                .args(["--set", &format!("optimizer.state={state}")])
                .args(["--set", &format!("optimizer.master={master}")]);
            eprintln!("[optimizer recipes] {name}: {mode}");
            let started = std::time::Instant::now();
            let run = cmd
                .output()
                .map_err(|e| format!("{}: {e}", mpric.display()))?;
            if !run.status.success() {
                return Err(format!(
                    "mpric train {name} ({mode}): {}",
                    String::from_utf8_lossy(&run.stderr)
                ));
            }
            let wall_s = started.elapsed().as_secs_f64();
            let path = output.join("metrics.json");
            let text =
                std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            let metrics: serde_json::Value =
                serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
            let loss =
                tail_loss(&metrics).ok_or_else(|| format!("{}: no finite loss", path.display()))?;
            let skipped = metrics["steps"]
                .as_array()
                .map_or(0, |s| s.iter().filter(|r| r["skipped"] == true).count());
            let steps_done = metrics["steps"].as_array().map_or(0, Vec::len);
            rows.push((mode, state, master, loss, skipped, steps_done, wall_s));
        }
        let reference = rows[0].3;
        md.push_str(&format!(
            "\n### {name}\n\n| mode | final training loss | gap to f32 | steps | skipped | wall s |\n|---|---:|---:|---:|---:|---:|\n"
        ));
        for &(mode, state, master, loss, skipped, steps_done, wall_s) in &rows {
            let gap = 100.0 * (loss - reference) / reference;
            md.push_str(&format!(
                "| {mode} | {loss:.4} | {gap:+.2}% | {steps_done} | {skipped} | {wall_s:.1} |\n"
            ));
            if WITHIN_ONE_PERCENT.contains(&name) && state != "f32" {
                targets.push((name, mode, gap));
            }
            json.push(serde_json::json!({
                "recipe": name, "mode": mode, "state": state, "master": master,
                "tail_loss": loss, "gap_to_f32_percent": gap, "steps": steps_done,
                "skipped": skipped, "wall_s": wall_s,
            }));
        }
    }
    let missed: Vec<String> = targets
        .iter()
        .filter(|(_, _, gap)| gap.abs() > 1.0)
        .map(|(name, mode, gap)| format!("{name}, {mode}: {gap:+.2}%"))
        .collect();
    md.push_str(&format!(
        "\nTarget: the final training loss within 1% of the f32 run on quickstart and tiny_lm, \
         every bf16 mode: **{}**{}.\n",
        if missed.is_empty() { "met" } else { "missed" },
        if missed.is_empty() {
            String::new()
        } else {
            format!(" ({})", missed.join("; "))
        }
    ));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    let path = out.join("optimizer-recipes.md");
    std::fs::write(&path, &md).map_err(|e| format!("{}: {e}", path.display()))?;
    let json = serde_json::to_string_pretty(&json).map_err(|e| e.to_string())?;
    let json_path = out.join("optimizer-recipes.json");
    std::fs::write(&json_path, json).map_err(|e| format!("{}: {e}", json_path.display()))?;
    print!("{md}");
    eprintln!("written: {}, {}", path.display(), json_path.display());
    Ok(())
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
  bench --optimizer [--full] [--backend B] [--no-recipes | --recipes-only]
           instead: Adam's state and master weights at bf16 against Burn's Adam at f32
           (bytes per parameter measured, step time, final loss) in target/bench/optimizer.md,
           then the recipes trained in each mode in target/bench/optimizer-recipes.md
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
