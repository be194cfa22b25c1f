//! `mpric-bench --cost`: a cost model of a training step that shows a GPU step's time on the
//! CPU. Each step (MLP, transformer block, activation-heavy encoder, the MLP with the loss
//! scaler) at each variant is run once over `Instrumented<Flex>`, which logs every op the
//! backend receives with its dtypes and shapes; each op is lowered as Burn's cube backends
//! run it without fusion ([`lowering`]): kernels launched, bytes read and written, matmul
//! FLOPs, bytes uploaded. A device ([`device`]) turns that into a modeled time from a few
//! parameters taken from measured rows: matmul throughput per dtype from the matmul rows,
//! and a launch cost, one effective bandwidth and a host link fitted on the f32 steps. Every
//! other measured row is then predicted and its error reported ([`measured`]): the model is
//! to be trusted only as far as that list says. Writes `cost.md` and `cost.json`.

pub mod device;
#[cfg(feature = "fusion")]
pub mod fused;
pub mod lowering;
pub mod measured;
pub mod probe;
pub mod step;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use burn::backend::{Autodiff, Flex};
use burn_mpric::instrument::{Instrumented, OpRecord, record};
use burn_mpric::{MixedPrecision, MpSettings, SoftmaxPrecision};
use serde::Serialize;

use crate::harness::Case;
use crate::run::{Sizes, Variant, instrumented_case, mlp_spec};
use crate::workloads::{self, Scaling, Spec, Storage, Workload};
use device::{DeviceModel, MatmulPoint, Modeled, dtype_key};
use measured::MeasuredRow;
use probe::Probe;
use step::{KernelClass, MethodShare, StepCost};

/// The workloads the model is fitted on, at their f32 variant: the rest is predicted.
const FIT_ON: [Workload; 3] = [
    Workload::MlpStep,
    Workload::TransformerBlockStep,
    Workload::TransformerActivationsStep,
];

/// The variant as BENCHMARKS.md's tables name it.
pub fn short_name(variant: Variant) -> &'static str {
    match variant {
        Variant::Bare => "f32",
        Variant::Identity => "identity",
        Variant::MixedF16 => "mixed_f16",
        Variant::MixedBf16 => "mixed_bf16",
        Variant::PureF16 => "pure_f16",
        Variant::PureBf16 => "pure_bf16",
    }
}

/// One modeled step.
#[derive(Debug, Clone, Serialize)]
pub struct CostRow {
    /// The workload.
    pub workload: String,
    /// Its size, as the report labels it.
    pub size: String,
    /// `0.21` (the decorator).
    pub edition: String,
    /// The variant.
    pub variant: String,
    /// Whether Burn's fusion is modeled.
    pub fused: bool,
    /// Kernels launched in one step.
    pub kernels: usize,
    /// Bytes the kernels read.
    pub bytes_read: u64,
    /// Bytes the kernels write.
    pub bytes_written: u64,
    /// Bytes uploaded from the host.
    pub bytes_uploaded: u64,
    /// Bytes read back to the host.
    pub bytes_downloaded: u64,
    /// Matmul FLOPs.
    pub matmul_flops: f64,
    /// The modeled time on each device.
    pub modeled_ms: BTreeMap<String, Modeled>,
    /// Under fusion: the casts that still ran as kernels of their own (dtypes, shape).
    pub unfused_casts: Option<Vec<String>>,
    /// Kernels, bytes and FLOPs per kind of kernel.
    pub by_class: BTreeMap<KernelClass, MethodShare>,
    /// Kernels, bytes and FLOPs per method, the most bytes first.
    pub methods: Vec<(String, MethodShare)>,
    #[serde(skip)]
    cost: StepCost,
    #[serde(skip)]
    spec: Spec,
}

