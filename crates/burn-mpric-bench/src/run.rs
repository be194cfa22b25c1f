//! Runs the workloads on one backend: the variants (bare f32, identity, mixed f16 and bf16, and
//! for the transformer steps pure f16 and bf16), their numeric error, peak memory and
//! interleaved timing, as report rows.

use std::collections::BTreeMap;
use std::time::Instant;

use burn::backend::Autodiff;
use burn::tensor::backend::Backend;
use burn::tensor::{DType, FloatDType, Tensor};
use burn_mpric::instrument::{Instrumented, at_each_op, record};
use burn_mpric::{MixedPrecision, MpDevice, Policy};
use serde::Serialize;

use crate::harness::{Budget, Case, Samples, measure_interleaved};
use crate::memory::{MemorySource, Peak, Sampling, peak_of};
use crate::workloads::{self, Scaling, Spec, Storage, Workload};

/// The sizes one backend runs each workload at.
#[derive(Debug, Clone)]
pub struct Sizes {
    /// Matrix sides of `matmul`.
    pub matmul: Vec<usize>,
    /// The `conv2d` shape.
    pub conv: Spec,
    /// Batch and layer widths of the MLP workloads.
    pub mlp: (usize, Vec<usize>),
    /// The `transformer_block_step` shape.
    pub transformer: Spec,
    /// The `transformer_activations_step` shape.
    pub transformer_activations: Spec,
}

/// A backend to run the suite on.
pub struct Setup<I: Backend> {
    /// `flex`, `wgpu`, `vulkan`, `metal` or `cuda`.
    pub name: &'static str,
    /// The inner backend's device.
    pub device: I::Device,
    /// Where its memory figures come from.
    pub memory: MemorySource,
    /// What it runs.
    pub sizes: Sizes,
    /// How long each group is measured.
    pub budget: Budget,
}

/// The numeric error of a row against the bare f32 backend.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum NumError {
    /// This row is the reference.
    Reference,
    /// Max absolute error and max absolute error over the largest reference magnitude.
    Measured {
        /// Max absolute error.
        max_abs: f64,
        /// Max absolute error / max |reference|.
        rel: f64,
    },
    /// No error for this row; why.
    NotApplicable {
        /// Why.
        reason: String,
    },
}

/// What was measured for one variant.
#[derive(Debug, Clone, Serialize)]
pub struct Measured {
    /// Median milliseconds per iteration.
    pub median_ms: f64,
    /// Fastest sample.
    pub min_ms: f64,
    /// Slowest sample.
    pub max_ms: f64,
    /// Samples (rounds).
    pub rounds: usize,
    /// Milliseconds per iteration in each round, in round order.
    #[serde(skip)]
    pub round_ms: Vec<f64>,
    /// For a loss-scaler row (`+ dynamic scaler`): the median over rounds of its time over
    /// the time of the same policy without the scaler in that round.
    pub paired_ratio: Option<f64>,
    /// Iterations per sample.
    pub iters_per_sample: usize,
    /// Median over the f32 baseline's median (the bare backend), from the same interleaved
    /// run.
    pub ratio_to_bare: f64,
    /// Peak memory of the case.
    pub peak: Peak,
    /// Numeric error against the bare f32 backend.
    pub error: NumError,
}

/// One line of the report: a workload at a size, on a backend, under a variant.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// The workload.
    pub workload: Workload,
    /// Its size.
    pub size: String,
    /// The backend.
    pub backend: String,
    /// A [`Variant`] name, with a suffix for the loss scaler and cast replay rows.
    pub variant: String,
    /// The policy of the variant (none for the bare backend).
    pub policy: Option<String>,
    /// The measurement, or why there is none.
    pub result: Result<Measured, String>,
    /// A derived figure (the loss scaler's overhead, a cast share).
    pub note: Option<String>,
}

