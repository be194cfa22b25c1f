//! Which parameters overflowed: after a step is judged non-finite, one more read finds the
//! gradients that hold inf or NaN and names their parameters by module path. Applied steps
//! never run it (the 0.22 edition of burn-mpric-scale's `find_overflow`).

use burn::module::Module;
use burn::optim::GradientsParams;
use burn::tensor::{FloatDType, Tensor};
use burn_mpric_core::scale::Overflow;

use crate::error::StepError;
use crate::grad_paths::grads_by_path;

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
    let (paths, flags): (Vec<String>, Vec<Tensor<1>>) = grads_by_path(module, grads)
        .into_iter()
        .map(|(path, grad)| {
            // 1 when the gradient holds inf or NaN.
            let flag = grad.is_finite().bool_not().any().float();
            (path, flag.cast(FloatDType::F32))
        })
        .unzip();
    let Some(device) = flags.first().map(Tensor::device) else {
        return Ok(Overflow::default());
    };
    let on_device: Vec<Tensor<1>> = flags.into_iter().map(|f| f.to_device(&device)).collect();
    let read = Tensor::cat(on_device, 0)
        .try_into_data()?
        .convert_dtype(burn::tensor::DType::F32)
        .try_to_vec::<f32>()
        .map_err(|err| StepError::UnexpectedRead(format!("{err:?}")))?;
    if read.len() != paths.len() {
        return Err(StepError::UnexpectedRead(format!(
            "{} overflow flags for {} gradients",
            read.len(),
            paths.len()
        )));
    }
    let mut params: Vec<String> = Vec::new();
    for (path, bad) in paths.into_iter().zip(read) {
        if bad > 0.0 && params.last() != Some(&path) {
            params.push(path);
        }
    }
    Ok(Overflow::new(params))
}
