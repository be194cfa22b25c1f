//! The settings of the device path's optimizers (Adam, AdamW, SGD), which both editions run
//! on the device with the skip as a select.

use serde::{Deserialize, Serialize};

/// Adam's settings on the device path: Burn's `AdamConfig` (0.21 and 0.22) without AMSGrad (default betas
/// 0.9 and 0.999, epsilon 1e-5, no weight decay; weight decay is the L2 penalty Burn adds to
/// the gradient).
///
/// # Example
///
/// ```
/// use burn_mpric_core::scale::DeviceAdamConfig;
///
/// let adam = DeviceAdamConfig::new().with_weight_decay(1e-4);
/// assert_eq!(adam.beta_1, 0.9);
/// assert_eq!(adam.weight_decay, Some(1e-4));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DeviceAdamConfig {
    /// The first moment's decay (default 0.9).
    pub beta_1: f32,
    /// The second moment's decay (default 0.999).
    pub beta_2: f32,
    /// Added to the second moment's root (default 1e-5, as Burn's).
    pub epsilon: f32,
    /// The L2 penalty added to the gradient, if any.
    pub weight_decay: Option<f32>,
}

/// AdamW's settings on the device path: Burn's `AdamWConfig` (0.21 and 0.22) without AMSGrad and cautious
/// decay (default betas 0.9 and 0.999, epsilon 1e-5, decoupled weight decay 1e-4).
///
/// # Example
///
/// ```
/// use burn_mpric_core::scale::DeviceAdamWConfig;
///
/// assert_eq!(DeviceAdamWConfig::new().weight_decay, 1e-4);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DeviceAdamWConfig {
    /// The first moment's decay (default 0.9).
    pub beta_1: f32,
    /// The second moment's decay (default 0.999).
    pub beta_2: f32,
    /// Added to the corrected second moment's root (default 1e-5, as Burn's).
    pub epsilon: f32,
    /// The decoupled weight decay (default 1e-4, as Burn's).
    pub weight_decay: f32,
}

/// SGD's settings on the device path: Burn's `SgdConfig` with `MomentumConfig` (momentum,
/// dampening, Nesterov) and the L2 penalty; plain SGD by default.
///
/// # Example
///
/// ```
/// use burn_mpric_core::scale::DeviceSgdConfig;
///
/// let sgd = DeviceSgdConfig::new().with_momentum(0.9, 0.1, true);
/// assert_eq!(sgd.momentum, Some((0.9, 0.1, true)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DeviceSgdConfig {
    /// `(momentum, dampening, nesterov)`, if momentum is on.
    pub momentum: Option<(f64, f64, bool)>,
    /// The L2 penalty added to the gradient, if any.
    pub weight_decay: Option<f32>,
}

impl DeviceAdamConfig {
    /// Burn's defaults.
    ///
    /// ```
    /// use burn_mpric_core::scale::DeviceAdamConfig;
    ///
    /// assert_eq!(DeviceAdamConfig::new().epsilon, 1e-5);
    /// ```
    pub fn new() -> Self {
        Self {
            beta_1: 0.9,
            beta_2: 0.999,
            epsilon: 1e-5,
            weight_decay: None,
        }
    }

    /// A copy with other betas.
    ///
    /// ```
    /// use burn_mpric_core::scale::DeviceAdamConfig;
    ///
    /// assert_eq!(DeviceAdamConfig::new().with_betas(0.8, 0.99).beta_2, 0.99);
    /// ```
    #[must_use]
    pub fn with_betas(self, beta_1: f32, beta_2: f32) -> Self {
        Self {
            beta_1,
            beta_2,
            ..self
        }
    }

    /// A copy with another epsilon.
    ///
    /// ```
    /// use burn_mpric_core::scale::DeviceAdamConfig;
    ///
    /// assert_eq!(DeviceAdamConfig::new().with_epsilon(1e-8).epsilon, 1e-8);
    /// ```
    #[must_use]
    pub fn with_epsilon(self, epsilon: f32) -> Self {
        Self { epsilon, ..self }
    }

    /// A copy with an L2 penalty.
    ///
    /// ```
    /// use burn_mpric_core::scale::DeviceAdamConfig;
    ///
    /// assert_eq!(DeviceAdamConfig::new().with_weight_decay(0.01).weight_decay, Some(0.01));
    /// ```
    #[must_use]
    pub fn with_weight_decay(self, penalty: f32) -> Self {
        Self {
            weight_decay: Some(penalty),
            ..self
        }
    }
}

