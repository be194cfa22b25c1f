//! Autocast by parameter reparameterization: parameters stored at the param dtype, used at
//! the compute dtype.
//!
//! Burn 0.22 has no op-level autocast and no type promotion: every op runs at the dtype of
//! its inputs, and an op whose float inputs disagree is a bug. What Burn 0.22.1 does with
//! one (f16 or bf16 activation, f32 weight), observed:
//!
//! - **Flex** (debug builds): a panic, `matmul: dtype mismatch` (Linear),
//!   `binary_op: dtype mismatch` (RmsNorm, GroupNorm, BatchNorm, any element-wise op),
//!   `layer_norm: gamma dtype F32 does not match input dtype BF16`. These are
//!   `debug_assert`s: a release build reads the right operand as the left's type.
//! - **Wgpu** (Mesa lavapipe): no error at all, wrong numbers. A `Linear` with an f32 weight
//!   of ones on an f16 input of ones returned `[0.0, 7.5]` instead of `[4.0, 4.0]`; `2 * 3`
//!   between an f16 and an f32 tensor gave `[0.0, 4.25]`; a later read on the device can fail
//!   with an execution error.
//!
//! Mixed precision therefore has to keep every activation and every parameter a layer meets
//! at one dtype. [`Autocast`] does it with Burn 0.22's parameter reparameterization: each
//! parameter's stored value (its *base*: what the optimizer updates and what records save)
//! stays at the param dtype, and [`Param::val`](burn::module::Param::val), which every
//! burn-nn layer calls in `forward`, returns it cast to the compute dtype. Autodiff's cast
//! backward brings each gradient back at the base's dtype, so the optimizer sees f32
//! gradients for f32 parameters. Embeddings are used at the compute dtype too, so a model
//! whose input is token ids computes at the compute dtype from its first layer on; float
//! inputs are cast with [`cast_for_compute`](crate::cast_for_compute).
//!
//! # Which layers stay at full precision
//!
//! PyTorch's autocast runs `layer_norm`, `group_norm` (and on MPS `batch_norm`) at f32 and
//! matmul-like ops at the compute dtype (the 0.21 edition's op table follows its lists: see
//! `docs/op-categories.md` in the repository). In Burn 0.22 a parameter can stay at f32 only
//! where the layer meets it with an f32 input, or the layer's op sees two dtypes. What
//! burn-nn 0.22.1 allows:
//!
//! - **`LayerNorm` under f16 compute: kept at full precision (the default).** burn-nn's
//!   `LayerNorm::forward` widens an f16 input, gamma and beta to f32 itself, normalizes at
//!   f32 and narrows the result back to f16, so an f32 gamma and beta are used exactly as
//!   stored (checked on Flex and Wgpu, with and without autodiff: the f16 output matches the
//!   f32 layer's to f16 rounding). Turn it off with [`Autocast::keep_layer_norms`].
//! - **`LayerNorm` under bf16 compute: used at bf16.** burn-nn does not widen bf16 (it cannot
//!   overflow), so an f32 gamma would meet a bf16 input: Flex's `layer_norm` panics, and
//!   under autodiff (where the layer norm is decomposed into element-wise ops) its `mul`
//!   does. Flex's bf16 layer norm kernel computes at f32 internally and rounds once.
//! - **`GroupNorm`, `RmsNorm`, `InstanceNorm`, `BatchNorm`: used at the compute dtype.** Their
//!   forward multiplies the activation by gamma directly (GroupNorm and RmsNorm widen only
//!   their statistics), so an f32 gamma would meet a half activation. `BatchNorm`'s running
//!   statistics are `RunningState` buffers, which drop a reparameterization and stay f32, so a
//!   `BatchNorm` fed a half activation meets two dtypes in training and in inference alike
//!   (it panics on Flex): wrap it in [`FullPrecision`].
//! - **[`FullPrecision`]-wrapped modules: always kept at the param dtype.** The wrapper casts
//!   its input to the dtype the wrapped module's parameters are stored in and its output back,
//!   like a PyTorch `autocast(enabled=False)` region with explicit casts.
//! - **Paths you name** with [`Autocast::keep_full_precision`]: kept at the param dtype where
//!   that can work. A module kept at f32 must receive f32 inputs, and only the code that calls
//!   its `forward` can cast them; a layer inside a library module (burn-nn's
//!   `TransformerEncoder`) receives the half output of the layer before it, and its first op
//!   would meet two dtypes. So [`Autocast::apply`] refuses such a path with
//!   [`AutocastError::KeptPathFedHalf`], naming the field of your module to wrap in
//!   [`FullPrecision`] instead. Where your own forward casts the module's input, say so with
//!   [`Autocast::keep_full_precision_cast_by_caller`].
//!
//! Everything else PyTorch runs at f32 (exp, log, softmax, losses) has no parameter: cast the
//! logits to the output dtype with [`cast_for_output`](crate::cast_for_output) before the loss.
//! The softmax inside burn-nn's `MultiHeadAttention` runs at the compute dtype.
//!
//! Constant tensors that are not parameters (`PositionalEncoding::sinusoids`,
//! `RotaryEncoding::freq_complex`) are invisible to a reparameterization: under a half
//! policy, cast them to the compute dtype yourself (their fields are public) or use a learned
//! position embedding.
//!
//! # Limits
//!
//! Burn 0.22 does not nest reparameterizations: a module that already has one (LoRA, or an
//! earlier autocast) is refused with [`AutocastError::AlreadyReparameterized`].
//! `Module::materialize` folds the cast into the stored value (it would store half weights);
//! use [`Module::valid`] for inference, which keeps the reparameterization.

