//! How the decorator sees the arguments and results of a backend op: float tensors are
//! inspected and cast, every wrapped primitive is unwrapped for the inner backend, and
//! results are wrapped back with the precision settings of the call.

use burn::tensor::FloatDType;
use burn_backend::ops::{
    AttentionModuleOptions, ConvOptions, ConvTransposeOptions, DeformConv2dBackward,
    DeformConvOptions, GridSampleOptions, InterpolateOptions, MaxPool1dBackward,
    MaxPool1dWithIndices, MaxPool2dBackward, MaxPool2dWithIndices, UnfoldOptions,
};
use burn_backend::quantization::{QuantScheme, QuantizationParametersPrimitive};
use core::ops::Range;

use burn_backend::tensor::IndexingUpdateOp;
use burn_backend::{
    Backend, BoolDType, DType, Distribution, IntDType, Scalar, Shape, Slice, TensorData,
    TensorMetadata, TensorPrimitive,
};

use crate::backend::MixedPrecision;
use crate::device::MpDevice;
use crate::rules::{InputDTypes, Precision};
use crate::tensor::{MpBool, MpFloat, MpInt, MpQuant};

/// An argument of a decorated op.
pub(crate) trait Arg<B: Backend>: Sized {
    /// What the inner backend takes in its place.
    type Inner;

    /// The precision settings the argument carries, if it is a tensor or a device.
    fn precision(&self) -> Option<&Precision> {
        None
    }

    /// Adds the dtypes of the float tensors in the argument.
    fn collect(&self, _inputs: &mut InputDTypes) {}

    /// Casts the float tensors in the argument to `target`; with `cached`, a cast to the
    /// compute dtype is taken from (or stored in) the value's cast cache.
    fn cast(self, _target: Option<FloatDType>, _cached: bool) -> Self {
        self
    }

    fn into_inner(self) -> Self::Inner;
}

/// A result of a decorated op.
pub(crate) trait Output<B: Backend>: Sized {
    type Inner;

    fn wrap(inner: Self::Inner, precision: &Precision) -> Self;
}

pub(crate) fn float_dtype(tensor: &impl TensorMetadata) -> FloatDType {
    match tensor.dtype() {
        DType::F64 => FloatDType::F64,
        DType::F32 => FloatDType::F32,
        DType::Flex32 => FloatDType::Flex32,
        DType::F16 => FloatDType::F16,
        DType::BF16 => FloatDType::BF16,
        other => unreachable!("a float tensor primitive holds {other:?}"),
    }
}

/// Whether an argument's cast to the compute dtype is kept with its value: the parameters of
/// module ops (`weight`, `bias`), which forward and backward both use, as PyTorch autocast
/// keeps the casts of leaf tensors, and the output gradient a module op's backward entry points
/// share (short-lived). Inputs (values made from data) keep theirs whatever the argument, see
/// `MpFloat`. Activations are cast afresh: keeping their half copies beside the
/// full-precision values autodiff saves for backward would raise activation memory.
pub(crate) fn caches_cast(arg: &str) -> bool {
    matches!(arg, "weight" | "bias" | "output_grad")
}

pub(crate) fn cast_inner<B: Backend>(
    tensor: B::FloatTensorPrimitive,
    target: FloatDType,
) -> B::FloatTensorPrimitive {
    if float_dtype(&tensor) == target {
        tensor
    } else {
        B::float_cast(tensor, target)
    }
}

impl<B: Backend> Arg<B> for MpFloat<B> {
    type Inner = B::FloatTensorPrimitive;

    fn precision(&self) -> Option<&Precision> {
        Some(&self.precision)
    }

    fn collect(&self, inputs: &mut InputDTypes) {
        inputs.push(float_dtype(&self.inner));
    }

    fn cast(self, target: Option<FloatDType>, cached: bool) -> Self {
        match target {
            Some(target) if float_dtype(&self.inner) != target => self.cast_to(target, cached),
            Some(_) => self,
            None => self,
        }
    }

