//! What trying a policy for a few steps says: [`Trial`], the [`HotSpot`] a failed trial
//! points at, and the [`Remedy`]s an audit offers, each with the trial that checked it.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::{AuditReport, F16_MAX, ParamStats, Verdict};
use crate::scale::{Overflow, PROBE_SHIFT, SkipCause};
use crate::{FloatDType, ResolvedPolicy};

/// Steps at the start of a trial whose skips do not count against it: a dynamic scale may
/// back off once or twice before it fits.
pub const GRACE_STEPS: usize = 2;

/// What a few steps at one policy and initial scale did.
///
/// # Example
///
/// ```
/// use burn_mpric_core::audit::Trial;
///
/// let trial = Trial { policy: "mixed_bf16".into(), initial_scale: 1.0, steps: 8, skipped: vec![0], overflow: None, cause: None };
/// assert!(trial.trains(), "a skip within the grace steps");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trial {
    /// The policy, as text.
    pub policy: String,
    /// The loss scale it started at (1: no scaling).
    pub initial_scale: f32,
    /// Steps run.
    pub steps: usize,
    /// The steps that were skipped (from 0).
    pub skipped: Vec<usize>,
    /// The first skipped step's overflowing parameters.
    pub overflow: Option<Overflow>,
    /// The first skipped (or all-zero) step's cause, from the probe.
    pub cause: Option<SkipCause>,
}

impl Trial {
    /// An empty trial of `steps` steps at `policy` from `initial_scale`.
    ///
    /// ```
    /// use burn_mpric_core::audit::Trial;
    ///
    /// assert!(Trial::new("mixed_f16", 1024.0, 8).trains());
    /// ```
    pub fn new(policy: impl Into<String>, initial_scale: f32, steps: usize) -> Self {
        Self {
            policy: policy.into(),
            initial_scale,
            steps,
            skipped: Vec::new(),
            overflow: None,
            cause: None,
        }
    }

    /// Records step `step` (from 0): whether it was skipped, the parameters that
    /// overflowed and the probe's cause. The trial keeps the first overflow, and the first
    /// cause no scale fixes, else the first cause after the [`GRACE_STEPS`].
    ///
    /// ```
    /// use burn_mpric_core::audit::Trial;
    /// use burn_mpric_core::scale::SkipCause;
    ///
    /// let mut trial = Trial::new("mixed_f16", 65536.0, 8);
    /// let range = SkipCause::Range { scale: 65536.0, probe_scale: 1.0 / 256.0, zero: false };
    /// trial.record(0, true, None, Some(range)); // backing off: not kept
    /// assert!(trial.cause.is_none() && trial.trains());
    /// let bug = SkipCause::LossNotFinite { scale: 32768.0, probe_scale: 1.0 / 256.0 };
    /// trial.record(1, true, None, Some(bug.clone()));
    /// assert_eq!(trial.cause, Some(bug));
    /// assert!(!trial.trains());
    /// ```
    pub fn record(
        &mut self,
        step: usize,
        skipped: bool,
        overflow: Option<&Overflow>,
        cause: Option<SkipCause>,
    ) {
        if skipped {
            self.skipped.push(step);
            if self.overflow.is_none() {
                self.overflow = overflow.cloned();
            }
        }
        let fixed_by_scale = cause.as_ref().is_none_or(SkipCause::is_range);
        let keep = match &self.cause {
            None => !fixed_by_scale || step >= GRACE_STEPS,
            Some(kept) => kept.is_range() && !fixed_by_scale,
        };
        if keep && cause.is_some() {
            self.cause = cause;
        }
    }

    /// Whether it trained without skips after the first [`GRACE_STEPS`], and no cause
    /// other than a range one was found.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::audit::Trial;
    ///
    /// let trial = Trial { policy: "mixed_f16".into(), initial_scale: 65536.0, steps: 8, skipped: vec![5], overflow: None, cause: None };
    /// assert!(!trial.trains());
    /// ```
    pub fn trains(&self) -> bool {
        self.skipped.iter().all(|&s| s < GRACE_STEPS)
            && self.cause.as_ref().is_none_or(SkipCause::is_range)
    }
}

