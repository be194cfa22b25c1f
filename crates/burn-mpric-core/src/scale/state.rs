//! [`ScalerState`]: the loss scaler without tensors: the scale, the clipping rule and the
//! counters, and the one function that decides a step.

use super::clip::ClipNorm;
use super::config::LossScaleConfig;
use super::invalid::LossScaleError;
use super::loss_scale::LossScale;
use super::outcome::{ScalerStats, StepAction, StepOutcome};
use super::preset::LossScalePreset;

/// Everything a loss scaler knows between steps: the loss scale's state, the optional
/// global-norm clipping, and the running counters. Each edition's `LossScaler` holds one and
/// asks it to decide each step ([`finish`](Self::finish)), so both editions take the same
/// decisions on the same sequence of steps.
///
/// # Example
///
/// ```
/// use burn_mpric_core::scale::{LossScaleConfig, ScalerState};
///
/// let config = LossScaleConfig::new().with_initial_scale(4.0).with_growth_interval(2);
/// let mut scaler = ScalerState::dynamic(config).unwrap();
/// let steps: Vec<f32> = [true, true, false, true]
///     .into_iter()
///     .map(|finite| scaler.finish(finite, None, None).next_scale)
///     .collect();
/// assert_eq!(steps, [4.0, 8.0, 4.0, 4.0]);
/// assert_eq!((scaler.stats().steps, scaler.stats().skipped), (4, 1));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScalerState {
    loss_scale: LossScale,
    clip: Option<ClipNorm>,
    stats: ScalerStats,
}

impl Default for ScalerState {
    /// The default dynamic scale, no clipping.
    fn default() -> Self {
        Self::new(LossScale::default())
    }
}

impl ScalerState {
    /// A scaler with this loss scale, no clipping, and zero counters.
    ///
    /// ```
    /// use burn_mpric_core::scale::{LossScale, ScalerState};
    ///
    /// assert_eq!(ScalerState::new(LossScale::noop()).scale(), 1.0);
    /// ```
    pub fn new(loss_scale: impl Into<LossScale>) -> Self {
        Self::from_parts(loss_scale.into(), None, ScalerStats::default())
    }

    /// A scaler from all of its parts (a restored state; counters are taken as they are).
    ///
    /// ```
    /// use burn_mpric_core::scale::{LossScale, ScalerState, ScalerStats};
    ///
    /// let stats = ScalerStats { steps: 3, skipped: 1, consecutive_skipped: 0 };
    /// let s = ScalerState::from_parts(LossScale::noop(), None, stats);
    /// assert_eq!(s.stats(), stats);
    /// ```
    pub fn from_parts(loss_scale: LossScale, clip: Option<ClipNorm>, stats: ScalerStats) -> Self {
        Self {
            loss_scale,
            clip,
            stats,
        }
    }

    /// A dynamic scale from `config` (validated).
    ///
    /// ```
    /// use burn_mpric_core::scale::{LossScaleConfig, ScalerState};
    ///
    /// assert_eq!(ScalerState::dynamic(LossScaleConfig::torch()).unwrap().scale(), 65536.0);
    /// assert!(ScalerState::dynamic(LossScaleConfig::new().with_growth_factor(0.5)).is_err());
    /// ```
    pub fn dynamic(config: LossScaleConfig) -> Result<Self, LossScaleError> {
        LossScale::dynamic(config).map(Self::new)
    }

    /// A static scale.
    ///
    /// ```
    /// use burn_mpric_core::scale::ScalerState;
    ///
    /// assert_eq!(ScalerState::fixed(128.0).unwrap().scale(), 128.0);
    /// assert!(ScalerState::fixed(0.0).is_err());
    /// ```
    pub fn fixed(scale: f32) -> Result<Self, LossScaleError> {
        LossScale::fixed(scale).map(Self::new)
    }

    /// Scale 1 that never changes; non-finite steps are still skipped (bf16 mode).
    ///
    /// ```
    /// use burn_mpric_core::scale::ScalerState;
    ///
    /// let mut s = ScalerState::noop();
    /// assert!(s.finish(false, None, None).is_skipped());
    /// assert_eq!(s.scale(), 1.0);
    /// ```
    pub fn noop() -> Self {
        Self::new(LossScale::noop())
    }

    /// The scaler a preset stands for, when computation runs in f16 (`f16_compute`) or not
    /// (`auto` is dynamic for f16 and none otherwise).
    ///
    /// ```
    /// use burn_mpric_core::scale::{LossScalePreset, ScalerState};
    ///
    /// assert_eq!(ScalerState::from_preset(LossScalePreset::Auto, true).unwrap().scale(), 32768.0);
    /// assert_eq!(ScalerState::from_preset(LossScalePreset::Auto, false).unwrap().scale(), 1.0);
    /// ```
    pub fn from_preset(preset: LossScalePreset, f16_compute: bool) -> Result<Self, LossScaleError> {
        preset.loss_scale(f16_compute).map(Self::new)
    }