/// A measured row beside its model.
#[derive(Debug, Clone, Serialize)]
pub struct Validation {
    /// The device.
    pub device: String,
    /// `workload size variant`.
    pub row: String,
    /// `fit` (the parameters come from it) or `predicted`.
    pub role: String,
    /// Measured median.
    pub measured_ms: f64,
    /// Modeled.
    pub modeled_ms: f64,
    /// `modeled / measured - 1`.
    pub error: f64,
}

/// A target of the mixed step, judged on the model.
#[derive(Debug, Clone, Serialize)]
pub struct Target {
    /// What is compared.
    pub name: String,
    /// Its value.
    pub value: f64,
    /// The most it may be.
    pub limit: f64,
    /// `value <= limit`.
    pub met: bool,
}

/// `cost.json`.
#[derive(Debug, Clone, Serialize)]
pub struct CostReport {
    /// The devices and their parameters.
    pub devices: Vec<DeviceModel>,
    /// Every modeled step.
    pub rows: Vec<CostRow>,
    /// The measured rows beside their models.
    pub validation: Vec<Validation>,
    /// Measured rows with no model, and devices that could not be fitted.
    pub unmodeled: Vec<String>,
    /// The mixed steps' targets at the GPU sizes.
    pub targets: Vec<Target>,
}

impl CostRow {
    /// Whether this is the row of `variant` of `workload` at `size`, fused or not.
    fn is(&self, workload: &str, size: &str, variant: &str, fused: bool) -> bool {
        self.workload == workload
            && self.size == size
            && self.variant == variant
            && self.fused == fused
    }
}

/// A variant to model: the bench's variant, with the decorator's softmax setting where it
/// is not the default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModeledVariant {
    variant: Variant,
    softmax: Option<SoftmaxPrecision>,
}

/// The softmax settings other than the default that the transformer steps are modeled at
/// too: what the default's choice moves.
const OTHER_SOFTMAX: [(SoftmaxPrecision, &str); 2] = [
    (SoftmaxPrecision::Stored, "softmax stored"),
    (SoftmaxPrecision::Full, "softmax full"),
];

/// Variants to model, each with its name in the report.
type Named = Vec<(ModeledVariant, String)>;

/// One workload at one size: its spec and the variants to model.
fn steps(sizes: &Sizes) -> Vec<(Workload, Spec, Named)> {
    let named = |vs: &[Variant], suffix: &str| -> Named {
        vs.iter()
            .map(|v| {
                let m = ModeledVariant {
                    variant: *v,
                    softmax: None,
                };
                (m, format!("{}{suffix}", short_name(*v)))
            })
            .collect()
    };
    let with_softmax = |vs: &[Variant]| -> Named {
        let mut all = named(vs, "");
        for v in [Variant::MixedF16, Variant::MixedBf16] {
            for (mode, name) in OTHER_SOFTMAX {
                let m = ModeledVariant {
                    variant: v,
                    softmax: Some(mode),
                };
                all.push((m, format!("{}, {name}", short_name(v))));
            }
        }
        all
    };
    vec![
        (
            Workload::MlpStep,
            mlp_spec(sizes, Scaling::None),
            named(&Variant::ALL, ""),
        ),
        (
            Workload::LossScalerStep,
            mlp_spec(sizes, Scaling::HostRead),
            named(&Variant::ALL, " + dynamic scaler"),
        ),
        (
            Workload::TransformerBlockStep,
            sizes.transformer.clone(),
            with_softmax(&Variant::WITH_PURE_HALF),
        ),
        (
            Workload::TransformerActivationsStep,
            sizes.transformer_activations.clone(),
            with_softmax(&Variant::WITH_PURE_HALF),
        ),
    ]
}

/// The case of `m` over `Instrumented<Flex>`, stepped once.
fn logged_case(m: ModeledVariant, spec: &Spec) -> Option<Box<dyn Case>> {
    let device = Default::default();
    let (Some(policy), Some(softmax)) = (m.variant.policy(), m.softmax) else {
        return instrumented_case::<Flex>(&device, m.variant, spec);
    };
    let settings = MpSettings::new(policy).softmax_precision(softmax);
    let mp = MixedPrecision::<Instrumented<Flex>>::device(device, settings).ok()?;
    type Logged = Autodiff<MixedPrecision<Instrumented<Flex>>>;
    let mut case = workloads::build::<Logged>(spec, Storage::F32, &mp);
    case.step();
    Some(case)
}

