//! [`Verdict`]: what the measured magnitudes mean for f16 and bf16, with the settings that
//! act on it.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::magnitudes::{F16_MAX, F16_MIN_SUBNORMAL_EXP};
use super::{Magnitudes, OpStats, ParamStats, Phase, low_gradients};
use crate::Op;

/// The largest share of the gradient values (those computed at the compute dtype) that may
/// flush to zero at f16 for f16 to count as safe: 1%.
pub const FLUSH_LIMIT: f64 = 0.01;
/// The largest initial scale a verdict proposes, 2²⁴: gradients that small are better
/// served by bf16.
pub const MAX_SCALE_EXP: i32 = 24;
/// The smallest initial scale a verdict proposes, 2⁰ (a dynamic scale's default floor):
/// gradients that overflow f16 unscaled call for bf16.
pub const MIN_SCALE_EXP: i32 = 0;

/// One conclusion of an audit, with the settings that act on it.
///
/// ```
/// use burn_mpric_core::audit::Verdict;
///
/// let v = Verdict::F16Safe { initial_scale: 1024.0, largest_exp: -8, flushed: 0.0, keeping_full: vec![] };
/// assert_eq!(v.to_string(), "f16 is safe with an initial scale of 2^10: the largest gradient then reaches 2^2 (f16 ends at 2^15) and 0.00% of the gradient values flush to zero");
/// assert!(v.settings_lines().iter().any(|l| l.contains("with_initial_scale(1024.0)")));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Verdict {
    /// Values were inf or NaN even at the measured precision: no precision setting is the
    /// cause or the cure.
    NotFinite {
        /// The first method that produced them.
        method: String,
        /// In which pass.
        phase: Phase,
    },
    /// A forward op's output exceeds f16's range where the policy runs it at the compute
    /// dtype: keep it at full precision (its category override).
    KeepFullPrecision {
        /// The op table's name of the op.
        op: String,
        /// Its largest output.
        largest: f32,
    },
    /// A forward value the audit could see (the Burn 0.22 edition: the loss, a
    /// `FullPrecision` module's output, a value the user observed) exceeds f16's range where
    /// the policy computes it at the compute dtype: keep the module that produces it at full
    /// precision, or use bf16.
    ForwardOverflow {
        /// The value's name (`model output`, `FullPrecision<Linear> output`).
        value: String,
        /// Its largest magnitude.
        largest: f32,
    },
    /// f16 holds the gradients at this initial scale (after the overrides above, if any).
    F16Safe {
        /// The proposed initial loss scale, a power of two.
        initial_scale: f32,
        /// The binary exponent of the largest unscaled gradient.
        largest_exp: i32,
        /// The share of gradient values that flush to zero at that scale.
        flushed: f64,
        /// The ops that must be kept at full precision for it.
        keeping_full: Vec<String>,
    },
    /// f16 cannot hold the gradients at any one scale: use bf16.
    UseBf16 {
        /// The best initial scale for f16.
        initial_scale: f32,
        /// The share of gradient values that flush to zero at it.
        flushed: f64,
        /// Whether the largest gradients overflow f16 even unscaled.
        overflows_unscaled: bool,
    },
    /// bf16 holds every value without loss scaling.
    Bf16Safe {
        /// The binary exponent of the largest value measured.
        largest_exp: i32,
    },
}

fn op_variant(name: &str) -> String {
    name.parse::<Op>()
        .map(|op| format!("{op:?}"))
        .unwrap_or_else(|_| name.to_string())
}

