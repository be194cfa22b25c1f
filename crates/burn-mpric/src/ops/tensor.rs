//! `FloatTensorOps` for [`MixedPrecision`].

use burn::tensor::FloatDType;
use burn_backend::ops::{FloatTensorOps, GridSampleOptions};
use burn_backend::tensor::{BoolTensor, Device, FloatTensor, IndexingUpdateOp, IntTensor};
use burn_backend::{
    Backend, BoolDType, Distribution, Element, ExecutionError, IntDType, Scalar, Shape, Slice,
    TensorData,
};

use super::args::{cast_inner, float_dtype};
use super::forward::forward_ops;
use crate::backend::MixedPrecision;
use crate::device::MpDevice;
use crate::tensor::{Fact, MpFloat};

/// A float tensor as the host reads it (`into_data`, `to_vec`, transactions): at the
/// policy's output dtype when it holds the compute dtype (see the crate docs, "What the
/// output dtype governs").
pub(crate) fn for_host<B: Backend>(tensor: MpFloat<B>) -> B::FloatTensorPrimitive {
    let target = tensor.precision.0.host_dtype(float_dtype(&tensor.inner));
    cast_inner::<B>(tensor.inner, target)
}

fn default_float<B: Backend>() -> FloatDType {
    FloatDType::from(B::FloatElem::dtype())
}

/// A float tensor made on `device`, at the dtype a creation op that was asked for
/// `requested` makes (see [`crate::rules::DeviceRules::creation_dtype`]).
pub(crate) fn create<B: Backend>(
    device: &MpDevice<B>,
    requested: FloatDType,
    make: impl FnOnce(&B::Device, FloatDType) -> B::FloatTensorPrimitive,
) -> MpFloat<B> {
    let dtype = device
        .precision
        .0
        .creation_dtype(requested, default_float::<B>());
    // An input: its cast to the compute dtype is kept with it (see `MpFloat`).
    MpFloat::with_fact(
        make(&device.inner, dtype),
        device.precision.clone(),
        Fact::Input,
    )
}

