//! [`Overflow`]: which parameters' gradients held inf or NaN in a skipped step.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The parameters whose gradients were not finite in a skipped step, named by their module
/// path (`encoder.layers.1.ff.weight`), in module order. It is found only after a step is
/// judged non-finite, by a second read that applied steps never make.
///
/// An empty list means no single gradient held inf or NaN: the step was skipped because
/// their global norm overflowed f32 (with clipping on).
///
/// ```
/// use burn_mpric_core::scale::Overflow;
///
/// let overflow = Overflow::new(vec!["head.weight".into(), "head.bias".into()]);
/// assert_eq!(overflow.to_string(), "2 parameters: head.weight, head.bias");
/// let many = Overflow::new((0..9).map(|i| format!("layers.{i}.weight")).collect());
/// assert_eq!(many.summary(2), "9 parameters: layers.0.weight, layers.1.weight and 7 more");
/// assert_eq!(Overflow::default().to_string(), "no single gradient (their global norm overflowed f32)");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Overflow {
    /// The parameters, by module path, in module order.
    pub params: Vec<String>,
}

/// How many names [`Overflow`]'s `Display` shows before it counts the rest.
pub const OVERFLOW_NAMES_SHOWN: usize = 5;

impl Overflow {
    /// The parameters `params` (module paths).
    ///
    /// ```
    /// use burn_mpric_core::scale::Overflow;
    ///
    /// assert_eq!(Overflow::new(vec!["w".into()]).params.len(), 1);
    /// ```
    pub fn new(params: Vec<String>) -> Self {
        Self { params }
    }

    /// At most `max` names, then how many more.
    ///
    /// ```
    /// use burn_mpric_core::scale::Overflow;
    ///
    /// assert_eq!(Overflow::new(vec!["w".into()]).summary(3), "1 parameter: w");
    /// ```
    pub fn summary(&self, max: usize) -> String {
        let n = self.params.len();
        if n == 0 {
            return "no single gradient (their global norm overflowed f32)".to_string();
        }
        let shown = self.params[..n.min(max)].join(", ");
        let noun = if n == 1 { "parameter" } else { "parameters" };
        if n > max {
            format!("{n} {noun}: {shown} and {} more", n - max)
        } else {
            format!("{n} {noun}: {shown}")
        }
    }
}

impl fmt::Display for Overflow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.summary(OVERFLOW_NAMES_SHOWN))
    }
}