use std::collections::{HashMap, HashSet};

use burn::module::{
    Module, ModuleDisplay, ModuleVisitor, Param, ParamId, Reparameterization, Reparameterizer,
};
use burn::tensor::{Device, Tensor};
use burn_mpric_core::{FloatDType, Policy, PolicyError, ResolvedPolicy};

use crate::cast::CastFloat;
use crate::dtype::{
    from_burn_dtype, leaf_at, plain_float, stored_dtype, supported_float_dtypes, to_burn_dtype,
};

/// The reparameterization [`Autocast`] attaches: the stored parameter, used at `dtype`.
///
/// It holds no parameter of its own, so records, optimizer state and parameter counts are
/// those of the bare module.
///
/// # Example
///
/// ```
/// use burn::module::{Module, Param};
/// use burn::nn::LinearConfig;
/// use burn::tensor::{DType, Device};
/// use burn_mpric_022::{ComputeCast, autocast};
/// use burn_mpric_core::{FloatDType, ResolvedPolicy};
///
/// let device = Device::flex();
/// let policy: ResolvedPolicy = "mixed_bf16".parse().unwrap();
/// let linear = autocast(LinearConfig::new(2, 2).init(&device), policy).unwrap();
/// let cast = linear.weight.reparameterization::<ComputeCast>().unwrap();
/// assert_eq!(cast.dtype(), FloatDType::BF16);
/// assert_eq!(linear.weight.base().dtype(), DType::F32);
/// assert_eq!(linear.weight.val().dtype(), DType::BF16);
/// ```
#[derive(Module, Debug)]
pub struct ComputeCast {
    #[module(skip)]
    dtype: burn::tensor::FloatDType,
}

impl ComputeCast {
    /// The reparameterization that uses a stored parameter at `dtype`.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_022::ComputeCast;
    /// use burn_mpric_core::FloatDType;
    ///
    /// assert_eq!(ComputeCast::new(FloatDType::F16).dtype(), FloatDType::F16);
    /// ```
    pub fn new(dtype: FloatDType) -> Self {
        Self {
            dtype: to_burn_dtype(dtype),
        }
    }

    /// The dtype the parameter is used at.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_022::ComputeCast;
    /// use burn_mpric_core::FloatDType;
    ///
    /// assert_eq!(ComputeCast::new(FloatDType::BF16).dtype(), FloatDType::BF16);
    /// ```
    pub fn dtype(&self) -> FloatDType {
        from_burn_dtype(self.dtype)
    }
}

impl Reparameterization for ComputeCast {
    const NAME: &'static str = "autocast";

    fn apply<const D: usize>(&self, base: Tensor<D>) -> Tensor<D> {
        // A quantized base cannot be cast (Burn panics); it is used as stored.
        match plain_float(base.dtype()) {
            Some(_) => base.cast(self.dtype),
            None => base,
        }
    }
}

/// A module whose parameters [`Autocast`] always keeps at the param dtype, and which runs at
/// that dtype: [`forward_with`](Self::forward_with) casts the input's float tensors to the
/// dtype the wrapped module's parameters are stored in and casts the output back to the
/// input's dtype (PyTorch's `autocast(enabled=False)` region with explicit casts).
///
/// Use it for a layer that must see full precision under a half policy, such as a training
/// `BatchNorm` (whose running statistics stay f32) or a precision-sensitive head.
///
/// # Example
///
/// ```
/// use burn::module::Module;
/// use burn::nn::{BatchNorm, BatchNormConfig, Linear, LinearConfig};
/// use burn::tensor::{DType, Device, Tensor};
/// use burn_mpric_022::{FullPrecision, autocast, cast_for_compute};
/// use burn_mpric_core::ResolvedPolicy;
///
/// #[derive(Module, Debug)]
/// struct Net {
///     linear: Linear,
///     norm: FullPrecision<BatchNorm>,
/// }
///
/// let device = Device::flex().autodiff();
/// let policy: ResolvedPolicy = "mixed_bf16".parse().unwrap();
/// let net = Net {
///     linear: LinearConfig::new(4, 4).init(&device),
///     norm: FullPrecision::new(BatchNormConfig::new(4).init(&device)),
/// };
/// let net = autocast(net, policy).unwrap();
///
/// let x = cast_for_compute(Tensor::<2>::ones([3, 4], &device), &policy);
/// let h = net.linear.forward(x);
/// let y = net.norm.forward_with(h, |norm, h| norm.forward(h)); // at f32 inside
/// assert_eq!(y.dtype(), DType::BF16);
/// assert_eq!(net.norm.inner.gamma.val().dtype(), DType::F32);
/// ```
#[derive(Module, Debug)]
pub struct FullPrecision<M: Module> {
    /// The wrapped module.
    pub inner: M,
}

