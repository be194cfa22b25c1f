//! Tensor primitives of [`MixedPrecision`](crate::MixedPrecision): the inner backend's
//! primitive plus the precision settings it was made under.

use burn_backend::quantization::{QuantPropagation, QuantScheme};
use burn_backend::{Backend, DType, QTensorPrimitive, Shape, TensorMetadata};
use burn_std::quantization::QuantAcc;

use crate::settings::Precision;

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

primitive!(
    /// A float tensor of a [`MixedPrecision`](crate::MixedPrecision) backend.
    MpFloat => FloatTensorPrimitive
);
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
