//! One step's kernels, bytes and matmul FLOPs, from the ops an `Instrumented` backend logged
//! (their dtypes and shapes in and out), lowered as the cube backends run them without fusion
//! ([`lowering`]).

use std::collections::BTreeMap;

use burn::tensor::DType;
use burn_mpric::instrument::OpRecord;
use serde::Serialize;

use super::lowering::{Lowering, lowering};

/// What a kernel does with its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum KernelClass {
    /// A matmul.
    Matmul,
    /// Element by element over inputs of the output's shape (casts included).
    Elementwise,
    /// Element by element with an input broadcast to the output's shape (a bias, a row's
    /// statistic): its elements are read at a stride of 0 along the broadcast dimensions.
    Broadcast,
    /// A reduction along the innermost (contiguous) dimension: each result reads a
    /// contiguous row.
    ReduceInner,
    /// A reduction along outer dimensions only.
    ReduceOuter,
}

/// One kernel launch.
#[derive(Debug, Clone, PartialEq)]
pub struct Kernel {
    /// The backend method it belongs to.
    pub method: &'static str,
    /// What it does with its bytes.
    pub class: KernelClass,
    /// Matmul FLOPs (0 for every other kernel).
    pub flops: f64,
    /// The dtype a matmul runs at (its output's).
    pub dtype: DType,
    /// Bytes read from device memory.
    pub read: u64,
    /// Bytes written to device memory.
    pub written: u64,
}

impl Kernel {
    /// Bytes read and written.
    pub fn bytes(&self) -> u64 {
        self.read + self.written
    }
}

/// What one step costs: its kernels and its transfers between host and device.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepCost {
    /// Every kernel, in launch order.
    pub kernels: Vec<Kernel>,
    /// Bytes uploaded from the host.
    pub uploaded: u64,
    /// Bytes read back to the host.
    pub downloaded: u64,
}

/// A method's share of a step: kernels and bytes.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct MethodShare {
    /// Kernels launched.
    pub kernels: usize,
    /// Bytes read and written.
    pub bytes: u64,
    /// Matmul FLOPs.
    pub flops: f64,
}

fn numel(shape: &[usize]) -> u64 {
    shape.iter().map(|&d| d as u64).product()
}

fn size(dtype: DType, shape: &[usize]) -> u64 {
    numel(shape) * dtype.size() as u64
}

/// The bytes of every tensor in `tensors`.
fn total<'a>(tensors: impl IntoIterator<Item = (DType, &'a Vec<usize>)>) -> u64 {
    tensors.into_iter().map(|(d, s)| size(d, s)).sum()
}

/// Whether `r` reduces its first float input to a smaller first output, and along which
/// dimensions: the innermost one among them, or outer ones only.
fn reduction(r: &OpRecord) -> Option<KernelClass> {
    let input = r.float_shapes.first()?;
    let output = r.float_output_shapes.first()?;
    if numel(output) >= numel(input) {
        return None;
    }
    let inner = |s: &[usize]| s.last().copied().unwrap_or(1);
    Some(
        if output.len() != input.len() || inner(output) != inner(input) {
            KernelClass::ReduceInner
        } else {
            KernelClass::ReduceOuter
        },
    )
}

/// Whether one of `r`'s float inputs has fewer elements than its first float output.
fn broadcast(r: &OpRecord) -> Option<KernelClass> {
    let out = numel(r.float_output_shapes.first()?);
    r.float_shapes
        .iter()
        .any(|s| numel(s) < out)
        .then_some(KernelClass::Broadcast)
}

impl StepCost {
    /// The cost of the ops in `records`, in order.
    pub fn of(records: &[OpRecord]) -> Self {
        let mut cost = StepCost::default();
        for r in records {
            cost.add(r);
        }
        cost
    }

    fn kernel(&mut self, method: &'static str, read: u64, written: u64) {
        self.classified(method, KernelClass::Elementwise, read, written);
    }

    /// Adds one fused kernel: `flops` (of its matmul, if any) at `dtype`, reading and
    /// writing these bytes.
    #[cfg(feature = "fusion")]
    pub fn push_fused(
        &mut self,
        fuser: &'static str,
        class: KernelClass,
        flops: f64,
        dtype: DType,
        read: u64,
        written: u64,
    ) {
        self.kernels.push(Kernel {
            method: fuser,
            class,
            flops,
            dtype,
            read,
            written,
        });
    }

    /// Adds one element-wise kernel of `method` that reads and writes these bytes.
    pub fn push_kernel(&mut self, method: &'static str, read: u64, written: u64) {
        self.kernel(method, read, written);
    }

    fn classified(&mut self, method: &'static str, class: KernelClass, read: u64, written: u64) {
        self.kernels.push(Kernel {
            method,
            class,
            flops: 0.0,
            dtype: DType::F32,
            read,
            written,
        });
    }

