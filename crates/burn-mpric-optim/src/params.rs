//! Where the parameters are kept: at bf16 for bf16 master weights.

use std::marker::PhantomData;

use burn::module::{Module, ModuleMapper, Param};
use burn::tensor::backend::Backend;
use burn::tensor::{FloatDType, Tensor};
use burn_mpric_core::optim::MasterWeights;

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
