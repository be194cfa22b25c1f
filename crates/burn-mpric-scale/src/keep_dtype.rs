//! An optimizer step keeps each parameter's dtype, as PyTorch's in-place updates do.
//!
//! Under a mixed-precision backend an update can widen a parameter: the optimizer's math runs
//! partly at f32 (square roots, divisions) and a result takes the wider dtype of its inputs,
//! so an f16 parameter of a pure-f16 policy would come back f32 after one Adam step and then
//! train, and be saved, at f32. The step is followed by a cast back wherever a dtype changed.

use std::collections::HashMap;

use burn::module::{AutodiffModule, ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::optim::{GradientsParams, LearningRate, Optimizer};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{DType, Tensor};

/// The optimizer step every step function of this crate takes: `optim` applies `grads` to
/// `module`, and every parameter keeps the dtype it had (Burn's optimizers hand back f32
/// parameters for half ones, since their state is f32). For loops that decide themselves
/// whether to step, such as `PrecisionHandler::apply`.
///
/// # Example
///
/// ```
/// use burn::backend::{Autodiff, Flex};
/// use burn::module::{Module, Param};
/// use burn::optim::{AdamConfig, GradientsParams};
/// use burn::tensor::{DType, FloatDType, Tensor};
/// use burn_mpric_scale::apply_gradients;
///
/// type B = Autodiff<Flex>;
/// #[derive(Module, Debug)]
/// struct W<B: burn::tensor::backend::Backend> { w: Param<Tensor<B, 1>> }
///
/// let device = Default::default();
/// let w = Tensor::<B, 1>::from_floats([1.0, 2.0], &device).cast(FloatDType::F16).require_grad();
/// let model = W { w: Param::from_tensor(w) };
/// let grads = GradientsParams::from_grads(model.w.val().sum().backward(), &model);
/// let model = apply_gradients(&mut AdamConfig::new().init(), 0.1, model, grads);
/// assert_eq!(model.w.val().dtype(), DType::F16);
/// let w = model.w.val().cast(FloatDType::F32).into_data().to_vec::<f32>().unwrap();
/// assert!(w[0] < 1.0 && w[1] < 2.0); // stepped against the gradient
/// ```
pub fn apply_gradients<B, M, O>(
    optim: &mut O,
    lr: LearningRate,
    module: M,
    grads: GradientsParams,
) -> M
where
    B: AutodiffBackend,
    M: AutodiffModule<B>,
    O: Optimizer<M, B>,
{
    keeping_dtypes::<B, M>(module, |module| optim.step(lr, module, grads))
}

/// Runs `step` on `module`, then casts every float parameter whose dtype the step changed back
/// to the dtype it had before. Parameters that kept their dtype are not touched.
pub(crate) fn keeping_dtypes<B, M>(module: M, step: impl FnOnce(M) -> M) -> M
where
    B: AutodiffBackend,
    M: AutodiffModule<B>,
{
    let mut before = Dtypes(HashMap::new());
    module.visit(&mut before);
    let module = step(module);
    let mut restore = Restore(before.0);
    module.map(&mut restore)
}

struct Dtypes(HashMap<ParamId, DType>);

impl<B: AutodiffBackend> ModuleVisitor<B> for Dtypes {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        self.0.insert(param.id, param.val().dtype());
    }
}

struct Restore(HashMap<ParamId, DType>);

impl<B: AutodiffBackend> ModuleMapper<B> for Restore {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let Some(&dtype) = self.0.get(&param.id) else {
            return param;
        };
        if param.val().dtype() == dtype {
            return param;
        }
        param.map(|tensor| {
            let require_grad = tensor.is_require_grad();
            let tensor = tensor.cast(dtype).detach();
            if require_grad {
                tensor.require_grad()
            } else {
                tensor
            }
        })
    }
}
