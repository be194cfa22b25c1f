//! [`Instrumented`]: a backend decorator that records the dtypes of the float tensors every
//! op receives, to audit what a backend (such as [`MixedPrecision`](crate::MixedPrecision))
//! hands to the backend below it, and [`profile`], each op's time with its dtypes in and out.

mod profile;

pub use profile::{OpSummary, Profile, TimedOp, profile};

use core::any::Any;
use core::marker::PhantomData;
use std::cell::RefCell;
use std::rc::Rc;

use burn::tensor::FloatDType;
use burn_backend::ops::{
    ActivationOps, AttentionModuleOptions, BoolTensorOps, ConvOptions, ConvTransposeOptions,
    DeformConv2dBackward, DeformConvOptions, FloatTensorOps, GridSampleOptions, IntTensorOps,
    InterpolateOptions, MaxPool1dBackward, MaxPool1dWithIndices, MaxPool2dBackward,
    MaxPool2dWithIndices, ModuleOps, QTensorOps, TransactionOps, UnfoldOptions,
};
use core::ops::Range;

use burn_backend::ops::{TransactionPrimitive, TransactionPrimitiveData};
use burn_backend::quantization::{QuantPropagation, QuantScheme, QuantizationParametersPrimitive};
use burn_backend::tensor::{
    BoolTensor, Device, FloatTensor, IndexingUpdateOp, IntTensor, QuantizedTensor,
};
use burn_backend::{
    Backend, BackendTypes, BoolDType, DType, DTypeUsageSet, Distribution, ExecutionError, IntDType,
    QTensorPrimitive, Scalar, Shape, Slice, TensorData, TensorMetadata, TensorPrimitive,
};
use burn_std::quantization::QuantAcc;

use crate::Op;
use crate::ops::activation::activation_op_list;
use crate::ops::bool_tensor::bool_op_list;
use crate::ops::int_tensor::int_op_list;
use crate::ops::module::module_op_list;
use crate::ops::qtensor::q_op_list;
use crate::ops::tensor::float_op_list;

/// One op call seen by an [`Instrumented`] backend: a computing op, a host read
/// (`*_into_data`, `tr_execute`), or host data uploaded (`*_from_data`, whose only tensor is
/// its output).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpRecord {
    /// Burn's method name (`float_matmul`, `linear_weight_backward`, ...).
    pub op: &'static str,
    /// The dtypes of the float tensors among the op's inputs, in argument order.
    pub float_inputs: Vec<DType>,
    /// The shapes of the same float inputs.
    pub float_shapes: Vec<Vec<usize>>,
    /// The dtypes of the float tensors the op returned, in order (empty for host reads and
    /// for ops that return no float tensor).
    pub float_outputs: Vec<DType>,
    /// The shapes of the same float outputs.
    pub float_output_shapes: Vec<Vec<usize>>,
    /// The int and bool tensors among the op's inputs (dtype and shape), in argument order:
    /// with the float ones, everything the op reads.
    pub other_inputs: Vec<(DType, Vec<usize>)>,
    /// The int and bool tensors the op returned (dtype and shape).
    pub other_outputs: Vec<(DType, Vec<usize>)>,
}

impl OpRecord {
    /// A record of `op` with no tensors yet: an upload before its output is known, or a
    /// record built from another log.
    ///
    /// ```
    /// use burn_mpric::instrument::OpRecord;
    ///
    /// let r = OpRecord::named("float_from_data");
    /// assert_eq!(r.op, "float_from_data");
    /// assert!(r.float_inputs.is_empty() && r.other_outputs.is_empty());
    /// ```
    pub fn named(op: &'static str) -> Self {
        Self {
            op,
            float_inputs: Vec::new(),
            float_shapes: Vec::new(),
            float_outputs: Vec::new(),
            float_output_shapes: Vec::new(),
            other_inputs: Vec::new(),
            other_outputs: Vec::new(),
        }
    }
}

/// The dtype and shape of one input tensor (float, int or bool).
type TensorInput = (DType, Vec<usize>);

/// A function [`at_each_op`] calls around the ops an [`Instrumented`] backend forwards.
pub type OpHook = Rc<dyn Fn()>;

