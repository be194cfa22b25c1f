//! What the 0.22 audit can see: each parameter's gradient by module path and the top-level
//! fields' types (the forward values are `crate::observe`'s).

use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::tensor::Tensor;
use burn_mpric_core::audit::{Magnitudes, ParamStats};

use crate::error::StepError;
use crate::grad_paths::grads_by_path;

/// Adds each parameter's gradient in `grads` to `params` (by module path, in module order);
/// returns whether all were finite.
pub(crate) fn add_gradients<M: Module>(
    module: &M,
    grads: &GradientsParams,
    params: &mut Vec<ParamStats>,
) -> Result<bool, StepError> {
    let mut finite = true;
    for (path, grad) in grads_by_path(module, grads) {
        let values = grad
            .cast(burn::tensor::FloatDType::F32)
            .try_into_data()?
            .try_to_vec::<f32>()
            .map_err(|err| StepError::UnexpectedRead(format!("{err:?}")))?;
        let index = match params.iter().position(|p| p.path == path) {
            Some(i) => i,
            None => {
                params.push(ParamStats {
                    path,
                    grad: Magnitudes::default(),
                });
                params.len() - 1
            }
        };
        let before = params[index].grad.non_finite;
        params[index].grad.add(&values);
        finite &= params[index].grad.non_finite == before;
    }
    Ok(finite)
}

/// The top-level fields of `module` that hold parameters, with their types' names
/// (`("encoder", "TransformerEncoder")`), in module order.
pub(crate) fn fields<M: Module>(module: &M) -> Vec<(String, String)> {
    struct Fields {
        depth: usize,
        current: Option<String>,
        found: Vec<(String, String)>,
    }
    impl ModuleVisitor for Fields {
        fn enter_module(&mut self, name: &str, container_type: &str) {
            self.depth += 1;
            if self.depth == 1 {
                self.current = Some(name.to_string());
            } else if self.depth == 2
                && let Some(field) = self.current.take()
            {
                // A field's children name the field's own type as their container.
                let ty = container_type
                    .split_once(':')
                    .map_or(container_type, |(_, t)| t);
                self.found.push((field, ty.to_string()));
            }
        }
        fn exit_module(&mut self, _name: &str, _container_type: &str) {
            self.depth -= 1;
        }
        fn visit_float<const D: usize>(&mut self, _param: &Param<Tensor<D>>) {
            // A parameter directly in a top-level field (a `Param` field): no type to name.
            if let Some(field) = self.current.take() {
                self.found.push((field, "Param".to_string()));
            }
        }
    }
    let mut visitor = Fields {
        depth: 0,
        current: None,
        found: Vec::new(),
    };
    module.visit(&mut visitor);
    visitor.found
}