/// Casts counted in one MLP training step, and their time.
#[derive(Debug, Clone, Serialize)]
pub struct CastRow {
    /// The backend.
    pub backend: String,
    /// The MLP size.
    pub size: String,
    /// The variant.
    pub variant: String,
    /// Ops the decorator handed to the backend below it in one step.
    pub ops_per_step: usize,
    /// `float_cast` calls among them.
    pub casts_per_step: usize,
    /// Casts by source dtype (`F32: 11, F16: 7`).
    pub casts_by_source: BTreeMap<String, usize>,
    /// Casts the replay performs (those of a recorded step, on tensors of the same dtypes and
    /// sizes), to compare with `casts_per_step`.
    pub replayed_casts: usize,
    /// Median milliseconds of the replayed casts alone, on the bare backend.
    pub casts_ms: Option<f64>,
    /// Median milliseconds of the step (interleaved with the replay).
    pub step_ms: Option<f64>,
}

/// The variants a group compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// The bare backend at f32: the reference of every group.
    Bare,
    /// `MixedPrecision` at the identity policy (`p=f32,c=f32,o=f32`).
    Identity,
    /// `MixedPrecision`, f16 compute.
    MixedF16,
    /// `MixedPrecision`, bf16 compute.
    MixedBf16,
    /// The bare backend training the model stored at f16 (params, grads, Adam moments).
    PureF16,
    /// The bare backend training the model stored at bf16.
    PureBf16,
}

impl Variant {
    /// The variants of every group: the bare backend and the decorator's policies.
    pub(crate) const ALL: [Variant; 4] = [
        Variant::Bare,
        Variant::Identity,
        Variant::MixedF16,
        Variant::MixedBf16,
    ];

    /// [`ALL`](Self::ALL) and the pure-half variants: the ideal mixed precision's time and
    /// memory are compared with, on the transformer steps.
    pub(crate) const WITH_PURE_HALF: [Variant; 6] = [
        Variant::Bare,
        Variant::Identity,
        Variant::MixedF16,
        Variant::MixedBf16,
        Variant::PureF16,
        Variant::PureBf16,
    ];

    /// The name in the report. The f32 baseline says what "f32" is: Burn's cube matmul runs
    /// f32 matmuls on TF32 tensor cores on NVIDIA GPUs, so the baseline a GPU run compares
    /// with is not strict f32 there.
    pub fn name(self) -> &'static str {
        match self {
            Variant::Bare => "f32 (TF32 matmul where the GPU has it)",
            Variant::Identity => "identity",
            Variant::MixedF16 => "mixed_f16",
            Variant::MixedBf16 => "mixed_bf16",
            Variant::PureF16 => "pure_f16 (bare)",
            Variant::PureBf16 => "pure_bf16 (bare)",
        }
    }

    /// The decorator's policy; `None` for the variants on the bare backend.
    pub(crate) fn policy(self) -> Option<Policy> {
        match self {
            Variant::Bare | Variant::PureF16 | Variant::PureBf16 => None,
            Variant::Identity => Some(Policy::F32),
            Variant::MixedF16 => Some(Policy::mixed(burn_mpric::FloatDType::F16)),
            Variant::MixedBf16 => Some(Policy::mixed(burn_mpric::FloatDType::BF16)),
        }
    }

    /// The half dtype the variant computes at, if any.
    pub(crate) fn half(self) -> Option<FloatDType> {
        match self {
            Variant::MixedF16 | Variant::PureF16 => Some(FloatDType::F16),
            Variant::MixedBf16 | Variant::PureBf16 => Some(FloatDType::BF16),
            Variant::Bare | Variant::Identity => None,
        }
    }

    /// What the report says beside the variant's row.
    fn note(self) -> Option<&'static str> {
        match self {
            // Why a pure-half row's error is no measure of mixed precision's.
            Variant::PureF16 | Variant::PureBf16 => Some(
                "the ideal for time and memory, not for numerics: Adam's moments are at the \
                 half dtype too (at f16 the squared gradients underflow to 0, the second moment \
                 stays 0 and the steps grow)",
            ),
            _ => None,
        }
    }

    /// Where the variant keeps its parameters and inputs.
    fn storage(self) -> Storage {
        match self {
            Variant::PureF16 => Storage(FloatDType::F16),
            Variant::PureBf16 => Storage(FloatDType::BF16),
            _ => Storage::F32,
        }
    }
}