impl<M: Module + ModuleDisplay> FullPrecision<M> {
    /// Wraps `inner`.
    ///
    /// # Example
    ///
    /// ```
    /// use burn::nn::LinearConfig;
    /// use burn::tensor::Device;
    /// use burn_mpric_022::FullPrecision;
    ///
    /// let head = FullPrecision::new(LinearConfig::new(2, 2).init(&Device::flex()));
    /// assert_eq!(head.inner.weight.dims(), [2, 2]);
    /// ```
    pub fn new(inner: M) -> Self {
        Self { inner }
    }

    /// The wrapped module.
    ///
    /// # Example
    ///
    /// ```
    /// use burn::nn::LinearConfig;
    /// use burn::tensor::Device;
    /// use burn_mpric_022::FullPrecision;
    ///
    /// let head = FullPrecision::new(LinearConfig::new(3, 1).init(&Device::flex()));
    /// assert_eq!(head.into_inner().weight.dims(), [3, 1]);
    /// ```
    pub fn into_inner(self) -> M {
        self.inner
    }

    /// The dtype the wrapped module runs at: the stored dtype of its first float parameter
    /// (f32 for a module without one).
    ///
    /// # Example
    ///
    /// ```
    /// use burn::nn::LinearConfig;
    /// use burn::tensor::{Device, FloatDType};
    /// use burn_mpric_022::FullPrecision;
    ///
    /// let head = FullPrecision::new(LinearConfig::new(2, 2).init(&Device::flex()));
    /// assert_eq!(head.dtype(), FloatDType::F32);
    /// ```
    pub fn dtype(&self) -> burn::tensor::FloatDType {
        let mut first = FirstFloat(None);
        self.inner.visit(&mut first);
        first.0.unwrap_or(burn::tensor::FloatDType::F32)
    }

    /// Runs `forward` on the wrapped module with the input's float tensors cast to
    /// [`dtype`](Self::dtype), and casts the output's float tensors back to the dtype of the
    /// input's first float tensor (left as they are when the input holds none).
    ///
    /// # Example
    ///
    /// ```
    /// use burn::nn::LinearConfig;
    /// use burn::tensor::{DType, Device, FloatDType, Tensor};
    /// use burn_mpric_022::FullPrecision;
    ///
    /// let device = Device::flex();
    /// let head = FullPrecision::new(LinearConfig::new(2, 2).init(&device));
    /// let x = Tensor::<2>::ones([1, 2], &device).cast(FloatDType::F16);
    /// let y = head.forward_with(x, |linear, x| {
    ///     assert_eq!(x.dtype(), DType::F32); // the weight's dtype
    ///     linear.forward(x)
    /// });
    /// assert_eq!(y.dtype(), DType::F16);
    /// ```
    pub fn forward_with<I: CastFloat, O: CastFloat>(
        &self,
        input: I,
        forward: impl FnOnce(&M, I) -> O,
    ) -> O {
        let back = input.float_dtype();
        let output = forward(&self.inner, input.cast_float(self.dtype()));
        // Under a precision audit: the output before it is cast back, the value a half
        // policy must hold.
        if crate::observe::observing_now() {
            let ty = std::any::type_name::<M>();
            let ty = ty.split('<').next().unwrap_or(ty);
            let ty = ty.rsplit("::").next().unwrap_or(ty);
            output.observe_floats(&format!("FullPrecision<{ty}> output"));
        }
        match back {
            Some(dtype) => output.cast_float(dtype),
            None => output,
        }
    }
}

/// The stored dtype of the first float parameter visited.
struct FirstFloat(Option<burn::tensor::FloatDType>);

impl ModuleVisitor for FirstFloat {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if self.0.is_none() {
            self.0 = plain_float(stored_dtype(param));
        }
    }
}

