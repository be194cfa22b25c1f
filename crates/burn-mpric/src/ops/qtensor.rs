//! `QTensorOps` for [`MixedPrecision`]: quantized tensors pass through untouched.

use burn::tensor::FloatDType;
use burn_backend::ops::QTensorOps;
use burn_backend::quantization::{QuantScheme, QuantizationParametersPrimitive};
use burn_backend::tensor::{Device, FloatTensor, IntTensor, QuantizedTensor};
use burn_backend::{Backend, ExecutionError, Shape, Slice, TensorData};

use super::forward::forward_ops;
use crate::backend::MixedPrecision;
use crate::device::MpDevice;
use crate::tensor::MpQuant;

/// The ops of this trait that both decorators forward, with their op-table entries.
macro_rules! q_op_list {
    ($m:ident) => {
        $m! {
            fn quantize(tensor: FloatTensor<Self>, scheme: &QuantScheme, qparams: QuantizationParametersPrimitive<Self>) -> QuantizedTensor<Self> => plain;
            fn dequantize(tensor: QuantizedTensor<Self>, dtype: FloatDType) -> FloatTensor<Self> => plain;
            fn q_reshape(tensor: QuantizedTensor<Self>, shape: Shape) -> QuantizedTensor<Self> => plain;
            fn q_expand(tensor: QuantizedTensor<Self>, shape: Shape) -> QuantizedTensor<Self> => plain;
            fn q_swap_dims(tensor: QuantizedTensor<Self>, dim1: usize, dim2: usize) -> QuantizedTensor<Self> => plain;
            fn q_permute(tensor: QuantizedTensor<Self>, axes: &[usize]) -> QuantizedTensor<Self> => plain;
            fn q_flip(tensor: QuantizedTensor<Self>, axes: &[usize]) -> QuantizedTensor<Self> => plain;
            fn q_select(tensor: QuantizedTensor<Self>, dim: usize, indices: IntTensor<Self>) -> QuantizedTensor<Self> => plain;
            fn q_slice(tensor: QuantizedTensor<Self>, slices: &[Slice]) -> QuantizedTensor<Self> => plain;
        }
    };
}

pub(crate) use q_op_list;

impl<B: Backend> QTensorOps<Self> for MixedPrecision<B> {
    fn q_from_data(data: TensorData, device: &Device<Self>) -> QuantizedTensor<Self> {
        MpQuant::new(
            B::q_from_data(data, &device.inner),
            device.precision.clone(),
        )
    }

    fn q_device(tensor: &QuantizedTensor<Self>) -> Device<Self> {
        MpDevice::from_parts(B::q_device(&tensor.inner), tensor.precision.clone())
    }

    fn q_to_device(tensor: QuantizedTensor<Self>, device: &Device<Self>) -> QuantizedTensor<Self> {
        MpQuant::new(
            B::q_to_device(tensor.inner, &device.inner),
            device.precision.clone(),
        )
    }

    async fn q_into_data(tensor: QuantizedTensor<Self>) -> Result<TensorData, ExecutionError> {
        B::q_into_data(tensor.inner).await
    }

    q_op_list!(forward_ops);
}