    fn into_inner(self) -> Self::Inner {
        self.inner
    }
}

impl<B: Backend> Output<B> for MpFloat<B> {
    type Inner = B::FloatTensorPrimitive;

    fn wrap(inner: Self::Inner, precision: &Precision) -> Self {
        MpFloat::new(inner, precision.clone())
    }
}

macro_rules! tagged {
    ($($name:ident => $assoc:ident),*) => {$(
        impl<B: Backend> Arg<B> for $name<B> {
            type Inner = B::$assoc;

            fn precision(&self) -> Option<&Precision> {
                Some(&self.precision)
            }

            fn into_inner(self) -> Self::Inner {
                self.inner
            }
        }

        impl<B: Backend> Output<B> for $name<B> {
            type Inner = B::$assoc;

            fn wrap(inner: Self::Inner, precision: &Precision) -> Self {
                $name::new(inner, precision.clone())
            }
        }
    )*};
}

tagged!(MpInt => IntTensorPrimitive, MpBool => BoolTensorPrimitive, MpQuant => QuantizedTensorPrimitive);

impl<'a, B: Backend> Arg<B> for &'a MpDevice<B> {
    type Inner = &'a B::Device;

    fn precision(&self) -> Option<&Precision> {
        Some(&self.precision)
    }

    fn into_inner(self) -> Self::Inner {
        &self.inner
    }
}

impl<B: Backend, T: Arg<B>> Arg<B> for Option<T> {
    type Inner = Option<T::Inner>;

    fn precision(&self) -> Option<&Precision> {
        self.as_ref().and_then(T::precision)
    }

    fn collect(&self, inputs: &mut InputDTypes) {
        if let Some(t) = self {
            t.collect(inputs)
        }
    }

    fn cast(self, target: Option<FloatDType>, cached: bool) -> Self {
        self.map(|t| t.cast(target, cached))
    }

    fn into_inner(self) -> Self::Inner {
        self.map(T::into_inner)
    }
}

impl<B: Backend, T: Arg<B>> Arg<B> for Vec<T> {
    type Inner = Vec<T::Inner>;

    fn precision(&self) -> Option<&Precision> {
        self.iter()
            .filter_map(T::precision)
            .reduce(Precision::preferred)
    }

    fn collect(&self, inputs: &mut InputDTypes) {
        self.iter().for_each(|t| t.collect(inputs))
    }

    fn cast(self, target: Option<FloatDType>, cached: bool) -> Self {
        self.into_iter().map(|t| t.cast(target, cached)).collect()
    }

    fn into_inner(self) -> Self::Inner {
        self.into_iter().map(T::into_inner).collect()
    }
}

impl<B: Backend> Arg<B> for QuantizationParametersPrimitive<MixedPrecision<B>> {
    type Inner = QuantizationParametersPrimitive<B>;

    fn precision(&self) -> Option<&Precision> {
        Some(&self.scales.precision)
    }

    fn into_inner(self) -> Self::Inner {
        QuantizationParametersPrimitive {
            scales: self.scales.inner,
        }
    }
}

impl<B: Backend> Arg<B> for TensorPrimitive<MixedPrecision<B>> {
    type Inner = TensorPrimitive<B>;

    fn precision(&self) -> Option<&Precision> {
        match self {
            TensorPrimitive::Float(t) => Some(&t.precision),
            TensorPrimitive::QFloat(t) => Some(&t.precision),
        }
    }

    fn collect(&self, inputs: &mut InputDTypes) {
        if let TensorPrimitive::Float(t) = self {
            t.collect(inputs)
        }
    }

    fn cast(self, target: Option<FloatDType>, cached: bool) -> Self {
        match self {
            TensorPrimitive::Float(t) => TensorPrimitive::Float(t.cast(target, cached)),
            quantized => quantized,
        }
    }

    fn into_inner(self) -> Self::Inner {
        match self {
            TensorPrimitive::Float(t) => TensorPrimitive::Float(t.inner),
            TensorPrimitive::QFloat(t) => TensorPrimitive::QFloat(t.inner),
        }
    }
}

