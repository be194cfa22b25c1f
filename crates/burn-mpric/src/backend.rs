//! [`MixedPrecision`]: the backend decorator.

use core::marker::PhantomData;

use burn_backend::{Backend, BackendTypes, DType, DTypeUsageSet, ExecutionError, TensorData};

use crate::PolicyError;
use crate::device::MpDevice;
use crate::rules::MpSettings;
use crate::tensor::{MpBool, MpFloat, MpInt, MpQuant};

/// A Burn backend that runs any inner backend `B` under a mixed-precision policy: compute
/// ops at the compute dtype, precision-sensitive ops at f32, the rest at the widest input
/// dtype, new float tensors at the param dtype. It changes dtypes only, never the math, and
/// the inner backend never sees an op whose float inputs disagree.
///
/// The policy comes with the device ([`MpDevice`]); train with Burn's usual
/// `Autodiff<MixedPrecision<B>>`.
///
/// ```
/// use burn::backend::{Autodiff, Flex};
/// use burn::tensor::{DType, FloatDType, Tensor};
/// use burn_mpric::{MixedPrecision, Policy};
///
/// type B = MixedPrecision<Flex>;
/// let device = B::device(Default::default(), "p=f32,c=bf16,o=f32".parse::<Policy>()?)?;
///
/// let w = Tensor::<Autodiff<B>, 2>::ones([4, 4], &device).require_grad(); // param: f32
/// let x = Tensor::<Autodiff<B>, 2>::ones([2, 4], &device);
/// let y = x.matmul(w.clone()); // runs in bf16
/// assert_eq!(w.dtype(), DType::F32);
/// assert_eq!(y.dtype(), DType::BF16);
/// let loss = y.sum(); // sums run at f32
/// assert_eq!(loss.dtype(), DType::F32);
/// let grads = loss.backward();
/// // Gradients come back in the dtype their backward op ran in: cast them to the param
/// // dtype before an optimizer sees them (the loss scaler and the handler do it for you).
/// let grad = w.grad(&grads).unwrap();
/// assert_eq!(grad.dtype(), DType::BF16);
/// assert_eq!(grad.cast(FloatDType::F32).to_data().to_vec::<f32>()?, vec![2.0; 16]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct MixedPrecision<B> {
    _inner: PhantomData<B>,
}

impl<B: Backend> MixedPrecision<B> {
    /// A device of this backend: `inner` running `settings` (a [`Policy`](crate::Policy) or
    /// [`MpSettings`]). A dtype the device can't run is an error here, never a panic
    /// inside a kernel later.
    ///
    /// ```
    /// use burn::backend::NdArray;
    /// use burn_mpric::{MixedPrecision, Policy};
    ///
    /// let err = MixedPrecision::<NdArray>::device(Default::default(), "mixed_bf16".parse::<Policy>().unwrap());
    /// assert!(err.is_err());
    /// ```
    pub fn device(
        inner: B::Device,
        settings: impl Into<MpSettings>,
    ) -> Result<MpDevice<B>, PolicyError> {
        MpDevice::new(inner, settings)
    }
}

impl<B: Backend> BackendTypes for MixedPrecision<B> {
    type Device = MpDevice<B>;

    type FloatTensorPrimitive = MpFloat<B>;
    type FloatElem = B::FloatElem;

    type IntTensorPrimitive = MpInt<B>;
    type IntElem = B::IntElem;

    type BoolTensorPrimitive = MpBool<B>;
    type BoolElem = B::BoolElem;

    type QuantizedTensorPrimitive = MpQuant<B>;
}

impl<B: Backend> Backend for MixedPrecision<B> {
    fn name(device: &Self::Device) -> String {
        format!("mixed_precision<{}>", B::name(&device.inner))
    }

    fn seed(device: &Self::Device, seed: u64) {
        B::seed(&device.inner, seed)
    }

    fn sync(device: &Self::Device) -> Result<(), ExecutionError> {
        B::sync(&device.inner)
    }

    fn memory_persistent_allocations<
        Output: Send,
        Input: Send,
        Func: Fn(Input) -> Output + Send,
    >(
        device: &Self::Device,
        input: Input,
        func: Func,
    ) -> Output {
        B::memory_persistent_allocations(&device.inner, input, func)
    }

    fn memory_cleanup(device: &Self::Device) {
        B::memory_cleanup(&device.inner)
    }

    fn staging<'a, Iter>(data: Iter, device: &Self::Device)
    where
        Iter: Iterator<Item = &'a mut TensorData>,
    {
        B::staging(data, &device.inner)
    }

    fn supports_dtype(device: &Self::Device, dtype: DType) -> bool {
        B::supports_dtype(&device.inner, dtype)
    }

    fn dtype_usage(device: &Self::Device, dtype: DType) -> DTypeUsageSet {
        B::dtype_usage(&device.inner, dtype)
    }

    fn device_count(type_id: u16) -> usize {
        B::device_count(type_id)
    }

    fn ad_enabled(device: &Self::Device) -> bool {
        B::ad_enabled(&device.inner)
    }
}
