//! Configuration of a dynamic loss scale, with presets that reproduce other systems exactly.

use serde::{Deserialize, Serialize};

use super::invalid::LossScaleError;
use super::limits::MIN_SCALE;

/// When a dynamic loss scale grows and how overflows consume the hysteresis budget.
///
/// All rules reset the growth counter on an overflow, multiply by the growth factor on growth
/// (clamped at `max_scale`; a growth that would reach infinity keeps the old scale) and by the
/// backoff factor on backoff (clamped at `min_scale`).
///
/// # Example
///
/// ```
/// use burn_mpric_core::scale::{LossScaleConfig, UpdateRule};
///
/// assert_eq!(LossScaleConfig::new().rule, UpdateRule::Standard);
/// assert_eq!(LossScaleConfig::flax().rule, UpdateRule::Flax);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum UpdateRule {
    /// PyTorch `GradScaler`, jmp, eformer, Keras and Megatron: the counter is incremented on a
    /// finite step and the scale grows when it reaches the growth interval, i.e. on the
    /// `growth_interval`-th consecutive finite step.
    ///
    /// Hysteresis follows Megatron: each overflow decrements the tracker, the scale backs off when
    /// the tracker reaches 0, and only a growth restores it (so after one backoff every further
    /// overflow backs off until the next growth). With `hysteresis == 1` this is plain PyTorch.
    #[default]
    Standard,
    /// Flax `DynamicScale`: growth happens when the counter *already equals* the interval before
    /// this step, i.e. on the `(growth_interval + 1)`-th consecutive finite step.
    Flax,
    /// DeepSpeed `DynamicLossScaler`: growth as in [`Standard`](Self::Standard); an overflow backs
    /// off only when the hysteresis tracker is 1 (the tracker then stays at 1), otherwise it
    /// decrements the tracker. The tracker is restored on growth, or on every finite step when
    /// `consecutive_hysteresis` is set.
    DeepSpeed {
        /// Restore the hysteresis tracker on every finite step, not only on growth.
        consecutive_hysteresis: bool,
    },
}

impl UpdateRule {
    /// Every rule with its name, as recipes and command lines write it.
    pub const NAMED: [(UpdateRule, &'static str); 4] = [
        (UpdateRule::Standard, "standard"),
        (UpdateRule::Flax, "flax"),
        (
            UpdateRule::DeepSpeed {
                consecutive_hysteresis: false,
            },
            "deepspeed",
        ),
        (
            UpdateRule::DeepSpeed {
                consecutive_hysteresis: true,
            },
            "deepspeed_consecutive",
        ),
    ];

    /// The rule's name (`standard`, `flax`, `deepspeed`, `deepspeed_consecutive`).
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::scale::UpdateRule;
    ///
    /// assert_eq!(UpdateRule::Flax.name(), "flax");
    /// assert_eq!(UpdateRule::from_name("deepspeed_consecutive").unwrap().name(), "deepspeed_consecutive");
    /// assert!(UpdateRule::from_name("pytorch").unwrap_err().to_string().contains("standard, flax"));
    /// ```
    pub fn name(&self) -> &'static str {
        Self::NAMED
            .iter()
            .find(|(rule, _)| rule == self)
            .map(|(_, name)| *name)
            .expect("every rule is named")
    }

    /// The rule of a name (see [`name`](Self::name)); the error lists the names.
    pub fn from_name(name: &str) -> Result<Self, LossScaleError> {
        let name = name.trim().to_ascii_lowercase();
        Self::NAMED
            .iter()
            .find(|(_, n)| *n == name)
            .map(|(rule, _)| *rule)
            .ok_or_else(|| {
                let names: Vec<&str> = Self::NAMED.iter().map(|(_, n)| *n).collect();
                LossScaleError::UnknownRule(format!(
                    "unknown update rule `{name}`; accepted: {}",
                    names.join(", ")
                ))
            })
    }
}

/// Configuration of a [`DynamicLossScale`](crate::scale::DynamicLossScale).
///
/// The defaults are eformer's and jmp's (initial scale 2^15, growth interval 2000, factor 2,
/// min scale 1.0); the update rule is PyTorch's, which jmp and eformer share. Use a preset to
/// reproduce another system, and the generated `with_*` methods to change single fields.
/// Nothing is checked until [`validate`](Self::validate) or [`init`](Self::init) runs.
///
/// # Example
///
/// ```
/// use burn_mpric_core::scale::LossScaleConfig;
///
/// let config = LossScaleConfig::new().with_growth_interval(100).with_min_scale(0.25);
/// assert_eq!(config.initial_scale, 32768.0);
/// let scale = config.init().unwrap();
/// assert_eq!(scale.loss_scale(), 32768.0);
///
/// // A configuration round-trips through JSON.
/// let json = serde_json::to_string(&config).unwrap();
/// let back: LossScaleConfig = serde_json::from_str(&json).unwrap();
/// assert_eq!(back, config);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct LossScaleConfig {
    /// The scale of the first step (default 2^15).
    pub initial_scale: f32,
    /// Number of consecutive finite steps before the scale grows (see [`UpdateRule`];
    /// default 2000).
    pub growth_interval: u32,
    /// Factor applied on growth; must be finite and greater than 1 (default 2).
    pub growth_factor: f64,
    /// Factor applied on backoff; must lie strictly between 0 and 1 (default 0.5).
    pub backoff_factor: f64,
    /// Lower bound of the scale; may be below 1 but not below [`MIN_SCALE`] (default 1).
    pub min_scale: f32,
    /// Optional upper bound of the scale; growth clamps at it (default none).
    pub max_scale: Option<f32>,
    /// Number of overflows tolerated before backing off; 1 turns hysteresis off (default 1).
    pub hysteresis: u32,
    /// The growth and hysteresis rule (default [`UpdateRule::Standard`]).
    pub rule: UpdateRule,
}