pub(crate) type Factory = Box<dyn Fn() -> Box<dyn Case>>;

/// A variant made ready for one spec: how to build its case, or why it can't run.
pub(crate) struct Prepared {
    pub(crate) variant: String,
    pub(crate) policy: Option<String>,
    pub(crate) factory: Result<Factory, String>,
    /// The same case over `Instrumented<I>`, for the memory readings: a device counter is read
    /// at every op boundary there (see [`peak_of`]). `None`: the memory is read on `factory`.
    pub(crate) memory_factory: Option<Factory>,
    /// Whether the case has an output to compare with the reference.
    pub(crate) has_output: bool,
    /// What the report says beside its row.
    pub(crate) note: Option<&'static str>,
}

fn mp_device<I: Backend>(
    device: &I::Device,
    variant: Variant,
) -> Option<Result<MpDevice<I>, String>> {
    variant.policy().map(|policy| {
        MixedPrecision::<I>::device(device.clone(), policy)
            .map_err(|e| format!("not supported by this backend: {e}"))
    })
}

/// The bare backend storing tensors at `storage`, if the device supports that dtype (what
/// `MixedPrecision::device` checks for a policy's compute dtype).
fn bare_storage<I: Backend>(device: &I::Device, storage: Storage) -> Result<Storage, String> {
    if I::supports_dtype(device, DType::from(storage.0)) {
        Ok(storage)
    } else {
        Err(format!(
            "not supported by this backend: {:?} is not supported by this device",
            storage.0
        ))
    }
}

/// How to build the case of `variant` for `spec` on the backend `I`, or why it can't run.
fn factory<I: Backend>(
    device: &I::Device,
    variant: Variant,
    spec: &Spec,
) -> Result<Factory, String> {
    let spec = spec.clone();
    match mp_device::<I>(device, variant) {
        None => bare_storage::<I>(device, variant.storage()).map(|storage| {
            let device = device.clone();
            Box::new(move || workloads::build::<Autodiff<I>>(&spec, storage, &device)) as Factory
        }),
        Some(Ok(mp)) => Ok(Box::new(move || {
            workloads::build::<Autodiff<MixedPrecision<I>>>(&spec, Storage::F32, &mp)
        })),
        Some(Err(reason)) => Err(reason),
    }
}

fn prepare<I: Backend>(
    device: &I::Device,
    variant: Variant,
    spec: &Spec,
    suffix: &str,
) -> Prepared {
    Prepared {
        variant: format!("{}{suffix}", variant.name()),
        policy: variant.policy().map(|p| p.to_string()),
        factory: factory::<I>(device, variant, spec),
        memory_factory: factory::<Instrumented<I>>(device, variant, spec).ok(),
        has_output: true,
        note: variant.note(),
    }
}