/// A float tensor an op returned, as [`observe_outputs`] hands it over.
#[derive(Debug, Clone, Copy)]
pub struct OpOutput<'a> {
    /// Burn's method name (`float_matmul`, `linear_x_backward`, ...).
    pub method: &'static str,
    /// The op of the decorator's table the method belongs to; `None` for ops outside it
    /// (reshapes, slices, casts, ...).
    pub op: Option<Op>,
    /// The tensor's dtype.
    pub dtype: DType,
    /// Its values, converted to f32 (exact for f16, bf16 and f32; f64 values are rounded).
    pub values: &'a [f32],
}

/// A function [`observe_outputs`] calls with each float tensor an op returns.
pub type OutputHook = Rc<dyn Fn(OpOutput<'_>)>;

thread_local! {
    static LOG: RefCell<Option<Vec<OpRecord>>> = const { RefCell::new(None) };
    static EACH_OP: RefCell<Option<OpHook>> = const { RefCell::new(None) };
    static OUTPUTS: RefCell<Option<OutputHook>> = const { RefCell::new(None) };
}

/// Runs `f`, handing `hook` the values of every float tensor that the ops of the
/// [`Instrumented`] backends on this thread return meanwhile. Each one is read to the host
/// when the op returns: a full synchronization per op, for audits, never for training.
///
/// ```
/// use std::cell::RefCell;
/// use std::rc::Rc;
/// use burn::backend::Flex;
/// use burn::tensor::Tensor;
/// use burn_mpric::Op;
/// use burn_mpric::instrument::{Instrumented, OpOutput, observe_outputs};
///
/// type B = Instrumented<Flex>;
/// let a = Tensor::<B, 1>::from_floats([1.0, -3.0], &Default::default());
/// let seen = Rc::new(RefCell::new(Vec::new()));
/// let sink = seen.clone();
/// observe_outputs(
///     Rc::new(move |out: OpOutput| sink.borrow_mut().push((out.method, out.op, out.values.to_vec()))),
///     || (a.clone() * 2.0).reshape([2, 1]).abs(),
/// );
/// assert_eq!(
///     *seen.borrow(),
///     vec![
///         ("float_mul_scalar", Some(Op::MulScalar), vec![2.0, -6.0]),
///         ("float_reshape", None, vec![2.0, -6.0]),
///         ("float_abs", Some(Op::Abs), vec![2.0, 6.0]),
///     ]
/// );
/// ```
pub fn observe_outputs<R>(hook: OutputHook, f: impl FnOnce() -> R) -> R {
    let previous = OUTPUTS.with(|h| h.borrow_mut().replace(hook));
    let result = f();
    OUTPUTS.with(|h| *h.borrow_mut() = previous);
    result
}

/// Hands the float tensors among an op's outputs to the [`observe_outputs`] hook, if any.
fn observe<B: Backend, T: Wrap>(method: &'static str, op: Option<Op>, out: &T) {
    let Some(hook) = OUTPUTS.with(|h| h.borrow().clone()) else {
        return;
    };
    out.outputs(&mut |tensor| {
        // Some backends use one primitive type for floats, ints and bools: the dtype tells.
        let Some(tensor) = tensor.downcast_ref::<B::FloatTensorPrimitive>() else {
            return;
        };
        let dtype = tensor.dtype();
        if !dtype.is_float() {
            return;
        }
        if let Ok(data) = burn_std::future::block_on(B::float_into_data(tensor.clone())) {
            let values: Vec<f32> = data.iter::<f32>().collect();
            hook(OpOutput {
                method,
                op,
                dtype,
                values: &values,
            });
        }
    });
}

/// Runs `f`, calling `hook` around the ops the [`Instrumented`] backends on this thread
/// forward meanwhile: before every op [`record`] lists, and after each one that computes
/// (creation ops and host reads call no hook; what a creation op makes is in use at the next
/// op's call). The bench reads device memory there: every buffer an op returns is in use
/// when the op returns.
///
/// ```
/// use std::cell::Cell;
/// use std::rc::Rc;
/// use burn::backend::Flex;
/// use burn::tensor::Tensor;
/// use burn_mpric::instrument::{Instrumented, at_each_op};
///
/// type B = Instrumented<Flex>;
/// let a = Tensor::<B, 1>::ones([3], &Default::default());
/// let calls = Rc::new(Cell::new(0));
/// let counter = calls.clone();
/// at_each_op(Rc::new(move || counter.set(counter.get() + 1)), || {
///     (a.clone() + a.clone()).exp()
/// });
/// assert_eq!(calls.get(), 4, "before and after each of the two ops");
/// ```
pub fn at_each_op<R>(hook: OpHook, f: impl FnOnce() -> R) -> R {
    let previous = EACH_OP.with(|h| h.borrow_mut().replace(hook));
    let result = f();
    EACH_OP.with(|h| *h.borrow_mut() = previous);
    result
}

fn op_boundary() {
    // Cloned out first: the hook may run code that reaches `EACH_OP` again.
    if let Some(hook) = EACH_OP.with(|h| h.borrow().clone()) {
        hook();
    }
}

fn log(op: &'static str, inputs: Vec<TensorInput>) {
    op_boundary();
    LOG.with(|l| {
        if let Some(log) = l.borrow_mut().as_mut() {
            let (floats, other_inputs): (Vec<_>, Vec<_>) =
                inputs.into_iter().partition(|(dtype, _)| dtype.is_float());
            let (float_inputs, float_shapes) = floats.into_iter().unzip();
            log.push(OpRecord {
                float_inputs,
                float_shapes,
                other_inputs,
                ..OpRecord::named(op)
            });
        }
    });
}

/// Logs an upload of host data (no [`at_each_op`] hook: what it makes is in use at the next
/// op's call): the tensor it made is its output.
fn log_upload<B: Backend, T: Wrap>(op: &'static str, out: &T) {
    if LOG.with(|l| l.borrow().is_none()) {
        return;
    }
    LOG.with(|l| {
        if let Some(log) = l.borrow_mut().as_mut() {
            log.push(OpRecord::named(op));
        }
    });
    log_outputs::<B, T>(out);
}

/// The dtype and shape of an inner primitive of `B` of any kind.
fn metadata<B: Backend>(tensor: &dyn Any) -> Option<(DType, Shape)> {
    if let Some(t) = tensor.downcast_ref::<B::FloatTensorPrimitive>() {
        return Some((t.dtype(), t.shape()));
    }
    if let Some(t) = tensor.downcast_ref::<B::IntTensorPrimitive>() {
        return Some((t.dtype(), t.shape()));
    }
    tensor
        .downcast_ref::<B::BoolTensorPrimitive>()
        .map(|t| (t.dtype(), t.shape()))
}

/// Notes the dtypes and shapes of the tensors among an op's outputs in its log entry, if
/// logging.
fn log_outputs<B: Backend, T: Wrap>(out: &T) {
    LOG.with(|l| {
        let mut l = l.borrow_mut();
        let Some(record) = l.as_mut().and_then(|log| log.last_mut()) else {
            return;
        };
        out.outputs(&mut |tensor| {
            // Some backends use one primitive type for floats, ints and bools: the dtype tells.
            let Some((dtype, shape)) = metadata::<B>(tensor) else {
                return;
            };
            if dtype.is_float() {
                record.float_outputs.push(dtype);
                record.float_output_shapes.push(shape.to_vec());
            } else {
                record.other_outputs.push((dtype, shape.to_vec()));
            }
        });
    });
}

/// Runs `f` and returns what it returned with the op calls [`Instrumented`] backends saw
/// on this thread meanwhile.
///
/// ```
/// use burn::backend::Flex;
/// use burn::tensor::{DType, Tensor};
/// use burn_mpric::instrument::{Instrumented, record};
///
/// type B = Instrumented<Flex>;
/// let a = Tensor::<B, 1>::ones([3], &Default::default());
/// let (_, ops) = record(|| (a.clone() + a.clone()).cast(DType::F16));
/// assert_eq!(ops[0].op, "float_add");
/// assert_eq!(ops[0].float_inputs, vec![DType::F32, DType::F32]);
/// assert_eq!(ops[1].op, "float_cast");
/// assert_eq!(ops[1].float_outputs, vec![DType::F16]);
/// ```
pub fn record<R>(f: impl FnOnce() -> R) -> (R, Vec<OpRecord>) {
    let previous = LOG.with(|l| l.borrow_mut().replace(Vec::new()));
    let result = f();
    let log = LOG.with(|l| core::mem::replace(&mut *l.borrow_mut(), previous));
    (result, log.unwrap_or_default())
}

/// A backend that forwards every op to `B` unchanged and logs the float input dtypes of
/// each call (see [`record`]). Use it *under* another decorator to see what that decorator
/// passes down: `MixedPrecision<Instrumented<Flex>>`.
///
/// ```
/// use burn::backend::Flex;
/// use burn_mpric::instrument::Instrumented;
/// use burn::tensor::Tensor;
///
/// let t = Tensor::<Instrumented<Flex>, 1>::from_floats([1.0, 2.0], &Default::default());
/// assert_eq!(t.sum().into_scalar(), 3.0);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct Instrumented<B> {
    _inner: PhantomData<B>,
}