    fn matmul(&mut self, method: &'static str, flops: f64, dtype: DType, read: u64, written: u64) {
        self.kernels.push(Kernel {
            method,
            class: KernelClass::Matmul,
            flops,
            dtype,
            read,
            written,
        });
    }

    /// Adds one op, lowered as the cube backends run it.
    pub(crate) fn add(&mut self, r: &OpRecord) {
        let inputs = || {
            r.float_inputs
                .iter()
                .copied()
                .zip(&r.float_shapes)
                .chain(r.other_inputs.iter().map(|(d, s)| (*d, s)))
        };
        let outputs = || {
            r.float_outputs
                .iter()
                .copied()
                .zip(&r.float_output_shapes)
                .chain(r.other_outputs.iter().map(|(d, s)| (*d, s)))
        };
        let out_dtype = r.float_outputs.first().copied().unwrap_or(DType::F32);
        let out_shape = r.float_output_shapes.first().cloned().unwrap_or_default();
        let out_bytes = size(out_dtype, &out_shape);
        match lowering(r.op) {
            Lowering::View => {}
            Lowering::HostRead => self.downloaded += total(inputs()),
            Lowering::Upload => self.uploaded += total(outputs()),
            Lowering::Kernel => {
                let class = reduction(r)
                    .or_else(|| broadcast(r))
                    .unwrap_or(KernelClass::Elementwise);
                self.classified(r.op, class, total(inputs()), total(outputs()))
            }
            Lowering::Matmul => {
                // [.., m, k] x [.., k, n]: 2 k FLOPs per output element.
                let k = r.float_shapes[0].last().copied().unwrap_or(0) as f64;
                let flops = 2.0 * numel(&out_shape) as f64 * k;
                self.matmul(r.op, flops, out_dtype, total(inputs()), out_bytes);
            }
            Lowering::Linear => {
                let k = r.float_shapes[0].last().copied().unwrap_or(0) as f64;
                let flops = 2.0 * numel(&out_shape) as f64 * k;
                let xw = size(r.float_inputs[0], &r.float_shapes[0])
                    + size(r.float_inputs[1], &r.float_shapes[1]);
                self.matmul(r.op, flops, out_dtype, xw, out_bytes);
                if let (Some(d), Some(s)) = (r.float_inputs.get(2), r.float_shapes.get(2)) {
                    self.kernel(r.op, out_bytes + size(*d, s), out_bytes);
                }
            }
            Lowering::LinearX => {
                // weight [k, n], grad [.., m, n] -> [.., m, k].
                let n = r.float_shapes[0].last().copied().unwrap_or(0) as f64;
                let flops = 2.0 * numel(&out_shape) as f64 * n;
                self.matmul(r.op, flops, out_dtype, total(inputs()), out_bytes);
            }
            Lowering::LinearWeight => self.linear_weight(r, out_dtype),
            Lowering::LinearBias => {
                let grad = &r.float_shapes[0];
                self.sums_over_leading(r.op, r.float_inputs[0], grad.clone());
            }
            Lowering::Chain {
                kernels,
                reads,
                writes,
            } => {
                let unit = size(r.float_inputs[0], &r.float_shapes[0]);
                for i in 0..kernels as u64 {
                    // The chain's bytes spread over its kernels, the remainder on the first.
                    let share = |passes: u32| {
                        let all = unit * passes as u64;
                        all / kernels as u64 + if i == 0 { all % kernels as u64 } else { 0 }
                    };
                    self.kernel(r.op, share(reads), share(writes));
                }
            }
        }
    }

    /// `x^T @ grad` per leading index of `x` [.., m, k] and `grad` [.., m, n], a
    /// `[.., k, n]` product summed over the leading dimensions one at a time.
    fn linear_weight(&mut self, r: &OpRecord, dtype: DType) {
        let x = &r.float_shapes[0];
        let grad = &r.float_shapes[1];
        let rank = x.len();
        let (m, k, n) = (x[rank - 2], x[rank - 1], grad[rank - 1]);
        let mut product: Vec<usize> = x[..rank - 2].to_vec();
        product.extend([k, n]);
        let flops = 2.0 * numel(&product) as f64 * m as f64;
        let read = size(r.float_inputs[0], x) + size(r.float_inputs[1], grad);
        self.matmul(r.op, flops, dtype, read, size(dtype, &product));
        self.sums_over_leading(r.op, dtype, product);
    }

