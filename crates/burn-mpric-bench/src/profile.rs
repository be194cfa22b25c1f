//! `mpric-bench --profile`: one transformer block training step profiled op by op
//! ([`burn_mpric::instrument::profile`]) at f32, mixed and pure half on each backend, side by
//! side: what mixed precision spends that pure half does not. Writes `profile.md` and
//! `profile.json`.
//!
//! Each op is timed with the device waited for before and after it, so a profile's total is
//! longer than the timed step's (no overlap of host and device work): the table says where
//! the time goes, the timed workloads say how much there is.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::rc::Rc;

use burn::tensor::DType;
use burn::tensor::backend::Backend;
use burn_mpric::instrument::{OpSummary, Profile, profile};
use serde::Serialize;

use crate::run::{Setup, Variant, instrumented_case};

/// The variants profiled, in column order.
const VARIANTS: [Variant; 5] = [
    Variant::Bare,
    Variant::MixedF16,
    Variant::MixedBf16,
    Variant::PureF16,
    Variant::PureBf16,
];

/// How many methods each side-by-side table shows.
const TOP: usize = 15;

/// One kind of op (method, dtypes in and out) in one variant's step.
#[derive(Debug, Clone, Serialize)]
pub struct KindTime {
    /// Burn's method name.
    pub op: String,
    /// The float inputs' dtypes.
    pub inputs: Vec<String>,
    /// The float outputs' dtypes.
    pub outputs: Vec<String>,
    /// Calls in the step.
    pub calls: usize,
    /// Their time, milliseconds.
    pub ms: f64,
}

/// One variant's profiled step.
#[derive(Debug, Clone, Serialize)]
pub struct VariantProfile {
    /// The variant's name, as in the report.
    pub variant: String,
    /// Every op and the time between ops, milliseconds.
    pub total_ms: f64,
    /// The time between ops (autodiff's and the decorator's own work), milliseconds.
    pub between_ms: f64,
    /// The ops added up by kind, the costliest first.
    pub kinds: Vec<KindTime>,
    /// The casts by source dtype, target dtype and shape, the most calls first.
    pub casts: Vec<CastGroup>,
}

/// The casts of one source dtype, target dtype and shape in one variant's step.
#[derive(Debug, Clone, Serialize)]
pub struct CastGroup {
    /// Source dtype.
    pub from: String,
    /// Target dtype.
    pub to: String,
    /// The tensor's shape.
    pub shape: Vec<usize>,
    /// Calls in the step.
    pub calls: usize,
    /// Their time, milliseconds.
    pub ms: f64,
}

/// The profiles of one backend: the decorator's ops (`VariantProfile`), or the 0.22
/// edition's kernels (`profile022::Profile022`).
#[derive(Debug, Clone, Serialize)]
pub struct BackendProfile<V = VariantProfile> {
    /// `flex`, `wgpu`, `vulkan`, `metal` or `cuda` (`wgpu (burn 0.22)`, ... for the 0.22 edition).
    pub backend: String,
    /// The model and its sizes.
    pub spec: String,
    /// The variants the device runs.
    pub variants: Vec<V>,
    /// The variants it does not run, and why.
    pub skipped: Vec<String>,
}

fn dtype(d: &DType) -> String {
    format!("{d:?}").to_lowercase()
}

fn kind_time(s: OpSummary) -> KindTime {
    KindTime {
        op: s.op.to_string(),
        inputs: s.inputs.iter().map(dtype).collect(),
        outputs: s.outputs.iter().map(dtype).collect(),
        calls: s.calls,
        ms: s.time.as_secs_f64() * 1e3,
    }
}

/// The casts of a profile grouped by source, target and shape: which tensors a variant
/// casts, and how often.
fn cast_groups(p: &Profile) -> Vec<CastGroup> {
    let mut groups: BTreeMap<(String, String, Vec<usize>), (usize, f64)> = BTreeMap::new();
    for op in p.ops.iter().filter(|op| op.record.op == "float_cast") {
        let r = &op.record;
        let (Some(from), Some(to), Some(shape)) = (
            r.float_inputs.first(),
            r.float_outputs.first(),
            r.float_shapes.first(),
        ) else {
            continue;
        };
        let entry = groups
            .entry((dtype(from), dtype(to), shape.clone()))
            .or_default();
        entry.0 += 1;
        entry.1 += op.time.as_secs_f64() * 1e3;
    }
    let mut casts: Vec<CastGroup> = groups
        .into_iter()
        .map(|((from, to, shape), (calls, ms))| CastGroup {
            from,
            to,
            shape,
            calls,
            ms,
        })
        .collect();
    casts.sort_by(|a, b| b.calls.cmp(&a.calls).then_with(|| b.ms.total_cmp(&a.ms)));
    casts
}