/// A primitive of an [`Instrumented`] backend: the inner primitive, unchanged.
#[derive(Clone, Debug)]
pub struct Rec<P>(P);

impl<P: TensorMetadata> TensorMetadata for Rec<P> {
    fn dtype(&self) -> DType {
        self.0.dtype()
    }

    fn shape(&self) -> Shape {
        self.0.shape()
    }
}

impl<P: QTensorPrimitive> QTensorPrimitive for Rec<P> {
    fn scheme(&self) -> &QuantScheme {
        self.0.scheme()
    }

    fn acc_precision(&self) -> QuantAcc {
        self.0.acc_precision()
    }

    fn propagation(&self) -> QuantPropagation {
        self.0.propagation()
    }

    fn default_scheme() -> QuantScheme {
        P::default_scheme()
    }
}

pub(crate) trait Inspect: Sized {
    type Inner;

    fn dtypes(&self, _out: &mut Vec<TensorInput>) {}

    fn into_inner(self) -> Self::Inner;
}

pub(crate) trait Wrap {
    type Inner;

    fn wrap(inner: Self::Inner) -> Self;

    /// Calls `f` with each inner primitive this output holds (see [`observe_outputs`]).
    fn outputs(&self, _f: &mut dyn FnMut(&dyn Any)) {}
}

