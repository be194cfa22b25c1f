//! The device path's update rules (Adam, AdamW, SGD with momentum) written once, over any
//! edition's [`Lane`]s: each rule's arithmetic as `lane_coefficients` (the step's one-element
//! values, the skip folded in) and `lane_apply` (one parameter's elementwise update). Both
//! editions' `DeviceRule`s are these, on their own tensors.

use super::slots::StateSlots;
use crate::lane::Lane;
use crate::scale::{AnyDeviceRule, DeviceAdamConfig, DeviceAdamWConfig, DeviceSgdConfig};

/// An update rule over any edition's [`Lane`]s (`E` names the edition). Each edition's
/// `DeviceRule` is this on its own tensors: the same arithmetic, op for op.
///
/// ```
/// use burn_mpric_core::lane::Host;
/// use burn_mpric_core::optim::LaneRule;
/// use burn_mpric_core::scale::DeviceSgdConfig;
///
/// // One-element values on the host: the arithmetic, checked without a tensor.
/// let sgd = DeviceSgdConfig::new();
/// let (c, _) = sgd.lane_coefficients::<Host, f32>(0.5, &[], Some(&true), &());
/// let (param, _) = sgd.lane_apply::<Host, f32>(&c, 1.0, 2.0, Vec::new());
/// assert_eq!(param, 0.0);
/// // Skipped: the parameter as it was.
/// let (c, _) = sgd.lane_coefficients::<Host, f32>(0.5, &[], Some(&false), &());
/// assert_eq!(sgd.lane_apply::<Host, f32>(&c, 1.0, 0.0, Vec::new()).0, 1.0);
/// ```
pub trait LaneRule: StateSlots {
    /// A fresh state for a parameter of `len` elements: the per-element slots (zeros), then
    /// the one-element ones.
    fn lane_state<E, L: Lane<E>>(&self, len: usize, device: &L::Device) -> Vec<L>;

    /// One step's one-element coefficients for every parameter whose one-element state is
    /// `scalars`, with the skip folded in (where `applied` is false they make
    /// [`lane_apply`](Self::lane_apply) return its inputs unchanged, bit for bit), and the next
    /// one-element state (the old one where `applied` is false). `None`: a step known to be
    /// applied.
    fn lane_coefficients<E, L: Lane<E>>(
        &self,
        lr: f64,
        scalars: &[L],
        applied: Option<&L::Mask>,
        device: &L::Device,
    ) -> (Vec<L>, Vec<L>);

    /// One parameter's update by `coefficients`: the new parameter and per-element slots.
    fn lane_apply<E, L: Lane<E>>(
        &self,
        coefficients: &[L],
        param: L,
        grad: L,
        slots: Vec<L>,
    ) -> (L, Vec<L>);
}

/// `yes` where `applied` is true (or is `None`), `no` where it is false: a one-element tensor
/// made from `zero` (an f32 zero) by arithmetic rather than created, since a backend
/// decorator creates new float tensors at its policy's parameter dtype (bf16 under
/// `pure_bf16`, where 0.999 is 1.0), while arithmetic keeps the f32.
fn pick<E, L: Lane<E>>(zero: &L, applied: Option<&L::Mask>, yes: f32, no: f32) -> L {
    match applied {
        Some(applied) => zero
            .clone()
            .add_scalar(no.into())
            .mask_fill(applied.clone(), yes),
        None => zero.clone().add_scalar(yes.into()),
    }
}

/// One step of Adam or AdamW before the rule's own coefficients.
struct AdamStep<L> {
    coefficients: Vec<L>,
    /// `beta_1^t` and `beta_2^t` one step on, whatever the flag.
    powers: [L; 2],
    next: Vec<L>,
}

/// The coefficients shared by Adam and AdamW: `[lr, beta_1, 1 - beta_1, beta_2, 1 - beta_2]`
/// where the step is applied, `[0, 1, 0, 1, 0]` where it is skipped, and the betas' powers
/// one step on (advanced whatever the flag, so that the bias corrections stay finite on a
/// skipped first step) with the next state (advanced only where applied).
fn adam_coefficients<E, L: Lane<E>>(
    (beta_1, beta_2): (f32, f32),
    lr: f64,
    scalars: &[L],
    applied: Option<&L::Mask>,
) -> AdamStep<L> {
    let [p1, p2] = [0, 1].map(|i| scalars[i].clone());
    let (a1, a2) = (
        p1.clone().mul_scalar(f64::from(beta_1)),
        p2.clone().mul_scalar(f64::from(beta_2)),
    );
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
        on.clone().mul_scalar(f64::from(1.0 - beta_1)),
        pick(&zero, applied, beta_2, 1.0),
        on.mul_scalar(f64::from(1.0 - beta_2)),
    ];
    AdamStep {
        coefficients,
        powers: [a1, a2],
        next,
    }
}

/// Adam's moments after one more (finite) gradient, by the coefficients of
/// [`adam_coefficients`]: the old moments where the step is skipped.
fn masked_moments<E, L: Lane<E>>(c: &[L], grad: L, slots: Vec<L>) -> [L; 2] {
    let [m, v]: [L; 2] = slots
        .try_into()
        .unwrap_or_else(|s: Vec<_>| panic!("Adam keeps 2 moments, got {}", s.len()));
    let m = m.mul(c[1].clone()).add(grad.clone().mul(c[2].clone()));
    let v = v.mul(c[3].clone()).add(grad.square().mul(c[4].clone()));
    [m, v]
}

