//! [`StepGrads`]: what one step's forward and backward hand the loss scaler, from this
//! process's replicas (`train.rs`) or summed over every process (`processes.rs`).

use burn::optim::GradientsParams;
use burn::tensor::backend::Backend;
use burn::tensor::{ElementConversion, Int, Tensor};

use crate::optim::Ad;

/// The gradients, loss and correct predictions of one step over all replicas, on the main
/// device.
pub(crate) struct StepGrads<B: Backend> {
    pub(crate) grads: GradientsParams,
    pub(crate) scaled_loss: Tensor<Ad<B>, 1>,
    /// Summed on the main device, not read: the host-read loop reads it with the step, the
    /// device path at its next read.
    pub(crate) correct: Option<Tensor<Ad<B>, 1, Int>>,
}

/// A count read on the host.
pub(crate) fn read_count<B: Backend>(count: Tensor<Ad<B>, 1, Int>) -> i64 {
    count.into_scalar().elem::<i64>()
}
