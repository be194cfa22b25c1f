//! Which parameters overflowed: after a step is judged non-finite, one more read finds the
//! gradients that hold inf or NaN and names their parameters by module path. Applied steps
//! never run it.

use std::collections::HashSet;

use burn::module::{AutodiffModule, ModuleVisitor, Param, ParamId};
use burn::optim::GradientsParams;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{Bool, Tensor, Transaction};
use burn_mpric_core::scale::Overflow;

use crate::error::StepError;

/// The parameters of `module` whose gradient, in any of `shards`, holds inf or NaN; one
/// device read for all of them.
///
/// # Example
///
/// ```
/// use burn::backend::{Autodiff, Flex};
/// use burn::nn::{Linear, LinearConfig};
/// use burn::optim::GradientsParams;
/// use burn::tensor::Tensor;
/// use burn_mpric_scale::find_overflow;
///
/// type B = Autodiff<Flex>;
/// let device = Default::default();
/// let model: Linear<B> = LinearConfig::new(2, 1).init(&device);
/// let mut grads = GradientsParams::new();
/// grads.register(model.weight.id, Tensor::<Flex, 2>::from_floats([[1.0], [f32::INFINITY]], &device));
/// grads.register(model.bias.as_ref().unwrap().id, Tensor::<Flex, 1>::from_floats([0.5], &device));
/// let overflow = find_overflow(&model, &[grads]).unwrap();
/// assert_eq!(overflow.params, vec!["weight"]);
/// ```
pub fn find_overflow<B: AutodiffBackend, M: AutodiffModule<B>>(
    module: &M,
    shards: &[GradientsParams],
) -> Result<Overflow, StepError> {
    let flags: Vec<(String, Tensor<B::InnerBackend, 1, Bool>)> = named_grads(module, shards)
        .into_iter()
        .map(|(path, grad)| (path, grad.is_finite().bool_not().any()))
        .collect();
    let Some(device) = flags.first().map(|(_, flag)| flag.device()) else {
        return Ok(Overflow::default());
    };
    let mut transaction = Transaction::<B::InnerBackend>::default();
    for (_, flag) in &flags {
        transaction = transaction.register(flag.clone().to_device(&device));
    }
    let data = transaction.try_execute()?;
    let mut params = Vec::new();
    for ((path, _), data) in flags.iter().zip(data) {
        let bad = data
            .iter::<bool>()
            .next()
            .ok_or_else(|| StepError::UnexpectedRead("an empty overflow flag".into()))?;
        if bad && params.last() != Some(path) {
            params.push(path.clone());
        }
    }
    Ok(Overflow::new(params))
}

/// Each gradient in `shards` of a parameter of `module`, flattened, with the parameter's
/// module path (`encoder.layers.0.weight`; `parameter <id>` for a module without names), in
/// module order; a parameter shared by several submodules is named once, by its first path.
///
/// # Example
///
/// ```
/// use burn::backend::{Autodiff, Flex};
/// use burn::nn::{Linear, LinearConfig};
/// use burn::optim::GradientsParams;
/// use burn::tensor::Tensor;
/// use burn_mpric_scale::named_grads;
///
/// type B = Autodiff<Flex>;
/// let device = Default::default();
/// let model: Linear<B> = LinearConfig::new(2, 1).init(&device);
/// let mut grads = GradientsParams::new();
/// grads.register(model.weight.id, Tensor::<Flex, 2>::from_floats([[1.0], [2.0]], &device));
/// let named = named_grads(&model, &[grads]);
/// assert_eq!(named.len(), 1, "the bias has no gradient");
/// assert_eq!(named[0].0, "weight");
/// assert_eq!(named[0].1.dims(), [2]);
/// ```
pub fn named_grads<B: AutodiffBackend, M: AutodiffModule<B>>(
    module: &M,
    shards: &[GradientsParams],
) -> Vec<(String, Tensor<B::InnerBackend, 1>)> {
    let mut finder = Finder::<B> {
        shards,
        path: Vec::new(),
        seen: HashSet::new(),
        found: Vec::new(),
    };
    module.visit(&mut finder);
    finder.found
}

/// Visits the parameters with their module paths and collects their gradients.
struct Finder<'a, B: AutodiffBackend> {
    shards: &'a [GradientsParams],
    path: Vec<String>,
    seen: HashSet<ParamId>,
    found: Vec<(String, Tensor<B::InnerBackend, 1>)>,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for Finder<'_, B> {
    fn enter_module(&mut self, name: &str, _container_type: &str) {
        self.path.push(name.to_string());
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }

    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        if !self.seen.insert(param.id) {
            return;
        }
        let path = if self.path.is_empty() {
            format!("parameter {}", param.id)
        } else {
            self.path.join(".")
        };
        for shard in self.shards {
            if let Some(grad) = shard.get::<B::InnerBackend, D>(param.id) {
                let len = grad.shape().num_elements();
                self.found.push((path.clone(), grad.reshape([len])));
            }
        }
    }
}
