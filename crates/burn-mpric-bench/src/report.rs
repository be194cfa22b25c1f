//! The report: Markdown tables, JSON, and an SVG bar chart of the ratios to the bare backend.

use std::fmt::Write as _;

use serde::Serialize;

use crate::memory::Peak;
use crate::run::{CastRow, HOST_READ_SUFFIX, Measured, NumError, ON_DEVICE_SUFFIX, Row, Variant};
use crate::workloads::Workload;

/// The machine the run came from.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    /// CPU model (from `/proc/cpuinfo`).
    pub cpu: String,
    /// Logical cores available to the process.
    pub cores: usize,
    /// Total memory (from `/proc/meminfo`).
    pub memory: String,
    /// Operating system (from `/etc/os-release`).
    pub os: String,
    /// Vulkan drivers installed (ICD files), which is what Wgpu picks its adapter from.
    pub vulkan_icds: Vec<String>,
    /// The 1-minute load average at the start and at the end of the run (other processes
    /// competing for the cores show here).
    pub load_average: String,
}

/// A backend the run considered.
#[derive(Debug, Clone, Serialize)]
pub struct BackendInfo {
    /// `flex`, `wgpu`, `vulkan`, `metal` or `cuda`.
    pub name: String,
    /// Whether it ran.
    pub ran: bool,
    /// Its name as Burn reports it, or why it did not run.
    pub detail: String,
    /// The threads it computes on, and where the figure comes from.
    pub threads: String,
    /// Where its memory figures come from.
    pub memory: String,
}

/// A target's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Every measurement meets it.
    Met,
    /// At least one measurement misses it.
    Missed,
    /// Nothing to judge it on; the reason is in `measured`.
    NotMeasured,
}

/// A target read from the report.
#[derive(Debug, Clone, Serialize)]
pub struct Target {
    /// What is measured.
    pub name: String,
    /// The requirement.
    pub requirement: String,
    /// The measured values, or why there are none.
    pub measured: String,
    /// The verdict.
    pub verdict: Verdict,
}

/// Everything a run produced.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// `default` or `full`.
    pub mode: String,
    /// When the run started (UTC, `YYYY-MM-DD HH:MM`).
    pub started: String,
    /// Wall time of the whole run, seconds.
    pub wall_s: f64,
    /// The machine.
    pub machine: Machine,
    /// The backends considered.
    pub backends: Vec<BackendInfo>,
    /// The targets.
    pub targets: Vec<Target>,
    /// One row per workload, size, backend and variant.
    pub rows: Vec<Row>,
    /// Casts per MLP step.
    pub casts: Vec<CastRow>,
}

fn measured(row: &Row) -> Option<&Measured> {
    row.result.as_ref().ok()
}

