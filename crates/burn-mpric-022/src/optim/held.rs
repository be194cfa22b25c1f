//! What the parameters and the optimizer's state hold in bytes, read from the tensors.

use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::ModuleOptimizer;
use burn::tensor::Tensor;
use burn_mpric_core::optim::HeldBytes;
use burn_store::burn_pack::Reader;

use super::optimizer::LowPrecisionState;
use crate::dtype::stored_dtype;

/// The stored parameters' bytes and elements, read without initializing a lazy parameter.
struct ParamBytes {
    bytes: usize,
    elements: usize,
}

impl ModuleVisitor for ParamBytes {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let elements = param.lazy_shape().num_elements();
        self.elements += elements;
        self.bytes += elements * stored_dtype(param).size();
    }
}

fn tensor_bytes<const D: usize>(tensor: &Tensor<D>) -> usize {
    tensor.shape().num_elements() * tensor.dtype().size()
}

impl<const D: usize> LowPrecisionState<D> {
    /// The bytes this state holds.
    ///
    /// # Example
    ///
    /// ```
    /// use burn::tensor::{Device, FloatDType, Tensor};
    /// use burn_mpric_022::optim::LowPrecisionState;
    ///
    /// let moment = Tensor::<1>::zeros([10], &Device::flex()).cast(FloatDType::BF16);
    /// let state = LowPrecisionState { slots: vec![moment], scalars: Vec::new(), compensation: None, stream: 0, draws: 0, drawn_on_device: None };
    /// assert_eq!(state.bytes(), 20);
    /// ```
    pub fn bytes(&self) -> usize {
        self.slots.iter().map(tensor_bytes).sum::<usize>()
            + self.scalars.iter().map(tensor_bytes).sum::<usize>()
            + self.compensation.as_ref().map_or(0, tensor_bytes)
    }
}

/// What `module` (its stored parameters) and `optim` hold, in bytes, read from the tensors'
/// dtypes and sizes.
///
/// Burn 0.22's `ModuleOptimizer` keeps each parameter's state type-erased and its record's
/// tensors private, so the state is read from the record as Burn saves it (burnpack): every
/// tensor of the state, whatever optimizer made it (a [`LowPrecisionOptimizer`](super::LowPrecisionOptimizer)
/// or one of Burn's). That reads the state to the host once; to count without a read, sum
/// [`LowPrecisionState::bytes`] over the states you hold.
///
/// # Panics
///
/// If Burn cannot write the optimizer's record to memory or read it back, which for a record
/// it has just made in memory would be a bug in Burn.
///
/// # Example
///
/// ```
/// use burn::nn::LinearConfig;
/// use burn::optim::GradientsParams;
/// use burn::tensor::{Device, Tensor};
/// use burn_mpric_022::optim::{LowPrecisionOptimizer, MasterWeights, OptimizerPrecision, StateDtype, held_bytes};
/// use burn_mpric_core::scale::DeviceAdamConfig;
///
/// let device = Device::flex().autodiff();
/// let precision = OptimizerPrecision::new(StateDtype::Bf16, MasterWeights::F32);
/// let lp = LowPrecisionOptimizer::new(DeviceAdamConfig::new(), precision).unwrap();
/// let model = LinearConfig::new(3, 2).init(&device);
/// let mut optim = lp.init();
/// let held = held_bytes(&model, &optim);
/// assert_eq!((held.elements, held.params, held.state), (8, 32, 0)); // no step taken yet
///
/// let loss = model.forward(Tensor::<2>::ones([1, 3], &device)).sum();
/// let grads = GradientsParams::from_grads(loss.backward(), &model);
/// let model = optim.step(1e-2, model, grads);
/// // Two bf16 moments per element, and each parameter's two f32 powers of the betas.
/// assert_eq!(held_bytes(&model, &optim).state, 8 * 2 * 2 + 2 * 2 * 4);
/// ```
pub fn held_bytes<M: Module>(module: &M, optim: &ModuleOptimizer) -> HeldBytes {
    let mut params = ParamBytes {
        bytes: 0,
        elements: 0,
    };
    module.visit(&mut params);
    let record = optim
        .into_bytes()
        .expect("Burn writes an optimizer record to memory");
    let state = Reader::from_bytes(record)
        .and_then(Reader::into_tensors)
        .expect("Burn reads back the optimizer record it wrote")
        .iter()
        .map(|tensor| tensor.byte_len())
        .sum();
    HeldBytes {
        params: params.bytes,
        state,
        elements: params.elements,
    }
}