/// Why [`Autocast`] could not be applied. The module is not changed when it fails.
///
/// # Example
///
/// ```
/// use burn::nn::LinearConfig;
/// use burn::tensor::Device;
/// use burn_mpric_022::{Autocast, AutocastError};
/// use burn_mpric_core::ResolvedPolicy;
///
/// let policy: ResolvedPolicy = "mixed_f16".parse().unwrap();
/// let linear = LinearConfig::new(2, 2).init(&Device::flex());
/// let err = Autocast::new(policy).keep_full_precision("wieght").apply(linear).unwrap_err();
/// assert!(matches!(err, AutocastError::UnmatchedPath { .. }));
/// assert!(err.to_string().contains("weight")); // lists the paths that exist
/// ```
#[derive(Debug, thiserror::Error)]
pub enum AutocastError {
    /// A device the module lives on cannot run one of the policy's dtypes.
    #[error("policy `{policy}` cannot run on {device}: {source}")]
    Unsupported {
        /// The policy, as text.
        policy: String,
        /// The device, as Burn prints it.
        device: String,
        /// Which slot and dtype, and what the device runs.
        #[source]
        source: PolicyError,
    },
    /// A full-precision path matched no parameter of the module.
    #[error(
        "full-precision path `{path}` matches no parameter of the module; its parameters are: {known}"
    )]
    UnmatchedPath {
        /// The path as given.
        path: String,
        /// The module's parameter paths, comma separated.
        known: String,
    },
    /// A full-precision path whose module would receive half-precision inputs: nothing casts
    /// them back to the param dtype, so the module's first op would meet two dtypes (a Burn
    /// assertion on Flex, wrong numbers on Wgpu).
    #[error(
        "`keep_full_precision(\"{path}\")` cannot work under compute {compute}: the module at `{path}` would keep {param} weights but receive the {compute} output of the layer before it, and Burn 0.22 has no type promotion, so its first op would meet two dtypes. Wrap the field `{field}` of your module in FullPrecision (`{field}: FullPrecision<...>`, called as `self.{field}.forward_with(x, |m, x| m.forward(x))`), or use a bf16 policy; if your own forward already casts that module's input to {param}, name it with `keep_full_precision_cast_by_caller(\"{path}\")`"
    )]
    KeptPathFedHalf {
        /// The path as given.
        path: String,
        /// The field of the top-level module that holds it: the one to wrap.
        field: String,
        /// The compute dtype.
        compute: FloatDType,
        /// The param dtype.
        param: FloatDType,
    },
    /// The module already holds a reparameterized parameter (LoRA, or an earlier autocast);
    /// Burn 0.22 does not nest reparameterizations.
    #[error(
        "parameter `{path}` is already reparameterized; Burn 0.22 does not nest reparameterizations, so autocast the module before attaching others (and only once)"
    )]
    AlreadyReparameterized {
        /// The parameter's path.
        path: String,
    },
}

/// Why a parameter is used at full precision (its param dtype) rather than the compute dtype.
///
/// # Example
///
/// ```
/// use burn_mpric_022::KeptBecause;
///
/// assert_ne!(KeptBecause::LayerNorm, KeptBecause::FullPrecisionWrapper);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeptBecause {
    /// A `LayerNorm` parameter under f16 compute: burn-nn widens the layer to f32 itself.
    LayerNorm,
    /// A parameter inside a [`FullPrecision`] module.
    FullPrecisionWrapper,
    /// A parameter under a path given to [`Autocast::keep_full_precision`] (the path).
    Path(String),
    /// Float state the module traverses like a parameter but rebuilds from its bare value,
    /// dropping any reparameterization: a `RunningState` buffer such as `BatchNorm`'s running
    /// statistics. It stays at the param dtype whatever the policy (see the
    /// [module docs](self) on `BatchNorm`).
    Buffer,
}

/// What [`Autocast`] does to one parameter.
///
/// # Example
///
/// ```
/// use burn::nn::LayerNormConfig;
/// use burn::tensor::Device;
/// use burn_mpric_022::{Autocast, KeptBecause};
/// use burn_mpric_core::{FloatDType, ResolvedPolicy};
///
/// let policy: ResolvedPolicy = "mixed_f16".parse().unwrap();
/// let norm = LayerNormConfig::new(4).init(&Device::flex());
/// let plan = Autocast::new(policy).plan(&norm).unwrap();
/// assert_eq!(plan[0].path, "gamma");
/// assert_eq!(plan[0].used, FloatDType::F32);
/// assert_eq!(plan[0].kept, Some(KeptBecause::LayerNorm));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamPlan {
    /// The parameter's path, as Burn's records name it (`layers.0.norm_1.gamma`).
    pub path: String,
    /// The dtype it is stored (and updated, and saved) at.
    pub stored: FloatDType,
    /// The dtype layers see it at.
    pub used: FloatDType,
    /// Why it is used at full precision, when it is.
    pub kept: Option<KeptBecause>,
}

