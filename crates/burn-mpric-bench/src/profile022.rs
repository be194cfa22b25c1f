//! `mpric-bench --profile`, the Burn 0.22 edition: the transformer block step kernel by kernel.
//!
//! Burn 0.22's tensors carry no backend type, so no decorator can sit beneath them as
//! `Instrumented` sits beneath the 0.21 decorator; cubecl's own profiler can. Each variant's
//! step runs in a child process of this binary with cubecl's profiling log on
//! (`CUBECL_DEBUG_LOG=<file>`, `CUBECL_DEBUG_OPTION=profile`), which waits for every kernel,
//! logs its time and name, and writes a summary at every device sync. The parent reads the
//! log back: the kernels between the last two syncs are the last step's (each step ends with
//! one sync; the two last steps must hold the same kernels, or the step synced inside itself
//! and the profile says so instead of guessing). Kernels are grouped by family: the name
//! without cubecl's hash of its dtypes and shapes, a fused kernel's generic arguments cut to
//! the first and last. Cube backends only (Wgpu, CUDA): Flex runs no kernels.
//!
//! What carries over from the 0.21 profile: the casts (`CastElement`) and what else mixed
//! runs that pure half does not. What does not: dtypes per kernel (cubecl's names hash them).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
use std::time::Duration;

use burn_mpric_022::resolve_policy;
use burn_mpric_core::Policy;
use burn022::tensor::Device;
use serde::Serialize;

use crate::edition022;
use crate::profile::BackendProfile;
use crate::workloads::Spec;

/// The hidden argument that makes this binary a profiled child.
pub const CHILD_ARG: &str = "profile-022-child";

/// Steps before the two whose kernels are compared: kernels compiled, autotune settled.
const WARMUP_STEPS: usize = 2;

/// How many kernel families each table shows.
const TOP: usize = 15;

/// The variants profiled, in column order (`None`: bare Burn 0.22 at f32).
const VARIANTS: [(&str, Option<&str>); 5] = [
    ("f32", None),
    ("mixed_f16", Some("mixed_f16")),
    ("mixed_bf16", Some("mixed_bf16")),
    ("pure_f16", Some("pure_f16")),
    ("pure_bf16", Some("pure_bf16")),
];

/// One kernel family in one step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KernelTime {
    /// The kernel's name without its hash.
    pub kernel: String,
    /// How many times it ran in the step.
    pub calls: usize,
    /// Its time in the step, in ms.
    pub ms: f64,
}

/// One variant's step.
#[derive(Debug, Clone, Serialize)]
pub struct StepKernels {
    /// `f32`, `mixed_f16`, ...
    pub variant: String,
    /// The step's kernels' time, in ms.
    pub total_ms: f64,
    /// Per family, most time first.
    pub kernels: Vec<KernelTime>,
}

/// The edition's profile on one backend.
pub type Profile022 = BackendProfile<StepKernels>;

/// Profiles every variant on `backend` (`wgpu` or `cuda`), each in a child process of `exe`,
/// its cubecl log under `dir`.
pub fn profile(
    exe: &Path,
    backend: &str,
    name: &str,
    spec: &Spec,
    full: bool,
    dir: &Path,
) -> Profile022 {
    let mut variants = Vec::new();
    let mut skipped = Vec::new();
    for (variant, _) in VARIANTS {
        match run_child(exe, backend, variant, full, dir) {
            Ok(kernels) => variants.push(kernels),
            Err(why) => skipped.push(format!("{variant}: {why}")),
        }
    }
    Profile022 {
        backend: name.to_string(),
        spec: spec.label(),
        variants,
        skipped,
    }
}

