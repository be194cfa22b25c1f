//! [`SkipCause`]: whether a skipped step (or a step whose gradients are all zero) is a range
//! problem, which moves with the loss scale, or not, which a loss scale can never fix.
//!
//! A gradient that overflows f16 at a scale `S` is finite at a scale far enough below it
//! (at most `S / 2^8`, and at most 2^-8, so that overflows of any size drop back into
//! range); one that flushed to zero at `S` is not zero at `S * 2^8`. A kernel that returns NaN, or zero, whatever its
//! input does not care about the scale (tracel-ai/burn#5162: f16 gradients unchanged at
//! scales 64 and 16384). The editions re-run the same batch once at the probe scale, only on
//! the steps that need it, and [`SkipCause::judge`] compares the two reads (a step's probe,
//! what it starts from, is `probe.rs`'s).

use std::fmt;

use serde::{Deserialize, Serialize};

/// How many powers of two the probe moves the scale at least: 2^8, down for non-finite
/// gradients (and to at most 2^-8) and up for gradients that are all zero.
pub const PROBE_SHIFT: i32 = 8;

/// What one read of a step's loss and gradients said.
///
/// ```
/// use burn_mpric_core::scale::ProbeRead;
///
/// let read = ProbeRead { loss_finite: true, grads_finite: false, grads_zero: false };
/// assert!(read.needs_probe(Some(1.0)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeRead {
    /// Whether the loss was finite (`true` when it was not read).
    pub loss_finite: bool,
    /// Whether every gradient was finite.
    pub grads_finite: bool,
    /// Whether every gradient was exactly zero (and finite).
    pub grads_zero: bool,
}

impl ProbeRead {
    /// A read of a step's (unscaled or scaled) loss, when one was read, and its gradients.
    ///
    /// ```
    /// use burn_mpric_core::scale::ProbeRead;
    ///
    /// let read = ProbeRead::of(Some(f32::NAN), false, false);
    /// assert!(!read.loss_finite && !read.grads_finite);
    /// assert!(ProbeRead::of(None, true, false).loss_finite);
    /// ```
    pub fn of(loss: Option<f32>, grads_finite: bool, grads_zero: bool) -> Self {
        Self {
            loss_finite: loss.is_none_or(f32::is_finite),
            grads_finite,
            grads_zero,
        }
    }

    /// Whether the step calls for a probe: its gradients were not finite, or were all zero
    /// while the loss was not (an exactly zero loss has zero gradients by right).
    ///
    /// ```
    /// use burn_mpric_core::scale::ProbeRead;
    ///
    /// let zero = ProbeRead { loss_finite: true, grads_finite: true, grads_zero: true };
    /// assert!(zero.needs_probe(Some(0.5)));
    /// assert!(!zero.needs_probe(Some(0.0)));
    /// ```
    pub fn needs_probe(&self, loss: Option<f32>) -> bool {
        !self.grads_finite || (self.grads_zero && loss != Some(0.0))
    }

    /// The scale the probe re-runs the batch at, from the scale this read was made at: at
    /// least `2^8` lower and at most `2^-8` when the gradients were not finite (an overflow
    /// of up to 2^23 times f16's end drops back into range there, while a kernel that returns
    /// NaN still does), `2^8` higher when they were all zero (within [`MIN_SCALE`](crate::scale::MIN_SCALE) and f32's largest power of two).
    ///
    /// ```
    /// use burn_mpric_core::scale::ProbeRead;
    ///
    /// let skipped = ProbeRead { loss_finite: true, grads_finite: false, grads_zero: false };
    /// assert_eq!(skipped.probe_scale(65536.0), 1.0 / 256.0);
    /// assert_eq!(skipped.probe_scale(1.0 / 64.0), 1.0 / 16384.0);
    /// let zero = ProbeRead { grads_finite: true, grads_zero: true, ..skipped };
    /// assert_eq!(zero.probe_scale(1.0), 256.0);
    /// ```
    pub fn probe_scale(&self, scale: f32) -> f32 {
        let shift = 2f64.powi(PROBE_SHIFT);
        let probe = if self.grads_finite {
            f64::from(scale) * shift
        } else {
            (f64::from(scale) / shift).min(1.0 / shift)
        };
        (probe.min(2f64.powi(127)) as f32).max(crate::scale::MIN_SCALE)
    }
}

