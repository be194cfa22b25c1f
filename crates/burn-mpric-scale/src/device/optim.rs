//! The optimizer step whose skip is a select on the device: every parameter and state tensor
//! takes its updated value where the step's finiteness flag is true and keeps its old one
//! where it is false, so nothing is read between backward and the update.

use burn::module::{AutodiffModule, ModuleMapper, Param, ParamId};
use burn::optim::GradientsParams;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Bool, FloatDType, Tensor};
use hashbrown::HashMap;

use super::rules::DeviceRule;
use crate::dtype::float_dtype;

/// An optimizer whose step is applied or discarded by a flag on the device: Adam, AdamW or
/// SGD ([`DeviceAdamConfig`](crate::DeviceAdamConfig),
/// [`DeviceAdamWConfig`](crate::DeviceAdamWConfig), [`DeviceSgdConfig`](crate::DeviceSgdConfig))
/// computed at f32 whatever the parameters' dtype, each parameter keeping its dtype.
///
/// Where the flag is false, the parameters and every state tensor (moments, the betas'
/// powers that stand for Adam's step count, SGD's velocity) are the old values, bit for bit:
/// the old values are held until the select (memory, not a copy).
///
/// # Example
///
/// ```
/// use burn::backend::{Autodiff, Flex};
/// use burn::nn::{Linear, LinearConfig};
/// use burn::optim::GradientsParams;
/// use burn::tensor::{Bool, Tensor};
/// use burn_mpric_scale::{DeviceAdamConfig, DeviceOptimizer};
///
/// type B = Autodiff<Flex>;
/// let device = Default::default();
/// let model: Linear<B> = LinearConfig::new(2, 1).init(&device);
/// let before = model.weight.val().into_data();
/// let mut optim = DeviceOptimizer::<_, Flex>::new(DeviceAdamConfig::new());
/// let flag = |value| Tensor::<Flex, 1, Bool>::from_bool([value].into(), &device);
///
/// let grads = || GradientsParams::from_grads(model.forward(Tensor::<B, 2>::ones([1, 2], &device)).sum().backward(), &model);
/// let skipped = optim.step(0.1, model.clone(), grads(), flag(false));
/// assert_eq!(skipped.weight.val().into_data(), before);
/// let applied = optim.step(0.1, model.clone(), grads(), flag(true));
/// assert_ne!(applied.weight.val().into_data(), before);
/// ```
#[derive(Clone)]
pub struct DeviceOptimizer<R: DeviceRule, B: Backend> {
    rule: R,
    states: DeviceOptimizerRecord<B>,
}

/// A [`DeviceOptimizer`]'s state, a Burn record: each parameter's state tensors, flat, by
/// parameter id (saved and loaded by any Burn recorder).
///
/// # Example
///
/// ```
/// use burn::backend::Flex;
/// use burn::record::{BinBytesRecorder, FullPrecisionSettings, Recorder};
/// use burn_mpric_scale::{DeviceAdamConfig, DeviceOptimizer, DeviceOptimizerRecord};
///
/// let optim = DeviceOptimizer::<_, Flex>::new(DeviceAdamConfig::new());
/// let recorder = BinBytesRecorder::<FullPrecisionSettings>::new();
/// let bytes = recorder.record(optim.to_record(), ()).unwrap();
/// let back: DeviceOptimizerRecord<Flex> = recorder.load(bytes, &Default::default()).unwrap();
/// assert!(back.is_empty());
/// ```
pub type DeviceOptimizerRecord<B> = HashMap<ParamId, Vec<Tensor<B, 1>>>;

impl<R: DeviceRule, B: Backend> DeviceOptimizer<R, B> {
    /// An optimizer with no state yet.
    ///
    /// # Example
    ///
    /// ```
    /// use burn::backend::Flex;
    /// use burn_mpric_scale::{DeviceOptimizer, DeviceSgdConfig};
    ///
    /// let optim = DeviceOptimizer::<_, Flex>::new(DeviceSgdConfig::new());
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
    /// use burn::backend::Flex;
    /// use burn_mpric_scale::{DeviceAdamWConfig, DeviceOptimizer};
    ///
    /// let optim = DeviceOptimizer::<_, Flex>::new(DeviceAdamWConfig::new());
    /// assert_eq!(optim.rule().weight_decay, 1e-4);
    /// ```
    pub fn rule(&self) -> &R {
        &self.rule
    }

