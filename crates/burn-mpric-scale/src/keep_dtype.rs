//! An optimizer step keeps each parameter's dtype, as PyTorch's in-place updates do.
//!
//! Under a mixed-precision backend an update can widen a parameter: the optimizer's math runs
//! partly at f32 (square roots, divisions) and a result takes the wider dtype of its inputs,
//! so an f16 parameter of a pure-f16 policy would come back f32 after one Adam step and then
//! train, and be saved, at f32. The step is followed by a cast back wherever a dtype changed.

use std::collections::HashMap;

use burn::module::{AutodiffModule, ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{DType, Tensor};

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
