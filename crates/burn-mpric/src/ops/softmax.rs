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
//!   value, and the exponentials are stored at the compute dtype;
//! - `sum_dim` of those exponentials along `d` is that f32 sum (`log_softmax`'s log-sum-exp
//!   is therefore the same as with f32 storage);
//! - the exponentials divided by their own sum (the probabilities) are divided at the compute
//!   dtype and stay there.
//!
//! A direct `softmax`/`softmin` call (a backend without autodiff) runs at f32 as the op table
//! says, and its result is stored at the compute dtype. Only under policies that lower, with
//! the ops in their default categories, outside [`full_precision`](crate::full_precision);
//! [`MpSettings::full_precision_softmax`](crate::MpSettings::full_precision_softmax)
//! turns it off.

use burn::tensor::FloatDType;
use burn_backend::{Backend, IntDType};

use super::args::{Arg, float_dtype};
use crate::rules::Op;
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
fn store_bounded<B: Backend>(
    tensor: MpFloat<B>,
    sum: Option<(usize, B::FloatTensorPrimitive)>,
) -> MpFloat<B> {
    let compute = Some(tensor.precision.0.policy.compute());
    let stored = Arg::<B>::cast(tensor, compute, false);
    MpFloat::with_fact(stored.inner, stored.precision, Fact::UnitInterval { sum })
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
        Some(Fact::MaxOf { of, dim }) if of.is(&lhs) => Fact::NonPositive { dim: *dim },
        _ => Fact::None,
    };
    forward(Op::Sub, [lhs, rhs], fact, |[a, b]| B::float_sub(a, b))
}

pub(crate) fn float_exp<B: Backend>(tensor: MpFloat<B>) -> MpFloat<B> {
    let dtype = float_dtype(&tensor.inner);
    if let Some(Fact::NonPositive { dim }) = tensor.fact()
        && tensor.precision.0.stores_bounded_at_compute(Op::Exp, dtype)
    {
        let dim = *dim;
        let exp = forward(Op::Exp, [tensor], Fact::None, |[x]| B::float_exp(x));
        let sum = B::float_sum_dim(exp.inner.clone(), dim);
        return store_bounded(exp, Some((dim, sum)));
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
    if let Some((d, sum)) = sum
        && *d == dim
        && target(Op::SumDim, &tensor.precision, &[&tensor]) == Some(float_dtype(sum))
    {
        return MpFloat::with_fact(sum.clone(), tensor.precision.clone(), Fact::SumOf { of });
    }
    forward(Op::SumDim, [tensor], Fact::SumOf { of }, |[x]| {
        B::float_sum_dim(x, dim)
    })
}

pub(crate) fn float_div<B: Backend>(lhs: MpFloat<B>, rhs: MpFloat<B>) -> MpFloat<B> {
    // A value in [0, 1] divided by its own sum (along any dim) is in [0, 1].
    let normalizes = matches!(rhs.fact(), Some(Fact::SumOf { of }) if of.is(&lhs))
        && matches!(lhs.fact(), Some(Fact::UnitInterval { .. }))
        && lhs.precision == rhs.precision
        && lhs
            .precision
            .0
            .stores_bounded_at_compute(Op::Div, float_dtype(&lhs.inner));
    if normalizes {
        let rhs = Arg::<B>::cast(rhs, Some(lhs.precision.0.policy.compute()), false);
        let quotient = B::float_div(lhs.inner, rhs.inner);
        return MpFloat::with_fact(quotient, lhs.precision, Fact::UnitInterval { sum: None });
    }
    forward(Op::Div, [lhs, rhs], Fact::None, |[a, b]| B::float_div(a, b))
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
    if bounded {
        store_bounded(out, None)
    } else {
        out
    }
}

pub(crate) fn softmax<B: Backend>(tensor: MpFloat<B>, dim: usize) -> MpFloat<B> {
    normalized(Op::Softmax, tensor, |x| B::softmax(x, dim))
}

pub(crate) fn softmin<B: Backend>(tensor: MpFloat<B>, dim: usize) -> MpFloat<B> {
    normalized(Op::Softmin, tensor, |x| B::softmin(x, dim))
}
