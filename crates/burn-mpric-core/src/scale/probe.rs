//! [`Probe`]: what the probe of a skipped step starts from (the step's read, its scale, the
//! parameters it found not finite), the scale the batch runs at again, and the judgement of
//! the second read. Apart from `cause.rs`, which the step's outcome names: the probe reads
//! an outcome, the outcome names a cause, and neither imports the other's importer.

use super::{ProbeRead, SkipCause, StepOutcome};

/// What a probe starts from: the step's read, made at `scale`, and the parameters the step
/// found not finite. The editions run the batch once more at [`probe_scale`](Self::probe_scale)
/// on their own tensors and hand the second read to [`judge`](Self::judge).
///
/// # Example
///
/// ```
/// use burn_mpric_core::scale::{Probe, ProbeRead, SkipCause};
///
/// let overflow = ProbeRead { loss_finite: true, grads_finite: false, grads_zero: false };
/// let probe = Probe { read: overflow, loss_read: true, scale: 65536.0, params: vec!["fc.weight".into()] };
/// assert_eq!(probe.probe_scale(), 1.0 / 256.0);
/// let fine = ProbeRead { grads_finite: true, ..overflow };
/// assert!(matches!(probe.judge(fine, &[]), SkipCause::Range { scale: 65536.0, zero: false, .. }));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Probe {
    /// The step's read.
    pub read: ProbeRead,
    /// Whether the step read its loss; when not, the probe's read of the same forward pass
    /// stands for it (the loss scale does not touch the forward pass).
    pub loss_read: bool,
    /// The scale the step ran at.
    pub scale: f32,
    /// The parameters the step found not finite, by module path (empty: not looked for).
    pub params: Vec<String>,
}

impl Probe {
    /// The probe of a step already taken (`probe_cause`, for loops where the step and its
    /// batch part ways): from its reported loss, scale and overflowing parameters; `None` for
    /// an applied step, which needs none.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::scale::{Overflow, Probe, ScalerState};
    ///
    /// let mut state = ScalerState::default();
    /// assert!(Probe::of_skipped(&state.finish(true, None, None)).is_none());
    /// let skipped = state.finish(false, None, None).with_overflow(Overflow::new(vec!["w".into()]));
    /// let probe = Probe::of_skipped(&skipped).unwrap();
    /// assert_eq!((probe.scale, probe.loss_read, probe.params), (skipped.scale_used, false, vec!["w".to_string()]));
    /// ```
    pub fn of_skipped(outcome: &StepOutcome) -> Option<Self> {
        outcome.is_skipped().then(|| Self {
            // A skipped step's gradients were not finite.
            read: ProbeRead::of(outcome.loss, false, false),
            loss_read: outcome.loss.is_some(),
            scale: outcome.scale_used,
            params: outcome
                .overflow
                .as_ref()
                .map(|o| o.params.clone())
                .unwrap_or_default(),
        })
    }

    /// The scale the batch is run at again ([`ProbeRead::probe_scale`] from the step's).
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::scale::{Probe, ProbeRead};
    ///
    /// let zero = ProbeRead { loss_finite: true, grads_finite: true, grads_zero: true };
    /// assert_eq!(Probe { read: zero, loss_read: true, scale: 4.0, params: vec![] }.probe_scale(), 1024.0);
    /// ```
    pub fn probe_scale(&self) -> f32 {
        self.read.probe_scale(self.scale)
    }

    /// The cause from the probe's read `probed` and the parameters `still` not finite there
    /// (empty: not looked for): [`SkipCause::judge`], with the probe's loss standing for the
    /// step's when the step did not read it.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::scale::{Probe, ProbeRead, SkipCause};
    ///
    /// // The step read no loss; the probe's loss is not finite: the forward pass is at fault.
    /// let nan = ProbeRead { loss_finite: true, grads_finite: false, grads_zero: false };
    /// let probe = Probe { read: nan, loss_read: false, scale: 2.0, params: vec![] };
    /// let cause = probe.judge(ProbeRead { loss_finite: false, ..nan }, &[]);
    /// assert!(matches!(cause, SkipCause::LossNotFinite { .. }));
    /// ```
    pub fn judge(self, probed: ProbeRead, still: &[String]) -> SkipCause {
        let probe_scale = self.probe_scale();
        let mut read = self.read;
        if !self.loss_read {
            read.loss_finite = probed.loss_finite;
        }
        SkipCause::judge(read, probed, self.scale, probe_scale, self.params, still)
    }
}
