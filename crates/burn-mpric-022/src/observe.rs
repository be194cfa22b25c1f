//! The forward values a precision audit records on this thread: those the loss closure hands
//! to [`observe`] and the outputs of `FullPrecision` modules. Its own module, so that the
//! casts and `FullPrecision` can record without depending on the audit that reads them.

use std::cell::RefCell;

use burn::tensor::{DType, Tensor};
use burn_mpric_core::audit::Magnitudes;

thread_local! {
    /// The forward values observed in the current audit step, when an audit runs.
    static OBSERVED: RefCell<Option<Vec<(String, Magnitudes)>>> = const { RefCell::new(None) };
}

/// Hands a forward value to the precision audit running on this thread, under `name`
/// (`"logits"`, `"encoder output"`): its magnitudes join the report, and a value over f16's
/// range at the measured precision becomes a
/// [`Verdict::ForwardOverflow`](burn_mpric_core::audit::Verdict::ForwardOverflow). Outside an
/// audit it does nothing and reads nothing from the device.
///
/// # Example
///
/// ```
/// use burn::tensor::{Device, Tensor};
/// use burn_mpric_022::audit::observe;
///
/// let logits = Tensor::<2>::ones([2, 3], &Device::flex());
/// observe("logits", &logits); // no audit running: nothing happens
/// ```
pub fn observe<const D: usize>(name: &str, value: &Tensor<D>) {
    if !observing_now() {
        return;
    }
    let values = host_values(value.clone());
    OBSERVED.with(|o| {
        if let Some(seen) = o.borrow_mut().as_mut() {
            match seen.iter_mut().find(|(n, _)| n == name) {
                Some((_, m)) => m.add(&values),
                None => {
                    let mut m = Magnitudes::default();
                    m.add(&values);
                    seen.push((name.to_string(), m));
                }
            }
        }
    });
}

/// Whether an audit records on this thread.
pub(crate) fn observing_now() -> bool {
    OBSERVED.with(|o| o.borrow().is_some())
}

/// Runs `f` with [`observe`] recording, and returns what it recorded.
pub(crate) fn observing<R>(f: impl FnOnce() -> R) -> (R, Vec<(String, Magnitudes)>) {
    OBSERVED.with(|o| *o.borrow_mut() = Some(Vec::new()));
    let out = f();
    let seen = OBSERVED.with(|o| o.borrow_mut().take()).unwrap_or_default();
    (out, seen)
}

/// A tensor's values at f32 on the host (an unreadable tensor reads as nothing).
fn host_values<const D: usize>(value: Tensor<D>) -> Vec<f32> {
    let value = value.without_autodiff();
    let value = match value.dtype() {
        DType::F32 => value,
        _ => value.cast(burn::tensor::FloatDType::F32),
    };
    value
        .try_into_data()
        .ok()
        .and_then(|d| d.try_to_vec::<f32>().ok())
        .unwrap_or_default()
}
