#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

#[cfg(feature = "audit")]
pub mod audit;
mod backend;
mod device;
#[cfg(feature = "export")]
pub mod export;
mod handler;
#[cfg(any(test, feature = "instrument"))]
pub mod instrument;
mod ops;
mod policy;
mod rules;
mod tensor;

pub use backend::MixedPrecision;
pub use device::MpDevice;
pub use handler::{
    Castable, HandlerError, LossScaleSetting, ModuleParams, PrecisionHandler, TrainStepOutput,
};
// The policy, its grammar and the op table are burn-mpric-core's, shared with the Burn 0.22
// edition; `policy` bridges their dtypes to Burn 0.21's.
pub use burn_mpric_core::editions::policy::*;
pub use burn_mpric_scale::BurnDType;
pub use policy::{ResolveOnDevice, half_dtype, supported_float_dtypes};
pub use rules::{MpSettings, SoftmaxPrecision, full_precision};
pub use tensor::{MpBool, MpFloat, MpInt, MpQuant, casts_made};

/// Casts every gradient of a module to its parameter's dtype: under mixed precision,
/// gradients come back in the dtype their backward op ran in (often the compute dtype), and
/// an optimizer must see them at the param dtype. Re-exported from `burn-mpric-scale`.
pub use burn_mpric_scale::cast_grads_to_param_dtype;

/// The loss-scaling crate, re-exported: `burn_mpric::scale::LossScaler` etc.
pub use burn_mpric_scale as scale;

/// Optimizer state and master weights at bf16 (burn-mpric-optim), re-exported:
/// `burn_mpric::optim::LowPrecisionOptimizer` etc.
pub use burn_mpric_optim as optim;

/// burn-train's `Learner` with loss scaling (burn-mpric-learner, feature `learner`),
/// re-exported: `burn_mpric::learner::Scaled` etc.
#[cfg(feature = "learner")]
pub use burn_mpric_learner as learner;

/// Multi-process training over MPI (feature `mpi`), from burn-mpric-cluster: in a module of
/// its own, so that `mpi::Reduction` does not clash with `burn::nn::loss::Reduction`. The
/// gradients' sum across processes is `scale::DataParallel`.
///
/// ```no_run
/// use burn_mpric::mpi::{MpiWorld, Reduction};
///
/// let world = MpiWorld::init()?;
/// let reduction = Reduction::Exact; // sums in rank order: the same bits at every world size
/// # let _ = (world, reduction);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[cfg(feature = "mpi")]
pub mod mpi {
    pub use burn_mpric_cluster::editions::mpi::*;
}