/// A one-call autocast of any Burn 0.22 [`Module`] under a [`ResolvedPolicy`]; see the
/// [module docs](self) for what stays at full precision and why.
///
/// [`apply`](Self::apply) checks that every device the module lives on runs the policy's
/// dtypes, casts each stored parameter to the param dtype (where it is not already), and
/// attaches a [`ComputeCast`] to every parameter used at another dtype. With the identity
/// policy (`p == c`) on a module already stored at `p`, the module is returned untouched.
///
/// # Example
///
/// ```
/// use burn::nn::{Linear, LinearConfig};
/// use burn::tensor::{DType, Device, Tensor};
/// use burn_mpric_022::{Autocast, cast_for_compute, resolve_policy};
///
/// let device = Device::flex().autodiff();
/// let policy = resolve_policy("mixed_half".parse().unwrap(), &device).unwrap(); // bf16 on Flex
/// let model: Linear = Autocast::new(policy).apply(LinearConfig::new(4, 2).init(&device)).unwrap();
///
/// let x = cast_for_compute(Tensor::<2>::ones([3, 4], &device), &policy);
/// let y = model.forward(x);
/// assert_eq!(y.dtype(), DType::BF16);
/// let grads = y.sum().backward();
/// let grad = model.weight.base().grad(&grads).unwrap();
/// assert_eq!(grad.dtype(), DType::F32); // gradients come back at the stored dtype
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Autocast {
    policy: ResolvedPolicy,
    paths: Vec<String>,
    /// The paths whose module's input the caller casts to the param dtype.
    cast_by_caller: Vec<String>,
    layer_norms: bool,
}

impl Autocast {
    /// Autocast under `policy`, with the default full-precision rules.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_022::Autocast;
    /// use burn_mpric_core::ResolvedPolicy;
    ///
    /// let policy: ResolvedPolicy = "mixed_f16".parse().unwrap();
    /// assert_eq!(Autocast::new(policy).policy(), policy);
    /// ```
    pub fn new(policy: ResolvedPolicy) -> Self {
        Self {
            policy,
            paths: Vec::new(),
            cast_by_caller: Vec::new(),
            layer_norms: true,
        }
    }

    /// Autocast under `policy` resolved against `device` (`half` becomes bf16 where the
    /// device runs it, else f16); a dtype the device cannot run is an error naming it.
    ///
    /// # Example
    ///
    /// ```
    /// use burn::tensor::Device;
    /// use burn_mpric_022::Autocast;
    /// use burn_mpric_core::FloatDType;
    ///
    /// let autocast = Autocast::for_device("mixed_half".parse().unwrap(), &Device::flex()).unwrap();
    /// assert_eq!(autocast.policy().compute(), FloatDType::BF16);
    /// ```
    pub fn for_device(policy: Policy, device: &Device) -> Result<Self, AutocastError> {
        let supported = supported_float_dtypes(device);
        policy
            .resolve_with(&supported)
            .map(Self::new)
            .map_err(|source| AutocastError::Unsupported {
                policy: policy.to_string(),
                device: format!("{device:?}"),
                source,
            })
    }

    /// The policy.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_022::Autocast;
    /// use burn_mpric_core::ResolvedPolicy;
    ///
    /// assert_eq!(Autocast::new(ResolvedPolicy::F32).policy(), ResolvedPolicy::F32);
    /// ```
    pub fn policy(&self) -> ResolvedPolicy {
        self.policy
    }

    /// Keeps every parameter whose path is `path` or starts with `path.` at the param dtype.
    /// A path that matches no parameter makes [`apply`](Self::apply) fail, and so does one
    /// whose module would receive half-precision inputs under a policy that computes lower
    /// ([`AutocastError::KeptPathFedHalf`]): paths inside a [`FullPrecision`] wrapper, or
    /// `LayerNorm`s under f16 compute (burn-nn widens them itself), or any path when the
    /// policy computes at the param dtype. For a module whose input your forward casts, use
    /// [`keep_full_precision_cast_by_caller`](Self::keep_full_precision_cast_by_caller).
    ///
    /// # Example
    ///
    /// ```
    /// use burn::nn::LinearConfig;
    /// use burn::tensor::Device;
    /// use burn_mpric_022::{Autocast, AutocastError};
    /// use burn_mpric_core::ResolvedPolicy;
    ///
    /// let policy: ResolvedPolicy = "mixed_bf16".parse().unwrap();
    /// let linear = LinearConfig::new(2, 2).init(&Device::flex());
    /// // The bias is added to the bf16 output of the matmul inside burn-nn's Linear:
    /// // nothing there can cast it to f32.
    /// let err = Autocast::new(policy).keep_full_precision("bias").apply(linear).unwrap_err();
    /// assert!(matches!(err, AutocastError::KeptPathFedHalf { .. }));
    /// assert!(err.to_string().contains("FullPrecision"));
    /// ```
    #[must_use]
    pub fn keep_full_precision(mut self, path: impl Into<String>) -> Self {
        self.paths.push(path.into());
        self
    }