impl DeviceAdamWConfig {
    /// Burn's defaults.
    ///
    /// ```
    /// use burn_mpric_core::scale::DeviceAdamWConfig;
    ///
    /// assert_eq!(DeviceAdamWConfig::new().beta_2, 0.999);
    /// ```
    pub fn new() -> Self {
        Self {
            beta_1: 0.9,
            beta_2: 0.999,
            epsilon: 1e-5,
            weight_decay: 1e-4,
        }
    }

    /// A copy with other betas.
    ///
    /// ```
    /// use burn_mpric_core::scale::DeviceAdamWConfig;
    ///
    /// assert_eq!(DeviceAdamWConfig::new().with_betas(0.8, 0.99).beta_1, 0.8);
    /// ```
    #[must_use]
    pub fn with_betas(self, beta_1: f32, beta_2: f32) -> Self {
        Self {
            beta_1,
            beta_2,
            ..self
        }
    }

    /// A copy with another epsilon.
    ///
    /// ```
    /// use burn_mpric_core::scale::DeviceAdamWConfig;
    ///
    /// assert_eq!(DeviceAdamWConfig::new().with_epsilon(1e-8).epsilon, 1e-8);
    /// ```
    #[must_use]
    pub fn with_epsilon(self, epsilon: f32) -> Self {
        Self { epsilon, ..self }
    }

    /// A copy with another decoupled weight decay.
    ///
    /// ```
    /// use burn_mpric_core::scale::DeviceAdamWConfig;
    ///
    /// assert_eq!(DeviceAdamWConfig::new().with_weight_decay(0.1).weight_decay, 0.1);
    /// ```
    #[must_use]
    pub fn with_weight_decay(self, weight_decay: f32) -> Self {
        Self {
            weight_decay,
            ..self
        }
    }
}

impl DeviceSgdConfig {
    /// Plain SGD, as Burn's `SgdConfig::new()`.
    ///
    /// ```
    /// use burn_mpric_core::scale::DeviceSgdConfig;
    ///
    /// assert_eq!(DeviceSgdConfig::new().momentum, None);
    /// ```
    pub fn new() -> Self {
        Self {
            momentum: None,
            weight_decay: None,
        }
    }

    /// A copy with momentum (Burn's `MomentumConfig`: momentum, dampening, Nesterov).
    ///
    /// ```
    /// use burn_mpric_core::scale::DeviceSgdConfig;
    ///
    /// assert!(DeviceSgdConfig::new().with_momentum(0.9, 0.0, false).momentum.is_some());
    /// ```
    #[must_use]
    pub fn with_momentum(self, momentum: f64, dampening: f64, nesterov: bool) -> Self {
        Self {
            momentum: Some((momentum, dampening, nesterov)),
            ..self
        }
    }

    /// A copy with an L2 penalty.
    ///
    /// ```
    /// use burn_mpric_core::scale::DeviceSgdConfig;
    ///
    /// assert_eq!(DeviceSgdConfig::new().with_weight_decay(0.5).weight_decay, Some(0.5));
    /// ```
    #[must_use]
    pub fn with_weight_decay(self, penalty: f32) -> Self {
        Self {
            weight_decay: Some(penalty),
            ..self
        }
    }
}

impl Default for DeviceAdamConfig {
    fn default() -> Self {
        Self::new()
    }
}

impl Default for DeviceAdamWConfig {
    fn default() -> Self {
        Self::new()
    }
}

impl Default for DeviceSgdConfig {
    fn default() -> Self {
        Self::new()
    }
}

/// One of the device path's update rules, for a holder that cannot be generic over the rule
/// (burn-train 0.22's `Learner` hands every model the same optimizer type).
///
/// ```
/// use burn_mpric_core::scale::{AnyDeviceRule, DeviceAdamConfig};
///
/// let rule = AnyDeviceRule::from(DeviceAdamConfig::new());
/// assert_eq!(rule, AnyDeviceRule::Adam(DeviceAdamConfig::new()));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum AnyDeviceRule {
    /// Adam.
    Adam(DeviceAdamConfig),
    /// AdamW.
    AdamW(DeviceAdamWConfig),
    /// SGD, with or without momentum.
    Sgd(DeviceSgdConfig),
}

impl From<DeviceAdamConfig> for AnyDeviceRule {
    fn from(rule: DeviceAdamConfig) -> Self {
        Self::Adam(rule)
    }
}

impl From<DeviceAdamWConfig> for AnyDeviceRule {
    fn from(rule: DeviceAdamWConfig) -> Self {
        Self::AdamW(rule)
    }
}

impl From<DeviceSgdConfig> for AnyDeviceRule {
    fn from(rule: DeviceSgdConfig) -> Self {
        Self::Sgd(rule)
    }
}