    /// Steps `module` by `grads` (unscaled, at the parameters' dtypes) where `applied` (a
    /// one-element bool tensor on the gradients' device) is true; where it is false, the
    /// parameters and this optimizer's state stay as they were. Nothing is read.
    ///
    /// # Example
    ///
    /// ```
    /// use burn::backend::{Autodiff, Flex};
    /// use burn::module::{Module, Param};
    /// use burn::optim::GradientsParams;
    /// use burn::tensor::{Bool, Tensor};
    /// use burn_mpric_scale::{DeviceOptimizer, DeviceSgdConfig};
    ///
    /// type B = Autodiff<Flex>;
    /// #[derive(Module, Debug)]
    /// struct W<B: burn::tensor::backend::Backend> { w: Param<Tensor<B, 1>> }
    ///
    /// let device = Default::default();
    /// let model = W { w: Param::from_tensor(Tensor::<B, 1>::from_floats([1.0], &device).require_grad()) };
    /// let mut grads = GradientsParams::new();
    /// grads.register(model.w.id, Tensor::<Flex, 1>::from_floats([2.0], &device));
    /// let yes = Tensor::<Flex, 1, Bool>::from_bool([true].into(), &device);
    /// let model = DeviceOptimizer::new(DeviceSgdConfig::new()).step(0.5, model, grads, yes);
    /// assert_eq!(model.w.val().into_scalar(), 0.0);
    /// ```
    pub fn step<AB, M>(
        &mut self,
        lr: f64,
        module: M,
        mut grads: GradientsParams,
        applied: Tensor<B, 1, Bool>,
    ) -> M
    where
        AB: AutodiffBackend<InnerBackend = B>,
        M: AutodiffModule<AB>,
    {
        let mut mapper = Mapper::<R, B> {
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
    /// use burn::backend::Flex;
    /// use burn_mpric_scale::{DeviceAdamConfig, DeviceOptimizer};
    ///
    /// let optim = DeviceOptimizer::<_, Flex>::new(DeviceAdamConfig::new());
    /// assert!(optim.to_record().is_empty());
    /// ```
    pub fn to_record(&self) -> DeviceOptimizerRecord<B> {
        self.states.clone()
    }

    /// This optimizer with the state of a checkpoint.
    ///
    /// # Example
    ///
    /// ```
    /// use burn::backend::Flex;
    /// use burn_mpric_scale::{DeviceAdamConfig, DeviceOptimizer};
    ///
    /// let optim = DeviceOptimizer::<_, Flex>::new(DeviceAdamConfig::new());
    /// let restored = DeviceOptimizer::<_, Flex>::new(DeviceAdamConfig::new()).load_record(optim.to_record());
    /// assert!(restored.to_record().is_empty());
    /// ```
    #[must_use]
    pub fn load_record(mut self, record: DeviceOptimizerRecord<B>) -> Self {
        self.states = record;
        self
    }
}

struct Mapper<'a, R: DeviceRule, B: Backend> {
    rule: &'a R,
    states: &'a mut DeviceOptimizerRecord<B>,
    grads: &'a mut GradientsParams,
    applied: Tensor<B, 1, Bool>,
    lr: f64,
}

impl<R, AB> ModuleMapper<AB> for Mapper<'_, R, AB::InnerBackend>
where
    R: DeviceRule,
    AB: AutodiffBackend,
{
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<AB, D>>) -> Param<Tensor<AB, D>> {
        let (id, tensor, mapper) = param.consume();
        let Some(grad) = self.grads.remove::<AB::InnerBackend, D>(id) else {
            return Param::from_mapped_value(id, tensor, mapper);
        };
        let require_grad = tensor.is_require_grad();
        let inner = tensor.inner();
        let (shape, device, dtype) = (inner.shape(), inner.device(), inner.dtype());
        let len = shape.num_elements();
        let old = inner.reshape([len]);
        let wide = |t: Tensor<AB::InnerBackend, 1>| t.cast(FloatDType::F32);
        let state = self
            .states
            .remove(&id)
            .unwrap_or_else(|| self.rule.init_state(len, &device));
        let (new, new_state) = self.rule.update(
            self.lr,
            wide(old.clone()),
            wide(grad.reshape([len])),
            state.clone(),
        );
        let keep = |t: Tensor<AB::InnerBackend, 1>| match float_dtype(dtype) {
            Some(own) => t.cast(own),
            None => t,
        };
        let applied = self.applied.clone().to_device(&device);
        let select = |old: Tensor<AB::InnerBackend, 1>, new: Tensor<AB::InnerBackend, 1>| {
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
        if require_grad {
            tensor = tensor.require_grad();
        }
        Param::from_mapped_value(id, tensor, mapper)
    }
}
