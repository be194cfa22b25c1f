//! The loss-scaling record each training step's output item carries to burn-train's metrics.

use burn::tensor::ExecutionError;
use burn::train::ItemLazy;
use burn::train::metric::{
    AccuracyInput, Adaptor, BleuInput, CerInput, ConfusionStatsInput, HammingScoreInput, LossInput,
    PerplexityInput, RougeLInput, TopKAccuracyInput, WerInput,
};
pub use burn_mpric_core::scale::ScaleRecord;
pub(crate) use burn_mpric_core::scale::StepSlot;

/// The output item of a [`Scaled`](super::Scaled) training step: the wrapped model's item and
/// the step's loss-scaling record.
///
/// It adapts to the loss-scale metrics and to every input of burn-train's own metrics that
/// the wrapped item adapts to (loss, accuracy, top-k, perplexity, confusion statistics,
/// Hamming score, CER, WER, BLEU, ROUGE-L). For a metric input of your own, forward it with
/// [`forward_adaptors!`](crate::forward_adaptors).
///
/// # Example
///
/// ```
/// use burn::train::metric::Adaptor;
/// use burn_mpric_022::{ScaleRecord, ScaledOutput};
///
/// let output = ScaledOutput::decided((), ScaleRecord::undecided(4.0, 0));
/// let record: ScaleRecord = output.adapt();
/// assert_eq!(record.scale_used, 4.0);
/// ```
#[derive(Debug)]
pub struct ScaledOutput<O> {
    /// The wrapped model's item.
    pub item: O,
    slot: StepSlot,
}

impl<O> ScaledOutput<O> {
    pub(crate) fn new(item: O, slot: StepSlot) -> Self {
        Self { item, slot }
    }

    /// An item whose record is already known (for tests and hand-written loops).
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_022::{ScaleRecord, ScaledOutput};
    ///
    /// let output = ScaledOutput::decided(7, ScaleRecord::undecided(2.0, 1));
    /// assert_eq!(output.record().skipped_total(), 1);
    /// ```
    pub fn decided(item: O, record: ScaleRecord) -> Self {
        Self {
            item,
            slot: StepSlot::fixed(record),
        }
    }

    /// This step's record (fixing it, if the optimizer has not decided yet).
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_022::{ScaleRecord, ScaledOutput};
    ///
    /// assert_eq!(ScaledOutput::decided((), ScaleRecord::undecided(3.0, 0)).record().scale_used, 3.0);
    /// ```
    pub fn record(&self) -> ScaleRecord {
        self.slot.read()
    }
}

impl<O: ItemLazy> ItemLazy for ScaledOutput<O> {
    fn sync(self) -> Result<Self, ExecutionError> {
        // Fix the record when burn-train hands the item to its metrics.
        let _ = self.slot.read();
        Ok(Self {
            item: self.item.sync()?,
            slot: self.slot,
        })
    }
}

impl<O> Adaptor<ScaleRecord> for ScaledOutput<O> {
    fn adapt(&self) -> ScaleRecord {
        self.record()
    }
}

/// Lets metrics whose input is one of the listed types read a [`ScaledOutput`] through its
/// wrapped item. burn-train's own metric inputs are forwarded already.
///
/// # Example
///
/// ```
/// use burn::train::metric::Adaptor;
/// use burn_mpric_022::{ScaleRecord, ScaledOutput, forward_adaptors};
///
/// pub struct Margin(f64);
/// pub struct MyOutput(f64);
/// impl Adaptor<Margin> for MyOutput {
///     fn adapt(&self) -> Margin { Margin(self.0) }
/// }
/// forward_adaptors!(Margin);
///
/// let output = ScaledOutput::decided(MyOutput(0.5), ScaleRecord::undecided(1.0, 0));
/// let margin: Margin = output.adapt();
/// assert_eq!(margin.0, 0.5);
/// ```
#[macro_export]
macro_rules! forward_adaptors {
    ($($input:ty),+ $(,)?) => {
        $(
            impl<O: $crate::__private::Adaptor<$input>> $crate::__private::Adaptor<$input>
                for $crate::ScaledOutput<O>
            {
                fn adapt(&self) -> $input {
                    self.item.adapt()
                }
            }
        )+
    };
}

forward_adaptors!(
    LossInput,
    AccuracyInput,
    TopKAccuracyInput,
    PerplexityInput,
    ConfusionStatsInput,
    HammingScoreInput,
    CerInput,
    WerInput,
    BleuInput,
    RougeLInput,
);
