//! Optimizer state and master weights below f32, without Burn: the settings
//! ([`OptimizerPrecision`]: the state's dtype, how parameters are kept), their text forms and
//! checks, the bytes each parameter costs, and the seeded random stream of stochastic rounding
//! ([`RoundingStream`]). Each edition does the tensor work.
//!
//! With Adam at f32, a parameter costs 16 bytes: the f32 weight (4), its gradient (4) and two
//! moments (8). Storing the moments at bf16 saves 4; keeping the weight itself at bf16 (no f32
//! copy) saves 4 more on the weight and 2 on its gradient, provided the updates that bf16 rounds
//! away are not lost: bf16's spacing at 1.0 is 2^-7, so an update of 1e-3 to a weight of 1.0
//! vanishes under round-to-nearest. Stochastic rounding rounds up with the probability of the
//! distance to the lower neighbour (unbiased: the weight moves by the update on average); a
//! compensated (Kahan) update keeps what the rounding dropped in a bf16 buffer and adds it back.
//!
//! # Example
//!
//! ```
//! use burn_mpric_core::optim::{MasterWeights, OptimizerPrecision, StateDtype};
//!
//! let precision = OptimizerPrecision::new(StateDtype::Bf16, MasterWeights::Stochastic);
//! // Adam keeps two moments per parameter.
//! assert_eq!(precision.bytes_per_parameter(2).total(), 8);
//! assert_eq!(OptimizerPrecision::default().bytes_per_parameter(2).total(), 16);
//! ```

mod cohorts;
mod device_draws;
mod lane_rules;
mod precision;
mod rounding;
mod slots;

pub use cohorts::{Cohorts, StepCohorts};
pub use device_draws::{DrawKeys, UNIT};
pub use lane_rules::LaneRule;
pub use precision::{
    BytesPerParameter, DrawSource, HeldBytes, MasterWeights, OptimizerPrecision, PrecisionError,
    StateDtype,
};
pub use rounding::RoundingStream;
pub use slots::StateSlots;