/// The ops of one step of `m` of `spec`, logged on Flex after a first step.
fn logged_ops(m: ModeledVariant, spec: &Spec) -> Option<Vec<OpRecord>> {
    let mut case = logged_case(m, spec)?;
    let ((), ops) = record(|| case.step());
    Some(ops)
}

/// The cost of one step of `m` of `spec`: logged at the probe size and mapped to `spec`'s
/// where a probe stands in for it ([`probe`]), logged at `spec`'s size otherwise.
fn step_cost(m: ModeledVariant, spec: &Spec) -> Option<StepCost> {
    let ops = match Probe::of(spec) {
        Some(probe) => probe.map(&logged_ops(m, &probe.spec)?)?,
        None => logged_ops(m, spec)?,
    };
    Some(StepCost::of(&ops))
}

fn row(workload: Workload, spec: &Spec, variant: String, cost: StepCost) -> CostRow {
    CostRow {
        spec: spec.clone(),
        workload: workload.name().to_string(),
        size: spec.label(),
        edition: "0.21".into(),
        variant,
        fused: false,
        kernels: cost.kernels.len(),
        bytes_read: cost.bytes_read(),
        bytes_written: cost.bytes_written(),
        bytes_uploaded: cost.uploaded,
        bytes_downloaded: cost.downloaded,
        matmul_flops: cost.matmul_flops(),
        modeled_ms: BTreeMap::new(),
        unfused_casts: None,
        by_class: cost.by_class(),
        methods: cost
            .by_method()
            .into_iter()
            .map(|(m, s)| (m.to_string(), s))
            .collect(),
        cost,
    }
}

/// The variants modeled under fusion too (each takes minutes of autotuning on lavapipe):
/// f32, mixed and pure f16.
#[cfg(feature = "fusion")]
const FUSED: [ModeledVariant; 3] = [
    ModeledVariant {
        variant: Variant::Bare,
        softmax: None,
    },
    ModeledVariant {
        variant: Variant::MixedF16,
        softmax: None,
    },
    ModeledVariant {
        variant: Variant::PureF16,
        softmax: None,
    },
];

/// The steps of every workload and variant at `sizes`, each logged once on Flex; the MLP's
/// casts alone besides (`cast_overhead`'s replay: the casts of the mixed step); with
/// `fused` (and the `fusion` feature), the transformer steps of [`FUSED`]'s variants under
/// Burn's fusion too.
pub fn model_rows(sizes: &Sizes, fused: bool) -> Vec<CostRow> {
    // Without the `fusion` feature there is nothing fused to model.
    let _ = fused;
    let mut rows = Vec::new();
    for (workload, spec, variants) in steps(sizes) {
        let size = spec.label();
        for (m, name) in variants {
            eprintln!("[cost] {} {size} {name}", workload.name());
            let Some(cost) = step_cost(m, &spec) else {
                continue;
            };
            if workload == Workload::MlpStep && m.variant.policy().is_some() && name != "identity" {
                let casts = StepCost {
                    kernels: cost
                        .kernels
                        .iter()
                        .filter(|k| k.method == "float_cast")
                        .cloned()
                        .collect(),
                    ..StepCost::default()
                };
                rows.push(row(
                    Workload::CastOverhead,
                    &spec,
                    format!("casts alone ({name})"),
                    casts,
                ));
            }
            #[cfg(feature = "fusion")]
            if let (true, Some(probe)) = (fused && FUSED.contains(&m), Probe::of(&spec)) {
                match fused::fused_step(m, &probe) {
                    Ok(f) => {
                        let fused = StepCost {
                            uploaded: cost.uploaded,
                            downloaded: cost.downloaded,
                            ..f.cost
                        };
                        let mut r = row(workload, &spec, name.clone(), fused);
                        r.fused = true;
                        r.unfused_casts = Some(f.unfused_casts);
                        rows.push(r);
                    }
                    Err(why) => eprintln!("[cost] {name} fused: not modeled ({why})"),
                }
            }
            rows.push(row(workload, &spec, name, cost));
        }
    }
    rows
}

