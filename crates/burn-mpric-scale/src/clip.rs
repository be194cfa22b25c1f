//! Global-norm gradient clipping over all gradients of a module (Burn's own clipping is per
//! tensor).

use std::collections::HashSet;

use burn::module::{AutodiffModule, ModuleVisitor, Param, ParamId};
use burn::optim::GradientsParams;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{FloatDType, Tensor, Transaction};
use serde::{Deserialize, Serialize};

use crate::dtype::{compute_dtype, float_dtype};
use crate::error::StepError;
use crate::read::read_one;
use burn_mpric_core::scale::{ClipNorm, LossScaleError};

/// The L2 norm of all gradients of `module` taken together, as a one-element f32 tensor on the
/// device (nothing is read). `None` when the module has no gradient in `grads`.
///
/// It cannot overflow: the gradients are divided by their largest magnitude `m` before squaring
/// and the result is `m * sqrt(sum((g / m)^2))`, so finite gradients whose squares exceed f32's
/// range (elements around 1e20) still give their finite norm. Each gradient is widened to f32
/// first (f16 gradients do not overflow either). A gradient holding an infinity gives an
/// infinite norm, one holding a NaN (and no infinity) a NaN; a norm above `f32::MAX` is
/// infinite. This costs two reductions per gradient; [`LossScaler`](crate::LossScaler) needs
/// one, from the finiteness check, in the common case.
///
/// # Example
///
/// ```
/// use burn::backend::{Autodiff, Flex};
/// use burn::nn::{Linear, LinearConfig};
/// use burn::optim::GradientsParams;
/// use burn::tensor::Tensor;
/// use burn_mpric_scale::global_grad_norm;
///
/// let device = Default::default();
/// let model: Linear<Autodiff<Flex>> = LinearConfig::new(2, 2).init(&device);
/// let mut grads = GradientsParams::new();
/// grads.register(model.weight.id, Tensor::<Flex, 2>::from_floats([[3.0, 0.0], [0.0, 0.0]], &device));
/// grads.register(model.bias.as_ref().unwrap().id, Tensor::<Flex, 1>::from_floats([0.0, 4.0], &device));
/// let norm = global_grad_norm(&model, &grads).unwrap();
/// assert_eq!(norm.into_scalar(), 5.0);
///
/// // 3e20 and 4e20 square to more than f32::MAX; the norm is still 5e20.
/// let mut grads = GradientsParams::new();
/// grads.register(model.weight.id, Tensor::<Flex, 2>::from_floats([[3e20, 0.0], [0.0, 0.0]], &device));
/// grads.register(model.bias.as_ref().unwrap().id, Tensor::<Flex, 1>::from_floats([0.0, 4e20], &device));
/// let norm = global_grad_norm(&model, &grads).unwrap().into_scalar();
/// assert!((norm / 5e20 - 1.0).abs() < 1e-6);
/// ```
pub fn global_grad_norm<B: AutodiffBackend, M: AutodiffModule<B>>(
    module: &M,
    grads: &GradientsParams,
) -> Option<Tensor<B::InnerBackend, 1>> {
    let mut visitor = FlatVisitor::<B> {
        shards: &[grads],
        flat: Vec::new(),
        ids: Vec::new(),
        seen: HashSet::new(),
    };
    module.visit(&mut visitor);
    let flat = visitor.flat;
    let device = flat.first()?.device();
    let maxima = flat
        .iter()
        .map(|g| g.clone().abs().max().to_device(&device))
        .collect();
    let largest = Tensor::cat(maxima, 0).max();
    // A positive divisor (all-zero gradients give 0 / tiny = 0) that keeps (g / m)^2 <= 1.
    let divisor = largest.clone().clamp_min(f32::MIN_POSITIVE);
    let sum = flat
        .into_iter()
        .map(|g| {
            let divisor = divisor.clone().to_device(&g.device());
            g.div(divisor).square().sum().to_device(&device)
        })
        .reduce(|acc, s| acc + s)?;
    let norm = sum.sqrt().mul(divisor);
    // An infinite element makes g / m NaN; report the infinity, as the plain formula would.
    Some(norm.mask_where(largest.clone().is_inf(), largest))
}

