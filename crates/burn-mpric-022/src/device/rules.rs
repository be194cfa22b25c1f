//! The update rules the device path runs: Adam, AdamW and SGD (with momentum), as Burn 0.22
//! writes them, on flat f32 tensors whose state includes what Burn keeps on the host (Adam's
//! step count as powers of the betas, SGD's first-step flag), so that a skipped step can
//! leave all of it untouched by a select.

use burn::tensor::{Device, FloatDType, Tensor};
use burn_mpric_core::optim::StateSlots;
use burn_mpric_core::scale::{DeviceAdamConfig, DeviceAdamWConfig, DeviceSgdConfig};

use super::scale::f32_value;

/// One optimizer's per-parameter update, as the device path runs it: the parameter, its
/// gradient and its state are flat f32 tensors, and the update is computed without reading
/// anything on the host.
///
/// # Example
///
/// ```
/// use burn::tensor::{Device, Tensor};
/// use burn_mpric_022::DeviceRule;
/// use burn_mpric_core::scale::DeviceSgdConfig;
///
/// let device = Device::flex();
/// let sgd = DeviceSgdConfig::new();
/// let state = sgd.init_state(2, &device);
/// let param = Tensor::<1>::from_floats([1.0, 2.0], &device);
/// let grad = Tensor::<1>::from_floats([10.0, -10.0], &device);
/// let (param, _) = sgd.update(0.1, param, grad, state);
/// assert_eq!(param.into_data().try_to_vec::<f32>().unwrap(), vec![0.0, 3.0]);
/// ```
pub trait DeviceRule: StateSlots + Clone + Send + Sync + 'static {
    /// The state of a parameter of `len` elements before its first step.
    fn init_state(&self, len: usize, device: &Device) -> Vec<Tensor<1>>;

    /// One update at f32: the new parameter and the new state.
    fn update(
        &self,
        lr: f64,
        param: Tensor<1>,
        grad: Tensor<1>,
        state: Vec<Tensor<1>>,
    ) -> (Tensor<1>, Vec<Tensor<1>>);
}

/// Adam's moments after one more gradient, and the betas' powers after one more step.
/// State: `[moment_1, moment_2, beta_1^t, beta_2^t]`, the powers starting at 1.
fn moments(beta_1: f32, beta_2: f32, grad: Tensor<1>, state: Vec<Tensor<1>>) -> [Tensor<1>; 4] {
    let [m, v, p1, p2]: [Tensor<1>; 4] = state
        .try_into()
        .unwrap_or_else(|s: Vec<_>| panic!("Adam keeps 4 state tensors, got {}", s.len()));
    let m = m
        .mul_scalar(beta_1)
        .add(grad.clone().mul_scalar(1.0 - beta_1));
    let v = v
        .mul_scalar(beta_2)
        .add(grad.square().mul_scalar(1.0 - beta_2));
    [m, v, p1.mul_scalar(beta_1), p2.mul_scalar(beta_2)]
}

fn adam_state(len: usize, device: &Device) -> Vec<Tensor<1>> {
    vec![
        Tensor::<1>::zeros([len], device).cast(FloatDType::F32),
        Tensor::<1>::zeros([len], device).cast(FloatDType::F32),
        f32_value(1.0, device),
        f32_value(1.0, device),
    ]
}

impl DeviceRule for DeviceAdamConfig {
    fn init_state(&self, len: usize, device: &Device) -> Vec<Tensor<1>> {
        adam_state(len, device)
    }

    fn update(
        &self,
        lr: f64,
        param: Tensor<1>,
        mut grad: Tensor<1>,
        state: Vec<Tensor<1>>,
    ) -> (Tensor<1>, Vec<Tensor<1>>) {
        if let Some(penalty) = self.weight_decay {
            grad = param.clone().mul_scalar(penalty).add(grad);
        }
        let [m, v, p1, p2] = moments(self.beta_1, self.beta_2, grad, state);
        // Burn's form: m * sqrt(1 - b2^t) / (1 - b1^t) / (sqrt(v) + eps * sqrt(1 - b2^t)).
        let correction_2 = p2.clone().neg().add_scalar(1.0).sqrt();
        let combined = correction_2.clone().div(p1.clone().neg().add_scalar(1.0));
        let denominator = v.clone().sqrt().add(correction_2.mul_scalar(self.epsilon));
        let delta = m.clone().mul(combined).div(denominator);
        (param.sub(delta.mul_scalar(lr)), vec![m, v, p1, p2])
    }
}

impl DeviceRule for DeviceAdamWConfig {
    fn init_state(&self, len: usize, device: &Device) -> Vec<Tensor<1>> {
        adam_state(len, device)
    }

    fn update(
        &self,
        lr: f64,
        param: Tensor<1>,
        grad: Tensor<1>,
        state: Vec<Tensor<1>>,
    ) -> (Tensor<1>, Vec<Tensor<1>>) {
        let [m, v, p1, p2] = moments(self.beta_1, self.beta_2, grad, state);
        // Burn's form: (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps), decay decoupled.
        let m_hat = m.clone().div(p1.clone().neg().add_scalar(1.0));
        let v_hat = v.clone().div(p2.clone().neg().add_scalar(1.0));
        let delta = m_hat.div(v_hat.sqrt().add_scalar(self.epsilon));
        let decay = lr * f64::from(self.weight_decay);
        let decayed = if decay == 0.0 {
            param
        } else {
            param.mul_scalar(1.0 - decay)
        };
        (decayed.sub(delta.mul_scalar(lr)), vec![m, v, p1, p2])
    }
}

impl DeviceRule for DeviceSgdConfig {
    fn init_state(&self, len: usize, device: &Device) -> Vec<Tensor<1>> {
        match self.momentum {
            // The velocity, and 0 until the first step (which takes the gradient as it is).
            Some(_) => vec![
                Tensor::<1>::zeros([len], device).cast(FloatDType::F32),
                f32_value(0.0, device),
            ],
            None => Vec::new(),
        }
    }

    fn update(
        &self,
        lr: f64,
        param: Tensor<1>,
        mut grad: Tensor<1>,
        state: Vec<Tensor<1>>,
    ) -> (Tensor<1>, Vec<Tensor<1>>) {
        if let Some(penalty) = self.weight_decay {
            grad = param.clone().mul_scalar(penalty).add(grad);
        }
        let Some((momentum, dampening, nesterov)) = self.momentum else {
            return (param.sub(grad.mul_scalar(lr)), state);
        };
        let [velocity, started]: [Tensor<1>; 2] = state
            .try_into()
            .unwrap_or_else(|s: Vec<_>| panic!("SGD keeps 2 state tensors, got {}", s.len()));
        let first = started.clone().equal_elem(0.0).expand([grad.dims()[0]]);
        let velocity = grad
            .clone()
            .mul_scalar(1.0 - dampening)
            .add(velocity.mul_scalar(momentum))
            .mask_where(first, grad.clone());
        let step = if nesterov {
            velocity.clone().mul_scalar(momentum).add(grad)
        } else {
            velocity.clone()
        };
        let started = started.zeros_like().add_scalar(1.0);
        (param.sub(step.mul_scalar(lr)), vec![velocity, started])
    }
}
