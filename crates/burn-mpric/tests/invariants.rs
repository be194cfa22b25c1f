//! Invariants 1-4 of the decorator, op by op: an instrumented inner backend records the
//! float dtypes of every op `MixedPrecision` hands down, through forward AND backward of
//! burn-nn modules under `Autodiff<MixedPrecision<Instrumented<Flex>>>`.

use burn::backend::{Autodiff, Flex};
use burn::module::Module;
use burn::nn::attention::{MhaInput, MultiHeadAttentionConfig};
use burn::nn::conv::Conv2dConfig;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::{EmbeddingConfig, LayerNormConfig, LinearConfig};
use burn::tensor::backend::Backend;
use burn::tensor::{DType, Distribution, Int, Tensor};
use burn_mpric::instrument::{Instrumented, OpRecord, record};
use burn_mpric::{MixedPrecision, MpDevice, MpSettings, Policy};

type Inner = Instrumented<Flex>;
type Mp = MixedPrecision<Inner>;
type Ad = Autodiff<Mp>;

fn device(policy: &str) -> MpDevice<Inner> {
    Mp::device(Default::default(), policy.parse::<Policy>().unwrap()).unwrap()
}

/// `policy` with the softmax at f32 too: the op table's literal rule, everywhere.
fn literal(policy: &str) -> MpDevice<Inner> {
    let settings = MpSettings::new(policy.parse::<Policy>().unwrap()).full_precision_softmax();
    Mp::device(Default::default(), settings).unwrap()
}

/// Ops that must see the compute dtype (forward and backward entry points).
const COMPUTE_OPS: &[&str] = &[
    "float_matmul",
    "linear",
    "linear_x_backward",
    "linear_weight_backward",
    "conv2d",
    "conv2d_x_backward",
    "conv2d_weight_backward",
    "attention",
];

/// Ops that must see f32.
const FULL_PRECISION_OPS: &[&str] = &[
    "float_exp",
    "float_log",
    "float_sum",
    "float_sum_dim",
    "float_mean",
    "float_mean_dim",
    "float_sqrt",
    "float_powf_scalar",
    "float_powf_scalar_impl",
    "float_recip",
    "softmax",
    "log_softmax",
    "layer_norm",
];

/// Checks invariants 1-3 on a log; returns how many compute and f32 ops it saw.
fn check(log: &[OpRecord], compute: DType) -> (usize, usize) {
    check_beside_softmax(log, compute, &[])
}

/// [`check`], where precision-sensitive ops whose inputs all have one of `softmax`'s shapes
/// (a softmax's map and its row statistics, which the default `SoftmaxPrecision::Half` runs
/// at the compute dtype) may run at `compute` too.
fn check_beside_softmax(log: &[OpRecord], compute: DType, softmax: &[&[usize]]) -> (usize, usize) {
    let (mut n_compute, mut n_full) = (0, 0);
    for rec in log {
        // 1. never a multi-input float op with disagreeing dtypes
        if let Some(first) = rec.float_inputs.first() {
            assert!(
                rec.float_inputs.iter().all(|d| d == first),
                "{} received mixed dtypes {:?}",
                rec.op,
                rec.float_inputs
            );
        }
        // 2. compute ops at the compute dtype
        if COMPUTE_OPS.contains(&rec.op) {
            n_compute += 1;
            assert!(
                rec.float_inputs.iter().all(|d| *d == compute),
                "{} ran at {:?}, expected {compute:?}",
                rec.op,
                rec.float_inputs
            );
        }
        // 3. precision-sensitive ops at f32 (a softmax's pieces: at f32 or `compute`)
        if FULL_PRECISION_OPS.contains(&rec.op) {
            n_full += 1;
            let piece = !softmax.is_empty()
                && rec
                    .float_shapes
                    .iter()
                    .all(|s| softmax.contains(&s.as_slice()));
            assert!(
                rec.float_inputs
                    .iter()
                    .all(|d| *d == DType::F32 || (piece && *d == compute)),
                "{} ran at {:?} on {:?}, expected f32",
                rec.op,
                rec.float_inputs,
                rec.float_shapes
            );
        }
    }
    (n_compute, n_full)
}

fn ops(log: &[OpRecord]) -> Vec<&'static str> {
    log.iter().map(|r| r.op).collect()
}

fn random<const D: usize>(shape: [usize; D], device: &MpDevice<Inner>) -> Tensor<Ad, D> {
    <Ad as Backend>::seed(device, 7);
    Tensor::random(shape, Distribution::Normal(0.0, 1.0), device)
}

#[test]
fn linear_forward_and_backward() {
    for (policy, compute) in [("mixed_bf16", DType::BF16), ("mixed_f16", DType::F16)] {
        let device = device(policy);
        let linear = LinearConfig::new(8, 4).init::<Ad>(&device);
        assert_eq!(
            linear.weight.val().dtype(),
            DType::F32,
            "params at param dtype"
        );
        let x = random([3, 8], &device).require_grad();
        let ((), log) = record(|| {
            let y = linear.forward(x.clone());
            assert_eq!(y.dtype(), compute);
            let loss = y.powf_scalar(2.0).mean();
            assert_eq!(loss.dtype(), DType::F32);
            let grads = loss.backward();
            assert!(linear.weight.grad(&grads).is_some() && x.grad(&grads).is_some());
        });
        let names = ops(&log);
        for op in ["linear", "linear_x_backward", "linear_weight_backward"] {
            assert!(names.contains(&op), "{op} missing from {names:?}");
        }
        let (n_compute, n_full) = check(&log, compute);
        assert!(n_compute >= 3 && n_full >= 1);
    }
}

