//! The Learner on the device path: [`DevicePathOptimizer`], the optimizer burn-train holds in
//! the place of the handle's device optimizer.

use burn::optim::Optimizer;
use burn::tensor::{Device, Tensor};

/// What burn-train 0.22's `Learner` holds as its optimizer when the model's
/// [`ScalerHandle`](super::ScalerHandle) is on the device path
/// ([`ScalerHandle::device_optimizer`](super::ScalerHandle::device_optimizer) returns it as a
/// `ModuleOptimizer`). The `Learner` takes any optimizer and hands it to
/// `TrainStep::optimize`; on the device path the handle's own optimizer steps instead, so this
/// one is never stepped: if it is (its model's handle is not on the device path), it panics
/// rather than leave the parameters unchanged in silence.
///
/// # Example
///
/// ```
/// use burn::optim::ModuleOptimizer;
/// use burn_mpric_022::DevicePathOptimizer;
///
/// let optim: ModuleOptimizer = DevicePathOptimizer.into();
/// assert!(!optim.has_gradient_clipping());
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct DevicePathOptimizer;

impl Optimizer for DevicePathOptimizer {
    type State<const D: usize> = ();

    fn step<const D: usize>(
        &self,
        _lr: f64,
        _tensor: Tensor<D>,
        _grad: Tensor<D>,
        _state: Option<()>,
    ) -> (Tensor<D>, Option<()>) {
        panic!(
            "DevicePathOptimizer stands in for a ScalerHandle's device optimizer and was \
             stepped by a model whose handle is not on the device path: make it with \
             ScalerHandle::device_optimizer and wrap the model in Scaled with that handle"
        )
    }

    fn to_device<const D: usize>(state: (), _device: &Device) {
        state
    }
}
