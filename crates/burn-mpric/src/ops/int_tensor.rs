//! `IntTensorOps` for [`MixedPrecision`]: int ops pass through untouched.

use burn::tensor::FloatDType;
use burn_backend::ops::IntTensorOps;
use core::ops::Range;

use burn_backend::tensor::{BoolTensor, Device, FloatTensor, IndexingUpdateOp, IntTensor};
use burn_backend::{
    Backend, BoolDType, Distribution, ExecutionError, IntDType, Scalar, Shape, Slice, TensorData,
};

use super::forward::forward_ops;
use super::tensor::create;
use crate::backend::MixedPrecision;
use crate::device::MpDevice;
use crate::tensor::MpInt;

/// The ops of this trait that both decorators forward, with their op-table entries.
macro_rules! int_op_list {
    ($m:ident) => {
        $m! {
            fn int_reshape(tensor: IntTensor<Self>, shape: Shape) -> IntTensor<Self> => plain;
            fn int_slice(tensor: IntTensor<Self>, slices: &[Slice]) -> IntTensor<Self> => plain;
            fn int_slice_assign(tensor: IntTensor<Self>, slices: &[Slice], value: IntTensor<Self>) -> IntTensor<Self> => plain;
            fn int_mask_where(tensor: IntTensor<Self>, mask: BoolTensor<Self>, value: IntTensor<Self>) -> IntTensor<Self> => plain;
            fn int_mask_fill(tensor: IntTensor<Self>, mask: BoolTensor<Self>, value: Scalar) -> IntTensor<Self> => plain;
            fn int_gather(dim: usize, tensor: IntTensor<Self>, indices: IntTensor<Self>) -> IntTensor<Self> => plain;
            fn int_scatter_add(dim: usize, tensor: IntTensor<Self>, indices: IntTensor<Self>, value: IntTensor<Self>) -> IntTensor<Self> => plain;
            fn int_select(tensor: IntTensor<Self>, dim: usize, indices: IntTensor<Self>) -> IntTensor<Self> => plain;
            fn int_select_add(tensor: IntTensor<Self>, dim: usize, indices: IntTensor<Self>, value: IntTensor<Self>) -> IntTensor<Self> => plain;
            fn int_equal(lhs: IntTensor<Self>, rhs: IntTensor<Self>, out_dtype: BoolDType) -> BoolTensor<Self> => plain;
            fn int_equal_elem(lhs: IntTensor<Self>, rhs: Scalar, out_dtype: BoolDType) -> BoolTensor<Self> => plain;
            fn int_greater(lhs: IntTensor<Self>, rhs: IntTensor<Self>, out_dtype: BoolDType) -> BoolTensor<Self> => plain;
            fn int_greater_elem(lhs: IntTensor<Self>, rhs: Scalar, out_dtype: BoolDType) -> BoolTensor<Self> => plain;
            fn int_greater_equal(lhs: IntTensor<Self>, rhs: IntTensor<Self>, out_dtype: BoolDType) -> BoolTensor<Self> => plain;
            fn int_greater_equal_elem(lhs: IntTensor<Self>, rhs: Scalar, out_dtype: BoolDType) -> BoolTensor<Self> => plain;
            fn int_lower(lhs: IntTensor<Self>, rhs: IntTensor<Self>, out_dtype: BoolDType) -> BoolTensor<Self> => plain;
            fn int_lower_elem(lhs: IntTensor<Self>, rhs: Scalar, out_dtype: BoolDType) -> BoolTensor<Self> => plain;
            fn int_lower_equal(lhs: IntTensor<Self>, rhs: IntTensor<Self>, out_dtype: BoolDType) -> BoolTensor<Self> => plain;
            fn int_lower_equal_elem(lhs: IntTensor<Self>, rhs: Scalar, out_dtype: BoolDType) -> BoolTensor<Self> => plain;
            fn int_add(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self> => plain;
            fn int_add_scalar(lhs: IntTensor<Self>, rhs: Scalar) -> IntTensor<Self> => plain;
            fn int_sub(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self> => plain;
            fn int_sub_scalar(lhs: IntTensor<Self>, rhs: Scalar) -> IntTensor<Self> => plain;
            fn int_mul(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self> => plain;
            fn int_mul_scalar(lhs: IntTensor<Self>, rhs: Scalar) -> IntTensor<Self> => plain;
            fn int_div(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self> => plain;
            fn int_div_scalar(lhs: IntTensor<Self>, rhs: Scalar) -> IntTensor<Self> => plain;
            fn int_remainder(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self> => plain;
            fn int_remainder_scalar(lhs: IntTensor<Self>, rhs: Scalar) -> IntTensor<Self> => plain;
            fn int_matmul(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self> => plain;
            fn int_sum(tensor: IntTensor<Self>) -> IntTensor<Self> => plain;
            fn int_sum_dim(tensor: IntTensor<Self>, dim: usize) -> IntTensor<Self> => plain;
            fn int_prod(tensor: IntTensor<Self>) -> IntTensor<Self> => plain;
            fn int_prod_dim(tensor: IntTensor<Self>, dim: usize) -> IntTensor<Self> => plain;
            fn int_mean_dim(tensor: IntTensor<Self>, dim: usize) -> IntTensor<Self> => plain;
            fn int_cumsum(tensor: IntTensor<Self>, dim: usize) -> IntTensor<Self> => plain;
            fn int_cumprod(tensor: IntTensor<Self>, dim: usize) -> IntTensor<Self> => plain;
            fn int_cummin(tensor: IntTensor<Self>, dim: usize) -> IntTensor<Self> => plain;
            fn int_cummax(tensor: IntTensor<Self>, dim: usize) -> IntTensor<Self> => plain;
            fn int_argmax(tensor: IntTensor<Self>, dim: usize) -> IntTensor<Self> => plain;
            fn int_argtopk(tensor: IntTensor<Self>, dim: usize, k: usize) -> IntTensor<Self> => plain;
            fn int_argmin(tensor: IntTensor<Self>, dim: usize) -> IntTensor<Self> => plain;
            fn int_abs(tensor: IntTensor<Self>) -> IntTensor<Self> => plain;
            fn int_swap_dims(tensor: IntTensor<Self>, dim1: usize, dim2: usize) -> IntTensor<Self> => plain;
            fn int_permute(tensor: IntTensor<Self>, axes: &[usize]) -> IntTensor<Self> => plain;
            fn int_flip(tensor: IntTensor<Self>, axes: &[usize]) -> IntTensor<Self> => plain;
            fn int_expand(tensor: IntTensor<Self>, shape: Shape) -> IntTensor<Self> => plain;
            fn bitwise_and(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self> => plain;
            fn bitwise_and_scalar(lhs: IntTensor<Self>, rhs: Scalar) -> IntTensor<Self> => plain;
            fn bitwise_or(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self> => plain;
            fn bitwise_or_scalar(lhs: IntTensor<Self>, rhs: Scalar) -> IntTensor<Self> => plain;
            fn bitwise_xor(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self> => plain;
            fn bitwise_xor_scalar(lhs: IntTensor<Self>, rhs: Scalar) -> IntTensor<Self> => plain;
            fn bitwise_not(tensor: IntTensor<Self>) -> IntTensor<Self> => plain;
            fn bitwise_left_shift(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self> => plain;
            fn bitwise_left_shift_scalar(lhs: IntTensor<Self>, rhs: Scalar) -> IntTensor<Self> => plain;
            fn bitwise_right_shift(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self> => plain;
            fn bitwise_right_shift_scalar(lhs: IntTensor<Self>, rhs: Scalar) -> IntTensor<Self> => plain;
            fn int_cast(tensor: IntTensor<Self>, dtype: IntDType) -> IntTensor<Self> => plain;
            fn int_unfold(tensor: IntTensor<Self>, dim: usize, size: usize, step: usize) -> IntTensor<Self> => plain;
            fn int_scatter_nd(data: IntTensor<Self>, indices: IntTensor<Self>, values: IntTensor<Self>, reduction: IndexingUpdateOp) -> IntTensor<Self> => plain;
            fn int_gather_nd(data: IntTensor<Self>, indices: IntTensor<Self>) -> IntTensor<Self> => plain;
            fn int_repeat_dim(tensor: IntTensor<Self>, dim: usize, times: usize) -> IntTensor<Self> => plain;
            fn int_cat(tensors: Vec<IntTensor<Self>>, dim: usize) -> IntTensor<Self> => plain;
            fn int_not_equal(lhs: IntTensor<Self>, rhs: IntTensor<Self>, out_dtype: BoolDType) -> BoolTensor<Self> => plain;
            fn int_not_equal_elem(lhs: IntTensor<Self>, rhs: Scalar, out_dtype: BoolDType) -> BoolTensor<Self> => plain;
            fn int_powi(lhs: IntTensor<Self>, rhs: IntTensor<Self>) -> IntTensor<Self> => plain;
            fn int_powi_scalar(lhs: IntTensor<Self>, rhs: Scalar) -> IntTensor<Self> => plain;
            fn int_powi_scalar_impl(lhs: IntTensor<Self>, rhs: Scalar) -> IntTensor<Self> => plain;
            fn int_clamp_min(tensor: IntTensor<Self>, min: Scalar) -> IntTensor<Self> => plain;
            fn int_clamp_max(tensor: IntTensor<Self>, max: Scalar) -> IntTensor<Self> => plain;
            fn int_clamp(tensor: IntTensor<Self>, min: Scalar, max: Scalar) -> IntTensor<Self> => plain;
            fn int_neg(tensor: IntTensor<Self>) -> IntTensor<Self> => plain;
            fn int_zeros(shape: Shape, device: &Device<Self>, dtype: IntDType) -> IntTensor<Self> => plain;
            fn int_ones(shape: Shape, device: &Device<Self>, dtype: IntDType) -> IntTensor<Self> => plain;
            fn int_full(shape: Shape, fill_value: Scalar, device: &Device<Self>, dtype: IntDType) -> IntTensor<Self> => plain;
            fn int_mean(tensor: IntTensor<Self>) -> IntTensor<Self> => plain;
            fn int_topk(tensor: IntTensor<Self>, dim: usize, k: usize) -> IntTensor<Self> => plain;
            fn int_max(tensor: IntTensor<Self>) -> IntTensor<Self> => plain;
            fn int_max_dim(tensor: IntTensor<Self>, dim: usize) -> IntTensor<Self> => plain;
            fn int_max_dim_with_indices(tensor: IntTensor<Self>, dim: usize) -> (IntTensor<Self>, IntTensor<Self>) => plain;
            fn int_max_abs(tensor: IntTensor<Self>) -> IntTensor<Self> => plain;
            fn int_max_abs_dim(tensor: IntTensor<Self>, dim: usize) -> IntTensor<Self> => plain;
            fn int_min(tensor: IntTensor<Self>) -> IntTensor<Self> => plain;
            fn int_min_dim(tensor: IntTensor<Self>, dim: usize) -> IntTensor<Self> => plain;
            fn int_min_dim_with_indices(tensor: IntTensor<Self>, dim: usize) -> (IntTensor<Self>, IntTensor<Self>) => plain;
            fn int_transpose(tensor: IntTensor<Self>) -> IntTensor<Self> => plain;
            fn int_arange_step(range: Range<i64>, step: usize, device: &Device<Self>, dtype: IntDType) -> IntTensor<Self> => plain;
            fn int_arange(range: Range<i64>, device: &Device<Self>, dtype: IntDType) -> IntTensor<Self> => plain;
            fn int_any(tensor: IntTensor<Self>, out_dtype: BoolDType) -> BoolTensor<Self> => plain;
            fn int_any_dim(tensor: IntTensor<Self>, dim: usize, out_dtype: BoolDType) -> BoolTensor<Self> => plain;
            fn int_all(tensor: IntTensor<Self>, out_dtype: BoolDType) -> BoolTensor<Self> => plain;
            fn int_all_dim(tensor: IntTensor<Self>, dim: usize, out_dtype: BoolDType) -> BoolTensor<Self> => plain;
            fn int_sign(tensor: IntTensor<Self>) -> IntTensor<Self> => plain;
            fn int_sort(tensor: IntTensor<Self>, dim: usize, descending: bool) -> IntTensor<Self> => plain;
            fn int_sort_with_indices(tensor: IntTensor<Self>, dim: usize, descending: bool) -> (IntTensor<Self>, IntTensor<Self>) => plain;
            fn int_argsort(tensor: IntTensor<Self>, dim: usize, descending: bool) -> IntTensor<Self> => plain;
        }
    };
}

#[cfg_attr(not(any(test, feature = "instrument")), allow(unused_imports))]
pub(crate) use int_op_list;

impl<B: Backend> IntTensorOps<Self> for MixedPrecision<B> {
    fn int_empty(shape: Shape, device: &Device<Self>, dtype: IntDType) -> IntTensor<Self> {
        MpInt::new(
            B::int_empty(shape, &device.inner, dtype),
            device.precision.clone(),
        )
    }

    async fn int_into_data(tensor: IntTensor<Self>) -> Result<TensorData, ExecutionError> {
        B::int_into_data(tensor.inner).await
    }

    fn int_from_data(data: TensorData, device: &Device<Self>) -> IntTensor<Self> {
        MpInt::new(
            B::int_from_data(data, &device.inner),
            device.precision.clone(),
        )
    }

    fn int_device(tensor: &IntTensor<Self>) -> Device<Self> {
        MpDevice::from_parts(B::int_device(&tensor.inner), tensor.precision.clone())
    }

    fn int_to_device(tensor: IntTensor<Self>, device: &Device<Self>) -> IntTensor<Self> {
        MpInt::new(
            B::int_to_device(tensor.inner, &device.inner),
            device.precision.clone(),
        )
    }

    fn int_random(
        shape: Shape,
        distribution: Distribution,
        device: &Device<Self>,
        dtype: IntDType,
    ) -> IntTensor<Self> {
        MpInt::new(
            B::int_random(shape, distribution, &device.inner, dtype),
            device.precision.clone(),
        )
    }

    fn int_into_float(tensor: IntTensor<Self>, out_dtype: FloatDType) -> FloatTensor<Self> {
        let device = Self::int_device(&tensor);
        create(&device, out_dtype, |_, dtype| {
            B::int_into_float(tensor.inner, dtype)
        })
    }

    int_op_list!(forward_ops);
}