#[test]
fn conv2d_forward_and_backward() {
    let device = device("mixed_f16");
    let conv = Conv2dConfig::new([2, 3], [3, 3]).init::<Ad>(&device);
    let x = random([1, 2, 6, 6], &device).require_grad();
    let ((), log) = record(|| {
        let y = conv.forward(x.clone());
        assert_eq!(y.dtype(), DType::F16);
        let grads = y.sum().backward();
        assert!(conv.weight.grad(&grads).is_some());
    });
    let names = ops(&log);
    for op in ["conv2d", "conv2d_x_backward", "conv2d_weight_backward"] {
        assert!(names.contains(&op), "{op} missing from {names:?}");
    }
    check(&log, DType::F16);
}

#[test]
fn layer_norm_runs_at_f32_even_on_half_inputs() {
    let device = device("mixed_bf16");
    let norm = LayerNormConfig::new(8).init::<Ad>(&device);
    let x = random([2, 8], &device)
        .cast(burn::tensor::FloatDType::BF16)
        .require_grad();
    let ((), log) = record(|| {
        let y = norm.forward(x.clone());
        assert_eq!(y.dtype(), DType::F32);
        let grads = y.sum().backward();
        assert!(norm.gamma.grad(&grads).is_some());
    });
    let (_, n_full) = check(&log, DType::BF16);
    assert!(n_full >= 2, "{:?}", ops(&log));
}

#[test]
fn embedding_and_cross_entropy() {
    for literal_rule in [true, false] {
        let device = if literal_rule {
            literal("mixed_bf16")
        } else {
            device("mixed_bf16")
        };
        let embedding = EmbeddingConfig::new(10, 6).init::<Ad>(&device);
        let head = LinearConfig::new(6, 10).init::<Ad>(&device);
        let tokens = Tensor::<Ad, 2, Int>::from_ints([[1, 2, 3], [4, 5, 6]], &device);
        let targets = Tensor::<Ad, 1, Int>::from_ints([2, 3, 4, 5, 6, 7], &device);
        let ((), log) = record(|| {
            let h = embedding.forward(tokens.clone());
            assert_eq!(h.dtype(), DType::F32, "embedding is precision-neutral");
            let logits = head.forward(h).reshape([6, 10]);
            assert_eq!(logits.dtype(), DType::BF16);
            let loss = CrossEntropyLossConfig::new()
                .init(&device)
                .forward(logits, targets.clone());
            assert_eq!(loss.dtype(), DType::F32, "the loss is f32");
            let grads = loss.backward();
            assert!(embedding.weight.grad(&grads).is_some());
        });
        // The log-softmax of the [6, 10] logits: its pieces at bf16 by default, its log of
        // the row sums at f32 either way.
        let softmax: &[&[usize]] = if literal_rule {
            &[]
        } else {
            &[&[6, 10], &[6, 1]]
        };
        let (n_compute, n_full) = check_beside_softmax(&log, DType::BF16, softmax);
        assert!(n_compute >= 3 && n_full >= 2, "{:?}", ops(&log));
        assert!(
            log.iter()
                .filter(|r| r.op == "float_log")
                .all(|r| r.float_inputs == [DType::F32])
        );
    }
}

#[test]
fn multi_head_attention_forward_and_backward() {
    for literal_rule in [true, false] {
        let device = if literal_rule {
            literal("mixed_f16")
        } else {
            device("mixed_f16")
        };
        let mha = MultiHeadAttentionConfig::new(8, 2).init::<Ad>(&device);
        let x = random([2, 4, 8], &device).require_grad();
        let ((), log) = record(|| {
            let out = mha.forward(MhaInput::self_attn(x.clone()));
            assert_eq!(out.context.dtype(), DType::F16);
            let grads = out.context.sum().backward();
            assert!(x.grad(&grads).is_some());
        });
        // The attention maps [2, 2, 4, 4] and their row statistics: at f16 by default.
        let softmax: &[&[usize]] = if literal_rule {
            &[]
        } else {
            &[&[2, 2, 4, 4], &[2, 2, 4, 1]]
        };
        let (n_compute, n_full) = check_beside_softmax(&log, DType::F16, softmax);
        assert!(n_compute >= 4 && n_full >= 1, "{:?}", ops(&log));
    }
}

