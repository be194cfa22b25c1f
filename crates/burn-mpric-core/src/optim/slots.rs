//! What each device-path update rule keeps per element, so that its state can be stored at
//! another dtype without touching the scalars beside it (Adam's betas' powers stand for its
//! step count and stay at f32).

use crate::scale::{AnyDeviceRule, DeviceAdamConfig, DeviceAdamWConfig, DeviceSgdConfig};

/// An update rule's name and the number of its leading state tensors that hold one value per
/// parameter element (the rest are scalars kept at f32).
///
/// # Example
///
/// ```
/// use burn_mpric_core::optim::StateSlots;
/// use burn_mpric_core::scale::{DeviceAdamConfig, DeviceSgdConfig};
///
/// assert_eq!(DeviceAdamConfig::new().elementwise_slots(), 2); // the two moments
/// assert_eq!(DeviceSgdConfig::new().elementwise_slots(), 0); // plain SGD keeps nothing
/// assert_eq!(DeviceSgdConfig::new().with_momentum(0.9, 0.0, false).elementwise_slots(), 1);
/// ```
pub trait StateSlots {
    /// The rule's name in messages (`adam`, `adamw`, `sgd`).
    fn name(&self) -> &'static str;

    /// How many leading state tensors hold one value per element.
    fn elementwise_slots(&self) -> usize;
}

impl StateSlots for DeviceAdamConfig {
    fn name(&self) -> &'static str {
        "adam"
    }

    fn elementwise_slots(&self) -> usize {
        2
    }
}

impl StateSlots for DeviceAdamWConfig {
    fn name(&self) -> &'static str {
        "adamw"
    }

    fn elementwise_slots(&self) -> usize {
        2
    }
}

impl StateSlots for DeviceSgdConfig {
    fn name(&self) -> &'static str {
        if self.momentum.is_some() {
            "sgd with momentum"
        } else {
            "sgd without momentum"
        }
    }

    fn elementwise_slots(&self) -> usize {
        usize::from(self.momentum.is_some())
    }
}

impl StateSlots for AnyDeviceRule {
    fn name(&self) -> &'static str {
        match self {
            Self::Adam(rule) => rule.name(),
            Self::AdamW(rule) => rule.name(),
            Self::Sgd(rule) => rule.name(),
        }
    }

    fn elementwise_slots(&self) -> usize {
        match self {
            Self::Adam(rule) => rule.elementwise_slots(),
            Self::AdamW(rule) => rule.elementwise_slots(),
            Self::Sgd(rule) => rule.elementwise_slots(),
        }
    }
}