impl<P: TensorMetadata> Inspect for Rec<P> {
    type Inner = P;

    fn dtypes(&self, out: &mut Vec<TensorInput>) {
        out.push((self.0.dtype(), self.0.shape().to_vec()));
    }

    fn into_inner(self) -> P {
        self.0
    }
}

impl<P: 'static> Wrap for Rec<P> {
    type Inner = P;

    fn wrap(inner: P) -> Self {
        Rec(inner)
    }

    fn outputs(&self, f: &mut dyn FnMut(&dyn Any)) {
        f(&self.0)
    }
}

impl<'a, T: ?Sized> Inspect for &'a T {
    type Inner = &'a T;

    fn into_inner(self) -> Self::Inner {
        self
    }
}

impl<T: Inspect> Inspect for Option<T> {
    type Inner = Option<T::Inner>;

    fn dtypes(&self, out: &mut Vec<TensorInput>) {
        if let Some(t) = self {
            t.dtypes(out)
        }
    }

    fn into_inner(self) -> Self::Inner {
        self.map(T::into_inner)
    }
}

impl<T: Inspect> Inspect for Vec<T> {
    type Inner = Vec<T::Inner>;

    fn dtypes(&self, out: &mut Vec<TensorInput>) {
        self.iter().for_each(|t| t.dtypes(out))
    }

    fn into_inner(self) -> Self::Inner {
        self.into_iter().map(T::into_inner).collect()
    }
}

impl<B: Backend> Inspect for QuantizationParametersPrimitive<Instrumented<B>> {
    type Inner = QuantizationParametersPrimitive<B>;

    fn dtypes(&self, out: &mut Vec<TensorInput>) {
        self.scales.dtypes(out)
    }

    fn into_inner(self) -> Self::Inner {
        QuantizationParametersPrimitive {
            scales: self.scales.0,
        }
    }
}

impl<B: Backend> Inspect for TensorPrimitive<Instrumented<B>> {
    type Inner = TensorPrimitive<B>;

    fn dtypes(&self, out: &mut Vec<TensorInput>) {
        if let TensorPrimitive::Float(t) = self {
            t.dtypes(out)
        }
    }

    fn into_inner(self) -> Self::Inner {
        match self {
            TensorPrimitive::Float(t) => TensorPrimitive::Float(t.0),
            TensorPrimitive::QFloat(t) => TensorPrimitive::QFloat(t.0),
        }
    }
}

impl<B: Backend> Wrap for TensorPrimitive<Instrumented<B>> {
    type Inner = TensorPrimitive<B>;

    fn wrap(inner: Self::Inner) -> Self {
        match inner {
            TensorPrimitive::Float(t) => TensorPrimitive::Float(Rec(t)),
            TensorPrimitive::QFloat(t) => TensorPrimitive::QFloat(Rec(t)),
        }
    }