#[test]
fn everything_else_runs_at_the_widest_input_dtype() {
    let device = device("mixed_bf16");
    let a = Tensor::<Mp, 1>::from_floats([1.0, 2.0], &device).cast(burn::tensor::FloatDType::BF16);
    let b = Tensor::<Mp, 1>::from_floats([3.0, 4.0], &device);
    let ((sum, same), log) = record(|| (a.clone() + b.clone(), a.clone() * a.clone()));
    assert_eq!(sum.dtype(), DType::F32);
    assert_eq!(same.dtype(), DType::BF16);
    let calls = |op: &str| -> Vec<Vec<DType>> {
        log.iter()
            .filter(|r| r.op == op)
            .map(|r| r.float_inputs.clone())
            .collect()
    };
    // bf16 + f32: the bf16 operand is cast up first, then the add sees f32 twice.
    assert_eq!(calls("float_cast"), vec![vec![DType::BF16]]);
    assert_eq!(calls("float_add"), vec![vec![DType::F32, DType::F32]]);
    assert_eq!(calls("float_mul"), vec![vec![DType::BF16, DType::BF16]]);
    assert_eq!(sum.into_data().to_vec::<f32>().unwrap(), vec![4.0, 6.0]);
    // Int and bool ops pass through untouched.
    let i = Tensor::<Mp, 1, Int>::from_ints([1, 2], &device);
    let ((), log) = record(|| {
        let _ = (i.clone() + i.clone()).equal_elem(2);
    });
    assert!(log.iter().all(|r| r.float_inputs.is_empty()));
    assert_eq!(ops(&log), vec!["int_add", "int_equal_elem"]);
}

#[test]
fn creation_ops_make_the_param_dtype() {
    for (policy, param) in [("mixed_bf16", DType::F32), ("pure_bf16", DType::BF16)] {
        let device = device(policy);
        assert_eq!(Tensor::<Mp, 1>::zeros([2], &device).dtype(), param);
        assert_eq!(Tensor::<Mp, 1>::ones([2], &device).dtype(), param);
        assert_eq!(Tensor::<Mp, 1>::full([2], 3.0, &device).dtype(), param);
        assert_eq!(
            Tensor::<Mp, 1>::random([2], Distribution::Default, &device).dtype(),
            param
        );
        assert_eq!(Tensor::<Mp, 1>::from_floats([1.0], &device).dtype(), param);
        assert_eq!(
            Tensor::<Mp, 1, Int>::from_ints([1], &device)
                .float()
                .dtype(),
            param
        );
        let linear = LinearConfig::new(2, 2).init::<Ad>(&device);
        assert_eq!(linear.weight.val().dtype(), param);
    }
}

#[test]
fn two_policies_side_by_side_on_parallel_threads() {
    let handles: Vec<_> = [
        ("mixed_f16", DType::F16),
        ("mixed_bf16", DType::BF16),
        ("f32", DType::F32),
    ]
    .into_iter()
    .cycle()
    .take(9)
    .map(|(policy, compute)| {
        std::thread::spawn(move || {
            let device = device(policy);
            for _ in 0..20 {
                let a = Tensor::<Mp, 2>::ones([4, 4], &device);
                assert_eq!(a.clone().matmul(a).dtype(), compute, "{policy}");
            }
        })
    })
    .collect();
    for h in handles {
        h.join().unwrap();
    }
}

#[test]
fn op_overrides_and_pure_mode() {
    use burn_mpric::{MpSettings, Op, OpCategory};
    let policy: Policy = "mixed_bf16".parse().unwrap();
    let keep_attention =
        MpSettings::new(policy).with_category(Op::Matmul, OpCategory::FullPrecision);
    let device = Mp::device(Default::default(), keep_attention).unwrap();
    let a = Tensor::<Mp, 2>::ones([2, 2], &device);
    assert_eq!(a.clone().matmul(a).dtype(), DType::F32);

    let device = Mp::device(Default::default(), MpSettings::new(policy).pure()).unwrap();
    let a = Tensor::<Mp, 1>::ones([2], &device);
    assert_eq!(a.clone().exp().dtype(), DType::BF16);
    assert_eq!(a.sum().dtype(), DType::BF16);

    assert!(burn_mpric::full_precision(|| {
        let device = device.clone();
        let a = Tensor::<Mp, 2>::ones([2, 2], &device);
        a.clone().matmul(a).dtype() == DType::F32
    }));
}

#[test]
fn instrumented_backend_catches_mixed_dtypes_when_nothing_casts() {
    // The check above is not vacuous: without the decorator, a mixed pair reaches the kernel.
    let device = Default::default();
    let a = Tensor::<Inner, 1>::from_floats([1.0], &device).cast(burn::tensor::FloatDType::BF16);
    let b = Tensor::<Inner, 1>::from_floats([1.0], &device);
    let (_, log) =
        record(|| std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| a.clone() + b.clone())));
    assert_eq!(log[0].float_inputs, vec![DType::BF16, DType::F32]);
}

#[test]
fn module_dtypes_survive_save_and_reload_shapes() {
    // A model built on a mixed device reports f32 params through the module API.
    let device = device("mixed_f16");
    let linear = LinearConfig::new(3, 2).init::<Ad>(&device);
    assert_eq!(linear.num_params(), 8);
    assert_eq!(
        linear.devices()[0].policy().to_string(),
        "p=f32,c=f16,o=f32"
    );
}
