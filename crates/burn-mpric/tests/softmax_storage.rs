//! The softmax's pieces under each [`SoftmaxPrecision`]: by default (`Half`) computed and
//! stored at the compute dtype, so no `[.., seq, seq]` map changes dtype in forward or
//! backward, the row sums' squares and a loss's log-sum-exp at f32; under `Stored` the
//! exponentials computed at f32 and stored at the compute dtype with f32 sums; nothing
//! outside the pattern changes. Checked on the inner ops each call hands down, and on the
//! numbers.

use burn::backend::{Autodiff, Flex};
use burn::nn::attention::{MhaInput, MultiHeadAttentionConfig};
use burn::tensor::activation::{log_softmax, softmax};
use burn::tensor::backend::Backend;
use burn::tensor::{DType, Distribution, FloatDType, Tensor, TensorData};
use burn_mpric::instrument::{Instrumented, OpRecord, record};
use burn_mpric::{MixedPrecision, MpDevice, MpSettings, Policy, SoftmaxPrecision, full_precision};

type Inner = Instrumented<Flex>;
type Mp = MixedPrecision<Inner>;
type Ad = Autodiff<Mp>;

/// The mixed policies, with their compute dtype.
const MIXED: [(&str, FloatDType); 2] = [
    ("mixed_f16", FloatDType::F16),
    ("mixed_bf16", FloatDType::BF16),
];

fn settings(policy: &str) -> MpSettings {
    MpSettings::new(policy.parse::<Policy>().unwrap())
}

/// `policy` with the softmax computed at f32 and stored at the compute dtype.
fn stored(policy: &str) -> MpSettings {
    settings(policy).softmax_precision(SoftmaxPrecision::Stored)
}

fn device(settings: MpSettings) -> MpDevice<Inner> {
    Mp::device(Default::default(), settings).unwrap()
}

/// Scores spread like attention logits, at the compute dtype as a matmul leaves them.
fn scores(device: &MpDevice<Inner>, half: FloatDType) -> Tensor<Ad, 3> {
    let values: Vec<f32> = (0..2 * 5 * 7)
        .map(|i| ((i * 37 % 23) as f32 - 11.0) * 0.45)
        .collect();
    Tensor::<Ad, 3>::from_data(TensorData::new(values, [2, 5, 7]), device).cast(half)
}

fn to_f32<const D: usize>(t: Tensor<Ad, D>) -> Vec<f32> {
    t.cast(FloatDType::F32).into_data().to_vec::<f32>().unwrap()
}

fn calls<'a>(log: &'a [OpRecord], op: &str) -> Vec<&'a OpRecord> {
    log.iter().filter(|r| r.op == op).collect()
}

#[test]
fn probabilities_and_exponentials_are_stored_at_the_compute_dtype() {
    for (policy, half) in MIXED {
        let device = device(stored(policy));
        let x = scores(&device, half).require_grad();
        let (p, log) = record(|| softmax(x.clone(), 2));
        assert_eq!(p.dtype(), DType::from(half), "{policy}");
        let half = DType::from(half);
        // exp and the sum ran at f32 ...
        let exp = calls(&log, "float_exp");
        assert_eq!(exp.len(), 1);
        assert_eq!(exp[0].float_inputs, vec![DType::F32]);
        let sums = calls(&log, "float_sum_dim");
        assert_eq!(sums.len(), 1, "the sum is taken once, beside exp");
        assert_eq!(sums[0].float_inputs, vec![DType::F32]);
        // ... the division saw the stored exponentials and the sum, both at the compute dtype.
        let div = calls(&log, "float_div");
        assert_eq!(div.len(), 1);
        assert_eq!(div[0].float_inputs, vec![half, half]);
        // Casts: the scores up for exp, the exponentials down, the [2, 5, 1] sum down.
        let casts: Vec<_> = calls(&log, "float_cast")
            .iter()
            .map(|r| (r.float_inputs[0], r.float_shapes[0].clone()))
            .collect();
        assert_eq!(
            casts,
            vec![
                (half, vec![2, 5, 7]),
                (DType::F32, vec![2, 5, 7]),
                (DType::F32, vec![2, 5, 1]),
            ]
        );
        // A matmul after it needs no cast of the probabilities.
        let v = Tensor::<Ad, 3>::ones([2, 7, 3], &device);
        let (_, log) = record(|| p.clone().matmul(v.clone()));
        assert!(
            calls(&log, "float_cast")
                .iter()
                .all(|r| r.float_shapes[0] != [2, 5, 7])
        );
        // Backward runs (and keeps the inner ops' dtypes consistent).
        let (grads, log) = record(|| {
            (p * Tensor::<Ad, 3>::ones([2, 5, 7], &device))
                .sum()
                .backward()
        });
        for r in &log {
            if let Some(first) = r.float_inputs.first() {
                assert!(
                    r.float_inputs.iter().all(|d| d == first),
                    "{} got {:?}",
                    r.op,
                    r.float_inputs
                );
            }
        }
        assert!(x.grad(&grads).is_some());
    }
}

