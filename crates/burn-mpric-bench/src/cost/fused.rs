//! The steps under Burn's fusion (`--features fusion`): which of a step's ops Burn 0.21's
//! fusion puts into one kernel, read from burn-fusion's inspector (every execution plan as
//! blocks, each fused into one kernel by a named fuser or run op by op), on Wgpu at the probe
//! size and mapped to the real one. A fused block is one kernel reading the tensors it takes
//! from outside and writing those that outlive it (read by a later op, or still held when
//! it ends); an op of an unfused block is lowered as without fusion. cubecl's own profile
//! log names kernels and times them but holds no bytes or shapes, so the bytes come from
//! the blocks' tensors here.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, OnceLock};

use burn::backend::wgpu::WgpuDevice;
use burn::backend::{Autodiff, Wgpu};
use burn::tensor::DType;
use burn::tensor::backend::Backend;
use burn_fusion::inspect::{BlockKind, FusionBlock, FusionInspector};
use burn_fusion::stream::StreamId;
use burn_ir::{OperationIr, TensorId, TensorIr, TensorStatus};
use burn_mpric::instrument::OpRecord;
use burn_mpric::{MixedPrecision, MpSettings};

use super::ModeledVariant;
use super::probe::Probe;
use super::step::{KernelClass, StepCost};
use crate::harness::Case;
use crate::workloads::{self, Storage};

/// A method name for `op`, as the backend traits name it (`float_add`, `linear`, ...), so
/// that an unfused op is lowered by the same table as without fusion.
fn method(op: &OperationIr) -> &'static str {
    static NAMES: OnceLock<Mutex<HashMap<String, &'static str>>> = OnceLock::new();
    let text = format!("{op:?}");
    let (outer, rest) = text.split_once('(').unwrap_or((text.as_str(), ""));
    // `NumericFloat(F32, Add(...))`, `Float(F16, Exp(...))`: the dtype comes first.
    let rest = match outer {
        "NumericFloat" | "NumericInt" | "Float" => rest.split_once(", ").map_or(rest, |r| r.1),
        _ => rest,
    };
    let inner: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric())
        .collect();
    let prefix = match outer {
        "BaseFloat" | "NumericFloat" | "Float" => "float_",
        "BaseInt" | "NumericInt" | "Int" => "int_",
        "BaseBool" | "Bool" => "bool_",
        "Init" => return "float_from_data",
        "Drop" => return "float_drop_detach",
        _ => "",
    };
    let mut name = String::from(prefix);
    for (i, c) in inner.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                name.push('_');
            }
            name.push(c.to_ascii_lowercase());
        } else {
            name.push(c);
        }
    }
    let mut names = NAMES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    names
        .entry(name.clone())
        .or_insert_with(|| Box::leak(name.into_boxed_str()))
}

fn size(t: &TensorIr, probe: &Probe) -> Option<u64> {
    let shape = probe.shape(&t.shape)?;
    Some(shape.iter().map(|&d| d as u64).product::<u64>() * t.dtype.size() as u64)
}

/// `op` as an `Instrumented` log would hold it, its shapes mapped by `probe`.
fn record(op: &OperationIr, probe: &Probe) -> Option<OpRecord> {
    let mut r = OpRecord::named(method(op));
    for t in op.inputs() {
        let shape = probe.shape(&t.shape)?;
        if t.dtype.is_float() {
            r.float_inputs.push(t.dtype);
            r.float_shapes.push(shape);
        } else {
            r.other_inputs.push((t.dtype, shape));
        }
    }
    for t in op.outputs() {
        let shape = probe.shape(&t.shape)?;
        if t.dtype.is_float() {
            r.float_outputs.push(t.dtype);
            r.float_output_shapes.push(shape);
        } else {
            r.other_outputs.push((t.dtype, shape));
        }
    }
    Some(r)
}

/// What a fused step launches: its cost, and its ops by method, fused or not.
pub struct FusedStep {
    /// Kernels, bytes, FLOPs.
    pub cost: StepCost,
    /// Casts that ran as kernels of their own (not fused into a neighbour): dtypes, shape at
    /// the real size, and the op that first reads the result (with its fuser, if fused).
    pub unfused_casts: Vec<String>,
    /// Ops that ran unfused, by method.
    pub unfused: HashMap<&'static str, usize>,
    /// Every op of the step, by method.
    pub ops: HashMap<&'static str, usize>,
}