impl fmt::Display for Trial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} from a loss scale of {}: {} steps, ",
            self.policy,
            crate::scale::cause::power(self.initial_scale),
            self.steps
        )?;
        let late = self.skipped.iter().filter(|&&s| s >= GRACE_STEPS).count();
        if self.skipped.is_empty() {
            write!(f, "none skipped")?;
        } else {
            write!(
                f,
                "{} skipped ({late} after the first {GRACE_STEPS})",
                self.skipped.len()
            )?;
        }
        if let Some(cause) = &self.cause {
            write!(f, "; {cause}")?;
        } else if let Some(overflow) = &self.overflow {
            write!(f, "; overflow in {overflow}")?;
        }
        Ok(())
    }
}

/// Where f16 breaks, as closely as the 0.22 edition can see.
///
/// # Example
///
/// ```
/// use burn_mpric_core::audit::HotSpot;
///
/// let spot = HotSpot { forward: vec![], params: vec!["hot.weight".into()], fields: vec![("hot".into(), "Linear".into())], scale: 32768.0 };
/// assert!(spot.to_string().contains("hot.weight"));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HotSpot {
    /// Observed forward values over f16's range.
    pub forward: Vec<String>,
    /// The parameters whose gradients overflow f16 first at `scale`, largest first.
    pub params: Vec<String>,
    /// The top-level fields of the model that hold them, with their types.
    pub fields: Vec<(String, String)>,
    /// The loss scale the gradients were judged at.
    pub scale: f32,
}

impl fmt::Display for HotSpot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if !self.forward.is_empty() {
            parts.push(format!(
                "forward values over f16's range: {}",
                self.forward.join(", ")
            ));
        }
        if !self.params.is_empty() {
            parts.push(format!(
                "gradients that overflow f16 first at a loss scale of {}: {}",
                self.scale,
                Overflow::new(self.params.clone())
            ));
        }
        if !self.fields.is_empty() {
            let names: Vec<String> = self
                .fields
                .iter()
                .map(|(field, ty)| format!("`{field}` ({ty})"))
                .collect();
            parts.push(format!("in the field(s) {}", names.join(", ")));
        }
        f.write_str(&parts.join("; "))
    }
}

/// A remedy, with the Rust lines that apply it and what trying it did.
///
/// # Example
///
/// ```
/// use burn_mpric_core::audit::Remedy;
///
/// let remedy = Remedy { what: "use bf16".into(), lines: vec!["let policy: ResolvedPolicy = \"mixed_bf16\".parse()?;".into()], tried: None };
/// assert!(remedy.to_string().contains("not run"));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Remedy {
    /// What it does.
    pub what: String,
    /// The Rust lines that apply it.
    pub lines: Vec<String>,
    /// The trial that checked it; `None` for a remedy the audit cannot apply itself.
    pub tried: Option<Trial>,
}

impl fmt::Display for Remedy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.what)?;
        for line in &self.lines {
            writeln!(f, "    {line}")?;
        }
        match self.trial_line() {
            Some(line) => write!(f, "  {line}"),
            None => write!(
                f,
                "  not run: it changes your model's type; audit the changed model to check it"
            ),
        }
    }
}

impl Remedy {
    /// What its trial did, as both editions print it under the remedy: `checked: <trial>`
    /// when it trained, `tried, did not train: <trial>` when not; `None` when it was not run.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::audit::{Remedy, Trial};
    ///
    /// let tried = Trial::new("mixed_bf16", 1.0, 8);
    /// let remedy = Remedy { what: "use bf16".into(), lines: vec![], tried: Some(tried) };
    /// assert_eq!(remedy.trial_line().unwrap(), "checked: mixed_bf16 from a loss scale of 2^0: 8 steps, none skipped");
    /// assert_eq!(Remedy { tried: None, ..remedy }.trial_line(), None);
    /// ```
    pub fn trial_line(&self) -> Option<String> {
        self.tried.as_ref().map(|trial| {
            if trial.trains() {
                format!("checked: {trial}")
            } else {
                format!("tried, did not train: {trial}")
            }
        })
    }

