//! The decorator's op implementations, split by Burn's op traits.

mod activation;
pub(crate) mod args;
mod bool_tensor;
pub(crate) mod forward;
mod int_tensor;
mod module;
mod qtensor;
mod tensor;
mod transaction;
