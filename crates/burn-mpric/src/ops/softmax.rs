//! The softmax's pieces, stored (and by default computed) at the compute dtype.
//!
//! Burn's autodiff has no softmax of its own: `softmax(x)` reaches the decorator as
//! `max_dim`, `sub`, `exp`, `sum_dim` and `div`, its backward as `recip`, `mul`, `neg`,
//! `powi_scalar`, `div`, `sum_dim` and `exp` again. By the op table, `exp`, the sums,
//! `recip` and `powi` are precision-sensitive, run at f32: in attention that casts each
//! `[batch, heads, seq, seq]` map up and down in forward and backward, and moves it at f32.
//! The decorator follows the values through the pattern and knows their range:
//!
//! - `max_dim(x, d)` is remembered as the max of `x` along `d`;
//! - `x - max_dim(x, d)` is known to be at most 0, so its `exp` lies in [0, 1], where the
//!   compute dtype has the range (f16's concern with `exp` is overflow above e^11, which a
//!   max-shifted input cannot reach), and each row along `d` holds the max's `exp(0) = 1`;
//! - the exponentials' sum along `d` is at least 1 and at most the row's length;
//! - the exponentials divided by their own sum (the probabilities) lie in [0, 1].
//!
//! What runs where is [`SoftmaxPrecision`](crate::SoftmaxPrecision)'s choice:
//!
//! - `Half` (the default): the pieces are computed and stored at the compute dtype, as pure
//!   half precision and fused attention kernels do, so no map changes dtype in forward or
//!   backward. The sums along `d` are the backend's reductions at the compute dtype: Flex
//!   and the cube backends accumulate half-precision sums at f32 inside and round the
//!   `[.., 1]` result once. Where a value would leave the compute dtype's range it does not:
//!   backward divides the negated exponentials by the square of their row sum, which
//!   reaches the row's length squared (past f16's 65504 from 256 terms); it is computed at
//!   f32 as the op table says, and the division divides by the sum twice at the compute
//!   dtype instead (the quotient is at most 1 in magnitude). The backward's products with
//!   those pieces are summed along `d` at the compute dtype; a sum over a dim of size 1 is
//!   a copy, exact at any dtype. A `log` of the exponentials' sum (`log_softmax`'s
//!   log-sum-exp) sums the map again at f32: that one is a loss's value.
//! - `Stored`: `exp` runs at f32, its sum along `d` is taken at f32 right away and kept with
//!   the value, and the exponentials are stored at the compute dtype; the probabilities are
//!   divided at the compute dtype (at f32, then stored, when the sum of that many terms could
//!   exceed the compute dtype's range: more than 65504 at f16); the reciprocal of the sum,
//!   which backward multiplies the map's gradient by, is computed at f32 and stored at the
//!   compute dtype while it stays a normal number there (at f16, up to 16384 terms).
//! - `Full`: the op table's rule, everything at f32.
//!
//! Either way the exponentials stay with `x - max`, because autodiff's backward of `exp`
//! computes the exponentials of its input again and gets the same values without a second
//! `exp` over the map.
//!
//! A direct `softmax`/`softmin` call (a backend without autodiff) runs at the compute dtype
//! under `Half`, at f32 with its result stored at the compute dtype under `Stored`. Only under
//! policies that lower, with the ops in their default categories, outside
//! [`full_precision`](crate::full_precision).

use std::sync::OnceLock;

use burn::tensor::FloatDType;
use burn_backend::{Backend, IntDType, Scalar, TensorMetadata};
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

/// A value in [0, 1] with nothing more known.
fn unit_interval<B: Backend>() -> Fact<B> {
    Fact::UnitInterval {
        along: None,
        sum: None,
    }
}

/// `tensor` rounded to the compute dtype and known to lie in [0, 1].
fn store_bounded<B: Backend>(tensor: MpFloat<B>) -> MpFloat<B> {
    let compute = Some(tensor.precision.0.dtypes.compute);
    let stored = Arg::<B>::cast(tensor, compute, false);
    MpFloat::with_fact(stored.inner, stored.precision, unit_interval())
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
                if tensor
                    .precision
                    .0
                    .computes_bounded_at_compute(Op::Exp, dtype)
                {
                    // At the compute dtype, as its input is: nothing to cast, no sum yet.
                    return (B::float_exp(tensor.inner.clone()), None);
                }
                let exp = forward(Op::Exp, [tensor.clone()], Fact::None, |[x]| B::float_exp(x));
                let sum = B::float_sum_dim(exp.inner.clone(), dim);
                let compute = Some(exp.precision.0.dtypes.compute);
                (Arg::<B>::cast(exp, compute, false).inner, Some(sum))
            })
            .clone();
        let fact = Fact::UnitInterval {
            along: Some(dim),
            sum,
        };
        return MpFloat::with_fact(stored, tensor.precision, fact);
    }
    forward(Op::Exp, [tensor], Fact::None, |[x]| B::float_exp(x))
}