    /// Keep the model's field `field` (of type `ty`) at full precision: the two lines that
    /// wrap it in the 0.22 edition's `FullPrecision`. Not run (`tried: None`): it changes the
    /// model's type.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::audit::Remedy;
    ///
    /// let remedy = Remedy::keep_field("encoder", "TransformerEncoder");
    /// assert_eq!(remedy.what, "keep the field `encoder` at full precision");
    /// assert_eq!(remedy.lines[0], "encoder: FullPrecision<TransformerEncoder>,  // in your model's struct");
    /// assert!(remedy.tried.is_none());
    /// ```
    pub fn keep_field(field: &str, ty: &str) -> Self {
        Self {
            what: format!("keep the field `{field}` at full precision"),
            lines: vec![
                format!("{field}: FullPrecision<{ty}>,  // in your model's struct"),
                format!("self.{field}.forward_with(x, |m, x| m.forward(x))  // in its forward"),
            ],
            tried: None,
        }
    }

    /// The lower initial scale an audit tries when a trial from `initial` failed for a range
    /// problem: `2^PROBE_SHIFT` times lower (where the probe found the gradients finite), and
    /// at least 1.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::audit::Remedy;
    ///
    /// assert_eq!(Remedy::lower_scale(65536.0), 256.0);
    /// assert_eq!(Remedy::lower_scale(16.0), 1.0);
    /// ```
    pub fn lower_scale(initial: f32) -> f32 {
        (initial / 2f32.powi(PROBE_SHIFT)).max(1.0)
    }

    /// Start the dynamic loss scale at `scale`, with the trial that checked it.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::audit::{Remedy, Trial};
    ///
    /// let remedy = Remedy::initial_scale(256.0, Trial::new("mixed_f16", 256.0, 8));
    /// assert_eq!(remedy.what, "start the loss scale at 256");
    /// assert_eq!(remedy.lines, ["LossScaler::dynamic(LossScaleConfig::new().with_initial_scale(256.0))?"]);
    /// ```
    pub fn initial_scale(scale: f32, tried: Trial) -> Self {
        Self {
            what: format!("start the loss scale at {scale}"),
            lines: vec![format!(
                "LossScaler::dynamic(LossScaleConfig::new().with_initial_scale({scale:?}))?"
            )],
            tried: Some(tried),
        }
    }

    /// Compute the model at `bf16` (a policy computing at bf16) without loss scaling, with
    /// the trial that checked it.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::audit::{Remedy, Trial};
    /// use burn_mpric_core::ResolvedPolicy;
    ///
    /// let bf16: ResolvedPolicy = "mixed_bf16".parse().unwrap();
    /// let remedy = Remedy::compute_at_bf16(bf16, Trial::new(bf16.to_string(), 1.0, 8));
    /// assert_eq!(remedy.lines[0], "let policy: ResolvedPolicy = \"p=f32,c=bf16,o=f32\".parse()?;");
    /// ```
    pub fn compute_at_bf16(bf16: ResolvedPolicy, tried: Trial) -> Self {
        Self {
            what: "compute the model at bf16 (f32's range), without loss scaling".into(),
            lines: vec![
                format!("let policy: ResolvedPolicy = \"{bf16}\".parse()?;"),
                "let scaler = LossScaler::noop();".into(),
            ],
            tried: Some(tried),
        }
    }
}

