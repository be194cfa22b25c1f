//! [`MpSettings`]: a policy plus per-op overrides, as a user writes it; and the
//! [`full_precision`] scope.

use std::cell::Cell;

use crate::Policy;
use crate::{Op, OpCategory};

/// What a [`MixedPrecision`](crate::MixedPrecision) device does: a [`Policy`], optional
/// per-op category overrides, and an optional "pure" mode.
///
/// ```
/// use burn_mpric::{Op, OpCategory, Policy, MpSettings};
///
/// let settings = MpSettings::new("mixed_f16".parse::<Policy>().unwrap())
///     .with_category(Op::Attention, OpCategory::FullPrecision);
/// assert_eq!(settings.category(Op::Attention), OpCategory::FullPrecision);
/// assert_eq!(settings.category(Op::Matmul), OpCategory::Compute);
/// assert_eq!(settings.pure().category(Op::Exp), OpCategory::Compute);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MpSettings {
    policy: Policy,
    pure: bool,
    pub(crate) softmax: SoftmaxPrecision,
    overrides: Vec<(Op, OpCategory)>,
}

/// Where a softmax's pieces run under a policy that lowers: the exponentials, their sums
/// along the softmax's dim, the probabilities, and their gradients in backward. Burn's
/// autodiff has no softmax of its own (it hands the decorator `max_dim`, `sub`, `exp`,
/// `sum_dim` and `div`, and their backward ops), and in attention these are
/// `[batch, heads, seq, seq]` maps, the largest tensors of a transformer step. See
/// `docs/op-categories.md` for what each setting runs where.
///
/// ```
/// use burn_mpric::{MpSettings, Policy, SoftmaxPrecision};
///
/// let s = MpSettings::new(Policy::F32);
/// assert_eq!(s.softmax(), SoftmaxPrecision::Half);
/// let s = s.softmax_precision(SoftmaxPrecision::Stored);
/// assert_eq!(s.softmax(), SoftmaxPrecision::Stored);
/// // Recipes name them in lower case.
/// let parsed: SoftmaxPrecision = serde_json::from_str("\"stored\"").unwrap();
/// assert_eq!(parsed, SoftmaxPrecision::Stored);
/// ```
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum SoftmaxPrecision {
    /// Computed and stored at f32, as PyTorch's unfused autocast does (softmax is on its f32
    /// list): each map is cast up before `exp` and its gradient cast back down before the
    /// scores' matmul.
    Full,
    /// Computed at f32, stored at the compute dtype: the exponentials and the probabilities
    /// are rounded once, the sums stay f32; backward's products with the row sums run at
    /// f32, with casts of the map on either side.
    Stored,
    /// Computed and stored at the compute dtype, as fused attention kernels and pure half
    /// precision do, so a map never changes dtype: the sums along the softmax's dim are
    /// the backend's reductions at the compute dtype, which accumulate at f32 inside on
    /// Flex and the cube backends (Wgpu, CUDA) and round their `[.., 1]` result once; the
    /// square of a row sum (up to the row's length squared, past f16's range) and the sum
    /// under `log_softmax`'s log stay f32.
    #[default]
    Half,
}

impl MpSettings {
    /// Settings that follow `policy` with the default op table.
    ///
    /// ```
    /// use burn_mpric::{Policy, MpSettings};
    ///
    /// assert_eq!(MpSettings::new(Policy::F32).policy(), Policy::F32);
    /// ```
    pub fn new(policy: Policy) -> Self {
        Self {
            policy,
            pure: false,
            softmax: SoftmaxPrecision::default(),
            overrides: Vec::new(),
        }
    }

    /// Runs `op` in `category` instead of its default (a later override of the same op wins).
    ///
    /// ```
    /// use burn_mpric::{Op, OpCategory, Policy, MpSettings};
    ///
    /// let s = MpSettings::new(Policy::F32).with_category(Op::Exp, OpCategory::Promote);
    /// assert_eq!(s.category(Op::Exp), OpCategory::Promote);
    /// ```
    pub fn with_category(mut self, op: Op, category: OpCategory) -> Self {
        self.overrides.retain(|(o, _)| *o != op);
        self.overrides.push((op, category));
        self
    }

    /// "Pure" mode: every op of the table runs at the compute dtype (the literal reading of
    /// a `c=bf16` policy); explicit per-op overrides still apply.
    ///
    /// ```
    /// use burn_mpric::{Op, OpCategory, Policy, MpSettings};
    ///
    /// let s = MpSettings::new(Policy::F32).pure();
    /// assert!(s.is_pure());
    /// assert_eq!(s.category(Op::Softmax), OpCategory::Compute);
    /// ```
    pub fn pure(mut self) -> Self {
        self.pure = true;
        self
    }

    /// Keeps the softmax's exponentials and probabilities at f32, as PyTorch's unfused
    /// autocast does: [`SoftmaxPrecision::Full`]. By default, under a policy that lowers,
    /// they are computed and stored at the compute dtype ([`SoftmaxPrecision::Half`]): they
    /// lie in [0, 1], where the compute dtype has the range, and autodiff keeps both for
    /// backward, so at f32 they dominate a transformer's activation memory and the bytes
    /// its memory-bound kernels move.
    ///
    /// ```
    /// use burn::backend::Flex;
    /// use burn::tensor::{DType, Tensor};
    /// use burn::tensor::activation::softmax;
    /// use burn_mpric::{MixedPrecision, Policy, MpSettings};
    ///
    /// type B = MixedPrecision<Flex>;
    /// let policy: Policy = "mixed_bf16".parse().unwrap();
    /// let stored = B::device(Default::default(), MpSettings::new(policy)).unwrap();
    /// let full = B::device(
    ///     Default::default(),
    ///     MpSettings::new(policy).full_precision_softmax(),
    /// )
    /// .unwrap();
    /// let scores = |device| Tensor::<B, 2>::ones([2, 3], device).cast(burn::tensor::FloatDType::BF16);
    /// assert_eq!(softmax(scores(&stored), 1).dtype(), DType::BF16);
    /// assert_eq!(softmax(scores(&full), 1).dtype(), DType::F32);
    /// ```
    pub fn full_precision_softmax(self) -> Self {
        self.softmax_precision(SoftmaxPrecision::Full)
    }

