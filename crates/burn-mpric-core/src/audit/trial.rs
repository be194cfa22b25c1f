//! What trying a policy for a few steps says: [`Trial`], the [`HotSpot`] a failed trial
//! points at, and the [`Remedy`]s an audit offers, each with the trial that checked it.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::{AuditReport, F16_MAX, ParamStats};
use crate::scale::{Overflow, SkipCause};

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
        match &self.tried {
            Some(trial) if trial.trains() => write!(f, "  checked: {trial}"),
            Some(trial) => write!(f, "  tried, did not train: {trial}"),
            None => write!(
                f,
                "  not run: it changes your model's type; audit the changed model to check it"
            ),
        }
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