/// Sums of squares of gradients, for the step's one host read: `values[i]` holds one f32
/// entry per group, and the groups, in order, say which parameters each entry covers (one per
/// packed buffer, or one per gradient). The global norm is combined on the host in f64 by
/// [`global_norm_from_squares`], so the sum over entries cannot overflow; a group whose own
/// sum of squares overflowed f32 is recomputed there, gradient by gradient.
#[derive(Debug, Clone)]
pub(crate) struct GradSquares<B: Backend> {
    /// The sums of squares, one entry per group.
    pub(crate) values: Vec<Tensor<B, 1>>,
    /// The parameters each entry covers.
    pub(crate) groups: Vec<Vec<ParamId>>,
}

/// The per-gradient sums of squares of the gradients of `module` summed over `shards`
/// (gradients of one step held on several devices, as in burn-train's sharded multi-device
/// optimization). Each parameter's gradients are added on the device of its first shard before
/// squaring, so the norm is the one the optimizer's summed gradient has. The result lives on
/// the device of the first gradient.
pub(crate) fn grad_squares_of_sum<B: AutodiffBackend, M: AutodiffModule<B>>(
    module: &M,
    shards: &[&GradientsParams],
) -> Option<GradSquares<B::InnerBackend>> {
    let mut visitor = FlatVisitor::<B> {
        shards,
        flat: Vec::new(),
        ids: Vec::new(),
        seen: HashSet::new(),
    };
    module.visit(&mut visitor);
    let (flat, ids) = (visitor.flat, visitor.ids);
    let device = flat.first()?.device();
    let values = flat
        .into_iter()
        .map(|g| g.square().sum().to_device(&device))
        .collect();
    Some(GradSquares {
        values,
        groups: ids.into_iter().map(|id| vec![id]).collect(),
    })
}

/// The global L2 norm, in f64, from the sums of squares read from the device (`squares[i]`
/// covers the gradients of `groups[i]`), with `shards` holding the gradients they came from.
///
/// Finite sums are added in f64 (no overflow, however many gradients). A NaN sum means a NaN
/// element: the norm is NaN. An infinite sum means an infinite element, or finite elements
/// whose squares overflowed f32; only then are that group's gradients read again, each as its
/// largest magnitude `m` and `sum((g / m)^2)` (a second host read, in their own width), and
/// their share is `m^2 * sum((g / m)^2)` in f64. An infinite `m` gives an infinite norm.
pub(crate) fn global_norm_from_squares<B: AutodiffBackend, M: AutodiffModule<B>>(
    module: &M,
    shards: &[&GradientsParams],
    squares: &[f32],
    groups: &[Vec<ParamId>],
) -> Result<f64, StepError> {
    if squares.len() != groups.len() {
        return Err(StepError::UnexpectedRead(format!(
            "expected {} sums of squares, got {}",
            groups.len(),
            squares.len()
        )));
    }
    let mut total = 0.0f64;
    let mut overflowed = HashSet::new();
    for (&square, group) in squares.iter().zip(groups) {
        if square.is_nan() {
            return Ok(f64::NAN);
        }
        if square.is_infinite() {
            overflowed.extend(group.iter().copied());
        } else {
            total += f64::from(square);
        }
    }
    if overflowed.is_empty() {
        return Ok(total.sqrt());
    }
    let expected = overflowed.len();
    let rescaled = rescaled_squares::<B, M>(module, shards, overflowed)?;
    if rescaled.len() != expected {
        return Err(StepError::UnexpectedRead(format!(
            "expected {expected} rescaled gradients, got {}",
            rescaled.len()
        )));
    }
    for (largest, rescaled) in rescaled {
        // An infinite element (g / m is NaN there): the norm is infinite.
        if largest.is_infinite() {
            return Ok(f64::INFINITY);
        }
        if largest.is_nan() || rescaled.is_nan() {
            return Ok(f64::NAN);
        }
        let norm = largest * rescaled.sqrt();
        total += norm * norm;
    }
    Ok(total.sqrt())
}