/// Measures one group of variants: the numeric error (against the first, the bare backend),
/// the peak memory of each alone, then the interleaved timing of all.
pub(crate) fn measure_group(
    backend: &str,
    memory: &MemorySource,
    workload: Workload,
    spec: &Spec,
    prepared: Vec<Prepared>,
    budget: Budget,
) -> Vec<Row> {
    let started = Instant::now();
    eprintln!(
        "[{}] {} {} ({} variants)",
        backend,
        workload.name(),
        spec.label(),
        prepared.len()
    );
    // Numeric error, each variant from the same init.
    let mut reference: Option<Vec<f32>> = None;
    let mut errs = Vec::new();
    for (i, p) in prepared.iter().enumerate() {
        let err = match (&p.factory, p.has_output) {
            (Err(_), _) => None,
            (Ok(_), false) => Some(NumError::NotApplicable {
                reason: "casts only, no model output".into(),
            }),
            (Ok(factory), true) => {
                let out = factory().output();
                if i == 0 {
                    reference = Some(out);
                    Some(NumError::Reference)
                } else {
                    Some(
                        match reference.as_ref().and_then(|r| workloads::error(&out, r)) {
                            Some((max_abs, rel)) => NumError::Measured { max_abs, rel },
                            None => NumError::NotApplicable {
                                reason: "output shape differs from the reference".into(),
                            },
                        },
                    )
                }
            }
        };
        errs.push(err);
    }
    // Peak memory, each variant alone: build, two iterations. One untracked run first: the
    // first measurement of a group otherwise reads low (memory left over from the error pass
    // is released during it, which the "in use before" baseline still counted).
    if let Some(factory) = prepared.iter().find_map(|p| p.factory.as_ref().ok()) {
        let mut case = factory();
        case.step();
        case.step();
    }
    // A device figure is read at every op boundary of the case built over `Instrumented`,
    // measured several times, the variants in rotated order (as the timing rounds are), and
    // the highest reading kept (each is a lower bound).
    let mut readings: Vec<Vec<Peak>> = vec![Vec::new(); prepared.len()];
    for round in 0..memory.repeats() {
        for k in 0..prepared.len() {
            let i = (k + round) % prepared.len();
            let (factory, sampling) = match &prepared[i].memory_factory {
                Some(factory) => (Some(factory), Sampling::EveryOp),
                None => (prepared[i].factory.as_ref().ok(), Sampling::Polled),
            };
            if let Some(factory) = factory {
                readings[i].push(peak_of(memory, sampling, |sample| {
                    at_each_op(sample.clone(), || {
                        let mut case = factory();
                        sample();
                        case.step_sampled(&**sample);
                        case.step_sampled(&**sample);
                    })
                }));
            }
        }
    }
    let peaks: Vec<Option<Peak>> = readings.into_iter().map(Peak::highest).collect();
    // Interleaved timing.
    let mut cases: Vec<Box<dyn Case>> = prepared
        .iter()
        .filter_map(|p| p.factory.as_ref().ok().map(|f| f()))
        .collect();
    let samples = measure_interleaved(&mut cases, budget);
    drop(cases);
    let bare_median = samples.first().map(|s| s.median()).unwrap_or(f64::NAN);

    let mut samples = samples.into_iter();
    let rows: Vec<Row> = prepared
        .into_iter()
        .zip(errs.into_iter().zip(peaks))
        .map(|(p, (err, peak))| {
            let result = match p.factory {
                Err(reason) => Err(reason),
                Ok(_) => {
                    let s = samples.next().expect("one sample set per case");
                    let median = s.median();
                    Ok(Measured {
                        median_ms: median,
                        min_ms: s.min(),
                        max_ms: s.max(),
                        rounds: s.ms.len(),
                        round_ms: s.ms.clone(),
                        paired_ratio: None,
                        iters_per_sample: s.iters_per_sample,
                        ratio_to_bare: median / bare_median,
                        peak: peak.expect("peak for a runnable case"),
                        error: err.expect("error for a runnable case"),
                    })
                }
            };
            Row {
                workload,
                size: spec.label(),
                backend: backend.to_string(),
                variant: p.variant,
                policy: p.policy,
                result,
                note: p.note.map(str::to_string),
            }
        })
        .collect();
    eprintln!("    {:.1} s", started.elapsed().as_secs_f64());
    rows
}

/// One group of `variants` on `spec`.
fn group<I: Backend>(
    setup: &Setup<I>,
    workload: Workload,
    spec: &Spec,
    variants: &[Variant],
) -> Vec<Row> {
    let prepared = variants
        .iter()
        .map(|v| prepare::<I>(&setup.device, *v, spec, ""))
        .collect();
    measure_group(
        setup.name,
        &setup.memory,
        workload,
        spec,
        prepared,
        setup.budget,
    )
}

