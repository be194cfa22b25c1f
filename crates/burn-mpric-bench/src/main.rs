//! `mpric-bench`: the burn-mpric benchmark suite. For each workload and backend available on
//! the machine, the bare backend at f32 against `MixedPrecision` at the identity, f16 and bf16
//! policies (and, on the transformer steps, against the bare backend training the model stored
//! at f16 or bf16: "pure half"), measured interleaved in one run: median / min / max time,
//! ratio to f32, peak memory, numeric error against f32. Writes `report.md`, `report.json` and
//! `report.svg` to `--out` (default `target/bench`).
//!
//! `cargo xtask bench [--full] [--backend flex|wgpu|vulkan|metal|cuda] [--workload NAME]`; `--profile` and
//! `--optimizer` run their own comparisons instead (`profile.rs`, `optimizer.rs`).

mod adapter;
mod cost;
mod edition022;
mod guard;
mod harness;
mod machine;
mod memory;
mod optimizer;
mod profile;
mod profile022;
mod report;
mod run;
mod workloads;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use burn::backend::Flex;
use burn::backend::wgpu::{WgpuDevice, WgpuRuntime};
use burn::tensor::Tensor;
use burn::tensor::backend::Backend;
use clap::{Parser, ValueEnum};
use cubecl::Runtime;

use crate::edition022::Setup022;
use crate::edition022::{cuda022, probe022};
use crate::guard::guarded;
use crate::harness::{Budget, default_budget};
use crate::machine::{cores, load_average, machine};
use crate::memory::{CountingAlloc, MemorySource};
use crate::report::{BackendInfo, Report};
use crate::run::{CastRow, Row, Setup, Sizes, run_backend};
use crate::workloads::{Spec, Workload};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// The backends the suite knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum BackendKind {
    /// Burn's CPU backend; always available.
    Flex,
    /// Wgpu (Vulkan, Metal, DX12) with kernels compiled to WGSL; when an adapter exists.
    Wgpu,
    /// Wgpu on Vulkan with kernels compiled to SPIR-V; only in a binary built with
    /// `--features vulkan` (whose Wgpu is this one: one compiler per build).
    Vulkan,
    /// Wgpu on Metal with kernels compiled to MSL; only in a binary built with
    /// `--features metal`, on Apple GPUs.
    Metal,
    /// CUDA; only in a binary built with `--features cuda`.
    Cuda,
}

impl BackendKind {
    /// The name of the rows of Burn's Wgpu, from the compiler its backend name says it
    /// used (`cubecl<wgpu<spirv>>`): a build with the `vulkan` feature compiles to SPIR-V on
    /// Vulkan adapters and to WGSL elsewhere.
    fn of_wgpu(backend_name: &str) -> Self {
        if backend_name.contains("spirv") {
            Self::Vulkan
        } else if backend_name.contains("msl") {
            Self::Metal
        } else {
            Self::Wgpu
        }
    }

    /// The name in reports and on the command line.
    fn name(self) -> &'static str {
        match self {
            Self::Flex => "flex",
            Self::Wgpu => "wgpu",
            Self::Vulkan => "vulkan",
            Self::Metal => "metal",
            Self::Cuda => "cuda",
        }
    }

    /// Whether this binary can run it at all, and how to build one that can.
    fn not_built(self) -> Option<&'static str> {
        match self {
            Self::Vulkan if !cfg!(feature = "vulkan") => Some(
                "this binary was built without the `vulkan` feature (cargo xtask bench --backend vulkan builds it)",
            ),
            Self::Metal if !cfg!(feature = "metal") => Some(
                "this binary was built without the `metal` feature (cargo xtask bench --backend metal builds it)",
            ),
            _ => None,
        }
    }
}