#[test]
fn softmax_values_and_gradients_match_f32_within_half_rounding() {
    let reference = device(settings("f32"));
    let weights = TensorData::new(
        (0..2 * 5 * 7)
            .map(|i| ((i * 13 % 17) as f32 - 8.0) * 0.1)
            .collect::<Vec<_>>(),
        [2, 5, 7],
    );
    let run = |device: &MpDevice<Inner>, half: FloatDType| {
        let x = scores(device, half).cast(FloatDType::F32).require_grad();
        let w = Tensor::<Ad, 3>::from_data(weights.clone(), device);
        let p = softmax(x.clone().cast(half), 2);
        let loss = (p.clone().cast(FloatDType::F32) * w).sum();
        let grads = loss.backward();
        let grad = x.grad(&grads).unwrap().cast(FloatDType::F32);
        (to_f32(p), grad.into_data().to_vec::<f32>().unwrap())
    };
    for (policy, half, tol) in [
        ("mixed_f16", FloatDType::F16, 2e-3),
        ("mixed_bf16", FloatDType::BF16, 1.6e-2),
    ] {
        // The f32 reference sees the same half-rounded scores.
        let (ref_p, ref_g) = run(&reference, half);
        for settings in [stored(policy), settings(policy)] {
            let (p, g) = run(&device(settings), half);
            for (a, b) in p.iter().zip(&ref_p) {
                assert!((a - b).abs() <= tol * b.max(1e-3), "{policy}: p {a} vs {b}");
            }
            for row in p.chunks(7) {
                let sum: f32 = row.iter().sum();
                assert!(
                    (sum - 1.0).abs() <= 4.0 * tol,
                    "{policy}: row sums to {sum}"
                );
            }
            let scale = ref_g.iter().fold(0f32, |m, v| m.max(v.abs()));
            for (a, b) in g.iter().zip(&ref_g) {
                assert!(
                    (a - b).abs() <= 4.0 * tol * scale,
                    "{policy}: grad {a} vs {b}"
                );
            }
        }
    }
}

#[test]
fn log_softmax_is_unchanged_by_the_storage_rule() {
    for (policy, half) in MIXED {
        let stored = device(stored(policy));
        let full = device(settings(policy).full_precision_softmax());
        let a = log_softmax(scores(&stored, half), 2);
        let b = log_softmax(scores(&full, half), 2);
        assert_eq!(a.dtype(), DType::F32);
        // The log-sum-exp uses the f32 sum of the f32 exponentials either way.
        let b = to_f32(b);
        assert_eq!(to_f32(a), b, "{policy}");
        // Computed at the compute dtype, the log-sum-exp still sums at f32 (over the
        // exponentials rounded to the compute dtype): within their rounding of f32's.
        let (a, log) = record(|| log_softmax(scores(&device(settings(policy)), half), 2));
        assert_eq!(a.dtype(), DType::F32);
        let logs = calls(&log, "float_log");
        assert_eq!(logs.len(), 1);
        assert_eq!(logs[0].float_inputs, vec![DType::F32], "{policy}");
        let tol = if half == FloatDType::F16 { 1e-3 } else { 8e-3 };
        for (a, b) in to_f32(a).iter().zip(&b) {
            assert!(
                (a - b).abs() <= tol * (1.0 + b.abs()),
                "{policy}: {a} vs {b}"
            );
        }
    }
}