/// The measured matmul throughput of `backend`'s rows, per dtype, ascending in FLOPs.
fn matmul_points(measured: &[MeasuredRow], backend: &str) -> BTreeMap<String, Vec<MatmulPoint>> {
    let mut points: BTreeMap<String, Vec<MatmulPoint>> = BTreeMap::new();
    for r in measured
        .iter()
        .filter(|r| r.backend == backend && r.workload == "matmul")
    {
        let dtype = match r.variant.as_str() {
            "f32" => burn::tensor::DType::F32,
            "mixed_f16" => burn::tensor::DType::F16,
            "mixed_bf16" => burn::tensor::DType::BF16,
            _ => continue,
        };
        let Some(n) = r.size.split('x').next().and_then(|n| n.parse::<f64>().ok()) else {
            continue;
        };
        let flops = 2.0 * n * n * n;
        points
            .entry(dtype_key(dtype).to_string())
            .or_default()
            .push(MatmulPoint {
                flops,
                tflops: flops / (r.median_ms * 1e9),
            });
    }
    for p in points.values_mut() {
        p.sort_by(|a, b| a.flops.total_cmp(&b.flops));
    }
    points
}

/// The modeled step of a measured row. The loss-scaler and cast groups time the plain MLP
/// step beside their own variants: those rows are the MLP step's.
fn find<'a>(rows: &'a [CostRow], m: &MeasuredRow) -> Option<&'a CostRow> {
    let exact = |workload: &str| {
        rows.iter()
            .find(|r| r.is(workload, &m.size, &m.variant, false))
    };
    exact(&m.workload).or_else(|| {
        [Workload::LossScalerStep, Workload::CastOverhead]
            .iter()
            .any(|w| w.name() == m.workload)
            .then(|| exact(Workload::MlpStep.name()))
            .flatten()
    })
}

/// The step a measured mixed transformer row ran, where the decorator has changed since:
/// the 2026-12-04 run measured the softmax computed at f32 and stored at the compute dtype
/// (today's `SoftmaxPrecision::Stored`), and the backward of `exp` computing the
/// exponentials a second time (fixed on 2026-12-05): per attention layer, a cast of the
/// map up, an `exp` and a `sum_dim` of it at f32, and a cast back down.
fn as_measured(rows: &[CostRow], m: &MeasuredRow) -> Option<StepCost> {
    let half = m.variant.strip_prefix("mixed_")?;
    let stored = MeasuredRow {
        variant: format!("{}, softmax stored", m.variant),
        ..m.clone()
    };
    let r = find(rows, &stored)?;
    let dtype = if half == "f16" {
        burn::tensor::DType::F16
    } else {
        burn::tensor::DType::BF16
    };
    let Spec::Transformer {
        batch,
        seq,
        heads,
        layers,
        ..
    } = r.spec
    else {
        return None;
    };
    let map = (batch * heads * seq * seq) as u64;
    let (f32_bytes, half_bytes, row) = (4 * map, dtype.size() as u64 * map, 4 * map / seq as u64);
    let mut cost = r.cost.clone();
    for _ in 0..layers {
        cost.push_kernel("float_cast", half_bytes, f32_bytes);
        cost.push_kernel("float_exp", f32_bytes, f32_bytes);
        cost.push_kernel("float_sum_dim", f32_bytes, row);
        cost.push_kernel("float_cast", f32_bytes, half_bytes);
    }
    Some(cost)
}