/// The burn-mpric benchmark suite: bare backend vs MixedPrecision (identity, f16, bf16).
#[derive(Debug, Parser)]
#[command(name = "mpric-bench", version)]
struct Args {
    /// Bigger sizes and more iterations (long runs, GPUs).
    #[arg(long)]
    full: bool,
    /// Run only these backends (repeatable; default: every available one).
    #[arg(long, value_enum)]
    backend: Vec<BackendKind>,
    /// Run only these workloads (repeatable; default: all).
    #[arg(long, value_enum)]
    workload: Vec<Workload>,
    /// Where to write report.md, report.json and report.svg.
    #[arg(long, default_value = "target/bench")]
    out: PathBuf,
    /// After the minimum rounds, stop a group once it has run this many seconds (default: 40
    /// with `--full`, 8 without). A GPU lent for minutes runs every size with a few seconds.
    #[arg(long, value_parser = positive_seconds)]
    seconds_per_group: Option<f64>,
    /// Instead of the timed workloads: one transformer block training step profiled op by op
    /// at f32, mixed and pure half on each backend (the Burn 0.21 decorator), written to
    /// profile.md and profile.json.
    #[arg(long, conflicts_with_all = ["optimizer", "cost"])]
    profile: bool,
    /// Instead of the timed workloads: a cost model of each training step (kernels, bytes,
    /// matmul FLOPs, uploads) at the GPU sizes and the default ones, fitted on the measured
    /// GPU rows and checked against the rest, written to cost.md and cost.json. Runs on the
    /// CPU (Flex); `--backend` and `--workload` do not apply.
    #[arg(long, conflicts_with = "optimizer")]
    cost: bool,
    /// Instead of the timed workloads: Adam's state and master weights at bf16
    /// (burn-mpric-optim, burn_mpric_022::optim) against Burn's Adam at f32 on the MLP and
    /// transformer block steps, per backend running bf16 and edition: bytes per parameter
    /// measured, step time, final loss; written to optimizer.md and optimizer.json.
    #[arg(long)]
    optimizer: bool,
    /// `--profile`'s child process: one Burn 0.22 variant's steps under cubecl's profiler.
    #[arg(long = profile022::CHILD_ARG, hide = true, num_args = 2, value_names = ["BACKEND", "VARIANT"])]
    profile_022_child: Option<Vec<String>>,
}

fn positive_seconds(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(s) if s.is_finite() && s > 0.0 => Ok(s),
        _ => Err(format!("{text:?} is not a positive number of seconds")),
    }
}

fn budget(args: &Args) -> Budget {
    let budget = default_budget(args.full);
    match args.seconds_per_group {
        Some(s) => Budget {
            time_limit: Duration::from_secs_f64(s),
            ..budget
        },
        None => budget,
    }
}

/// A single-layer transformer encoder of this shape.
fn transformer(batch: usize, seq: usize, d_model: usize, heads: usize, d_ff: usize) -> Spec {
    Spec::Transformer {
        batch,
        seq,
        d_model,
        heads,
        d_ff,
        layers: 1,
    }
}

/// The `transformer_activations_step` shape, the same on every backend and in both modes:
/// 2 layers, d_model 128, 4 heads, feed-forward 512 (0.4 M parameters: 1.5 MiB at f32, 6 MiB
/// with their gradients and Adam's moments) on 16 x 256 tokens, whose activations (the
/// attention maps `[16, 4, 256, 256]` alone are 16 MiB per layer at f32) dominate the step's
/// memory. Small enough for the ordinary budget on a software Vulkan driver: a step takes
/// about 3 s on lavapipe with 2 cores.
fn transformer_activations() -> Spec {
    Spec::Transformer {
        batch: 16,
        seq: 256,
        d_model: 128,
        heads: 4,
        d_ff: 512,
        layers: 2,
    }
}

fn conv(batch: usize, c_in: usize, c_out: usize, hw: usize) -> Spec {
    Spec::Conv2d {
        batch,
        c_in,
        c_out,
        hw,
    }
}

/// The CPU sizes: small enough for a few minutes on 2 cores by default.
fn cpu_sizes(full: bool) -> Sizes {
    if full {
        Sizes {
            matmul: vec![64, 256, 512, 1024, 2048],
            conv: conv(16, 32, 64, 64),
            mlp: (256, vec![512, 1024, 1024, 64]),
            transformer: transformer(16, 128, 256, 8, 1024),
            transformer_activations: transformer_activations(),
        }
    } else {
        Sizes {
            matmul: vec![64, 256, 512],
            conv: conv(8, 16, 32, 32),
            mlp: (128, vec![256, 512, 512, 16]),
            transformer: transformer(8, 64, 64, 4, 256),
            transformer_activations: transformer_activations(),
        }
    }
}