fn standard<I: Backend>(setup: &Setup<I>, workload: Workload, spec: &Spec) -> Vec<Row> {
    group(setup, workload, spec, &Variant::ALL)
}

pub(crate) fn mlp_spec(sizes: &Sizes, scaler: Scaling) -> Spec {
    Spec::Mlp {
        batch: sizes.mlp.0,
        dims: sizes.mlp.1.clone(),
        scaler,
    }
}

/// The median over rounds of `with[r] / without[r]`: the ratio of two variants measured in
/// the same rounds.
pub(crate) fn paired_ratio(with: &[f64], without: &[f64]) -> f64 {
    Samples {
        ms: with.iter().zip(without).map(|(w, o)| w / o).collect(),
        iters_per_sample: 1,
    }
    .median()
}

/// The variant-name suffixes of `loss_scaler_step`'s scaled rows: the host-read scaler and the
/// device path.
pub(crate) const HOST_READ_SUFFIX: &str = " + dynamic scaler";
pub(crate) const ON_DEVICE_SUFFIX: &str = " + dynamic scaler on device";

fn loss_scaler<I: Backend>(setup: &Setup<I>) -> Vec<Row> {
    let plain = mlp_spec(&setup.sizes, Scaling::None);
    let scaled = [
        (mlp_spec(&setup.sizes, Scaling::HostRead), HOST_READ_SUFFIX),
        (mlp_spec(&setup.sizes, Scaling::OnDevice), ON_DEVICE_SUFFIX),
    ];
    let mut prepared = Vec::new();
    for v in Variant::ALL {
        prepared.push(prepare::<I>(&setup.device, v, &plain, ""));
        for (spec, suffix) in &scaled {
            prepared.push(prepare::<I>(&setup.device, v, spec, suffix));
        }
    }
    // The overhead is a few percent of a step: three times the rounds of other groups.
    let budget = Budget {
        max_rounds: setup.budget.max_rounds * 3,
        time_limit: setup.budget.time_limit * 3,
        ..setup.budget
    };
    let mut rows = measure_group(
        setup.name,
        &setup.memory,
        Workload::LossScalerStep,
        &plain,
        prepared,
        budget,
    );
    for (group, variant) in rows.chunks_mut(1 + scaled.len()).zip(Variant::ALL) {
        let Some((without, with_scalers)) = group.split_first_mut() else {
            continue;
        };
        for (with, (spec, _)) in with_scalers.iter_mut().zip(&scaled) {
            let (Ok(a), Ok(b)) = (&without.result, &mut with.result) else {
                continue;
            };
            // Paired by round: the two ran within one round, so a slow phase of the machine
            // slows both.
            let overhead = paired_ratio(&b.round_ms, &a.round_ms);
            b.paired_ratio = Some(overhead);
            // The ops the backend runs per step, with and without the scaler: on a backend
            // bound by per-kernel cost, the overhead follows their count.
            let ops = match (
                count_ops::<I>(&setup.device, variant, &plain),
                count_ops::<I>(&setup.device, variant, spec),
            ) {
                (Some(a), Some(b)) => format!(" ({} -> {} ops per step)", a.ops, b.ops),
                _ => String::new(),
            };
            with.note = Some(format!(
                "scaler adds {:+.1}% to the {} step{ops}",
                (overhead - 1.0) * 100.0,
                without.variant
            ));
        }
    }
    rows
}

/// The casts of one MLP training step under a mixed policy, replayed on the bare backend: the
/// `float_cast` calls the decorator made in a recorded step (see [`count_ops`]), each on a
/// tensor of the same dtype and element count, to the other dtype of the policy (a mixed
/// policy casts between f32 and its half dtype only).
struct CastReplay<I: Backend> {
    casts: Vec<(Tensor<I, 1>, FloatDType)>,
    device: I::Device,
}

