//! `TransactionOps` for [`MixedPrecision`]: Burn's default reads each tensor through the
//! decorator's `*_into_data`, which hands it to the inner backend unchanged.

use burn_backend::Backend;
use burn_backend::ops::TransactionOps;

use crate::backend::MixedPrecision;

impl<B: Backend> TransactionOps<Self> for MixedPrecision<B> {}