/// The GPU sizes: small by default (a software Vulkan driver must finish in minutes), GPU-sized
/// with `--full`.
fn gpu_sizes(full: bool) -> Sizes {
    if full {
        Sizes {
            matmul: vec![256, 1024, 2048, 4096, 8192],
            conv: conv(64, 64, 128, 64),
            mlp: (2048, vec![1024, 4096, 4096, 1024]),
            transformer: transformer(32, 512, 1024, 16, 4096),
            transformer_activations: transformer_activations(),
        }
    } else {
        Sizes {
            matmul: vec![64, 256],
            conv: conv(4, 8, 16, 16),
            mlp: (64, vec![128, 256, 256, 16]),
            transformer: transformer(8, 64, 64, 4, 256),
            transformer_activations: transformer_activations(),
        }
    }
}

/// Creates and reads back a tensor: whether the backend has a device here.
fn probe<B: Backend>(device: &B::Device) -> Result<String, String> {
    let device = device.clone();
    guarded(move || {
        let t = Tensor::<B, 1>::from_floats([1.0, 2.0], &device);
        let _ = t.into_data();
        B::name(&device)
    })
}

/// The bytes in use on a cubecl device, as seen by the stream of the calling thread (cubecl
/// keeps one memory pool per stream: the poller thread reads the main thread's).
fn cubecl_memory<R: Runtime>(device: R::Device) -> MemorySource {
    let stream = cubecl::stream_id::StreamId::current();
    MemorySource::Device(Arc::new(move || {
        stream
            .executes(|| R::client(&device).memory_usage())
            .map(|usage| usage.bytes_in_use)
            .map_err(|e| format!("cubecl memory_usage failed: {e:?}"))
    }))
}

/// A positive thread count from the environment variable `var`.
fn threads_from_env(var: &str) -> Option<usize> {
    std::env::var(var).ok()?.parse().ok().filter(|n| *n > 0)
}

/// The threads Flex computes on. burn-flex (with its `rayon` feature, on by default) runs its
/// kernels on rayon's global pool; rayon is not a dependency of this crate (burn does not
/// re-export it), so `rayon::current_num_threads()` is out of reach, and the figure is the
/// size rayon gives its global pool, derived the way rayon derives it.
fn flex_threads() -> String {
    let how = "rayon global pool; rayon is not a dependency of the bench, so this is the size \
               rayon gives that pool, not rayon::current_num_threads()";
    match threads_from_env("RAYON_NUM_THREADS") {
        Some(n) => format!("{n} ({how}: RAYON_NUM_THREADS={n})"),
        None => format!(
            "{} ({how}: std::thread::available_parallelism(), RAYON_NUM_THREADS unset)",
            cores()
        ),
    }
}

/// The kind of a wgpu adapter, from the type id cubecl gives its devices.
fn adapter_kind(type_id: u16) -> &'static str {
    match type_id {
        0 => "discrete GPU",
        1 => "integrated GPU",
        2 => "virtual GPU",
        3 => "CPU",
        _ => "other",
    }
}

/// The threads Wgpu's kernels run on: the driver's, not the process's. cubecl does not keep
/// the adapter's name, but its kinds can be listed: on a CPU adapter (a software Vulkan driver
/// such as Mesa's lavapipe) the driver runs the kernels on its own worker threads.
fn wgpu_threads(device: &WgpuDevice) -> String {
    let client = WgpuRuntime::client(device);
    let kinds: Vec<&str> = client
        .enumerate_all_devices()
        .iter()
        .map(|d| adapter_kind(d.type_id))
        .collect();
    let api = format!("{:?}", client.info());
    if !kinds.is_empty() && kinds.iter().all(|k| *k == "CPU") {
        let pool = match threads_from_env("LP_NUM_THREADS") {
            Some(n) => format!("LP_NUM_THREADS={n}"),
            None => format!("one per core by default: {}", cores()),
        };
        format!(
            "driver-managed: a CPU adapter ({api}; a software driver such as lavapipe, whose \
             own worker threads run the kernels, {pool})"
        )
    } else {
        format!("driver-managed ({api} adapters: {})", kinds.join(", "))
    }
}