#[test]
fn values_outside_the_pattern_keep_the_op_table_rules() {
    let device = device(settings("mixed_f16"));
    // exp of an unshifted input: e^20 does not fit f16, so it stays f32 and finite.
    let x = Tensor::<Ad, 1>::from_floats([20.0, 1.0], &device).cast(FloatDType::F16);
    let e = x.clone().exp();
    assert_eq!(e.dtype(), DType::F32);
    assert!(to_f32(e.clone()).iter().all(|v| v.is_finite()));
    // x minus the max of another tensor is not known to be <= 0.
    let y = Tensor::<Ad, 1>::from_floats([0.0, -1.0], &device).cast(FloatDType::F16);
    assert_eq!((x.clone() - y.max_dim(0)).exp().dtype(), DType::F32);
    // Exponentials divided by the sum of other exponentials may exceed 1: f32 where the
    // sums are f32 (`Stored`). Where they are taken at the compute dtype (the default), a
    // sum along the max's dim is at least 1, so the quotient is at most 1.
    let shifted = |t: Tensor<Ad, 1>| t.clone() - t.max_dim(0);
    for (device, other) in [
        (self::device(stored("mixed_f16")), DType::F32),
        (device.clone(), DType::F16),
    ] {
        let x = Tensor::<Ad, 1>::from_floats([20.0, 1.0], &device).cast(FloatDType::F16);
        let a = shifted(x.clone()).exp();
        let b = shifted(Tensor::<Ad, 1>::from_floats([0.0, -30.0], &device).cast(FloatDType::F16))
            .exp();
        assert_eq!(a.clone().dtype(), DType::F16);
        assert_eq!((a.clone() / b.sum_dim(0)).dtype(), other);
        assert_eq!((a.clone() / a.clone().sum_dim(0)).dtype(), DType::F16);
    }
    // A sum of exponentials along another dim than the max's may be below 1: f32.
    let t =
        Tensor::<Ad, 2>::from_floats([[0.0, -30.0], [-30.0, -31.0]], &device).cast(FloatDType::F16);
    let e = (t.clone() - t.max_dim(1)).exp();
    assert_eq!(e.sum_dim(0).dtype(), DType::F32);
    // Turned off: per settings, and inside a full-precision scope (the default computes at
    // the compute dtype: see below).
    let off = self::device(settings("mixed_f16").full_precision_softmax());
    let z = scores(&off, FloatDType::F16);
    assert_eq!(softmax(z.clone(), 2).dtype(), DType::F32);
    let on = scores(&device, FloatDType::F16);
    assert_eq!(
        full_precision(|| softmax(on.clone(), 2)).dtype(),
        DType::F32
    );
    assert_eq!(softmax(on, 2).dtype(), DType::F16);
}

#[test]
fn a_direct_softmax_call_is_stored_at_the_compute_dtype() {
    // Without autodiff, the backend's own softmax runs at f32 and its result is stored low
    // (`Stored`), or runs at the compute dtype (the default).
    let half = device(settings("mixed_f16"));
    let x = Tensor::<Mp, 2>::random([4, 9], Distribution::Normal(0.0, 3.0), &half)
        .cast(FloatDType::F16);
    let (p, log) = record(|| softmax(x.clone(), 1));
    assert_eq!(p.dtype(), DType::F16);
    assert_eq!(calls(&log, "softmax")[0].float_inputs, vec![DType::F16]);
    assert!(calls(&log, "float_cast").is_empty());
    let device = device(stored("mixed_f16"));
    let x = Tensor::<Mp, 2>::random([4, 9], Distribution::Normal(0.0, 3.0), &device)
        .cast(FloatDType::F16);
    let (p, log) = record(|| softmax(x.clone(), 1));
    assert_eq!(p.dtype(), DType::F16);
    assert_eq!(calls(&log, "softmax")[0].float_inputs, vec![DType::F32]);
    let want = softmax(x.cast(FloatDType::F32), 1);
    let (p, want) = (
        p.into_data().to_vec::<f32>().unwrap(),
        want.into_data().to_vec::<f32>().unwrap(),
    );
    for (a, b) in p.iter().zip(&want) {
        assert!((a - b).abs() <= 1e-3 * b.max(1e-3), "{a} vs {b}");
    }
}

#[test]
fn attention_saves_its_probabilities_at_the_compute_dtype() {
    let device = device(stored("mixed_f16"));
    let mha = MultiHeadAttentionConfig::new(8, 2).init::<Ad>(&device);
    <Ad as Backend>::seed(&device, 3);
    let x = Tensor::<Ad, 3>::random([2, 6, 8], Distribution::Normal(0.0, 1.0), &device);
    let (out, log) = record(|| mha.forward(MhaInput::self_attn(x.clone())));
    // The probabilities ([2, 2, 6, 6]) reach the value matmul at f16 with no cast of their own:
    // the only f32 values of that shape are the exponentials while exp runs.
    let big = [2usize, 2, 6, 6];
    let f32_made: Vec<_> = log
        .iter()
        .filter(|r| {
            r.float_shapes.iter().any(|s| s == &big) && r.float_inputs.contains(&DType::F32)
        })
        .map(|r| r.op)
        .collect();
    assert_eq!(f32_made, vec!["float_exp", "float_sum_dim", "float_cast"]);
    assert_eq!(out.context.dtype(), DType::F16);
}

