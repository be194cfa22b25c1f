//! [`LossScale`]: one of the three loss scales, chosen at run time.

use super::dynamic::DynamicLossScale;
use super::noop::NoOpLossScale;
use super::static_scale::StaticLossScale;

/// One of the three loss scales, chosen at run time (jmp's `LossScale` union).
///
/// # Example
///
/// ```
/// use burn_mpric_core::scale::{LossScale, LossScaleConfig};
///
/// let dynamic = LossScale::dynamic(LossScaleConfig::new().with_initial_scale(8.0)).unwrap();
/// assert_eq!(dynamic.adjust(false).loss_scale(), 4.0);
/// assert_eq!(LossScale::fixed(3.0).unwrap().adjust(false).loss_scale(), 3.0);
/// assert_eq!(LossScale::noop().loss_scale(), 1.0);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LossScale {
    /// Scale 1, never changes.
    NoOp(NoOpLossScale),
    /// A fixed scale.
    Static(StaticLossScale),
    /// A scale that grows after finite steps and backs off after overflows.
    Dynamic(DynamicLossScale),
}

impl Default for LossScale {
    /// The default dynamic scale ([`LossScaleConfig::new`](crate::scale::LossScaleConfig::new)).
    fn default() -> Self {
        Self::Dynamic(
            DynamicLossScale::new(crate::scale::LossScaleConfig::new())
                .expect("the default configuration is valid"),
        )
    }
}

impl LossScale {
    /// The no-op scale (bf16 mode).
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::scale::LossScale;
    ///
    /// assert!(matches!(LossScale::noop(), LossScale::NoOp(_)));
    /// ```
    pub fn noop() -> Self {
        Self::NoOp(NoOpLossScale)
    }

    /// A static scale; see [`StaticLossScale::new`].
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::scale::LossScale;
    ///
    /// assert!(LossScale::fixed(f32::NAN).is_err());
    /// ```
    pub fn fixed(scale: f32) -> Result<Self, crate::scale::LossScaleError> {
        StaticLossScale::new(scale).map(Self::Static)
    }

    /// A dynamic scale; see [`DynamicLossScale::new`].
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::scale::{LossScale, LossScaleConfig};
    ///
    /// assert!(LossScale::dynamic(LossScaleConfig::torch()).is_ok());
    /// ```
    pub fn dynamic(
        config: crate::scale::LossScaleConfig,
    ) -> Result<Self, crate::scale::LossScaleError> {
        DynamicLossScale::new(config).map(Self::Dynamic)
    }

    /// The current scale.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::scale::LossScale;
    ///
    /// assert_eq!(LossScale::fixed(8.0).unwrap().loss_scale(), 8.0);
    /// ```
    pub fn loss_scale(&self) -> f32 {
        match self {
            Self::NoOp(s) => s.loss_scale(),
            Self::Static(s) => s.loss_scale(),
            Self::Dynamic(s) => s.loss_scale(),
        }
    }

    /// The state after a step whose gradients were all finite (`true`) or not.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::scale::{LossScale, LossScaleConfig};
    ///
    /// let s = LossScale::dynamic(LossScaleConfig::new().with_initial_scale(8.0)).unwrap();
    /// assert_eq!(s.adjust(false).loss_scale(), 4.0);
    /// ```
    #[must_use]
    pub fn adjust(self, grads_finite: bool) -> Self {
        match self {
            Self::NoOp(s) => Self::NoOp(s.adjust(grads_finite)),
            Self::Static(s) => Self::Static(s.adjust(grads_finite)),
            Self::Dynamic(s) => Self::Dynamic(s.adjust(grads_finite)),
        }
    }

    /// The dynamic state, if this is a dynamic scale.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_core::scale::LossScale;
    ///
    /// assert_eq!(LossScale::default().as_dynamic().unwrap().counter(), 0);
    /// assert!(LossScale::noop().as_dynamic().is_none());
    /// ```
    pub fn as_dynamic(&self) -> Option<&DynamicLossScale> {
        match self {
            Self::Dynamic(s) => Some(s),
            _ => None,
        }
    }
}

impl From<NoOpLossScale> for LossScale {
    fn from(s: NoOpLossScale) -> Self {
        Self::NoOp(s)
    }
}

impl From<StaticLossScale> for LossScale {
    fn from(s: StaticLossScale) -> Self {
        Self::Static(s)
    }
}

impl From<DynamicLossScale> for LossScale {
    fn from(s: DynamicLossScale) -> Self {
        Self::Dynamic(s)
    }
}