impl Default for LossScaleConfig {
    fn default() -> Self {
        Self::new()
    }
}

/// `with_<field>` builders, one per field (as Burn's `Config` derive writes them).
macro_rules! builders {
    ($($with:ident => $field:ident: $ty:ty),* $(,)?) => {
        impl LossScaleConfig {
            $(
                #[doc = concat!("A copy with another `", stringify!($field), "`.")]
                ///
                /// ```
                /// use burn_mpric_core::scale::LossScaleConfig;
                ///
                /// let config = LossScaleConfig::new();
                #[doc = concat!("assert_eq!(config.", stringify!($with), "(config.", stringify!($field), "), config);")]
                /// ```
                #[must_use]
                pub fn $with(mut self, $field: $ty) -> Self {
                    self.$field = $field;
                    self
                }
            )*
        }
    };
}

builders! {
    with_initial_scale => initial_scale: f32,
    with_growth_interval => growth_interval: u32,
    with_growth_factor => growth_factor: f64,
    with_backoff_factor => backoff_factor: f64,
    with_min_scale => min_scale: f32,
    with_max_scale => max_scale: Option<f32>,
    with_hysteresis => hysteresis: u32,
    with_rule => rule: UpdateRule,
}

fn check_scale(name: &'static str, value: f32) -> Result<(), LossScaleError> {
    if value.is_finite() && value >= MIN_SCALE {
        Ok(())
    } else {
        Err(LossScaleError::InvalidScale { name, value })
    }
}

impl LossScaleConfig {
    /// The defaults: eformer's and jmp's (2^15, 2000, 2.0, 0.5, min 1.0, no max, no
    /// hysteresis, the standard rule).
    ///
    /// ```
    /// use burn_mpric_core::scale::{LossScaleConfig, UpdateRule};
    ///
    /// let c = LossScaleConfig::new();
    /// assert_eq!((c.initial_scale, c.growth_interval, c.hysteresis), (32768.0, 2000, 1));
    /// assert_eq!(c.rule, UpdateRule::Standard);
    /// ```
    pub const fn new() -> Self {
        Self {
            initial_scale: 32768.0,
            growth_interval: 2000,
            growth_factor: 2.0,
            backoff_factor: 0.5,
            min_scale: 1.0,
            max_scale: None,
            hysteresis: 1,
            rule: UpdateRule::Standard,
        }
    }

    /// PyTorch `torch.amp.GradScaler` defaults: initial 2^16, factor 2, backoff 0.5, interval
    /// 2000, no maximum.
    ///
    /// PyTorch has no lower bound (its scale can reach 0.0); this preset stops at
    /// [`MIN_SCALE`] instead, which is the only difference.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::scale::{LossScaleConfig, MIN_SCALE};
    ///
    /// let config = LossScaleConfig::torch();
    /// assert_eq!(config.initial_scale, 65536.0);
    /// assert_eq!(config.min_scale, MIN_SCALE);
    /// ```
    pub fn torch() -> Self {
        Self::new()
            .with_initial_scale(65536.0)
            .with_min_scale(MIN_SCALE)
    }

    /// jmp `DynamicLossScale` as built by its README: initial 2^15, period 2000, factor 2,
    /// min 1.0. This is also the crate default.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::scale::LossScaleConfig;
    ///
    /// assert_eq!(LossScaleConfig::jmp(), LossScaleConfig::new());
    /// ```
    pub fn jmp() -> Self {
        Self::new()
    }

    /// eformer `LossScaleConfig` defaults: initial 2^15, growth interval 2000, factor 2, min 1.0
    /// (the same rule as jmp; the initial scale is a float here, so the first step cannot fail).
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::scale::LossScaleConfig;
    ///
    /// assert_eq!(LossScaleConfig::eformer().initial_scale, 32768.0);
    /// ```
    pub fn eformer() -> Self {
        Self::new()
    }