fn adam_state<E, L: Lane<E>>(len: usize, device: &L::Device) -> Vec<L> {
    vec![
        L::f32_zeros(len, device),
        L::f32_zeros(len, device),
        L::f32_value(1.0, device),
        L::f32_value(1.0, device),
    ]
}

impl LaneRule for DeviceAdamConfig {
    fn lane_state<E, L: Lane<E>>(&self, len: usize, device: &L::Device) -> Vec<L> {
        adam_state::<E, L>(len, device)
    }

    fn lane_coefficients<E, L: Lane<E>>(
        &self,
        lr: f64,
        scalars: &[L],
        applied: Option<&L::Mask>,
        _device: &L::Device,
    ) -> (Vec<L>, Vec<L>) {
        let betas = (self.beta_1, self.beta_2);
        let AdamStep {
            coefficients: mut c,
            powers: [p1, p2],
            next,
        } = adam_coefficients(betas, lr, scalars, applied);
        // As `update`: m * combined / (sqrt(v) + eps * sqrt(1 - b2^t)).
        let correction_2 = p2.neg().add_scalar(1.0).sqrt();
        c.push(correction_2.clone().div(p1.neg().add_scalar(1.0)));
        c.push(correction_2.mul_scalar(f64::from(self.epsilon)));
        (c, next)
    }

    fn lane_apply<E, L: Lane<E>>(
        &self,
        c: &[L],
        param: L,
        mut grad: L,
        slots: Vec<L>,
    ) -> (L, Vec<L>) {
        if let Some(penalty) = self.weight_decay {
            grad = param.clone().mul_scalar(f64::from(penalty)).add(grad);
        }
        let [m, v] = masked_moments(c, grad, slots);
        let denominator = v.clone().sqrt().add(c[6].clone());
        let delta = m.clone().mul(c[5].clone()).div(denominator);
        (param.sub(delta.mul(c[0].clone())), vec![m, v])
    }
}

impl LaneRule for DeviceAdamWConfig {
    fn lane_state<E, L: Lane<E>>(&self, len: usize, device: &L::Device) -> Vec<L> {
        adam_state::<E, L>(len, device)
    }

    fn lane_coefficients<E, L: Lane<E>>(
        &self,
        lr: f64,
        scalars: &[L],
        applied: Option<&L::Mask>,
        _device: &L::Device,
    ) -> (Vec<L>, Vec<L>) {
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

    fn lane_apply<E, L: Lane<E>>(&self, c: &[L], param: L, grad: L, slots: Vec<L>) -> (L, Vec<L>) {
        let [m, v] = masked_moments(c, grad, slots);
        // As `update`: (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps), decay decoupled.
        let m_hat = m.clone().div(c[5].clone());
        let v_hat = v.clone().div(c[6].clone());
        let delta = m_hat.div(v_hat.sqrt().add_scalar(f64::from(self.epsilon)));
        let decayed = match c.get(7) {
            Some(decay) => param.mul(decay.clone()),
            None => param,
        };
        (decayed.sub(delta.mul(c[0].clone())), vec![m, v])
    }
}

impl LaneRule for DeviceSgdConfig {
    fn lane_state<E, L: Lane<E>>(&self, len: usize, device: &L::Device) -> Vec<L> {
        match self.momentum {
            // The velocity, and 0 until the first step (which takes the gradient as it is).
            Some(_) => vec![L::f32_zeros(len, device), L::f32_value(0.0, device)],
            None => Vec::new(),
        }
    }

    fn lane_coefficients<E, L: Lane<E>>(
        &self,
        lr: f64,
        scalars: &[L],
        applied: Option<&L::Mask>,
        device: &L::Device,
    ) -> (Vec<L>, Vec<L>) {
        let Some((momentum, dampening, _)) = self.momentum else {
            let lr = pick(&L::f32_value(0.0, device), applied, lr as f32, 0.0);
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

    fn lane_apply<E, L: Lane<E>>(
        &self,
        c: &[L],
        param: L,
        mut grad: L,
        slots: Vec<L>,
    ) -> (L, Vec<L>) {
        if let Some(penalty) = self.weight_decay {
            grad = param.clone().mul_scalar(f64::from(penalty)).add(grad);
        }
        let Some((momentum, _, nesterov)) = self.momentum else {
            return (param.sub(grad.mul(c[0].clone())), slots);
        };
        let [velocity]: [L; 1] = slots
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

impl LaneRule for AnyDeviceRule {
    fn lane_state<E, L: Lane<E>>(&self, len: usize, device: &L::Device) -> Vec<L> {
        with_rule!(self, |rule| rule.lane_state::<E, L>(len, device))
    }

    fn lane_coefficients<E, L: Lane<E>>(
        &self,
        lr: f64,
        scalars: &[L],
        applied: Option<&L::Mask>,
        device: &L::Device,
    ) -> (Vec<L>, Vec<L>) {
        with_rule!(self, |rule| rule
            .lane_coefficients::<E, L>(lr, scalars, applied, device))
    }

    fn lane_apply<E, L: Lane<E>>(
        &self,
        coefficients: &[L],
        param: L,
        grad: L,
        slots: Vec<L>,
    ) -> (L, Vec<L>) {
        with_rule!(self, |rule| rule.lane_apply::<E, L>(
            coefficients,
            param,
            grad,
            slots
        ))
    }
}
