//! The optimizer step whose skip is decided on the device, with nothing read between backward
//! and the update. The skip is folded into the step's one-element coefficients (learning
//! rate, betas, bias corrections: on a skipped step they keep every value as it was), which
//! are computed once for each cohort of parameters stepped together rather than once per
//! parameter; a parameter's own update is then elementwise ops on its gradient, zeroed where
//! the step is skipped, as many as Burn's own optimizer runs, with no select.

use std::collections::HashMap;

use burn::module::{Module, ModuleMapper, Param, ParamId};
use burn::optim::GradientsParams;
use burn::tensor::{Bool, Device, FloatDType, Tensor, Transaction};
use burn_mpric_core::optim::{Cohorts, StepCohorts};

use super::rules::DeviceRule;
use crate::dtype::plain_float;

/// An optimizer whose step is applied or discarded by a flag on the device: Adam, AdamW or
/// SGD (burn-mpric-core's [`DeviceAdamConfig`](burn_mpric_core::scale::DeviceAdamConfig),
/// [`DeviceAdamWConfig`](burn_mpric_core::scale::DeviceAdamWConfig),
/// [`DeviceSgdConfig`](burn_mpric_core::scale::DeviceSgdConfig)) computed at f32 whatever the
/// parameters' dtype, each parameter keeping the dtype it is stored at.
///
/// Where the flag is false, the parameters and every state tensor (moments, the betas'
/// powers that stand for Adam's step count, SGD's velocity) are the old values, bit for bit:
/// the step's coefficients make the update an identity there (a zero learning rate, betas of
/// 1, the gradient zeroed), so no old value is held for a select.
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
    /// Parameters in one cohort hold the same one-element state (Adam's step count, SGD's
    /// first-step flag): their step's coefficients are computed once, not per parameter.
    cohorts: Cohorts<ParamId>,
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
            cohorts: Cohorts::new(),
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
        self.cohorts = cohorts_of(&record, self.rule.elementwise_slots());
        self.states = record;
        self
    }
}

/// Groups a loaded record's parameters by their one-element state, read once (a load is
/// off the step's path): equal values on one device make one cohort. Where the read fails,
/// each parameter is a cohort of its own, which is slower, never wrong.
fn cohorts_of(record: &DeviceOptimizerRecord, elementwise: usize) -> Cohorts<ParamId> {
    let ids: Vec<ParamId> = record.keys().copied().collect();
    let mut transaction = Transaction::default();
    for id in &ids {
        for scalar in record[id].iter().skip(elementwise) {
            transaction = transaction.register(scalar.clone());
        }
    }
    let bits = |data: burn::tensor::TensorData| {
        data.try_to_vec::<f32>()
            .map(|values| values.iter().map(|x| x.to_bits()).collect::<Vec<_>>())
    };
    let values = transaction
        .try_execute()
        .ok()
        .map(|data| data.into_iter().map(bits).collect::<Result<Vec<_>, _>>());
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
struct Coefficients {
    coefficients: Vec<Tensor<1>>,
    next: Vec<Tensor<1>>,
    /// Where the step is skipped (gradients are zeroed there before the update).
    skipped: Tensor<1, Bool>,
}

struct Mapper<'a, R: DeviceRule> {
    rule: &'a R,
    states: &'a mut DeviceOptimizerRecord,
    cohorts: &'a mut Cohorts<ParamId>,
    grads: &'a mut GradientsParams,
    /// The cohorts met in this step.
    step: StepCohorts<Device, Coefficients>,
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
        let wide = |t: Tensor<1>| t.cast(FloatDType::F32);
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
            .to_device(&device)
            .reshape([len])
            .mask_fill(cohort.skipped.clone().expand([len]), 0.0);
        let (new, mut state) = self.rule.apply(
            &cohort.coefficients,
            wide(inner.reshape([len])),
            wide(grad),
            slots,
        );
        let param = match plain_float(dtype) {
            Some(own) => new.cast(own),
            None => new,
        };
        state.extend(cohort.next.iter().cloned());
        self.cohorts.set(id, becomes);
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
