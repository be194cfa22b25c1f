//! Tensor primitives of [`MixedPrecision`](crate::MixedPrecision): the inner backend's
//! primitive plus the precision settings it was made under.

use burn_backend::quantization::{QuantPropagation, QuantScheme};
use std::cell::Cell;
use std::sync::{Arc, OnceLock, Weak};

use burn::tensor::FloatDType;
use burn_backend::{Backend, DType, QTensorPrimitive, Shape, TensorMetadata};
use burn_std::quantization::QuantAcc;

use crate::rules::Precision;

macro_rules! primitive {
    ($(#[$doc:meta])* $name:ident => $assoc:ident) => {
        $(#[$doc])*
        #[derive(Clone, Debug)]
        pub struct $name<B: Backend> {
            pub(crate) inner: B::$assoc,
            pub(crate) precision: Precision,
        }

        impl<B: Backend> $name<B> {
            pub(crate) fn new(inner: B::$assoc, precision: Precision) -> Self {
                Self { inner, precision }
            }
        }

        impl<B: Backend> TensorMetadata for $name<B> {
            fn dtype(&self) -> DType {
                self.inner.dtype()
            }

            fn shape(&self) -> Shape {
                self.inner.shape()
            }
        }
    };
}

/// A float tensor of a [`MixedPrecision`](crate::MixedPrecision) backend.
///
/// Under a policy whose compute dtype differs from its param dtype, the value can also carry
/// its cast to the compute dtype, made on its first use and shared by every clone of the value:
/// the forward op and the backward that saved it use one cast, as PyTorch autocast's cache does
/// for leaf tensors. Two kinds of value keep their cast: the weight or bias of a module op
/// (linear, convolutions), and an input, a value no float op computed (host data, a creation op,
/// an int or bool tensor made float: a data batch, a mask). An op result is a new value with an empty cache,
/// so a cached cast can never be stale, and it is freed with the value. Activations are not
/// cached (their half copies would sit beside the full-precision values autodiff saves for
/// backward).
#[derive(Clone, Debug)]
pub struct MpFloat<B: Backend> {
    pub(crate) inner: B::FloatTensorPrimitive,
    pub(crate) precision: Precision,
    value: Option<Arc<Value<B>>>,
}

/// What the clones of one tensor value share under a lowering policy: its cast to the compute
/// dtype and what is known of its range. The `Arc` is also the value's identity.
#[derive(Debug)]
pub(crate) struct Value<B: Backend> {
    compute_cast: OnceLock<B::FloatTensorPrimitive>,
    pub(crate) fact: Fact<B>,
}

/// What the decorator knows of a value's elements from the op that made it, so that the pieces
/// of a softmax can be stored at the compute dtype (see `ops/softmax.rs`).
#[derive(Debug)]
pub(crate) enum Fact<B: Backend> {
    /// Nothing.
    None,
    /// Computed by no float op: host data, a creation op, or an int or bool tensor made float
    /// (a program input, a constant, a mask, a freshly initialised parameter). Its cast to the
    /// compute dtype is kept.
    Input,
    /// `max_dim(of, dim)`.
    MaxOf { of: ValueId<B>, dim: usize },
    /// `x - max_dim(x, dim)`: every element is at most 0. `exp` holds its exponentials as
    /// stored (at the compute dtype) and, where they were computed at f32, their f32 sum
    /// along `dim`, made by the value's first `exp`: autodiff's backward of `exp` computes
    /// the exponentials of its input again, and gets these same values without computing
    /// (and casting and reducing) a `[.., seq, seq]` map twice.
    NonPositive {
        dim: usize,
        exp: OnceLock<(B::FloatTensorPrimitive, Option<B::FloatTensorPrimitive>)>,
    },
    /// Every element is in [0, 1] (up to rounding). `along`: the dim whose max was
    /// subtracted before `exp`, so that each row along it holds a 1; `sum`: the f32 sum along
    /// it, made before the value was rounded to the compute dtype.
    UnitInterval {
        along: Option<usize>,
        sum: Option<B::FloatTensorPrimitive>,
    },
    /// `sum_dim(of, _)` of a value in [0, 1]: each element sums `terms` elements of `of`, so
    /// it is at most `terms`; `at_least_one` when the sum runs along the dim that holds the
    /// max's `exp(0) = 1`. `summed`: the compute-dtype map and dim it was summed over at the
    /// compute dtype ([`SoftmaxPrecision::Half`](crate::SoftmaxPrecision::Half)), kept so
    /// that a `log` of the sum (`log_softmax`'s log-sum-exp) sums that map again at f32.
    SumOf {
        of: ValueId<B>,
        terms: usize,
        at_least_one: bool,
        summed: Option<(usize, B::FloatTensorPrimitive)>,
    },
    /// A piece of a softmax along `dim` whose elements are at most 1 in magnitude: the
    /// negated exponentials, and their quotient by the square of their row sum (backward's
    /// gradient with respect to that sum).
    UnitMagnitude { dim: usize },
    /// `sum^2` of a [`SumOf`](Fact::SumOf) at the compute dtype that is at least 1, computed
    /// at f32 (it reaches the row's length squared, past f16's range); `sum` is kept so that
    /// a piece of magnitude at most 1 divided by this square is divided by `sum` twice at the
    /// compute dtype instead.
    SquareOfSum { sum: B::FloatTensorPrimitive },
    /// A product with a [`UnitMagnitude`](Fact::UnitMagnitude) piece of a softmax along
    /// `dim` (backward's gradient terms): its sum along `dim` runs at the compute dtype, the
    /// reduction accumulating at f32 inside the backend.
    SoftmaxProduct { dim: usize },
}

/// A value's identity that does not keep its tensors alive (and whose address cannot be
/// reused while it exists).
#[derive(Debug)]
pub(crate) struct ValueId<B: Backend>(Weak<Value<B>>);

impl<B: Backend> ValueId<B> {
    pub(crate) fn is(&self, tensor: &MpFloat<B>) -> bool {
        tensor
            .value
            .as_ref()
            .is_some_and(|v| core::ptr::eq(Arc::as_ptr(v), self.0.as_ptr()))
    }
}

impl<B: Backend> MpFloat<B> {
    pub(crate) fn new(inner: B::FloatTensorPrimitive, precision: Precision) -> Self {
        Self::with_fact(inner, precision, Fact::None)
    }

    /// A new value whose elements are known to satisfy `fact` (dropped where the policy
    /// does not lower: nothing reads it there).
    pub(crate) fn with_fact(
        inner: B::FloatTensorPrimitive,
        precision: Precision,
        fact: Fact<B>,
    ) -> Self {
        // Only policies that lower need a value cell: the identity path stays allocation-free.
        let value = precision.0.lowers().then(|| {
            Arc::new(Value {
                compute_cast: OnceLock::new(),
                fact,
            })
        });
        Self {
            inner,
            precision,
            value,
        }
    }

    /// What is known of this value's elements (nothing where the policy does not lower).
    pub(crate) fn fact(&self) -> Option<&Fact<B>> {
        self.value.as_ref().map(|v| &v.fact)
    }

    /// This value's identity, where the policy lowers.
    pub(crate) fn id(&self) -> Option<ValueId<B>> {
        self.value.as_ref().map(|v| ValueId(Arc::downgrade(v)))
    }

    /// This value at `target` (another dtype than its own): with `target` the compute dtype
    /// and either `cached` or an input value, the value's shared cast (made now if it is the
    /// first); a new cast otherwise.
    pub(crate) fn cast_to(self, target: FloatDType, cached: bool) -> Self {
        let MpFloat {
            inner,
            precision,
            value,
        } = self;
        let inner = match value {
            Some(value)
                if (cached || matches!(value.fact, Fact::Input))
                    && target == precision.0.dtypes.compute =>
            {
                value
                    .compute_cast
                    .get_or_init(|| counted_cast::<B>(inner, target))
                    .clone()
            }
            _ => counted_cast::<B>(inner, target),
        };
        Self::new(inner, precision)
    }
}

/// `B::float_cast`, counted by [`casts_made`].
fn counted_cast<B: Backend>(
    inner: B::FloatTensorPrimitive,
    target: FloatDType,
) -> B::FloatTensorPrimitive {
    CASTS_MADE.with(|n| n.set(n.get() + 1));
    B::float_cast(inner, target)
}

impl<B: Backend> TensorMetadata for MpFloat<B> {
    fn dtype(&self) -> DType {
        self.inner.dtype()
    }

    fn shape(&self) -> Shape {
        self.inner.shape()
    }
}

thread_local! {
    static CASTS_MADE: Cell<u64> = const { Cell::new(0) };
}

/// The number of dtype casts the decorator has made on this thread for its own policy
/// (inputs cast to an op's dtype; casts the program asks for are not counted). Cached casts
/// reused by a later op are not made again. For benchmarks and tests.
///
/// ```
/// use burn::backend::Flex;
/// use burn::tensor::Tensor;
/// use burn_mpric::{MixedPrecision, Policy, casts_made};
///
/// type B = MixedPrecision<Flex>;
/// let device = B::device(Default::default(), "mixed_bf16".parse::<Policy>().unwrap()).unwrap();
/// let w = Tensor::<B, 2>::ones([4, 4], &device);
/// let x = Tensor::<B, 2>::ones([2, 4], &device);
/// let h = x.clone().add_scalar(1.0); // an activation at f32
/// let before = casts_made();
/// let _ = burn::tensor::module::linear(x.clone(), w.clone(), None); // x and w cast to bf16
/// let _ = burn::tensor::module::linear(x.clone(), w.clone(), None); // both casts reused
/// assert_eq!(casts_made() - before, 2);
/// let _ = burn::tensor::module::linear(h.clone(), w.clone(), None); // h cast, w reused
/// let _ = burn::tensor::module::linear(h, w, None); // h cast again: activations are not kept
/// assert_eq!(casts_made() - before, 4);
/// ```
pub fn casts_made() -> u64 {
    CASTS_MADE.with(Cell::get)
}
primitive!(
    /// An int tensor of a [`MixedPrecision`](crate::MixedPrecision) backend.
    MpInt => IntTensorPrimitive
);
primitive!(
    /// A bool tensor of a [`MixedPrecision`](crate::MixedPrecision) backend.
    MpBool => BoolTensorPrimitive
);
primitive!(
    /// A quantized tensor of a [`MixedPrecision`](crate::MixedPrecision) backend.
    MpQuant => QuantizedTensorPrimitive
);

impl<B: Backend> QTensorPrimitive for MpQuant<B> {
    fn scheme(&self) -> &QuantScheme {
        self.inner.scheme()
    }

    fn acc_precision(&self) -> QuantAcc {
        self.inner.acc_precision()
    }

    fn propagation(&self) -> QuantPropagation {
        self.inner.propagation()
    }

    fn default_scheme() -> QuantScheme {
        B::QuantizedTensorPrimitive::default_scheme()
    }
}
