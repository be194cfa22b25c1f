//! The loss scale's state machine as device tensors: burn-mpric-core's decisions, taken on
//! the device from a finiteness flag the host never reads.

use burn::tensor::{Bool, Device, Int, Tensor, TensorData};
use burn_mpric_core::scale::{DeviceScaleRule, DeviceScaleState, LossScale};

use super::lane::{Burn022, f32_value};

use crate::error::StepError;

/// A loss scale held on the device: the scale (f32), its growth counter and hysteresis
/// tracker (ints), advanced by [`adjust`](Self::adjust) with the same decisions, bit for bit,
/// as burn-mpric-core's [`DynamicLossScale::adjust`](burn_mpric_core::scale::DynamicLossScale::adjust)
/// (static and no-op scales never move).
///
/// The growth and backoff factors must be exact in f32 (2 and 0.5 are, as in every preset):
/// the core rounds `scale * factor` from f64 once, and the device's f32 product is that same
/// rounding only when the factor itself is an f32.
///
/// # Example
///
/// ```
/// use burn::tensor::{Bool, Device, Tensor};
/// use burn_mpric_022::DeviceScale;
/// use burn_mpric_core::scale::{LossScale, LossScaleConfig};
///
/// let device = Device::flex();
/// let config = LossScaleConfig::new().with_initial_scale(8.0).with_growth_interval(1);
/// let state = LossScale::dynamic(config).unwrap();
/// let scale = DeviceScale::new(&state, &device).unwrap();
/// let grown = scale.adjust(Tensor::<1, Bool>::from_bool([true], &device));
/// assert_eq!(grown.scale().into_scalar::<f32>(), 16.0);
/// let backed_off = grown.adjust(Tensor::<1, Bool>::from_bool([false], &device));
/// assert_eq!(backed_off.scale().into_scalar::<f32>(), 8.0);
/// ```
#[derive(Debug, Clone)]
pub struct DeviceScale {
    scale: Tensor<1>,
    counter: Tensor<1, Int>,
    hysteresis_left: Tensor<1, Int>,
    /// `None` for static and no-op scales, which never move.
    rule: Option<DeviceScaleRule>,
    /// The tracker's value after a growth, made once rather than uploaded at every step.
    full_hysteresis: Tensor<1, Int>,
}

impl DeviceScale {
    /// The device copy of a host state (a fresh scaler's, or one restored from a checkpoint).
    ///
    /// Fails with [`StepError::NotOnDevice`] when a dynamic scale's growth or backoff factor
    /// is not exact in f32.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_022::DeviceScale;
    /// use burn_mpric_core::scale::{LossScale, LossScaleConfig};
    ///
    /// use burn::tensor::Device;
    /// let device = Device::flex();
    /// let fine = LossScale::dynamic(LossScaleConfig::new()).unwrap();
    /// assert!(DeviceScale::new(&fine, &device).is_ok());
    /// let odd = LossScale::dynamic(LossScaleConfig::new().with_growth_factor(1.1)).unwrap();
    /// assert!(DeviceScale::new(&odd, &device).is_err());
    /// ```
    pub fn new(state: &LossScale, device: &Device) -> Result<Self, StepError> {
        let state = DeviceScaleState::of(state).map_err(StepError::NotOnDevice)?;
        Ok(Self {
            scale: f32_value(state.scale, device),
            counter: int_value(state.counter, device),
            hysteresis_left: int_value(state.hysteresis_left, device),
            full_hysteresis: int_value(state.rule.map_or(0, |rule| rule.hysteresis), device),
            rule: state.rule,
        })
    }

    /// The current scale: a one-element f32 tensor on the device.
    ///
    /// # Example
    ///
    /// ```
    /// use burn::tensor::{DType, Device};
    /// use burn_mpric_022::DeviceScale;
    /// use burn_mpric_core::scale::LossScale;
    ///
    /// let scale = DeviceScale::new(&LossScale::fixed(64.0).unwrap(), &Device::flex()).unwrap();
    /// assert_eq!(scale.scale().dtype(), DType::F32);
    /// assert_eq!(scale.scale().into_scalar::<f32>(), 64.0);
    /// ```
    pub fn scale(&self) -> Tensor<1> {
        self.scale.clone()
    }

    /// The growth counter and the hysteresis tracker, as device tensors (zero for static and
    /// no-op scales).
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_022::DeviceScale;
    /// use burn_mpric_core::scale::{LossScale, LossScaleConfig};
    ///
    /// use burn::tensor::Device;
    /// let state = LossScale::dynamic(LossScaleConfig::megatron()).unwrap();
    /// let scale = DeviceScale::new(&state, &Device::flex()).unwrap();
    /// let (counter, hysteresis) = scale.counters();
    /// assert_eq!((counter.into_scalar::<i64>(), hysteresis.into_scalar::<i64>()), (0, 2));
    /// ```
    pub fn counters(&self) -> (Tensor<1, Int>, Tensor<1, Int>) {
        (self.counter.clone(), self.hysteresis_left.clone())
    }

    /// The state after a step whose gradients were all finite where `finite` (a one-element
    /// bool tensor on this device) is true: the core's rule, in select ops, with nothing read.
    ///
    /// # Example
    ///
    /// ```
    /// use burn::tensor::{Bool, Device, Tensor};
    /// use burn_mpric_022::DeviceScale;
    /// use burn_mpric_core::scale::{LossScale, LossScaleConfig};
    ///
    /// let device = Device::flex();
    /// let state = LossScale::dynamic(LossScaleConfig::new().with_initial_scale(2.0)).unwrap();
    /// let no = Tensor::<1, Bool>::from_bool([false], &device);
    /// let scale = DeviceScale::new(&state, &device).unwrap();
    /// // Backoff stops at min_scale (1.0).
    /// let scale = scale.adjust(no.clone()).adjust(no);
    /// assert_eq!(scale.scale().into_scalar::<f32>(), 1.0);
    /// ```
    #[must_use]
    pub fn adjust(self, finite: Tensor<1, Bool>) -> Self {
        let Some(rule) = self.rule else {
            return self;
        };
        let state = (self.scale, self.counter, self.hysteresis_left);
        let (scale, counter, hysteresis_left) =
            rule.adjust::<Burn022, _, _>(state, &self.full_hysteresis, finite);
        Self {
            scale,
            counter,
            hysteresis_left,
            ..self
        }
    }
}

/// Whether a one-element tensor is finite, in two ops where `is_finite` takes five: `x * 0`
/// is 0 exactly when `x` is finite (NaN for inf and NaN).
pub(crate) fn finite_value(value: Tensor<1>) -> Tensor<1, Bool> {
    value.mul_scalar(0.0).equal_elem(0.0)
}

/// A one-element int tensor holding `value`.
fn int_value(value: u32, device: &Device) -> Tensor<1, Int> {
    Tensor::from_data(TensorData::from([i64::from(value)]), device)
}