/// The cost of `blocks` (one step's, in order), shapes mapped by `probe`; `None` where a
/// shape is not made of the probe's dimensions.
pub fn cost_of(blocks: &[FusionBlock], probe: &Probe) -> Option<FusedStep> {
    let ops: Vec<&OperationIr> = blocks.iter().flat_map(|b| &b.operations).collect();
    // The last op (in step order) each tensor appears in.
    let mut last: HashMap<TensorId, usize> = HashMap::new();
    for (i, op) in ops.iter().enumerate() {
        for t in op.nodes() {
            last.insert(t.id, i);
        }
    }
    let mut step = FusedStep {
        cost: StepCost::default(),
        unfused_casts: Vec::new(),
        unfused: HashMap::new(),
        ops: HashMap::new(),
    };
    for op in &ops {
        *step.ops.entry(method(op)).or_default() += 1;
    }
    // Which fuser ran each op (`None`: unfused), in step order.
    let fusers: Vec<Option<&str>> = blocks
        .iter()
        .flat_map(|b| {
            let fuser = match &b.kind {
                BlockKind::Fused { name, .. } => Some(*name),
                BlockKind::Unfused => None,
            };
            std::iter::repeat_n(fuser, b.operations.len())
        })
        .collect();
    let reader = |i: usize, id: TensorId| -> String {
        let found = ops[i + 1..]
            .iter()
            .position(|op| op.inputs().any(|t| t.id == id));
        match found.map(|j| i + 1 + j) {
            Some(j) => match fusers[j] {
                Some(fuser) => format!("{} (in {fuser})", method(ops[j])),
                None => format!("{} (unfused)", method(ops[j])),
            },
            None => "nothing later in the step".into(),
        }
    };
    let mut at = 0;
    for block in blocks {
        let range = at..at + block.operations.len();
        at = range.end;
        match block.kind {
            BlockKind::Unfused => {
                for (i, op) in range.clone().zip(&block.operations) {
                    let r = record(op, probe)?;
                    if let ("float_cast", Some(from), Some(to), Some(shape), Some(out)) = (
                        r.op,
                        r.float_inputs.first(),
                        r.float_outputs.first(),
                        r.float_shapes.first(),
                        op.outputs().next(),
                    ) {
                        let by = reader(i, out.id);
                        step.unfused_casts
                            .push(format!("{from:?} -> {to:?} {shape:?}, read by {by}"));
                    }
                    *step.unfused.entry(r.op).or_default() += 1;
                    step.cost.add(&r);
                }
            }
            BlockKind::Fused { name, .. } => {
                let made: HashSet<TensorId> = block
                    .operations
                    .iter()
                    .flat_map(|op| op.outputs().map(|t| t.id))
                    .collect();
                let mut read = 0;
                let mut seen = HashSet::new();
                for t in block.operations.iter().flat_map(|op| op.inputs()) {
                    if !made.contains(&t.id) && seen.insert(t.id) {
                        read += size(t, probe)?;
                    }
                }
                // Written: what a later op reads, or what is still held when the block
                // ends (its last use here did not free it).
                let mut written = 0;
                let mut last_status: HashMap<TensorId, (TensorStatus, &TensorIr)> = HashMap::new();
                for op in &block.operations {
                    for t in op.nodes() {
                        last_status.insert(t.id, (t.status, t));
                    }
                }
                for id in &made {
                    let (status, t) = last_status[id];
                    let later = last.get(id).is_some_and(|&l| l >= range.end);
                    if later || status != TensorStatus::ReadWrite {
                        written += size(t, probe)?;
                    }
                }
                let (class, flops, dtype) = fused_kind(name, &block.operations, probe)?;
                step.cost
                    .push_fused(name, class, flops, dtype, read, written);
            }
        }
    }
    Some(step)
}