struct Collected {
    rows: Vec<Row>,
    casts: Vec<CastRow>,
    backends: Vec<BackendInfo>,
    /// `--profile`: each backend profiles a step instead of running the workloads.
    profile: bool,
    profiles: Vec<profile::BackendProfile>,
    /// `--optimizer`: each backend and edition measures the optimizer modes instead.
    optimizer: bool,
    optimizers: Vec<optimizer::EditionRun>,
}

fn run_on<I: Backend>(
    setup: Setup<I>,
    workloads: &[Workload],
    out: &mut Collected,
    detail: String,
    threads: String,
) {
    out.backends.push(BackendInfo {
        name: setup.name.into(),
        ran: true,
        detail,
        threads,
        memory: setup.memory.describe(),
    });
    if out.profile {
        out.profiles.push(profile::profile_backend(&setup));
        return;
    }
    if out.optimizer {
        out.optimizers.push(optimizer::run_021(&setup));
        return;
    }
    let (rows, casts) = run_backend(&setup, workloads);
    out.rows.extend(rows);
    out.casts.extend(casts);
}

/// The Burn 0.22 edition's rows, on Burn 0.22's Flex, Wgpu and CUDA where the decorator's run on
/// the same kind of backend; `no_wgpu` says why Wgpu cannot run here (when it was wanted and
/// cannot).
fn run_edition022(
    args: &Args,
    workloads: &[Workload],
    out: &mut Collected,
    wanted: impl Fn(BackendKind) -> bool,
    no_wgpu: Option<&str>,
) {
    use burn022::tensor::{Device, DeviceKind};
    let run = |out: &mut Collected, setup: Setup022, detail: String, threads: String| {
        out.backends.push(BackendInfo {
            name: setup.name.into(),
            ran: true,
            detail,
            threads,
            memory: setup.memory.describe(),
        });
        if out.optimizer {
            out.optimizers.push(optimizer::run_022(&setup));
        } else {
            out.rows.extend(edition022::run(&setup, workloads));
        }
    };
    if wanted(BackendKind::Flex) {
        let setup = Setup022 {
            name: "flex (burn 0.22)",
            device: Device::flex(),
            memory: MemorySource::Heap,
            sizes: cpu_sizes(args.full),
            budget: budget(args),
        };
        run(out, setup, "Burn 0.22.1 Flex".into(), flex_threads());
    }
    if let Some(why) = no_wgpu {
        skipped(out, "wgpu (burn 0.22)", why.to_string());
    } else if wanted(BackendKind::Wgpu) {
        let device = Device::wgpu(DeviceKind::DefaultDevice);
        match probe022(&device) {
            Ok(()) => {
                let setup = gpu022(args, "wgpu (burn 0.22)", device);
                run(out, setup, "Burn 0.22.1 Wgpu".into(), "-".into());
            }
            Err(why) => skipped(
                out,
                "wgpu (burn 0.22)",
                format!("wgpu could not start its device: {why}"),
            ),
        }
    }
    if wanted(BackendKind::Cuda) {
        match cuda022() {
            Ok(device) => {
                let setup = gpu022(args, "cuda (burn 0.22)", device);
                let threads = "driver-managed (CUDA: the GPU's own)".into();
                run(out, setup, "Burn 0.22.1 Cuda".into(), threads);
            }
            Err(why) => skipped(out, "cuda (burn 0.22)", why),
        }
    }
}

/// A Burn 0.22 GPU device's setup: the GPU sizes, memory from its allocator report.
fn gpu022(args: &Args, name: &'static str, device: burn022::tensor::Device) -> Setup022 {
    Setup022 {
        name,
        memory: edition022::pool_memory(device.clone()),
        device,
        sizes: gpu_sizes(args.full),
        budget: budget(args),
    }
}

fn skipped(out: &mut Collected, name: &str, why: String) {
    eprintln!("[{name}] skipped: {why}");
    out.backends.push(BackendInfo {
        name: name.into(),
        ran: false,
        detail: why,
        threads: "-".into(),
        memory: "-".into(),
    });
}

