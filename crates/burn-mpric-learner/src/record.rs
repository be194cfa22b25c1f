//! The loss-scaling record each training step's output item carries to burn-train's metrics.

use burn::tensor::backend::Backend;
use burn::train::ItemLazy;
use burn::train::metric::{
    AccuracyInput, Adaptor, AurocInput, CerInput, ConfusionStatsInput, HammingScoreInput,
    LossInput, PerplexityInput, TopKAccuracyInput, WerInput,
};
pub use burn_mpric_scale::ScaleRecord;
pub(crate) use burn_mpric_scale::StepSlot;

/// The output item of a [`Scaled`](crate::Scaled) training step: the wrapped model's item and
/// the step's loss-scaling slot. burn-train syncs it into a [`ScaledItem`].
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
}

impl<O: ItemLazy> ItemLazy for ScaledOutput<O> {
    type ItemSync = ScaledItem<O::ItemSync>;

    fn sync(self) -> Self::ItemSync {
        ScaledItem {
            record: self.slot.read(),
            item: self.item.sync(),
        }
    }
}

/// What burn-train's metrics receive from a [`Scaled`](crate::Scaled) training step: the
/// wrapped model's (synced) item and the step's [`ScaleRecord`].
///
/// It adapts to the loss-scale metrics and to every input of burn-train's own metrics that
/// the wrapped item adapts to (loss, accuracy, AUROC, top-k, perplexity, confusion
/// statistics, Hamming score, CER, WER). For a metric input of your own, forward it with
/// [`forward_adaptors!`](crate::forward_adaptors).
///
/// ```
/// use burn::train::metric::Adaptor;
/// use burn_mpric::learner::{ScaleRecord, ScaledItem};
///
/// let item = ScaledItem { item: (), record: ScaleRecord::undecided(4.0, 0) };
/// let record: ScaleRecord = item.adapt();
/// assert_eq!(record.scale_used, 4.0);
/// ```
#[derive(Debug, Clone)]
pub struct ScaledItem<O> {
    /// The wrapped model's item.
    pub item: O,
    /// What loss scaling did in this step.
    pub record: ScaleRecord,
}

impl<O> Adaptor<ScaleRecord> for ScaledItem<O> {
    fn adapt(&self) -> ScaleRecord {
        self.record.clone()
    }
}

/// Lets metrics whose input is one of `$input` read a [`ScaledItem`] through its wrapped
/// item. Use it for metric inputs of your own; burn-train's are forwarded already.
///
/// ```
/// use burn::train::metric::Adaptor;
/// use burn_mpric::learner::{ScaleRecord, ScaledItem, forward_adaptors};
///
/// pub struct Margin(f64);
/// pub struct MyOutput(f64);
/// impl Adaptor<Margin> for MyOutput {
///     fn adapt(&self) -> Margin { Margin(self.0) }
/// }
/// forward_adaptors!(Margin);
///
/// let item = ScaledItem { item: MyOutput(0.5), record: ScaleRecord::undecided(1.0, 0) };
/// let margin: Margin = item.adapt();
/// assert_eq!(margin.0, 0.5);
/// ```
#[macro_export]
macro_rules! forward_adaptors {
    ($($input:ty),+ $(,)?) => {
        $(
            impl<O: $crate::__private::Adaptor<$input>> $crate::__private::Adaptor<$input>
                for $crate::ScaledItem<O>
            {
                fn adapt(&self) -> $input {
                    self.item.adapt()
                }
            }
        )+
    };
}

macro_rules! forward_backend_adaptors {
    ($($input:ident),+ $(,)?) => {
        $(
            impl<B: Backend, O: Adaptor<$input<B>>> Adaptor<$input<B>> for ScaledItem<O> {
                fn adapt(&self) -> $input<B> {
                    self.item.adapt()
                }
            }
        )+
    };
}

forward_backend_adaptors!(
    LossInput,
    AccuracyInput,
    AurocInput,
    TopKAccuracyInput,
    PerplexityInput,
    ConfusionStatsInput,
    HammingScoreInput,
    CerInput,
    WerInput,
);