/// A fused block's kind of kernel, and its matmul's FLOPs and dtype.
fn fused_kind(
    fuser: &str,
    ops: &[OperationIr],
    probe: &Probe,
) -> Option<(KernelClass, f64, DType)> {
    if fuser.contains("Matmul") {
        let matmul = ops.iter().find(|op| method(op) == "float_matmul")?;
        let r = record(matmul, probe)?;
        let k = *r.float_shapes.first()?.last()? as f64;
        let out = r.float_output_shapes.first()?;
        let flops = 2.0 * out.iter().map(|&d| d as f64).product::<f64>() * k;
        return Some((KernelClass::Matmul, flops, *r.float_outputs.first()?));
    }
    let class = if fuser.contains("Reduce") {
        KernelClass::ReduceInner
    } else {
        KernelClass::Elementwise
    };
    Some((class, 0.0, DType::F32))
}

/// One step of `m` at `probe`'s size on fused Wgpu, its execution plans read by the
/// inspector (after a first step has compiled and tuned the kernels), and its cost at the
/// real size; `Err` says why not.
pub fn fused_step(m: ModeledVariant, probe: &Probe) -> Result<FusedStep, String> {
    if let Some(why) = crate::adapter::wgpu_unavailable() {
        return Err(why);
    }
    let device = WgpuDevice::default();
    let mut case: Box<dyn Case> = match m.variant.policy() {
        None => {
            let storage = Storage(m.variant.half().unwrap_or(burn::tensor::FloatDType::F32));
            if !<Wgpu as Backend>::supports_dtype(&device, DType::from(storage.0)) {
                return Err("the device does not run its dtype".into());
            }
            workloads::build::<Autodiff<Wgpu>>(&probe.spec, storage, &device)
        }
        Some(policy) => {
            let settings = MpSettings::new(policy).softmax_precision(m.softmax.unwrap_or_default());
            let mp = MixedPrecision::<Wgpu>::device(device, settings).map_err(|e| e.to_string())?;
            workloads::build::<Autodiff<MixedPrecision<Wgpu>>>(&probe.spec, Storage::F32, &mp)
        }
    };
    case.step();
    let inspector = FusionInspector::install(StreamId::current());
    case.step();
    let blocks: Vec<FusionBlock> = inspector
        .drain()
        .into_iter()
        .flat_map(|r| r.blocks)
        .collect();
    drop(inspector);
    cost_of(&blocks, probe).ok_or_else(|| "a shape is not made of the probe's dimensions".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::{ModeledVariant, logged_ops};
    use crate::run::Variant;
    use crate::workloads::Spec;

    /// On lavapipe: the mixed transformer block under fusion launches fewer kernels and
    /// moves fewer bytes than without, with the same matmul FLOPs. Ignored by default: with
    /// Burn's autotuning, the first fused step takes about 5 minutes on 2 cores' lavapipe
    /// (`cargo test -p burn-mpric-bench --features fusion -- --ignored`).
    #[test]
    #[ignore = "about 5 minutes on lavapipe (autotuning); run with --ignored"]
    fn fusion_merges_the_mixed_blocks_kernels_and_bytes() {
        let _heap = crate::memory::heap_tests();
        if crate::adapter::wgpu_unavailable().is_some() {
            eprintln!("skipping: no wgpu adapter");
            return;
        }
        let target = Spec::Transformer {
            batch: 4,
            seq: 16,
            d_model: 32,
            heads: 4,
            d_ff: 64,
            layers: 1,
        };
        let probe = Probe::of(&target).unwrap();
        let m = ModeledVariant {
            variant: Variant::MixedF16,
            softmax: None,
        };
        let fused = fused_step(m, &probe).unwrap();
        eprintln!("unfused casts: {:#?}", fused.unfused_casts);
        let unfused = StepCost::of(&probe.map(&logged_ops(m, &probe.spec).unwrap()).unwrap());
        assert!(
            fused.cost.kernels.len() < unfused.kernels.len(),
            "{} fused kernels against {} unfused",
            fused.cost.kernels.len(),
            unfused.kernels.len()
        );
        let bytes = |c: &StepCost| c.bytes_read() + c.bytes_written();
        assert!(bytes(&fused.cost) < bytes(&unfused), "{:?}", fused.unfused);
        // The ops carry the backend traits' names, so that the unfused ones are lowered
        // by the same table: the matmuls, the softmax's exp, the parameters' casts.
        for name in ["float_matmul", "float_exp", "float_cast", "float_sum_dim"] {
            assert!(
                fused.ops.contains_key(name),
                "{name} not in {:?}",
                fused.ops
            );
        }
        assert!(
            fused.ops.keys().all(|m| m
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')),
            "{:?}",
            fused.ops
        );
    }
}