/// The ops of this trait that both decorators forward, with their op-table entries.
macro_rules! float_op_list {
    ($m:ident) => {
        $m! {
            fn float_into_int(tensor: FloatTensor<Self>, out_dtype: IntDType) -> IntTensor<Self> => plain;
            fn float_cast(tensor: FloatTensor<Self>, dtype: FloatDType) -> FloatTensor<Self> => plain;
            fn float_repeat_dim(tensor: FloatTensor<Self>, dim: usize, times: usize) -> FloatTensor<Self> => plain;

            fn float_add(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self> => category Add;
            fn float_sub(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self> => bounded Sub;
            fn float_mul(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self> => bounded Mul;
            fn float_div(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self> => bounded Div;
            fn float_remainder(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self> => category Remainder;
            fn float_add_scalar(lhs: FloatTensor<Self>, rhs: Scalar) -> FloatTensor<Self> => category AddScalar;
            fn float_sub_scalar(lhs: FloatTensor<Self>, rhs: Scalar) -> FloatTensor<Self> => category SubScalar;
            fn float_mul_scalar(lhs: FloatTensor<Self>, rhs: Scalar) -> FloatTensor<Self> => category MulScalar;
            fn float_div_scalar(lhs: FloatTensor<Self>, rhs: Scalar) -> FloatTensor<Self> => category DivScalar;
            fn float_remainder_scalar(lhs: FloatTensor<Self>, rhs: Scalar) -> FloatTensor<Self> => category RemainderScalar;
            fn float_clamp_min(tensor: FloatTensor<Self>, min: Scalar) -> FloatTensor<Self> => plain;
            fn float_clamp_max(tensor: FloatTensor<Self>, max: Scalar) -> FloatTensor<Self> => plain;
            fn float_clamp(tensor: FloatTensor<Self>, min: Scalar, max: Scalar) -> FloatTensor<Self> => plain;

            fn float_matmul(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self> => category Matmul;
            fn float_cross(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>, dim: usize) -> FloatTensor<Self> => category Cross;
            fn float_recip(tensor: FloatTensor<Self>) -> FloatTensor<Self> => bounded Recip;
            fn float_neg(tensor: FloatTensor<Self>) -> FloatTensor<Self> => bounded Neg;

            fn float_swap_dims(tensor: FloatTensor<Self>, dim1: usize, dim2: usize) -> FloatTensor<Self> => plain;
            fn float_transpose(tensor: FloatTensor<Self>) -> FloatTensor<Self> => plain;
            fn float_permute(tensor: FloatTensor<Self>, axes: &[usize]) -> FloatTensor<Self> => plain;
            fn float_flip(tensor: FloatTensor<Self>, axes: &[usize]) -> FloatTensor<Self> => plain;
            fn float_reshape(tensor: FloatTensor<Self>, shape: Shape) -> FloatTensor<Self> => plain;
            fn float_expand(tensor: FloatTensor<Self>, shape: Shape) -> FloatTensor<Self> => plain;
            fn float_unfold(tensor: FloatTensor<Self>, dim: usize, size: usize, step: usize) -> FloatTensor<Self> => plain;
            fn float_slice(tensor: FloatTensor<Self>, slices: &[Slice]) -> FloatTensor<Self> => plain;
            fn float_gather(dim: usize, tensor: FloatTensor<Self>, indices: IntTensor<Self>) -> FloatTensor<Self> => plain;
            fn float_select(tensor: FloatTensor<Self>, dim: usize, indices: IntTensor<Self>) -> FloatTensor<Self> => plain;
            fn float_mask_fill(tensor: FloatTensor<Self>, mask: BoolTensor<Self>, value: Scalar) -> FloatTensor<Self> => plain;

            fn float_scatter_add(dim: usize, tensor: FloatTensor<Self>, indices: IntTensor<Self>, value: FloatTensor<Self>) -> FloatTensor<Self> => category ScatterAdd;
            fn float_select_add(tensor: FloatTensor<Self>, dim: usize, indices: IntTensor<Self>, value: FloatTensor<Self>) -> FloatTensor<Self> => category SelectAdd;
            fn float_slice_assign(tensor: FloatTensor<Self>, slices: &[Slice], value: FloatTensor<Self>) -> FloatTensor<Self> => category SliceAssign;
            fn float_mask_where(tensor: FloatTensor<Self>, mask: BoolTensor<Self>, value: FloatTensor<Self>) -> FloatTensor<Self> => category MaskWhere;
            fn float_cat(tensors: Vec<FloatTensor<Self>>, dim: usize) -> FloatTensor<Self> => category Cat;

            fn float_equal(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>, out_dtype: BoolDType) -> BoolTensor<Self> => category Equal;
            fn float_not_equal(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>, out_dtype: BoolDType) -> BoolTensor<Self> => category NotEqual;
            fn float_greater(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>, out_dtype: BoolDType) -> BoolTensor<Self> => category Greater;
            fn float_greater_equal(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>, out_dtype: BoolDType) -> BoolTensor<Self> => category GreaterEqual;
            fn float_lower(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>, out_dtype: BoolDType) -> BoolTensor<Self> => category Lower;
            fn float_lower_equal(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>, out_dtype: BoolDType) -> BoolTensor<Self> => category LowerEqual;
            fn float_equal_elem(lhs: FloatTensor<Self>, rhs: Scalar, out_dtype: BoolDType) -> BoolTensor<Self> => plain;
            fn float_not_equal_elem(lhs: FloatTensor<Self>, rhs: Scalar, out_dtype: BoolDType) -> BoolTensor<Self> => plain;
            fn float_greater_elem(lhs: FloatTensor<Self>, rhs: Scalar, out_dtype: BoolDType) -> BoolTensor<Self> => plain;
            fn float_greater_equal_elem(lhs: FloatTensor<Self>, rhs: Scalar, out_dtype: BoolDType) -> BoolTensor<Self> => plain;
            fn float_lower_elem(lhs: FloatTensor<Self>, rhs: Scalar, out_dtype: BoolDType) -> BoolTensor<Self> => plain;
            fn float_lower_equal_elem(lhs: FloatTensor<Self>, rhs: Scalar, out_dtype: BoolDType) -> BoolTensor<Self> => plain;

            fn float_sum(tensor: FloatTensor<Self>) -> FloatTensor<Self> => category Sum;
            fn float_sum_dim(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self> => bounded SumDim;
            fn float_mean(tensor: FloatTensor<Self>) -> FloatTensor<Self> => category Mean;
            fn float_mean_dim(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self> => category MeanDim;
            fn float_prod(tensor: FloatTensor<Self>) -> FloatTensor<Self> => category Prod;
            fn float_prod_dim(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self> => category ProdDim;
            fn float_cumsum(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self> => category Cumsum;
            fn float_cumprod(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self> => category Cumprod;
            fn float_cummin(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self> => plain;
            fn float_cummax(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self> => plain;

            fn float_exp(tensor: FloatTensor<Self>) -> FloatTensor<Self> => bounded Exp;
            fn float_log(tensor: FloatTensor<Self>) -> FloatTensor<Self> => bounded Log;
            fn float_log1p(tensor: FloatTensor<Self>) -> FloatTensor<Self> => category Log1p;
            fn float_powf(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self> => category Powf;
            fn float_powf_scalar(tensor: FloatTensor<Self>, value: Scalar) -> FloatTensor<Self> => category PowfScalar;
            fn float_powf_scalar_impl(tensor: FloatTensor<Self>, value: Scalar) -> FloatTensor<Self> => category PowfScalar;
            fn float_powi(lhs: FloatTensor<Self>, rhs: IntTensor<Self>) -> FloatTensor<Self> => category Powi;
            fn float_powi_scalar(lhs: FloatTensor<Self>, rhs: Scalar) -> FloatTensor<Self> => bounded PowiScalar;
            fn float_powi_scalar_impl(lhs: FloatTensor<Self>, rhs: Scalar) -> FloatTensor<Self> => category PowiScalar;
            fn float_sqrt(tensor: FloatTensor<Self>) -> FloatTensor<Self> => category Sqrt;
            fn float_tan(tensor: FloatTensor<Self>) -> FloatTensor<Self> => category Tan;
            fn float_sinh(tensor: FloatTensor<Self>) -> FloatTensor<Self> => category Sinh;
            fn float_cosh(tensor: FloatTensor<Self>) -> FloatTensor<Self> => category Cosh;
            fn float_asin(tensor: FloatTensor<Self>) -> FloatTensor<Self> => category Asin;
            fn float_acos(tensor: FloatTensor<Self>) -> FloatTensor<Self> => category Acos;
            fn float_erf(tensor: FloatTensor<Self>) -> FloatTensor<Self> => category Erf;
            fn float_abs(tensor: FloatTensor<Self>) -> FloatTensor<Self> => category Abs;
            fn float_cos(tensor: FloatTensor<Self>) -> FloatTensor<Self> => category Cos;
            fn float_sin(tensor: FloatTensor<Self>) -> FloatTensor<Self> => category Sin;
            fn float_tanh(tensor: FloatTensor<Self>) -> FloatTensor<Self> => category Tanh;
            fn float_acosh(tensor: FloatTensor<Self>) -> FloatTensor<Self> => category Acosh;
            fn float_asinh(tensor: FloatTensor<Self>) -> FloatTensor<Self> => category Asinh;
            fn float_atan(tensor: FloatTensor<Self>) -> FloatTensor<Self> => category Atan;
            fn float_atanh(tensor: FloatTensor<Self>) -> FloatTensor<Self> => category Atanh;
            fn float_atan2(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self> => category Atan2;
            fn float_round(tensor: FloatTensor<Self>) -> FloatTensor<Self> => plain;
            fn float_floor(tensor: FloatTensor<Self>) -> FloatTensor<Self> => plain;
            fn float_ceil(tensor: FloatTensor<Self>) -> FloatTensor<Self> => plain;
            fn float_trunc(tensor: FloatTensor<Self>) -> FloatTensor<Self> => plain;
            fn float_sign(tensor: FloatTensor<Self>) -> FloatTensor<Self> => plain;

            fn float_argmax(tensor: FloatTensor<Self>, dim: usize, out_dtype: IntDType) -> IntTensor<Self> => plain;
            fn float_argmin(tensor: FloatTensor<Self>, dim: usize, out_dtype: IntDType) -> IntTensor<Self> => plain;
            fn float_argtopk(tensor: FloatTensor<Self>, dim: usize, k: usize, out_dtype: IntDType) -> IntTensor<Self> => plain;
            fn float_max(tensor: FloatTensor<Self>) -> FloatTensor<Self> => plain;
            fn float_max_dim(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self> => bounded;
            fn float_max_dim_with_indices(tensor: FloatTensor<Self>, dim: usize, indices_dtype: IntDType) -> (FloatTensor<Self>, IntTensor<Self>) => bounded;
            fn float_min(tensor: FloatTensor<Self>) -> FloatTensor<Self> => plain;
            fn float_min_dim(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self> => plain;
            fn float_min_dim_with_indices(tensor: FloatTensor<Self>, dim: usize, indices_dtype: IntDType) -> (FloatTensor<Self>, IntTensor<Self>) => plain;
            fn float_max_abs(tensor: FloatTensor<Self>) -> FloatTensor<Self> => plain;
            fn float_max_abs_dim(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self> => plain;
            fn float_any(tensor: FloatTensor<Self>, out_dtype: BoolDType) -> BoolTensor<Self> => plain;
            fn float_any_dim(tensor: FloatTensor<Self>, dim: usize, out_dtype: BoolDType) -> BoolTensor<Self> => plain;
            fn float_all(tensor: FloatTensor<Self>, out_dtype: BoolDType) -> BoolTensor<Self> => plain;
            fn float_all_dim(tensor: FloatTensor<Self>, dim: usize, out_dtype: BoolDType) -> BoolTensor<Self> => plain;
            fn float_is_nan(tensor: FloatTensor<Self>, out_dtype: BoolDType) -> BoolTensor<Self> => plain;
            fn float_is_inf(tensor: FloatTensor<Self>, out_dtype: BoolDType) -> BoolTensor<Self> => plain;
            fn float_topk(tensor: FloatTensor<Self>, dim: usize, k: usize) -> FloatTensor<Self> => plain;
            fn float_sort(tensor: FloatTensor<Self>, dim: usize, descending: bool) -> FloatTensor<Self> => plain;
            fn float_sort_with_indices(tensor: FloatTensor<Self>, dim: usize, descending: bool, indices_dtype: IntDType) -> (FloatTensor<Self>, IntTensor<Self>) => plain;
            fn float_argsort(tensor: FloatTensor<Self>, dim: usize, descending: bool, out_dtype: IntDType) -> IntTensor<Self> => plain;
            fn float_grid_sample_2d(tensor: FloatTensor<Self>, grid: FloatTensor<Self>, options: GridSampleOptions) -> FloatTensor<Self> => category GridSample2d;
            fn float_scatter_nd(data: FloatTensor<Self>, indices: IntTensor<Self>, values: FloatTensor<Self>, reduction: IndexingUpdateOp) -> FloatTensor<Self> => category ScatterNd;
            fn float_gather_nd(data: FloatTensor<Self>, indices: IntTensor<Self>) -> FloatTensor<Self> => plain;
            fn float_detach(tensor: FloatTensor<Self>) -> FloatTensor<Self> => plain;
            fn float_set_require_grad(tensor: FloatTensor<Self>, require_grad: bool) -> FloatTensor<Self> => plain;
        }
    };
}

#[cfg_attr(not(any(test, feature = "instrument")), allow(unused_imports))]
pub(crate) use float_op_list;

impl<B: Backend> FloatTensorOps<Self> for MixedPrecision<B> {
    fn float_from_data(data: TensorData, device: &Device<Self>) -> FloatTensor<Self> {
        let requested = FloatDType::from(data.dtype);
        create(device, requested, |d, dtype| {
            B::float_from_data(data.convert_dtype(dtype.into()), d)
        })
    }

    fn float_random(
        shape: Shape,
        distribution: Distribution,
        device: &Device<Self>,
        dtype: FloatDType,
    ) -> FloatTensor<Self> {
        create(device, dtype, |d, dtype| {
            B::float_random(shape, distribution, d, dtype)
        })
    }

    fn float_zeros(shape: Shape, device: &Device<Self>, dtype: FloatDType) -> FloatTensor<Self> {
        create(device, dtype, |d, dtype| B::float_zeros(shape, d, dtype))
    }

    fn float_ones(shape: Shape, device: &Device<Self>, dtype: FloatDType) -> FloatTensor<Self> {
        create(device, dtype, |d, dtype| B::float_ones(shape, d, dtype))
    }

    fn float_full(
        shape: Shape,
        fill_value: Scalar,
        device: &Device<Self>,
        dtype: FloatDType,
    ) -> FloatTensor<Self> {
        create(device, dtype, |d, dtype| {
            B::float_full(shape, fill_value, d, dtype)
        })
    }

    fn float_empty(shape: Shape, device: &Device<Self>, dtype: FloatDType) -> FloatTensor<Self> {
        create(device, dtype, |d, dtype| B::float_empty(shape, d, dtype))
    }

    async fn float_into_data(tensor: FloatTensor<Self>) -> Result<TensorData, ExecutionError> {
        B::float_into_data(for_host(tensor)).await
    }

    fn float_device(tensor: &FloatTensor<Self>) -> Device<Self> {
        MpDevice::from_parts(B::float_device(&tensor.inner), tensor.precision.clone())
    }

    fn float_to_device(tensor: FloatTensor<Self>, device: &Device<Self>) -> FloatTensor<Self> {
        MpFloat::new(
            B::float_to_device(tensor.inner, &device.inner),
            device.precision.clone(),
        )
    }

    fn float_is_require_grad(tensor: &FloatTensor<Self>) -> bool {
        B::float_is_require_grad(&tensor.inner)
    }

    float_op_list!(forward_ops);
}
