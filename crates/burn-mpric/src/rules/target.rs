//! `DeviceRules`: settings resolved for one device, with the op table flattened, and the
//! target-dtype decision every op asks for.

use std::sync::Arc;

use burn::tensor::FloatDType;
use burn::tensor::backend::Backend;

use super::settings::{MpSettings, SoftmaxPrecision, in_full_precision_scope};
use crate::BurnDType;
use crate::policy::ResolveOnDevice;
use crate::{Op, OpCategory, PolicyError, ResolvedPolicy};

/// Settings checked against a device, with the op table flattened for O(1) lookups.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct DeviceRules {
    pub(crate) settings: MpSettings,
    pub(crate) policy: ResolvedPolicy,
    /// The policy's dtypes as Burn 0.21 names them: what every op compares and casts to.
    pub(crate) dtypes: Dtypes,
    categories: [OpCategory; Op::COUNT],
}

/// The resolved settings every tensor of a [`MixedPrecision`](crate::MixedPrecision) backend
/// carries: cheap to clone, compared by value.
/// A resolved policy's three dtypes in Burn 0.21's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Dtypes {
    pub(crate) param: FloatDType,
    pub(crate) compute: FloatDType,
    pub(crate) output: FloatDType,
}

#[derive(Debug, Clone)]
pub(crate) struct Precision(pub(crate) Arc<DeviceRules>);

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

impl DeviceRules {
    /// `settings` checked against `device`: `half` resolved, every dtype supported.
    pub(crate) fn new<B: Backend>(
        settings: MpSettings,
        device: &B::Device,
    ) -> Result<Self, PolicyError> {
        let policy = settings.policy().resolve::<B>(device)?;
        let mut categories = [OpCategory::Promote; Op::COUNT];
        for op in Op::ALL {
            categories[op.index()] = settings.category(*op);
        }
        Ok(Self {
            settings: settings.with_policy(policy.into()),
            policy,
            dtypes: Dtypes {
                param: policy.param().to_burn(),
                compute: policy.compute().to_burn(),
                output: policy.output().to_burn(),
            },
            categories,
        })
    }

    /// Whether the policy computes at another dtype than it stores parameters in (so values
    /// get cast to the compute dtype, and a cast cache pays).
    pub(crate) fn lowers(&self) -> bool {
        self.policy.lowers()
    }

    /// Whether `op`, given a compute-dtype `input` and a result known to fit the compute
    /// dtype's range, stores that result at the compute dtype (`ops/softmax.rs`; see
    /// [`SoftmaxPrecision`](crate::SoftmaxPrecision)): only under a lowering policy, with the
    /// op in its default category, outside a [`full_precision`](crate::full_precision) scope.
    pub(crate) fn stores_bounded_at_compute(&self, op: Op, input: FloatDType) -> bool {
        self.settings.softmax != SoftmaxPrecision::Full && self.lowers_softmax(op, input)
    }

    /// Whether `op` on a piece of a softmax at the compute dtype also *computes* there
    /// ([`SoftmaxPrecision::Half`]), under the conditions of
    /// [`stores_bounded_at_compute`](Self::stores_bounded_at_compute).
    pub(crate) fn computes_bounded_at_compute(&self, op: Op, input: FloatDType) -> bool {
        self.settings.softmax == SoftmaxPrecision::Half && self.lowers_softmax(op, input)
    }

    fn lowers_softmax(&self, op: Op, input: FloatDType) -> bool {
        self.lowers()
            && input == self.dtypes.compute
            && self.categories[op.index()] == op.default_category()
            && !in_full_precision_scope()
    }

    fn precision_key(&self) -> [u8; 3] {
        [self.dtypes.compute, self.dtypes.param, self.dtypes.output].map(precision_rank)
    }

    /// The dtype a float tensor of `dtype` is read at by the host: a tensor at the compute
    /// dtype (what the policy lowered) is read at the output dtype; any other dtype (a
    /// parameter, or an explicit cast by the user) as it is. At the identity policy nothing
    /// changes.
    pub(crate) fn host_dtype(&self, dtype: FloatDType) -> FloatDType {
        if dtype == self.dtypes.compute {
            self.dtypes.output
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
            OpCategory::Compute => self.dtypes.compute,
            OpCategory::FullPrecision => widest(widest(FloatDType::F32, self.dtypes.param), input),
            OpCategory::Promote => input,
        })
    }

    /// The dtype a creation op makes when asked for `requested`: Burn asks for its default
    /// float dtype when the user named none, and that request means "the param dtype".
    pub(crate) fn creation_dtype(&self, requested: FloatDType, default: FloatDType) -> FloatDType {
        if requested == default {
            self.dtypes.param
        } else {
            requested
        }
    }
}
