//! The decorator's op implementations, split by Burn's op traits.

pub(crate) mod activation;
pub(crate) mod args;
pub(crate) mod bool_tensor;
#[cfg(test)]
mod conformance;
pub(crate) mod forward;
pub(crate) mod int_tensor;
pub(crate) mod module;
pub(crate) mod qtensor;
pub(crate) mod softmax;
pub(crate) mod tensor;
mod transaction;
