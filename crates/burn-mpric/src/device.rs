//! [`MpDevice`]: an inner device plus the precision settings tensors made on it follow.

use core::fmt;
use std::sync::{Arc, Mutex};

use burn_backend::{Backend, DeviceId, DeviceOps};

use crate::ResolvedPolicy;
use crate::rules::{DeviceRules, MpSettings, Precision};
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
    pub fn new(inner: B::Device, settings: impl Into<MpSettings>) -> Result<Self, PolicyError> {
        let rules = DeviceRules::new::<B>(settings.into(), &inner)?;
        Ok(Self {
            inner,
            precision: Precision(Arc::new(rules)),
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
    pub fn policy(&self) -> ResolvedPolicy {
        self.precision.0.policy
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
    pub fn settings(&self) -> &MpSettings {
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
            crate::FloatDType::F32,
            crate::PolicyDType::Half,
            crate::FloatDType::F32,
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

/// The settings of every device that was turned into an id, so an id can be turned back
/// into the same device. Entries are never removed: a process meets a handful of policies.
static SETTINGS_BY_CODE: Mutex<Vec<Precision>> = Mutex::new(Vec::new());

/// The code (1-based) an id carries for `precision`.
fn settings_code(precision: &Precision) -> usize {
    let mut table = SETTINGS_BY_CODE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    match table.iter().position(|p| p == precision) {
        Some(index) => index + 1,
        None => {
            table.push(precision.clone());
            table.len()
        }
    }
}

fn settings_of_code(code: usize) -> Option<Precision> {
    let table = SETTINGS_BY_CODE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    code.checked_sub(1).and_then(|i| table.get(i).cloned())
}

/// Device ids round-trip: `MpDevice::from_id(device.to_id()) == device`, policy included.
///
/// An id is the inner device's id with a settings code in the upper bytes of its two fields
/// (burn-train and Burn's multi-device gradients rebuild devices from ids, and would otherwise
/// lose the policy). Code 0, which plain inner ids carry, means the default settings
/// ([`MpDevice::default`]); so does an inner id too large to share its fields (type or index
/// id of 256 or more) and a process that met more than 65,535 distinct settings.
///
/// ```
/// use burn::backend::Flex;
/// use burn::prelude::DeviceOps;
/// use burn_mpric::{MixedPrecision, MpDevice, Policy};
///
/// type B = MixedPrecision<Flex>;
/// let device = B::device(Default::default(), "mixed_f16".parse::<Policy>().unwrap()).unwrap();
/// let rebuilt = MpDevice::<Flex>::from_id(device.to_id());
/// assert_eq!(rebuilt, device);
/// assert_eq!(rebuilt.policy().to_string(), "p=f32,c=f16,o=f32");
/// ```
impl<B: Backend> burn_backend::Device for MpDevice<B> {
    fn from_id(device_id: DeviceId) -> Self {
        let code = usize::from(device_id.type_id >> 8) << 8 | usize::from(device_id.index_id >> 8);
        let inner = DeviceId {
            type_id: device_id.type_id & 0xff,
            index_id: device_id.index_id & 0xff,
        };
        let inner = <B::Device as burn_backend::Device>::from_id(inner);
        match settings_of_code(code) {
            Some(precision) => Self::from_parts(inner, precision),
            None => Self::from_parts(inner, Self::default().precision),
        }
    }

    fn to_id(&self) -> DeviceId {
        let inner = self.inner.to_id();
        let code = settings_code(&self.precision);
        if inner.type_id > 0xff || inner.index_id > 0xff || code > 0xffff {
            return inner;
        }
        DeviceId {
            type_id: inner.type_id | ((code >> 8) as u16) << 8,
            index_id: inner.index_id | ((code & 0xff) as u16) << 8,
        }
    }
}

impl<B: Backend> DeviceOps for MpDevice<B> {}