/// For each gradient in `ids` (summed over `shards`): its largest magnitude `m` and
/// `sum((g / m)^2)`, at f32 (f64 for f64 gradients), read from the device in one transaction.
fn rescaled_squares<B: AutodiffBackend, M: AutodiffModule<B>>(
    module: &M,
    shards: &[&GradientsParams],
    ids: HashSet<ParamId>,
) -> Result<Vec<(f64, f64)>, StepError> {
    let mut visitor = RescaleVisitor::<B> {
        shards,
        wanted: ids,
        values: Vec::new(),
    };
    module.visit(&mut visitor);
    let Some(device) = visitor.values.first().map(Tensor::device) else {
        return Ok(Vec::new());
    };
    let mut transaction = Transaction::<B::InnerBackend>::default();
    for value in visitor.values {
        transaction = transaction.register(value.to_device(&device));
    }
    let data = transaction.try_execute()?;
    let values = data
        .into_iter()
        .map(|data| read_one::<f64>(data, "value"))
        .collect::<Result<Vec<f64>, StepError>>()?;
    Ok(values
        .chunks_exact(2)
        .map(|pair| (pair[0], pair[1]))
        .collect())
}

/// Clipping of all gradients by their global L2 norm, as PyTorch's `clip_grad_norm_`:
/// every gradient is multiplied by `min(1, max_norm / (total_norm + 1e-6))`.
///
/// Apply it after unscaling (a [`LossScaler`](crate::LossScaler) does so when configured with
/// [`with_clip_norm`](crate::LossScaler::with_clip_norm)).
///
/// # Example
///
/// ```
/// use burn::backend::{Autodiff, Flex};
/// use burn::nn::{Linear, LinearConfig};
/// use burn::optim::GradientsParams;
/// use burn::tensor::Tensor;
/// use burn_mpric_scale::GlobalNormClip;
///
/// let device = Default::default();
/// let model: Linear<Autodiff<Flex>> = LinearConfig::new(2, 2).init(&device);
/// let mut grads = GradientsParams::new();
/// grads.register(model.weight.id, Tensor::<Flex, 2>::from_floats([[30.0, 0.0], [0.0, 0.0]], &device));
/// grads.register(model.bias.as_ref().unwrap().id, Tensor::<Flex, 1>::from_floats([0.0, 40.0], &device));
///
/// let grads = GlobalNormClip::new(5.0).unwrap().clip(&model, grads);
/// let bias = grads.get::<Flex, 1>(model.bias.as_ref().unwrap().id).unwrap();
/// let value = bias.into_data().to_vec::<f32>().unwrap()[1];
/// assert!((value - 4.0).abs() < 1e-5);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GlobalNormClip {
    max_norm: f32,
}

impl GlobalNormClip {
    /// Clipping to `max_norm`, which must be finite and positive.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_scale::GlobalNormClip;
    ///
    /// assert!(GlobalNormClip::new(1.0).is_ok());
    /// assert!(GlobalNormClip::new(0.0).is_err());
    /// assert!(GlobalNormClip::new(f32::NAN).is_err());
    /// ```
    pub fn new(max_norm: f32) -> Result<Self, LossScaleError> {
        ClipNorm::new(max_norm).map(Self::from)
    }

    /// The Burn-free rule (burn-mpric-core's [`ClipNorm`]) this clipping applies.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_scale::GlobalNormClip;
    ///
    /// assert_eq!(GlobalNormClip::new(3.0).unwrap().rule().max_norm(), 3.0);
    /// ```
    pub fn rule(self) -> ClipNorm {
        ClipNorm::new(self.max_norm).expect("validated when built")
    }

    /// The maximum global norm.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_scale::GlobalNormClip;
    ///
    /// assert_eq!(GlobalNormClip::new(2.5).unwrap().max_norm(), 2.5);
    /// ```
    pub fn max_norm(&self) -> f32 {
        self.max_norm
    }

