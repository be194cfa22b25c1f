//! What the 0.22 audit can see: each parameter's gradient by module path, the top-level
//! fields' types, and the forward values the loss closure hands to [`observe`].

use std::cell::RefCell;
use std::collections::HashSet;

use burn::module::{Module, ModuleVisitor, Param, ParamId};
use burn::optim::GradientsParams;
use burn::tensor::{DType, Tensor};
use burn_mpric_core::audit::{Magnitudes, ParamStats};

use crate::error::StepError;

thread_local! {
    /// The forward values observed in the current audit step, when an audit runs.
    static OBSERVED: RefCell<Option<Vec<(String, Magnitudes)>>> = const { RefCell::new(None) };
}

/// Hands a forward value to the precision audit running on this thread, under `name`
/// (`"logits"`, `"encoder output"`): its magnitudes join the report, and a value over f16's
/// range at the measured precision becomes a
/// [`Verdict::ForwardOverflow`](burn_mpric_core::audit::Verdict::ForwardOverflow). Outside an
/// audit it does nothing and reads nothing from the device.
///
/// # Example
///
/// ```
/// use burn::tensor::{Device, Tensor};
/// use burn_mpric_022::audit::observe;
///
/// let logits = Tensor::<2>::ones([2, 3], &Device::flex());
/// observe("logits", &logits); // no audit running: nothing happens
/// ```
pub fn observe<const D: usize>(name: &str, value: &Tensor<D>) {
    if !observing_now() {
        return;
    }
    let values = host_values(value.clone());
    OBSERVED.with(|o| {
        if let Some(seen) = o.borrow_mut().as_mut() {
            match seen.iter_mut().find(|(n, _)| n == name) {
                Some((_, m)) => m.add(&values),
                None => {
                    let mut m = Magnitudes::default();
                    m.add(&values);
                    seen.push((name.to_string(), m));
                }
            }
        }
    });
}

/// Whether an audit records on this thread.
pub(crate) fn observing_now() -> bool {
    OBSERVED.with(|o| o.borrow().is_some())
}

/// Runs `f` with [`observe`] recording, and returns what it recorded.
pub(crate) fn observing<R>(f: impl FnOnce() -> R) -> (R, Vec<(String, Magnitudes)>) {
    OBSERVED.with(|o| *o.borrow_mut() = Some(Vec::new()));
    let out = f();
    let seen = OBSERVED.with(|o| o.borrow_mut().take()).unwrap_or_default();
    (out, seen)
}

/// A tensor's values at f32 on the host (an unreadable tensor reads as nothing).
fn host_values<const D: usize>(value: Tensor<D>) -> Vec<f32> {
    let value = value.without_autodiff();
    let value = match value.dtype() {
        DType::F32 => value,
        _ => value.cast(burn::tensor::FloatDType::F32),
    };
    value
        .try_into_data()
        .ok()
        .and_then(|d| d.try_to_vec::<f32>().ok())
        .unwrap_or_default()
}

/// Adds each parameter's gradient in `grads` to `params` (by module path, in module order);
/// returns whether all were finite.
pub(crate) fn add_gradients<M: Module>(
    module: &M,
    grads: &GradientsParams,
    params: &mut Vec<ParamStats>,
) -> Result<bool, StepError> {
    struct Reader<'a> {
        grads: &'a GradientsParams,
        path: Vec<String>,
        seen: HashSet<ParamId>,
        found: Vec<(String, Tensor<1>)>,
    }
    impl ModuleVisitor for Reader<'_> {
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
            if let Some(grad) = self.grads.get::<D>(param.id) {
                let n = grad.shape().num_elements();
                let path = if self.path.is_empty() {
                    format!("parameter {}", param.id)
                } else {
                    self.path.join(".")
                };
                self.found.push((path, grad.reshape([n])));
            }
        }
    }
    let mut reader = Reader {
        grads,
        path: Vec::new(),
        seen: HashSet::new(),
        found: Vec::new(),
    };
    module.visit(&mut reader);
    let mut finite = true;
    for (path, grad) in reader.found {
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