    /// A copy that clips the global gradient norm to `max_norm` after unscaling.
    ///
    /// ```
    /// use burn_mpric_core::scale::ScalerState;
    ///
    /// let s = ScalerState::noop().with_clip_norm(1.0).unwrap();
    /// assert_eq!(s.clip().unwrap().max_norm(), 1.0);
    /// assert!(ScalerState::noop().with_clip_norm(-1.0).is_err());
    /// ```
    pub fn with_clip_norm(self, max_norm: f32) -> Result<Self, LossScaleError> {
        Ok(self.with_clip(Some(ClipNorm::new(max_norm)?)))
    }

    /// A copy with this clipping (or none).
    ///
    /// ```
    /// use burn_mpric_core::scale::ScalerState;
    ///
    /// assert!(ScalerState::noop().with_clip(None).clip().is_none());
    /// ```
    #[must_use]
    pub fn with_clip(mut self, clip: Option<ClipNorm>) -> Self {
        self.clip = clip;
        self
    }

    /// The clipping in effect, if any.
    ///
    /// ```
    /// assert!(burn_mpric_core::scale::ScalerState::noop().clip().is_none());
    /// ```
    pub fn clip(&self) -> Option<ClipNorm> {
        self.clip
    }

    /// The loss scale's state.
    ///
    /// ```
    /// use burn_mpric_core::scale::{LossScale, ScalerState};
    ///
    /// assert!(matches!(ScalerState::noop().loss_scale(), LossScale::NoOp(_)));
    /// ```
    pub fn loss_scale(&self) -> &LossScale {
        &self.loss_scale
    }

    /// The current scale: what the next step's loss is multiplied by.
    ///
    /// ```
    /// assert_eq!(burn_mpric_core::scale::ScalerState::default().scale(), 32768.0);
    /// ```
    pub fn scale(&self) -> f32 {
        self.loss_scale.loss_scale()
    }

    /// The running counters.
    ///
    /// ```
    /// assert_eq!(burn_mpric_core::scale::ScalerState::noop().stats().steps, 0);
    /// ```
    pub fn stats(&self) -> ScalerStats {
        self.stats
    }

    /// A scaled loss read from the device, divided by the current scale (at f64, rounded
    /// once): the loss to report for a step that is about to be decided.
    ///
    /// ```
    /// use burn_mpric_core::scale::ScalerState;
    ///
    /// assert_eq!(ScalerState::fixed(1024.0).unwrap().unscale_loss(2560.0), 2.5);
    /// ```
    pub fn unscale_loss(&self, scaled_loss: f32) -> f32 {
        (f64::from(scaled_loss) / f64::from(self.scale())) as f32
    }

    /// Decides a step whose gradients were all finite (`true`) or not: the scale and the
    /// counters move on, and the outcome says what happened.
    ///
    /// ```
    /// use burn_mpric_core::scale::{LossScaleConfig, ScalerState};
    ///
    /// let mut s = ScalerState::dynamic(LossScaleConfig::new().with_initial_scale(8.0)).unwrap();
    /// let outcome = s.update(false);
    /// assert_eq!((outcome.scale_used, outcome.next_scale), (8.0, 4.0));
    /// assert_eq!(outcome.stats.consecutive_skipped, 1);
    /// ```
    pub fn update(&mut self, grads_finite: bool) -> StepOutcome {
        let scale_used = self.scale();
        self.loss_scale = self.loss_scale.adjust(grads_finite);
        self.stats = self.stats.record(grads_finite);
        StepOutcome {
            action: if grads_finite {
                StepAction::Applied
            } else {
                StepAction::Skipped
            },
            scale_used,
            next_scale: self.scale(),
            loss: None,
            grad_norm: None,
            stats: self.stats,
            overflow: None,
            cause: None,
        }
    }

    /// [`update`](Self::update), with the step's *scaled* loss as read from the device
    /// (reported unscaled by the scale that was used) and the global norm the clipping
    /// judged ([`ClipNorm::judge`]).
    ///
    /// ```
    /// use burn_mpric_core::scale::ScalerState;
    ///
    /// let mut s = ScalerState::fixed(4.0).unwrap();
    /// let outcome = s.finish(true, Some(10.0), Some(0.5));
    /// assert_eq!((outcome.loss, outcome.grad_norm), (Some(2.5), Some(0.5)));
    /// ```
    pub fn finish(
        &mut self,
        grads_finite: bool,
        scaled_loss: Option<f32>,
        grad_norm: Option<f32>,
    ) -> StepOutcome {
        let loss = scaled_loss.map(|loss| self.unscale_loss(loss));
        let mut outcome = self.update(grads_finite);
        outcome.loss = loss;
        outcome.grad_norm = grad_norm;
        outcome
    }
}
