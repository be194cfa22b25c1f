//! `ModuleOps` for [`MixedPrecision`]: convolutions, linear and attention (forward and
//! backward entry points) run at the compute dtype; the rest as the op table says.

use burn_backend::Backend;
use burn_backend::ops::{
    AttentionModuleOptions, ConvOptions, ConvTransposeOptions, DeformConv2dBackward,
    DeformConvOptions, InterpolateOptions, MaxPool1dBackward, MaxPool1dWithIndices,
    MaxPool2dBackward, MaxPool2dWithIndices, ModuleOps, UnfoldOptions,
};
use burn_backend::tensor::{BoolTensor, FloatTensor, IntTensor};

use super::forward::forward_ops;
use crate::backend::MixedPrecision;

/// The ops of this trait that both decorators forward, with their op-table entries.
macro_rules! module_op_list {
    ($m:ident) => {
        $m! {
            fn embedding(weights: FloatTensor<Self>, indices: IntTensor<Self>) -> FloatTensor<Self> => category Embedding;
            fn embedding_backward(weights: FloatTensor<Self>, output_grad: FloatTensor<Self>, indices: IntTensor<Self>) -> FloatTensor<Self> => category EmbeddingBackward;

            fn linear(x: FloatTensor<Self>, weight: FloatTensor<Self>, bias: Option<FloatTensor<Self>>) -> FloatTensor<Self> => category Linear;
            fn linear_x_backward(weight: FloatTensor<Self>, output_grad: FloatTensor<Self>) -> FloatTensor<Self> => category LinearXBackward;
            fn linear_weight_backward(x: FloatTensor<Self>, output_grad: FloatTensor<Self>) -> FloatTensor<Self> => category LinearWeightBackward;
            fn linear_bias_backward(output_grad: FloatTensor<Self>) -> FloatTensor<Self> => category LinearBiasBackward;

            fn conv1d(x: FloatTensor<Self>, weight: FloatTensor<Self>, bias: Option<FloatTensor<Self>>, options: ConvOptions<1>) -> FloatTensor<Self> => category Conv1d;
            fn conv1d_x_backward(x: FloatTensor<Self>, weight: FloatTensor<Self>, output_grad: FloatTensor<Self>, options: ConvOptions<1>) -> FloatTensor<Self> => category Conv1dXBackward;
            fn conv1d_weight_backward(x: FloatTensor<Self>, weight: FloatTensor<Self>, output_grad: FloatTensor<Self>, options: ConvOptions<1>) -> FloatTensor<Self> => category Conv1dWeightBackward;
            fn conv1d_bias_backward(x: FloatTensor<Self>, bias: FloatTensor<Self>, output_grad: FloatTensor<Self>) -> FloatTensor<Self> => category ConvBiasBackward;
            fn conv2d(x: FloatTensor<Self>, weight: FloatTensor<Self>, bias: Option<FloatTensor<Self>>, options: ConvOptions<2>) -> FloatTensor<Self> => category Conv2d;
            fn conv2d_x_backward(x: FloatTensor<Self>, weight: FloatTensor<Self>, output_grad: FloatTensor<Self>, options: ConvOptions<2>) -> FloatTensor<Self> => category Conv2dXBackward;
            fn conv2d_weight_backward(x: FloatTensor<Self>, weight: FloatTensor<Self>, output_grad: FloatTensor<Self>, options: ConvOptions<2>) -> FloatTensor<Self> => category Conv2dWeightBackward;
            fn conv2d_bias_backward(x: FloatTensor<Self>, bias: FloatTensor<Self>, output_grad: FloatTensor<Self>) -> FloatTensor<Self> => category ConvBiasBackward;
            fn conv3d(x: FloatTensor<Self>, weight: FloatTensor<Self>, bias: Option<FloatTensor<Self>>, options: ConvOptions<3>) -> FloatTensor<Self> => category Conv3d;
            fn conv3d_x_backward(x: FloatTensor<Self>, weight: FloatTensor<Self>, output_grad: FloatTensor<Self>, options: ConvOptions<3>) -> FloatTensor<Self> => category Conv3dXBackward;
            fn conv3d_weight_backward(x: FloatTensor<Self>, weight: FloatTensor<Self>, output_grad: FloatTensor<Self>, options: ConvOptions<3>) -> FloatTensor<Self> => category Conv3dWeightBackward;
            fn conv3d_bias_backward(x: FloatTensor<Self>, bias: FloatTensor<Self>, output_grad: FloatTensor<Self>) -> FloatTensor<Self> => category ConvBiasBackward;

            fn conv_transpose1d(x: FloatTensor<Self>, weight: FloatTensor<Self>, bias: Option<FloatTensor<Self>>, options: ConvTransposeOptions<1>) -> FloatTensor<Self> => category ConvTranspose1d;
            fn conv_transpose1d_x_backward(weight: FloatTensor<Self>, output_grad: FloatTensor<Self>, options: ConvTransposeOptions<1>) -> FloatTensor<Self> => category ConvTranspose1dXBackward;
            fn conv_transpose1d_weight_backward(x: FloatTensor<Self>, weight: FloatTensor<Self>, output_grad: FloatTensor<Self>, options: ConvTransposeOptions<1>) -> FloatTensor<Self> => category ConvTranspose1dWeightBackward;
            fn conv_transpose1d_bias_backward(x: FloatTensor<Self>, bias: FloatTensor<Self>, output_grad: FloatTensor<Self>) -> FloatTensor<Self> => category ConvBiasBackward;
            fn conv_transpose2d(x: FloatTensor<Self>, weight: FloatTensor<Self>, bias: Option<FloatTensor<Self>>, options: ConvTransposeOptions<2>) -> FloatTensor<Self> => category ConvTranspose2d;
            fn conv_transpose2d_x_backward(weight: FloatTensor<Self>, output_grad: FloatTensor<Self>, options: ConvTransposeOptions<2>) -> FloatTensor<Self> => category ConvTranspose2dXBackward;
            fn conv_transpose2d_weight_backward(x: FloatTensor<Self>, weight: FloatTensor<Self>, output_grad: FloatTensor<Self>, options: ConvTransposeOptions<2>) -> FloatTensor<Self> => category ConvTranspose2dWeightBackward;
            fn conv_transpose2d_bias_backward(x: FloatTensor<Self>, bias: FloatTensor<Self>, output_grad: FloatTensor<Self>) -> FloatTensor<Self> => category ConvBiasBackward;
            fn conv_transpose3d(x: FloatTensor<Self>, weight: FloatTensor<Self>, bias: Option<FloatTensor<Self>>, options: ConvTransposeOptions<3>) -> FloatTensor<Self> => category ConvTranspose3d;
            fn conv_transpose3d_x_backward(weight: FloatTensor<Self>, output_grad: FloatTensor<Self>, options: ConvTransposeOptions<3>) -> FloatTensor<Self> => category ConvTranspose3dXBackward;
            fn conv_transpose3d_weight_backward(x: FloatTensor<Self>, weight: FloatTensor<Self>, output_grad: FloatTensor<Self>, options: ConvTransposeOptions<3>) -> FloatTensor<Self> => category ConvTranspose3dWeightBackward;
            fn conv_transpose3d_bias_backward(x: FloatTensor<Self>, bias: FloatTensor<Self>, output_grad: FloatTensor<Self>) -> FloatTensor<Self> => category ConvBiasBackward;

            fn deform_conv2d(x: FloatTensor<Self>, offset: FloatTensor<Self>, weight: FloatTensor<Self>, mask: Option<FloatTensor<Self>>, bias: Option<FloatTensor<Self>>, options: DeformConvOptions<2>) -> FloatTensor<Self> => category DeformConv2d;
            fn deform_conv2d_backward(x: FloatTensor<Self>, offset: FloatTensor<Self>, weight: FloatTensor<Self>, mask: Option<FloatTensor<Self>>, bias: Option<FloatTensor<Self>>, output_grad: FloatTensor<Self>, options: DeformConvOptions<2>) -> DeformConv2dBackward<Self> => category DeformConv2dBackward;

            fn avg_pool2d(x: FloatTensor<Self>, kernel_size: [usize; 2], stride: [usize; 2], padding: [usize; 2], count_include_pad: bool, ceil_mode: bool) -> FloatTensor<Self> => category AvgPool2d;
            fn avg_pool2d_backward(x: FloatTensor<Self>, grad: FloatTensor<Self>, kernel_size: [usize; 2], stride: [usize; 2], padding: [usize; 2], count_include_pad: bool, ceil_mode: bool) -> FloatTensor<Self> => category AvgPool2dBackward;
            fn adaptive_avg_pool2d(x: FloatTensor<Self>, output_size: [usize; 2]) -> FloatTensor<Self> => category AdaptiveAvgPool2d;
            fn adaptive_avg_pool2d_backward(x: FloatTensor<Self>, grad: FloatTensor<Self>) -> FloatTensor<Self> => category AdaptiveAvgPool2dBackward;
            fn max_pool2d(x: FloatTensor<Self>, kernel_size: [usize; 2], stride: [usize; 2], padding: [usize; 2], dilation: [usize; 2], ceil_mode: bool) -> FloatTensor<Self> => category MaxPool2d;
            fn max_pool2d_with_indices(x: FloatTensor<Self>, kernel_size: [usize; 2], stride: [usize; 2], padding: [usize; 2], dilation: [usize; 2], ceil_mode: bool) -> MaxPool2dWithIndices<Self> => category MaxPool2d;
            fn max_pool2d_with_indices_backward(x: FloatTensor<Self>, kernel_size: [usize; 2], stride: [usize; 2], padding: [usize; 2], dilation: [usize; 2], ceil_mode: bool, output_grad: FloatTensor<Self>, indices: IntTensor<Self>) -> MaxPool2dBackward<Self> => category MaxPool2dBackward;

            fn interpolate(x: FloatTensor<Self>, output_size: [usize; 2], options: InterpolateOptions) -> FloatTensor<Self> => category Interpolate;
            fn interpolate_backward(x: FloatTensor<Self>, grad: FloatTensor<Self>, output_size: [usize; 2], options: InterpolateOptions) -> FloatTensor<Self> => category InterpolateBackward;
            fn attention(query: FloatTensor<Self>, key: FloatTensor<Self>, value: FloatTensor<Self>, mask: Option<BoolTensor<Self>>, attn_bias: Option<FloatTensor<Self>>, options: AttentionModuleOptions) -> FloatTensor<Self> => category Attention;
            fn layer_norm(tensor: FloatTensor<Self>, gamma: FloatTensor<Self>, beta: Option<FloatTensor<Self>>, epsilon: f64) -> FloatTensor<Self> => category LayerNorm;
            fn rfft(signal: FloatTensor<Self>, dim: usize, n: Option<usize>) -> (FloatTensor<Self>, FloatTensor<Self>) => category Rfft;
            fn irfft(spectrum_re: FloatTensor<Self>, spectrum_im: FloatTensor<Self>, dim: usize, n: Option<usize>) -> FloatTensor<Self> => category Irfft;
            fn unfold4d(x: FloatTensor<Self>, kernel_size: [usize; 2], options: UnfoldOptions) -> FloatTensor<Self> => category Unfold4d;
            fn avg_pool1d(x: FloatTensor<Self>, kernel_size: usize, stride: usize, padding: usize, count_include_pad: bool, ceil_mode: bool) -> FloatTensor<Self> => category AvgPool1d;
            fn avg_pool1d_backward(x: FloatTensor<Self>, grad: FloatTensor<Self>, kernel_size: usize, stride: usize, padding: usize, count_include_pad: bool, ceil_mode: bool) -> FloatTensor<Self> => category AvgPool1dBackward;
            fn adaptive_avg_pool1d(x: FloatTensor<Self>, output_size: usize) -> FloatTensor<Self> => category AdaptiveAvgPool1d;
            fn adaptive_avg_pool1d_backward(x: FloatTensor<Self>, grad: FloatTensor<Self>) -> FloatTensor<Self> => category AdaptiveAvgPool1dBackward;
            fn max_pool1d(x: FloatTensor<Self>, kernel_size: usize, stride: usize, padding: usize, dilation: usize, ceil_mode: bool) -> FloatTensor<Self> => category MaxPool1d;
            fn max_pool1d_with_indices(x: FloatTensor<Self>, kernel_size: usize, stride: usize, padding: usize, dilation: usize, ceil_mode: bool) -> MaxPool1dWithIndices<Self> => category MaxPool1d;
            fn max_pool1d_with_indices_backward(x: FloatTensor<Self>, kernel_size: usize, stride: usize, padding: usize, dilation: usize, ceil_mode: bool, output_grad: FloatTensor<Self>, indices: IntTensor<Self>) -> MaxPool1dBackward<Self> => category MaxPool1dBackward;
            fn ctc_loss(log_probs: FloatTensor<Self>, targets: IntTensor<Self>, input_lengths: IntTensor<Self>, target_lengths: IntTensor<Self>, blank: usize) -> FloatTensor<Self> => category CtcLoss;
            fn ctc_loss_backward(log_probs: FloatTensor<Self>, targets: IntTensor<Self>, input_lengths: IntTensor<Self>, target_lengths: IntTensor<Self>, grad_loss: FloatTensor<Self>, blank: usize) -> FloatTensor<Self> => category CtcLossBackward;
        }
    };
}

#[cfg_attr(not(any(test, feature = "instrument")), allow(unused_imports))]
pub(crate) use module_op_list;

impl<B: Backend> ModuleOps<Self> for MixedPrecision<B> {
    fn has_ctc_loss_backward() -> bool {
        B::has_ctc_loss_backward()
    }

    module_op_list!(forward_ops);
}
