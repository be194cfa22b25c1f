//! The optimizers a recipe names, built and handed to work that is generic over their type.

use burn::backend::Autodiff;
use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::decay::WeightDecayConfig;
use burn::optim::momentum::MomentumConfig;
use burn::optim::{
    AdamConfig, AdamWConfig, GradientsParams, MultiGradientsParams, Optimizer, SgdConfig,
};
use burn::tensor::backend::Backend;
use burn::tensor::{Bool, Tensor};
use burn_mpric::MixedPrecision;
use burn_mpric_optim::{LowPrecisionOptimizer, OptimizerPrecision, store_params};
use burn_mpric_scale::{
    AnyDeviceRule, DeviceAdamConfig, DeviceAdamWConfig, DeviceOptimizer, DeviceOptimizerRecord,
    DeviceRule, DeviceSgdConfig,
};

use crate::models::Model;
use crate::recipe::{OptimizerConfig, Recipe};

/// The training backend: autodiff over the mixed-precision decorator.
pub(crate) type Ad<B> = Autodiff<MixedPrecision<B>>;

/// Work generic over the optimizer type.
pub(crate) trait OptimizerTask<B: Backend> {
    type Output;
    fn run<O: Optimizer<Model<Ad<B>>, Ad<B>>>(self, optim: O) -> Self::Output;

    /// The device path's optimizer, for a recipe with `sync_every`: by default a Burn
    /// optimizer whose every step is applied.
    fn run_device(self, optim: DeviceOptim<B>) -> Self::Output
    where
        Self: Sized,
    {
        self.run(optim)
    }
}

/// The optimizer precision of `recipe`: its `[optimizer]` state and master weights, the
/// stochastic-rounding stream seeded by the recipe's seed.
pub(crate) fn precision_of(recipe: &Recipe) -> OptimizerPrecision {
    recipe.optimizer.precision().with_seed(recipe.seed)
}

/// `model` with its parameters at the dtype the recipe's master weights keep them at (bf16
/// for `stochastic` and `kahan`): for a new model and for one loaded from a checkpoint.
pub(crate) fn stored<B: Backend>(recipe: &Recipe, model: Model<Ad<B>>) -> Model<Ad<B>> {
    store_params(recipe.optimizer.precision().master, model)
}

/// Builds the optimizer `recipe` describes and runs `task` with it: Burn's own optimizers at
/// f32 precision (as before), the low-precision wrapper over the same update rules otherwise.
pub(crate) fn with_optimizer<B: Backend, T: OptimizerTask<B>>(
    recipe: &Recipe,
    task: T,
) -> T::Output {
    let config = recipe.optimizer;
    let precision = precision_of(recipe);
    if !precision.is_f32() {
        return low_precision(device_rule(config), precision, task);
    }
    if recipe.sync_every.is_some() {
        return task.run_device(DeviceOptim(DeviceOptimizer::new(device_rule(config))));
    }
    let weight_decay = config.weight_decay();
    match config {
        OptimizerConfig::Adam(s) => task.run(
            AdamConfig::new()
                .with_beta_1(s.beta1 as f32)
                .with_beta_2(s.beta2 as f32)
                .with_epsilon(s.epsilon as f32)
                .with_weight_decay(
                    (weight_decay > 0.0).then(|| WeightDecayConfig::new(weight_decay as f32)),
                )
                .init(),
        ),
        OptimizerConfig::AdamW(s) => task.run(
            AdamWConfig::new()
                .with_beta_1(s.beta1 as f32)
                .with_beta_2(s.beta2 as f32)
                .with_epsilon(s.epsilon as f32)
                .with_weight_decay(weight_decay as f32)
                .init(),
        ),
        OptimizerConfig::Sgd(s) => task.run(
            SgdConfig::new()
                .with_momentum((s.momentum > 0.0).then(|| {
                    MomentumConfig::new()
                        .with_momentum(s.momentum)
                        .with_dampening(0.0)
                        .with_nesterov(s.nesterov)
                }))
                .with_weight_decay(
                    (weight_decay > 0.0).then(|| WeightDecayConfig::new(weight_decay as f32)),
                )
                .init(),
        ),
    }
}

