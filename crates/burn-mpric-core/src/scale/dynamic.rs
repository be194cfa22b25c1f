//! The dynamic loss scale: a functional state machine over finite / non-finite steps.

use super::config::{LossScaleConfig, UpdateRule};
use super::invalid::LossScaleError;

/// A dynamic loss scale as an immutable value: [`adjust`](Self::adjust) returns the next state.
///
/// The state is the current scale (always a finite f32 of at least
/// [`MIN_SCALE`](crate::scale::MIN_SCALE)), the growth counter (consecutive finite steps since the last
/// overflow or growth), the hysteresis tracker, and the validated [`LossScaleConfig`].
///
/// Arithmetic follows PyTorch: the new scale is computed in f64 and rounded to f32 once. A growth
/// clamps at `max_scale` and, if the result would be infinite, keeps the old scale; a backoff
/// clamps at `min_scale`, so the scale never becomes 0.
///
/// # Example
///
/// ```
/// use burn_mpric_core::scale::LossScaleConfig;
///
/// // eformer's test: period 2, factor 2, from 4.0.
/// let config = LossScaleConfig::new().with_initial_scale(4.0).with_growth_interval(2);
/// let s = config.init().unwrap();
/// let s = s.adjust(true);
/// assert_eq!((s.loss_scale(), s.counter()), (4.0, 1));
/// let s = s.adjust(true);
/// assert_eq!((s.loss_scale(), s.counter()), (8.0, 0));
/// let s = s.adjust(false);
/// assert_eq!(s.loss_scale(), 4.0);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DynamicLossScale {
    scale: f32,
    counter: u32,
    hysteresis_left: u32,
    config: LossScaleConfig,
}

impl DynamicLossScale {
    /// Validates `config` and returns the initial state (scale = `initial_scale`, counter 0, full
    /// hysteresis).
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::scale::{DynamicLossScale, LossScaleConfig};
    ///
    /// let s = DynamicLossScale::new(LossScaleConfig::megatron()).unwrap();
    /// assert_eq!(s.hysteresis_left(), 2);
    /// assert!(DynamicLossScale::new(LossScaleConfig::new().with_initial_scale(-1.0)).is_err());
    /// ```
    pub fn new(config: LossScaleConfig) -> Result<Self, LossScaleError> {
        config.validate()?;
        Ok(Self {
            scale: config.initial_scale,
            counter: 0,
            hysteresis_left: config.hysteresis,
            config,
        })
    }

    /// Restores a state from its parts (for example from a checkpoint), checking that they are
    /// consistent with `config`.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::scale::{DynamicLossScale, LossScaleConfig};
    ///
    /// let config = LossScaleConfig::new().with_growth_interval(10);
    /// let s = DynamicLossScale::from_parts(1024.0, 7, 1, config).unwrap();
    /// assert_eq!(s.counter(), 7);
    /// assert!(DynamicLossScale::from_parts(1024.0, 10, 1, config).is_err());
    /// assert!(DynamicLossScale::from_parts(f32::INFINITY, 0, 1, config).is_err());
    /// ```
    pub fn from_parts(
        scale: f32,
        counter: u32,
        hysteresis_left: u32,
        config: LossScaleConfig,
    ) -> Result<Self, LossScaleError> {
        config.validate()?;
        config.check_bounds("scale", scale)?;
        let counter_ok = match config.rule {
            UpdateRule::Flax => counter <= config.growth_interval,
            _ => counter < config.growth_interval,
        };
        if !counter_ok {
            return Err(LossScaleError::CounterOutOfRange {
                counter,
                interval: config.growth_interval,
            });
        }
        if hysteresis_left > config.hysteresis {
            return Err(LossScaleError::HysteresisOutOfRange {
                left: hysteresis_left,
                hysteresis: config.hysteresis,
            });
        }
        Ok(Self {
            scale,
            counter,
            hysteresis_left,
            config,
        })
    }

    /// The current scale `S`.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::scale::LossScaleConfig;
    ///
    /// assert_eq!(LossScaleConfig::new().init().unwrap().loss_scale(), 32768.0);
    /// ```
    pub fn loss_scale(&self) -> f32 {
        self.scale
    }

