//! The step's one host read: the flags, sums and values the host decides a step on, read in
//! one transaction.

use burn::tensor::backend::Backend;
use burn::tensor::{Bool, Element, Tensor, TensorData, Transaction};

use crate::error::StepError;

/// What one step's host read returned.
pub(crate) struct StepValues {
    /// The flag was true (or absent) and every sum finite.
    pub(crate) finite: bool,
    /// Every sum read (of magnitudes, or of squares) was exactly zero, and there was one.
    pub(crate) zero: bool,
    /// The loss, when one was read.
    pub(crate) loss: Option<f32>,
    /// The sums of squares, when they were read, one entry per group in order.
    pub(crate) squares: Option<Vec<f32>>,
}

/// Reads the flag, the loss, the finiteness sums and the sums of squares in one transaction
/// (one device sync), on one device. The step is finite when the flag is true and every sum is
/// finite.
pub(crate) fn read_step_values<B: Backend>(
    flag: Option<Tensor<B, 1, Bool>>,
    loss: Option<Tensor<B, 1>>,
    sums: &[Tensor<B, 1>],
    squares: Option<&[Tensor<B, 1>]>,
) -> Result<StepValues, StepError> {
    let floats: Vec<&Tensor<B, 1>> = loss
        .iter()
        .chain(sums)
        .chain(squares.into_iter().flatten())
        .collect();
    let device = match (&flag, floats.first()) {
        (Some(flag), _) => flag.device(),
        (None, Some(first)) => first.device(),
        (None, None) => {
            return Ok(StepValues {
                finite: true,
                zero: false,
                loss: None,
                squares: None,
            });
        }
    };
    let has_flag = flag.is_some();
    let mut transaction = Transaction::<B>::default();
    if let Some(flag) = flag {
        transaction = transaction.register(flag.to_device(&device));
    }
    for value in floats {
        transaction = transaction.register(value.clone().to_device(&device));
    }
    let mut data = transaction.try_execute()?.into_iter();
    let mut next = || {
        data.next().ok_or_else(|| {
            StepError::UnexpectedRead("the transaction returned too few values".into())
        })
    };
    let mut finite = if has_flag { read_bool(next()?)? } else { true };
    let loss = match loss {
        Some(_) => Some(read_one::<f32>(next()?, "value")?),
        None => None,
    };
    let mut zero = !sums.is_empty();
    for _ in sums {
        let sum = read_one::<f32>(next()?, "value")?;
        finite &= sum.is_finite();
        zero &= sum == 0.0;
    }
    let squares = match squares {
        Some(squares) => {
            let mut values = Vec::with_capacity(squares.len());
            for _ in squares {
                values.extend(next()?.iter::<f32>());
            }
            zero = sums.is_empty() && !values.is_empty() && values.iter().all(|v| *v == 0.0);
            Some(values)
        }
        None => None,
    };
    Ok(StepValues {
        finite,
        zero,
        loss,
        squares,
    })
}

/// Reads a one-element tensor's data; `what` names the value in the error.
pub(crate) fn read_one<E: Element>(data: TensorData, what: &str) -> Result<E, StepError> {
    let values: Vec<E> = data.iter::<E>().collect();
    match values.as_slice() {
        [value] => Ok(*value),
        other => Err(StepError::UnexpectedRead(format!(
            "expected one {what}, got {} values",
            other.len()
        ))),
    }
}

/// Reads a one-element bool tensor's data: a finiteness flag.
pub(crate) fn read_bool(data: TensorData) -> Result<bool, StepError> {
    read_one(data, "finiteness flag")
}

/// Reads a tensor's values at f32 (one device sync).
pub(crate) fn read_all_f32<B: Backend>(tensor: Tensor<B, 1>) -> Result<Vec<f32>, StepError> {
    let data = Transaction::<B>::default()
        .register(tensor)
        .try_execute()?
        .pop()
        .ok_or_else(|| StepError::UnexpectedRead("the transaction returned no value".into()))?;
    data.to_vec::<f32>()
        .map_err(|e| StepError::UnexpectedRead(format!("expected f32 values: {e:?}")))
}
