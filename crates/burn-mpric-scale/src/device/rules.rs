//! The update rules the device path runs: Adam, AdamW and SGD (with momentum), as Burn 0.21
//! writes them, on flat f32 tensors whose state includes what Burn keeps on the host (Adam's
//! step count as powers of the betas, SGD's first-step flag), so that a skipped step can
//! leave all of it untouched. Each rule's arithmetic is written once, in burn-mpric-core
//! (`LaneRule`: `coefficients`, the step's one-element values with the skip folded in, and
//! `apply`, one parameter's elementwise update), for both editions: the device path's step
//! runs them, and `update` (one parameter at a time, a step known to be applied: the
//! low-precision optimizers) is made of them.

use burn::tensor::backend::Backend;
use burn::tensor::{Bool, Tensor};
use burn_mpric_core::optim::{LaneRule, StateSlots};
use burn_mpric_core::scale::{AnyDeviceRule, DeviceAdamConfig, DeviceAdamWConfig, DeviceSgdConfig};

use super::lane::Burn021;

/// One optimizer's per-parameter update, as the device path runs it: the parameter, its
/// gradient and its state are flat f32 tensors, and the update is computed without reading
/// anything on the host.
///
/// # Example
///
/// ```
/// use burn::backend::Flex;
/// use burn::tensor::Tensor;
/// use burn_mpric_scale::{DeviceRule, DeviceSgdConfig};
///
/// let device = Default::default();
/// let sgd = DeviceSgdConfig::new();
/// let state = sgd.init_state::<Flex>(2, &device);
/// let param = Tensor::<Flex, 1>::from_floats([1.0, 2.0], &device);
/// let grad = Tensor::<Flex, 1>::from_floats([10.0, -10.0], &device);
/// let (param, _) = sgd.update(0.1, param, grad, state);
/// assert_eq!(param.into_data().to_vec::<f32>().unwrap(), vec![0.0, 3.0]);
/// ```
pub trait DeviceRule: StateSlots + Clone + Send + Sync + 'static {
    /// The state of a parameter of `len` elements before its first step.
    fn init_state<B: Backend>(&self, len: usize, device: &B::Device) -> Vec<Tensor<B, 1>>;

    /// One update at f32 of a step known to be applied: the new parameter and the new state
    /// (the per-element state, then the one-element state). The same arithmetic as the
    /// device path's step: [`coefficients`](Self::coefficients) for this parameter alone,
    /// then [`apply`](Self::apply).
    fn update<B: Backend>(
        &self,
        lr: f64,
        param: Tensor<B, 1>,
        grad: Tensor<B, 1>,
        mut state: Vec<Tensor<B, 1>>,
    ) -> (Tensor<B, 1>, Vec<Tensor<B, 1>>) {
        let scalars = state.split_off(self.elementwise_slots());
        let (coefficients, next) = self.coefficients(lr, &scalars, None, &param.device());
        let (param, mut state) = self.apply(&coefficients, param, grad, state);
        state.extend(next);
        (param, state)
    }

    /// One step's one-element coefficients for every parameter whose one-element state
    /// (the state after the [`elementwise_slots`](StateSlots::elementwise_slots)) is
    /// `scalars`, with the skip folded in: where `applied` is false they make
    /// [`apply`](Self::apply) return its inputs unchanged, bit for bit. Also returns the next
    /// one-element state (the old one where `applied` is false). `None`: a step known to be
    /// applied, with no flag to select by (one parameter at a time, as
    /// [`update`](Self::update) steps). Computed once for all the
    /// parameters stepped together, so that a parameter's own update is elementwise ops
    /// only, with no select.
    ///
    /// # Example
    ///
    /// ```
    /// use burn::backend::Flex;
    /// use burn::tensor::{Bool, Tensor};
    /// use burn_mpric_scale::{DeviceRule, DeviceSgdConfig};
    ///
    /// let device = Default::default();
    /// let sgd = DeviceSgdConfig::new();
    /// let flag = |value| Tensor::<Flex, 1, Bool>::from_bool([value].into(), &device);
    /// let param = Tensor::<Flex, 1>::from_floats([1.0, 2.0], &device);
    /// let grad = Tensor::<Flex, 1>::from_floats([10.0, -10.0], &device);
    /// for (applied, expected) in [(true, [0.0, 3.0]), (false, [1.0, 2.0])] {
    ///     let (coefficients, _) = sgd.coefficients::<Flex>(0.1, &[], Some(&flag(applied)), &device);
    ///     let (stepped, _) = sgd.apply(&coefficients, param.clone(), grad.clone(), vec![]);
    ///     assert_eq!(stepped.into_data().to_vec::<f32>().unwrap(), expected);
    /// }
    /// ```
    fn coefficients<B: Backend>(
        &self,
        lr: f64,
        scalars: &[Tensor<B, 1>],
        applied: Option<&Tensor<B, 1, Bool>>,
        device: &B::Device,
    ) -> (Vec<Tensor<B, 1>>, Vec<Tensor<B, 1>>);

    /// One parameter's update at f32 by a step's [`coefficients`](Self::coefficients):
    /// the new parameter and the new per-element state. `grad` must be finite (zeros on a
    /// skipped step): a skipped step multiplies it by 0.
    fn apply<B: Backend>(
        &self,
        coefficients: &[Tensor<B, 1>],
        param: Tensor<B, 1>,
        grad: Tensor<B, 1>,
        slots: Vec<Tensor<B, 1>>,
    ) -> (Tensor<B, 1>, Vec<Tensor<B, 1>>);
}

/// Each rule's arithmetic is burn-mpric-core's ([`LaneRule`]), on Burn 0.21's tensors.
macro_rules! core_rules {
    ($($rule:ty),*) => {$(
        impl DeviceRule for $rule {
            fn init_state<B: Backend>(&self, len: usize, device: &B::Device) -> Vec<Tensor<B, 1>> {
                self.lane_state::<Burn021, _>(len, device)
            }

            fn coefficients<B: Backend>(
                &self,
                lr: f64,
                scalars: &[Tensor<B, 1>],
                applied: Option<&Tensor<B, 1, Bool>>,
                device: &B::Device,
            ) -> (Vec<Tensor<B, 1>>, Vec<Tensor<B, 1>>) {
                self.lane_coefficients::<Burn021, _>(lr, scalars, applied, device)
            }

            fn apply<B: Backend>(
                &self,
                coefficients: &[Tensor<B, 1>],
                param: Tensor<B, 1>,
                grad: Tensor<B, 1>,
                slots: Vec<Tensor<B, 1>>,
            ) -> (Tensor<B, 1>, Vec<Tensor<B, 1>>) {
                self.lane_apply::<Burn021, _>(coefficients, param, grad, slots)
            }
        }
    )*};
}

core_rules!(
    DeviceAdamConfig,
    DeviceAdamWConfig,
    DeviceSgdConfig,
    AnyDeviceRule
);