    /// [`keep_full_precision`](Self::keep_full_precision) for a module whose input your own
    /// forward casts to the param dtype (and whose output it casts back): not checked.
    ///
    /// # Example
    ///
    /// ```
    /// use burn::module::Module;
    /// use burn::nn::{Linear, LinearConfig};
    /// use burn::tensor::{DType, Device, FloatDType, Tensor};
    /// use burn_mpric_022::{Autocast, cast_for_compute};
    /// use burn_mpric_core::ResolvedPolicy;
    ///
    /// #[derive(Module, Debug)]
    /// struct Net { body: Linear, head: Linear }
    ///
    /// let device = Device::flex();
    /// let policy: ResolvedPolicy = "mixed_bf16".parse().unwrap();
    /// let net = Net { body: LinearConfig::new(2, 2).init(&device), head: LinearConfig::new(2, 1).init(&device) };
    /// let net = Autocast::new(policy).keep_full_precision_cast_by_caller("head").apply(net).unwrap();
    /// let h = net.body.forward(cast_for_compute(Tensor::<2>::ones([1, 2], &device), &policy));
    /// let y = net.head.forward(h.cast(FloatDType::F32)); // the cast this path promises
    /// assert_eq!(y.dtype(), DType::F32);
    /// ```
    #[must_use]
    pub fn keep_full_precision_cast_by_caller(mut self, path: impl Into<String>) -> Self {
        let path = path.into();
        self.cast_by_caller.push(path.clone());
        self.paths.push(path);
        self
    }

    /// Whether `LayerNorm` parameters stay at full precision under f16 compute (default
    /// `true`; see the [module docs](self)). Under any other compute dtype they follow it.
    ///
    /// # Example
    ///
    /// ```
    /// use burn::nn::LayerNormConfig;
    /// use burn::tensor::{DType, Device};
    /// use burn_mpric_022::Autocast;
    /// use burn_mpric_core::ResolvedPolicy;
    ///
    /// let policy: ResolvedPolicy = "mixed_f16".parse().unwrap();
    /// let norm = LayerNormConfig::new(4).init(&Device::flex());
    /// let norm = Autocast::new(policy).keep_layer_norms(false).apply(norm).unwrap();
    /// assert_eq!(norm.gamma.val().dtype(), DType::F16);
    /// ```
    #[must_use]
    pub fn keep_layer_norms(mut self, keep: bool) -> Self {
        self.layer_norms = keep;
        self
    }

    /// What [`apply`](Self::apply) does to each float parameter of `module`, in visit order
    /// (quantized parameters, which are never cast, are left out): observed on an
    /// autocast copy, so `used` is the dtype layers really see. Lazy parameters are
    /// initialized.
    ///
    /// # Errors
    ///
    /// [`AutocastError::UnmatchedPath`] and [`AutocastError::AlreadyReparameterized`].
    ///
    /// # Example
    ///
    /// ```
    /// use burn::nn::LinearConfig;
    /// use burn::tensor::Device;
    /// use burn_mpric_022::Autocast;
    /// use burn_mpric_core::{FloatDType, ResolvedPolicy};
    ///
    /// let policy: ResolvedPolicy = "mixed_f16".parse().unwrap();
    /// let plan = Autocast::new(policy).plan(&LinearConfig::new(2, 2).init(&Device::flex())).unwrap();
    /// let paths: Vec<_> = plan.iter().map(|p| (p.path.as_str(), p.used)).collect();
    /// assert_eq!(paths, [("weight", FloatDType::F16), ("bias", FloatDType::F16)]);
    /// ```
    pub fn plan<M: Module>(&self, module: &M) -> Result<Vec<ParamPlan>, AutocastError> {
        let survey = self.survey(module)?;
        let applied = if survey.changes {
            module
                .clone()
                .apply_reparameterization(CastReparameterizer {
                    param: to_burn_dtype(self.policy.param()),
                    decisions: survey.decisions,
                })
        } else {
            module.clone()
        };
        // A visitor sees each parameter's stored value; `materialize` folds the cast in, so
        // the materialized copy's values are what layers see.
        let stored = observed_dtypes(&applied);
        let used = observed_dtypes(&applied.materialize());
        let lowers = self.policy.lowers();
        Ok(survey
            .plan
            .into_iter()
            .map(|(id, path, kept)| {
                let stored = stored.get(&id).copied().unwrap_or(self.policy.param());
                let used = used.get(&id).copied().unwrap_or(stored);
                let kept = match kept {
                    None if lowers && used == stored => Some(KeptBecause::Buffer),
                    kept => kept,
                };
                ParamPlan {
                    path,
                    stored,
                    used,
                    kept,
                }
            })
            .collect())
    }

