//! `ActivationOps` for [`MixedPrecision`]: softmax and friends at full precision,
//! elementwise activations in their input dtype.

use burn_backend::ops::ActivationOps;
use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend, Scalar};

use super::forward::forward_ops;
use crate::backend::MixedPrecision;

/// The ops of this trait that both decorators forward, with their op-table entries.
macro_rules! activation_op_list {
    ($m:ident) => {
        $m! {
            fn leaky_relu(tensor: FloatTensor<Self>, negative_slope: Scalar) -> FloatTensor<Self> => category LeakyRelu;
            fn relu(tensor: FloatTensor<Self>) -> FloatTensor<Self> => category Relu;
            fn relu_backward(output: FloatTensor<Self>, grad: FloatTensor<Self>) -> FloatTensor<Self> => category ReluBackward;
            fn gelu(tensor: FloatTensor<Self>) -> FloatTensor<Self> => category Gelu;
            fn gelu_backward(x: FloatTensor<Self>, grad: FloatTensor<Self>) -> FloatTensor<Self> => category GeluBackward;
            fn prelu(tensor: FloatTensor<Self>, alpha: FloatTensor<Self>) -> FloatTensor<Self> => category Prelu;
            fn sigmoid(tensor: FloatTensor<Self>) -> FloatTensor<Self> => category Sigmoid;
            fn sigmoid_backward(output: FloatTensor<Self>, grad: FloatTensor<Self>) -> FloatTensor<Self> => category SigmoidBackward;
            fn hard_sigmoid(tensor: FloatTensor<Self>, alpha: Scalar, beta: Scalar) -> FloatTensor<Self> => category HardSigmoid;
            fn log_sigmoid(tensor: FloatTensor<Self>) -> FloatTensor<Self> => category LogSigmoid;
            fn log_sigmoid_backward(x: FloatTensor<Self>, grad: FloatTensor<Self>) -> FloatTensor<Self> => category LogSigmoidBackward;
            fn softmax(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self> => bounded Softmax;
            fn log_softmax(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self> => category LogSoftmax;
            fn softmin(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self> => bounded Softmin;
        }
    };
}

#[cfg_attr(not(any(test, feature = "instrument")), allow(unused_imports))]
pub(crate) use activation_op_list;

impl<B: Backend> ActivationOps<Self> for MixedPrecision<B> {
    activation_op_list!(forward_ops);
}