    fn outputs(&self, f: &mut dyn FnMut(&dyn Any)) {
        if let TensorPrimitive::Float(t) = self {
            t.outputs(f)
        }
    }
}

impl<T: Wrap> Wrap for Option<T> {
    type Inner = Option<T::Inner>;

    fn wrap(inner: Self::Inner) -> Self {
        inner.map(T::wrap)
    }

    fn outputs(&self, f: &mut dyn FnMut(&dyn Any)) {
        if let Some(t) = self {
            t.outputs(f)
        }
    }
}

impl<T: Wrap> Wrap for Vec<T> {
    type Inner = Vec<T::Inner>;

    fn wrap(inner: Self::Inner) -> Self {
        inner.into_iter().map(T::wrap).collect()
    }

    fn outputs(&self, f: &mut dyn FnMut(&dyn Any)) {
        self.iter().for_each(|t| t.outputs(f))
    }
}

impl<T1: Wrap, T2: Wrap> Wrap for (T1, T2) {
    type Inner = (T1::Inner, T2::Inner);

    fn wrap((a, b): Self::Inner) -> Self {
        (T1::wrap(a), T2::wrap(b))
    }

    fn outputs(&self, f: &mut dyn FnMut(&dyn Any)) {
        self.0.outputs(f);
        self.1.outputs(f);
    }
}

macro_rules! passive {
    ($($ty:ty),* $(,)?) => {$(
        impl Inspect for $ty {
            type Inner = $ty;

            fn into_inner(self) -> Self::Inner {
                self
            }
        }

        impl Wrap for $ty {
            type Inner = $ty;

            fn wrap(inner: Self::Inner) -> Self {
                inner
            }
        }
    )*};
}

crate::ops::args::for_passive_types!(passive);

macro_rules! wrap_struct {
    ($($name:ident { $($field:ident),* }),* $(,)?) => {$(
        impl<B: Backend> Wrap for $name<Instrumented<B>> {
            type Inner = $name<B>;

            fn wrap(inner: Self::Inner) -> Self {
                $name { $($field: Wrap::wrap(inner.$field)),* }
            }

            fn outputs(&self, f: &mut dyn FnMut(&dyn Any)) {
                $( self.$field.outputs(f); )*
            }
        }
    )*};
}

wrap_struct!(
    MaxPool1dWithIndices { output, indices },
    MaxPool2dWithIndices { output, indices },
    MaxPool1dBackward { x_grad },
    MaxPool2dBackward { x_grad },
    DeformConv2dBackward {
        x_grad,
        offset_grad,
        weight_grad,
        mask_grad,
        bias_grad
    },
);

/// Forwards the listed ops to `B`, logging the float input dtypes of each call.
macro_rules! record_ops {
    ($( fn $name:ident ( $($arg:ident : $ty:ty),* $(,)? ) -> $ret:ty => $kind:ident $($op:ident)? ; )*) => {$(
        fn $name($($arg: $ty),*) -> $ret {
            let mut dtypes = Vec::new();
            $( Inspect::dtypes(&$arg, &mut dtypes); )*
            log(stringify!($name), dtypes);
            let out = <$ret as Wrap>::wrap(B::$name($(Inspect::into_inner($arg)),*));
            op_boundary();
            log_outputs::<B, _>(&out);
            observe::<B, _>(stringify!($name), None $( .or(Some(Op::$op)) )?, &out);
            out
        }
    )*};
}

impl<B: Backend> BackendTypes for Instrumented<B> {
    type Device = B::Device;
    type FloatTensorPrimitive = Rec<B::FloatTensorPrimitive>;
    type FloatElem = B::FloatElem;
    type IntTensorPrimitive = Rec<B::IntTensorPrimitive>;
    type IntElem = B::IntElem;
    type BoolTensorPrimitive = Rec<B::BoolTensorPrimitive>;
    type BoolElem = B::BoolElem;
    type QuantizedTensorPrimitive = Rec<B::QuantizedTensorPrimitive>;
}

impl<B: Backend> Backend for Instrumented<B> {
    fn name(device: &Self::Device) -> String {
        format!("instrumented<{}>", B::name(device))
    }

    fn seed(device: &Self::Device, seed: u64) {
        B::seed(device, seed)
    }