/// The line both editions print after a trial and its remedies: "no remedy needed" when the
/// trial trained, "no remedy the audit could run trained without skips" when it did not and
/// no remedy's own trial did (none at all included); `None` when a remedy trained.
///
/// # Example
///
/// ```
/// use burn_mpric_core::audit::{Trial, remedy_summary};
///
/// let fine = Trial::new("mixed_f16", 1024.0, 8);
/// assert_eq!(remedy_summary(&fine, &[]), Some("no remedy needed"));
/// let failed = Trial { skipped: vec![3, 4], ..fine };
/// assert_eq!(remedy_summary(&failed, &[]), Some("no remedy the audit could run trained without skips"));
/// ```
pub fn remedy_summary(trial: &Trial, remedies: &[Remedy]) -> Option<&'static str> {
    if trial.trains() {
        Some("no remedy needed")
    } else if remedies
        .iter()
        .all(|r| !r.tried.as_ref().is_some_and(Trial::trains))
    {
        Some("no remedy the audit could run trained without skips")
    } else {
        None
    }
}

impl Verdict {
    /// The verdict's line in a report that also shows `trial`: the verdict, followed by
    /// " — " and its [`contradiction`](Self::contradiction) when the trial contradicts it.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::audit::{Trial, Verdict};
    ///
    /// let safe = Verdict::Bf16Safe { largest_exp: 3 };
    /// let failed = Trial { skipped: vec![2, 3, 4], ..Trial::new("p=f32,c=bf16,o=f32", 1.0, 8) };
    /// assert!(safe.line_with(&failed).ends_with("(largest 2^3, bf16 ends at 2^127) — but the trial below did not train: 3 of its 8 steps skipped after the first 2"));
    /// assert_eq!(safe.line_with(&Trial::new("p=f32,c=bf16,o=f32", 1.0, 8)), safe.to_string());
    /// ```
    pub fn line_with(&self, trial: &Trial) -> String {
        match self.contradiction(trial) {
            Some(note) => format!("{self} — {note}"),
            None => self.to_string(),
        }
    }

    /// What `trial` (the audited policy tried for a few steps) says against this verdict,
    /// as a note for the verdict's line: a verdict that calls a dtype safe (f16 safe, bf16
    /// safe, use bf16) is contradicted by a trial at that compute dtype that did not train.
    /// The verdicts read the measured values at f32's range; the trial ran the real thing, so
    /// when they disagree the trial wins and the reader must see both side by side. `None`:
    /// no contradiction (a trial that trained, another dtype, a verdict that warns).
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::audit::{Trial, Verdict};
    /// use burn_mpric_core::scale::SkipCause;
    ///
    /// let safe = Verdict::F16Safe { initial_scale: 262144.0, largest_exp: -20, flushed: 0.0, keeping_full: vec![] };
    /// let mut trial = Trial::new("p=f32,c=f16,o=f32", 262144.0, 8);
    /// assert_eq!(safe.contradiction(&trial), None);
    /// for step in 0..8 {
    ///     trial.record(step, true, None, Some(SkipCause::LossNotFinite { scale: 262144.0, probe_scale: 1.0 / 256.0 }));
    /// }
    /// assert_eq!(
    ///     safe.contradiction(&trial).unwrap(),
    ///     "but the trial below did not train: 6 of its 8 steps skipped after the first 2 (the loss itself was not finite)"
    /// );
    /// ```
    pub fn contradiction(&self, trial: &Trial) -> Option<String> {
        if trial.trains() {
            return None;
        }
        let safe_at = match self {
            Verdict::F16Safe { .. } => FloatDType::F16,
            Verdict::UseBf16 { .. } | Verdict::Bf16Safe { .. } => FloatDType::BF16,
            Verdict::NotFinite { .. }
            | Verdict::KeepFullPrecision { .. }
            | Verdict::ForwardOverflow { .. } => return None,
        };
        // A trial whose policy does not parse is taken as the one the verdict speaks of:
        // better a note too many than a safe verdict above a failure.
        let compute = trial
            .policy
            .parse::<ResolvedPolicy>()
            .map_or(safe_at, |p| p.compute());
        if compute != safe_at {
            return None;
        }
        let late = trial.skipped.iter().filter(|&&s| s >= GRACE_STEPS).count();
        let mut note = String::from("but the trial below");
        // A trial from another scale than the one proposed tried the recipe, not the verdict.
        if let Verdict::F16Safe { initial_scale, .. } = self
            && *initial_scale != trial.initial_scale
        {
            note.push_str(&format!(
                ", from a loss scale of {} rather than this {},",
                crate::scale::cause::power(trial.initial_scale),
                crate::scale::cause::power(*initial_scale)
            ));
        }
        note.push_str(" did not train");
        if late > 0 {
            note.push_str(&format!(
                ": {late} of its {} steps skipped after the first {GRACE_STEPS}",
                trial.steps
            ));
        }
        let why = match &trial.cause {
            Some(SkipCause::Range { zero: false, .. }) => Some("the gradients overflowed"),
            Some(SkipCause::Range { zero: true, .. }) => Some("the gradients flushed to zero"),
            Some(SkipCause::LossNotFinite { .. }) => Some("the loss itself was not finite"),
            Some(SkipCause::ScaleInvariant { .. }) => Some("not a range problem"),
            None if trial.overflow.is_some() => Some("the gradients overflowed"),
            None => None,
        };
        if let Some(why) = why {
            note.push_str(&format!(" ({why})"));
        }
        Some(note)
    }
}

