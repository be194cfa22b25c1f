//! The optimizers a recipe names, built and handed to work that is generic over their type.

use burn::backend::Autodiff;
use burn::optim::decay::WeightDecayConfig;
use burn::optim::momentum::MomentumConfig;
use burn::optim::{AdamConfig, AdamWConfig, Optimizer, SgdConfig};
use burn::tensor::backend::Backend;
use burn_mpric::MixedPrecision;

use crate::models::Model;
use crate::recipe::OptimizerConfig;

/// The training backend: autodiff over the mixed-precision decorator.
pub(crate) type Ad<B> = Autodiff<MixedPrecision<B>>;

/// Work generic over the optimizer type.
pub(crate) trait OptimizerTask<B: Backend> {
    type Output;
    fn run<O: Optimizer<Model<Ad<B>>, Ad<B>>>(self, optim: O) -> Self::Output;
}

/// Builds the optimizer a config describes and runs `task` with it.
pub(crate) fn with_optimizer<B: Backend, T: OptimizerTask<B>>(
    config: OptimizerConfig,
    task: T,
) -> T::Output {
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