fn run_child(
    exe: &Path,
    backend: &str,
    variant: &str,
    full: bool,
    dir: &Path,
) -> Result<StepKernels, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let log = dir.join(format!("cubecl-022-{backend}-{variant}.log"));
    // cubecl appends to its log: start from an empty file.
    let _ = std::fs::remove_file(&log);
    let mut command = Command::new(exe);
    command
        .arg(format!("--{CHILD_ARG}"))
        .arg(backend)
        .arg(variant)
        .env("CUBECL_DEBUG_LOG", &log)
        .env("CUBECL_DEBUG_OPTION", "profile");
    if full {
        command.arg("--full");
    }
    let output = command
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("could not start {}: {e}", exe.display()))?;
    // A child that could not run the variant (exit 2) said why on stdout.
    match output.status.code() {
        Some(0) => {}
        Some(2) => {
            let said = String::from_utf8_lossy(&output.stdout);
            let why = said
                .lines()
                .rfind(|l| !l.trim().is_empty())
                .unwrap_or("no reason given");
            return Err(why.trim().to_string());
        }
        _ => return Err(format!("the profiled step failed ({})", output.status)),
    }
    let text = std::fs::read_to_string(&log).map_err(|e| format!("{}: {e}", log.display()))?;
    let kernels = last_step(&text)?;
    Ok(StepKernels {
        variant: variant.to_string(),
        total_ms: kernels.iter().map(|k| k.ms).sum(),
        kernels,
    })
}

/// The child: `WARMUP_STEPS + 2` steps of `variant` on `backend`, each ending with a sync.
/// Exit 2, with the reason on stdout, when the backend does not run the variant's dtypes.
pub fn child(backend: &str, variant: &str, spec: &Spec) -> ExitCode {
    let device = match backend {
        "wgpu" => Device::wgpu(burn022::tensor::DeviceKind::DefaultDevice),
        "cuda" => match crate::edition022::cuda022() {
            Ok(device) => device,
            Err(why) => {
                println!("{why}");
                return ExitCode::from(2);
            }
        },
        other => {
            println!("no kernel profile on {other}");
            return ExitCode::from(2);
        }
    };
    let device = device.autodiff();
    let Some((_, policy)) = VARIANTS.iter().find(|(name, _)| *name == variant) else {
        println!("unknown variant {variant}");
        return ExitCode::from(2);
    };
    let policy = match policy.map(|text| text.parse::<Policy>().map(|p| resolve_policy(p, &device)))
    {
        None => None,
        Some(Ok(Ok(resolved))) => Some(resolved),
        Some(Ok(Err(e))) => {
            println!("{e}");
            return ExitCode::from(2);
        }
        Some(Err(e)) => {
            println!("{e}");
            return ExitCode::from(2);
        }
    };
    let mut case = edition022::build(spec, policy, &device);
    for _ in 0..WARMUP_STEPS + 2 {
        case.step();
    }
    // The logger writes from a task of its own; give it the last summary's time.
    std::thread::sleep(Duration::from_millis(500));
    ExitCode::SUCCESS
}

/// A kernel's family: its name without the hash cubecl appends (`_` and 8 hex digits), a
/// name of several generic parts (`A | B | ... | Z_hash`) cut to `A … Z`.
fn family(name: &str) -> String {
    let unhashed = |part: &str| match part.rsplit_once('_') {
        Some((stem, hash)) if hash.len() == 8 && hash.chars().all(|c| c.is_ascii_hexdigit()) => {
            stem.to_string()
        }
        _ => part.to_string(),
    };
    let parts: Vec<&str> = name.split(" | ").map(str::trim).collect();
    match parts.as_slice() {
        [] => String::new(),
        [one] => unhashed(one),
        [first, second] => format!("{first} {}", unhashed(second)),
        [first, .., last] => format!("{first} … {}", unhashed(last)),
    }
}

/// A `Duration`'s `Debug` text (`2.712627ms`, `123.4µs`, `56ns`, `1.5s`) in ms.
fn millis(text: &str) -> Option<f64> {
    let (number, scale) = [("ms", 1.0), ("µs", 1e-3), ("ns", 1e-6), ("s", 1e3)]
        .into_iter()
        .find_map(|(unit, scale)| text.strip_suffix(unit).map(|n| (n, scale)))?;
    number.parse::<f64>().ok().map(|n| n * scale)
}

