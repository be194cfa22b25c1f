//! The optimizers a recipe names, built and handed to work that is generic over their type.

use burn::backend::Autodiff;
use burn::optim::decay::WeightDecayConfig;
use burn::optim::momentum::MomentumConfig;
use burn::optim::{AdamConfig, AdamWConfig, Optimizer, SgdConfig};
use burn::tensor::backend::Backend;
use burn_mpric::MixedPrecision;
use burn_mpric_optim::{LowPrecisionOptimizer, OptimizerPrecision, store_params};
use burn_mpric_scale::{DeviceAdamConfig, DeviceAdamWConfig, DeviceRule, DeviceSgdConfig};

use crate::models::Model;
use crate::recipe::{OptimizerConfig, Recipe};

/// The training backend: autodiff over the mixed-precision decorator.
pub(crate) type Ad<B> = Autodiff<MixedPrecision<B>>;

/// Work generic over the optimizer type.
pub(crate) trait OptimizerTask<B: Backend> {
    type Output;
    fn run<O: Optimizer<Model<Ad<B>>, Ad<B>>>(self, optim: O) -> Self::Output;
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
        return match config {
            OptimizerConfig::Adam(s) => {
                let mut rule = DeviceAdamConfig::new()
                    .with_betas(s.beta1 as f32, s.beta2 as f32)
                    .with_epsilon(s.epsilon as f32);
                let weight_decay = config.weight_decay();
                if weight_decay > 0.0 {
                    rule = rule.with_weight_decay(weight_decay as f32);
                }
                low_precision(rule, precision, task)
            }
            OptimizerConfig::AdamW(s) => {
                let rule = DeviceAdamWConfig::new()
                    .with_betas(s.beta1 as f32, s.beta2 as f32)
                    .with_epsilon(s.epsilon as f32)
                    .with_weight_decay(config.weight_decay() as f32);
                low_precision(rule, precision, task)
            }
            OptimizerConfig::Sgd(s) => {
                let mut rule = DeviceSgdConfig::new();
                if s.momentum > 0.0 {
                    rule = rule.with_momentum(s.momentum, 0.0, s.nesterov);
                }
                if s.weight_decay > 0.0 {
                    rule = rule.with_weight_decay(s.weight_decay as f32);
                }
                low_precision(rule, precision, task)
            }
        };
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