    /// Computes the global norm and clips every gradient of `module` with it.
    ///
    /// # Example
    ///
    /// ```
    /// use burn::backend::{Autodiff, Flex};
    /// use burn::nn::{Linear, LinearConfig};
    /// use burn::optim::GradientsParams;
    /// use burn::tensor::Tensor;
    /// use burn_mpric_scale::GlobalNormClip;
    ///
    /// let device = Default::default();
    /// let model: Linear<Autodiff<Flex>> = LinearConfig::new(1, 1).init(&device);
    /// let mut grads = GradientsParams::new();
    /// grads.register(model.weight.id, Tensor::<Flex, 2>::from_floats([[-8.0]], &device));
    /// let grads = GlobalNormClip::new(2.0).unwrap().clip(&model, grads);
    /// let g = grads.get::<Flex, 2>(model.weight.id).unwrap().into_scalar();
    /// assert!((g + 2.0).abs() < 1e-5);
    /// ```
    pub fn clip<B: AutodiffBackend, M: AutodiffModule<B>>(
        &self,
        module: &M,
        grads: GradientsParams,
    ) -> GradientsParams {
        match global_grad_norm(module, &grads) {
            Some(norm) => self.clip_with_norm(module, grads, norm),
            None => grads,
        }
    }

    /// Clips every gradient of `module` with a global norm computed earlier by
    /// [`global_grad_norm`] (so the norm can be read in the same transaction as other values).
    ///
    /// # Example
    ///
    /// ```
    /// use burn::backend::{Autodiff, Flex};
    /// use burn::nn::{Linear, LinearConfig};
    /// use burn::optim::GradientsParams;
    /// use burn::tensor::Tensor;
    /// use burn_mpric_scale::{GlobalNormClip, global_grad_norm};
    ///
    /// let device = Default::default();
    /// let model: Linear<Autodiff<Flex>> = LinearConfig::new(1, 1).init(&device);
    /// let mut grads = GradientsParams::new();
    /// grads.register(model.weight.id, Tensor::<Flex, 2>::from_floats([[0.5]], &device));
    /// let norm = global_grad_norm(&model, &grads).unwrap();
    /// // Below the threshold: unchanged.
    /// let grads = GlobalNormClip::new(1.0).unwrap().clip_with_norm(&model, grads, norm);
    /// assert_eq!(grads.get::<Flex, 2>(model.weight.id).unwrap().into_scalar(), 0.5);
    /// ```
    pub fn clip_with_norm<B: AutodiffBackend, M: AutodiffModule<B>>(
        &self,
        module: &M,
        grads: GradientsParams,
        total_norm: Tensor<B::InnerBackend, 1>,
    ) -> GradientsParams {
        let coefficient = total_norm
            .cast(FloatDType::F32)
            .add_scalar(1e-6)
            .recip()
            .mul_scalar(self.max_norm)
            .clamp_max(1.0);
        clip_by::<B, M>(module, grads, Coefficient::Tensor(coefficient))
    }

    /// The clipping coefficient for a global norm known on the host:
    /// `min(1, max_norm / (total_norm + 1e-6))`, in f64.
    pub(crate) fn coefficient(&self, total_norm: f64) -> f64 {
        self.rule().coefficient(total_norm)
    }

    /// Clips every gradient of `module` with a global norm known on the host (finite, at most
    /// `f32::MAX`). Nothing happens when the norm is within `max_norm` (the coefficient is 1).
    pub(crate) fn clip_with_host_norm<B: AutodiffBackend, M: AutodiffModule<B>>(
        &self,
        module: &M,
        grads: GradientsParams,
        total_norm: f64,
    ) -> GradientsParams {
        let coefficient = self.coefficient(total_norm);
        if coefficient >= 1.0 {
            return grads;
        }
        clip_by::<B, M>(module, grads, Coefficient::Scalar(coefficient))
    }
}

/// The factor every gradient is multiplied by.
impl From<ClipNorm> for GlobalNormClip {
    fn from(rule: ClipNorm) -> Self {
        Self {
            max_norm: rule.max_norm(),
        }
    }
}

enum Coefficient<B: Backend> {
    /// A one-element tensor on the device.
    Tensor(Tensor<B, 1>),
    /// A value known on the host, in (0, 1].
    Scalar(f64),
}

fn clip_by<B: AutodiffBackend, M: AutodiffModule<B>>(
    module: &M,
    mut grads: GradientsParams,
    coefficient: Coefficient<B::InnerBackend>,
) -> GradientsParams {
    let mut visitor = ClipVisitor::<B> {
        grads: &mut grads,
        coefficient,
        seen: HashSet::new(),
    };
    module.visit(&mut visitor);
    grads
}

