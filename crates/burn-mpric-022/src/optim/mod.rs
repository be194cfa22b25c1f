//! Optimizer state and master weights below f32, for Burn 0.22 (the same API as the Burn 0.21
//! edition's `burn-mpric-optim`).
//!
//! With Adam at f32 every parameter costs 16 bytes: the weight (4), its gradient (4) and two
//! moments (8). [`LowPrecisionOptimizer`] wraps an update rule (Adam, AdamW, SGD with or
//! without momentum: the device path's rules, [`DeviceRule`](crate::DeviceRule), which follow
//! Burn's) as a Burn 0.22 per-parameter `Optimizer`, so it works wherever Burn's optimizers do
//! (a `ModuleOptimizer` in your own loop, the [`LossScaler`](crate::LossScaler), burn-train's
//! `Learner`), and
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
//! The settings, the bytes per parameter and the rounding stream are burn-mpric-core's
//! (`burn_mpric_core::optim`), re-exported here, so both editions read the same text forms and
//! draw the same random numbers.
//!
//! # Example
//!
//! ```
//! use burn::nn::LinearConfig;
//! use burn::optim::GradientsParams;
//! use burn::tensor::{DType, Device, Tensor};
//! use burn_mpric_022::optim::{
//!     DeviceAdamConfig, LowPrecisionOptimizer, MasterWeights, OptimizerPrecision, StateDtype,
//! };
//! use burn_mpric_022::{ResolvedPolicy, autocast, cast_for_compute};
//!
//! let device = Device::flex().autodiff();
//! let policy: ResolvedPolicy = "mixed_bf16".parse()?;
//! let precision = OptimizerPrecision::new(StateDtype::Bf16, MasterWeights::Stochastic);
//! let lp = LowPrecisionOptimizer::new(DeviceAdamConfig::new(), precision)?;
//! // Autocast first: it stores parameters at the policy's param dtype (f32 here).
//! let model = lp.store_params(autocast(LinearConfig::new(4, 2).init(&device), policy)?);
//! assert_eq!(model.weight.base().dtype(), DType::BF16);
//!
//! let mut optim = lp.init();
//! let x = cast_for_compute(Tensor::<2>::ones([3, 4], &device), &policy);
//! let loss = model.forward(x).sum();
//! let grads = GradientsParams::from_grads(loss.backward(), &model);
//! let model = optim.step(1e-2, model, grads);
//! assert_eq!(model.weight.base().dtype(), DType::BF16);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

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
