//! [`Castable`]: what the handler's casts walk: tensors, modules, and containers of them.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasher, Hash};

use burn::module::{Module, ModuleMapper, Param};
use burn::tensor::backend::Backend;
use burn::tensor::{Bool, DType, FloatDType, Int, Tensor};

fn cast_tensor<B: Backend, const D: usize>(
    tensor: Tensor<B, D>,
    dtype: FloatDType,
) -> Tensor<B, D> {
    if tensor.dtype() == DType::from(dtype) {
        tensor
    } else {
        tensor.cast(dtype)
    }
}

/// Values whose float tensors the handler's casts convert: float tensors are cast, int and
/// bool tensors are left untouched, containers are walked (`Vec`, `Option`, arrays, the values
/// of `HashMap` and `BTreeMap`, tuples of up to 12 elements). Wrap a module in
/// [`ModuleParams`] to cast its float parameters.
///
/// ```
/// use burn::backend::Flex;
/// use burn::tensor::{DType, FloatDType, Int, Tensor};
/// use burn_mpric::Castable;
///
/// let device = Default::default();
/// let x = Tensor::<Flex, 1>::ones([2], &device);
/// let ids = Tensor::<Flex, 1, Int>::ones([2], &device);
/// let (x, ids) = (x, ids).cast_floats(FloatDType::F16);
/// assert_eq!((x.dtype(), ids.dtype()), (DType::F16, Tensor::<Flex, 1, Int>::ones([1], &device).dtype()));
/// ```
pub trait Castable<B: Backend>: Sized {
    /// Casts every float tensor in `self` to `dtype`.
    fn cast_floats(self, dtype: FloatDType) -> Self;
}

impl<B: Backend, const D: usize> Castable<B> for Tensor<B, D> {
    fn cast_floats(self, dtype: FloatDType) -> Self {
        cast_tensor(self, dtype)
    }
}

impl<B: Backend, const D: usize> Castable<B> for Tensor<B, D, Int> {
    fn cast_floats(self, _: FloatDType) -> Self {
        self
    }
}

impl<B: Backend, const D: usize> Castable<B> for Tensor<B, D, Bool> {
    fn cast_floats(self, _: FloatDType) -> Self {
        self
    }
}

impl<B: Backend, T: Castable<B>> Castable<B> for Vec<T> {
    fn cast_floats(self, dtype: FloatDType) -> Self {
        self.into_iter().map(|t| t.cast_floats(dtype)).collect()
    }
}

impl<B: Backend, T: Castable<B>> Castable<B> for Option<T> {
    fn cast_floats(self, dtype: FloatDType) -> Self {
        self.map(|t| t.cast_floats(dtype))
    }
}

impl<B: Backend, T: Castable<B>, const N: usize> Castable<B> for [T; N] {
    fn cast_floats(self, dtype: FloatDType) -> Self {
        self.map(|t| t.cast_floats(dtype))
    }
}

impl<B, K, V, S> Castable<B> for HashMap<K, V, S>
where
    B: Backend,
    K: Eq + Hash,
    V: Castable<B>,
    S: BuildHasher + Default,
{
    fn cast_floats(self, dtype: FloatDType) -> Self {
        self.into_iter()
            .map(|(k, v)| (k, v.cast_floats(dtype)))
            .collect()
    }
}

impl<B: Backend, K: Ord, V: Castable<B>> Castable<B> for BTreeMap<K, V> {
    fn cast_floats(self, dtype: FloatDType) -> Self {
        self.into_iter()
            .map(|(k, v)| (k, v.cast_floats(dtype)))
            .collect()
    }
}

macro_rules! tuple_castable {
    ($($t:ident),+) => {
        impl<B: Backend, $($t: Castable<B>),+> Castable<B> for ($($t,)+) {
            #[allow(non_snake_case)]
            fn cast_floats(self, dtype: FloatDType) -> Self {
                let ($($t,)+) = self;
                ($($t.cast_floats(dtype),)+)
            }
        }
    };
}

// Tuples up to 12 elements, like the standard library's trait impls.
tuple_castable!(A);
tuple_castable!(A, C);
tuple_castable!(A, C, D);
tuple_castable!(A, C, D, E);
tuple_castable!(A, C, D, E, F);
tuple_castable!(A, C, D, E, F, G);
tuple_castable!(A, C, D, E, F, G, H);
tuple_castable!(A, C, D, E, F, G, H, I);
tuple_castable!(A, C, D, E, F, G, H, I, J);
tuple_castable!(A, C, D, E, F, G, H, I, J, K);
tuple_castable!(A, C, D, E, F, G, H, I, J, K, L);
tuple_castable!(A, C, D, E, F, G, H, I, J, K, L, M);

/// A module whose float parameters the handler's casts convert (ints and bools untouched;
/// trainable parameters stay trainable leaves).
///
/// ```
/// use burn::backend::Flex;
/// use burn::nn::LinearConfig;
/// use burn::tensor::{DType, FloatDType};
/// use burn_mpric::{Castable, ModuleParams};
///
/// let linear = LinearConfig::new(2, 2).init::<Flex>(&Default::default());
/// let ModuleParams(linear) = ModuleParams(linear).cast_floats(FloatDType::BF16);
/// assert_eq!(linear.weight.val().dtype(), DType::BF16);
/// ```
#[derive(Debug, Clone)]
pub struct ModuleParams<M>(pub M);

struct CastParams(FloatDType);

impl<B: Backend> ModuleMapper<B> for CastParams {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let dtype = self.0;
        param.map(|tensor| {
            let trainable = tensor.is_require_grad();
            let tensor = cast_tensor(tensor, dtype).detach();
            if trainable {
                tensor.require_grad()
            } else {
                tensor
            }
        })
    }
}

impl<B: Backend, M: Module<B>> Castable<B> for ModuleParams<M> {
    fn cast_floats(self, dtype: FloatDType) -> Self {
        ModuleParams(self.0.map(&mut CastParams(dtype)))
    }
}
