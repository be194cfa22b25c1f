//! The optimizer step whose skip is a select on the device: every parameter and state tensor
//! takes its updated value where the step's finiteness flag is true and keeps its old one
//! where it is false, so nothing is read between backward and the update.

use std::collections::HashMap;

use burn::module::{Module, ModuleMapper, Param, ParamId};
use burn::optim::GradientsParams;
use burn::tensor::{Bool, FloatDType, Tensor};

use super::rules::DeviceRule;
use crate::dtype::plain_float;

/// An optimizer whose step is applied or discarded by a flag on the device: Adam, AdamW or
/// SGD (burn-mpric-core's [`DeviceAdamConfig`](burn_mpric_core::scale::DeviceAdamConfig),
/// [`DeviceAdamWConfig`](burn_mpric_core::scale::DeviceAdamWConfig),
/// [`DeviceSgdConfig`](burn_mpric_core::scale::DeviceSgdConfig)) computed at f32 whatever the
/// parameters' dtype, each parameter keeping the dtype it is stored at.
///
/// Where the flag is false, the parameters and every state tensor (moments, the betas'
/// powers that stand for Adam's step count, SGD's velocity) are the old values, bit for bit.
///
/// # Example
///
/// ```
/// use burn::nn::LinearConfig;
/// use burn::optim::GradientsParams;
/// use burn::tensor::{Bool, Device, Tensor};
/// use burn_mpric_022::DeviceOptimizer;
/// use burn_mpric_core::scale::DeviceAdamConfig;
///
/// let device = Device::flex().autodiff();
/// let model = LinearConfig::new(2, 1).init(&device);
/// let before = model.weight.val().into_data();
/// let mut optim = DeviceOptimizer::new(DeviceAdamConfig::new());
/// let flag = |value| Tensor::<1, Bool>::from_bool([value], &Device::flex());
/// let grads = || {
///     let loss = model.forward(Tensor::<2>::ones([1, 2], &device)).sum();
///     GradientsParams::from_grads(loss.backward(), &model)
/// };
/// let skipped = optim.step(0.1, model.clone(), grads(), flag(false));
/// assert_eq!(skipped.weight.val().into_data(), before);
/// let applied = optim.step(0.1, model.clone(), grads(), flag(true));
/// assert_ne!(applied.weight.val().into_data(), before);
/// ```
#[derive(Clone)]
pub struct DeviceOptimizer<R: DeviceRule> {
    rule: R,
    states: DeviceOptimizerRecord,
}

/// A [`DeviceOptimizer`]'s state: each parameter's state tensors, flat, by parameter id.
///
/// # Example
///
/// ```
/// use burn_mpric_022::{DeviceOptimizer, DeviceOptimizerRecord};
/// use burn_mpric_core::scale::DeviceSgdConfig;
///
/// let record: DeviceOptimizerRecord = DeviceOptimizer::new(DeviceSgdConfig::new()).to_record();
/// assert!(record.is_empty());
/// ```
pub type DeviceOptimizerRecord = HashMap<ParamId, Vec<Tensor<1>>>;

impl<R: DeviceRule> DeviceOptimizer<R> {
    /// An optimizer with no state yet.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_022::DeviceOptimizer;
    /// use burn_mpric_core::scale::DeviceSgdConfig;
    ///
    /// let optim = DeviceOptimizer::new(DeviceSgdConfig::new());
    /// assert_eq!(optim.rule(), &DeviceSgdConfig::new());
    /// ```
    pub fn new(rule: R) -> Self {
        Self {
            rule,
            states: HashMap::new(),
        }
    }

    /// The update rule and its settings.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_022::DeviceOptimizer;
    /// use burn_mpric_core::scale::DeviceAdamWConfig;
    ///
    /// assert_eq!(DeviceOptimizer::new(DeviceAdamWConfig::new()).rule().weight_decay, 1e-4);
    /// ```
    pub fn rule(&self) -> &R {
        &self.rule
    }

