//! Loss scaling for [Burn](https://burn.dev) as a gradients transform.
//!
//! Low-precision (f16) training loses small gradients to underflow. Loss scaling multiplies the
//! loss by a scale `S` before backward, so every gradient is `S` times larger, then divides the
//! gradients by `S` before the optimizer step. A *dynamic* scale grows after a run of finite steps
//! and backs off (skipping the step) when a gradient overflows.
//!
//! This crate provides the tensor side of loss scaling for Burn 0.21; the state machines,
//! presets and saved state come from `burn-mpric-core`, which the Burn 0.22 edition shares:
//!
//! - three loss scales with functional state ([`NoOpLossScale`], [`StaticLossScale`],
//!   [`DynamicLossScale`], and the [`LossScale`] enum over them), configured by a
//!   [`LossScaleConfig`] with presets that reproduce PyTorch, jmp, eformer, Keras, Flax, DeepSpeed
//!   and Megatron exactly (the scale always stays a finite, positive f32);
//! - the one-pass gradient transform [`unscale_grads`] (cast to the parameter dtype, unscale,
//!   check finiteness, for gradients of any rank and float dtype; small gradients are packed
//!   into flat buffers, so a step costs one multiply and one reduction per buffer and one host
//!   read) and [`cast_grads_to_param_dtype`];
//! - [`LossScaler`], the step contract around any Burn optimizer: skip non-finite steps (params
//!   and optimizer state untouched), update the scale, report a [`StepOutcome`];
//! - global-norm clipping ([`GlobalNormClip`]), one decision for several replicas
//!   ([`LossScaler::step_multi`], and `LossScaler::step_all_reduced` over burn-collective),
//!   and checkpointable state ([`LossScalerRecord`], which embeds in Burn records, and
//!   [`LossScaler::save_file`] / [`LossScaler::load_file`], which never trust a file's content).
//!
//! # Example
//!
//! ```
//! use burn::backend::{Autodiff, Flex};
//! use burn::nn::{Linear, LinearConfig, loss::{MseLoss, Reduction}};
//! use burn::optim::{AdamConfig, GradientsParams};
//! use burn::tensor::Tensor;
//! use burn_mpric_scale::{LossScaleConfig, LossScaler};
//!
//! type B = Autodiff<Flex>;
//! let device = Default::default();
//! let mut model: Linear<B> = LinearConfig::new(3, 1).init(&device);
//! let mut optim = AdamConfig::new().init();
//! let mut scaler = LossScaler::dynamic(LossScaleConfig::torch()).unwrap();
//!
//! let x = Tensor::<B, 2>::from_floats([[1.0, 2.0, 3.0]], &device);
//! let y = Tensor::<B, 2>::from_floats([[1.0]], &device);
//! for _ in 0..3 {
//!     let loss = MseLoss::new().forward(model.forward(x.clone()), y.clone(), Reduction::Mean);
//!     let scaled = scaler.scale_loss(loss);
//!     let grads = GradientsParams::from_grads(scaled.backward(), &model);
//!     let (next, outcome) = scaler.step(&mut optim, 1e-2, model, grads);
//!     model = next;
//!     assert!(outcome.unwrap().is_applied());
//! }
//! assert_eq!(scaler.stats().steps, 3);
//! ```
//!
//! # Multiple devices
//!
//! Every replica of a data-parallel run must take the same decision, or the replicas drift
//! apart: if any replica saw a non-finite gradient, all of them skip the step and all of them
//! back off. The combined flag is the logical AND of the replicas' finiteness flags (the maximum,
//! or PyTorch's sum, of their `found_inf` values), read once.
//!
//! Inside one process, when the gradients of all replicas are at hand (burn-train's
//! `OptimSharded`), [`LossScaler::step_multi`] checks them together; [`all_replicas_finite`]
//! and [`combine_finite_flags`] do the same for hand-written loops: move the on-device flags to
//! one device, AND them, read the result once.
//!
//! With the `collective` feature, replicas that run on their own threads or processes use
//! burn-collective, Burn's collective-operations crate: [`LossScaler::step_all_reduced`] sums
//! the gradients (and the loss) over all peers with its all-reduce and decides on the sum, so
//! the decision is the same everywhere; a loop that checks each replica's own gradients first
//! (after unscaling them) combines the answers with `all_peers_finite`. The feature is off by
//! default: burn-collective brings a network stack (axum, tokio-tungstenite) for its multi-node
//! mode.
//!
//! # Burn details worth knowing
//!
//! - The generic backend parameter of a `#[derive(Module)]` struct must be named `B`.
//! - Parameters are initialized lazily: clone a module only after its parameters were read (for
//!   example after a forward pass), or the clone draws its own random values.
//! - Gradients come back in the dtype their backward produced (for example f16 for an f32
//!   parameter under mixed precision): [`cast_grads_to_param_dtype`] and [`unscale_grads`]
//!   return them in the parameter's dtype.
#![warn(missing_docs)]

mod clip;
#[cfg(feature = "collective")]
mod collective;
mod data_parallel;
mod device;
mod dtype;
mod error;
mod flat;
mod keep_dtype;
mod overflow;
mod pack;
mod probe;
mod read;
mod record;
mod replicas;
mod scaler;
mod scaling;
mod unscale;

pub use clip::{GlobalNormClip, global_grad_norm};
#[cfg(feature = "collective")]
pub use collective::{all_peers_finite, sum_over_peers};
pub use data_parallel::DataParallel;
pub use device::{
    Burn021, DeviceLossScaler, DeviceOptimizer, DeviceOptimizerRecord, DeviceRule, DeviceScale,
};
pub use dtype::BurnDType;
pub use error::StepError;
pub use flat::FlatGrads;
pub use keep_dtype::apply_gradients;
pub use overflow::{find_overflow, named_grads};
pub use record::LossScalerRecord;
pub use replicas::{all_replicas_finite, combine_finite_flags};
pub use scaler::{CheckedGrads, LossScaler};
pub use scaling::LossScaling;
pub use unscale::{UnscaledGrads, cast_grads_to_param_dtype, unscale_grads};

// The rules without tensors live once, in burn-mpric-core, for both editions (the list
// both re-export: `burn_mpric_core::editions`).
pub use burn_mpric_core::editions::scale::*;
