//! Mixed-precision training for [Burn](https://burn.dev) 0.22.
//!
//! Burn 0.22 removed the backend type parameter, so mixed precision works at the tensor
//! level here, through Burn 0.22's parameter reparameterization:
//!
//! - [`autocast()`] / [`Autocast`]: parameters stored (and updated, and saved) at the policy's
//!   param dtype, used by every layer at its compute dtype; the layers that stay at full
//!   precision, and why, are listed in the [`autocast`](mod@autocast) module docs;
//! - [`cast_for_compute`] / [`cast_for_output`]: a batch to the compute dtype before the
//!   forward pass, logits or a loss to the output dtype after it, over tensors, tuples,
//!   `Vec`s, arrays and `Option`s ([`CastFloat`]);
//! - [`LossScaler`]: loss scaling around Burn's `ModuleOptimizer`, one host read per step,
//!   skipped steps that leave parameters and optimizer state bit-identical, optional
//!   global-norm clipping, checkpointable state;
//! - [`Scaled`], [`LossScaleMetric`], [`SkippedStepsMetric`]: the same inside burn-train's
//!   `Learner`;
//! - [`LowPrecisionOptimizer`] ([`optim`]): Adam, AdamW or SGD with the state stored at bf16
//!   and the parameters kept at bf16, updated by stochastic rounding or a compensated (Kahan)
//!   update.
//!
//! The policy grammar, the `half` rule, the loss-scale state machines and the saved scaler
//! format come from `burn-mpric-core`, shared with the Burn 0.21 edition: both editions take
//! the same decisions and read each other's scaler state.
//!
//! # Example
//!
//! ```
//! use burn::nn::{LinearConfig, loss::{MseLoss, Reduction}};
//! use burn::optim::{AdamConfig, GradientsParams};
//! use burn::tensor::{DType, Device, Tensor};
//! use burn_mpric_022::{
//!     LossScalePreset, LossScaler, autocast, cast_for_compute, cast_for_output, resolve_policy,
//! };
//!
//! let device = Device::flex().autodiff();
//! let policy = resolve_policy("mixed_f16".parse().unwrap(), &device).unwrap();
//! let mut model = autocast(LinearConfig::new(4, 1).init(&device), policy).unwrap();
//! let mut optim = AdamConfig::new().init();
//! let mut scaler = LossScaler::for_policy(LossScalePreset::Auto, &policy).unwrap(); // dynamic for f16
//!
//! let x = Tensor::<2>::ones([8, 4], &device);
//! let y = Tensor::<2>::zeros([8, 1], &device);
//! let prediction = model.forward(cast_for_compute(x, &policy)); // f16 matmul
//! let prediction = cast_for_output(prediction, &policy); // the loss at f32
//! let loss = MseLoss::new().forward(prediction, y, Reduction::Mean);
//! let scaled = scaler.scale_loss(loss);
//! let grads = GradientsParams::from_grads(scaled.backward(), &model);
//! let (next, outcome) = scaler.step(&mut optim, 1e-3, model, grads);
//! model = next;
//! let outcome = outcome.unwrap();
//! // At 2^15 an f16 weight gradient can overflow: the step is then skipped, nothing moves,
//! // and the scale halves. Otherwise the step is applied at the same scale.
//! assert!(outcome.is_applied() || outcome.next_scale == 16384.0);
//! assert_eq!(model.weight.base().dtype(), DType::F32); // stored at f32
//! assert_eq!(model.weight.val().dtype(), DType::F16); // used at f16
//! ```
#![warn(missing_docs)]

pub mod audit;
pub mod autocast;
mod cast;
mod check;
mod data_parallel;
mod device;
mod dtype;
mod error;
pub mod export;
mod grad_paths;
mod observe;
pub mod optim;
mod overflow;
mod scaler;
mod train;

pub use autocast::{
    Autocast, AutocastError, ComputeCast, FullPrecision, KeptBecause, ParamPlan, autocast,
};
pub use cast::{CastFloat, cast_for_compute, cast_for_output};
pub use data_parallel::DataParallel;
pub use device::{
    DeviceLossScaler, DeviceOptimizer, DeviceOptimizerRecord, DeviceRule, DeviceScale,
};
pub use dtype::{from_burn_dtype, resolve_policy, supported_float_dtypes, to_burn_dtype};
pub use error::StepError;
pub use optim::{
    HeldBytes, LowPrecisionOptimizer, LowPrecisionState, held_bytes, kahan_split, stochastic_round,
    store_params,
};
pub use overflow::find_overflow;
pub use scaler::{CheckedGrads, LossScaler};
pub use train::{
    DevicePathOptimizer, LossScaleMetric, LossStep, ScaleRecord, Scaled, ScaledOutput,
    ScalerHandle, SkipCauseMetric, SkippedStepsMetric,
};

// The policy, its grammar and the loss-scale rules without tensors are burn-mpric-core's,
// shared with the Burn 0.21 edition: re-exported so that this crate is a user's one
// dependency besides Burn, the same list the 0.21 crates re-export.
pub use burn_mpric_core::editions::policy::*;
pub use burn_mpric_core::editions::scale::*;

/// Multi-process training over MPI (feature `mpi`), from burn-mpric-cluster: in a module of
/// its own, so that `mpi::Reduction` does not clash with `burn::nn::loss::Reduction`.
///
/// ```no_run
/// use burn_mpric_022::mpi::{MpiWorld, Reduction};
///
/// let world = MpiWorld::init()?;
/// let reduction = Reduction::Exact; // sums in rank order: the same bits at every world size
/// # let _ = (world, reduction);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[cfg(feature = "mpi")]
pub mod mpi {
    pub use burn_mpric_cluster::{
        ClusterError, Mpi, MpiWorld, Reduction, RunSpec, Timeouts, Transport, end_mpi,
        launched_by_mpi,
    };
}

#[doc(hidden)]
pub mod __private {
    pub use burn::train::metric::Adaptor;
}