/// The device path's update rule for the optimizer `config` names (its settings as Burn's).
fn device_rule(config: OptimizerConfig) -> AnyDeviceRule {
    match config {
        OptimizerConfig::Adam(s) => {
            let mut rule = DeviceAdamConfig::new()
                .with_betas(s.beta1 as f32, s.beta2 as f32)
                .with_epsilon(s.epsilon as f32);
            let weight_decay = config.weight_decay();
            if weight_decay > 0.0 {
                rule = rule.with_weight_decay(weight_decay as f32);
            }
            rule.into()
        }
        OptimizerConfig::AdamW(s) => DeviceAdamWConfig::new()
            .with_betas(s.beta1 as f32, s.beta2 as f32)
            .with_epsilon(s.epsilon as f32)
            .with_weight_decay(config.weight_decay() as f32)
            .into(),
        OptimizerConfig::Sgd(s) => {
            let mut rule = DeviceSgdConfig::new();
            if s.momentum > 0.0 {
                rule = rule.with_momentum(s.momentum, 0.0, s.nesterov);
            }
            if s.weight_decay > 0.0 {
                rule = rule.with_weight_decay(s.weight_decay as f32);
            }
            rule.into()
        }
    }
}

/// The device path's optimizer (a recipe with `sync_every`) as a Burn optimizer, for work
/// that needs one (a checkpoint's optimizer state, an audit's steps): each of its steps is
/// applied. The training loop steps the optimizer inside with the device's skip flag.
#[derive(Clone)]
pub(crate) struct DeviceOptim<B: Backend>(
    pub(crate) DeviceOptimizer<AnyDeviceRule, MixedPrecision<B>>,
);

impl<B: Backend> Optimizer<Model<Ad<B>>, Ad<B>> for DeviceOptim<B> {
    type Record = DeviceOptimizerRecord<Ad<B>>;

    fn step(&mut self, lr: f64, module: Model<Ad<B>>, grads: GradientsParams) -> Model<Ad<B>> {
        let Some(device) = module.devices().into_iter().next() else {
            return module;
        };
        let applied = Tensor::<MixedPrecision<B>, 1, Bool>::from_bool([true].into(), &device);
        self.0.step::<Ad<B>, _>(lr, module, grads, applied)
    }

    fn step_multi(
        &mut self,
        lr: f64,
        module: Model<Ad<B>>,
        grads: MultiGradientsParams,
    ) -> Model<Ad<B>> {
        let grads = summed_shards(&module, grads);
        self.step(lr, module, grads)
    }

    fn to_record(&self) -> Self::Record {
        self.0.to_autodiff_record()
    }

    fn load_record(self, record: Self::Record) -> Self {
        Self(self.0.load_autodiff_record(record))
    }
}

/// Each parameter's shards summed where Burn's optimizers sum them.
fn summed_shards<B: Backend>(model: &Model<Ad<B>>, grads: MultiGradientsParams) -> GradientsParams {
    struct Summer(MultiGradientsParams, GradientsParams);
    impl<B: Backend> ModuleVisitor<Ad<B>> for Summer {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<Ad<B>, D>>) {
            if let Some((grad, _)) = self.0.remove::<MixedPrecision<B>, D>(param.id) {
                self.1.register::<MixedPrecision<B>, D>(param.id, grad);
            }
        }
    }
    let mut summer = Summer(grads, GradientsParams::new());
    model.visit(&mut summer);
    summer.1
}

fn low_precision<B: Backend, R: DeviceRule, T: OptimizerTask<B>>(
    rule: R,
    precision: OptimizerPrecision,
    task: T,
) -> T::Output {
    // The recipe was validated: the rule keeps the state its precision stores.
    let optim = LowPrecisionOptimizer::new(rule, precision)
        .unwrap_or_else(|e| unreachable!("a validated recipe: {e}"));
    task.run(optim.init::<Ad<B>, Model<Ad<B>>>())
}
