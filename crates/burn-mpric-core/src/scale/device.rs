//! The loss scale's rule as a device runs it, and the host's replay of what it decided: what
//! both editions' device paths share.

use super::config::{LossScaleConfig, UpdateRule};
use super::loss_scale::LossScale;
use super::outcome::StepOutcome;
use super::state::ScalerState;
use crate::lane::{IntLane, Lane};

/// A dynamic loss scale's rule in the terms a device evaluates it with select ops: an f32
/// scale, integer counters and thresholds compared before the step. Evaluated with these
/// numbers, a device takes the same decisions, bit for bit, as
/// [`DynamicLossScale::adjust`](crate::scale::DynamicLossScale::adjust).
///
/// The device's f32 product `scale * factor` is the core's rounding of the f64 product only
/// when the factor is itself an f32, so [`of`](Self::of) refuses factors that are not (2 and
/// 0.5, as in every preset, are).
///
/// # Example
///
/// ```
/// use burn_mpric_core::scale::{DeviceScaleRule, LossScaleConfig};
///
/// let rule = DeviceScaleRule::of(&LossScaleConfig::new().with_growth_interval(3)).unwrap();
/// assert_eq!(rule.grow_at, 2); // the third finite step in a row grows the scale
/// assert!(DeviceScaleRule::of(&LossScaleConfig::new().with_growth_factor(1.1)).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DeviceScaleRule {
    /// A finite step grows the scale when the growth counter before it is at least this;
    /// otherwise it counts one more.
    pub grow_at: u32,
    /// The factor of a growth.
    pub growth_factor: f32,
    /// The largest scale a growth reaches.
    pub max_scale: Option<f32>,
    /// The factor of a backoff.
    pub backoff_factor: f32,
    /// The smallest scale a backoff reaches.
    pub min_scale: f32,
    /// The hysteresis tracker after a growth (and after every finite step, with
    /// `consecutive_hysteresis`).
    pub hysteresis: u32,
    /// DeepSpeed's rule: a non-finite step backs off when at most one overflow was left and
    /// keeps the tracker then; otherwise it uses one up. Under the other rules it uses one up
    /// and backs off when none is left.
    pub deepspeed: bool,
    /// DeepSpeed's `consecutive_hysteresis`: every finite step restores the tracker.
    pub consecutive_hysteresis: bool,
}

impl DeviceScaleRule {
    /// One step of the rule where the host does not look: the scale, the finite steps'
    /// counter and the hysteresis left after a step whose finiteness is `finite` (a mask the
    /// host never reads), from `(scale, counter, left)` before it; `full` is the hysteresis a
    /// step restores. The core's decisions (`ScalerState::finish`) op for op, on either
    /// edition's tensors or on the host.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::lane::Host;
    /// use burn_mpric_core::scale::{DeviceScaleRule, LossScaleConfig};
    ///
    /// let config = LossScaleConfig::new().with_initial_scale(1024.0).with_growth_interval(2);
    /// let rule = DeviceScaleRule::of(&config).unwrap();
    /// let step = |state, finite| rule.adjust::<Host, f32, i64>(state, &1, finite);
    /// let state = step((1024.0, 0, 1), true);
    /// assert_eq!(step(state, true).0, 2048.0); // grown after two finite steps
    /// assert_eq!(step(state, false).0, 512.0); // backed off
    /// ```
    pub fn adjust<E, F, I>(
        &self,
        (scale, counter, left): (F, I, I),
        full: &I,
        finite: F::Mask,
    ) -> (F, I, I)
    where
        F: Lane<E>,
        I: IntLane<E, Mask = F::Mask>,
    {
        // A finite step: grow at the rule's count, else count it.
        let grow = counter.clone().greater_equal_elem(i64::from(self.grow_at));
        let mut grown = scale.clone().mul_scalar(f64::from(self.growth_factor));
        if let Some(max) = self.max_scale {
            grown = grown.clamp_max(max);
        }
        // Past f32::MAX the scale stays where it was.
        let grown_finite = grown.clone().mul_scalar(0.0).equal_elem(0.0);
        let grown = scale.clone().mask_where(grown_finite, grown);
        let finite_scale = scale.clone().mask_where(grow.clone(), grown);
        let finite_counter = counter.clone().add_scalar(1).mask_fill(grow.clone(), 0);
        let finite_left = if self.consecutive_hysteresis {
            full.clone()
        } else {
            left.clone().mask_where(grow, full.clone())
        };

        // A non-finite step: back off once the hysteresis is used up.
        let (overflow_left, back_off) = if self.deepspeed {
            let back_off = left.clone().lower_equal_elem(1);
            let used = left
                .clone()
                .sub_scalar(1)
                .mask_where(back_off.clone(), left);
            (used, back_off)
        } else {
            let used = left.sub_scalar(1).clamp_min(0);
            (used.clone(), used.equal_elem(0))
        };
        let backed_off = scale
            .clone()
            .mul_scalar(f64::from(self.backoff_factor))
            .clamp_min(self.min_scale);
        let overflow_scale = scale.mask_where(back_off, backed_off);
        let overflow_counter = counter.zeros_like();
        (
            overflow_scale.mask_where(finite.clone(), finite_scale),
            overflow_counter.mask_where(finite.clone(), finite_counter),
            overflow_left.mask_where(finite, finite_left),
        )
    }

