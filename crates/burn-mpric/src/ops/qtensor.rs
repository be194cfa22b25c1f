//! `QTensorOps` for [`MixedPrecision`]: quantized tensors pass through untouched.

use burn::tensor::FloatDType;
use burn_backend::ops::QTensorOps;
use burn_backend::quantization::{QuantScheme, QuantizationParametersPrimitive};
use burn_backend::tensor::{BoolTensor, Device, FloatTensor, IntTensor, QuantizedTensor};
use burn_backend::{
    Backend, BoolDType, ExecutionError, IntDType, Scalar, Shape, Slice, TensorData, TensorPrimitive,
};

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
            fn quantize_dynamic(tensor: FloatTensor<Self>, scheme: &QuantScheme) -> QuantizedTensor<Self> => plain;
            fn q_detach(tensor: QuantizedTensor<Self>) -> QuantizedTensor<Self> => plain;
            fn q_set_require_grad(tensor: QuantizedTensor<Self>, require_grad: bool) -> QuantizedTensor<Self> => plain;
            fn q_transpose(tensor: QuantizedTensor<Self>) -> QuantizedTensor<Self> => plain;
            fn q_gather(dim: usize, tensor: QuantizedTensor<Self>, indices: IntTensor<Self>) -> QuantizedTensor<Self> => plain;
            fn q_repeat_dim(tensor: QuantizedTensor<Self>, dim: usize, times: usize) -> QuantizedTensor<Self> => plain;
            fn q_add(lhs: QuantizedTensor<Self>, rhs: QuantizedTensor<Self>) -> TensorPrimitive<Self> => plain;
            fn q_add_scalar(lhs: QuantizedTensor<Self>, rhs: Scalar) -> TensorPrimitive<Self> => plain;
            fn q_clamp_min(tensor: QuantizedTensor<Self>, min: Scalar) -> TensorPrimitive<Self> => plain;
            fn q_clamp_max(tensor: QuantizedTensor<Self>, max: Scalar) -> TensorPrimitive<Self> => plain;
            fn q_clamp(tensor: QuantizedTensor<Self>, min: Scalar, max: Scalar) -> TensorPrimitive<Self> => plain;
            fn q_sub(lhs: QuantizedTensor<Self>, rhs: QuantizedTensor<Self>) -> TensorPrimitive<Self> => plain;
            fn q_sub_scalar(lhs: QuantizedTensor<Self>, rhs: Scalar) -> TensorPrimitive<Self> => plain;
            fn q_mul(lhs: QuantizedTensor<Self>, rhs: QuantizedTensor<Self>) -> TensorPrimitive<Self> => plain;
            fn q_mul_scalar(lhs: QuantizedTensor<Self>, rhs: Scalar) -> TensorPrimitive<Self> => plain;
            fn q_div(lhs: QuantizedTensor<Self>, rhs: QuantizedTensor<Self>) -> TensorPrimitive<Self> => plain;
            fn q_div_scalar(lhs: QuantizedTensor<Self>, rhs: Scalar) -> TensorPrimitive<Self> => plain;
            fn q_matmul(lhs: TensorPrimitive<Self>, rhs: TensorPrimitive<Self>) -> TensorPrimitive<Self> => plain;
            fn q_neg(tensor: QuantizedTensor<Self>) -> TensorPrimitive<Self> => plain;
            fn q_recip(tensor: QuantizedTensor<Self>) -> TensorPrimitive<Self> => plain;
            fn q_sum(tensor: QuantizedTensor<Self>) -> TensorPrimitive<Self> => plain;
            fn q_sum_dim(tensor: QuantizedTensor<Self>, dim: usize) -> TensorPrimitive<Self> => plain;
            fn q_prod(tensor: QuantizedTensor<Self>) -> TensorPrimitive<Self> => plain;
            fn q_prod_dim(tensor: QuantizedTensor<Self>, dim: usize) -> TensorPrimitive<Self> => plain;
            fn q_mean(tensor: QuantizedTensor<Self>) -> TensorPrimitive<Self> => plain;
            fn q_mean_dim(tensor: QuantizedTensor<Self>, dim: usize) -> TensorPrimitive<Self> => plain;
            fn q_cumsum(tensor: QuantizedTensor<Self>, dim: usize) -> TensorPrimitive<Self> => plain;
            fn q_cumprod(tensor: QuantizedTensor<Self>, dim: usize) -> TensorPrimitive<Self> => plain;
            fn q_cummin(tensor: QuantizedTensor<Self>, dim: usize) -> TensorPrimitive<Self> => plain;
            fn q_cummax(tensor: QuantizedTensor<Self>, dim: usize) -> TensorPrimitive<Self> => plain;
            fn q_exp(tensor: QuantizedTensor<Self>) -> TensorPrimitive<Self> => plain;
            fn q_log(tensor: QuantizedTensor<Self>) -> TensorPrimitive<Self> => plain;
            fn q_log1p(tensor: QuantizedTensor<Self>) -> TensorPrimitive<Self> => plain;
            fn q_powf(lhs: QuantizedTensor<Self>, rhs: QuantizedTensor<Self>) -> TensorPrimitive<Self> => plain;
            fn q_powi(lhs: QuantizedTensor<Self>, rhs: IntTensor<Self>) -> TensorPrimitive<Self> => plain;
            fn q_powi_scalar(lhs: QuantizedTensor<Self>, rhs: Scalar) -> TensorPrimitive<Self> => plain;
            fn q_powf_scalar(tensor: QuantizedTensor<Self>, value: Scalar) -> TensorPrimitive<Self> => plain;
            fn q_sqrt(tensor: QuantizedTensor<Self>) -> TensorPrimitive<Self> => plain;
            fn q_abs(tensor: QuantizedTensor<Self>) -> QuantizedTensor<Self> => plain;
            fn q_cos(tensor: QuantizedTensor<Self>) -> TensorPrimitive<Self> => plain;
            fn q_sin(tensor: QuantizedTensor<Self>) -> TensorPrimitive<Self> => plain;
            fn q_tan(tensor: QuantizedTensor<Self>) -> TensorPrimitive<Self> => plain;
            fn q_cosh(tensor: QuantizedTensor<Self>) -> TensorPrimitive<Self> => plain;
            fn q_sinh(tensor: QuantizedTensor<Self>) -> TensorPrimitive<Self> => plain;
            fn q_tanh(tensor: QuantizedTensor<Self>) -> TensorPrimitive<Self> => plain;
            fn q_erf(tensor: QuantizedTensor<Self>) -> TensorPrimitive<Self> => plain;
            fn q_cat(tensors: Vec<QuantizedTensor<Self>>, dim: usize) -> QuantizedTensor<Self> => plain;
            fn q_argmax(tensor: QuantizedTensor<Self>, dim: usize, out_dtype: IntDType) -> IntTensor<Self> => plain;
            fn q_argtopk(tensor: QuantizedTensor<Self>, dim: usize, k: usize, out_dtype: IntDType) -> IntTensor<Self> => plain;
            fn q_topk(tensor: QuantizedTensor<Self>, dim: usize, k: usize) -> QuantizedTensor<Self> => plain;
            fn q_argmin(tensor: QuantizedTensor<Self>, dim: usize, out_dtype: IntDType) -> IntTensor<Self> => plain;
            fn q_max(tensor: QuantizedTensor<Self>) -> QuantizedTensor<Self> => plain;
            fn q_max_dim(tensor: QuantizedTensor<Self>, dim: usize) -> QuantizedTensor<Self> => plain;
            fn q_max_dim_with_indices(tensor: QuantizedTensor<Self>, dim: usize, out_dtype: IntDType) -> (QuantizedTensor<Self>, IntTensor<Self>) => plain;
            fn q_min(tensor: QuantizedTensor<Self>) -> QuantizedTensor<Self> => plain;
            fn q_min_dim(tensor: QuantizedTensor<Self>, dim: usize) -> QuantizedTensor<Self> => plain;
            fn q_min_dim_with_indices(tensor: QuantizedTensor<Self>, dim: usize, out_dtype: IntDType) -> (QuantizedTensor<Self>, IntTensor<Self>) => plain;
            fn q_max_abs(tensor: QuantizedTensor<Self>) -> QuantizedTensor<Self> => plain;
            fn q_max_abs_dim(tensor: QuantizedTensor<Self>, dim: usize) -> QuantizedTensor<Self> => plain;
            fn q_any(tensor: QuantizedTensor<Self>, out_dtype: BoolDType) -> BoolTensor<Self> => plain;
            fn q_any_dim(tensor: QuantizedTensor<Self>, dim: usize, out_dtype: BoolDType) -> BoolTensor<Self> => plain;
            fn q_all(tensor: QuantizedTensor<Self>, out_dtype: BoolDType) -> BoolTensor<Self> => plain;
            fn q_all_dim(tensor: QuantizedTensor<Self>, dim: usize, out_dtype: BoolDType) -> BoolTensor<Self> => plain;
            fn q_sort(tensor: QuantizedTensor<Self>, dim: usize, descending: bool) -> QuantizedTensor<Self> => plain;
            fn q_sort_with_indices(tensor: QuantizedTensor<Self>, dim: usize, descending: bool, out_dtype: IntDType) -> (QuantizedTensor<Self>, IntTensor<Self>) => plain;
            fn q_argsort(tensor: QuantizedTensor<Self>, dim: usize, descending: bool, out_dtype: IntDType) -> IntTensor<Self> => plain;
        }
    };
}

#[cfg_attr(not(any(test, feature = "instrument")), allow(unused_imports))]
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

    fn q_is_require_grad(tensor: &QuantizedTensor<Self>) -> bool {
        B::q_is_require_grad(&tensor.inner)
    }

    q_op_list!(forward_ops);
}
