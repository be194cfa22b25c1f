//! The gradient pass of a loss-scaled step: unscale each gradient, reduce it to what decides
//! its finiteness (and its share of the global norm), and read all of it from the device once.

use std::collections::HashSet;

use burn::module::{Module, ModuleVisitor, Param, ParamId};
use burn::optim::GradientsParams;
use burn::tensor::{FloatDType, Tensor};

use burn_mpric_core::scale::{inverse_scale, unscale_dtype};

use crate::dtype::{from_burn_dtype, plain_float, stored_dtype, to_burn_dtype};
use crate::error::StepError;

/// What each gradient is reduced to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CheckKind {
    /// Its sum at f32: finite exactly when every element is, as an infinity or NaN anywhere
    /// makes the sum one (finite f32 gradients whose sum exceeds `f32::MAX` count as
    /// non-finite too; a run there has diverged anyway).
    Sum,
    /// The sum of its magnitudes at f32: finite exactly when every element is, and zero
    /// exactly when every element is (one more pass, paid by `LossScaler::step_with` only).
    MagnitudeSum,
    /// Its largest magnitude `m` and `sum((g / m)^2)`: finite exactly when every element is,
    /// and its share `m^2 * sum((g / m)^2)` of the squared global norm, which no finite
    /// gradient can overflow (the host adds the shares in f64).
    Norm,
}

/// The checked gradients of one step.
pub(crate) struct Checked {
    pub(crate) grads: GradientsParams,
    pub(crate) finite: bool,
    pub(crate) zero: bool,
    /// The mean of the scaled loss, as read.
    pub(crate) loss: Option<f32>,
    pub(crate) grad_norm: Option<f32>,
}

/// The core's [`inverse_scale`]; `None` for a scale of 1 (no multiply).
fn inverse_of(scale: f32) -> Option<f32> {
    (scale != 1.0).then(|| inverse_scale(scale))
}

fn wide(a: Option<FloatDType>, b: Option<FloatDType>) -> FloatDType {
    to_burn_dtype(unscale_dtype(
        a.map(from_burn_dtype),
        b.map(from_burn_dtype),
    ))
}

/// The factor gradients are unscaled by: `1/S` known on the host, or held on the device
/// (the device path's scale, never read).
enum Inverse {
    Host(f32),
    Device(Box<Tensor<1>>),
}

/// Visits a module's parameters: each gradient is widened, multiplied by `1/S`, cast to its
/// parameter's dtype and registered back, and its reductions are queued for the one read.
pub(crate) struct GradCheck<'a> {
    grads: &'a mut GradientsParams,
    inverse: Option<Inverse>,
    kind: CheckKind,
    seen: HashSet<ParamId>,
    checks: Vec<Tensor<1>>,
    error: Option<StepError>,
}

impl<'a> GradCheck<'a> {
    pub(crate) fn new(grads: &'a mut GradientsParams, scale: f32, kind: CheckKind) -> Self {
        Self::with_inverse(grads, inverse_of(scale).map(Inverse::Host), kind)
    }

    /// The device path's pass: gradients unscaled by `inverse`, the device's `1/S` (a
    /// one-element f32 tensor, never read).
    pub(crate) fn on_device(
        grads: &'a mut GradientsParams,
        inverse: Tensor<1>,
        kind: CheckKind,
    ) -> Self {
        Self::with_inverse(grads, Some(Inverse::Device(Box::new(inverse))), kind)
    }

    fn with_inverse(
        grads: &'a mut GradientsParams,
        inverse: Option<Inverse>,
        kind: CheckKind,
    ) -> Self {
        Self {
            grads,
            inverse,
            kind,
            seen: HashSet::new(),
            checks: Vec::new(),
            error: None,
        }
    }

    /// The queued reductions (one f32 element each), or the first shape error.
    pub(crate) fn finish(self) -> (Vec<Tensor<1>>, Option<StepError>) {
        (self.checks, self.error)
    }
}

impl ModuleVisitor for GradCheck<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        // A parameter shared by several submodules has one gradient: check it once.
        if self.error.is_some() || !self.seen.insert(param.id) {
            return;
        }
        let Some(grad) = self.grads.remove::<D>(param.id) else {
            return;
        };
        // `remove::<D>` does not check the rank: compare the real dimensions before any
        // tensor op can panic on them.
        let (expected, got) = (param.lazy_shape(), grad.shape());
        if expected != got {
            self.error = Some(StepError::GradientShape {
                param: param.id,
                expected: expected.to_vec(),
                got: got.to_vec(),
            });
            return;
        }
        let target = plain_float(stored_dtype(param));
        let own = plain_float(grad.dtype());
        if own.is_none() {
            // Not a plain float (a quantized gradient): handed on untouched and unchecked.
            self.grads.register::<D>(param.id, grad);
            return;
        }
        let wide = wide(own, target);
        let mut unscaled = grad.cast(wide);
        match &self.inverse {
            Some(Inverse::Host(inverse)) => unscaled = unscaled.mul_scalar(*inverse),
            Some(Inverse::Device(inverse)) => {
                let factor = (**inverse).clone().to_device(&unscaled.device()).cast(wide);
                unscaled = unscaled.mul(factor.reshape([1; D]));
            }
            None => {}
        }
        let out = unscaled.cast(target.unwrap_or(wide));
        let count = out.shape().num_elements();
        if count > 0 {
            // Reduced from what the optimizer will see, so an f16 parameter's gradient that
            // overflowed on the way back to f16 is caught too.
            let flat = out.clone().cast(wide).reshape([count]);
            match self.kind {
                CheckKind::Sum => self.checks.push(flat.sum().cast(FloatDType::F32)),
                CheckKind::MagnitudeSum => self.checks.push(flat.abs().sum().cast(FloatDType::F32)),
                CheckKind::Norm => {
                    let largest = flat.clone().abs().max();
                    let divisor = largest.clone().clamp_min(f32::MIN_POSITIVE);
                    let squares = flat.div(divisor).square().sum();
                    self.checks.push(largest.cast(FloatDType::F32));
                    self.checks.push(squares.cast(FloatDType::F32));
                }
            }
        }
        self.grads.register::<D>(param.id, out);
    }
}

