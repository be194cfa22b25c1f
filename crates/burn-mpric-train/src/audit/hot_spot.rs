//! Where f16 breaks in a recipe, as the 0.21 edition sees it: the op a verdict keeps at full
//! precision and its place in the step.

use std::fmt;

use burn_mpric::audit::{AuditReport, Phase, Verdict};
use serde::Serialize;

/// An op whose forward output overflows f16 where the policy runs it low, with its place
/// among the forward pass's ops (in the order they first ran).
///
/// ```
/// use burn_mpric::audit::{AuditReport, Magnitudes, OpStats, Phase};
/// use burn_mpric_train::audit::OpHotSpot;
///
/// let row = |method: &str, op: &str, value: f32| {
///     let mut values = Magnitudes::default();
///     values.add(&[value]);
///     OpStats { method: method.into(), op: Some(op.into()), phase: Phase::Forward,
///         dtype: "f16".into(), low: true, calls: 2, values }
/// };
/// let ops = vec![row("float_matmul", "matmul", 3.0), row("linear", "linear", 2e5)];
/// let report = AuditReport::new(1, "mixed_f16", "mixed_bf16", 1.0, ops, vec![]);
/// let spots = OpHotSpot::find(&report);
/// assert_eq!((spots[0].op.as_str(), spots[0].place, spots[0].forward_ops), ("linear", 2, 2));
/// assert!(spots[0].to_string().contains("forward op 2 of 2"));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OpHotSpot {
    /// The op table's name (`linear`), what `--set ops.<op>=full` takes.
    pub op: String,
    /// Burn's method (`linear`, `float_matmul`).
    pub method: String,
    /// Its place among the forward pass's ops, from 1, in the order they first ran.
    pub place: usize,
    /// The forward pass's ops.
    pub forward_ops: usize,
    /// Its calls over the audited steps.
    pub calls: u64,
    /// Its largest output at the measured precision.
    pub largest: f32,
}

impl OpHotSpot {
    /// One per [`Verdict::KeepFullPrecision`] of `report`, at the first forward row of its op
    /// that overflows f16.
    ///
    /// See [`OpHotSpot`] for an example.
    pub fn find(report: &AuditReport) -> Vec<Self> {
        let forward: Vec<_> = report
            .ops
            .iter()
            .filter(|r| r.phase == Phase::Forward)
            .collect();
        report
            .verdicts
            .iter()
            .filter_map(|v| match v {
                Verdict::KeepFullPrecision { op, .. } => Some(op),
                _ => None,
            })
            .filter_map(|op| {
                let (index, row) = forward.iter().enumerate().find(|(_, r)| {
                    r.low && r.op.as_deref() == Some(op.as_str()) && r.overflows_f16()
                })?;
                Some(Self {
                    op: op.clone(),
                    method: row.method.clone(),
                    place: index + 1,
                    forward_ops: forward.len(),
                    calls: row.calls,
                    largest: row.values.max_abs,
                })
            })
            .collect()
    }
}

impl fmt::Display for OpHotSpot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "op `{}` (Burn's `{}`), forward op {} of {} in the order they first ran, {} calls: largest output {:.3e}, over f16's 65504",
            self.op, self.method, self.place, self.forward_ops, self.calls, self.largest
        )
    }
}