#[test]
fn the_softmax_backward_multiplies_its_gradient_by_the_stored_reciprocal() {
    for (policy, half) in MIXED {
        let device = device(stored(policy));
        let x = scores(&device, half).require_grad();
        let p = softmax(x.clone(), 2);
        let w = Tensor::<Ad, 3>::ones([2, 5, 7], &device).cast(half);
        let (grads, log) = record(|| (p * w).cast(FloatDType::F32).sum().backward());
        let half = DType::from(half);
        // Autodiff's backward of `e / sum` multiplies the [2, 5, 7] gradient by 1 / sum:
        // that reciprocal is stored at the compute dtype, so the product stays there.
        let recip = calls(&log, "float_recip");
        assert_eq!(recip.len(), 1, "{policy}");
        assert_eq!(recip[0].float_shapes, vec![vec![2, 5, 1]]);
        assert!(
            log.iter().any(|r| r.op == "float_mul"
                && r.float_inputs == vec![half, half]
                && r.float_shapes == vec![vec![2, 5, 7], vec![2, 5, 1]]),
            "{policy}: no compute-dtype product by the reciprocal"
        );
        assert!(x.grad(&grads).is_some());
    }
    // 1 / sum is stored only while it is a normal number of the compute dtype: at f16, for
    // sums of at most 16384 terms (the max's exp(0) = 1 is among them, so 1/sum >= 1/terms).
    let device = device(stored("mixed_f16"));
    let sum_of = |terms: usize| {
        let t = Tensor::<Ad, 2>::zeros([1, terms], &device).cast(FloatDType::F16);
        (t.clone() - t.max_dim(1)).exp().sum_dim(1)
    };
    assert_eq!(sum_of(16384).recip().dtype(), DType::F16);
    assert_eq!(sum_of(16385).recip().dtype(), DType::F32);
    // Another sum (not along the max's dim) may be below 1: its reciprocal stays f32.
    let t = Tensor::<Ad, 2>::zeros([3, 4], &device).cast(FloatDType::F16);
    let shifted = (t.clone() - t.max_dim(1)).exp();
    assert_eq!(shifted.sum_dim(0).recip().dtype(), DType::F32);
}

#[test]
fn the_softmax_backward_reuses_the_forward_exponentials() {
    for (policy, half) in MIXED {
        let device = device(stored(policy));
        let x = scores(&device, half).require_grad();
        let w = Tensor::<Ad, 3>::ones([2, 5, 7], &device).cast(half);
        let (grads, log) = record(|| {
            let p = softmax(x.clone(), 2);
            (p * w.clone()).cast(FloatDType::F32).sum().backward()
        });
        // Autodiff's backward of `exp` computes the exponentials of its input again: they are
        // the ones forward made and stored, so the map is exponentiated and its exponentials
        // rounded to the compute dtype once in the whole step; the one other f32 map rounded
        // is the gradient handed back to the half scores.
        assert_eq!(calls(&log, "float_exp").len(), 1, "{policy}");
        let map = vec![2usize, 5, 7];
        let rounded = log
            .iter()
            .filter(|r| {
                r.op == "float_cast"
                    && r.float_inputs == vec![DType::F32]
                    && r.float_shapes == vec![map.clone()]
            })
            .count();
        assert_eq!(rounded, 2, "{policy}: {rounded} f32 maps rounded");
        assert!(x.grad(&grads).is_some());
    }
}

#[test]
fn probabilities_over_more_terms_than_f16_holds_are_divided_at_f32() {
    // 70000 equal scores: every probability is 1/70000, a small f16 subnormal. Their sum,
    // 70000, is past f16's largest finite value (65504): summed or divided at f16 it would
    // be inf and every probability 0. Under either setting.
    for device in [device(stored("mixed_f16")), device(settings("mixed_f16"))] {
        let n = 70_000;
        let x = Tensor::<Ad, 2>::zeros([1, n], &device).cast(FloatDType::F16);
        let p = softmax(x, 1);
        assert_eq!(p.dtype(), DType::F16);
        let p = to_f32(p);
        let want = burn_std::f16::from_f32(1.0 / n as f32).to_f32();
        assert!(want > 0.0);
        assert!(p.iter().all(|&v| v == want), "{:?}", &p[..4]);
        // A row of 1000 terms still divides at f16 (no cast of the [1, 1000] exponentials).
        let x = Tensor::<Ad, 2>::zeros([1, 1000], &device).cast(FloatDType::F16);
        let (p, log) = record(|| softmax(x, 1));
        assert_eq!(
            calls(&log, "float_div")[0].float_inputs,
            vec![DType::F16; 2]
        );
        assert_eq!(p.dtype(), DType::F16);
    }
}

