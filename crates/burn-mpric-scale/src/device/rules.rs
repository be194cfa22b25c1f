//! The update rules the device path runs: Adam, AdamW and SGD (with momentum), as Burn 0.21
//! writes them, on flat f32 tensors whose state includes what Burn keeps on the host (Adam's
//! step count as powers of the betas, SGD's first-step flag), so that a skipped step can
//! leave all of it untouched. Each rule's arithmetic is written once, in `coefficients` (the
//! step's one-element values, the skip folded in) and `apply` (one parameter's elementwise
//! update): the device path's step runs them, and `update` (one parameter at a time, a step
//! known to be applied: the low-precision optimizers) is made of them.

use burn::tensor::backend::Backend;
use burn::tensor::{Bool, Tensor};
use burn_mpric_core::optim::StateSlots;
use burn_mpric_core::scale::{AnyDeviceRule, DeviceAdamConfig, DeviceAdamWConfig, DeviceSgdConfig};

use super::scale::f32_value;

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

/// `yes` where `applied` is true (or is `None`), `no` where it is false: a one-element tensor
/// made from `zero` (an f32 zero) by arithmetic rather than created, since a backend
/// decorator creates new float tensors at its policy's parameter dtype (bf16 under
/// `pure_bf16`, where 0.999 is 1.0), while arithmetic keeps the f32.
fn pick<B: Backend>(
    zero: &Tensor<B, 1>,
    applied: Option<&Tensor<B, 1, Bool>>,
    yes: f32,
    no: f32,
) -> Tensor<B, 1> {
    match applied {
        Some(applied) => zero.clone().add_scalar(no).mask_fill(applied.clone(), yes),
        None => zero.clone().add_scalar(yes),
    }
}

/// One step of Adam or AdamW before the rule's own coefficients.
struct AdamStep<B: Backend> {
    coefficients: Vec<Tensor<B, 1>>,
    /// `beta_1^t` and `beta_2^t` one step on, whatever the flag.
    powers: [Tensor<B, 1>; 2],
    next: Vec<Tensor<B, 1>>,
}

/// The coefficients shared by Adam and AdamW: `[lr, beta_1, 1 - beta_1, beta_2, 1 - beta_2]`
/// where the step is applied, `[0, 1, 0, 1, 0]` where it is skipped, and the betas' powers
/// one step on (advanced whatever the flag, so that the bias corrections stay finite on a
/// skipped first step) with the next state (advanced only where applied).
fn adam_coefficients<B: Backend>(
    (beta_1, beta_2): (f32, f32),
    lr: f64,
    scalars: &[Tensor<B, 1>],
    applied: Option<&Tensor<B, 1, Bool>>,
) -> AdamStep<B> {
    let [p1, p2] = [0, 1].map(|i| scalars[i].clone());
    let (a1, a2) = (p1.clone().mul_scalar(beta_1), p2.clone().mul_scalar(beta_2));
    let next = match applied {
        Some(applied) => vec![
            p1.mask_where(applied.clone(), a1.clone()),
            p2.mask_where(applied.clone(), a2.clone()),
        ],
        None => vec![a1.clone(), a2.clone()],
    };
    // 1 where applied, 0 where skipped: its multiples are exact, one op each.
    let zero = a1.clone().mul_scalar(0.0);
    let on = pick(&zero, applied, 1.0, 0.0);
    let coefficients = vec![
        on.clone().mul_scalar(lr),
        pick(&zero, applied, beta_1, 1.0),
        on.clone().mul_scalar(1.0 - beta_1),
        pick(&zero, applied, beta_2, 1.0),
        on.mul_scalar(1.0 - beta_2),
    ];
    AdamStep {
        coefficients,
        powers: [a1, a2],
        next,
    }
}

/// Adam's moments after one more (finite) gradient, by the coefficients of
/// [`adam_coefficients`]: the old moments where the step is skipped.
fn masked_moments<B: Backend>(
    c: &[Tensor<B, 1>],
    grad: Tensor<B, 1>,
    slots: Vec<Tensor<B, 1>>,
) -> [Tensor<B, 1>; 2] {
    let [m, v]: [Tensor<B, 1>; 2] = slots
        .try_into()
        .unwrap_or_else(|s: Vec<_>| panic!("Adam keeps 2 moments, got {}", s.len()));
    let m = m.mul(c[1].clone()).add(grad.clone().mul(c[2].clone()));
    let v = v.mul(c[3].clone()).add(grad.square().mul(c[4].clone()));
    [m, v]
}