/// Profiles one step of the transformer block at each variant the device runs.
pub fn profile_backend<I: Backend>(setup: &Setup<I>) -> BackendProfile {
    let spec = &setup.sizes.transformer;
    let mut variants = Vec::new();
    let mut skipped = Vec::new();
    for variant in VARIANTS {
        let Some(mut case) = instrumented_case::<I>(&setup.device, variant, spec) else {
            skipped.push(format!(
                "{}: the device does not run its dtypes",
                variant.name()
            ));
            continue;
        };
        let device = setup.device.clone();
        let sync = Rc::new(move || {
            // A failed sync fails the step's own read later; the profile only waits here.
            let _ = I::sync(&device);
        });
        let ((), p) = profile(sync, || case.step());
        variants.push(VariantProfile {
            variant: variant.name().to_string(),
            total_ms: p.total().as_secs_f64() * 1e3,
            between_ms: p.between.as_secs_f64() * 1e3,
            kinds: p.by_kind().into_iter().map(kind_time).collect(),
            casts: cast_groups(&p),
        });
    }
    BackendProfile {
        backend: setup.name.to_string(),
        spec: spec.label(),
        variants,
        skipped,
    }
}

/// A variant's time and calls per method, all dtypes together.
fn by_method(v: &VariantProfile) -> BTreeMap<&str, (f64, usize)> {
    let mut methods = BTreeMap::new();
    for k in &v.kinds {
        let entry = methods.entry(k.op.as_str()).or_insert((0.0, 0));
        entry.0 += k.ms;
        entry.1 += k.calls;
    }
    methods
}

/// The dtypes a method ran at in a variant: `in -> out` per kind, most time first.
fn signatures(v: &VariantProfile, method: &str) -> String {
    let sigs: Vec<String> = v
        .kinds
        .iter()
        .filter(|k| k.op == method)
        .map(|k| format!("{} -> {}", k.inputs.join(","), k.outputs.join(",")))
        .collect();
    sigs.join("; ")
}

/// The side-by-side table of one half dtype: f32, mixed and pure, the methods on which mixed
/// spends most more than pure first.
fn half_table(out: &mut String, b: &BackendProfile, half: &str) {
    let find = |prefix: &str| b.variants.iter().find(|v| v.variant.starts_with(prefix));
    let (Some(f32v), Some(mixed), Some(pure)) = (
        find("f32"),
        find(&format!("mixed_{half}")),
        find(&format!("pure_{half}")),
    ) else {
        return;
    };
    let columns = [by_method(f32v), by_method(mixed), by_method(pure)];
    let mut methods: Vec<&str> = columns.iter().flat_map(|c| c.keys().copied()).collect();
    methods.sort_unstable();
    methods.dedup();
    let time = |c: usize, m: &str| columns[c].get(m).copied().unwrap_or((0.0, 0));
    methods.sort_by(|a, b| {
        let gap = |m: &str| time(1, m).0 - time(2, m).0;
        gap(b).total_cmp(&gap(a)).then_with(|| a.cmp(b))
    });
    let _ = writeln!(
        out,
        "\n### {half}: f32, mixed_{half}, pure_{half}\n\n\
         Total (every op and between): {:.2} / {:.2} / {:.2} ms; between ops {:.2} / {:.2} / \
         {:.2} ms.\n\n\
         | op | f32 ms (calls) | mixed ms (calls) | pure ms (calls) | mixed - pure ms | mixed's dtypes |\n\
         |---|---:|---:|---:|---:|---|",
        f32v.total_ms,
        mixed.total_ms,
        pure.total_ms,
        f32v.between_ms,
        mixed.between_ms,
        pure.between_ms,
    );
    let casts: Vec<String> = mixed
        .casts
        .iter()
        .map(|c| format!("{} {} -> {} {:?}", c.calls, c.from, c.to, c.shape))
        .collect();
    let mut rows = String::new();
    for m in methods.iter().take(TOP) {
        let cell = |c: usize| {
            let (ms, calls) = time(c, m);
            format!("{ms:.3} ({calls})")
        };
        let _ = writeln!(
            rows,
            "| `{m}` | {} | {} | {} | {:+.3} | {} |",
            cell(0),
            cell(1),
            cell(2),
            time(1, m).0 - time(2, m).0,
            signatures(mixed, m),
        );
    }
    out.push_str(&rows);
    let _ = writeln!(
        out,
        "\nmixed_{half}'s casts (calls, source -> target, shape): {}.",
        casts.join("; ")
    );
}