    fn sync(device: &Self::Device) -> Result<(), ExecutionError> {
        B::sync(device)
    }

    fn supports_dtype(device: &Self::Device, dtype: DType) -> bool {
        B::supports_dtype(device, dtype)
    }

    fn dtype_usage(device: &Self::Device, dtype: DType) -> DTypeUsageSet {
        B::dtype_usage(device, dtype)
    }

    fn device_count(type_id: u16) -> usize {
        B::device_count(type_id)
    }

    fn ad_enabled(device: &Self::Device) -> bool {
        B::ad_enabled(device)
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
        B::memory_persistent_allocations(device, input, func)
    }

    fn memory_cleanup(device: &Self::Device) {
        B::memory_cleanup(device)
    }

    fn staging<'a, Iter>(data: Iter, device: &Self::Device)
    where
        Iter: Iterator<Item = &'a mut TensorData>,
    {
        B::staging(data, device)
    }
}

impl<B: Backend> FloatTensorOps<Self> for Instrumented<B> {
    fn float_from_data(data: TensorData, device: &Device<Self>) -> FloatTensor<Self> {
        let out = Rec(B::float_from_data(data, device));
        log_upload::<B, _>("float_from_data", &out);
        out
    }

    fn float_random(
        shape: Shape,
        distribution: Distribution,
        device: &Device<Self>,
        dtype: FloatDType,
    ) -> FloatTensor<Self> {
        Rec(B::float_random(shape, distribution, device, dtype))
    }

    fn float_zeros(shape: Shape, device: &Device<Self>, dtype: FloatDType) -> FloatTensor<Self> {
        Rec(B::float_zeros(shape, device, dtype))
    }

    fn float_ones(shape: Shape, device: &Device<Self>, dtype: FloatDType) -> FloatTensor<Self> {
        Rec(B::float_ones(shape, device, dtype))
    }

    fn float_full(
        shape: Shape,
        fill_value: Scalar,
        device: &Device<Self>,
        dtype: FloatDType,
    ) -> FloatTensor<Self> {
        Rec(B::float_full(shape, fill_value, device, dtype))
    }

    fn float_empty(shape: Shape, device: &Device<Self>, dtype: FloatDType) -> FloatTensor<Self> {
        Rec(B::float_empty(shape, device, dtype))
    }

    async fn float_into_data(tensor: FloatTensor<Self>) -> Result<TensorData, ExecutionError> {
        // A host read: logged, so that a test can count the reads of a step.
        log("float_into_data", Vec::new());
        B::float_into_data(tensor.0).await
    }

    fn float_device(tensor: &FloatTensor<Self>) -> Device<Self> {
        B::float_device(&tensor.0)
    }

    fn float_to_device(tensor: FloatTensor<Self>, device: &Device<Self>) -> FloatTensor<Self> {
        Rec(B::float_to_device(tensor.0, device))
    }

    fn float_is_require_grad(tensor: &FloatTensor<Self>) -> bool {
        log("float_is_require_grad", Vec::new());
        B::float_is_require_grad(&tensor.0)
    }

    float_op_list!(record_ops);
}

impl<B: Backend> IntTensorOps<Self> for Instrumented<B> {
    fn int_empty(shape: Shape, device: &Device<Self>, dtype: IntDType) -> IntTensor<Self> {
        Rec(B::int_empty(shape, device, dtype))
    }

    async fn int_into_data(tensor: IntTensor<Self>) -> Result<TensorData, ExecutionError> {
        // A host read: logged, so that a test can count the reads of a step.
        log("int_into_data", Vec::new());
        B::int_into_data(tensor.0).await
    }

    fn int_from_data(data: TensorData, device: &Device<Self>) -> IntTensor<Self> {
        let out = Rec(B::int_from_data(data, device));
        log_upload::<B, _>("int_from_data", &out);
        out
    }

    fn int_device(tensor: &IntTensor<Self>) -> Device<Self> {
        B::int_device(&tensor.0)
    }

    fn int_to_device(tensor: IntTensor<Self>, device: &Device<Self>) -> IntTensor<Self> {
        Rec(B::int_to_device(tensor.0, device))
    }

    fn int_random(
        shape: Shape,
        distribution: Distribution,
        device: &Device<Self>,
        dtype: IntDType,
    ) -> IntTensor<Self> {
        Rec(B::int_random(shape, distribution, device, dtype))
    }

