//! Where the parameters are kept, and what they and the optimizer's state hold in bytes.

use std::marker::PhantomData;

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param};
use burn::optim::Optimizer;
use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::record::{AdaptorRecord, AdaptorRecordV1};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{FloatDType, Tensor};
use burn_mpric_core::optim::{HeldBytes, MasterWeights};
use burn_mpric_scale::DeviceRule;

use crate::optimizer::{LowPrecisionOptimizer, LowPrecisionState};

/// `module` with its float parameters at the dtype `master` keeps them at: bf16 for
/// stochastic rounding and Kahan, unchanged for f32 master weights. Call it on a new model and
/// on one loaded from a checkpoint (Burn's recorders load at f32), so that every step sees the
/// same dtypes.
///
/// # Example
///
/// ```
/// use burn::backend::Flex;
/// use burn::nn::{Linear, LinearConfig};
/// use burn::tensor::DType;
/// use burn_mpric_optim::{MasterWeights, store_params};
///
/// let model: Linear<Flex> = LinearConfig::new(2, 2).init(&Default::default());
/// let model = store_params(MasterWeights::Stochastic, model);
/// assert_eq!(model.weight.val().dtype(), DType::BF16);
/// let model = store_params(MasterWeights::F32, model); // f32 master weights leave it as it is
/// assert_eq!(model.weight.val().dtype(), DType::BF16);
/// ```
pub fn store_params<B: Backend, M: Module<B>>(master: MasterWeights, module: M) -> M {
    if master.is_bf16() {
        module.map(&mut StoreParams::<B>::bf16())
    } else {
        module
    }
}

/// Casts every float parameter to one dtype, keeping its id and whether it takes a gradient.
pub(crate) struct StoreParams<B> {
    dtype: FloatDType,
    backend: PhantomData<B>,
}

impl<B> StoreParams<B> {
    pub(crate) fn bf16() -> Self {
        Self {
            dtype: FloatDType::BF16,
            backend: PhantomData,
        }
    }
}

impl<B: Backend> ModuleMapper<B> for StoreParams<B> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let (id, tensor, mapper) = param.consume();
        let require_grad = tensor.is_require_grad();
        let mut tensor = tensor.cast(self.dtype).detach();
        if require_grad {
            tensor = tensor.require_grad();
        }
        Param::from_mapped_value(id, tensor, mapper)
    }
}

struct ParamBytes {
    bytes: usize,
    elements: usize,
}

impl<B: Backend> ModuleVisitor<B> for ParamBytes {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let tensor = param.val();
        let elements = tensor.shape().num_elements();
        self.elements += elements;
        self.bytes += elements * tensor.dtype().size();
    }
}

fn tensor_bytes<B: Backend, const D: usize>(tensor: &Tensor<B, D>) -> usize {
    tensor.shape().num_elements() * tensor.dtype().size()
}

impl<B: Backend, const D: usize> LowPrecisionState<B, D> {
    /// The bytes this state holds.
    ///
    /// # Example
    ///
    /// ```
    /// use burn::backend::Flex;
    /// use burn::tensor::{FloatDType, Tensor};
    /// use burn_mpric_optim::LowPrecisionState;
    ///
    /// let device = Default::default();
    /// let moment = Tensor::<Flex, 1>::zeros([10], &device).cast(FloatDType::BF16);
    /// let state = LowPrecisionState { slots: vec![moment], scalars: Vec::new(), compensation: None, stream: 0, draws: 0 };
    /// assert_eq!(state.bytes(), 20);
    /// ```
    pub fn bytes(&self) -> usize {
        self.slots.iter().map(tensor_bytes).sum::<usize>()
            + self.scalars.iter().map(tensor_bytes).sum::<usize>()
            + self.compensation.as_ref().map_or(0, tensor_bytes)
    }
}

fn record_bytes<R: DeviceRule, B: Backend>(
    record: &AdaptorRecordV1<LowPrecisionOptimizer<R>, B>,
) -> usize {
    match record {
        AdaptorRecordV1::Rank0(s) => s.bytes(),
        AdaptorRecordV1::Rank1(s) => s.bytes(),
        AdaptorRecordV1::Rank2(s) => s.bytes(),
        AdaptorRecordV1::Rank3(s) => s.bytes(),
        AdaptorRecordV1::Rank4(s) => s.bytes(),
        AdaptorRecordV1::Rank5(s) => s.bytes(),
        AdaptorRecordV1::Rank6(s) => s.bytes(),
        AdaptorRecordV1::Rank7(s) => s.bytes(),
        AdaptorRecordV1::Rank8(s) => s.bytes(),
    }
}

/// What `module` and `optim` (a [`LowPrecisionOptimizer`]'s adaptor) hold, in bytes, read from
/// the tensors.
///
/// # Example
///
/// ```
/// use burn::backend::{Autodiff, Flex};
/// use burn::nn::{Linear, LinearConfig};
/// use burn_mpric_optim::{LowPrecisionOptimizer, OptimizerPrecision, held_bytes};
/// use burn_mpric_scale::DeviceAdamConfig;
///
/// type B = Autodiff<Flex>;
/// let lp = LowPrecisionOptimizer::new(DeviceAdamConfig::new(), OptimizerPrecision::default()).unwrap();
/// let model: Linear<B> = LinearConfig::new(3, 2).init(&Default::default());
/// let held = held_bytes(&model, &lp.init());
/// assert_eq!((held.elements, held.params, held.state), (8, 32, 0)); // no step taken yet
/// ```
pub fn held_bytes<AB, M, R>(
    module: &M,
    optim: &OptimizerAdaptor<LowPrecisionOptimizer<R>, M, AB>,
) -> HeldBytes
where
    AB: AutodiffBackend,
    M: burn::module::AutodiffModule<AB>,
    R: DeviceRule,
{
    let mut params = ParamBytes {
        bytes: 0,
        elements: 0,
    };
    module.visit(&mut params);
    let state = optim
        .to_record()
        .values()
        .map(|record: &AdaptorRecord<_, AB>| match record {
            AdaptorRecord::V1(v1) => record_bytes(v1),
        })
        .sum();
    HeldBytes {
        params: params.bytes,
        state,
        elements: params.elements,
    }
}
