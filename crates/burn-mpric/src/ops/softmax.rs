//! The softmax's pieces, stored at the compute dtype.
//!
//! Burn's autodiff has no softmax of its own: `softmax(x)` reaches the decorator as
//! `max_dim`, `sub`, `exp`, `sum_dim` and `div`, and autodiff saves the exponentials and the
//! probabilities for backward. By the op table both are precision-sensitive results, made and
//! kept at f32: in attention they are `[batch, heads, seq, seq]` and dominate activation memory.
//! Their values lie in [0, 1], so the compute dtype has their range (f16's concern with `exp`
//! is overflow above e^11, which a max-shifted input cannot reach). The decorator follows the
//! values through the pattern and stores them at the compute dtype, as fused attention kernels
//! do, while every reduction stays f32:
//!
//! - `max_dim(x, d)` is remembered as the max of `x` along `d`;
//! - `x - max_dim(x, d)` is known to be at most 0;
//! - `exp` of that runs at f32; its sum along `d` is taken at f32 right away and kept with the
//!   value, and the exponentials are stored at the compute dtype; they stay with `x -
//!   max`, because autodiff's backward of `exp` computes the exponentials of its input again
//!   and gets the same values without a second cast, `exp` and sum over the map;
//! - `sum_dim` of those exponentials along `d` is that f32 sum (`log_softmax`'s log-sum-exp
//!   is therefore the same as with f32 storage);
//! - the exponentials divided by their own sum (the probabilities) are divided at the compute
//!   dtype and stay there (at f32, then stored at the compute dtype, when the sum of that many
//!   terms could exceed the compute dtype's range: more than 65504 at f16);
//! - the reciprocal of that sum, which autodiff's backward of the division multiplies the
//!   `[.., seq, seq]` gradient by, is at least 1/`terms` and at most 1 (the max's `exp(0)` is
//!   among the terms): it is computed at f32 and stored at the compute dtype while it stays a
//!   normal number there (at f16, up to 16384 terms), so that the gradient of the
//!   exponentials keeps the compute dtype instead of being promoted to f32 by an f32
//!   `[.., seq, 1]` factor.
//!
//! A direct `softmax`/`softmin` call (a backend without autodiff) runs at f32 as the op table
//! says, and its result is stored at the compute dtype. Only under policies that lower, with
//! the ops in their default categories, outside [`full_precision`](crate::full_precision);
//! [`MpSettings::full_precision_softmax`](crate::MpSettings::full_precision_softmax)
//! turns it off.

use std::sync::OnceLock;

use burn::tensor::FloatDType;
use burn_backend::{Backend, IntDType, TensorMetadata};
use burn_std::{bf16, f16};

use super::args::{Arg, float_dtype};
use crate::Op;
use crate::rules::{InputDTypes, Precision};
use crate::tensor::{Fact, MpFloat, MpInt};

/// The dtype the op table casts `inputs` to for `op`.
fn target<B: Backend>(op: Op, precision: &Precision, inputs: &[&MpFloat<B>]) -> Option<FloatDType> {
    let mut dtypes = InputDTypes::default();
    inputs
        .iter()
        .for_each(|t| Arg::<B>::collect(*t, &mut dtypes));
    precision.0.target(op, &dtypes)
}

/// The decorator's usual path for one op: inputs cast by the op table, the inner op run, the
/// result wrapped as a new value that satisfies `fact`.
fn forward<B: Backend, const N: usize>(
    op: Op,
    inputs: [MpFloat<B>; N],
    fact: Fact<B>,
    run: impl FnOnce([B::FloatTensorPrimitive; N]) -> B::FloatTensorPrimitive,
) -> MpFloat<B> {
    let precision = inputs
        .iter()
        .map(|t| &t.precision)
        .reduce(Precision::preferred)
        .expect("the op has a float input")
        .clone();
    let target = target(op, &precision, &inputs.each_ref());
    let inner = inputs.map(|t| Arg::<B>::cast(t, target, false).inner);
    MpFloat::with_fact(run(inner), precision, fact)
}