/// Fits the device of `backend` on its matmul rows and its f32 steps, and the same device
/// with each of those workloads' own bandwidth; `Err` says why not.
fn fit_device(
    name: &str,
    backend: &str,
    measured: &[MeasuredRow],
    rows: &[CostRow],
) -> Result<[DeviceModel; 2], String> {
    let start = DeviceModel {
        name: name.to_string(),
        matmul: matmul_points(measured, backend),
        bandwidth_gbs: 1000.0,
        launch_us: 10.0,
        link_gbs: device::LINK_GBS,
        bandwidth_by_workload: BTreeMap::new(),
    };
    let fit_rows: Vec<(&str, &StepCost, f64)> = measured
        .iter()
        .filter(|m| {
            m.backend == backend
                && m.variant == "f32"
                && FIT_ON.iter().any(|w| w.name() == m.workload)
        })
        .filter_map(|m| find(rows, m).map(|r| (m.workload.as_str(), &r.cost, m.median_ms)))
        .collect();
    if fit_rows.len() < FIT_ON.len() {
        return Err(format!(
            "{name}: {} of the {} f32 steps to fit on are modeled",
            fit_rows.len(),
            FIT_ON.len()
        ));
    }
    let both: Vec<(&StepCost, f64)> = fit_rows.iter().map(|(_, s, ms)| (*s, *ms)).collect();
    let one = start
        .fit(&both)
        .ok_or_else(|| format!("{name}: no f32 steps to fit on"))?;
    let own = one.per_workload(&format!("{name}, bandwidth per workload"), &fit_rows);
    Ok([one, own])
}

/// The workload whose bandwidth a row's step takes: the loss-scaler and cast groups time
/// the MLP step.
fn bandwidth_workload(workload: &str) -> &str {
    if [Workload::LossScalerStep, Workload::CastOverhead]
        .iter()
        .any(|w| w.name() == workload)
    {
        Workload::MlpStep.name()
    } else {
        workload
    }
}

/// The devices to model: `(name, backend in the measured rows)`.
const DEVICES: [(&str, &str); 2] = [
    ("H200 CUDA (2026-12-04)", "cuda"),
    ("H200 Wgpu/WGSL (2026-12-04)", "wgpu"),
];

/// Fits each device, models every row on each, and checks the model against every measured
/// row it has a step for.
pub fn report(mut rows: Vec<CostRow>, measured: &[MeasuredRow]) -> CostReport {
    let mut devices = Vec::new();
    let mut validation = Vec::new();
    let mut unmodeled = Vec::new();
    for (name, backend) in DEVICES {
        let fitted = match fit_device(name, backend, measured, &rows) {
            Ok(d) => d,
            Err(why) => {
                unmodeled.push(why);
                continue;
            }
        };
        for device in fitted {
            let on = |workload: &str| device.for_workload(bandwidth_workload(workload));
            for r in rows.iter_mut() {
                let modeled = on(&r.workload).step(&r.cost);
                r.modeled_ms.insert(device.name.clone(), modeled);
            }
            for m in measured
                .iter()
                .filter(|m| m.backend == backend && m.workload != "matmul")
            {
                let as_measured = as_measured(&rows, m);
                let Some(step) = as_measured
                    .as_ref()
                    .or_else(|| find(&rows, m).map(|r| &r.cost))
                else {
                    if device.bandwidth_by_workload.is_empty() {
                        unmodeled.push(format!("{name}: {} {} {}", m.workload, m.size, m.variant));
                    }
                    continue;
                };
                let modeled = on(&m.workload).step(step).ms;
                let fit = m.variant == "f32" && FIT_ON.iter().any(|w| w.name() == m.workload);
                validation.push(Validation {
                    device: device.name.clone(),
                    row: format!("{} {} {}", m.workload, m.size, m.variant),
                    role: if fit { "fit" } else { "predicted" }.into(),
                    measured_ms: m.median_ms,
                    modeled_ms: modeled,
                    error: modeled / m.median_ms - 1.0,
                });
            }
            devices.push(device);
        }
    }
    let targets = targets(&rows, &devices);
    CostReport {
        devices,
        rows,
        validation,
        unmodeled,
        targets,
    }
}

