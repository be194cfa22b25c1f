//! Which parameters overflowed: after a step is judged non-finite, one more read finds the
//! gradients that hold inf or NaN and names their parameters by module path. Applied steps
//! never run it (the 0.22 edition of burn-mpric-scale's `find_overflow`).

use std::collections::HashSet;

use burn::module::{Module, ModuleVisitor, Param, ParamId};
use burn::optim::GradientsParams;
use burn::tensor::{FloatDType, Tensor};
use burn_mpric_core::scale::Overflow;

use crate::error::StepError;

/// The parameters of `module` whose gradient in `grads` holds inf or NaN, by module path
/// (`encoder.layers.0.weight`; `parameter <id>` in a module without names), in module order;
/// one device read for all of them.
///
/// # Example
///
/// ```
/// use burn::nn::LinearConfig;
/// use burn::optim::GradientsParams;
/// use burn::tensor::{Device, Tensor};
/// use burn_mpric_022::find_overflow;
///
/// let device = Device::flex().autodiff();
/// let model = LinearConfig::new(2, 1).init(&device);
/// let mut grads = GradientsParams::new();
/// let inner = Device::flex();
/// grads.register(model.weight.id, Tensor::<2>::from_floats([[1.0], [f32::NAN]], &inner));
/// grads.register(model.bias.as_ref().unwrap().id, Tensor::<1>::from_floats([0.5], &inner));
/// assert_eq!(find_overflow(&model, &grads).unwrap().params, vec!["weight"]);
/// ```
pub fn find_overflow<M: Module>(
    module: &M,
    grads: &GradientsParams,
) -> Result<Overflow, StepError> {
    let mut finder = Finder {
        grads,
        path: Vec::new(),
        seen: HashSet::new(),
        flags: Vec::new(),
    };
    module.visit(&mut finder);
    let Some(device) = finder.flags.first().map(|(_, flag)| flag.device()) else {
        return Ok(Overflow::default());
    };
    let flags: Vec<Tensor<1>> = finder
        .flags
        .iter()
        .map(|(_, flag)| flag.clone().to_device(&device))
        .collect();
    let read = Tensor::cat(flags, 0)
        .try_into_data()?
        .convert_dtype(burn::tensor::DType::F32)
        .try_to_vec::<f32>()
        .map_err(|err| StepError::UnexpectedRead(format!("{err:?}")))?;
    if read.len() != finder.flags.len() {
        return Err(StepError::UnexpectedRead(format!(
            "{} overflow flags for {} gradients",
            read.len(),
            finder.flags.len()
        )));
    }
    let mut params: Vec<String> = Vec::new();
    for ((path, _), bad) in finder.flags.iter().zip(read) {
        if bad > 0.0 && params.last() != Some(path) {
            params.push(path.clone());
        }
    }
    Ok(Overflow::new(params))
}

/// Visits the parameters with their module paths; for each gradient, a device flag (1 when
/// it holds inf or NaN).
struct Finder<'a> {
    grads: &'a GradientsParams,
    path: Vec<String>,
    seen: HashSet<ParamId>,
    flags: Vec<(String, Tensor<1>)>,
}

impl ModuleVisitor for Finder<'_> {
    fn enter_module(&mut self, name: &str, _container_type: &str) {
        self.path.push(name.to_string());
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }

    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        // A parameter shared by several submodules is named once, by its first path.
        if !self.seen.insert(param.id) {
            return;
        }
        let Some(grad) = self.grads.get::<D>(param.id) else {
            return;
        };
        let path = if self.path.is_empty() {
            format!("parameter {}", param.id)
        } else {
            self.path.join(".")
        };
        let flag = grad
            .is_finite()
            .bool_not()
            .any()
            .float()
            .cast(FloatDType::F32);
        self.flags.push((path, flag));
    }
}