impl<B: Backend> Output<B> for TensorPrimitive<MixedPrecision<B>> {
    type Inner = TensorPrimitive<B>;

    fn wrap(inner: Self::Inner, precision: &Precision) -> Self {
        match inner {
            TensorPrimitive::Float(t) => TensorPrimitive::Float(MpFloat::wrap(t, precision)),
            TensorPrimitive::QFloat(t) => TensorPrimitive::QFloat(MpQuant::wrap(t, precision)),
        }
    }
}

impl<B: Backend, T: Output<B>> Output<B> for Option<T> {
    type Inner = Option<T::Inner>;

    fn wrap(inner: Self::Inner, precision: &Precision) -> Self {
        inner.map(|t| T::wrap(t, precision))
    }
}

impl<B: Backend, T: Output<B>> Output<B> for Vec<T> {
    type Inner = Vec<T::Inner>;

    fn wrap(inner: Self::Inner, precision: &Precision) -> Self {
        inner.into_iter().map(|t| T::wrap(t, precision)).collect()
    }
}

impl<B: Backend, T1: Output<B>, T2: Output<B>> Output<B> for (T1, T2) {
    type Inner = (T1::Inner, T2::Inner);

    fn wrap((a, b): Self::Inner, precision: &Precision) -> Self {
        (T1::wrap(a, precision), T2::wrap(b, precision))
    }
}

/// Arguments and results the decorator hands through untouched.
macro_rules! passive {
    ($($ty:ty),* $(,)?) => {$(
        impl<B: Backend> Arg<B> for $ty {
            type Inner = $ty;

            fn into_inner(self) -> Self::Inner {
                self
            }
        }

        impl<B: Backend> Output<B> for $ty {
            type Inner = $ty;

            fn wrap(inner: Self::Inner, _: &Precision) -> Self {
                inner
            }
        }
    )*};
}

/// Every argument and result type that carries no tensor; both decorators hand them
/// through untouched.
macro_rules! for_passive_types {
    ($m:ident) => {
        $m!(
            usize,
            bool,
            f64,
            [usize; 2],
            Shape,
            Scalar,
            Distribution,
            FloatDType,
            IntDType,
            BoolDType,
            TensorData,
            InterpolateOptions,
            AttentionModuleOptions,
            GridSampleOptions,
            UnfoldOptions,
            ConvOptions<1>,
            ConvOptions<2>,
            ConvOptions<3>,
            ConvTransposeOptions<1>,
            ConvTransposeOptions<2>,
            ConvTransposeOptions<3>,
            DeformConvOptions<2>,
            Range<i64>,
            IndexingUpdateOp,
        );
    };
}

#[cfg_attr(not(any(test, feature = "instrument")), allow(unused_imports))]
pub(crate) use for_passive_types;

for_passive_types!(passive);

macro_rules! passive_ref {
    ($($ty:ty),* $(,)?) => {$(
        impl<'a, B: Backend> Arg<B> for &'a $ty {
            type Inner = &'a $ty;

            fn into_inner(self) -> Self::Inner {
                self
            }
        }
    )*};
}

passive_ref!([usize], [Slice], QuantScheme);

/// Module-op results that are structs of tensors.
macro_rules! wrap_struct {
    ($($name:ident { $($field:ident),* }),* $(,)?) => {$(
        impl<B: Backend> Output<B> for $name<MixedPrecision<B>> {
            type Inner = $name<B>;

            fn wrap(inner: Self::Inner, precision: &Precision) -> Self {
                $name { $($field: Output::<B>::wrap(inner.$field, precision)),* }
            }
        }
    )*};
}

wrap_struct!(
    MaxPool1dWithIndices { output, indices },
    MaxPool2dWithIndices { output, indices },
    MaxPool1dBackward { x_grad },
    MaxPool2dBackward { x_grad },
    DeformConv2dBackward {
        x_grad,
        offset_grad,
        weight_grad,
        mask_grad,
        bias_grad
    },
);