    /// Runs the softmax's pieces as `softmax` says (see [`SoftmaxPrecision`]).
    ///
    /// ```
    /// use burn::backend::Flex;
    /// use burn::tensor::{DType, FloatDType, Tensor};
    /// use burn::tensor::activation::softmax;
    /// use burn_mpric::{MixedPrecision, MpSettings, Policy, SoftmaxPrecision};
    ///
    /// type B = MixedPrecision<Flex>;
    /// let policy: Policy = "mixed_f16".parse().unwrap();
    /// for mode in [SoftmaxPrecision::Stored, SoftmaxPrecision::Half] {
    ///     let settings = MpSettings::new(policy).softmax_precision(mode);
    ///     let device = B::device(Default::default(), settings).unwrap();
    ///     let scores = Tensor::<B, 2>::ones([2, 3], &device).cast(FloatDType::F16);
    ///     let p = softmax(scores, 1);
    ///     assert_eq!(p.dtype(), DType::F16);
    ///     let p: Vec<f32> = p.into_data().to_vec().unwrap();
    ///     assert!(p.iter().all(|v| (v - 1.0 / 3.0).abs() < 1e-3));
    /// }
    /// ```
    pub fn softmax_precision(mut self, softmax: SoftmaxPrecision) -> Self {
        self.softmax = softmax;
        self
    }

    /// Where the softmax's pieces run (see [`SoftmaxPrecision`]).
    ///
    /// ```
    /// use burn_mpric::{MpSettings, Policy, SoftmaxPrecision};
    ///
    /// let s = MpSettings::new(Policy::F32).full_precision_softmax();
    /// assert_eq!(s.softmax(), SoftmaxPrecision::Full);
    /// ```
    pub fn softmax(&self) -> SoftmaxPrecision {
        self.softmax
    }

    pub(crate) fn with_policy(self, policy: Policy) -> Self {
        Self { policy, ..self }
    }

    /// Whether pure mode is on.
    ///
    /// ```
    /// use burn_mpric::{Policy, MpSettings};
    ///
    /// assert!(!MpSettings::new(Policy::F32).is_pure());
    /// ```
    pub fn is_pure(&self) -> bool {
        self.pure
    }

    /// The policy.
    ///
    /// ```
    /// use burn_mpric::{Policy, MpSettings};
    ///
    /// let p: Policy = "mixed_bf16".parse().unwrap();
    /// assert_eq!(MpSettings::from(p).policy(), p);
    /// ```
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// The category `op` runs in under these settings.
    ///
    /// ```
    /// use burn_mpric::{Op, OpCategory, Policy, MpSettings};
    ///
    /// assert_eq!(MpSettings::new(Policy::F32).category(Op::Linear), OpCategory::Compute);
    /// ```
    pub fn category(&self, op: Op) -> OpCategory {
        if let Some((_, category)) = self.overrides.iter().find(|(o, _)| *o == op) {
            *category
        } else if self.pure {
            OpCategory::Compute
        } else {
            op.default_category()
        }
    }
}

impl From<Policy> for MpSettings {
    fn from(policy: Policy) -> Self {
        Self::new(policy)
    }
}

thread_local! {
    static FULL_PRECISION_DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// Runs `f` with compute ops held at full precision on this thread: inside, ops of the
/// [`OpCategory::Compute`] category run as [`OpCategory::FullPrecision`] ones (like
/// `torch.autocast(enabled=False)` for a region that must stay at f32). Scopes nest; the
/// policy is back in force when `f` returns or unwinds. Backward passes run later follow the
/// policy unless they, too, run inside a scope.
///
/// ```
/// use burn::backend::Flex;
/// use burn::tensor::{DType, Tensor};
/// use burn_mpric::{MixedPrecision, Policy};
///
/// type B = MixedPrecision<Flex>;
/// let device = B::device(Default::default(), "mixed_bf16".parse::<Policy>().unwrap()).unwrap();
/// let a = Tensor::<B, 2>::ones([2, 2], &device);
/// assert_eq!(a.clone().matmul(a.clone()).dtype(), DType::BF16);
/// let kept = burn_mpric::full_precision(|| a.clone().matmul(a.clone()));
/// assert_eq!(kept.dtype(), DType::F32);
/// ```
pub fn full_precision<R>(f: impl FnOnce() -> R) -> R {
    struct Guard;
    impl Drop for Guard {
        fn drop(&mut self) {
            FULL_PRECISION_DEPTH.with(|d| d.set(d.get() - 1));
        }
    }
    FULL_PRECISION_DEPTH.with(|d| d.set(d.get() + 1));
    let _guard = Guard;
    f()
}

pub(crate) fn in_full_precision_scope() -> bool {
    FULL_PRECISION_DEPTH.with(|d| d.get() > 0)
}