impl<I: Backend> CastReplay<I> {
    fn new(recorded: &[(DType, usize)], half: FloatDType, device: &I::Device) -> Self {
        let casts = recorded
            .iter()
            .map(|(source, numel)| {
                let ones = Tensor::<I, 1>::ones([*numel], device);
                if *source == DType::F32 {
                    (ones, half)
                } else {
                    (ones.cast(half), FloatDType::F32)
                }
            })
            .collect();
        Self {
            casts,
            device: device.clone(),
        }
    }
}

impl<I: Backend> Case for CastReplay<I> {
    fn step(&mut self) {
        let out: Vec<Tensor<I, 1>> = self
            .casts
            .iter()
            .map(|(t, dtype)| t.clone().cast(*dtype))
            .collect();
        I::sync(&self.device).expect("device sync");
        drop(out);
    }

    fn output(&mut self) -> Vec<f32> {
        Vec::new()
    }
}

fn dtype_name(dtype: DType) -> String {
    format!("{dtype:?}")
}

/// The ops of one step under `Instrumented` (what the decorator hands to the backend below it).
struct OpCount {
    ops: usize,
    /// The `float_cast` calls among them: source dtype and element count.
    casts: Vec<(DType, usize)>,
}

impl OpCount {
    fn casts_by_source(&self) -> BTreeMap<String, usize> {
        let mut by_source = BTreeMap::new();
        for (dtype, _) in &self.casts {
            *by_source.entry(dtype_name(*dtype)).or_insert(0) += 1;
        }
        by_source
    }
}

/// The case of `variant` built over `Instrumented<I>` and stepped once (parameters made,
/// kernels compiled), so that the next step is a step like the ones timed; `None` where the
/// device cannot run the variant's dtypes.
pub(crate) fn instrumented_case<I: Backend>(
    device: &I::Device,
    variant: Variant,
    spec: &Spec,
) -> Option<Box<dyn Case>> {
    let mut case = match variant.policy() {
        None => {
            let storage = bare_storage::<I>(device, variant.storage()).ok()?;
            workloads::build::<Autodiff<Instrumented<I>>>(spec, storage, device)
        }
        Some(policy) => {
            let mp = MixedPrecision::<Instrumented<I>>::device(device.clone(), policy).ok()?;
            workloads::build::<Autodiff<MixedPrecision<Instrumented<I>>>>(spec, Storage::F32, &mp)
        }
    };
    case.step();
    Some(case)
}

/// Counts the ops of one step of `variant`.
fn count_ops<I: Backend>(device: &I::Device, variant: Variant, spec: &Spec) -> Option<OpCount> {
    let mut case = instrumented_case::<I>(device, variant, spec)?;
    let ((), ops) = record(|| case.step());
    let casts = ops
        .iter()
        .filter(|op| op.op == "float_cast")
        .map(|op| (op.float_inputs[0], op.float_shapes[0].iter().product()))
        .collect();
    Some(OpCount {
        ops: ops.len(),
        casts,
    })
}

