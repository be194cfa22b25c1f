//! Each parameter's gradient by module path, for the reads that name parameters (overflow
//! attribution, the audit's per-parameter magnitudes).

use std::collections::HashSet;

use burn::module::{Module, ModuleVisitor, Param, ParamId};
use burn::optim::GradientsParams;
use burn::tensor::Tensor;

/// The gradients in `grads` of `module`'s parameters, flattened, each with its module path
/// (`encoder.layers.0.weight`; `parameter <id>` in a module without names), in module order.
/// A parameter shared by several submodules comes once, by its first path.
pub(crate) fn grads_by_path<M: Module>(
    module: &M,
    grads: &GradientsParams,
) -> Vec<(String, Tensor<1>)> {
    let mut walker = Walker {
        grads,
        path: Vec::new(),
        seen: HashSet::new(),
        found: Vec::new(),
    };
    module.visit(&mut walker);
    walker.found
}

struct Walker<'a> {
    grads: &'a GradientsParams,
    path: Vec<String>,
    seen: HashSet<ParamId>,
    found: Vec<(String, Tensor<1>)>,
}

impl ModuleVisitor for Walker<'_> {
    fn enter_module(&mut self, name: &str, _container_type: &str) {
        self.path.push(name.to_string());
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }

    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
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
        let n = grad.shape().num_elements();
        self.found.push((path, grad.reshape([n])));
    }
}