/// Why a step's gradients were not finite, or all zero, as the probe found.
///
/// ```
/// use burn_mpric_core::scale::{ProbeRead, SkipCause};
///
/// let nan = ProbeRead { loss_finite: true, grads_finite: false, grads_zero: false };
/// let cause = SkipCause::judge(nan, nan, 65536.0, 256.0, vec!["head.weight".into()], &[]);
/// assert!(cause.to_string().starts_with("not a range problem"));
/// assert_eq!(cause.label(), "not_range");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "cause", rename_all = "snake_case")]
pub enum SkipCause {
    /// The problem moved with the scale: overflowing gradients were finite at the lower
    /// scale, or zero ones were not zero at the higher one. A dynamic scale finds its way.
    Range {
        /// The scale of the step.
        scale: f32,
        /// The scale of the probe.
        probe_scale: f32,
        /// Whether the step's gradients were all zero (rather than not finite).
        zero: bool,
    },
    /// The loss itself was not finite at both scales: the forward pass overflows the
    /// compute dtype or an op returns NaN. A loss scale acts on the backward pass only.
    LossNotFinite {
        /// The scale of the step.
        scale: f32,
        /// The scale of the probe.
        probe_scale: f32,
    },
    /// The loss was finite and the gradients were not finite (or all zero) at both scales:
    /// not a range problem. An op computes them wrongly at this dtype on this backend.
    ScaleInvariant {
        /// The scale of the step.
        scale: f32,
        /// The scale of the probe.
        probe_scale: f32,
        /// Whether the gradients were all zero (rather than not finite).
        zero: bool,
        /// The parameters whose gradients were not finite, by module path, when known.
        params: Vec<String>,
    },
}

/// A scale as `2^k` when it is a power of two, else in scientific notation.
pub(crate) fn power(scale: f32) -> String {
    let exp = f64::from(scale).log2();
    if exp.fract() == 0.0 {
        format!("2^{exp}")
    } else {
        format!("{scale:e}")
    }
}

impl SkipCause {
    /// The cause from the step's read at `scale` and the probe's at `probe_scale`;
    /// `params` names the parameters the step found not finite and `still` those the probe
    /// did (the cause names those in both; `still` empty: not looked for).
    ///
    /// ```
    /// use burn_mpric_core::scale::{ProbeRead, SkipCause};
    ///
    /// let overflow = ProbeRead { loss_finite: true, grads_finite: false, grads_zero: false };
    /// let fine = ProbeRead { grads_finite: true, ..overflow };
    /// assert!(matches!(SkipCause::judge(overflow, fine, 65536.0, 256.0, vec![], &[]), SkipCause::Range { zero: false, .. }));
    /// let no_loss = ProbeRead { loss_finite: false, ..overflow };
    /// assert!(matches!(SkipCause::judge(no_loss, no_loss, 65536.0, 256.0, vec![], &[]), SkipCause::LossNotFinite { .. }));
    /// ```
    pub fn judge(
        step: ProbeRead,
        probe: ProbeRead,
        scale: f32,
        probe_scale: f32,
        params: Vec<String>,
        still: &[String],
    ) -> Self {
        let params = if probe.grads_finite || still.is_empty() {
            params
        } else {
            params.into_iter().filter(|p| still.contains(p)).collect()
        };
        let zero = step.grads_finite && step.grads_zero;
        if !step.loss_finite && !probe.loss_finite {
            return SkipCause::LossNotFinite { scale, probe_scale };
        }
        let moved = if zero {
            probe.grads_finite && !probe.grads_zero
        } else {
            probe.grads_finite
        };
        if moved {
            SkipCause::Range {
                scale,
                probe_scale,
                zero,
            }
        } else {
            SkipCause::ScaleInvariant {
                scale,
                probe_scale,
                zero,
                params,
            }
        }
    }

    /// A short name for metrics files: `range`, `loss_not_finite` or `not_range`.
    ///
    /// ```
    /// use burn_mpric_core::scale::SkipCause;
    ///
    /// let cause = SkipCause::LossNotFinite { scale: 1.0, probe_scale: 1.0 / 256.0 };
    /// assert_eq!(cause.label(), "loss_not_finite");
    /// ```
    pub fn label(&self) -> &'static str {
        match self {
            SkipCause::Range { .. } => "range",
            SkipCause::LossNotFinite { .. } => "loss_not_finite",
            SkipCause::ScaleInvariant { .. } => "not_range",
        }
    }

    /// Its value in a numeric metric (burn-train's `Learner`): 1 for a range problem, 2 for
    /// a loss that is not finite, 3 for "not a range problem"; a step without a cause logs 0.
    ///
    /// ```
    /// use burn_mpric_core::scale::SkipCause;
    ///
    /// let cause = SkipCause::ScaleInvariant { scale: 2.0, probe_scale: 1.0 / 256.0, zero: false, params: vec![] };
    /// assert_eq!(cause.metric_value(), 3.0);
    /// ```
    pub fn metric_value(&self) -> f64 {
        match self {
            SkipCause::Range { .. } => 1.0,
            SkipCause::LossNotFinite { .. } => 2.0,
            SkipCause::ScaleInvariant { .. } => 3.0,
        }
    }

    /// Whether a loss scale can fix it.
    ///
    /// ```
    /// use burn_mpric_core::scale::SkipCause;
    ///
    /// assert!(SkipCause::Range { scale: 2.0, probe_scale: 512.0, zero: true }.is_range());
    /// ```
    pub fn is_range(&self) -> bool {
        matches!(self, SkipCause::Range { .. })
    }
}