/// The profiles as Markdown: per backend, a side-by-side table per half dtype.
pub fn markdown(profiles: &[BackendProfile]) -> String {
    let mut out = String::from(
        "# One training step, op by op\n\n\
         Each op timed with the device waited for before and after it (a profile's total is \
         longer than the timed step's: no overlap of host and device). Methods ordered by \
         what mixed spends more than pure half; `between` is autodiff's and the decorator's \
         own work outside the backend's ops.\n",
    );
    for b in profiles {
        let _ = writeln!(out, "\n## {} ({})", b.backend, b.spec);
        for s in &b.skipped {
            let _ = writeln!(out, "\n- not run: {s}");
        }
        for half in ["f16", "bf16"] {
            half_table(&mut out, b, half);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::Sizes;
    use crate::workloads::Spec;

    fn tiny_setup() -> Setup<burn::backend::Flex> {
        let transformer = Spec::Transformer {
            batch: 2,
            seq: 8,
            d_model: 16,
            heads: 2,
            d_ff: 32,
            layers: 1,
        };
        Setup {
            name: "flex",
            device: Default::default(),
            memory: crate::memory::MemorySource::Heap,
            sizes: Sizes {
                matmul: Vec::new(),
                conv: transformer.clone(),
                mlp: (1, Vec::new()),
                transformer: transformer.clone(),
                transformer_activations: transformer,
            },
            budget: crate::harness::default_budget(false),
        }
    }

    /// A real profile on Flex: every variant Flex runs is there; f32 runs its matmuls at
    /// f32, mixed_bf16 at bf16 with casts, and the table puts them side by side.
    #[test]
    fn a_transformer_step_is_profiled_at_each_variant() {
        let _heap = crate::memory::heap_tests();
        let p = profile_backend(&tiny_setup());
        let names: Vec<&str> = p.variants.iter().map(|v| v.variant.as_str()).collect();
        assert!(
            names[0].starts_with("f32") && names.contains(&"mixed_bf16"),
            "{names:?}"
        );
        let kinds = |name: &str| &p.variants.iter().find(|v| v.variant == name).unwrap().kinds;
        let f32_matmul = kinds(names[0])
            .iter()
            .find(|k| k.op == "float_matmul")
            .unwrap();
        assert_eq!(f32_matmul.inputs, ["f32", "f32"]);
        let mixed = kinds("mixed_bf16");
        assert!(
            mixed
                .iter()
                .any(|k| k.op == "float_matmul" && k.outputs == ["bf16"])
        );
        assert!(mixed.iter().any(|k| k.op == "float_cast"));
        // Every cast is in one group, each changing the dtype.
        let groups = &p
            .variants
            .iter()
            .find(|v| v.variant == "mixed_bf16")
            .unwrap()
            .casts;
        let calls = |kinds: &[KindTime]| -> usize {
            kinds
                .iter()
                .filter(|k| k.op == "float_cast")
                .map(|k| k.calls)
                .sum()
        };
        assert_eq!(groups.iter().map(|g| g.calls).sum::<usize>(), calls(mixed));
        assert!(groups.iter().all(|g| g.from != g.to));
        assert!(kinds(names[0]).iter().all(|k| k.op != "float_cast"));
        for v in &p.variants {
            let ops: f64 = v.kinds.iter().map(|k| k.ms).sum();
            assert!((ops + v.between_ms - v.total_ms).abs() < 1e-6, "{v:?}");
        }
        let md = markdown(std::slice::from_ref(&p));
        if names.contains(&"pure_bf16 (bare)") {
            assert!(md.contains("### bf16: f32, mixed_bf16, pure_bf16"), "{md}");
            assert!(md.contains("| `float_cast` |"), "{md}");
        }
    }
}