pub(crate) fn float_sum_dim<B: Backend>(tensor: MpFloat<B>, dim: usize) -> MpFloat<B> {
    let dtype = float_dtype(&tensor.inner);
    let terms = tensor.inner.shape()[dim];
    let at_compute = tensor
        .precision
        .0
        .computes_bounded_at_compute(Op::SumDim, dtype);
    match tensor.fact() {
        Some(Fact::UnitInterval { along, sum }) => {
            let of = tensor.id().expect("a value with a fact has an id");
            let at_least_one = *along == Some(dim);
            if let Some(sum) = sum
                && at_least_one
                && target(Op::SumDim, &tensor.precision, &[&tensor]) == Some(float_dtype(sum))
            {
                let fact = Fact::SumOf {
                    of,
                    terms,
                    at_least_one,
                    summed: None,
                };
                return MpFloat::with_fact(sum.clone(), tensor.precision.clone(), fact);
            }
            // At the compute dtype along the max's dim (a row's sum is then at least 1, so
            // nothing divided by it can leave the range) while the sum fits (at f16, up to
            // 65504 terms).
            if at_compute && at_least_one && terms as f64 <= normal_range(dtype).0 {
                let fact = Fact::SumOf {
                    of,
                    terms,
                    at_least_one,
                    summed: Some((dim, tensor.inner.clone())),
                };
                let sum = B::float_sum_dim(tensor.inner.clone(), dim);
                return MpFloat::with_fact(sum, tensor.precision.clone(), fact);
            }
            let fact = Fact::SumOf {
                of,
                terms,
                at_least_one,
                summed: None,
            };
            forward(Op::SumDim, [tensor], fact, |[x]| B::float_sum_dim(x, dim))
        }
        Some(Fact::SoftmaxProduct { dim: along }) if at_compute && *along == dim => {
            let sum = B::float_sum_dim(tensor.inner.clone(), dim);
            MpFloat::with_fact(sum, tensor.precision.clone(), Fact::SoftmaxProduct { dim })
        }
        // A sum of one term is a copy, exact at any dtype (autodiff's backward of `sum_dim`
        // sums the `[.., 1]` gradient of a row sum this way before broadcasting it).
        _ if at_compute && terms == 1 => {
            MpFloat::new(B::float_sum_dim(tensor.inner, dim), tensor.precision)
        }
        _ => forward(Op::SumDim, [tensor], Fact::None, |[x]| {
            B::float_sum_dim(x, dim)
        }),
    }
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
    // A piece of magnitude at most 1 over the square of a row sum of at least 1: divided by
    // the sum twice at the compute dtype, where the square may not fit.
    if let (Some(Fact::UnitMagnitude { dim }), Some(Fact::SquareOfSum { sum })) =
        (lhs.fact(), rhs.fact())
        && lhs.precision == rhs.precision
        && float_dtype(sum) == float_dtype(&lhs.inner)
        && lhs
            .precision
            .0
            .computes_bounded_at_compute(Op::Div, float_dtype(&lhs.inner))
    {
        let fact = Fact::UnitMagnitude { dim: *dim };
        let once = B::float_div(lhs.inner.clone(), sum.clone());
        return MpFloat::with_fact(B::float_div(once, sum.clone()), lhs.precision, fact);
    }
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
            return MpFloat::with_fact(quotient, lhs.precision, unit_interval());
        }
        // The sum may not fit the compute dtype: divide at the sum's dtype, store the result.
        let quotient = forward(Op::Div, [lhs, rhs], Fact::None, |[a, b]| B::float_div(a, b));
        return store_bounded(quotient);
    }
    forward(Op::Div, [lhs, rhs], Fact::None, |[a, b]| B::float_div(a, b))
}

pub(crate) fn float_recip<B: Backend>(tensor: MpFloat<B>) -> MpFloat<B> {
    // 1 / a sum of at most `terms` values in [0, 1] that include a 1 lies in [1/terms, 1]:
    // computed at the compute dtype where the sum is (`Half`), or stored there (`Stored`),
    // while that is a normal number there.
    let (computes, stores) = match tensor.fact() {
        Some(Fact::SumOf {
            terms,
            at_least_one: true,
            ..
        }) => {
            let rules = &tensor.precision.0;
            let compute = rules.dtypes.compute;
            let normal = 1.0 / *terms as f64 >= normal_range(compute).1;
            let dtype = float_dtype(&tensor.inner);
            (
                normal && rules.computes_bounded_at_compute(Op::Recip, dtype),
                normal && rules.stores_bounded_at_compute(Op::Recip, compute),
            )
        }
        _ => (false, false),
    };
    if computes {
        return MpFloat::new(B::float_recip(tensor.inner), tensor.precision);
    }
    let recip = forward(Op::Recip, [tensor], Fact::None, |[x]| B::float_recip(x));
    if stores { store_bounded(recip) } else { recip }
}