fn adam_state<B: Backend>(len: usize, device: &B::Device) -> Vec<Tensor<B, 1>> {
    vec![
        Tensor::<B, 1>::zeros([len], device).cast(burn::tensor::FloatDType::F32),
        Tensor::<B, 1>::zeros([len], device).cast(burn::tensor::FloatDType::F32),
        f32_value(1.0, device),
        f32_value(1.0, device),
    ]
}

impl DeviceRule for DeviceAdamConfig {
    fn init_state<B: Backend>(&self, len: usize, device: &B::Device) -> Vec<Tensor<B, 1>> {
        adam_state(len, device)
    }

    fn coefficients<B: Backend>(
        &self,
        lr: f64,
        scalars: &[Tensor<B, 1>],
        applied: Option<&Tensor<B, 1, Bool>>,
        _device: &B::Device,
    ) -> (Vec<Tensor<B, 1>>, Vec<Tensor<B, 1>>) {
        let betas = (self.beta_1, self.beta_2);
        let AdamStep {
            coefficients: mut c,
            powers: [p1, p2],
            next,
        } = adam_coefficients(betas, lr, scalars, applied);
        // As `update`: m * combined / (sqrt(v) + eps * sqrt(1 - b2^t)).
        let correction_2 = p2.neg().add_scalar(1.0).sqrt();
        c.push(correction_2.clone().div(p1.neg().add_scalar(1.0)));
        c.push(correction_2.mul_scalar(self.epsilon));
        (c, next)
    }

    fn apply<B: Backend>(
        &self,
        c: &[Tensor<B, 1>],
        param: Tensor<B, 1>,
        mut grad: Tensor<B, 1>,
        slots: Vec<Tensor<B, 1>>,
    ) -> (Tensor<B, 1>, Vec<Tensor<B, 1>>) {
        if let Some(penalty) = self.weight_decay {
            grad = param.clone().mul_scalar(penalty).add(grad);
        }
        let [m, v] = masked_moments(c, grad, slots);
        let denominator = v.clone().sqrt().add(c[6].clone());
        let delta = m.clone().mul(c[5].clone()).div(denominator);
        (param.sub(delta.mul(c[0].clone())), vec![m, v])
    }
}

impl DeviceRule for DeviceAdamWConfig {
    fn init_state<B: Backend>(&self, len: usize, device: &B::Device) -> Vec<Tensor<B, 1>> {
        adam_state(len, device)
    }

    fn coefficients<B: Backend>(
        &self,
        lr: f64,
        scalars: &[Tensor<B, 1>],
        applied: Option<&Tensor<B, 1, Bool>>,
        _device: &B::Device,
    ) -> (Vec<Tensor<B, 1>>, Vec<Tensor<B, 1>>) {
        let betas = (self.beta_1, self.beta_2);
        let AdamStep {
            coefficients: mut c,
            powers: [p1, p2],
            next,
        } = adam_coefficients(betas, lr, scalars, applied);
        let zero = p1.clone().mul_scalar(0.0);
        c.push(p1.neg().add_scalar(1.0));
        c.push(p2.neg().add_scalar(1.0));
        let decay = lr * f64::from(self.weight_decay);
        if decay != 0.0 {
            c.push(pick(&zero, applied, (1.0 - decay) as f32, 1.0));
        }
        (c, next)
    }

    fn apply<B: Backend>(
        &self,
        c: &[Tensor<B, 1>],
        param: Tensor<B, 1>,
        grad: Tensor<B, 1>,
        slots: Vec<Tensor<B, 1>>,
    ) -> (Tensor<B, 1>, Vec<Tensor<B, 1>>) {
        let [m, v] = masked_moments(c, grad, slots);
        // As `update`: (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps), decay decoupled.
        let m_hat = m.clone().div(c[5].clone());
        let v_hat = v.clone().div(c[6].clone());
        let delta = m_hat.div(v_hat.sqrt().add_scalar(self.epsilon));
        let decayed = match c.get(7) {
            Some(decay) => param.mul(decay.clone()),
            None => param,
        };
        (decayed.sub(delta.mul(c[0].clone())), vec![m, v])
    }
}