#[cfg(feature = "cuda")]
fn run_cuda(args: &Args, workloads: &[Workload], out: &mut Collected) {
    use burn::backend::Cuda;
    use burn::backend::cuda::CudaDevice;
    let device = CudaDevice::default();
    match probe::<Cuda>(&device) {
        Ok(name) => run_on(
            Setup::<Cuda> {
                name: "cuda",
                device: device.clone(),
                memory: cubecl_memory::<cubecl::cuda::CudaRuntime>(device),
                sizes: gpu_sizes(args.full),
                budget: budget(args),
            },
            workloads,
            out,
            name,
            "driver-managed (CUDA: the GPU's own)".into(),
        ),
        Err(why) => skipped(out, "cuda", format!("no CUDA device: {why}")),
    }
}

#[cfg(not(feature = "cuda"))]
fn run_cuda(_args: &Args, _workloads: &[Workload], out: &mut Collected) {
    skipped(
        out,
        "cuda",
        "this binary was built without the `cuda` feature".into(),
    );
}

/// `YYYY-MM-DD HH:MM` (UTC) of a Unix time.
fn utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let (h, m) = ((secs % 86_400) / 3600, (secs % 3600) / 60);
    // Civil from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let mo = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(mo <= 2);
    format!("{y:04}-{mo:02}-{d:02} {h:02}:{m:02}")
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Some([backend, variant]) = args.profile_022_child.as_deref() {
        return profile022::child(backend, variant, &gpu_sizes(args.full).transformer);
    }
    if args.cost {
        return match cost::run(&gpu_sizes(true), &gpu_sizes(false), &args.out) {
            Ok(report) => {
                println!("{}", cost::markdown(&report));
                eprintln!("wrote {}/cost.md, cost.json", args.out.display());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!(
                    "error: could not write the cost report to {}: {e}",
                    args.out.display()
                );
                ExitCode::FAILURE
            }
        };
    }
    let started_at = Instant::now();
    let load_at_start = load_average();
    let started = utc(SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0));
    let workloads: Vec<Workload> = if args.workload.is_empty() {
        Workload::ALL.to_vec()
    } else {
        Workload::ALL
            .into_iter()
            .filter(|w| args.workload.contains(w))
            .collect()
    };
    let wanted = |kind: BackendKind| args.backend.is_empty() || args.backend.contains(&kind);
    let mut out = Collected {
        rows: Vec::new(),
        casts: Vec::new(),
        backends: Vec::new(),
        profile: args.profile,
        profiles: Vec::new(),
        optimizer: args.optimizer,
        optimizers: Vec::new(),
    };

    if wanted(BackendKind::Flex) {
        let device = Default::default();
        let name = <Flex as Backend>::name(&device);
        run_on(
            Setup::<Flex> {
                name: "flex",
                device,
                memory: MemorySource::Heap,
                sizes: cpu_sizes(args.full),
                budget: budget(&args),
            },
            &workloads,
            &mut out,
            name,
            flex_threads(),
        );
    }
    // Burn's one Wgpu type, named after the compiler this build gives it.
    let wgpu_kinds = [BackendKind::Wgpu, BackendKind::Vulkan, BackendKind::Metal];
    let asked = |kind: BackendKind| args.backend.contains(&kind);
    for kind in wgpu_kinds {
        if let Some(why) = kind.not_built().filter(|_| asked(kind)) {
            skipped(&mut out, kind.name(), why.into());
        }
    }
    let wgpu_wanted = wgpu_kinds.into_iter().any(&wanted);
    // Asked once, before any wgpu device is started: cubecl panics without an adapter.
    let no_wgpu = if wgpu_wanted {
        adapter::wgpu_unavailable()
    } else {
        None
    };
    if let Some(why) = &no_wgpu {
        skipped(&mut out, "wgpu", why.clone());
    } else if wgpu_wanted {
        type W = burn::backend::Wgpu;
        let device = WgpuDevice::default();
        match probe::<W>(&device) {
            Ok(name) => {
                let ran = BackendKind::of_wgpu(&name);
                // The other compilers asked for (and built) cannot run in this binary.
                for kind in wgpu_kinds
                    .into_iter()
                    .filter(|&k| k != ran && asked(k) && k.not_built().is_none())
                {
                    skipped(
                        &mut out,
                        kind.name(),
                        format!(
                            "this binary's Wgpu runs {name} on this adapter: one compiler per build"
                        ),
                    );
                }
                if wanted(ran) {
                    run_on(
                        Setup::<W> {
                            name: ran.name(),
                            device: device.clone(),
                            memory: cubecl_memory::<WgpuRuntime>(device.clone()),
                            sizes: gpu_sizes(args.full),
                            budget: budget(&args),
                        },
                        &workloads,
                        &mut out,
                        name,
                        wgpu_threads(&device),
                    );
                }
            }
            Err(why) => skipped(
                &mut out,
                "wgpu",
                format!("wgpu could not start its device: {why}"),
            ),
        }
    }
    if wanted(BackendKind::Cuda) {
        run_cuda(&args, &workloads, &mut out);
    }
    if args.profile {
        let editions022 = profiles022(&args, wanted, no_wgpu.as_deref());
        return write_profiles(&args.out, &out.profiles, &editions022);
    }
    run_edition022(&args, &workloads, &mut out, wanted, no_wgpu.as_deref());
    if args.optimizer {
        let targets = optimizer::targets(&out.optimizers);
        let report = optimizer::OptimizerReport {
            mode: if args.full { "full" } else { "default" }.into(),
            started,
            wall_s: started_at.elapsed().as_secs_f64(),
            machine: machine(load_at_start),
            backends: out.backends,
            runs: out.optimizers,
            targets,
        };
        if let Err(e) = optimizer::write(&args.out, &report) {
            eprintln!(
                "error: could not write the optimizer report to {}: {e}",
                args.out.display()
            );
            return ExitCode::FAILURE;
        }
        println!("{}", report.markdown());
        eprintln!(
            "wrote {}/optimizer.md, optimizer.json ({:.0} s)",
            args.out.display(),
            report.wall_s
        );
        return ExitCode::SUCCESS;
    }

    let targets = report::targets(&out.rows, &out.backends);
    let report = Report {
        mode: if args.full { "full" } else { "default" }.into(),
        started,
        wall_s: started_at.elapsed().as_secs_f64(),
        machine: machine(load_at_start),
        backends: out.backends,
        targets,
        rows: out.rows,
        casts: out.casts,
    };
    if let Err(e) = write(&args.out, &report) {
        eprintln!(
            "error: could not write the report to {}: {e}",
            args.out.display()
        );
        return ExitCode::FAILURE;
    }
    println!("{}", report.markdown());
    eprintln!(
        "wrote {}/report.md, report.json, report.svg ({:.0} s)",
        args.out.display(),
        report.wall_s
    );
    ExitCode::SUCCESS
}