/// The softmax dim of a piece of magnitude at most 1: the exponentials (a value in [0, 1]
/// whose rows along that dim hold a 1) or a [`Fact::UnitMagnitude`].
fn unit_magnitude_dim<B: Backend>(tensor: &MpFloat<B>) -> Option<usize> {
    match tensor.fact() {
        Some(Fact::UnitInterval {
            along: Some(dim), ..
        })
        | Some(Fact::UnitMagnitude { dim }) => Some(*dim),
        _ => None,
    }
}

pub(crate) fn float_neg<B: Backend>(tensor: MpFloat<B>) -> MpFloat<B> {
    let fact = match tensor.fact() {
        // The gradient of the max-shifted scores, negated for the max's: summed the same way.
        Some(Fact::SoftmaxProduct { dim }) => Fact::SoftmaxProduct { dim: *dim },
        _ => unit_magnitude_dim(&tensor).map_or(Fact::None, |dim| Fact::UnitMagnitude { dim }),
    };
    forward(Op::Neg, [tensor], fact, |[x]| B::float_neg(x))
}

pub(crate) fn float_mul<B: Backend>(lhs: MpFloat<B>, rhs: MpFloat<B>) -> MpFloat<B> {
    let fact = [&lhs, &rhs]
        .into_iter()
        .find_map(|t| {
            let dim = unit_magnitude_dim(t)?;
            let dtype = float_dtype(&t.inner);
            t.precision
                .0
                .computes_bounded_at_compute(Op::Mul, dtype)
                .then_some(Fact::SoftmaxProduct { dim })
        })
        .unwrap_or(Fact::None);
    forward(Op::Mul, [lhs, rhs], fact, |[a, b]| B::float_mul(a, b))
}

fn is_two(scalar: &Scalar) -> bool {
    match scalar {
        Scalar::Float(v) => *v == 2.0,
        Scalar::Int(v) => *v == 2,
        Scalar::UInt(v) => *v == 2,
        Scalar::Bool(_) => false,
    }
}

pub(crate) fn float_powi_scalar<B: Backend>(lhs: MpFloat<B>, rhs: Scalar) -> MpFloat<B> {
    // The square of a row sum of at least 1, kept beside the sum it squares (see `float_div`).
    let fact = match lhs.fact() {
        Some(Fact::SumOf {
            at_least_one: true, ..
        }) if is_two(&rhs)
            && lhs
                .precision
                .0
                .computes_bounded_at_compute(Op::PowiScalar, float_dtype(&lhs.inner)) =>
        {
            Fact::SquareOfSum {
                sum: lhs.inner.clone(),
            }
        }
        _ => Fact::None,
    };
    forward(Op::PowiScalar, [lhs], fact, |[x]| {
        B::float_powi_scalar(x, rhs)
    })
}

pub(crate) fn float_log<B: Backend>(tensor: MpFloat<B>) -> MpFloat<B> {
    // The log of a row sum taken at the compute dtype: the sum again at the op table's dtype
    // over the map it summed (a loss's log-sum-exp keeps f32's accuracy).
    if let Some(Fact::SumOf {
        summed: Some((dim, map)),
        ..
    }) = tensor.fact()
        && let Some(wide) = target(Op::Log, &tensor.precision, &[&tensor])
    {
        let map = MpFloat::<B>::new(map.clone(), tensor.precision.clone());
        let map = Arg::<B>::cast(map, Some(wide), false);
        let sum = B::float_sum_dim(map.inner, *dim);
        return MpFloat::new(B::float_log(sum), tensor.precision.clone());
    }
    forward(Op::Log, [tensor], Fact::None, |[x]| B::float_log(x))
}

/// `softmax`/`softmin` as the op table runs them, the result stored at the compute dtype
/// when the input was there.
fn normalized<B: Backend>(
    op: Op,
    tensor: MpFloat<B>,
    run: impl FnOnce(B::FloatTensorPrimitive) -> B::FloatTensorPrimitive,
) -> MpFloat<B> {
    let dtype = float_dtype(&tensor.inner);
    if tensor.precision.0.computes_bounded_at_compute(op, dtype) {
        return MpFloat::new(run(tensor.inner), tensor.precision);
    }
    let bounded = tensor.precision.0.stores_bounded_at_compute(op, dtype);
    let out = forward(op, [tensor], Fact::None, |[x]| run(x));
    if bounded { store_bounded(out) } else { out }
}

pub(crate) fn softmax<B: Backend>(tensor: MpFloat<B>, dim: usize) -> MpFloat<B> {
    normalized(Op::Softmax, tensor, |x| B::softmax(x, dim))
}

pub(crate) fn softmin<B: Backend>(tensor: MpFloat<B>, dim: usize) -> MpFloat<B> {
    normalized(Op::Softmin, tensor, |x| B::softmin(x, dim))
}
