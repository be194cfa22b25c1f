//! [`MpDevice`]: an inner device plus the precision settings tensors made on it follow.

use core::fmt;
use std::sync::Arc;

use burn_backend::{Backend, DeviceId, DeviceOps};

use crate::settings::{Precision, PrecisionSettings};
use crate::{Policy, PolicyError};

/// The device of a [`MixedPrecision`](crate::MixedPrecision) backend: the inner backend's
/// device and the (resolved) precision settings. Two devices with different policies can
/// be used side by side in one process; each tensor follows the settings of the device it
/// was created on.
///
/// The default device is the inner default device with the policy `p=f32,c=half,o=f32`
/// (bf16 compute where the device runs bf16, else f16), or full f32 where the device runs
/// neither.
///
/// ```
/// use burn::backend::Flex;
/// use burn_mpric::{MixedPrecision, Policy};
///
/// type B = MixedPrecision<Flex>;
/// let device = B::device(Default::default(), "mixed_f16".parse::<Policy>().unwrap()).unwrap();
/// assert_eq!(device.policy().to_string(), "p=f32,c=f16,o=f32");
/// assert_eq!(burn_mpric::MpDevice::<Flex>::default().policy().to_string(), "p=f32,c=bf16,o=f32");
/// ```
#[derive(Clone)]
pub struct MpDevice<B: Backend> {
    pub(crate) inner: B::Device,
    pub(crate) precision: Precision,
}

impl<B: Backend> MpDevice<B> {
    /// A device that runs `settings` on `inner`; errors if the device can't run its dtypes.
    ///
    /// ```
    /// use burn::backend::NdArray;
    /// use burn_mpric::{MpDevice, Policy};
    ///
    /// let err = MpDevice::<NdArray>::new(Default::default(), "mixed_f16".parse::<Policy>().unwrap());
    /// assert!(err.unwrap_err().to_string().contains("not supported"));
    /// ```
    pub fn new(
        inner: B::Device,
        settings: impl Into<PrecisionSettings>,
    ) -> Result<Self, PolicyError> {
        let resolved = settings.into().resolve::<B>(&inner)?;
        Ok(Self {
            inner,
            precision: Precision(Arc::new(resolved)),
        })
    }

    /// The inner backend's device.
    ///
    /// ```
    /// use burn::backend::Flex;
    /// use burn_mpric::MpDevice;
    ///
    /// let d = MpDevice::<Flex>::default();
    /// assert_eq!(*d.inner(), Default::default());
    /// ```
    pub fn inner(&self) -> &B::Device {
        &self.inner
    }

    /// The resolved policy (no `half` left).
    ///
    /// ```
    /// use burn::backend::Flex;
    /// use burn_mpric::{MpDevice, Policy};
    ///
    /// let d = MpDevice::<Flex>::new(Default::default(), "c=half".parse::<Policy>().unwrap()).unwrap();
    /// assert_eq!(d.policy().to_string(), "p=f32,c=bf16,o=bf16");
    /// ```
    pub fn policy(&self) -> Policy {
        self.precision.0.settings.policy()
    }

    /// The settings: policy, op overrides, pure mode.
    ///
    /// ```
    /// use burn::backend::Flex;
    /// use burn_mpric::{MpDevice, Op, OpCategory};
    ///
    /// let d = MpDevice::<Flex>::default();
    /// assert_eq!(d.settings().category(Op::Matmul), OpCategory::Compute);
    /// ```
    pub fn settings(&self) -> &PrecisionSettings {
        &self.precision.0.settings
    }

    pub(crate) fn from_parts(inner: B::Device, precision: Precision) -> Self {
        Self { inner, precision }
    }
}

impl<B: Backend> Default for MpDevice<B> {
    fn default() -> Self {
        let inner = B::Device::default();
        let mixed_half = Policy::new(
            burn::tensor::FloatDType::F32,
            crate::PolicyDType::Half,
            burn::tensor::FloatDType::F32,
        );
        Self::new(inner.clone(), mixed_half)
            .or_else(|_| Self::new(inner, Policy::F32))
            .expect("every backend runs f32")
    }
}

impl<B: Backend> PartialEq for MpDevice<B> {
    fn eq(&self, other: &Self) -> bool {
        self.inner == other.inner && self.precision == other.precision
    }
}

impl<B: Backend> fmt::Debug for MpDevice<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MpDevice({:?}, {})", self.inner, self.policy())
    }
}

impl<B: Backend> burn_backend::Device for MpDevice<B> {
    /// Ids carry no policy: a device rebuilt from an id gets the default settings.
    fn from_id(device_id: DeviceId) -> Self {
        let default = Self::default();
        Self::from_parts(
            <B::Device as burn_backend::Device>::from_id(device_id),
            default.precision,
        )
    }

    fn to_id(&self) -> DeviceId {
        self.inner.to_id()
    }
}

impl<B: Backend> DeviceOps for MpDevice<B> {}