/// The targets of the mixed steps at the sizes the GPU rows were measured at: bytes of the
/// mixed transformer block against pure half's, and the modeled times against f32's and
/// pure half's on each device.
fn targets(rows: &[CostRow], devices: &[DeviceModel]) -> Vec<Target> {
    let block = "b32 s512 d1024 h16 ff4096 l1";
    let activations = "b16 s256 d128 h4 ff512 l2";
    let get = |workload: &str, size: &str, variant: &str, fused: bool| {
        rows.iter().find(|r| r.is(workload, size, variant, fused))
    };
    let mut out = Vec::new();
    let mut push = |name: String, value: f64, limit: f64| {
        out.push(Target {
            name,
            value,
            limit,
            met: value <= limit,
        })
    };
    // `a`'s modeled time over `b`'s on each device, against `limit`.
    let times = |push: &mut dyn FnMut(String, f64, f64),
                 what: &str,
                 a: &CostRow,
                 b: &CostRow,
                 limit: f64| {
        for d in devices {
            let ms = |r: &CostRow| r.modeled_ms.get(&d.name).map_or(f64::NAN, |m| m.ms);
            push(format!("{what}, {}", d.name), ms(a) / ms(b), limit);
        }
    };
    let workload = Workload::TransformerBlockStep.name();
    for half in ["f16", "bf16"] {
        let (Some(mixed), Some(pure), Some(full)) = (
            get(workload, block, &format!("mixed_{half}"), false),
            get(workload, block, &format!("pure_{half}"), false),
            get(workload, block, "f32", false),
        ) else {
            continue;
        };
        let bytes = |r: &CostRow| (r.bytes_read + r.bytes_written) as f64;
        push(
            format!("transformer block, mixed_{half}: bytes over pure_{half}'s"),
            bytes(mixed) / bytes(pure),
            1.15,
        );
        if let (Some(m), Some(p)) = (
            get(workload, block, &format!("mixed_{half}"), true),
            get(workload, block, &format!("pure_{half}"), true),
        ) {
            push(
                format!("transformer block, mixed_{half}, fused: bytes over pure_{half}'s"),
                bytes(m) / bytes(p),
                1.15,
            );
        }
        let what = format!("transformer block, mixed_{half}");
        times(
            &mut push,
            &format!("{what}: time over f32's"),
            mixed,
            full,
            0.65,
        );
        times(
            &mut push,
            &format!("{what}: time over pure_{half}'s"),
            mixed,
            pure,
            1.15,
        );
    }
    let workload = Workload::TransformerActivationsStep.name();
    if let (Some(mixed), Some(full)) = (
        get(workload, activations, "mixed_f16", false),
        get(workload, activations, "f32", false),
    ) {
        let what = "activation-heavy step, mixed_f16: time over f32's";
        times(&mut push, what, mixed, full, 0.95);
    }
    out
}

fn gb(bytes: u64) -> f64 {
    bytes as f64 / 1e9
}