fn cast_overhead<I: Backend>(setup: &Setup<I>) -> (Vec<Row>, Vec<CastRow>) {
    let spec = mlp_spec(&setup.sizes, Scaling::None);
    let mut prepared: Vec<Prepared> = Variant::ALL
        .iter()
        .map(|v| prepare::<I>(&setup.device, *v, &spec, ""))
        .collect();
    for v in Variant::ALL {
        let Some(half) = v.half() else { continue };
        if let Some(Err(reason)) = mp_device::<I>(&setup.device, v) {
            prepared.push(Prepared {
                variant: format!("casts alone ({})", v.name()),
                policy: v.policy().map(|p| p.to_string()),
                factory: Err(reason),
                memory_factory: None,
                has_output: false,
                note: None,
            });
            continue;
        }
        let device = setup.device.clone();
        let recorded = count_ops::<I>(&setup.device, v, &spec).map_or_else(Vec::new, |c| c.casts);
        prepared.push(Prepared {
            variant: format!("casts alone ({})", v.name()),
            policy: v.policy().map(|p| p.to_string()),
            factory: Ok(Box::new(move || {
                Box::new(CastReplay::<I>::new(&recorded, half, &device))
            })),
            memory_factory: None,
            has_output: false,
            note: None,
        });
    }
    let mut rows = measure_group(
        setup.name,
        &setup.memory,
        Workload::CastOverhead,
        &spec,
        prepared,
        setup.budget,
    );

    let mut cast_rows = Vec::new();
    for v in Variant::ALL {
        let step = rows
            .iter()
            .find(|r| r.variant == v.name())
            .and_then(|r| r.result.as_ref().ok().map(|m| m.median_ms));
        let casts_ms = rows
            .iter()
            .find(|r| r.variant == format!("casts alone ({})", v.name()))
            .and_then(|r| r.result.as_ref().ok().map(|m| m.median_ms));
        let Some(count) = count_ops::<I>(&setup.device, v, &spec) else {
            continue;
        };
        let replayed_casts = if v.half().is_some() {
            count.casts.len()
        } else {
            0
        };
        cast_rows.push(CastRow {
            backend: setup.name.to_string(),
            size: spec.label(),
            variant: v.name().to_string(),
            ops_per_step: count.ops,
            casts_per_step: count.casts.len(),
            casts_by_source: count.casts_by_source(),
            replayed_casts,
            casts_ms: if v.half().is_some() {
                casts_ms
            } else {
                Some(0.0)
            },
            step_ms: step,
        });
    }
    for row in rows.iter_mut() {
        if let Some(c) = cast_rows
            .iter()
            .find(|c| row.variant == format!("casts alone ({})", c.variant))
            && let (Some(casts), Some(step)) = (c.casts_ms, c.step_ms)
        {
            row.note = Some(format!(
                "{} casts per step, {:.1}% of the {} step",
                c.casts_per_step,
                100.0 * casts / step,
                c.variant
            ));
        }
    }
    (rows, cast_rows)
}

/// Runs `workloads` on one backend.
pub fn run_backend<I: Backend>(
    setup: &Setup<I>,
    selected: &[Workload],
) -> (Vec<Row>, Vec<CastRow>) {
    let mut rows = Vec::new();
    let mut casts = Vec::new();
    for workload in selected {
        match workload {
            Workload::Matmul => {
                for n in &setup.sizes.matmul {
                    rows.extend(standard(setup, *workload, &Spec::Matmul { n: *n }));
                }
            }
            Workload::Conv2d => rows.extend(standard(setup, *workload, &setup.sizes.conv)),
            Workload::MlpStep => rows.extend(standard(
                setup,
                *workload,
                &mlp_spec(&setup.sizes, Scaling::None),
            )),
            Workload::TransformerBlockStep => rows.extend(group(
                setup,
                *workload,
                &setup.sizes.transformer,
                &Variant::WITH_PURE_HALF,
            )),
            Workload::TransformerActivationsStep => rows.extend(group(
                setup,
                *workload,
                &setup.sizes.transformer_activations,
                &Variant::WITH_PURE_HALF,
            )),
            Workload::LossScalerStep => rows.extend(loss_scaler(setup)),
            Workload::CastOverhead => {
                let (r, c) = cast_overhead(setup);
                rows.extend(r);
                casts.extend(c);
            }
        }
    }
    (rows, casts)
}

#[cfg(test)]
mod tests {
    use super::paired_ratio;

    #[test]
    fn a_paired_ratio_is_the_median_of_the_rounds_ratios() {
        // The machine slows down over the rounds; each round's pair slows alike.
        let without = [10.0, 20.0, 40.0];
        let with = [11.0, 21.0, 44.0];
        assert!((paired_ratio(&with, &without) - 1.1).abs() < 1e-12);
        assert!(paired_ratio(&[], &[]).is_nan());
    }
}