impl Verdict {
    /// The lines of Rust that apply it: `MpSettings` (burn-mpric) and the loss scaler.
    ///
    /// ```
    /// use burn_mpric_core::audit::Verdict;
    ///
    /// let v = Verdict::KeepFullPrecision { op: "linear".into(), largest: 1e5 };
    /// assert_eq!(v.settings_lines(), ["settings.with_category(Op::Linear, OpCategory::FullPrecision)"]);
    /// ```
    pub fn settings_lines(&self) -> Vec<String> {
        match self {
            Verdict::NotFinite { .. } | Verdict::ForwardOverflow { .. } => Vec::new(),
            Verdict::KeepFullPrecision { op, .. } => vec![format!(
                "settings.with_category(Op::{}, OpCategory::FullPrecision)",
                op_variant(op)
            )],
            Verdict::F16Safe {
                initial_scale,
                keeping_full,
                ..
            } => {
                let overrides: String = keeping_full
                    .iter()
                    .map(|op| {
                        format!(
                            ".with_category(Op::{}, OpCategory::FullPrecision)",
                            op_variant(op)
                        )
                    })
                    .collect();
                vec![
                    format!("MpSettings::new(\"mixed_f16\".parse()?){overrides}"),
                    format!(
                        "LossScaler::dynamic(LossScaleConfig::new().with_initial_scale({initial_scale:?}))?"
                    ),
                ]
            }
            Verdict::UseBf16 { .. } | Verdict::Bf16Safe { .. } => vec![
                "MpSettings::new(\"mixed_bf16\".parse()?)".to_string(),
                "LossScaler::from_preset(LossScalePreset::None, false)?".to_string(),
            ],
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::NotFinite { method, phase } => write!(
                f,
                "`{method}` gave inf or NaN in the {phase} pass at the measured precision: no precision setting causes or cures this; look at the learning rate, the data and the model"
            ),
            Verdict::KeepFullPrecision { op, largest } => write!(
                f,
                "op `{op}` overflows at f16 (largest output {largest:.3e}, f16 ends at 65504): keep it at full precision"
            ),
            Verdict::ForwardOverflow { value, largest } => write!(
                f,
                "{value} reaches {largest:.3e} at the measured precision, over f16's 65504: at f16 it overflows in the forward pass, which no loss scale changes; keep the module that produces it at full precision, or use bf16"
            ),
            Verdict::F16Safe {
                initial_scale,
                largest_exp,
                flushed,
                keeping_full,
            } => {
                let k = initial_scale.log2().round() as i32;
                write!(f, "f16 is safe with an initial scale of 2^{k}")?;
                if !keeping_full.is_empty() {
                    write!(
                        f,
                        " once {} run at full precision",
                        keeping_full
                            .iter()
                            .map(|o| format!("`{o}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )?;
                }
                write!(
                    f,
                    ": the largest gradient then reaches 2^{} (f16 ends at 2^15) and {:.2}% of the gradient values flush to zero",
                    largest_exp + k,
                    flushed * 100.0
                )
            }
            Verdict::UseBf16 {
                initial_scale,
                flushed,
                overflows_unscaled,
            } => {
                if *overflows_unscaled {
                    write!(
                        f,
                        "use bf16: the largest gradients overflow f16 even without loss scaling"
                    )
                } else {
                    write!(
                        f,
                        "use bf16: f16 flushes {:.1}% of the gradient values to zero even at the best initial scale, 2^{}",
                        flushed * 100.0,
                        initial_scale.log2().round() as i32
                    )
                }
            }
            Verdict::Bf16Safe { largest_exp } => write!(
                f,
                "bf16 is safe without loss scaling: every value measured fits its range (largest 2^{largest_exp}, bf16 ends at 2^127)"
            ),
        }
    }
}

/// The verdicts measured ops and gradients imply, most urgent first:
/// - values that were not finite at the measured precision: [`Verdict::NotFinite`] alone;
/// - each op the policy runs low whose forward output exceeds f16's range:
///   [`Verdict::KeepFullPrecision`];
/// - the initial scale 2^k that puts the largest low gradient one power of two below f16's
///   end, and the share that still flushes to zero there: [`Verdict::F16Safe`] when it is at
///   most [`FLUSH_LIMIT`], else [`Verdict::UseBf16`];
/// - [`Verdict::Bf16Safe`] when f16 is safe too (otherwise `UseBf16` says it).
///
/// ```
/// use burn_mpric_core::audit::{Magnitudes, OpStats, Phase, Verdict, verdicts};
///
/// let row = |phase, values: &[f32]| {
///     let mut m = Magnitudes::default();
///     m.add(values);
///     OpStats { method: "linear".into(), op: Some("linear".into()), phase, dtype: "bf16".into(), low: true, calls: 1, values: m }
/// };
/// let found = verdicts(&[row(Phase::Forward, &[3.0]), row(Phase::Backward, &[0.01, 2e-4])], &[]);
/// // 2^21 takes the largest gradient, 0.01, to 20972: below half of f16's end, 65504.
/// assert!(matches!(found[0], Verdict::F16Safe { initial_scale: 2097152.0, .. }), "{found:?}");
/// assert!(matches!(found[1], Verdict::Bf16Safe { .. }));
/// ```
pub fn verdicts(ops: &[OpStats], params: &[ParamStats]) -> Vec<Verdict> {
    decide(ops, params, low_gradients(ops), false)
}

/// The verdicts of an audit that sees parameters' gradients and a few named forward values,
/// not ops (the Burn 0.22 edition): the same rules as [`verdicts`], with the parameters'
/// gradients (merged) as the gradient values a loss scale shifts, and each low forward value
/// over f16's range as a [`Verdict::ForwardOverflow`].
///
/// ```
/// use burn_mpric_core::audit::{Magnitudes, OpStats, ParamStats, Phase, Verdict, param_verdicts};
///
/// let mut output = Magnitudes::default();
/// output.add(&[1e5]);
/// let forward = [OpStats { method: "model output".into(), op: None, phase: Phase::Forward,
///     dtype: "f16".into(), low: true, calls: 1, values: output }];
/// let mut grad = Magnitudes::default();
/// grad.add(&[1e-3]);
/// let params = [ParamStats { path: "head.weight".into(), grad }];
/// let found = param_verdicts(&forward, &params);
/// assert!(matches!(found[0], Verdict::ForwardOverflow { .. }));
/// assert!(matches!(found[1], Verdict::F16Safe { initial_scale, .. } if initial_scale == 2f32.powi(24)));
/// ```
pub fn param_verdicts(forward: &[OpStats], params: &[ParamStats]) -> Vec<Verdict> {
    let mut grads = Magnitudes::default();
    for row in params {
        grads.merge(&row.grad);
    }
    decide(forward, params, grads, true)
}

/// The rules of [`verdicts`] over `grads`, the gradient values a loss scale shifts; with
/// `named_values`, low forward rows without an op are values to keep in range too.
fn decide(
    ops: &[OpStats],
    params: &[ParamStats],
    grads: Magnitudes,
    named_values: bool,
) -> Vec<Verdict> {
    if ops.is_empty() && params.is_empty() {
        return Vec::new();
    }
    if let Some(row) = ops.iter().find(|r| r.values.non_finite > 0) {
        return vec![Verdict::NotFinite {
            method: row.method.clone(),
            phase: row.phase,
        }];
    }
    if let Some(row) = params.iter().find(|r| r.grad.non_finite > 0) {
        return vec![Verdict::NotFinite {
            method: format!("the gradient of {}", row.path),
            phase: Phase::Backward,
        }];
    }
    let mut found = Vec::new();
    let mut keeping_full: Vec<String> = Vec::new();
    for row in ops
        .iter()
        .filter(|r| r.low && r.phase == Phase::Forward && r.overflows_f16())
    {
        let Some(op) = &row.op else {
            if named_values {
                found.push(Verdict::ForwardOverflow {
                    value: row.method.clone(),
                    largest: row.values.max_abs,
                });
            }
            continue;
        };
        match found.iter_mut().find_map(|v| match v {
            Verdict::KeepFullPrecision { op: o, largest } if o == op => Some(largest),
            _ => None,
        }) {
            Some(largest) => *largest = largest.max(row.values.max_abs),
            None => {
                keeping_full.push(op.clone());
                found.push(Verdict::KeepFullPrecision {
                    op: op.clone(),
                    largest: row.values.max_abs,
                });
            }
        }
    }

    let largest_exp = ops
        .iter()
        .map(|r| &r.values)
        .chain(params.iter().filter(|_| named_values).map(|r| &r.grad))
        .filter_map(|v| v.exponent_range())
        .map(|(_, hi)| hi)
        .max()
        .unwrap_or(0);
    let bf16 = Verdict::Bf16Safe { largest_exp };
    let Some(headroom) = grads.headroom(F16_MAX) else {
        // No gradient runs at the compute dtype: nothing for a loss scale to do.
        found.push(Verdict::F16Safe {
            initial_scale: 1.0,
            largest_exp: 0,
            flushed: 0.0,
            keeping_full,
        });
        found.push(bf16);
        return found;
    };
    // The largest gradient at most half of f16's end: room for the gradients to grow
    // before the dynamic scale backs off.
    let best = headroom.floor() as i32 - 1;
    let k = best.clamp(MIN_SCALE_EXP, MAX_SCALE_EXP);
    let initial_scale = 2f32.powi(k);
    let flushed = grads.share_below(F16_MIN_SUBNORMAL_EXP, k);
    let grad_max_exp = grads.exponent_range().map_or(0, |(_, hi)| hi);
    if best < MIN_SCALE_EXP || flushed > FLUSH_LIMIT {
        found.push(Verdict::UseBf16 {
            initial_scale,
            flushed,
            overflows_unscaled: best < MIN_SCALE_EXP,
        });
    } else {
        found.push(Verdict::F16Safe {
            initial_scale,
            largest_exp: grad_max_exp,
            flushed,
            keeping_full,
        });
        found.push(bf16);
    }
    found
}

#[cfg(test)]
mod tests {
    use super::super::Magnitudes;
    use super::*;

    fn row(method: &str, phase: Phase, low: bool, values: &[f32]) -> OpStats {
        let mut m = Magnitudes::default();
        m.add(values);
        OpStats {
            method: method.into(),
            op: method.parse::<Op>().ok().map(|o| o.name().to_string()),
            phase,
            dtype: if low { "bf16" } else { "f32" }.into(),
            low,
            calls: 1,
            values: m,
        }
    }

    #[test]
    fn a_large_forward_output_of_a_low_op_is_kept_at_full_precision() {
        let ops = [
            row("linear", Phase::Forward, true, &[2e5, 1.0]),
            row("float_exp", Phase::Forward, false, &[1e30]),
            row("float_reshape", Phase::Forward, true, &[2e5]),
            row("linear_weight_backward", Phase::Backward, true, &[1e-3]),
        ];
        let found = verdicts(&ops, &[]);
        assert_eq!(
            found[0],
            Verdict::KeepFullPrecision {
                op: "linear".into(),
                largest: 2e5
            }
        );
        // exp runs at f32 and reshape is outside the table: neither is named.
        assert_eq!(
            found
                .iter()
                .filter(|v| matches!(v, Verdict::KeepFullPrecision { .. }))
                .count(),
            1
        );
        match &found[1] {
            Verdict::F16Safe {
                keeping_full,
                initial_scale,
                ..
            } => {
                assert_eq!(keeping_full, &["linear"]);
                // 2^24 takes 1e-3 to 16777, below half of f16's end; 2^25 would not.
                assert_eq!(*initial_scale, 2f32.powi(24));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn gradients_spanning_more_than_f16_call_for_bf16() {
        // 1 and 2^-40 cannot both fit f16's 2^-24..2^15 at any one scale.
        let tiny = vec![2f32.powi(-40); 50];
        let mut values = vec![1.0f32; 50];
        values.extend(tiny);
        let ops = [
            row("float_matmul", Phase::Forward, true, &[1.0]),
            row("float_matmul", Phase::Backward, true, &values),
        ];
        let found = verdicts(&ops, &[]);
        assert!(
            matches!(found[0], Verdict::UseBf16 { flushed, overflows_unscaled: false, .. } if flushed == 0.5),
            "{found:?}"
        );
        assert_eq!(found.len(), 1);
    }

    #[test]
    fn values_moved_by_ops_outside_the_table_do_not_set_the_scale() {
        // A backward cast of a saved activation (4.0) is no gradient: the scale follows the
        // matmul's gradient (2^-10) alone.
        let ops = [
            row("float_cast", Phase::Backward, true, &[4.0]),
            row("float_matmul", Phase::Backward, true, &[2f32.powi(-10)]),
        ];
        assert!(matches!(
            verdicts(&ops, &[])[0],
            Verdict::F16Safe { initial_scale, .. } if initial_scale == 2f32.powi(24)
        ));
    }

    #[test]
    fn gradients_above_f16_unscaled_call_for_bf16() {
        let ops = [row("float_matmul", Phase::Backward, true, &[1e5])];
        assert!(matches!(
            verdicts(&ops, &[])[0],
            Verdict::UseBf16 {
                overflows_unscaled: true,
                initial_scale: 1.0,
                ..
            }
        ));
    }

    #[test]
    fn non_finite_values_come_alone() {
        let ops = [
            row("linear", Phase::Forward, true, &[1e6]),
            row("float_log", Phase::Forward, false, &[f32::NEG_INFINITY]),
        ];
        assert_eq!(
            verdicts(&ops, &[]),
            [Verdict::NotFinite {
                method: "float_log".into(),
                phase: Phase::Forward
            }]
        );
    }
}