/// Evaluates the targets of the suite on `rows`.
pub fn targets(rows: &[Row], backends: &[BackendInfo]) -> Vec<Target> {
    let mut out = Vec::new();

    // 1. The identity policy costs at most 3% on the MLP training step.
    let identity: Vec<(String, f64)> = rows
        .iter()
        .filter(|r| r.workload == Workload::MlpStep && r.variant == Variant::Identity.name())
        .filter_map(|r| measured(r).map(|m| (r.backend.clone(), m.ratio_to_bare)))
        .collect();
    out.push(judge(
        "Identity-policy overhead, mlp_step",
        "median ratio identity / bare <= 1.03 on every backend",
        identity
            .iter()
            .map(|(b, ratio)| (format!("{b}: {ratio:.3}"), *ratio <= 1.03))
            .collect(),
        "mlp_step was not run",
    ));

    // 2. Dynamic loss scaling adds at most 5% to a training step with its host read, 3% on
    // the device path. Judged on `mixed_f16`, the policy that needs it (bf16 and f32 have
    // f32's exponent range); the other policies are listed for reference.
    let paths = [
        (ON_DEVICE_SUFFIX, " (on device)", 1.03),
        (HOST_READ_SUFFIX, " (host read)", 1.05),
    ];
    let mut scaler = Vec::new();
    let mut reference = Vec::new();
    for with in rows
        .iter()
        .filter(|r| r.workload == Workload::LossScalerStep)
    {
        let Some((suffix, path, limit)) = paths
            .iter()
            .find(|(suffix, _, _)| with.variant.ends_with(suffix))
        else {
            continue;
        };
        let base = with.variant.trim_end_matches(suffix);
        let without = rows.iter().find(|r| {
            r.workload == Workload::LossScalerStep && r.backend == with.backend && r.variant == base
        });
        if let (Some(a), Some(b)) = (without.and_then(measured), measured(with)) {
            let ratio = b.paired_ratio.unwrap_or(b.median_ms / a.median_ms);
            let text = format!(
                "{} {base}{path}: {:+.1}%",
                with.backend,
                (ratio - 1.0) * 100.0
            );
            if base == Variant::MixedF16.name() {
                scaler.push((text, ratio <= *limit));
            } else {
                reference.push(text);
            }
        }
    }
    let mut target = judge(
        "Dynamic loss scaling overhead, MLP training step (loss_scaler_step)",
        "step time with / without the dynamic scaler (median of the per-round ratios) at mixed_f16 on every backend: <= 1.05 with the host read, <= 1.03 on the device path",
        scaler,
        "loss_scaler_step was not run at mixed_f16",
    );
    if !reference.is_empty() {
        target.measured = format!(
            "{} (for reference, policies that need no scaling: {})",
            target.measured,
            reference.join("; ")
        );
    }
    out.push(target);

    // 3, 4. f16 peak memory of the transformer steps on Wgpu: the one-block step, and the step
    // whose activations dominate its memory, where halving the activations must show.
    out.push(memory_target(
        rows,
        backends,
        Workload::TransformerBlockStep,
        0.65,
    ));
    out.push(memory_target(
        rows,
        backends,
        Workload::TransformerActivationsStep,
        0.60,
    ));

    // 5. Mixed precision against its ideal, the same model stored at the half dtype.
    out.push(pure_half_time_target(
        rows,
        Workload::TransformerActivationsStep,
        1.15,
    ));
    out
}

/// The row of `variant` in `workload` on `backend`.
fn find<'a>(
    rows: &'a [Row],
    workload: Workload,
    backend: &str,
    variant: Variant,
) -> Option<&'a Row> {
    rows.iter()
        .find(|r| r.workload == workload && r.backend == backend && r.variant == variant.name())
}

/// The backends `workload` has rows on, in report order.
fn backends_of(rows: &[Row], workload: Workload) -> Vec<&str> {
    let mut out: Vec<&str> = Vec::new();
    for r in rows.iter().filter(|r| r.workload == workload) {
        if !out.contains(&r.backend.as_str()) {
            out.push(&r.backend);
        }
    }
    out
}

/// A variant's peak memory over the f32 baseline's, from the same group.
#[derive(Debug, Clone, Copy, PartialEq)]
struct PeakRatio {
    ratio: f64,
    bytes: u64,
    f32_bytes: u64,
}

impl std::fmt::Display for PeakRatio {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:.3} ({} vs {})",
            self.ratio,
            bytes(self.bytes),
            bytes(self.f32_bytes)
        )
    }
}

/// The [`PeakRatio`] of `variant` in `workload` on `backend`, or why there is none.
fn peak_ratio(
    rows: &[Row],
    workload: Workload,
    backend: &str,
    variant: Variant,
) -> Result<PeakRatio, String> {
    let row = find(rows, workload, backend, variant)
        .ok_or_else(|| format!("{} was not run on {backend}", workload.name()))?;
    let half = row
        .result
        .as_ref()
        .map_err(|reason| format!("{}: {reason}", variant.name()))?;
    let f32_row = find(rows, workload, backend, Variant::Bare)
        .and_then(measured)
        .ok_or_else(|| "the f32 baseline did not run".to_string())?;
    match (&f32_row.peak, &half.peak) {
        (Peak::Bytes { bytes: f32_bytes }, Peak::Bytes { bytes }) if *f32_bytes > 0 => {
            Ok(PeakRatio {
                ratio: *bytes as f64 / *f32_bytes as f64,
                bytes: *bytes,
                f32_bytes: *f32_bytes,
            })
        }
        (Peak::NotReported { reason }, _) | (_, Peak::NotReported { reason }) => {
            Err(reason.clone())
        }
        _ => Err("zero bytes reported for f32".into()),
    }
}