/// What the step's one read returned.
pub(crate) struct Read {
    pub(crate) finite: bool,
    /// Every gradient exactly zero (and at least one gradient), where the kind tells it.
    pub(crate) zero: bool,
    pub(crate) loss: Option<f32>,
    /// The global norm in f64 ([`CheckKind::Norm`] with at least one gradient): infinite when
    /// an element is infinite, NaN when one is NaN.
    pub(crate) norm: Option<f64>,
}

/// Concatenates the loss and the checks into one tensor and reads it once.
pub(crate) fn read_checks(
    loss: Option<Tensor<1>>,
    checks: &[Tensor<1>],
    kind: CheckKind,
) -> Result<Read, StepError> {
    let has_loss = loss.is_some();
    let parts: Vec<Tensor<1>> = loss.into_iter().chain(checks.iter().cloned()).collect();
    let Some(device) = parts.first().map(|part| part.device()) else {
        return Ok(Read {
            finite: true,
            zero: false,
            loss: None,
            norm: None,
        });
    };
    let parts = parts.into_iter().map(|p| p.to_device(&device)).collect();
    let data = Tensor::cat(parts, 0).try_into_data()?;
    let values = data
        .try_to_vec::<f32>()
        .map_err(|err| StepError::UnexpectedRead(format!("{err:?}")))?;
    let expected = usize::from(has_loss) + checks.len();
    if values.len() != expected {
        return Err(StepError::UnexpectedRead(format!(
            "expected {expected} values, got {}",
            values.len()
        )));
    }
    let (loss, checks) = values.split_at(usize::from(has_loss));
    let finite = checks.iter().all(|value| value.is_finite());
    // Sums of magnitudes, or largest magnitudes (first of each Norm pair), are zero only for
    // zero gradients; plain sums can cancel.
    let zero = match kind {
        CheckKind::Sum => false,
        CheckKind::MagnitudeSum => !checks.is_empty() && checks.iter().all(|v| *v == 0.0),
        CheckKind::Norm => !checks.is_empty() && checks.iter().step_by(2).all(|v| *v == 0.0),
    };
    let norm = match kind {
        CheckKind::Norm if !checks.is_empty() => Some(global_norm(checks)),
        _ => None,
    };
    Ok(Read {
        finite,
        zero,
        loss: loss.first().copied(),
        norm,
    })
}

/// The global L2 norm from `(largest magnitude, normalized sum of squares)` pairs, in f64.
fn global_norm(pairs: &[f32]) -> f64 {
    let pairs = || {
        pairs
            .chunks_exact(2)
            .map(|p| (f64::from(p[0]), f64::from(p[1])))
    };
    if pairs().any(|(largest, _)| largest.is_infinite()) {
        return f64::INFINITY;
    }
    if pairs().any(|(largest, squares)| largest.is_nan() || squares.is_nan()) {
        return f64::NAN;
    }
    pairs()
        .map(|(largest, squares)| largest * largest * squares)
        .sum::<f64>()
        .sqrt()
}

/// Multiplies every gradient of `module` by `coefficient` (global-norm clipping), at f32 (f64
/// stays f64), keeping each gradient's dtype.
pub(crate) fn scale_grads<M: Module>(module: &M, grads: &mut GradientsParams, coefficient: f64) {
    struct Scale<'a> {
        grads: &'a mut GradientsParams,
        coefficient: f64,
        seen: HashSet<ParamId>,
    }
    impl ModuleVisitor for Scale<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            if !self.seen.insert(param.id) {
                return;
            }
            let Some(grad) = self.grads.remove::<D>(param.id) else {
                return;
            };
            let grad = match plain_float(grad.dtype()) {
                Some(own) => grad
                    .cast(wide(Some(own), None))
                    .mul_scalar(self.coefficient)
                    .cast(own),
                None => grad,
            };
            self.grads.register::<D>(param.id, grad);
        }
    }
    module.visit(&mut Scale {
        grads,
        coefficient,
        seen: HashSet::new(),
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn norm_from_pairs() {
        // [3, 0] and [4]: m = 3, s = 1 and m = 4, s = 1.
        assert_eq!(global_norm(&[3.0, 1.0, 4.0, 1.0]), 5.0);
        assert_eq!(global_norm(&[f32::INFINITY, f32::NAN]), f64::INFINITY);
        assert!(global_norm(&[1.0, f32::NAN]).is_nan());
        // Elements of 3e20 and 4e20: their squares overflow f32, the norm does not.
        let norm = global_norm(&[3e20, 1.0, 4e20, 1.0]);
        assert!((norm / 5e20 - 1.0).abs() < 1e-6);
    }

    #[test]
    fn inverse_is_rounded_once() {
        assert_eq!(inverse_of(1.0), None);
        assert_eq!(inverse_of(3.0), Some((1.0f64 / 3.0) as f32));
    }
}
