//! `TransactionOps` for [`MixedPrecision`]: one transaction of the inner backend, so the
//! inner backend batches the reads as it does for itself.

use burn_backend::ops::{TransactionOps, TransactionPrimitive, TransactionPrimitiveData};
use burn_backend::{Backend, ExecutionError};

use crate::backend::MixedPrecision;
use crate::ops::tensor::for_host;

impl<B: Backend> TransactionOps<Self> for MixedPrecision<B> {
    fn tr_execute(
        transaction: TransactionPrimitive<Self>,
    ) -> impl Future<Output = Result<TransactionPrimitiveData, ExecutionError>> + Send {
        let inner = TransactionPrimitive::<B>::new(
            transaction.read_floats.into_iter().map(for_host).collect(),
            transaction
                .read_qfloats
                .into_iter()
                .map(|t| t.inner)
                .collect(),
            transaction.read_ints.into_iter().map(|t| t.inner).collect(),
            transaction
                .read_bools
                .into_iter()
                .map(|t| t.inner)
                .collect(),
        );
        B::tr_execute(inner)
    }
}