impl fmt::Display for SkipCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SkipCause::Range {
                scale,
                probe_scale,
                zero: false,
            } => write!(
                f,
                "a range problem: the gradients overflow at a loss scale of {} and are finite at {}; a dynamic scale backs off to fit",
                power(*scale),
                power(*probe_scale)
            ),
            SkipCause::Range {
                scale,
                probe_scale,
                zero: true,
            } => write!(
                f,
                "a range problem: the gradients flush to zero at a loss scale of {} and do not at {}; start the scale higher",
                power(*scale),
                power(*probe_scale)
            ),
            SkipCause::LossNotFinite { scale, probe_scale } => write!(
                f,
                "the loss itself is not finite (at loss scales {} and {}): the forward pass overflows the compute dtype or an op returns NaN, and no loss scale changes it; the precision audit tells which",
                power(*scale),
                power(*probe_scale)
            ),
            SkipCause::ScaleInvariant {
                scale,
                probe_scale,
                zero,
                params,
            } => {
                let what = if *zero { "zero" } else { "non-finite" };
                write!(
                    f,
                    "not a range problem: the {what} gradients do not depend on the loss scale (the same at {} and {})",
                    power(*scale),
                    power(*probe_scale)
                )?;
                if !params.is_empty() {
                    let overflow = crate::scale::Overflow::new(params.clone());
                    write!(f, "; {overflow}")?;
                }
                write!(
                    f,
                    "; an op computes them wrongly at this dtype on this backend: keep those parameters at f32 or try another backend"
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NAN: ProbeRead = ProbeRead {
        loss_finite: true,
        grads_finite: false,
        grads_zero: false,
    };
    const ZERO: ProbeRead = ProbeRead {
        loss_finite: true,
        grads_finite: true,
        grads_zero: true,
    };
    const FINE: ProbeRead = ProbeRead {
        loss_finite: true,
        grads_finite: true,
        grads_zero: false,
    };

    #[test]
    fn zero_gradients_that_stay_zero_are_not_a_range_problem() {
        let cause = SkipCause::judge(ZERO, ZERO, 4.0, 1024.0, vec![], &[]);
        assert!(matches!(
            cause,
            SkipCause::ScaleInvariant { zero: true, .. }
        ));
        assert!(
            cause
                .to_string()
                .contains("the zero gradients do not depend")
        );
        assert!(SkipCause::judge(ZERO, FINE, 4.0, 1024.0, vec![], &[]).is_range());
    }

    #[test]
    fn non_finite_gradients_that_stay_so_are_named() {
        let cause = SkipCause::judge(
            NAN,
            NAN,
            32768.0,
            128.0,
            vec!["fc.weight".into(), "head.bias".into()],
            &["fc.weight".into()],
        );
        let text = cause.to_string();
        assert!(text.contains("2^15 and 2^7"), "{text}");
        assert!(text.contains("1 parameter: fc.weight;"), "{text}");
        // A loss that is finite in one of the two reads: the gradients decide.
        let half = ProbeRead {
            loss_finite: false,
            ..NAN
        };
        assert!(!SkipCause::judge(half, NAN, 2.0, 1.0 / 128.0, vec![], &[]).is_range());
        assert!(SkipCause::judge(half, FINE, 2.0, 1.0 / 128.0, vec![], &[]).is_range());
    }

    #[test]
    fn the_probe_scale_stays_a_finite_f32() {
        assert_eq!(ZERO.probe_scale(2f32.powi(125)), 2f32.powi(127));
        assert_eq!(NAN.probe_scale(1.0), 1.0 / 256.0);
        assert_eq!(NAN.probe_scale(2f32.powi(-125)), crate::scale::MIN_SCALE);
    }
}
