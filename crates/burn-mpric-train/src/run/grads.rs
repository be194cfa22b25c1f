//! [`StepGrads`]: what one step's forward and backward hand the loss scaler, from this
//! process's replicas (`train.rs`) or summed over every process (`processes.rs`).

use burn::optim::GradientsParams;
use burn::tensor::Tensor;
use burn::tensor::backend::Backend;

use crate::optim::Ad;

/// The gradients, loss and correct predictions of one step over all replicas, on the main
/// device.
pub(crate) struct StepGrads<B: Backend> {
    pub(crate) grads: GradientsParams,
    pub(crate) scaled_loss: Tensor<Ad<B>, 1>,
    pub(crate) correct: Option<i64>,
}
