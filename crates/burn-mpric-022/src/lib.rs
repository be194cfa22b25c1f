#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

pub mod audit;
pub mod autocast;
mod cast;
mod data_parallel;
mod device;
mod dtype;
mod error;
pub mod export;
mod grad_paths;
mod observe;
pub mod optim;
mod overflow;
mod probe;
mod scaler;
mod train;
mod unscale;

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
    pub use burn_mpric_cluster::editions::mpi::*;
}

#[doc(hidden)]
pub mod __private {
    pub use burn::train::metric::Adaptor;
}