    /// The rule of a dynamic scale's configuration; the message says why a factor is refused.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::scale::{DeviceScaleRule, LossScaleConfig};
    ///
    /// let flax = DeviceScaleRule::of(&LossScaleConfig::flax().with_growth_interval(3)).unwrap();
    /// assert_eq!(flax.grow_at, 3); // Flax grows one step later
    /// let err = DeviceScaleRule::of(&LossScaleConfig::new().with_backoff_factor(0.3)).unwrap_err();
    /// assert!(err.contains("backoff_factor 0.3"));
    /// ```
    pub fn of(config: &LossScaleConfig) -> Result<Self, String> {
        let exact = |name: &str, factor: f64| {
            let single = factor as f32;
            if f64::from(single) == factor {
                Ok(single)
            } else {
                Err(format!(
                    "{name} {factor} is not exact in f32, so the device cannot round \
                     `scale * {name}` as the host does; use a factor such as 2 or 0.5, or the \
                     host-read step (LossScaler)"
                ))
            }
        };
        let (deepspeed, consecutive_hysteresis) = match config.rule {
            UpdateRule::DeepSpeed {
                consecutive_hysteresis,
            } => (true, consecutive_hysteresis),
            UpdateRule::Standard | UpdateRule::Flax => (false, false),
        };
        Ok(Self {
            grow_at: match config.rule {
                UpdateRule::Flax => config.growth_interval,
                _ => config.growth_interval.saturating_sub(1),
            },
            growth_factor: exact("growth_factor", config.growth_factor)?,
            max_scale: config.max_scale,
            backoff_factor: exact("backoff_factor", config.backoff_factor)?,
            min_scale: config.min_scale,
            hysteresis: config.hysteresis,
            deepspeed,
            consecutive_hysteresis,
        })
    }
}

/// What a device holds of a loss scale: its value, counters and (for a dynamic scale) the
/// rule that moves them; static and no-op scales have no rule and never move.
///
/// # Example
///
/// ```
/// use burn_mpric_core::scale::{DeviceScaleState, LossScale, LossScaleConfig};
///
/// let state = DeviceScaleState::of(&LossScale::dynamic(LossScaleConfig::megatron()).unwrap()).unwrap();
/// assert_eq!((state.counter, state.hysteresis_left), (0, 2));
/// assert!(DeviceScaleState::of(&LossScale::fixed(8.0).unwrap()).unwrap().rule.is_none());
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DeviceScaleState {
    /// The scale.
    pub scale: f32,
    /// The growth counter.
    pub counter: u32,
    /// The hysteresis tracker.
    pub hysteresis_left: u32,
    /// How a dynamic scale moves; `None` for scales that never do.
    pub rule: Option<DeviceScaleRule>,
}

impl DeviceScaleState {
    /// The device's copy of a host scale (a fresh one, or one restored from a checkpoint).
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::scale::{DeviceScaleState, LossScale};
    ///
    /// assert_eq!(DeviceScaleState::of(&LossScale::noop()).unwrap().scale, 1.0);
    /// ```
    pub fn of(scale: &LossScale) -> Result<Self, String> {
        Ok(match scale {
            LossScale::Dynamic(dynamic) => Self {
                scale: dynamic.loss_scale(),
                counter: dynamic.counter(),
                hysteresis_left: dynamic.hysteresis_left(),
                rule: Some(DeviceScaleRule::of(dynamic.config())?),
            },
            other => Self {
                scale: other.loss_scale(),
                counter: 0,
                hysteresis_left: 0,
                rule: None,
            },
        })
    }
}

/// The most steps a device path leaves unread: past this many, a step reads the older ones
/// (one step behind) even when the loop never asks, so that pending values stay bounded.
///
/// # Example
///
/// ```
/// use burn_mpric_core::scale::MAX_PENDING_STEPS;
///
/// assert!(MAX_PENDING_STEPS >= 64);
/// ```
pub const MAX_PENDING_STEPS: usize = 1024;

/// What the host read of one step the device decided: whether its gradients were finite, and
/// the mean of its scaled loss when it was kept.
///
/// # Example
///
/// ```
/// use burn_mpric_core::scale::{DeviceStepRead, ScalerState};
///
/// let skipped: DeviceStepRead = (false, None);
/// let (outcomes, _) = ScalerState::default().replay(&[skipped], 0);
/// assert!(outcomes[0].is_skipped());
/// ```
pub type DeviceStepRead = (bool, Option<f32>);

impl ScalerState {
    /// Replays steps a device decided, in order, as [`finish`](Self::finish) would have taken
    /// them at once: the same outcomes, scales and counters. Returns the outcomes and the
    /// index of the first one that reached `max_consecutive_skips` skips in a row (`0`:
    /// never), if any; every step is recorded all the same.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::scale::{LossScaleConfig, ScalerState};
    ///
    /// let mut state = ScalerState::dynamic(LossScaleConfig::new().with_initial_scale(8.0)).unwrap();
    /// let (outcomes, stalled) = state.replay(&[(true, Some(16.0)), (false, None), (false, None)], 2);
    /// assert_eq!(outcomes[0].loss, Some(2.0)); // divided by the scale that step used
    /// assert_eq!((outcomes[2].scale_used, state.scale()), (4.0, 2.0));
    /// assert_eq!(stalled, Some(2));
    /// ```
    pub fn replay(
        &mut self,
        steps: &[DeviceStepRead],
        max_consecutive_skips: u64,
    ) -> (Vec<StepOutcome>, Option<usize>) {
        let mut stalled = None;
        let outcomes = steps
            .iter()
            .enumerate()
            .map(|(index, &(finite, loss))| {
                let outcome = self.finish(finite, loss, None);
                if outcome.stalls(max_consecutive_skips) && stalled.is_none() {
                    stalled = Some(index);
                }
                outcome
            })
            .collect();
        (outcomes, stalled)
    }
}