    /// Autocasts `module`; see [`Autocast`].
    ///
    /// # Errors
    ///
    /// [`AutocastError::Unsupported`] when a device of the module cannot run the policy,
    /// [`AutocastError::UnmatchedPath`], [`AutocastError::KeptPathFedHalf`],
    /// [`AutocastError::AlreadyReparameterized`].
    ///
    /// # Example
    ///
    /// ```
    /// use burn::module::Module;
    /// use burn::nn::LinearConfig;
    /// use burn::tensor::{DType, Device};
    /// use burn_mpric_022::Autocast;
    /// use burn_mpric_core::ResolvedPolicy;
    ///
    /// let policy: ResolvedPolicy = "mixed_f16".parse().unwrap();
    /// let linear = Autocast::new(policy).apply(LinearConfig::new(2, 2).init(&Device::flex())).unwrap();
    /// assert_eq!(linear.weight.val().dtype(), DType::F16);
    /// assert_eq!(linear.num_params(), 6); // the cast adds no parameter
    /// ```
    pub fn apply<M: Module>(&self, module: M) -> Result<M, AutocastError> {
        let policy = Policy::from(self.policy);
        for device in module.devices() {
            let supported = supported_float_dtypes(&device);
            if let Err(source) = policy.resolve_with(&supported) {
                return Err(AutocastError::Unsupported {
                    policy: policy.to_string(),
                    device: format!("{device:?}"),
                    source,
                });
            }
        }
        let survey = self.survey(&module)?;
        if !survey.changes {
            // The identity policy on a module stored at `p`: nothing to do, and nothing done.
            return Ok(module);
        }
        let param = to_burn_dtype(self.policy.param());
        Ok(module.apply_reparameterization(CastReparameterizer {
            param,
            decisions: survey.decisions,
        }))
    }

    /// Walks `module` once: each parameter's path, the dtype it will be used at, and whether
    /// anything changes at all.
    fn survey<M: Module>(&self, module: &M) -> Result<Survey, AutocastError> {
        let mut visitor = SurveyVisitor {
            autocast: self,
            names: Vec::new(),
            containers: Vec::new(),
            plan: Vec::new(),
            decisions: HashMap::new(),
            matched: HashSet::new(),
            reparameterized: None,
            fed_half: None,
            changes: false,
        };
        module.visit(&mut visitor);
        // A module that needs no change is returned as it is, reparameterized or not.
        if let (Some(path), true) = (visitor.reparameterized, visitor.changes) {
            return Err(AutocastError::AlreadyReparameterized { path });
        }
        if let Some(path) = self.paths.iter().find(|p| !visitor.matched.contains(*p)) {
            let known: Vec<&str> = visitor
                .plan
                .iter()
                .map(|(_, path, _)| path.as_str())
                .collect();
            return Err(AutocastError::UnmatchedPath {
                path: path.clone(),
                known: known.join(", "),
            });
        }
        if let Some(path) = visitor.fed_half {
            let field = path.split('.').next().unwrap_or(&path).to_string();
            return Err(AutocastError::KeptPathFedHalf {
                field,
                path,
                compute: self.policy.compute(),
                param: self.policy.param(),
            });
        }
        Ok(Survey {
            plan: visitor.plan,
            decisions: visitor.decisions,
            changes: visitor.changes,
        })
    }

    /// Why a parameter at `path`, inside `containers` (innermost last), stays at full
    /// precision, if it does.
    fn kept(&self, path: &str, containers: &[String]) -> Option<KeptBecause> {
        if containers.iter().any(|c| c == "Struct:FullPrecision") {
            return Some(KeptBecause::FullPrecisionWrapper);
        }
        if let Some(prefix) = self.paths.iter().find(|p| under(path, p)) {
            return Some(KeptBecause::Path(prefix.clone()));
        }
        let in_layer_norm = containers.last().is_some_and(|c| c == "Struct:LayerNorm");
        (self.layer_norms && in_layer_norm && self.policy.compute() == FloatDType::F16)
            .then_some(KeptBecause::LayerNorm)
    }
}