/// `tensor` rounded to the compute dtype and known to lie in [0, 1].
fn store_bounded<B: Backend>(tensor: MpFloat<B>) -> MpFloat<B> {
    let compute = Some(tensor.precision.0.dtypes.compute);
    let stored = Arg::<B>::cast(tensor, compute, false);
    MpFloat::with_fact(
        stored.inner,
        stored.precision,
        Fact::UnitInterval { sum: None },
    )
}

fn max_of<B: Backend>(tensor: &MpFloat<B>, dim: usize) -> Fact<B> {
    match tensor.id() {
        Some(of) => Fact::MaxOf { of, dim },
        None => Fact::None,
    }
}

pub(crate) fn float_max_dim<B: Backend>(tensor: MpFloat<B>, dim: usize) -> MpFloat<B> {
    let fact = max_of(&tensor, dim);
    MpFloat::with_fact(B::float_max_dim(tensor.inner, dim), tensor.precision, fact)
}

pub(crate) fn float_max_dim_with_indices<B: Backend>(
    tensor: MpFloat<B>,
    dim: usize,
    indices_dtype: IntDType,
) -> (MpFloat<B>, MpInt<B>) {
    let fact = max_of(&tensor, dim);
    let (max, indices) = B::float_max_dim_with_indices(tensor.inner, dim, indices_dtype);
    (
        MpFloat::with_fact(max, tensor.precision.clone(), fact),
        MpInt::new(indices, tensor.precision),
    )
}

pub(crate) fn float_sub<B: Backend>(lhs: MpFloat<B>, rhs: MpFloat<B>) -> MpFloat<B> {
    let fact = match rhs.fact() {
        Some(Fact::MaxOf { of, dim }) if of.is(&lhs) => Fact::NonPositive {
            dim: *dim,
            exp: OnceLock::new(),
        },
        _ => Fact::None,
    };
    forward(Op::Sub, [lhs, rhs], fact, |[a, b]| B::float_sub(a, b))
}

pub(crate) fn float_exp<B: Backend>(tensor: MpFloat<B>) -> MpFloat<B> {
    let dtype = float_dtype(&tensor.inner);
    if let Some(Fact::NonPositive { dim, exp }) = tensor.fact()
        && tensor.precision.0.stores_bounded_at_compute(Op::Exp, dtype)
    {
        let dim = *dim;
        let (stored, sum) = exp
            .get_or_init(|| {
                let exp = forward(Op::Exp, [tensor.clone()], Fact::None, |[x]| B::float_exp(x));
                let sum = B::float_sum_dim(exp.inner.clone(), dim);
                let compute = Some(exp.precision.0.dtypes.compute);
                (Arg::<B>::cast(exp, compute, false).inner, sum)
            })
            .clone();
        let fact = Fact::UnitInterval {
            sum: Some((dim, sum)),
        };
        return MpFloat::with_fact(stored, tensor.precision, fact);
    }
    forward(Op::Exp, [tensor], Fact::None, |[x]| B::float_exp(x))
}

pub(crate) fn float_sum_dim<B: Backend>(tensor: MpFloat<B>, dim: usize) -> MpFloat<B> {
    let Some(Fact::UnitInterval { sum }) = tensor.fact() else {
        return forward(Op::SumDim, [tensor], Fact::None, |[x]| {
            B::float_sum_dim(x, dim)
        });
    };
    let of = tensor.id().expect("a value with a fact has an id");
    let terms = tensor.inner.shape()[dim];
    if let Some((d, sum)) = sum
        && *d == dim
        && target(Op::SumDim, &tensor.precision, &[&tensor]) == Some(float_dtype(sum))
    {
        let fact = Fact::SumOf {
            of,
            terms,
            at_least_one: true,
        };
        return MpFloat::with_fact(sum.clone(), tensor.precision.clone(), fact);
    }
    let fact = Fact::SumOf {
        of,
        terms,
        at_least_one: false,
    };
    forward(Op::SumDim, [tensor], fact, |[x]| B::float_sum_dim(x, dim))
}

