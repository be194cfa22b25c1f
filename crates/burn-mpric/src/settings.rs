//! [`PrecisionSettings`]: a policy plus per-op overrides, and its resolved, shared form.

use std::cell::Cell;
use std::sync::Arc;

use burn::tensor::FloatDType;
use burn::tensor::backend::Backend;

use crate::category::{Op, OpCategory};
use crate::{Policy, PolicyError};

/// What a [`MixedPrecision`](crate::MixedPrecision) device does: a [`Policy`], optional
/// per-op category overrides, and an optional "pure" mode.
///
/// ```
/// use burn_mpric::{Op, OpCategory, Policy, PrecisionSettings};
///
/// let settings = PrecisionSettings::new("mixed_f16".parse::<Policy>().unwrap())
///     .with_category(Op::Attention, OpCategory::FullPrecision);
/// assert_eq!(settings.category(Op::Attention), OpCategory::FullPrecision);
/// assert_eq!(settings.category(Op::Matmul), OpCategory::Compute);
/// assert_eq!(settings.pure().category(Op::Exp), OpCategory::Compute);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PrecisionSettings {
    policy: Policy,
    pure: bool,
    full_precision_softmax: bool,
    overrides: Vec<(Op, OpCategory)>,
}

impl PrecisionSettings {
    /// Settings that follow `policy` with the default op table.
    ///
    /// ```
    /// use burn_mpric::{Policy, PrecisionSettings};
    ///
    /// assert_eq!(PrecisionSettings::new(Policy::F32).policy(), Policy::F32);
    /// ```
    pub fn new(policy: Policy) -> Self {
        Self {
            policy,
            pure: false,
            full_precision_softmax: false,
            overrides: Vec::new(),
        }
    }

    /// Runs `op` in `category` instead of its default (a later override of the same op wins).
    ///
    /// ```
    /// use burn_mpric::{Op, OpCategory, Policy, PrecisionSettings};
    ///
    /// let s = PrecisionSettings::new(Policy::F32).with_category(Op::Exp, OpCategory::Promote);
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
    /// use burn_mpric::{Op, OpCategory, Policy, PrecisionSettings};
    ///
    /// let s = PrecisionSettings::new(Policy::F32).pure();
    /// assert!(s.is_pure());
    /// assert_eq!(s.category(Op::Softmax), OpCategory::Compute);
    /// ```
    pub fn pure(mut self) -> Self {
        self.pure = true;
        self
    }

    /// Keeps the softmax's exponentials and probabilities at f32, as PyTorch's unfused
    /// autocast does. By default, under a policy that lowers, they are computed at f32 and
    /// *stored* at the compute dtype: they lie in [0, 1], where the compute dtype has the
    /// range, and autodiff keeps both for backward, so at f32 they dominate a transformer's
    /// activation memory (fused attention kernels store them at the compute dtype too). The
    /// sums and the log-sum-exp of `log_softmax` stay f32 either way.
    ///
    /// ```
    /// use burn::backend::Flex;
    /// use burn::tensor::{DType, Tensor};
    /// use burn::tensor::activation::softmax;
    /// use burn_mpric::{MixedPrecision, Policy, PrecisionSettings};
    ///
    /// type B = MixedPrecision<Flex>;
    /// let policy: Policy = "mixed_bf16".parse().unwrap();
    /// let stored = B::device(Default::default(), PrecisionSettings::new(policy)).unwrap();
    /// let full = B::device(
    ///     Default::default(),
    ///     PrecisionSettings::new(policy).full_precision_softmax(),
    /// )
    /// .unwrap();
    /// let scores = |device| Tensor::<B, 2>::ones([2, 3], device).cast(burn::tensor::FloatDType::BF16);
    /// assert_eq!(softmax(scores(&stored), 1).dtype(), DType::BF16);
    /// assert_eq!(softmax(scores(&full), 1).dtype(), DType::F32);
    /// ```
    pub fn full_precision_softmax(mut self) -> Self {
        self.full_precision_softmax = true;
        self
    }

    /// Whether pure mode is on.
    ///
    /// ```
    /// use burn_mpric::{Policy, PrecisionSettings};
    ///
    /// assert!(!PrecisionSettings::new(Policy::F32).is_pure());
    /// ```
    pub fn is_pure(&self) -> bool {
        self.pure
    }

    /// The policy.
    ///
    /// ```
    /// use burn_mpric::{Policy, PrecisionSettings};
    ///
    /// let p: Policy = "mixed_bf16".parse().unwrap();
    /// assert_eq!(PrecisionSettings::from(p).policy(), p);
    /// ```
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// The category `op` runs in under these settings.
    ///
    /// ```
    /// use burn_mpric::{Op, OpCategory, Policy, PrecisionSettings};
    ///
    /// assert_eq!(PrecisionSettings::new(Policy::F32).category(Op::Linear), OpCategory::Compute);
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

    pub(crate) fn resolve<B: Backend>(&self, device: &B::Device) -> Result<Resolved, PolicyError> {
        let policy = self.policy.resolve::<B>(device)?;
        let (param, compute, output) = policy.dtypes().expect("a resolved policy has no `half`");
        let mut categories = [OpCategory::Promote; Op::COUNT];
        for op in Op::ALL {
            categories[op.index()] = self.category(*op);
        }
        Ok(Resolved {
            settings: PrecisionSettings {
                policy,
                ..self.clone()
            },
            param,
            compute,
            output,
            categories,
        })
    }
}