/// `cost.md`.
pub fn markdown(report: &CostReport) -> String {
    let mut out = String::from(
        "# A training step's cost, modeled\n\n\
         Each step logged once over `Instrumented<Flex>` and lowered as Burn's cube backends \
         run it without fusion: kernels, bytes read and written by them, matmul FLOPs, bytes \
         uploaded. The host queues the kernels (`host per kernel` each) while the device runs \
         them, a kernel taking `max(FLOPs / throughput, bytes / bandwidth)`: a step takes the \
         longer of the two, plus its transfers.\n\n\
         ## Devices\n\n\
         | device | host per kernel (us) | bandwidth (GB/s) | host link (GB/s), assumed | matmul TFLOP/s at the largest size |\n\
         |---|---:|---:|---:|---|\n",
    );
    for d in &report.devices {
        let tflops: Vec<String> = d
            .matmul
            .iter()
            .filter_map(|(k, p)| p.last().map(|p| format!("{k} {:.1}", p.tflops)))
            .collect();
        let bandwidth = if d.bandwidth_by_workload.is_empty() {
            format!("{:.0}", d.bandwidth_gbs)
        } else {
            let each: Vec<String> = d
                .bandwidth_by_workload
                .iter()
                .map(|(w, b)| format!("{w} {b:.0}"))
                .collect();
            each.join(", ")
        };
        let _ = writeln!(
            out,
            "| {} | {:.2} | {bandwidth} | {:.1} | {} |",
            d.name,
            d.launch_us,
            d.link_gbs,
            tflops.join(", ")
        );
    }
    let _ = write!(
        out,
        "\nMeasured rows: {}. Throughput from the matmul rows; the host's time per kernel and \
         one bandwidth fitted on the f32 steps together (`fit`), or the same host time and \
         each workload's bandwidth from its own f32 step (`bandwidth per workload`); every \
         other row is predicted. The measured mixed transformer rows ran the decorator of \
         2026-12-04, modeled as such (`softmax stored`, and the exponentials made twice).\n\n\
         ## Validation\n\n",
        measured::H200_RUN
    );
    out.push_str(
        "\
         | device | row | role | measured ms | modeled ms | error |\n|---|---|---|---:|---:|---:|\n",
    );
    for v in &report.validation {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.3} | {:.3} | {:+.1}% |",
            v.device,
            v.row,
            v.role,
            v.measured_ms,
            v.modeled_ms,
            v.error * 100.0
        );
    }
    for d in &report.devices {
        let predicted: Vec<f64> = report
            .validation
            .iter()
            .filter(|v| v.role == "predicted" && v.device == d.name)
            .map(|v| v.error.abs())
            .collect();
        let within = predicted.iter().filter(|e| **e <= 0.15).count();
        let worst = predicted.iter().fold(0f64, |m, e| m.max(*e));
        let _ = writeln!(
            out,
            "\n{}: {within} of {} predicted rows within 15% of their measured time (worst {:.1}%).",
            d.name,
            predicted.len(),
            worst * 100.0
        );
    }
    for u in &report.unmodeled {
        let _ = writeln!(out, "\n- not modeled: {u}");
    }
    out.push_str("\n## Targets\n\n| target | value | limit | met |\n|---|---:|---:|---|\n");
    for t in &report.targets {
        let _ = writeln!(
            out,
            "| {} | {:.3} | {:.2} | {} |",
            t.name,
            t.value,
            t.limit,
            if t.met { "yes" } else { "**no**" }
        );
    }
    mixed_against_pure(&mut out, report);
    unfused_casts(&mut out, report);
    out.push_str(
        "\n## Steps\n\n| workload | size | variant | fused | kernels | GB read | GB written | \
         GB uploaded | GFLOP |",
    );
    for d in &report.devices {
        let _ = write!(out, " {} ms |", d.name);
    }
    out.push_str("\n|---|---|---|---|---:|---:|---:|---:|---:|");
    for _ in &report.devices {
        out.push_str("---:|");
    }
    out.push('\n');
    for r in &report.rows {
        let _ = write!(
            out,
            "| {} | {} | {} | {} | {} | {:.3} | {:.3} | {:.3} | {:.1} |",
            r.workload,
            r.size,
            r.variant,
            if r.fused { "yes" } else { "no" },
            r.kernels,
            gb(r.bytes_read),
            gb(r.bytes_written),
            gb(r.bytes_uploaded),
            r.matmul_flops / 1e9
        );
        for d in &report.devices {
            let ms = r.modeled_ms.get(&d.name).map_or(f64::NAN, |m| m.ms);
            let _ = write!(out, " {ms:.2} |");
        }
        out.push('\n');
    }
    out
}