/// The kernels between each pair of syncs in a cubecl profiling log: one list per sync, in
/// order. A kernel line is `| <duration> | <name>`; a sync's summary is a table framed by
/// `|⎺...` and `|⎯...` lines, whose rows are not kernel lines.
fn segments(log: &str) -> Vec<Vec<(String, f64)>> {
    let mut segments = Vec::new();
    let mut current = Vec::new();
    let mut in_table = false;
    for line in log.lines() {
        if line.starts_with("|⎺") {
            in_table = true;
        } else if line.starts_with("|⎯") {
            in_table = false;
            segments.push(std::mem::take(&mut current));
        } else if !in_table
            && let Some(rest) = line.strip_prefix("| ")
            && let Some((duration, name)) = rest.split_once(" | ")
            && let Some(ms) = millis(duration.trim())
        {
            current.push((family(name), ms));
        }
    }
    segments
}

/// Kernel lines grouped by family, most time first.
fn grouped(kernels: &[(String, f64)]) -> Vec<KernelTime> {
    let mut families: BTreeMap<&str, (usize, f64)> = BTreeMap::new();
    for (name, ms) in kernels {
        let entry = families.entry(name).or_default();
        entry.0 += 1;
        entry.1 += ms;
    }
    let mut out: Vec<KernelTime> = families
        .into_iter()
        .map(|(kernel, (calls, ms))| KernelTime {
            kernel: kernel.to_string(),
            calls,
            ms,
        })
        .collect();
    out.sort_by(|a, b| b.ms.total_cmp(&a.ms).then_with(|| a.kernel.cmp(&b.kernel)));
    out
}

/// The last step's kernels: the last sync's, checked against the sync before (the same
/// families, called as often).
fn last_step(log: &str) -> Result<Vec<KernelTime>, String> {
    let segments = segments(log);
    let [.., before, last] = segments.as_slice() else {
        return Err(format!(
            "the cubecl log holds {} sync summaries, not the steps' (is the binary built with \
             a cube backend, and does the log path exist?)",
            segments.len()
        ));
    };
    let calls = |kernels: &[KernelTime]| -> Vec<(String, usize)> {
        let mut calls: Vec<_> = kernels
            .iter()
            .map(|k| (k.kernel.clone(), k.calls))
            .collect();
        calls.sort();
        calls
    };
    let (before, last) = (grouped(before), grouped(last));
    if calls(&before) != calls(&last) {
        return Err(
            "the last two steps ran different kernels: the step syncs inside itself, and the \
             log cannot tell where it begins"
                .into(),
        );
    }
    Ok(last)
}

/// The profiles as Markdown: per backend, f32, mixed and pure half side by side.
pub fn markdown(profiles: &[Profile022]) -> String {
    let mut out = String::from(
        "\n# The Burn 0.22 edition's step, kernel by kernel\n\n\
         cubecl's profiler: each kernel waited for and timed, grouped by family (dtypes and \
         shapes are hashed into cubecl's names and not shown). Families ordered by what mixed \
         spends more than pure half.\n",
    );
    for p in profiles {
        let _ = writeln!(out, "\n## {} ({})", p.backend, p.spec);
        for s in &p.skipped {
            let _ = writeln!(out, "\n- not run: {s}");
        }
        for half in ["f16", "bf16"] {
            table(&mut out, p, half);
        }
    }
    out
}