    /// Consecutive finite steps since the last overflow or growth (PyTorch's growth tracker,
    /// jmp's counter, Flax's `fin_steps`).
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::scale::LossScaleConfig;
    ///
    /// let s = LossScaleConfig::new().init().unwrap().adjust(true);
    /// assert_eq!(s.counter(), 1);
    /// ```
    pub fn counter(&self) -> u32 {
        self.counter
    }

    /// Overflows left before the next backoff (Megatron's `hysteresis_tracker`, DeepSpeed's
    /// `cur_hysteresis`). Under the standard rule it is 0 after a backoff until the next growth.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::scale::LossScaleConfig;
    ///
    /// let s = LossScaleConfig::megatron().init().unwrap().adjust(false);
    /// assert_eq!(s.hysteresis_left(), 1);
    /// assert_eq!(s.loss_scale(), 4294967296.0); // tolerated, no backoff yet
    /// ```
    pub fn hysteresis_left(&self) -> u32 {
        self.hysteresis_left
    }

    /// The validated configuration.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::scale::LossScaleConfig;
    ///
    /// let s = LossScaleConfig::flax().init().unwrap();
    /// assert_eq!(*s.config(), LossScaleConfig::flax());
    /// ```
    pub fn config(&self) -> &LossScaleConfig {
        &self.config
    }

    /// Returns the state after a step whose gradients were finite (`true`) or not (`false`).
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::scale::LossScaleConfig;
    ///
    /// let s = LossScaleConfig::new().with_initial_scale(2.0).init().unwrap();
    /// // Backoff stops at min_scale (1.0) and never reaches 0.
    /// let s = (0..10).fold(s, |s, _| s.adjust(false));
    /// assert_eq!(s.loss_scale(), 1.0);
    /// ```
    #[must_use]
    pub fn adjust(self, grads_finite: bool) -> Self {
        if grads_finite {
            self.after_finite()
        } else {
            self.after_overflow()
        }
    }

    fn after_finite(self) -> Self {
        let c = &self.config;
        let grow = match c.rule {
            UpdateRule::Flax => self.counter >= c.growth_interval,
            UpdateRule::Standard | UpdateRule::DeepSpeed { .. } => {
                self.counter.saturating_add(1) >= c.growth_interval
            }
        };
        let mut next = self;
        if grow {
            next.scale = self.grown_scale();
            next.counter = 0;
            next.hysteresis_left = c.hysteresis;
        } else {
            next.counter = self.counter + 1;
        }
        if let UpdateRule::DeepSpeed {
            consecutive_hysteresis: true,
        } = c.rule
        {
            next.hysteresis_left = c.hysteresis;
        }
        next
    }

    fn after_overflow(self) -> Self {
        let mut next = self;
        next.counter = 0;
        let back_off = match self.config.rule {
            UpdateRule::DeepSpeed { .. } => {
                if self.hysteresis_left <= 1 {
                    true
                } else {
                    next.hysteresis_left = self.hysteresis_left - 1;
                    false
                }
            }
            UpdateRule::Standard | UpdateRule::Flax => {
                next.hysteresis_left = self.hysteresis_left.saturating_sub(1);
                next.hysteresis_left == 0
            }
        };
        if back_off {
            next.scale = self.backed_off_scale();
        }
        next
    }

    fn grown_scale(&self) -> f32 {
        let mut grown = f64::from(self.scale) * self.config.growth_factor;
        if let Some(max) = self.config.max_scale {
            grown = grown.min(f64::from(max));
        }
        // Rounding to f32 turns anything beyond f32::MAX into infinity: keep the old scale then.
        let grown = grown as f32;
        if grown.is_finite() { grown } else { self.scale }
    }

    fn backed_off_scale(&self) -> f32 {
        let reduced = (f64::from(self.scale) * self.config.backoff_factor) as f32;
        reduced.max(self.config.min_scale)
    }
}

impl LossScaleConfig {
    /// Builds the first state of the dynamic loss scale after validating the configuration.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::scale::LossScaleConfig;
    ///
    /// let scale = LossScaleConfig::new().with_initial_scale(128.0).init().unwrap();
    /// assert_eq!((scale.loss_scale(), scale.counter()), (128.0, 0));
    /// assert!(LossScaleConfig::new().with_initial_scale(0.0).init().is_err());
    /// ```
    pub fn init(&self) -> Result<DynamicLossScale, LossScaleError> {
        DynamicLossScale::new(*self)
    }
}