/// Peak memory of `mixed_f16` over the f32 baseline's, in `workload`, judged on Wgpu against
/// `limit`. The other backends' ratios, and those of the other half-precision variants, are
/// listed for reference.
fn memory_target(rows: &[Row], backends: &[BackendInfo], workload: Workload, limit: f64) -> Target {
    let name = format!("Peak memory at f16, {} on wgpu", workload.name());
    let requirement = format!("peak bytes mixed_f16 / f32 <= {limit:.2}");
    let wgpu_ran = backends.iter().find(|b| b.name == "wgpu");
    let mut target = match (
        wgpu_ran,
        peak_ratio(rows, workload, "wgpu", Variant::MixedF16),
    ) {
        (_, Ok(r)) => Target {
            name: name.clone(),
            requirement: requirement.clone(),
            measured: r.to_string(),
            verdict: if r.ratio <= limit {
                Verdict::Met
            } else {
                Verdict::Missed
            },
        },
        (Some(b), Err(_)) if !b.ran => not_measured(
            &name,
            &requirement,
            format!("wgpu did not run: {}", b.detail),
        ),
        (_, Err(why)) => not_measured(&name, &requirement, why),
    };
    let half_variants = [
        Variant::MixedF16,
        Variant::MixedBf16,
        Variant::PureF16,
        Variant::PureBf16,
    ];
    let reference: Vec<String> = backends_of(rows, workload)
        .into_iter()
        .flat_map(|b| half_variants.map(|v| (b, v)))
        .filter(|(b, v)| !(*b == "wgpu" && *v == Variant::MixedF16))
        .filter_map(|(b, v)| {
            peak_ratio(rows, workload, b, v)
                .ok()
                .map(|r| format!("{b} {}: {:.3}", v.name(), r.ratio))
        })
        .collect();
    if !reference.is_empty() {
        target.measured = format!(
            "{} (for reference: {})",
            target.measured,
            reference.join("; ")
        );
    }
    target
}

/// Median step time of each mixed variant over its pure-half counterpart (the bare backend
/// training the model stored at the same half dtype, timed in the same interleaved rounds)
/// in `workload`, on every backend where both ran: what the decorator's casts and f32
/// master weights cost against the ideal.
fn pure_half_time_target(rows: &[Row], workload: Workload, limit: f64) -> Target {
    let pairs = [
        (Variant::MixedF16, Variant::PureF16),
        (Variant::MixedBf16, Variant::PureBf16),
    ];
    let values = backends_of(rows, workload)
        .into_iter()
        .flat_map(|b| pairs.map(|pair| (b, pair)))
        .filter_map(|(b, (mixed, pure))| {
            let m = find(rows, workload, b, mixed).and_then(measured)?;
            let p = find(rows, workload, b, pure).and_then(measured)?;
            let ratio = m.median_ms / p.median_ms;
            Some((
                format!(
                    "{b} {} / {}: {ratio:.3} ({} vs {} ms)",
                    mixed.name(),
                    pure.name(),
                    ms(m.median_ms),
                    ms(p.median_ms)
                ),
                ratio <= limit,
            ))
        })
        .collect();
    judge(
        &format!("Mixed vs pure half time, {}", workload.name()),
        &format!(
            "median ms mixed_f16 / pure_f16 (and bf16 where run) <= {limit:.2} on every backend"
        ),
        values,
        &format!(
            "{} was not run with both a mixed and a pure-half variant",
            workload.name()
        ),
    )
}

fn not_measured(name: &str, requirement: &str, why: String) -> Target {
    Target {
        name: name.into(),
        requirement: requirement.into(),
        measured: format!("not measured: {why}"),
        verdict: Verdict::NotMeasured,
    }
}

fn judge(name: &str, requirement: &str, values: Vec<(String, bool)>, none: &str) -> Target {
    if values.is_empty() {
        return not_measured(name, requirement, none.into());
    }
    let verdict = if values.iter().all(|(_, ok)| *ok) {
        Verdict::Met
    } else {
        Verdict::Missed
    };
    let measured: Vec<String> = values
        .into_iter()
        .map(|(v, ok)| if ok { v } else { format!("{v} (missed)") })
        .collect();
    Target {
        name: name.into(),
        requirement: requirement.into(),
        measured: measured.join("; "),
        verdict,
    }
}

/// Milliseconds with three significant digits.
pub fn ms(v: f64) -> String {
    if !v.is_finite() {
        return "-".into();
    }
    match v.abs() {
        a if a < 0.01 => format!("{v:.4}"),
        a if a < 1.0 => format!("{v:.3}"),
        a if a < 10.0 => format!("{v:.2}"),
        a if a < 100.0 => format!("{v:.1}"),
        _ => format!("{v:.0}"),
    }
}