/// Where the mixed transformer block (at the GPU rows' size) moves more bytes than pure
/// half: per method, its kernels and bytes in both.
fn mixed_against_pure(out: &mut String, report: &CostReport) {
    let block = "b32 s512 d1024 h16 ff4096 l1";
    let get = |variant: &str| {
        report
            .rows
            .iter()
            .find(|r| r.is(Workload::TransformerBlockStep.name(), block, variant, false))
    };
    let (Some(mixed), Some(pure)) = (get("mixed_f16"), get("pure_f16")) else {
        return;
    };
    let share = |r: &CostRow, m: &str| {
        r.methods
            .iter()
            .find(|(name, _)| name == m)
            .map(|(_, s)| s.clone())
            .unwrap_or_default()
    };
    let mut names: Vec<&str> = mixed
        .methods
        .iter()
        .chain(&pure.methods)
        .map(|(m, _)| m.as_str())
        .collect();
    names.sort_unstable();
    names.dedup();
    let gap = |m: &str| share(mixed, m).bytes as f64 - share(pure, m).bytes as f64;
    names.sort_by(|a, b| gap(b).total_cmp(&gap(a)));
    let _ = writeln!(
        out,
        "\n## The mixed block against pure half\n\n`transformer_block_step` {block}, \
         mixed_f16 against pure_f16 (the methods whose bytes differ, the largest gap first).\n\n\
         | method | mixed kernels | mixed GB | pure kernels | pure GB | mixed - pure GB |\n\
         |---|---:|---:|---:|---:|---:|"
    );
    for m in names.into_iter().filter(|m| gap(m).abs() >= 1e6) {
        let (a, b) = (share(mixed, m), share(pure, m));
        let _ = writeln!(
            out,
            "| `{m}` | {} | {:.3} | {} | {:.3} | {:+.3} |",
            a.kernels,
            gb(a.bytes),
            b.kernels,
            gb(b.bytes),
            gap(m) / 1e9
        );
    }
}

/// The casts each fused row still runs as kernels of their own, grouped.
fn unfused_casts(out: &mut String, report: &CostReport) {
    let fused: Vec<&CostRow> = report.rows.iter().filter(|r| r.fused).collect();
    if fused.is_empty() {
        return;
    }
    out.push_str(
        "\n## Under fusion: the casts left as kernels of their own\n\n\
         | workload | size | variant | kernels | casts left (count x dtypes, shape, the op reading it) |\n\
         |---|---|---|---:|---|\n",
    );
    for r in fused {
        let mut groups: BTreeMap<&str, usize> = BTreeMap::new();
        for c in r.unfused_casts.iter().flatten() {
            *groups.entry(c.as_str()).or_default() += 1;
        }
        let casts: Vec<String> = groups.iter().map(|(c, n)| format!("{n} x {c}")).collect();
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} |",
            r.workload,
            r.size,
            r.variant,
            r.kernels,
            if casts.is_empty() {
                "none".to_string()
            } else {
                casts.join("; ")
            }
        );
    }
}

/// `--cost`: models the steps at the GPU sizes and the default ones, fits and checks the
/// devices, and writes `cost.md` and `cost.json` to `out`.
pub fn run(gpu: &Sizes, default: &Sizes, out: &Path) -> std::io::Result<CostReport> {
    let mut rows = model_rows(gpu, true);
    // A workload whose default size is its GPU size is modeled once.
    for r in model_rows(default, false) {
        if !rows
            .iter()
            .any(|g| g.is(&r.workload, &r.size, &r.variant, r.fused))
        {
            rows.push(r);
        }
    }
    let report = report(rows, &measured::h200());
    std::fs::create_dir_all(out)?;
    std::fs::write(out.join("cost.md"), markdown(&report))?;
    std::fs::write(
        out.join("cost.json"),
        serde_json::to_string_pretty(&report).map_err(std::io::Error::other)?,
    )?;
    Ok(report)
}