    /// Keras 3 `LossScaleOptimizer`: initial 2^15, 2000 growth steps, factors 2 and 0.5.
    ///
    /// Keras has no bounds at all (repeated backoff reaches 0); this preset stops at
    /// [`MIN_SCALE`] and never grows to infinity.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::scale::LossScaleConfig;
    ///
    /// assert_eq!(LossScaleConfig::keras().growth_interval, 2000);
    /// ```
    pub fn keras() -> Self {
        Self::new().with_min_scale(MIN_SCALE)
    }

    /// Flax `DynamicScale`: initial 65536, interval 2000, factors 2 and 0.5, minimum
    /// `finfo(float32).tiny`, growth clamped at `f32::MAX`, and Flax's off-by-one growth
    /// ([`UpdateRule::Flax`]).
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::scale::{LossScaleConfig, UpdateRule};
    ///
    /// let config = LossScaleConfig::flax();
    /// assert_eq!(config.rule, UpdateRule::Flax);
    /// assert_eq!(config.max_scale, Some(f32::MAX));
    /// ```
    pub fn flax() -> Self {
        Self::new()
            .with_initial_scale(65536.0)
            .with_min_scale(f32::MIN_POSITIVE)
            .with_max_scale(Some(f32::MAX))
            .with_rule(UpdateRule::Flax)
    }

    /// DeepSpeed's JSON-config defaults: initial 2^16 (`initial_scale_power` 16), window 1000,
    /// factor 2, min 1, hysteresis 2, `consecutive_hysteresis` false.
    ///
    /// DeepSpeed raises an exception when it would back off at the minimum scale; this preset
    /// stays at the minimum instead.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::scale::{LossScaleConfig, UpdateRule};
    ///
    /// let config = LossScaleConfig::deepspeed();
    /// assert_eq!(config.hysteresis, 2);
    /// assert_eq!(config.rule, UpdateRule::DeepSpeed { consecutive_hysteresis: false });
    /// ```
    pub fn deepspeed() -> Self {
        Self::new()
            .with_initial_scale(65536.0)
            .with_growth_interval(1000)
            .with_hysteresis(2)
            .with_rule(UpdateRule::DeepSpeed {
                consecutive_hysteresis: false,
            })
    }

    /// Megatron `DynamicGradScaler` with its command-line defaults: initial 2^32, min 1.0,
    /// window 1000, factors 2 and 0.5, hysteresis 2.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::scale::{LossScaleConfig, UpdateRule};
    ///
    /// let config = LossScaleConfig::megatron();
    /// assert_eq!(config.initial_scale, 4294967296.0);
    /// assert_eq!(config.rule, UpdateRule::Standard);
    /// ```
    pub fn megatron() -> Self {
        Self::new()
            .with_initial_scale(4294967296.0)
            .with_growth_interval(1000)
            .with_hysteresis(2)
    }

    /// The upper bound in effect: `max_scale`, or `f32::MAX` when unbounded.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::scale::LossScaleConfig;
    ///
    /// assert_eq!(LossScaleConfig::new().effective_max_scale(), f32::MAX);
    /// assert_eq!(LossScaleConfig::new().with_max_scale(Some(1e6)).effective_max_scale(), 1e6);
    /// ```
    pub fn effective_max_scale(&self) -> f32 {
        self.max_scale.unwrap_or(f32::MAX)
    }

    /// Checks every field and returns the first problem found.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::scale::{LossScaleConfig, LossScaleError};
    ///
    /// assert!(LossScaleConfig::new().validate().is_ok());
    /// let bad = LossScaleConfig::new().with_growth_factor(1.0);
    /// assert_eq!(bad.validate(), Err(LossScaleError::InvalidGrowthFactor(1.0)));
    /// ```
    pub fn validate(&self) -> Result<(), LossScaleError> {
        check_scale("initial scale", self.initial_scale)?;
        check_scale("min scale", self.min_scale)?;
        if let Some(max) = self.max_scale {
            check_scale("max scale", max)?;
            if self.min_scale > max {
                return Err(LossScaleError::MinAboveMax {
                    min: self.min_scale,
                    max,
                });
            }
        }
        self.check_bounds("initial scale", self.initial_scale)?;
        if !(self.growth_factor.is_finite() && self.growth_factor > 1.0) {
            return Err(LossScaleError::InvalidGrowthFactor(self.growth_factor));
        }
        if !(self.backoff_factor > 0.0 && self.backoff_factor < 1.0) {
            return Err(LossScaleError::InvalidBackoffFactor(self.backoff_factor));
        }
        if self.growth_interval == 0 {
            return Err(LossScaleError::ZeroGrowthInterval);
        }
        if self.hysteresis == 0 {
            return Err(LossScaleError::ZeroHysteresis);
        }
        Ok(())
    }

    pub(crate) fn check_bounds(
        &self,
        name: &'static str,
        value: f32,
    ) -> Result<(), LossScaleError> {
        check_scale(name, value)?;
        let max = self.effective_max_scale();
        if value < self.min_scale || value > max {
            return Err(LossScaleError::ScaleOutOfBounds {
                name,
                value,
                min: self.min_scale,
                max,
            });
        }
        Ok(())
    }
}
