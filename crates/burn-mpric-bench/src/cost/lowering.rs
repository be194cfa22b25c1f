//! What one backend method becomes on Burn 0.21's cube backends (Wgpu, CUDA) without fusion:
//! no kernel (a view of the same buffer), a host transfer, one kernel, or Burn's default
//! composition of several kernels where burn-cubecl does not implement the method itself.
//!
//! The table is data: [`METHODS`] names the methods that are not one plain kernel; every
//! other method is one kernel reading its inputs and writing its outputs. Checked against
//! burn-cubecl 0.21.0's `ops/` (which methods it implements) and burn-backend 0.21.0's
//! defaults (what the others do).

/// How a method runs on the cube backends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lowering {
    /// No kernel: new metadata over the same buffer (`reshape` of a contiguous tensor,
    /// `swap_dims`, `permute`, `expand`, an aligned `slice`, `detach`, ...).
    View,
    /// A read to the host (device to host): the device drains, the bytes cross the bus.
    HostRead,
    /// Host data uploaded to the device (host to device).
    Upload,
    /// One kernel: reads every input, writes every output.
    Kernel,
    /// `float_matmul`: one matmul kernel, `2 m k n` FLOPs per batch entry.
    Matmul,
    /// Burn's default `linear` (burn-cubecl has none): `x @ w` broadcast over the batch
    /// dimensions, then the bias added by a second kernel.
    Linear,
    /// Burn's default `linear_x_backward`: `grad @ w^T`.
    LinearX,
    /// Burn's default `linear_weight_backward`: `x^T @ grad` batched over the leading
    /// dimensions (a `[.., d_in, d_out]` product per batch entry), then one `sum_dim` kernel
    /// per leading dimension.
    LinearWeight,
    /// Burn's default `linear_bias_backward`: one `sum_dim` kernel per leading dimension.
    LinearBias,
    /// A chain of element-wise kernels over the first input's shape and dtype (Burn's
    /// default of a method the cube backends do not implement): how many kernels, how many
    /// tensors of that size they read and write in all.
    Chain {
        /// Kernels launched.
        kernels: u32,
        /// Tensors of the input's size read, over all kernels.
        reads: u32,
        /// Tensors of the input's size written, over all kernels.
        writes: u32,
    },
}

/// The methods that are not one plain [`Lowering::Kernel`].
pub const METHODS: &[(&str, Lowering)] = &[
    ("float_matmul", Lowering::Matmul),
    ("linear", Lowering::Linear),
    ("linear_x_backward", Lowering::LinearX),
    ("linear_weight_backward", Lowering::LinearWeight),
    ("linear_bias_backward", Lowering::LinearBias),
    // `x * (1 + erf(x / sqrt 2)) / 2`: div_scalar, erf, add_scalar, mul, div_scalar.
    (
        "gelu",
        Lowering::Chain {
            kernels: 5,
            reads: 6,
            writes: 5,
        },
    ),
    // The tanh approximation's derivative: powi, 4 mul_scalar, 2 add, tanh, powi, neg,
    // add_scalar, mul_scalar, mul, add_scalar, add, mul by the gradient.
    (
        "gelu_backward",
        Lowering::Chain {
            kernels: 16,
            reads: 21,
            writes: 16,
        },
    ),
    // A mask (`lower_equal_elem`) and `mask_fill`.
    (
        "relu",
        Lowering::Chain {
            kernels: 2,
            reads: 3,
            writes: 2,
        },
    ),
    (
        "relu_backward",
        Lowering::Chain {
            kernels: 2,
            reads: 3,
            writes: 2,
        },
    ),
    ("float_from_data", Lowering::Upload),
    ("int_from_data", Lowering::Upload),
    ("bool_from_data", Lowering::Upload),
    ("float_into_data", Lowering::HostRead),
    ("int_into_data", Lowering::HostRead),
    ("bool_into_data", Lowering::HostRead),
    ("q_into_data", Lowering::HostRead),
    ("tr_execute", Lowering::HostRead),
];

/// Name endings of the methods that launch nothing: metadata over the same buffer, or a
/// question about it.
const VIEW_SUFFIXES: &[&str] = &[
    "_reshape",
    "_swap_dims",
    "_permute",
    "_expand",
    "_slice",
    "_detach",
    "_require_grad",
    "_set_require_grad",
    "_is_require_grad",
    "_device",
    "_to_device",
    "_empty",
];

/// How `method` runs on the cube backends.
pub fn lowering(method: &str) -> Lowering {
    if let Some((_, l)) = METHODS.iter().find(|(m, _)| *m == method) {
        return *l;
    }
    if VIEW_SUFFIXES.iter().any(|s| method.ends_with(s)) {
        return Lowering::View;
    }
    Lowering::Kernel
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_transfers_and_kernels_are_told_apart() {
        assert_eq!(lowering("float_swap_dims"), Lowering::View);
        assert_eq!(lowering("float_reshape"), Lowering::View);
        assert_eq!(lowering("float_slice"), Lowering::View);
        // A slice assignment writes: a kernel, not a view.
        assert_eq!(lowering("float_slice_assign"), Lowering::Kernel);
        assert_eq!(lowering("float_exp"), Lowering::Kernel);
        assert_eq!(lowering("float_cast"), Lowering::Kernel);
        assert_eq!(lowering("float_from_data"), Lowering::Upload);
        assert_eq!(lowering("float_into_data"), Lowering::HostRead);
        assert_eq!(lowering("float_matmul"), Lowering::Matmul);
        // Each method is listed once.
        for (i, (m, _)) in METHODS.iter().enumerate() {
            assert!(METHODS[i + 1..].iter().all(|(n, _)| n != m), "{m} twice");
        }
    }
}