impl HotSpot {
    /// The hot spot of a failed trial, from what an audit by parameters sees (the Burn 0.22
    /// edition): the low forward values over f16 in `report.ops`; the parameters a kernel
    /// computes wrongly (the trial's [`SkipCause::ScaleInvariant`]), else those in `low` (the
    /// gradients computed at the compute dtype) whose measured gradients overflow f16 at the
    /// trial's scale, largest first, else those the trial found overflowing when they are not all
    /// of them; and the top-level `fields` (name, type) that hold them. `None` when nothing
    /// points anywhere.
    ///
    /// ```
    /// use burn_mpric_core::audit::{AuditReport, HotSpot, Magnitudes, ParamStats, Trial};
    ///
    /// let mut grad = Magnitudes::default();
    /// grad.add(&[1e5]);
    /// let params = vec![ParamStats { path: "first.weight".into(), grad }];
    /// let report = AuditReport::new(1, "mixed_f16", "mixed_bf16", 1.0, vec![], params.clone());
    /// let trial = Trial { policy: "mixed_f16".into(), initial_scale: 1.0, steps: 8, skipped: vec![5], overflow: None, cause: None };
    /// let fields = [("first".to_string(), "Linear".to_string())];
    /// let spot = HotSpot::locate(&report, &params, &trial, &fields).unwrap();
    /// assert_eq!(spot.fields, fields);
    /// ```
    pub fn locate(
        report: &AuditReport,
        low: &[ParamStats],
        trial: &Trial,
        fields: &[(String, String)],
    ) -> Option<HotSpot> {
        let forward: Vec<String> = report
            .ops
            .iter()
            .filter(|r| r.low && r.overflows_f16())
            .map(|r| r.method.clone())
            .collect();
        let scale = trial.initial_scale;
        // A kernel that computes wrongly: the parameters the probe found at both scales.
        let mut params: Vec<String> = match &trial.cause {
            Some(SkipCause::ScaleInvariant { params, .. }) => params.clone(),
            _ => Vec::new(),
        };
        if params.is_empty() {
            let mut hot: Vec<&ParamStats> = low
                .iter()
                .filter(|p| f64::from(p.grad.max_abs) * f64::from(scale) > f64::from(F16_MAX))
                .collect();
            hot.sort_by(|a, b| b.grad.max_abs.total_cmp(&a.grad.max_abs));
            params = hot.iter().map(|p| p.path.clone()).collect();
        }
        if params.is_empty()
            && let Some(overflow) = &trial.overflow
            && overflow.params.len() < report.params.len()
        {
            params = overflow.params.clone();
        }
        if forward.is_empty() && params.is_empty() {
            return None;
        }
        let top = |path: &str| path.split('.').next().unwrap_or(path).to_string();
        let mut held: Vec<(String, String)> = Vec::new();
        for path in &params {
            let field = top(path);
            if let Some(found) = fields.iter().find(|(f, _)| *f == field)
                && !held.contains(found)
            {
                held.push(found.clone());
            }
        }
        Some(HotSpot {
            forward,
            params,
            fields: held,
            scale,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::Phase;

    fn failed(policy: &str) -> Trial {
        Trial {
            skipped: vec![0, 1, 2, 5],
            overflow: Some(Overflow::new(vec!["fc.weight".into()])),
            ..Trial::new(policy, 262144.0, 8)
        }
    }

    #[test]
    fn a_safe_verdict_is_contradicted_only_by_a_failed_trial_at_its_dtype() {
        let f16 = Verdict::F16Safe {
            initial_scale: 262144.0,
            largest_exp: -20,
            flushed: 0.0,
            keeping_full: vec![],
        };
        let bf16 = Verdict::Bf16Safe { largest_exp: 3 };
        let at_f16 = failed("p=f32,c=f16,o=f32");
        let at_bf16 = failed("p=f32,c=bf16,o=f32");
        assert_eq!(
            f16.line_with(&at_f16),
            "f16 is safe with an initial scale of 2^18: the largest gradient then reaches 2^-2 (f16 ends at 2^15) and 0.00% of the gradient values flush to zero — but the trial below did not train: 2 of its 8 steps skipped after the first 2 (the gradients overflowed)"
        );
        assert_eq!(
            f16.contradiction(&at_bf16),
            None,
            "a bf16 trial says nothing of f16"
        );
        assert_eq!(bf16.contradiction(&at_f16), None);
        assert!(bf16.contradiction(&at_bf16).is_some());
        let warning = Verdict::NotFinite {
            method: "float_exp".into(),
            phase: Phase::Forward,
        };
        assert_eq!(
            warning.contradiction(&at_f16),
            None,
            "a warning is confirmed, not contradicted"
        );
    }

    #[test]
    fn a_trial_from_another_scale_says_which() {
        let f16 = Verdict::F16Safe {
            initial_scale: 65536.0,
            largest_exp: -2,
            flushed: 0.0,
            keeping_full: vec![],
        };
        let trial = Trial {
            initial_scale: 2f32.powi(40),
            ..failed("p=f32,c=f16,o=f32")
        };
        assert_eq!(
            f16.contradiction(&trial).unwrap(),
            "but the trial below, from a loss scale of 2^40 rather than this 2^16, did not train: 2 of its 8 steps skipped after the first 2 (the gradients overflowed)"
        );
    }

    #[test]
    fn a_cause_within_the_grace_steps_is_named_without_a_count() {
        let bug = SkipCause::ScaleInvariant {
            scale: 2.0,
            probe_scale: 1.0 / 256.0,
            zero: true,
            params: vec![],
        };
        let trial = Trial {
            skipped: vec![0],
            cause: Some(bug),
            ..Trial::new("p=f16,c=f16,o=f16", 2.0, 8)
        };
        let f16 = Verdict::F16Safe {
            initial_scale: 2.0,
            largest_exp: 0,
            flushed: 0.0,
            keeping_full: vec![],
        };
        assert_eq!(
            f16.contradiction(&trial).unwrap(),
            "but the trial below did not train (not a range problem)"
        );
    }

    #[test]
    fn the_summary_names_a_failure_that_no_remedy_fixed() {
        let trial = failed("p=f32,c=f16,o=f32");
        let untried = Remedy::keep_field("first", "Linear");
        assert_eq!(
            remedy_summary(&trial, std::slice::from_ref(&untried)),
            Some("no remedy the audit could run trained without skips")
        );
        let works = Remedy::initial_scale(256.0, Trial::new("p=f32,c=f16,o=f32", 256.0, 8));
        assert_eq!(remedy_summary(&trial, &[untried, works]), None);
    }
}
