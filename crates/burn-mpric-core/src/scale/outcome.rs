//! What one step did: [`StepOutcome`], and the running counters [`ScalerStats`].

use serde::{Deserialize, Serialize};

use crate::scale::{Overflow, SkipCause};

/// Whether the optimizer step ran.
///
/// # Example
///
/// ```
/// use burn_mpric_core::scale::StepAction;
///
/// assert_ne!(StepAction::Applied, StepAction::Skipped);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum StepAction {
    /// All gradients were finite and the optimizer step ran.
    Applied,
    /// A gradient was non-finite; the optimizer was not called, so parameters and optimizer
    /// state (moments, step counters) are unchanged.
    Skipped,
}

/// Running counters of a [`ScalerState`](crate::scale::ScalerState) (optax `apply_if_finite`'s counters).
///
/// # Example
///
/// ```
/// use burn_mpric_core::scale::ScalerState;
///
/// let mut scaler = ScalerState::noop();
/// scaler.update(true);
/// scaler.update(false);
/// scaler.update(false);
/// let stats = scaler.stats();
/// assert_eq!((stats.steps, stats.skipped, stats.consecutive_skipped), (3, 2, 2));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ScalerStats {
    /// Steps seen (applied and skipped).
    pub steps: u64,
    /// Steps skipped because of non-finite gradients, in total (never reset).
    pub skipped: u64,
    /// Steps skipped since the last applied step.
    pub consecutive_skipped: u64,
}

impl ScalerStats {
    /// The counters after one more step.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::scale::ScalerStats;
    ///
    /// let s = ScalerStats::default().record(false).record(true);
    /// assert_eq!((s.steps, s.skipped, s.consecutive_skipped), (2, 1, 0));
    /// ```
    #[must_use]
    pub fn record(self, applied: bool) -> Self {
        Self {
            steps: self.steps.saturating_add(1),
            skipped: self.skipped.saturating_add(u64::from(!applied)),
            consecutive_skipped: if applied {
                0
            } else {
                self.consecutive_skipped.saturating_add(1)
            },
        }
    }

    /// Steps that were applied.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::scale::ScalerStats;
    ///
    /// assert_eq!(ScalerStats::default().record(true).applied(), 1);
    /// ```
    pub fn applied(&self) -> u64 {
        self.steps - self.skipped
    }
}

/// What one step did.
///
/// `loss` is the loss unscaled with the scale that was *used* for this step (`scale_used`), not
/// the next one, so it is right on growth and backoff steps too.
///
/// # Example
///
/// ```
/// use burn_mpric_core::scale::{LossScaleConfig, ScalerState};
///
/// let mut scaler = ScalerState::dynamic(LossScaleConfig::new().with_initial_scale(64.0)).unwrap();
/// let outcome = scaler.update(false);
/// assert!(outcome.is_skipped());
/// assert_eq!((outcome.scale_used, outcome.next_scale), (64.0, 32.0));
/// assert_eq!(outcome.stats.skipped, 1);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct StepOutcome {
    /// Whether the optimizer step ran.
    pub action: StepAction,
    /// The scale the loss was multiplied by (and the gradients divided by) in this step.
    pub scale_used: f32,
    /// The scale for the next step.
    pub next_scale: f32,
    /// The loss divided by `scale_used`, when a loss was given to the step.
    pub loss: Option<f32>,
    /// The global L2 norm of the unscaled gradients before clipping, when clipping is on
    /// (infinite when an element is infinite or the norm exceeds `f32::MAX`, and the step was
    /// skipped; NaN when an element is NaN).
    pub grad_norm: Option<f32>,
    /// The scaler's counters after this step.
    pub stats: ScalerStats,
    /// On a skipped step, the parameters whose gradients held inf or NaN, where the step
    /// looked for them (burn-mpric-scale's steps do, with one more read on skipped steps
    /// only); `None` on applied steps.
    pub overflow: Option<Overflow>,
    /// On a step whose gradients were not finite or all zero, whether the problem moves with
    /// the loss scale, where the step re-ran the batch at a probe scale to find out
    /// ([`SkipCause`]); `None` otherwise.
    pub cause: Option<SkipCause>,
}

impl StepOutcome {
    /// The same outcome naming the parameters that overflowed.
    ///
    /// ```
    /// use burn_mpric_core::scale::{Overflow, ScalerState};
    ///
    /// let outcome = ScalerState::noop().update(false).with_overflow(Overflow::new(vec!["w".into()]));
    /// assert_eq!(outcome.overflow.unwrap().params, vec!["w"]);
    /// ```
    pub fn with_overflow(mut self, overflow: Overflow) -> Self {
        self.overflow = Some(overflow);
        self
    }

    /// The same outcome with the probe's finding.
    ///
    /// ```
    /// use burn_mpric_core::scale::{ScalerState, SkipCause};
    ///
    /// let cause = SkipCause::LossNotFinite { scale: 2.0, probe_scale: 2.0 / 256.0 };
    /// let outcome = ScalerState::noop().update(false).with_cause(cause.clone());
    /// assert_eq!(outcome.cause, Some(cause));
    /// ```
    pub fn with_cause(mut self, cause: SkipCause) -> Self {
        self.cause = Some(cause);
        self
    }

    /// `true` when the optimizer step ran.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::scale::ScalerState;
    ///
    /// assert!(ScalerState::noop().update(true).is_applied());
    /// ```
    pub fn is_applied(&self) -> bool {
        self.action == StepAction::Applied
    }

    /// `true` when the step was skipped.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::scale::ScalerState;
    ///
    /// assert!(ScalerState::noop().update(false).is_skipped());
    /// ```
    pub fn is_skipped(&self) -> bool {
        self.action == StepAction::Skipped
    }

    /// Whether this step stops the run: it was skipped, and so were the steps before it, up
    /// to `max` in a row (`max_consecutive_skips`; 0 never stops).
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::scale::ScalerState;
    ///
    /// let mut state = ScalerState::default();
    /// let first = state.finish(false, None, None);
    /// assert!(!first.stalls(2) && first.stalls(1) && !first.stalls(0));
    /// assert!(state.finish(false, None, None).stalls(2));
    /// ```
    pub fn stalls(&self, max: u64) -> bool {
        max > 0 && self.is_skipped() && self.stats.consecutive_skipped >= max
    }

    /// The message of a run that stopped at this step after `max` skips in a row: how many,
    /// the limit and the scale now, then what the step found (the probe's cause, else the
    /// parameters that overflowed). Both editions' `StepError::Stalled` print it.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::scale::{LossScaleConfig, Overflow, ScalerState};
    ///
    /// let mut state = ScalerState::dynamic(LossScaleConfig::new().with_initial_scale(8.0)).unwrap();
    /// let outcome = state.finish(false, None, None).with_overflow(Overflow::new(vec!["fc.weight".into()]));
    /// assert_eq!(
    ///     outcome.stalled_message(1),
    ///     "1 steps in a row were skipped for non-finite gradients (max_consecutive_skips = 1; loss scale now 4e0): 1 parameter: fc.weight"
    /// );
    /// ```
    pub fn stalled_message(&self, max: u64) -> String {
        let found = match (&self.cause, &self.overflow) {
            (Some(cause), _) => format!(": {cause}"),
            (None, Some(overflow)) => format!(": {overflow}"),
            (None, None) => String::new(),
        };
        format!(
            "{} steps in a row were skipped for non-finite gradients (max_consecutive_skips = {max}; loss scale now {:e}){found}",
            self.stats.consecutive_skipped, self.next_scale
        )
    }
}