/// Bytes as KiB / MiB / GiB.
pub fn bytes(b: u64) -> String {
    let b = b as f64;
    if b < 1024.0 * 1024.0 {
        format!("{:.1} KiB", b / 1024.0)
    } else if b < 1024.0 * 1024.0 * 1024.0 {
        format!("{:.2} MiB", b / (1024.0 * 1024.0))
    } else {
        format!("{:.2} GiB", b / (1024.0 * 1024.0 * 1024.0))
    }
}

fn sci(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v.is_nan() {
        "NaN".into()
    } else {
        format!("{v:.2e}")
    }
}

fn peak_cell(p: &Peak) -> String {
    match p {
        Peak::Bytes { bytes: b } => bytes(*b),
        Peak::NotReported { reason } => format!("not reported by this backend: {reason}"),
    }
}

/// The "Machine" and "Backends" sections of a report.
pub(crate) fn machine_and_backends(s: &mut String, machine: &Machine, backends: &[BackendInfo]) {
    let m = machine;
    let _ = writeln!(s, "## Machine\n");
    let _ = writeln!(s, "- CPU: {} ({} logical cores)", m.cpu, m.cores);
    let _ = writeln!(s, "- Memory: {}", m.memory);
    let _ = writeln!(s, "- OS: {}", m.os);
    let icds = if m.vulkan_icds.is_empty() {
        "none found".to_string()
    } else {
        m.vulkan_icds.join(", ")
    };
    let _ = writeln!(s, "- Vulkan drivers (ICDs): {icds}");
    let _ = writeln!(
        s,
        "- Load average (1 min), start -> end: {}",
        m.load_average
    );
    let _ = writeln!(s, "\n## Backends\n");
    let _ = writeln!(s, "| backend | ran | detail | threads | memory figures |");
    let _ = writeln!(s, "| --- | --- | --- | --- | --- |");
    for b in backends {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} |",
            b.name,
            if b.ran { "yes" } else { "no" },
            b.detail,
            b.threads,
            b.memory
        );
    }
}

pub(crate) fn verdict_cell(v: Verdict) -> &'static str {
    match v {
        Verdict::Met => "**met**",
        Verdict::Missed => "**missed**",
        Verdict::NotMeasured => "not measured",
    }
}

