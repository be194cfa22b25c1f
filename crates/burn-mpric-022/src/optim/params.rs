//! Where the parameters are kept: at bf16 for bf16 master weights.

use burn::module::{Module, ModuleMapper, Param};
use burn::tensor::{FloatDType, Tensor};
use burn_mpric_core::optim::MasterWeights;

use crate::dtype::{leaf_at, plain_float, stored_dtype};

/// `module` with its float parameters stored at the dtype `master` keeps them at: bf16 for
/// stochastic rounding and Kahan, unchanged for f32 master weights. Call it on a new model and
/// on one loaded from a checkpoint, so that every step sees the same dtypes; under
/// [`autocast`](crate::autocast()), after autocasting (which stores parameters at the policy's
/// param dtype). Each parameter keeps its id, whether it takes a gradient and its
/// reparameterization; one not yet initialized stays lazy.
///
/// # Example
///
/// ```
/// use burn::nn::LinearConfig;
/// use burn::tensor::{DType, Device};
/// use burn_mpric_022::optim::{MasterWeights, store_params};
///
/// let model = LinearConfig::new(2, 2).init(&Device::flex());
/// let model = store_params(MasterWeights::Stochastic, model);
/// assert_eq!(model.weight.val().dtype(), DType::BF16);
/// let model = store_params(MasterWeights::F32, model); // f32 master weights leave it as it is
/// assert_eq!(model.weight.val().dtype(), DType::BF16);
/// ```
pub fn store_params<M: Module>(master: MasterWeights, module: M) -> M {
    if master.is_bf16() {
        module.map(&mut StoreParams::bf16())
    } else {
        module
    }
}

/// Casts every float parameter's stored value to one dtype, keeping its id, whether it takes a
/// gradient and its reparameterization (a module mapper sees the stored value only).
struct StoreParams {
    dtype: FloatDType,
}

impl StoreParams {
    fn bf16() -> Self {
        Self {
            dtype: FloatDType::BF16,
        }
    }
}

impl ModuleMapper for StoreParams {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        if plain_float(stored_dtype(&param)).is_none() {
            return param; // quantized: never cast
        }
        let dtype = self.dtype;
        // A lazy parameter stays lazy.
        param.init_mapper(move |tensor| leaf_at(tensor, dtype))
    }
}