impl From<Policy> for PrecisionSettings {
    fn from(policy: Policy) -> Self {
        Self::new(policy)
    }
}

/// Settings checked against a device, with the op table flattened for O(1) lookups.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Resolved {
    pub(crate) settings: PrecisionSettings,
    pub(crate) param: FloatDType,
    pub(crate) compute: FloatDType,
    pub(crate) output: FloatDType,
    categories: [OpCategory; Op::COUNT],
}

/// The resolved settings every tensor of a [`MixedPrecision`](crate::MixedPrecision) backend
/// carries: cheap to clone, compared by value.
#[derive(Debug, Clone)]
pub(crate) struct Precision(pub(crate) Arc<Resolved>);

impl PartialEq for Precision {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0 == other.0
    }
}

impl Eq for Precision {}

impl Precision {
    /// The settings an op follows when its tensors carry `a` and `b` (tensors made under two
    /// policies meeting in one op): the one that keeps more precision, compared by compute
    /// dtype, then param dtype, then output dtype (f64 > f32 > f16 > bf16, f16 keeping more
    /// mantissa bits). Settings with the same three dtypes (they differ only in op overrides
    /// or pure mode) give way to the first argument's. The choice does not depend on the
    /// order of the operands otherwise, so `a + b` and `b + a` run alike.
    pub(crate) fn preferred<'a>(a: &'a Precision, b: &'a Precision) -> &'a Precision {
        if Arc::ptr_eq(&a.0, &b.0) {
            return a;
        }
        if b.0.precision_key() > a.0.precision_key() {
            b
        } else {
            a
        }
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

fn in_full_precision_scope() -> bool {
    FULL_PRECISION_DEPTH.with(|d| d.get() > 0)
}

/// Width order: f64 > f32 = flex32 > f16, bf16; two different 16-bit floats meet at f32.
fn widest(a: FloatDType, b: FloatDType) -> FloatDType {
    fn rank(d: FloatDType) -> u8 {
        match d {
            FloatDType::F64 => 3,
            FloatDType::F32 | FloatDType::Flex32 => 2,
            FloatDType::F16 | FloatDType::BF16 => 1,
        }
    }
    match rank(a).cmp(&rank(b)) {
        core::cmp::Ordering::Greater => a,
        core::cmp::Ordering::Less => b,
        core::cmp::Ordering::Equal if a == b => a,
        core::cmp::Ordering::Equal if rank(a) == 1 => FloatDType::F32,
        core::cmp::Ordering::Equal => a,
    }
}

/// The float input dtypes of one op call.
#[derive(Default)]
pub(crate) struct InputDTypes {
    widest: Option<FloatDType>,
}

impl InputDTypes {
    pub(crate) fn push(&mut self, dtype: FloatDType) {
        self.widest = Some(match self.widest {
            Some(w) => widest(w, dtype),
            None => dtype,
        });
    }
}

/// Precision order of float dtypes, for [`Precision::preferred`].
fn precision_rank(d: FloatDType) -> u8 {
    match d {
        FloatDType::F64 => 4,
        FloatDType::F32 | FloatDType::Flex32 => 3,
        FloatDType::F16 => 2,
        FloatDType::BF16 => 1,
    }
}

impl Resolved {
    /// Whether the policy computes at another dtype than it stores parameters in (so values
    /// get cast to the compute dtype, and a cast cache pays).
    pub(crate) fn lowers(&self) -> bool {
        self.compute != self.param
    }

    /// Whether `op`, given a compute-dtype `input` and a result known to fit the compute
    /// dtype's range, stores that result at the compute dtype (`ops/softmax.rs`; see
    /// [`PrecisionSettings::full_precision_softmax`]): only under a lowering policy, with the
    /// op in its default category, outside a [`full_precision`] scope.
    pub(crate) fn stores_bounded_at_compute(&self, op: Op, input: FloatDType) -> bool {
        self.lowers()
            && !self.settings.full_precision_softmax
            && input == self.compute
            && self.categories[op.index()] == op.default_category()
            && !in_full_precision_scope()
    }

    fn precision_key(&self) -> [u8; 3] {
        [self.compute, self.param, self.output].map(precision_rank)
    }

    /// The dtype a float tensor of `dtype` is read at by the host: a tensor at the compute
    /// dtype (what the policy lowered) is read at the output dtype; any other dtype (a
    /// parameter, or an explicit cast by the user) as it is. At the identity policy nothing
    /// changes.
    pub(crate) fn host_dtype(&self, dtype: FloatDType) -> FloatDType {
        if dtype == self.compute {
            self.output
        } else {
            dtype
        }
    }

    /// The dtype float inputs of `op` are cast to, or `None` when the op has no float input.
    pub(crate) fn target(&self, op: Op, inputs: &InputDTypes) -> Option<FloatDType> {
        let input = inputs.widest?;
        let mut category = self.categories[op.index()];
        if category == OpCategory::Compute && in_full_precision_scope() {
            category = OpCategory::FullPrecision;
        }
        Some(match category {
            OpCategory::Compute => self.compute,
            OpCategory::FullPrecision => widest(widest(FloatDType::F32, self.param), input),
            OpCategory::Promote => input,
        })
    }

    /// The dtype a creation op makes when asked for `requested`: Burn asks for its default
    /// float dtype when the user named none, and that request means "the param dtype".
    pub(crate) fn creation_dtype(&self, requested: FloatDType, default: FloatDType) -> FloatDType {
        if requested == default {
            self.param
        } else {
            requested
        }
    }
}
