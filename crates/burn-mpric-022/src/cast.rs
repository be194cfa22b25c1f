//! Casting batches to the compute dtype and results to the output dtype.
//!
//! Burn 0.22 does not promote mixed float dtypes, so an f32 batch meeting f16 weights is an
//! error (or, in a release build of Flex, a misread). Cast a batch once with
//! [`cast_for_compute`] before the forward pass, and the logits (or the loss) with
//! [`cast_for_output`] before any precision-sensitive op (softmax, log, losses), as
//! PyTorch's autocast runs those at f32.

use burn::tensor::{Bool, Float, FloatDType, Int, Tensor};
use burn_mpric_core::ResolvedPolicy;

use crate::dtype::{plain_float, to_burn_dtype};

/// Values whose float tensors can be cast: tensors, and tuples, `Vec`s, arrays and `Option`s
/// of them. Int and bool tensors, and quantized float tensors, pass through unchanged.
///
/// Every plain float tensor is cast, f64 included: unlike PyTorch (which leaves f64 alone),
/// Burn would not promote an f64 activation meeting an f16 weight.
///
/// # Example
///
/// ```
/// use burn::tensor::{DType, Device, FloatDType, Int, Tensor};
/// use burn_mpric_022::CastFloat;
///
/// let device = Device::flex();
/// let batch = (Tensor::<2>::ones([2, 2], &device), Tensor::<1, Int>::zeros([2], &device));
/// assert_eq!(batch.float_dtype(), Some(FloatDType::F32));
/// let (x, y) = batch.cast_float(FloatDType::BF16);
/// assert_eq!(x.dtype(), DType::BF16);
/// assert!(!y.dtype().is_float());
/// ```
pub trait CastFloat: Sized {
    /// Casts every plain float tensor inside to `dtype`.
    #[must_use]
    fn cast_float(self, dtype: FloatDType) -> Self;

    /// The dtype of the first plain float tensor inside, if any.
    fn float_dtype(&self) -> Option<FloatDType>;

    /// Hands its float tensors to a precision audit running on this thread, under `name`
    /// (`burn_mpric_022::audit::observe`); outside an audit, nothing.
    fn observe_floats(&self, _name: &str) {}
}

impl<const D: usize> CastFloat for Tensor<D, Float> {
    fn cast_float(self, dtype: FloatDType) -> Self {
        match plain_float(self.dtype()) {
            Some(_) => self.cast(dtype),
            None => self,
        }
    }

    fn float_dtype(&self) -> Option<FloatDType> {
        plain_float(self.dtype())
    }

    fn observe_floats(&self, name: &str) {
        crate::observe::observe(name, self);
    }
}

impl<const D: usize> CastFloat for Tensor<D, Int> {
    fn cast_float(self, _dtype: FloatDType) -> Self {
        self
    }

    fn float_dtype(&self) -> Option<FloatDType> {
        None
    }
}

impl<const D: usize> CastFloat for Tensor<D, Bool> {
    fn cast_float(self, _dtype: FloatDType) -> Self {
        self
    }

    fn float_dtype(&self) -> Option<FloatDType> {
        None
    }
}

impl CastFloat for () {
    fn cast_float(self, _dtype: FloatDType) -> Self {}

    fn float_dtype(&self) -> Option<FloatDType> {
        None
    }
}

impl<T: CastFloat> CastFloat for Option<T> {
    fn cast_float(self, dtype: FloatDType) -> Self {
        self.map(|value| value.cast_float(dtype))
    }

    fn float_dtype(&self) -> Option<FloatDType> {
        self.as_ref().and_then(CastFloat::float_dtype)
    }

    fn observe_floats(&self, name: &str) {
        if let Some(value) = self {
            value.observe_floats(name);
        }
    }
}

impl<T: CastFloat> CastFloat for Vec<T> {
    fn cast_float(self, dtype: FloatDType) -> Self {
        self.into_iter()
            .map(|value| value.cast_float(dtype))
            .collect()
    }

    fn float_dtype(&self) -> Option<FloatDType> {
        self.iter().find_map(CastFloat::float_dtype)
    }

    fn observe_floats(&self, name: &str) {
        self.iter().for_each(|value| value.observe_floats(name));
    }
}

impl<T: CastFloat, const N: usize> CastFloat for [T; N] {
    fn cast_float(self, dtype: FloatDType) -> Self {
        self.map(|value| value.cast_float(dtype))
    }

    fn float_dtype(&self) -> Option<FloatDType> {
        self.iter().find_map(CastFloat::float_dtype)
    }

    fn observe_floats(&self, name: &str) {
        self.iter().for_each(|value| value.observe_floats(name));
    }
}

macro_rules! tuple_cast {
    ($($name:ident),+) => {
        impl<$($name: CastFloat),+> CastFloat for ($($name,)+) {
            #[allow(non_snake_case)]
            fn cast_float(self, dtype: FloatDType) -> Self {
                let ($($name,)+) = self;
                ($($name.cast_float(dtype),)+)
            }

            #[allow(non_snake_case)]
            fn float_dtype(&self) -> Option<FloatDType> {
                let ($($name,)+) = self;
                None$(.or_else(|| $name.float_dtype()))+
            }

            #[allow(non_snake_case)]
            fn observe_floats(&self, name: &str) {
                let ($($name,)+) = self;
                $($name.observe_floats(name);)+
            }
        }
    };
}

tuple_cast!(A);
tuple_cast!(A, B);
tuple_cast!(A, B, C);
tuple_cast!(A, B, C, D);
tuple_cast!(A, B, C, D, E);
tuple_cast!(A, B, C, D, E, F);
tuple_cast!(A, B, C, D, E, F, G);
tuple_cast!(A, B, C, D, E, F, G, H);

/// Casts the float tensors of a batch to the policy's compute dtype, before the forward pass.
///
/// # Example
///
/// ```
/// use burn::tensor::{DType, Device, Int, Tensor};
/// use burn_mpric_022::cast_for_compute;
/// use burn_mpric_core::ResolvedPolicy;
///
/// let device = Device::flex();
/// let policy: ResolvedPolicy = "mixed_f16".parse().unwrap();
/// let batch = vec![(Tensor::<2>::ones([1, 2], &device), Tensor::<1, Int>::zeros([1], &device))];
/// let batch = cast_for_compute(batch, &policy);
/// assert_eq!(batch[0].0.dtype(), DType::F16);
/// ```
pub fn cast_for_compute<T: CastFloat>(value: T, policy: &ResolvedPolicy) -> T {
    value.cast_float(to_burn_dtype(policy.compute()))
}

/// Casts the float tensors of a result (logits, a loss) to the policy's output dtype: before
/// a loss or softmax, so they run at full precision, and before reading results back.
///
/// # Example
///
/// ```
/// use burn::tensor::{DType, Device, FloatDType, Tensor};
/// use burn_mpric_022::cast_for_output;
/// use burn_mpric_core::ResolvedPolicy;
///
/// let device = Device::flex();
/// let policy: ResolvedPolicy = "mixed_bf16".parse().unwrap();
/// let logits = Tensor::<2>::ones([2, 3], &device).cast(FloatDType::BF16);
/// assert_eq!(cast_for_output(Some(logits), &policy).unwrap().dtype(), DType::F32);
/// ```
pub fn cast_for_output<T: CastFloat>(value: T, policy: &ResolvedPolicy) -> T {
    value.cast_float(to_burn_dtype(policy.output()))
}