/// `--profile`'s Burn 0.22 part: the edition's step kernel by kernel on the cube backends
/// wanted here (Wgpu, and CUDA in a `cuda022` build), each variant in a child process.
fn profiles022(
    args: &Args,
    wanted: impl Fn(BackendKind) -> bool,
    no_wgpu: Option<&str>,
) -> Vec<profile022::Profile022> {
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => {
            eprintln!("[burn 0.22] not profiled: this binary's path is unknown: {e}");
            return Vec::new();
        }
    };
    let spec = gpu_sizes(args.full).transformer;
    let logs = args.out.join("cubecl-logs");
    let mut profiles = Vec::new();
    if wanted(BackendKind::Wgpu) {
        match no_wgpu {
            Some(why) => eprintln!("[wgpu (burn 0.22)] not profiled: {why}"),
            None => profiles.push(profile022::profile(
                &exe,
                "wgpu",
                "wgpu (burn 0.22)",
                &spec,
                args.full,
                &logs,
            )),
        }
    }
    if wanted(BackendKind::Cuda) {
        match cuda022() {
            Ok(_) => profiles.push(profile022::profile(
                &exe,
                "cuda",
                "cuda (burn 0.22)",
                &spec,
                args.full,
                &logs,
            )),
            Err(why) => eprintln!("[cuda (burn 0.22)] not profiled: {why}"),
        }
    }
    profiles
}