fn table(out: &mut String, p: &Profile022, half: &str) {
    let find = |name: &str| p.variants.iter().find(|v| v.variant == name);
    let (Some(f32v), Some(mixed), Some(pure)) = (
        find("f32"),
        find(&format!("mixed_{half}")),
        find(&format!("pure_{half}")),
    ) else {
        return;
    };
    let columns = [f32v, mixed, pure];
    let time = |c: usize, kernel: &str| {
        columns[c]
            .kernels
            .iter()
            .find(|k| k.kernel == kernel)
            .map_or((0.0, 0), |k| (k.ms, k.calls))
    };
    let mut kernels: Vec<&str> = columns
        .iter()
        .flat_map(|v| v.kernels.iter().map(|k| k.kernel.as_str()))
        .collect();
    kernels.sort_unstable();
    kernels.dedup();
    kernels.sort_by(|a, b| {
        let gap = |k: &str| time(1, k).0 - time(2, k).0;
        gap(b).total_cmp(&gap(a)).then_with(|| a.cmp(b))
    });
    let calls = |v: &StepKernels| v.kernels.iter().map(|k| k.calls).sum::<usize>();
    let _ = writeln!(
        out,
        "\n### {half}: f32, mixed_{half}, pure_{half}\n\n\
         Kernels' total: {:.2} / {:.2} / {:.2} ms, {} / {} / {} kernels.\n\n\
         | kernel | f32 ms (calls) | mixed ms (calls) | pure ms (calls) | mixed - pure ms |\n\
         |---|---:|---:|---:|---:|",
        f32v.total_ms,
        mixed.total_ms,
        pure.total_ms,
        calls(f32v),
        calls(mixed),
        calls(pure),
    );
    for k in kernels.iter().take(TOP) {
        let cell = |c: usize| {
            let (ms, calls) = time(c, k);
            format!("{ms:.3} ({calls})")
        };
        let _ = writeln!(
            out,
            "| `{k}` | {} | {} | {} | {:+.3} |",
            cell(0),
            cell(1),
            cell(2),
            time(1, k).0 - time(2, k).0,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cubecl 0.11 profiling log as it writes one (two steps, a sync after each), cut to
    /// a few kernels; the summary tables' rows are not kernel lines.
    const LOG: &str = "\
| 2.5ms      | CastElement_5266e5c6
| 500µs      | KernelBinop | AddOp_7b45a663
|⎺⎺⎺⎺⎺⎺⎺⎺| 
| Name         | Duration | Num Computed | Ratio |
|⎼⎼⎼⎼⎼⎼⎼⎼| 
| CastElement_5266e5c6 | 2.5ms | 1 | 83 % |
|⎯⎯⎯⎯⎯⎯⎯⎯| 
| 123.5µs    | CastElement_5266e5c6
| 1.5ms      | MatmulEntry | TensorArgs | DynamicScalar | RowMajorGlobalPartitionMatmul_b5594a56
| 20µs       | CastElement_916bd7c7
| 30µs       | KernelBinop | AddOp_efb08d72
|⎺⎺⎺⎺⎺⎺⎺⎺| 
| Total        | 1.6735ms | 4 | 100 % |
|⎯⎯⎯⎯⎯⎯⎯⎯| 
| 100µs      | CastElement_5266e5c6
| 2ms        | MatmulEntry | TensorArgs | DynamicScalar | RowMajorGlobalPartitionMatmul_b5594a56
| 40µs       | CastElement_916bd7c7
| 60ns       | KernelBinop | AddOp_efb08d72
|⎺⎺⎺⎺⎺⎺⎺⎺| 
|⎯⎯⎯⎯⎯⎯⎯⎯| 
";

    #[test]
    fn the_last_step_is_the_kernels_between_the_last_two_syncs() {
        let kernels = last_step(LOG).unwrap();
        let expected = [
            ("MatmulEntry … RowMajorGlobalPartitionMatmul", 1, 2.0),
            ("CastElement", 2, 0.14),
            ("KernelBinop AddOp", 1, 0.000_06),
        ];
        assert_eq!(kernels.len(), expected.len());
        for (got, (kernel, calls, ms)) in kernels.iter().zip(expected) {
            assert_eq!((got.kernel.as_str(), got.calls), (kernel, calls));
            assert!((got.ms - ms).abs() < 1e-9, "{}: {} ms", got.kernel, got.ms);
        }
    }

    #[test]
    fn a_step_that_syncs_inside_itself_is_refused() {
        // The last two segments differ: the first step's kernels and a second step's tail.
        let split = LOG.replace("| 2ms        | MatmulEntry", "| 2ms        | ReduceKernel");
        assert!(last_step(&split).unwrap_err().contains("syncs inside"));
        assert!(last_step("| 1ms | CastElement_5266e5c6\n").is_err());
    }

    #[test]
    fn durations_read_in_every_unit_cubecl_writes() {
        let close = |text: &str, ms: f64| (millis(text).unwrap() - ms).abs() < 1e-12;
        assert!(close("2.5ms", 2.5));
        assert!(close("1.5s", 1500.0));
        assert!(close("60ns", 0.000_06));
        assert!(close("123.5µs", 0.1235));
        assert_eq!(millis("Name"), None);
    }
}
