//! Optimizer state and master weights below f32, for Burn 0.21 (the decorator's edition).
//!
//! With Adam at f32 every parameter costs 16 bytes: the weight (4), its gradient (4) and two
//! moments (8). [`LowPrecisionOptimizer`] wraps an update rule (Adam, AdamW, SGD with or
//! without momentum: the device path's rules, which follow Burn's) as a Burn
//! `SimpleOptimizer`, so it works wherever Burn's optimizers do (own loops, the loss scaler,
//! Burn's Learner, `DataParallel`), and
//!
//! - stores the per-element state at [`StateDtype`]: f32 (as Burn) or bf16, computing every step
//!   at f32 inside;
//! - keeps the parameters per [`MasterWeights`]: at f32 (as Burn), or at bf16 with no f32 copy,
//!   each update applied by stochastic rounding (unbiased; the random stream is seeded and its
//!   position saved with the state, so a resumed run repeats the uninterrupted one bit for bit)
//!   or by a compensated (Kahan) update with a bf16 compensation buffer.
//!
//! Adam with bf16 state and stochastic rounding costs 8 bytes per parameter (gradient
//! included), with Kahan 10.
//!
//! Why not Burn's own `Adam` struct: Burn keeps some optimizers' state private (SGD's
//! momentum velocity, RmsProp's momentum buffer), so a wrapper over Burn's types could not
//! reach the tensors to store them at bf16. The device path's rules are the same arithmetic
//! with the state as plain tensors (tested against Burn's Adam, AdamW and SGD).
//!
//! # Example
//!
//! ```
//! use burn::backend::{Autodiff, Flex};
//! use burn::nn::{Linear, LinearConfig};
//! use burn::optim::{GradientsParams, Optimizer};
//! use burn::tensor::{DType, Tensor};
//! use burn_mpric::{MixedPrecision, Policy};
//! use burn_mpric_optim::{LowPrecisionOptimizer, MasterWeights, OptimizerPrecision, StateDtype};
//! use burn_mpric_scale::DeviceAdamConfig;
//!
//! type B = Autodiff<MixedPrecision<Flex>>;
//! let device = MixedPrecision::<Flex>::device(Default::default(), "p=f32,c=bf16,o=f32".parse::<Policy>()?)?;
//! let precision = OptimizerPrecision::new(StateDtype::Bf16, MasterWeights::Stochastic);
//! let lp = LowPrecisionOptimizer::new(DeviceAdamConfig::new(), precision)?;
//! let model: Linear<B> = lp.store_params(LinearConfig::new(4, 2).init(&device));
//! assert_eq!(model.weight.val().dtype(), DType::BF16);
//!
//! let mut optim = lp.init::<B, Linear<B>>();
//! let loss = model.forward(Tensor::<B, 2>::ones([3, 4], &device)).sum();
//! let grads = GradientsParams::from_grads(loss.backward(), &model);
//! let model = optim.step(1e-2, model, grads);
//! assert_eq!(model.weight.val().dtype(), DType::BF16);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![warn(missing_docs)]

mod draws;
mod held;
mod optimizer;
mod params;
mod round;

// The precision settings and the update rules (as the device path's optimizer takes them),
// burn-mpric-core's: the same list in both editions.
pub use burn_mpric_core::editions::optim::*;
pub use draws::device_uniforms;
pub use held::held_bytes;
pub use optimizer::{LowPrecisionOptimizer, LowPrecisionState};
pub use params::store_params;
pub use round::{kahan_split, stochastic_round};