/// The gradients of `id` in `shards`, cast to `dtype` and added on the device of the first.
fn summed_grad<B: Backend, const D: usize>(
    shards: &[&GradientsParams],
    id: ParamId,
    dtype: FloatDType,
) -> Option<Tensor<B, D>> {
    shards
        .iter()
        .filter_map(|grads| grads.get::<B, D>(id))
        .map(|grad| grad.cast(dtype))
        .reduce(|acc, grad| {
            let device = acc.device();
            acc + grad.to_device(&device)
        })
}

/// Collects every gradient of the module (summed over the shards, at f32) as a flat tensor.
struct FlatVisitor<'a, B: AutodiffBackend> {
    shards: &'a [&'a GradientsParams],
    flat: Vec<Tensor<B::InnerBackend, 1>>,
    /// The parameter of each entry of `flat`.
    ids: Vec<ParamId>,
    seen: HashSet<ParamId>,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for FlatVisitor<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        if !self.seen.insert(param.id) {
            return;
        }
        let Some(grad) = summed_grad::<B::InnerBackend, D>(self.shards, param.id, FloatDType::F32)
        else {
            return;
        };
        let len = grad.shape().num_elements();
        self.flat.push(grad.reshape([len]));
        self.ids.push(param.id);
    }
}

/// Computes, for the wanted gradients, their largest magnitude and the sum of squares of the
/// gradient divided by it, at f32 (f64 for f64 gradients).
struct RescaleVisitor<'a, B: AutodiffBackend> {
    shards: &'a [&'a GradientsParams],
    wanted: HashSet<ParamId>,
    /// Pairs of one-element tensors: the largest magnitude, then the rescaled sum of squares.
    values: Vec<Tensor<B::InnerBackend, 1>>,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for RescaleVisitor<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        // Removing the id also makes a shared parameter count once.
        if !self.wanted.remove(&param.id) {
            return;
        }
        let own = self
            .shards
            .iter()
            .find_map(|grads| grads.get::<B::InnerBackend, D>(param.id))
            .and_then(|grad| float_dtype(grad.dtype()));
        let dtype = compute_dtype(own, None);
        let Some(grad) = summed_grad::<B::InnerBackend, D>(self.shards, param.id, dtype) else {
            return;
        };
        let largest = grad.clone().abs().max();
        let divisor = largest
            .clone()
            .clamp_min(f32::MIN_POSITIVE)
            .unsqueeze::<D>();
        let rescaled = grad.div(divisor).square().sum();
        self.values.push(largest);
        self.values.push(rescaled);
    }
}

struct ClipVisitor<'a, B: AutodiffBackend> {
    grads: &'a mut GradientsParams,
    coefficient: Coefficient<B::InnerBackend>,
    seen: HashSet<ParamId>,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for ClipVisitor<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        if !self.seen.insert(param.id) {
            return;
        }
        let Some(grad) = self.grads.remove::<B::InnerBackend, D>(param.id) else {
            return;
        };
        let own = float_dtype(grad.dtype());
        let compute = compute_dtype(own, None);
        let device = grad.device();
        let grad = grad.cast(compute);
        let clipped = match &self.coefficient {
            Coefficient::Tensor(coefficient) => {
                let mut coefficient = coefficient.clone();
                if coefficient.device() != device {
                    coefficient = coefficient.to_device(&device);
                }
                grad.mul(coefficient.cast(compute).unsqueeze::<D>())
            }
            // A coefficient below f32's smallest normal value (a norm near f32::MAX clipped to
            // a small threshold) could be flushed to zero by the device: apply it as two
            // normal factors instead.
            Coefficient::Scalar(coefficient) if *coefficient < f64::from(f32::MIN_POSITIVE) => {
                let root = coefficient.sqrt();
                grad.mul_scalar(root).mul_scalar(root)
            }
            Coefficient::Scalar(coefficient) => grad.mul_scalar(*coefficient),
        };
        let clipped = match own {
            Some(own) => clipped.cast(own),
            None => clipped,
        };
        self.grads.register::<B::InnerBackend, D>(param.id, clipped);
    }
}
