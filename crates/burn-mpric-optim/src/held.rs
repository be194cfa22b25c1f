//! What the parameters and the optimizer's state hold in bytes, read from the tensors.

use burn::module::{ModuleVisitor, Param};
use burn::optim::Optimizer;
use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::record::{AdaptorRecord, AdaptorRecordV1};
use burn::tensor::Tensor;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn_mpric_core::optim::HeldBytes;
use burn_mpric_scale::DeviceRule;

use crate::optimizer::{LowPrecisionOptimizer, LowPrecisionState};

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
    /// let state = LowPrecisionState { slots: vec![moment], scalars: Vec::new(), compensation: None, stream: 0, draws: 0, drawn_on_device: None };
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
