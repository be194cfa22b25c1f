//! The optimizer step whose skip is decided on the device, with nothing read between backward
//! and the update. The skip is folded into the step's one-element coefficients (learning
//! rate, betas, bias corrections: on a skipped step they keep every value as it was), which
//! are computed once for each cohort of parameters stepped together rather than once per
//! parameter; a parameter's own update is then elementwise ops on its gradient, zeroed where
//! the step is skipped, as many as Burn's own optimizer runs, with no select.

use burn::module::{AutodiffModule, ModuleMapper, Param, ParamId};
use burn::optim::GradientsParams;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Bool, FloatDType, Tensor, Transaction};
use burn_mpric_core::optim::{Cohorts, StepCohorts};
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
/// the step's coefficients make the update an identity there (a zero learning rate, betas of
/// 1, the gradient zeroed), so no old value is held for a select.
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
    /// Parameters in one cohort hold the same one-element state (Adam's step count, SGD's
    /// first-step flag): their step's coefficients are computed once, not per parameter.
    cohorts: Cohorts<ParamId>,
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
            cohorts: Cohorts::new(),
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
            cohorts: &mut self.cohorts,
            grads: &mut grads,
            step: StepCohorts::new(),
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
        self.cohorts = cohorts_of(&record, self.rule.elementwise_slots());
        self.states = record;
        self
    }

    /// [`to_record`](Self::to_record) on the autodiff backend over `B`, where a Burn
    /// `Optimizer`'s record lives (its tensors untracked).
    ///
    /// # Example
    ///
    /// ```
    /// use burn::backend::{Autodiff, Flex};
    /// use burn_mpric_scale::{DeviceAdamConfig, DeviceOptimizer};
    ///
    /// let optim = DeviceOptimizer::<_, Flex>::new(DeviceAdamConfig::new());
    /// let record = optim.to_autodiff_record::<Autodiff<Flex>>();
    /// let restored = DeviceOptimizer::<_, Flex>::new(DeviceAdamConfig::new()).load_autodiff_record(record);
    /// assert!(restored.to_record().is_empty());
    /// ```
    pub fn to_autodiff_record<AB>(&self) -> DeviceOptimizerRecord<AB>
    where
        AB: AutodiffBackend<InnerBackend = B>,
    {
        self.states
            .iter()
            .map(|(id, state)| (*id, state.iter().cloned().map(Tensor::from_inner).collect()))
            .collect()
    }

    /// [`load_record`](Self::load_record) from a record on the autodiff backend over `B`
    /// ([`to_autodiff_record`](Self::to_autodiff_record)).
    #[must_use]
    pub fn load_autodiff_record<AB>(self, record: DeviceOptimizerRecord<AB>) -> Self
    where
        AB: AutodiffBackend<InnerBackend = B>,
    {
        let record = record
            .into_iter()
            .map(|(id, state)| (id, state.into_iter().map(Tensor::inner).collect()))
            .collect();
        self.load_record(record)
    }
}

/// Groups a loaded record's parameters by their one-element state, read once (a load is
/// off the step's path): equal values on one device make one cohort. Where the read fails,
/// each parameter is a cohort of its own, which is slower, never wrong.
fn cohorts_of<B: Backend>(
    record: &DeviceOptimizerRecord<B>,
    elementwise: usize,
) -> Cohorts<ParamId> {
    let ids: Vec<ParamId> = record.keys().copied().collect();
    let mut transaction = Transaction::<B>::default();
    for id in &ids {
        for scalar in record[id].iter().skip(elementwise) {
            transaction = transaction.register(scalar.clone());
        }
    }
    let values = transaction.try_execute().ok().map(|data| {
        data.into_iter()
            .map(|value| {
                value
                    .to_vec::<f32>()
                    .map(|v| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>())
            })
            .collect::<Result<Vec<_>, _>>()
    });
    let Some(Ok(values)) = values else {
        return Cohorts::separate(ids);
    };
    let per_param = record
        .values()
        .next()
        .map_or(0, |state| state.len() - elementwise);
    let keys = values.chunks(per_param.max(1));
    Cohorts::grouped(ids.iter().zip(keys).filter_map(|(id, key)| {
        let device = record[id].first()?.device();
        Some((*id, device, key.to_vec()))
    }))
}

/// One cohort's coefficients for this step.
struct Coefficients<B: Backend> {
    coefficients: Vec<Tensor<B, 1>>,
    next: Vec<Tensor<B, 1>>,
    /// Where the step is skipped (gradients are zeroed there before the update).
    skipped: Tensor<B, 1, Bool>,
}

struct Mapper<'a, R: DeviceRule, B: Backend> {
    rule: &'a R,
    states: &'a mut DeviceOptimizerRecord<B>,
    cohorts: &'a mut Cohorts<ParamId>,
    grads: &'a mut GradientsParams,
    /// The cohorts met in this step.
    step: StepCohorts<B::Device, Coefficients<B>>,
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
        // The update runs where the gradient is: a parameter whose shards were summed on
        // another device moves there with its state, as in Burn's `step_multi`.
        let device = grad.device();
        let inner = tensor.inner();
        let inner = match inner.device() == device {
            true => inner,
            false => inner.to_device(&device),
        };
        let (shape, dtype) = (inner.shape(), inner.dtype());
        let len = shape.num_elements();
        let wide = |t: Tensor<AB::InnerBackend, 1>| t.cast(FloatDType::F32);
        let (mut slots, was) = match self.states.remove(&id) {
            // A parameter without a cohort (none was recorded) is a cohort of its own.
            Some(state) => {
                let moved = state.first().is_some_and(|t| t.device() != device);
                let state = match moved {
                    true => state.into_iter().map(|t| t.to_device(&device)).collect(),
                    false => state,
                };
                (state, Some(self.cohorts.recorded(id)))
            }
            None => (self.rule.init_state(len, &device), None),
        };
        let scalars = slots.split_off(self.rule.elementwise_slots());
        // A rule without one-element state (plain SGD) has no step count to tell parameters
        // apart: they all share one cohort per device, as new parameters do.
        let was = was.filter(|_| !scalars.is_empty());
        let (rule, lr) = (self.rule, self.lr);
        let applied = &self.applied;
        let (becomes, cohort) = self.step.find_or_make(was, &device, self.cohorts, || {
            let applied = applied.clone().to_device(&device);
            let (coefficients, next) = rule.coefficients(lr, &scalars, Some(&applied), &device);
            Coefficients {
                coefficients,
                next,
                skipped: applied.bool_not(),
            }
        });
        let grad = grad
            .reshape([len])
            .mask_fill(cohort.skipped.clone().expand([len]), 0.0);
        let (new, mut state) = self.rule.apply(
            &cohort.coefficients,
            wide(inner.reshape([len])),
            wide(grad),
            slots,
        );
        let param = match float_dtype(dtype) {
            Some(own) => new.cast(own),
            None => new,
        };
        state.extend(cohort.next.iter().cloned());
        self.cohorts.set(id, becomes);
        self.states.insert(id, state);
        let mut tensor = Tensor::from_inner(param.reshape(shape));
        if require_grad {
            tensor = tensor.require_grad();
        }
        Param::from_mapped_value(id, tensor, mapper)
    }
}