    fn int_into_float(tensor: IntTensor<Self>, out_dtype: FloatDType) -> FloatTensor<Self> {
        Rec(B::int_into_float(tensor.0, out_dtype))
    }

    int_op_list!(record_ops);
}

impl<B: Backend> BoolTensorOps<Self> for Instrumented<B> {
    fn bool_empty(shape: Shape, device: &Device<Self>, dtype: BoolDType) -> BoolTensor<Self> {
        Rec(B::bool_empty(shape, device, dtype))
    }

    fn bool_zeros(shape: Shape, device: &Device<Self>, dtype: BoolDType) -> BoolTensor<Self> {
        Rec(B::bool_zeros(shape, device, dtype))
    }

    fn bool_ones(shape: Shape, device: &Device<Self>, dtype: BoolDType) -> BoolTensor<Self> {
        Rec(B::bool_ones(shape, device, dtype))
    }

    async fn bool_into_data(tensor: BoolTensor<Self>) -> Result<TensorData, ExecutionError> {
        // A host read: logged, so that a test can count the reads of a step.
        log("bool_into_data", Vec::new());
        B::bool_into_data(tensor.0).await
    }

    fn bool_from_data(data: TensorData, device: &Device<Self>) -> BoolTensor<Self> {
        let out = Rec(B::bool_from_data(data, device));
        log_upload::<B, _>("bool_from_data", &out);
        out
    }

    fn bool_device(tensor: &BoolTensor<Self>) -> Device<Self> {
        B::bool_device(&tensor.0)
    }

    fn bool_to_device(tensor: BoolTensor<Self>, device: &Device<Self>) -> BoolTensor<Self> {
        Rec(B::bool_to_device(tensor.0, device))
    }

    fn bool_into_float(tensor: BoolTensor<Self>, out_dtype: FloatDType) -> FloatTensor<Self> {
        Rec(B::bool_into_float(tensor.0, out_dtype))
    }

    fn bool_argwhere(
        tensor: BoolTensor<Self>,
        out_dtype: IntDType,
    ) -> impl Future<Output = IntTensor<Self>> + 'static + Send {
        log("bool_argwhere", Vec::new());
        let indices = B::bool_argwhere(tensor.0, out_dtype);
        async move { Rec(indices.await) }
    }

    bool_op_list!(record_ops);
}

impl<B: Backend> ModuleOps<Self> for Instrumented<B> {
    fn has_ctc_loss_backward() -> bool {
        B::has_ctc_loss_backward()
    }

    module_op_list!(record_ops);
}

impl<B: Backend> ActivationOps<Self> for Instrumented<B> {
    activation_op_list!(record_ops);
}

impl<B: Backend> QTensorOps<Self> for Instrumented<B> {
    fn q_from_data(data: TensorData, device: &Device<Self>) -> QuantizedTensor<Self> {
        let out = Rec(B::q_from_data(data, device));
        log_upload::<B, _>("q_from_data", &out);
        out
    }

    fn q_device(tensor: &QuantizedTensor<Self>) -> Device<Self> {
        B::q_device(&tensor.0)
    }

    fn q_to_device(tensor: QuantizedTensor<Self>, device: &Device<Self>) -> QuantizedTensor<Self> {
        Rec(B::q_to_device(tensor.0, device))
    }

    async fn q_into_data(tensor: QuantizedTensor<Self>) -> Result<TensorData, ExecutionError> {
        // A host read: logged, so that a test can count the reads of a step.
        log("q_into_data", Vec::new());
        B::q_into_data(tensor.0).await
    }

    fn q_is_require_grad(tensor: &QuantizedTensor<Self>) -> bool {
        log("q_is_require_grad", Vec::new());
        B::q_is_require_grad(&tensor.0)
    }

    q_op_list!(record_ops);
}

impl<B: Backend> TransactionOps<Self> for Instrumented<B> {
    fn tr_execute(
        transaction: TransactionPrimitive<Self>,
    ) -> impl Future<Output = Result<TransactionPrimitiveData, ExecutionError>> + Send {
        let mut dtypes = Vec::new();
        transaction.read_floats.dtypes(&mut dtypes);
        log("tr_execute", dtypes);
        B::tr_execute(TransactionPrimitive::new(
            transaction.read_floats.into_inner(),
            transaction.read_qfloats.into_inner(),
            transaction.read_ints.into_inner(),
            transaction.read_bools.into_inner(),
        ))
    }
}