impl DeviceRule for DeviceSgdConfig {
    fn init_state<B: Backend>(&self, len: usize, device: &B::Device) -> Vec<Tensor<B, 1>> {
        match self.momentum {
            // The velocity, and 0 until the first step (which takes the gradient as it is).
            Some(_) => vec![
                Tensor::<B, 1>::zeros([len], device).cast(burn::tensor::FloatDType::F32),
                f32_value(0.0, device),
            ],
            None => Vec::new(),
        }
    }

    fn coefficients<B: Backend>(
        &self,
        lr: f64,
        scalars: &[Tensor<B, 1>],
        applied: Option<&Tensor<B, 1, Bool>>,
        device: &B::Device,
    ) -> (Vec<Tensor<B, 1>>, Vec<Tensor<B, 1>>) {
        let Some((momentum, dampening, _)) = self.momentum else {
            let lr = pick(&f32_value(0.0, device), applied, lr as f32, 0.0);
            return (vec![lr], Vec::new());
        };
        // velocity * kept + grad * taken: the gradient as it is on the first step, the
        // velocity as it was on a skipped one.
        let started = scalars[0].clone();
        let first = started.clone().equal_elem(0.0);
        let zero = started.clone().mul_scalar(0.0);
        let lr = pick(&zero, applied, lr as f32, 0.0);
        let kept = pick(&zero, applied, momentum as f32, 1.0).mask_fill(first.clone(), 0.0);
        let taken = pick(&zero, applied, (1.0 - dampening) as f32, 0.0).mask_fill(first, 1.0);
        let next = vec![match applied {
            Some(applied) => started.mask_fill(applied.clone(), 1.0),
            None => zero.add_scalar(1.0),
        }];
        (vec![lr, kept, taken], next)
    }

    fn apply<B: Backend>(
        &self,
        c: &[Tensor<B, 1>],
        param: Tensor<B, 1>,
        mut grad: Tensor<B, 1>,
        slots: Vec<Tensor<B, 1>>,
    ) -> (Tensor<B, 1>, Vec<Tensor<B, 1>>) {
        if let Some(penalty) = self.weight_decay {
            grad = param.clone().mul_scalar(penalty).add(grad);
        }
        let Some((momentum, _, nesterov)) = self.momentum else {
            return (param.sub(grad.mul(c[0].clone())), slots);
        };
        let [velocity]: [Tensor<B, 1>; 1] = slots
            .try_into()
            .unwrap_or_else(|s: Vec<_>| panic!("SGD keeps 1 velocity, got {}", s.len()));
        let velocity = grad
            .clone()
            .mul(c[2].clone())
            .add(velocity.mul(c[1].clone()));
        let step = if nesterov {
            velocity.clone().mul_scalar(momentum).add(grad)
        } else {
            velocity.clone()
        };
        (param.sub(step.mul(c[0].clone())), vec![velocity])
    }
}

/// Calls `$body` with the rule an [`AnyDeviceRule`] holds.
macro_rules! with_rule {
    ($any:expr, |$rule:ident| $body:expr) => {
        match $any {
            AnyDeviceRule::Adam($rule) => $body,
            AnyDeviceRule::AdamW($rule) => $body,
            AnyDeviceRule::Sgd($rule) => $body,
        }
    };
}

impl DeviceRule for AnyDeviceRule {
    fn init_state<B: Backend>(&self, len: usize, device: &B::Device) -> Vec<Tensor<B, 1>> {
        with_rule!(self, |rule| rule.init_state::<B>(len, device))
    }

    fn coefficients<B: Backend>(
        &self,
        lr: f64,
        scalars: &[Tensor<B, 1>],
        applied: Option<&Tensor<B, 1, Bool>>,
        device: &B::Device,
    ) -> (Vec<Tensor<B, 1>>, Vec<Tensor<B, 1>>) {
        with_rule!(self, |rule| rule.coefficients(lr, scalars, applied, device))
    }

    fn apply<B: Backend>(
        &self,
        coefficients: &[Tensor<B, 1>],
        param: Tensor<B, 1>,
        grad: Tensor<B, 1>,
        slots: Vec<Tensor<B, 1>>,
    ) -> (Tensor<B, 1>, Vec<Tensor<B, 1>>) {
        with_rule!(self, |rule| rule.apply(coefficients, param, grad, slots))
    }
}