fn write_profiles(
    dir: &std::path::Path,
    profiles: &[profile::BackendProfile],
    editions022: &[profile022::Profile022],
) -> ExitCode {
    let markdown = profile::markdown(profiles) + &profile022::markdown(editions022);
    let written = std::fs::create_dir_all(dir)
        .and_then(|()| std::fs::write(dir.join("profile.md"), &markdown))
        .and_then(|()| {
            let both = serde_json::json!({ "decorator": profiles, "edition_022": editions022 });
            let json = serde_json::to_string_pretty(&both).map_err(std::io::Error::other)?;
            std::fs::write(dir.join("profile.json"), json)
        });
    if let Err(e) = written {
        eprintln!(
            "error: could not write the profile to {}: {e}",
            dir.display()
        );
        return ExitCode::FAILURE;
    }
    println!("{markdown}");
    eprintln!("wrote {}/profile.md, profile.json", dir.display());
    ExitCode::SUCCESS
}

fn write(dir: &std::path::Path, report: &Report) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("report.md"), report.markdown())?;
    let json = serde_json::to_string_pretty(report).map_err(std::io::Error::other)?;
    std::fs::write(dir.join("report.json"), json)?;
    std::fs::write(dir.join("report.svg"), report.svg())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(utc(0), "1970-01-01 00:00");
        assert_eq!(utc(951_782_400 + 3_660), "2000-02-29 01:01");
    }

    #[test]
    fn wgpu_rows_are_named_after_the_compiler_that_ran() {
        assert_eq!(
            BackendKind::of_wgpu("cubecl<wgpu<spirv>>"),
            BackendKind::Vulkan
        );
        assert_eq!(
            BackendKind::of_wgpu("cubecl<wgpu<msl>>"),
            BackendKind::Metal
        );
        assert_eq!(
            BackendKind::of_wgpu("cubecl<wgpu<wgsl>>"),
            BackendKind::Wgpu
        );
        let args = Args::try_parse_from(["mpric-bench", "--backend", "vulkan"]).unwrap();
        assert_eq!(args.backend, vec![BackendKind::Vulkan]);
        // This binary names the feature a compiler needs, exactly when it lacks it.
        assert_eq!(
            BackendKind::Vulkan.not_built().is_some(),
            !cfg!(feature = "vulkan")
        );
        assert!(BackendKind::Wgpu.not_built().is_none());
    }

    #[test]
    fn arguments() {
        let args = Args::try_parse_from([
            "mpric-bench",
            "--full",
            "--backend",
            "wgpu",
            "--workload",
            "mlp_step",
            "--workload",
            "transformer_block_step",
            "--workload",
            "transformer_activations_step",
        ])
        .unwrap();
        assert!(args.full);
        assert_eq!(args.backend, vec![BackendKind::Wgpu]);
        assert_eq!(
            args.workload,
            vec![
                Workload::MlpStep,
                Workload::TransformerBlockStep,
                Workload::TransformerActivationsStep
            ]
        );
        assert!(Args::try_parse_from(["mpric-bench", "--workload", "nope"]).is_err());
        let optimizer = Args::try_parse_from(["mpric-bench", "--optimizer", "--full"]).unwrap();
        assert!(optimizer.optimizer && optimizer.full && !optimizer.profile);
        assert!(Args::try_parse_from(["mpric-bench", "--optimizer", "--profile"]).is_err());
    }

    #[test]
    fn device_memory_is_read_at_every_op_boundary_of_an_instrumented_case() {
        let _heap = crate::memory::heap_tests();
        use burn::backend::Wgpu;
        use burn_mpric::instrument::{Instrumented, at_each_op};

        use crate::memory::{Peak, Sampling, peak_of};

        type B = Instrumented<Wgpu>;
        let device = WgpuDevice::default();
        let source = cubecl_memory::<WgpuRuntime>(device.clone());
        // 16 MiB at f32, and its exponentials beside it for the length of one op.
        let n = 4 << 20;
        let peak = peak_of(&source, Sampling::EveryOp, |sample| {
            at_each_op(sample.clone(), || {
                let x = Tensor::<B, 1>::ones([n], &device);
                let sum = x.clone().exp().sum();
                drop(x);
                sum.into_scalar()
            });
        });
        let Peak::Bytes { bytes } = peak else {
            panic!("{peak:?}");
        };
        assert!(bytes >= 2 * 4 * n as u64, "{bytes} bytes");
    }
}
