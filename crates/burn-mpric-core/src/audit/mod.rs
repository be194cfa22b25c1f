//! The precision audit's findings: what a few measured training steps say about running a
//! model at f16 or bf16. The measuring is the editions' part (burn-mpric's
//! `audit` module); this part turns the measured [`Magnitudes`] into [`Verdict`]s.
//!
//! An op "runs low" when the policy under audit runs it at its compute dtype. Its outputs
//! are what an f16 run would have to hold: forward outputs above [`F16_MAX`] overflow, and
//! backward values (the gradients flowing through it) are multiplied by the loss scale, so
//! they must stay below [`F16_MAX`] at the scale and above f16's smallest subnormal, 2⁻²⁴.

mod magnitudes;
mod measured;
mod trial;
mod verdict;

pub use magnitudes::{
    BF16_MAX, BF16_MIN_NORMAL_EXP, F16_MAX, F16_MIN_NORMAL_EXP, F16_MIN_SUBNORMAL_EXP, Magnitudes,
};
pub use measured::measured_policy;
pub use trial::{GRACE_STEPS, HotSpot, Remedy, Trial, remedy_summary};
pub use verdict::{FLUSH_LIMIT, MAX_SCALE_EXP, MIN_SCALE_EXP, Verdict, param_verdicts, verdicts};

use std::fmt;

use serde::{Deserialize, Serialize};

/// The pass an op ran in.
///
/// ```
/// use burn_mpric_core::audit::Phase;
///
/// assert_eq!(Phase::Backward.to_string(), "backward");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// The forward pass (and the loss).
    Forward,
    /// The backward pass: the values are gradients.
    Backward,
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Phase::Forward => "forward",
            Phase::Backward => "backward",
        })
    }
}

/// What one op (one Burn method, in one pass, at one dtype) output over the audited steps.
///
/// ```
/// use burn_mpric_core::audit::{Magnitudes, OpStats, Phase};
///
/// let mut values = Magnitudes::default();
/// values.add(&[1e5]);
/// let row = OpStats {
///     method: "linear".into(),
///     op: Some("linear".into()),
///     phase: Phase::Forward,
///     dtype: "bf16".into(),
///     low: true,
///     calls: 1,
///     values,
/// };
/// assert!(row.overflows_f16());
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpStats {
    /// Burn's method name (`float_matmul`, `linear_weight_backward`, ...).
    pub method: String,
    /// The op table's name for it (`matmul`, `linear`), when the table lists it; only those
    /// ops take a per-op category override.
    pub op: Option<String>,
    /// The pass.
    pub phase: Phase,
    /// The dtype its outputs had in the measured run.
    pub dtype: String,
    /// Whether the audited policy runs it at the compute dtype.
    pub low: bool,
    /// Calls over the audited steps.
    pub calls: u64,
    /// Its outputs' values.
    pub values: Magnitudes,
}

impl OpStats {
    /// Whether the largest output exceeds f16's largest finite value.
    ///
    /// ```
    /// use burn_mpric_core::audit::{Magnitudes, OpStats, Phase};
    ///
    /// let row = OpStats { method: "float_exp".into(), op: Some("exp".into()), phase: Phase::Forward,
    ///     dtype: "f32".into(), low: false, calls: 1, values: Magnitudes::default() };
    /// assert!(!row.overflows_f16());
    /// ```
    pub fn overflows_f16(&self) -> bool {
        self.values.max_abs > F16_MAX
    }
}

/// The gradient of one parameter over the audited steps, unscaled (at a loss scale of 1).
///
/// ```
/// use burn_mpric_core::audit::{Magnitudes, ParamStats};
///
/// let row = ParamStats { path: "head.weight".into(), grad: Magnitudes::default() };
/// assert_eq!(row.path, "head.weight");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ParamStats {
    /// The parameter's module path (`encoder.layers.0.weight`), or its id when the model
    /// does not name it.
    pub path: String,
    /// Its gradient's values.
    pub grad: Magnitudes,
}

/// Everything an audit found: the measured ops and parameter gradients, and the verdicts.
///
/// ```
/// use burn_mpric_core::audit::AuditReport;
///
/// let report = AuditReport::new(3, "p=f32,c=f16,o=f32", "p=f32,c=bf16,o=f32", 65536.0, vec![], vec![]);
/// assert_eq!(report.scale_exp(), 16);
/// assert!(report.verdicts.is_empty(), "nothing measured, nothing to say");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditReport {
    /// Training steps measured.
    pub steps: usize,
    /// The policy under audit.
    pub audited: String,
    /// The policy the steps were measured at ([`measured_policy`]): the audited one with f16
    /// replaced by bf16 (f32 on a device without bf16), which has f32's range, so that values
    /// an f16 run would lose are seen.
    pub measured_at: String,
    /// The loss scale the backward shares are given at (the run's first scale).
    pub loss_scale: f32,
    /// The ops, forward first, each pass in the order the ops first ran.
    pub ops: Vec<OpStats>,
    /// The parameters' gradients, in module order.
    pub params: Vec<ParamStats>,
    /// What to do, most urgent first.
    pub verdicts: Vec<Verdict>,
}

impl AuditReport {
    /// A report of measured ops and gradients, with its verdicts.
    ///
    /// ```
    /// use burn_mpric_core::audit::AuditReport;
    ///
    /// let report = AuditReport::new(1, "f32", "f32", 1.0, vec![], vec![]);
    /// assert_eq!(report.steps, 1);
    /// ```
    pub fn new(
        steps: usize,
        audited: impl Into<String>,
        measured_at: impl Into<String>,
        loss_scale: f32,
        ops: Vec<OpStats>,
        params: Vec<ParamStats>,
    ) -> Self {
        let verdicts = verdicts(&ops, &params);
        Self {
            steps,
            audited: audited.into(),
            measured_at: measured_at.into(),
            loss_scale,
            ops,
            params,
            verdicts,
        }
    }

    /// The loss scale's binary exponent (rounded), by which backward exponents shift.
    ///
    /// ```
    /// use burn_mpric_core::audit::AuditReport;
    ///
    /// assert_eq!(AuditReport::new(1, "f32", "f32", 1.0, vec![], vec![]).scale_exp(), 0);
    /// ```
    pub fn scale_exp(&self) -> i32 {
        self.loss_scale.max(f32::MIN_POSITIVE).log2().round() as i32
    }

    /// The gradient values the audited policy computes at its compute dtype (the backward
    /// outputs of the table's ops that run low), unscaled: the histogram an f16 run's loss
    /// scale shifts. Ops outside the table (casts, reshapes, transposes) are left out: in the
    /// backward pass they also carry saved activations and weights, which no loss scale
    /// multiplies, and a gradient they carry was computed by a table op.
    ///
    /// ```
    /// use burn_mpric_core::audit::AuditReport;
    ///
    /// assert_eq!(AuditReport::new(1, "f32", "f32", 1.0, vec![], vec![]).low_gradients().values, 0);
    /// ```
    pub fn low_gradients(&self) -> Magnitudes {
        low_gradients(&self.ops)
    }
}

/// The backward outputs of the table's ops that run low, merged.
fn low_gradients(ops: &[OpStats]) -> Magnitudes {
    let mut all = Magnitudes::default();
    for row in ops
        .iter()
        .filter(|r| r.low && r.phase == Phase::Backward && r.op.is_some())
    {
        all.merge(&row.values);
    }
    all
}