/// The largest finite value and the smallest positive normal value of `dtype`.
fn normal_range(dtype: FloatDType) -> (f64, f64) {
    match dtype {
        FloatDType::F16 => (f16::MAX.to_f64(), f16::MIN_POSITIVE.to_f64()),
        FloatDType::BF16 => (bf16::MAX.to_f64(), bf16::MIN_POSITIVE.to_f64()),
        FloatDType::F64 => (f64::MAX, f64::MIN_POSITIVE),
        _ => (f32::MAX as f64, f32::MIN_POSITIVE as f64),
    }
}

pub(crate) fn float_div<B: Backend>(lhs: MpFloat<B>, rhs: MpFloat<B>) -> MpFloat<B> {
    // A value in [0, 1] divided by its own sum (along any dim) is in [0, 1].
    let terms = match (lhs.fact(), rhs.fact()) {
        (Some(Fact::UnitInterval { .. }), Some(Fact::SumOf { of, terms, .. })) if of.is(&lhs) => {
            Some(*terms)
        }
        _ => None,
    };
    let normalizes = terms.is_some()
        && lhs.precision == rhs.precision
        && lhs
            .precision
            .0
            .stores_bounded_at_compute(Op::Div, float_dtype(&lhs.inner));
    if let (true, Some(terms)) = (normalizes, terms) {
        let compute = lhs.precision.0.dtypes.compute;
        if terms as f64 <= normal_range(compute).0 {
            let rhs = Arg::<B>::cast(rhs, Some(compute), false);
            let quotient = B::float_div(lhs.inner, rhs.inner);
            return MpFloat::with_fact(quotient, lhs.precision, Fact::UnitInterval { sum: None });
        }
        // The sum may not fit the compute dtype: divide at the sum's dtype, store the result.
        let quotient = forward(Op::Div, [lhs, rhs], Fact::None, |[a, b]| B::float_div(a, b));
        return store_bounded(quotient);
    }
    forward(Op::Div, [lhs, rhs], Fact::None, |[a, b]| B::float_div(a, b))
}

pub(crate) fn float_recip<B: Backend>(tensor: MpFloat<B>) -> MpFloat<B> {
    // 1 / a sum of at most `terms` values in [0, 1] that include a 1 lies in [1/terms, 1].
    let stores = match tensor.fact() {
        Some(Fact::SumOf {
            terms,
            at_least_one: true,
            ..
        }) => {
            let compute = tensor.precision.0.dtypes.compute;
            1.0 / *terms as f64 >= normal_range(compute).1
                && tensor
                    .precision
                    .0
                    .stores_bounded_at_compute(Op::Recip, compute)
        }
        _ => false,
    };
    let recip = forward(Op::Recip, [tensor], Fact::None, |[x]| B::float_recip(x));
    if stores { store_bounded(recip) } else { recip }
}

/// `softmax`/`softmin` as the op table runs them, the result stored at the compute dtype
/// when the input was there.
fn normalized<B: Backend>(
    op: Op,
    tensor: MpFloat<B>,
    run: impl FnOnce(B::FloatTensorPrimitive) -> B::FloatTensorPrimitive,
) -> MpFloat<B> {
    let bounded = tensor
        .precision
        .0
        .stores_bounded_at_compute(op, float_dtype(&tensor.inner));
    let out = forward(op, [tensor], Fact::None, |[x]| run(x));
    if bounded { store_bounded(out) } else { out }
}

pub(crate) fn softmax<B: Backend>(tensor: MpFloat<B>, dim: usize) -> MpFloat<B> {
    normalized(Op::Softmax, tensor, |x| B::softmax(x, dim))
}

pub(crate) fn softmin<B: Backend>(tensor: MpFloat<B>, dim: usize) -> MpFloat<B> {
    normalized(Op::Softmin, tensor, |x| B::softmin(x, dim))
}