/// Autocasts `module` under `policy` with the default rules: [`Autocast::new`] then
/// [`Autocast::apply`].
///
/// # Example
///
/// ```
/// use burn::nn::LinearConfig;
/// use burn::tensor::{DType, Device, Tensor};
/// use burn_mpric_022::{autocast, cast_for_compute, cast_for_output};
/// use burn_mpric_core::ResolvedPolicy;
///
/// let device = Device::flex();
/// let policy: ResolvedPolicy = "mixed_f16".parse().unwrap();
/// let model = autocast(LinearConfig::new(3, 2).init(&device), policy).unwrap();
/// let x = cast_for_compute(Tensor::<2>::ones([1, 3], &device), &policy);
/// let logits = cast_for_output(model.forward(x), &policy);
/// assert_eq!(logits.dtype(), DType::F32);
/// ```
pub fn autocast<M: Module>(module: M, policy: ResolvedPolicy) -> Result<M, AutocastError> {
    Autocast::new(policy).apply(module)
}

/// `path` is `prefix` or lies under it.
fn under(path: &str, prefix: &str) -> bool {
    path == prefix
        || path
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with('.'))
}

/// The stored dtype of every plain float parameter a visitor reaches, by id.
fn observed_dtypes<M: Module>(module: &M) -> HashMap<ParamId, FloatDType> {
    struct Observe(HashMap<ParamId, FloatDType>);
    impl ModuleVisitor for Observe {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            if let Some(dtype) = plain_float(stored_dtype(param)) {
                self.0.insert(param.id, from_burn_dtype(dtype));
            }
        }
    }
    let mut observe = Observe(HashMap::new());
    module.visit(&mut observe);
    observe.0
}

struct Survey {
    /// Each plain float parameter: its id, path and full-precision reason.
    plan: Vec<(ParamId, String, Option<KeptBecause>)>,
    decisions: HashMap<ParamId, Decision>,
    changes: bool,
}

/// What happens to one parameter.
#[derive(Debug, Clone, Copy)]
struct Decision {
    /// Cast the stored value to the param dtype.
    cast_base: bool,
    /// Use it at this dtype (attach a [`ComputeCast`]).
    use_at: Option<burn::tensor::FloatDType>,
}

struct SurveyVisitor<'a> {
    autocast: &'a Autocast,
    names: Vec<String>,
    containers: Vec<String>,
    plan: Vec<(ParamId, String, Option<KeptBecause>)>,
    decisions: HashMap<ParamId, Decision>,
    matched: HashSet<String>,
    /// The first parameter found already reparameterized.
    reparameterized: Option<String>,
    /// The first full-precision path found whose module would be fed half inputs.
    fed_half: Option<String>,
    changes: bool,
}

impl ModuleVisitor for SurveyVisitor<'_> {
    fn enter_module(&mut self, name: &str, container_type: &str) {
        if container_type == "Reparameterization" && self.reparameterized.is_none() {
            self.reparameterized = Some(self.names.join("."));
        }
        self.names.push(name.to_string());
        self.containers.push(container_type.to_string());
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.names.pop();
        self.containers.pop();
    }

    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let path = self.names.join(".");
        for prefix in &self.autocast.paths {
            if under(&path, prefix) {
                self.matched.insert(prefix.clone());
            }
        }
        let Some(current) = plain_float(stored_dtype(param)) else {
            return; // quantized: never cast
        };
        let policy = self.autocast.policy;
        // `enter_module(field, "Struct:Parent")`: a field's container type names the struct
        // that holds it, so the innermost entry is the parameter's own layer.
        let kept = self.autocast.kept(&path, &self.containers);
        if let Some(KeptBecause::Path(prefix)) = &kept
            && self.fed_half.is_none()
            && !self.autocast.cast_by_caller.contains(prefix)
            && policy.compute() != policy.param()
            && !(policy.compute() == FloatDType::F16
                && self
                    .containers
                    .last()
                    .is_some_and(|c| c == "Struct:LayerNorm"))
        {
            self.fed_half = Some(prefix.clone());
        }
        let used = if kept.is_some() {
            policy.param()
        } else {
            policy.compute()
        };
        let cast_base = from_burn_dtype(current) != policy.param();
        let use_at = (used != policy.param()).then(|| to_burn_dtype(used));
        self.changes |= cast_base || use_at.is_some();
        self.decisions
            .insert(param.id, Decision { cast_base, use_at });
        self.plan.push((param.id, path, kept));
    }
}

struct CastReparameterizer {
    param: burn::tensor::FloatDType,
    decisions: HashMap<ParamId, Decision>,
}

impl Reparameterizer for CastReparameterizer {
    type Reparam = ComputeCast;

    fn reparameterize<const D: usize>(
        &mut self,
        _path: &str,
        param: Param<Tensor<D>>,
    ) -> (Param<Tensor<D>>, Option<ComputeCast>) {
        let Some(decision) = self.decisions.get(&param.id).copied() else {
            return (param, None);
        };
        let param = if decision.cast_base {
            let dtype = self.param;
            param.init_mapper(move |tensor| leaf_at(tensor, dtype))
        } else {
            param
        };
        let cast = decision.use_at.map(|dtype| ComputeCast { dtype });
        (param, cast)
    }
}