impl Report {
    /// The Markdown report.
    pub fn markdown(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "# burn-mpric benchmark report\n");
        let _ = writeln!(
            s,
            "Run: `{}` mode, started {} UTC, {:.0} s in all. Generated by `cargo xtask bench` \
             (the `mpric-bench` binary).\n",
            self.mode, self.started, self.wall_s
        );
        machine_and_backends(&mut s, &self.machine, &self.backends);
        let _ = writeln!(s, "\n## Targets\n");
        let _ = writeln!(s, "| target | requirement | measured | verdict |");
        let _ = writeln!(s, "| --- | --- | --- | --- |");
        for t in &self.targets {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} |",
                t.name,
                t.requirement,
                t.measured,
                verdict_cell(t.verdict)
            );
        }
        let _ = writeln!(s, "\n## Results\n");
        let _ = writeln!(
            s,
            "Times are per iteration (ms), each iteration ending with a device sync. All variants \
             of a group ran interleaved in the same rounds, each round starting one variant \
             later; ratio = median / median of the f32 baseline (the bare backend, first row of \
             the group) from those rounds. `pure_*` rows: the bare backend training the model \
             stored at that half dtype (parameters, gradients and Adam moments), the ideal \
             mixed precision is compared with. Peak memory: above what was in use before the \
             case was built (inputs, parameters, optimizer state, activations). Error: against \
             the f32 baseline from the same init and inputs, on the forward result (matmul, \
             conv2d) or on the model's prediction after 3 training steps; rel = max abs error / \
             max |reference|.\n"
        );
        let _ = writeln!(
            s,
            "| workload | size | backend | variant | median ms | min ms | max ms | rounds x iters | ratio to f32 | peak memory | max abs err | rel err | note |"
        );
        let _ = writeln!(
            s,
            "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | --- |"
        );
        for r in &self.rows {
            let note = r.note.clone().unwrap_or_default();
            match &r.result {
                Ok(m) => {
                    let (abs, rel) = match &m.error {
                        NumError::Reference => ("reference".to_string(), "reference".to_string()),
                        NumError::Measured { max_abs, rel } => (sci(*max_abs), sci(*rel)),
                        NumError::NotApplicable { reason } => {
                            (format!("n/a ({reason})"), "n/a".into())
                        }
                    };
                    let _ = writeln!(
                        s,
                        "| {} | {} | {} | {} | {} | {} | {} | {} x {} | {:.3} | {} | {} | {} | {} |",
                        r.workload.name(),
                        r.size,
                        r.backend,
                        r.variant,
                        ms(m.median_ms),
                        ms(m.min_ms),
                        ms(m.max_ms),
                        m.rounds,
                        m.iters_per_sample,
                        m.ratio_to_bare,
                        peak_cell(&m.peak),
                        abs,
                        rel,
                        note
                    );
                }
                Err(reason) => {
                    let _ = writeln!(
                        s,
                        "| {} | {} | {} | {} | {reason} | | | | | | | | |",
                        r.workload.name(),
                        r.size,
                        r.backend,
                        r.variant,
                    );
                }
            }
        }
        if !self.casts.is_empty() {
            let _ = writeln!(s, "\n## Casts per MLP training step\n");
            let _ = writeln!(
                s,
                "Counted by running the step under `MixedPrecision<Instrumented<B>>` \
                 (`burn_mpric::instrument::record`, `float_cast` calls). The casts' time is \
                 that of a replay of the same casts (same shapes and dtypes) on the bare \
                 backend, interleaved with the steps.\n"
            );
            let _ = writeln!(
                s,
                "| backend | size | variant | ops per step | casts per step | casts by source dtype | replayed | casts alone ms | step ms | share |"
            );
            let _ = writeln!(
                s,
                "| --- | --- | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: |"
            );
            for c in &self.casts {
                let by: Vec<String> = c
                    .casts_by_source
                    .iter()
                    .map(|(k, v)| format!("{k}: {v}"))
                    .collect();
                let share = match (c.casts_ms, c.step_ms) {
                    (Some(a), Some(b)) => format!("{:.1}%", 100.0 * a / b),
                    _ => "-".into(),
                };
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                    c.backend,
                    c.size,
                    c.variant,
                    c.ops_per_step,
                    c.casts_per_step,
                    if by.is_empty() {
                        "-".into()
                    } else {
                        by.join(", ")
                    },
                    c.replayed_casts,
                    c.casts_ms.map(ms).unwrap_or_else(|| "-".into()),
                    c.step_ms.map(ms).unwrap_or_else(|| "-".into()),
                    share
                );
            }
        }
        let _ = writeln!(
            s,
            "\nPlot: `report.svg` (ratio to the f32 baseline per workload and variant, log scale). Raw data: \
             `report.json`."
        );
        s
    }

    /// A horizontal bar chart of the ratios to the bare backend (log2 scale, bars from 1).
    pub fn svg(&self) -> String {
        let bars: Vec<(String, String, f64)> = self
            .rows
            .iter()
            .filter(|r| r.variant != Variant::Bare.name())
            .filter_map(|r| {
                measured(r).map(|m| {
                    (
                        format!(
                            "{} {} {} — {}",
                            r.backend,
                            r.workload.name(),
                            r.size,
                            r.variant
                        ),
                        r.variant.clone(),
                        m.ratio_to_bare,
                    )
                })
            })
            .filter(|(_, _, ratio)| ratio.is_finite() && *ratio > 0.0)
            .collect();
        let lo = bars
            .iter()
            .map(|b| b.2.log2().floor())
            .fold(-1.0f64, f64::min)
            .max(-10.0);
        let hi = bars
            .iter()
            .map(|b| b.2.log2().ceil())
            .fold(1.0f64, f64::max)
            .min(10.0);
        let (label_w, plot_w, row_h, top, bottom) = (430.0, 520.0, 16.0, 50.0, 30.0);
        let width = label_w + plot_w + 20.0;
        let height = top + bottom + row_h * bars.len() as f64;
        let x = |ratio: f64| label_w + (ratio.log2().clamp(lo, hi) - lo) / (hi - lo) * plot_w;
        let mut s = String::new();
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="11">"#
        );
        let _ = writeln!(
            s,
            r#"<rect width="100%" height="100%" fill="white"/><text x="10" y="20" font-size="14">burn-mpric: median time / f32 on the bare backend ({} mode, {}); left of 1 = faster</text>"#,
            self.mode, self.started
        );
        let mut tick = lo;
        while tick <= hi {
            let value = 2f64.powf(tick);
            let tx = x(value);
            let _ = writeln!(
                s,
                r##"<line x1="{tx:.1}" y1="{:.1}" x2="{tx:.1}" y2="{:.1}" stroke="{}"/><text x="{tx:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
                top - 8.0,
                height - bottom + 4.0,
                if tick == 0.0 { "#000" } else { "#ddd" },
                top - 12.0,
                if value >= 1.0 {
                    format!("{value}")
                } else {
                    format!("1/{}", 1.0 / value)
                }
            );
            tick += 1.0;
        }
        for (i, (label, variant, ratio)) in bars.iter().enumerate() {
            let y = top + row_h * i as f64;
            let color = if variant.starts_with("casts") {
                "#59a14f"
            } else if variant.contains("scaler") {
                "#b07aa1"
            } else if variant.starts_with("pure") {
                "#76b7b2"
            } else if variant.contains("bf16") {
                "#f28e2b"
            } else if variant.contains("f16") {
                "#4e79a7"
            } else {
                "#9c9c9c"
            };
            let (x0, x1) = (x(1.0), x(*ratio));
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text><rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{color}"/><text x="{:.1}" y="{:.1}">{ratio:.2}</text>"#,
                label_w - 6.0,
                y + row_h * 0.75,
                escape(label),
                x0.min(x1),
                y + 2.0,
                (x1 - x0).abs().max(1.0),
                row_h - 4.0,
                x0.max(x1) + 3.0,
                y + row_h * 0.75,
            );
        }
        let _ = writeln!(s, "</svg>");
        s
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(ms(12.345), "12.3");
        assert_eq!(ms(0.1234), "0.123");
        assert_eq!(bytes(2048), "2.0 KiB");
        assert_eq!(bytes(3 * 1024 * 1024), "3.00 MiB");
    }

    #[test]
    fn a_target_with_no_measurement_says_why() {
        let t = targets(&[], &[]);
        assert_eq!(t.len(), 5);
        assert!(t.iter().all(|t| t.verdict == Verdict::NotMeasured));
        assert!(t[2].measured.starts_with("not measured: "));
        assert!(t[3].measured.starts_with("not measured: "));
    }

    fn row(backend: &str, variant: Variant, median_ms: f64, peak: u64) -> Row {
        Row {
            workload: Workload::TransformerActivationsStep,
            size: "b16".into(),
            backend: backend.into(),
            variant: variant.name().into(),
            policy: None,
            result: Ok(Measured {
                median_ms,
                min_ms: median_ms,
                max_ms: median_ms,
                rounds: 3,
                round_ms: vec![median_ms; 3],
                paired_ratio: None,
                iters_per_sample: 1,
                ratio_to_bare: f64::NAN,
                peak: Peak::Bytes { bytes: peak },
                error: NumError::Reference,
            }),
            note: None,
        }
    }

    #[test]
    fn mixed_precision_is_judged_against_f32_memory_and_pure_half_time() {
        let rows = [
            row("flex", Variant::Bare, 10.0, 1000),
            row("flex", Variant::MixedF16, 12.0, 700),
            row("flex", Variant::PureF16, 10.0, 500),
            row("wgpu", Variant::Bare, 100.0, 1000),
            row("wgpu", Variant::MixedF16, 110.0, 550),
            row("wgpu", Variant::PureF16, 100.0, 500),
        ];
        let t = targets(&rows, &[]);
        let (memory, time) = (&t[3], &t[4]);
        assert_eq!(memory.verdict, Verdict::Met, "{memory:?}");
        assert!(memory.measured.starts_with("0.550 "), "{memory:?}");
        assert!(
            memory.measured.contains("flex mixed_f16: 0.700"),
            "{memory:?}"
        );
        assert!(memory.measured.contains("wgpu pure_f16 (bare): 0.500"));
        // flex 1.2 misses 1.15, wgpu 1.1 meets it: missed.
        assert_eq!(time.verdict, Verdict::Missed, "{time:?}");
        assert!(
            time.measured
                .contains("flex mixed_f16 / pure_f16 (bare): 1.200")
        );
        assert!(
            time.measured
                .contains("wgpu mixed_f16 / pure_f16 (bare): 1.100")
        );
    }
}