    /// One `sum_dim` kernel per dimension but the last two of `shape` (the last one for a
    /// rank-1 result): each reads what the previous one wrote.
    fn sums_over_leading(&mut self, method: &'static str, dtype: DType, mut shape: Vec<usize>) {
        let keep = if method == "linear_bias_backward" {
            1
        } else {
            2
        };
        for dim in 0..shape.len().saturating_sub(keep) {
            let read = size(dtype, &shape);
            shape[dim] = 1;
            let class = if dim + 1 == shape.len() {
                KernelClass::ReduceInner
            } else {
                KernelClass::ReduceOuter
            };
            self.classified(method, class, read, size(dtype, &shape));
        }
    }

    /// Bytes read by every kernel.
    pub fn bytes_read(&self) -> u64 {
        self.kernels.iter().map(|k| k.read).sum()
    }

    /// Bytes written by every kernel.
    pub fn bytes_written(&self) -> u64 {
        self.kernels.iter().map(|k| k.written).sum()
    }

    /// Matmul FLOPs of the step.
    pub fn matmul_flops(&self) -> f64 {
        self.kernels.iter().map(|k| k.flops).sum()
    }

    /// Kernels, bytes and FLOPs per kind of kernel.
    pub fn by_class(&self) -> BTreeMap<KernelClass, MethodShare> {
        let mut classes: BTreeMap<KernelClass, MethodShare> = BTreeMap::new();
        for k in &self.kernels {
            let c = classes.entry(k.class).or_default();
            c.kernels += 1;
            c.bytes += k.bytes();
            c.flops += k.flops;
        }
        classes
    }

    /// Kernels, bytes and FLOPs per method, the most bytes first.
    pub fn by_method(&self) -> Vec<(&'static str, MethodShare)> {
        let mut methods: BTreeMap<&'static str, MethodShare> = BTreeMap::new();
        for k in &self.kernels {
            let m = methods.entry(k.method).or_default();
            m.kernels += 1;
            m.bytes += k.bytes();
            m.flops += k.flops;
        }
        let mut methods: Vec<_> = methods.into_iter().collect();
        methods.sort_by(|a, b| b.1.bytes.cmp(&a.1.bytes).then(a.0.cmp(b.0)));
        methods
    }
}

#[cfg(test)]
mod tests {
    use burn::backend::Flex;
    use burn::tensor::{Distribution, Tensor};
    use burn_mpric::instrument::{Instrumented, record};

    use super::*;

    type B = Instrumented<Flex>;

    /// A real op log: an element-wise op is one kernel reading both inputs and writing
    /// the result; a matmul has 2 m k n FLOPs; views and uploads launch nothing.
    #[test]
    fn a_logged_computation_is_lowered_to_kernels_and_bytes() {
        let _heap = crate::memory::heap_tests();
        let device = Default::default();
        let a = Tensor::<B, 3>::random([2, 3, 4], Distribution::Default, &device);
        let b = Tensor::<B, 3>::random([2, 4, 5], Distribution::Default, &device);
        let (_, ops) = record(|| {
            let c = a.clone().matmul(b.clone()); // [2, 3, 5]
            let d = c.clone().swap_dims(1, 2); // a view
            let host = Tensor::<B, 3>::from_floats([[[1.0f32; 3]; 5]; 2], &device);
            (d + host).exp()
        });
        let cost = StepCost::of(&ops);
        let methods: Vec<_> = cost.kernels.iter().map(|k| k.method).collect();
        assert_eq!(methods, ["float_matmul", "float_add", "float_exp"]);
        assert_eq!(cost.matmul_flops(), 2.0 * 30.0 * 4.0);
        // matmul: reads 24 + 40 floats, writes 30; add: reads 30 + 30, writes 30; exp: 30, 30.
        assert_eq!(cost.bytes_read(), 4 * (64 + 60 + 30));
        assert_eq!(cost.bytes_written(), 4 * (30 + 30 + 30));
        assert_eq!(cost.uploaded, 4 * 30);
    }

    /// Burn's default `linear_weight_backward` on a rank-3 input makes one `[b, k, n]`
    /// product and sums it over the batch: the bytes of that product are counted.
    #[test]
    fn the_weight_gradient_of_a_batched_linear_counts_its_per_batch_products() {
        let r = OpRecord {
            float_inputs: vec![DType::F32, DType::F32],
            float_shapes: vec![vec![8, 16, 32], vec![8, 16, 64]],
            float_outputs: vec![DType::F32],
            float_output_shapes: vec![vec![32, 64]],
            ..OpRecord::named("linear_weight_backward")
        };
        let cost = StepCost::of(&[r]);
        assert_eq!(cost.kernels.len(), 2);
        assert_eq!(cost.matmul_flops(), 2.0 * 8.0 * 32.0 * 64.0 * 16.0);
        assert_eq!(cost.kernels[0].written, 4 * 8 * 32 * 64);
        assert_eq!(cost.kernels[1].read, 4 * 8 * 32 * 64);
        assert_eq!(cost.kernels[1].written, 4 * 32 * 64);
    }
}
