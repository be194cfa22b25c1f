//! `BoolTensorOps` for [`MixedPrecision`]: bool ops pass through untouched.

use burn::tensor::FloatDType;
use burn_backend::ops::BoolTensorOps;
use burn_backend::tensor::{BoolTensor, Device, FloatTensor, IntTensor};
use burn_backend::{
    Backend, BoolDType, ExecutionError, IntDType, Scalar, Shape, Slice, TensorData,
};

use super::forward::forward_ops;
use super::tensor::create;
use crate::backend::MixedPrecision;
use crate::device::MpDevice;
use crate::tensor::{MpBool, MpInt};

/// The ops of this trait that both decorators forward, with their op-table entries.
macro_rules! bool_op_list {
    ($m:ident) => {
        $m! {
            fn bool_into_int(tensor: BoolTensor<Self>, out_dtype: IntDType) -> IntTensor<Self> => plain;
            fn bool_reshape(tensor: BoolTensor<Self>, shape: Shape) -> BoolTensor<Self> => plain;
            fn bool_slice(tensor: BoolTensor<Self>, slices: &[Slice]) -> BoolTensor<Self> => plain;
            fn bool_slice_assign(tensor: BoolTensor<Self>, slices: &[Slice], value: BoolTensor<Self>) -> BoolTensor<Self> => plain;
            fn bool_mask_where(tensor: BoolTensor<Self>, mask: BoolTensor<Self>, value: BoolTensor<Self>) -> BoolTensor<Self> => plain;
            fn bool_mask_fill(tensor: BoolTensor<Self>, mask: BoolTensor<Self>, value: Scalar) -> BoolTensor<Self> => plain;
            fn bool_gather(dim: usize, tensor: BoolTensor<Self>, indices: IntTensor<Self>) -> BoolTensor<Self> => plain;
            fn bool_scatter_or(dim: usize, tensor: BoolTensor<Self>, indices: IntTensor<Self>, value: BoolTensor<Self>) -> BoolTensor<Self> => plain;
            fn bool_select(tensor: BoolTensor<Self>, dim: usize, indices: IntTensor<Self>) -> BoolTensor<Self> => plain;
            fn bool_select_or(tensor: BoolTensor<Self>, dim: usize, indices: IntTensor<Self>, value: BoolTensor<Self>) -> BoolTensor<Self> => plain;
            fn bool_equal(lhs: BoolTensor<Self>, rhs: BoolTensor<Self>) -> BoolTensor<Self> => plain;
            fn bool_equal_elem(lhs: BoolTensor<Self>, rhs: Scalar) -> BoolTensor<Self> => plain;
            fn bool_not(tensor: BoolTensor<Self>) -> BoolTensor<Self> => plain;
            fn bool_and(lhs: BoolTensor<Self>, rhs: BoolTensor<Self>) -> BoolTensor<Self> => plain;
            fn bool_or(lhs: BoolTensor<Self>, rhs: BoolTensor<Self>) -> BoolTensor<Self> => plain;
            fn bool_swap_dims(tensor: BoolTensor<Self>, dim1: usize, dim2: usize) -> BoolTensor<Self> => plain;
            fn bool_permute(tensor: BoolTensor<Self>, axes: &[usize]) -> BoolTensor<Self> => plain;
            fn bool_flip(tensor: BoolTensor<Self>, axes: &[usize]) -> BoolTensor<Self> => plain;
            fn bool_expand(tensor: BoolTensor<Self>, shape: Shape) -> BoolTensor<Self> => plain;
            fn bool_unfold(tensor: BoolTensor<Self>, dim: usize, size: usize, step: usize) -> BoolTensor<Self> => plain;
            fn bool_repeat_dim(tensor: BoolTensor<Self>, dim: usize, times: usize) -> BoolTensor<Self> => plain;
            fn bool_cat(tensors: Vec<BoolTensor<Self>>, dim: usize) -> BoolTensor<Self> => plain;
            fn bool_not_equal(lhs: BoolTensor<Self>, rhs: BoolTensor<Self>) -> BoolTensor<Self> => plain;
            fn bool_not_equal_elem(lhs: BoolTensor<Self>, rhs: Scalar) -> BoolTensor<Self> => plain;
            fn bool_xor(lhs: BoolTensor<Self>, rhs: BoolTensor<Self>) -> BoolTensor<Self> => plain;
            fn bool_transpose(tensor: BoolTensor<Self>) -> BoolTensor<Self> => plain;
            fn bool_any(tensor: BoolTensor<Self>) -> BoolTensor<Self> => plain;
            fn bool_any_dim(tensor: BoolTensor<Self>, dim: usize) -> BoolTensor<Self> => plain;
            fn bool_all(tensor: BoolTensor<Self>) -> BoolTensor<Self> => plain;
            fn bool_all_dim(tensor: BoolTensor<Self>, dim: usize) -> BoolTensor<Self> => plain;
        }
    };
}

#[cfg_attr(not(any(test, feature = "instrument")), allow(unused_imports))]
pub(crate) use bool_op_list;

impl<B: Backend> BoolTensorOps<Self> for MixedPrecision<B> {
    fn bool_empty(shape: Shape, device: &Device<Self>, dtype: BoolDType) -> BoolTensor<Self> {
        MpBool::new(
            B::bool_empty(shape, &device.inner, dtype),
            device.precision.clone(),
        )
    }

    fn bool_zeros(shape: Shape, device: &Device<Self>, dtype: BoolDType) -> BoolTensor<Self> {
        MpBool::new(
            B::bool_zeros(shape, &device.inner, dtype),
            device.precision.clone(),
        )
    }

    fn bool_ones(shape: Shape, device: &Device<Self>, dtype: BoolDType) -> BoolTensor<Self> {
        MpBool::new(
            B::bool_ones(shape, &device.inner, dtype),
            device.precision.clone(),
        )
    }

    async fn bool_into_data(tensor: BoolTensor<Self>) -> Result<TensorData, ExecutionError> {
        B::bool_into_data(tensor.inner).await
    }

    fn bool_from_data(data: TensorData, device: &Device<Self>) -> BoolTensor<Self> {
        MpBool::new(
            B::bool_from_data(data, &device.inner),
            device.precision.clone(),
        )
    }

    fn bool_device(tensor: &BoolTensor<Self>) -> Device<Self> {
        MpDevice::from_parts(B::bool_device(&tensor.inner), tensor.precision.clone())
    }

    fn bool_to_device(tensor: BoolTensor<Self>, device: &Device<Self>) -> BoolTensor<Self> {
        MpBool::new(
            B::bool_to_device(tensor.inner, &device.inner),
            device.precision.clone(),
        )
    }

    fn bool_into_float(tensor: BoolTensor<Self>, out_dtype: FloatDType) -> FloatTensor<Self> {
        let device = Self::bool_device(&tensor);
        create(&device, out_dtype, |_, dtype| {
            B::bool_into_float(tensor.inner, dtype)
        })
    }

    fn bool_argwhere(
        tensor: BoolTensor<Self>,
        out_dtype: IntDType,
    ) -> impl Future<Output = IntTensor<Self>> + 'static + Send {
        let precision = tensor.precision.clone();
        let indices = B::bool_argwhere(tensor.inner, out_dtype);
        async move { MpInt::new(indices.await, precision) }
    }

    bool_op_list!(forward_ops);
}