    /// Steps `module` by `grads` (unscaled, at the parameters' dtypes) where `applied` (a
    /// one-element bool tensor) is true; where it is false, the parameters and this
    /// optimizer's state stay as they were. Nothing is read.
    ///
    /// # Example
    ///
    /// ```
    /// use burn::nn::LinearConfig;
    /// use burn::optim::GradientsParams;
    /// use burn::tensor::{Bool, Device, Tensor};
    /// use burn_mpric_022::DeviceOptimizer;
    /// use burn_mpric_core::scale::DeviceSgdConfig;
    ///
    /// let model = LinearConfig::new(1, 1).with_bias(false).init(&Device::flex().autodiff());
    /// let w = model.weight.val().into_data().try_to_vec::<f32>().unwrap()[0];
    /// let mut grads = GradientsParams::new();
    /// grads.register(model.weight.id, Tensor::<2>::from_floats([[2.0]], &Device::flex()));
    /// let yes = Tensor::<1, Bool>::from_bool([true], &Device::flex());
    /// let model = DeviceOptimizer::new(DeviceSgdConfig::new()).step(0.5, model, grads, yes);
    /// assert_eq!(model.weight.val().into_data().try_to_vec::<f32>().unwrap(), vec![w - 1.0]);
    /// ```
    pub fn step<M: Module>(
        &mut self,
        lr: f64,
        module: M,
        mut grads: GradientsParams,
        applied: Tensor<1, Bool>,
    ) -> M {
        let mut mapper = Mapper::<R> {
            rule: &self.rule,
            states: &mut self.states,
            grads: &mut grads,
            applied,
            lr,
        };
        module.map(&mut mapper)
    }

    /// The state of every parameter stepped so far, for a checkpoint.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_022::DeviceOptimizer;
    /// use burn_mpric_core::scale::DeviceAdamConfig;
    ///
    /// assert!(DeviceOptimizer::new(DeviceAdamConfig::new()).to_record().is_empty());
    /// ```
    pub fn to_record(&self) -> DeviceOptimizerRecord {
        self.states.clone()
    }

    /// This optimizer with the state of a checkpoint.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_022::DeviceOptimizer;
    /// use burn_mpric_core::scale::DeviceAdamConfig;
    ///
    /// let optim = DeviceOptimizer::new(DeviceAdamConfig::new());
    /// let restored = DeviceOptimizer::new(DeviceAdamConfig::new()).load_record(optim.to_record());
    /// assert!(restored.to_record().is_empty());
    /// ```
    #[must_use]
    pub fn load_record(mut self, record: DeviceOptimizerRecord) -> Self {
        self.states = record;
        self
    }
}

struct Mapper<'a, R: DeviceRule> {
    rule: &'a R,
    states: &'a mut DeviceOptimizerRecord,
    grads: &'a mut GradientsParams,
    applied: Tensor<1, Bool>,
    lr: f64,
}

impl<R: DeviceRule> ModuleMapper for Mapper<'_, R> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let (id, tensor, mapper) = param.consume();
        let Some(grad) = self.grads.remove::<D>(id) else {
            return Param::from_mapped_value(id, tensor, mapper);
        };
        let require_grad = tensor.is_require_grad();
        let checkpointing = tensor.gradient_checkpointing_strategy();
        let inner = tensor.inner();
        let (shape, device, dtype) = (inner.shape(), inner.device(), inner.dtype());
        let len = shape.num_elements();
        let old = inner.reshape([len]);
        let wide = |t: Tensor<1>| t.cast(FloatDType::F32);
        let state = self
            .states
            .remove(&id)
            .unwrap_or_else(|| self.rule.init_state(len, &device));
        let (new, new_state) = self.rule.update(
            self.lr,
            wide(old.clone()),
            wide(grad.to_device(&device).reshape([len])),
            state.clone(),
        );
        let keep = |t: Tensor<1>| match plain_float(dtype) {
            Some(own) => t.cast(own),
            None => t,
        };
        let applied = self.applied.clone().to_device(&device);
        let select = |old: Tensor<1>, new: Tensor<1>| {
            let mask = applied.clone().expand([old.dims()[0]]);
            old.mask_where(mask, new)
        };
        let param = select(old, keep(new));
        let state = state
            .into_iter()
            .zip(new_state)
            .map(|(old, new)| select(old, new))
            .collect();
        self.states.insert(id, state);
        let mut tensor = Tensor::from_inner(param.reshape(shape));
        if let Some(strategy) = checkpointing {
            tensor = tensor.with_gradient_checkpointing_strategy(strategy);
        }
        if require_grad {
            tensor = tensor.require_grad();
        }
        Param::from_mapped_value(id, tensor, mapper)
    }
}