/// The shapes of the `[.., seq, seq]`-sized values an op call read or made at f32.
fn f32_maps(log: &[OpRecord], map: &[usize]) -> Vec<&'static str> {
    log.iter()
        .filter(|r| {
            let reads = r
                .float_inputs
                .iter()
                .zip(&r.float_shapes)
                .any(|(d, s)| *d == DType::F32 && s == map);
            let makes = r
                .float_outputs
                .iter()
                .zip(&r.float_output_shapes)
                .any(|(d, s)| *d == DType::F32 && s == map);
            reads || makes
        })
        .map(|r| r.op)
        .collect()
}

#[test]
fn computed_at_the_compute_dtype_no_map_changes_dtype_in_forward_or_backward() {
    for (policy, half) in MIXED {
        let device = device(settings(policy));
        let x = scores(&device, half).require_grad();
        // Consumed as attention consumes it: by a matmul with the values.
        let values: Vec<f32> = (0..2 * 7 * 3).map(|i| (i % 5) as f32 - 2.0).collect();
        let v = Tensor::<Ad, 3>::from_data(TensorData::new(values, [2, 7, 3]), &device).cast(half);
        let (grads, log) = record(|| {
            let p = softmax(x.clone(), 2);
            assert_eq!(p.dtype(), DType::from(half));
            p.matmul(v.clone()).cast(FloatDType::F32).sum().backward()
        });
        let map = [2usize, 5, 7];
        // No op reads or makes an f32 map, no map is cast: the softmax, its sums along the
        // row and its whole backward run at the compute dtype, as pure half precision does.
        assert_eq!(f32_maps(&log, &map), Vec::<&str>::new(), "{policy}");
        assert!(
            calls(&log, "float_cast")
                .iter()
                .all(|r| r.float_shapes[0] != map),
            "{policy}"
        );
        // One exp over the map in forward and backward, as before.
        assert_eq!(calls(&log, "float_exp").len(), 1, "{policy}");
        // The square of the row sum runs at f32 (past f16's range from 256 terms); the map
        // is divided by the sum twice at the compute dtype instead.
        let square = calls(&log, "float_powi_scalar");
        assert_eq!(square.len(), 1);
        assert_eq!(square[0].float_inputs, vec![DType::F32]);
        assert_eq!(square[0].float_shapes, vec![vec![2, 5, 1]]);
        let half_divs = calls(&log, "float_div")
            .iter()
            .filter(|r| r.float_inputs == vec![DType::from(half); 2] && r.float_shapes[0] == map)
            .count();
        assert_eq!(
            half_divs, 3,
            "{policy}: e / sum, and the backward's two divisions"
        );
        assert!(x.grad(&grads).is_some());
    }
}

#[test]
fn a_softmax_of_256_terms_and_more_keeps_its_gradient_finite_at_f16() {
    // Rows of 300 equal scores: each row sums to 300, whose square (90000) f16 cannot hold.
    // Pure f16 divides by that square and loses the gradient through the sum; here it is
    // the f32 run's, within f16's rounding.
    let n = 300;
    let grad_at = |settings: MpSettings, half: FloatDType| {
        let device = device(settings);
        let values: Vec<f32> = (0..2 * n).map(|i| ((i * 7 % 13) as f32) * 0.01).collect();
        let x = Tensor::<Ad, 2>::from_data(TensorData::new(values, [2, n]), &device)
            .cast(half)
            .require_grad();
        let w: Vec<f32> = (0..2 * n).map(|i| ((i * 5 % 11) as f32) - 5.0).collect();
        let w = Tensor::<Ad, 2>::from_data(TensorData::new(w, [2, n]), &device).cast(half);
        let loss = (softmax(x.clone(), 1) * w).cast(FloatDType::F32).sum();
        let g = x.grad(&loss.backward()).unwrap();
        g.cast(FloatDType::F32).into_data().to_vec::<f32>().unwrap()
    };
    let want = grad_at(settings("f32"), FloatDType::F32);
    let got = grad_at(settings("mixed_f16"), FloatDType::F16);
    let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
    assert!(scale > 0.0);
    for (a, b) in got.iter().zip(&want) {
        assert!(a.is_finite());
        assert!((a - b).abs() <= 2e-2 * scale, "{a} vs {b} (scale {scale})");
    }
}
