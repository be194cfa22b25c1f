//! The loss-scaling record each training step's output item carries to burn-train's metrics.

use std::sync::{Arc, OnceLock};

use burn::tensor::backend::Backend;
use burn::train::ItemLazy;
use burn::train::metric::{
    AccuracyInput, Adaptor, AurocInput, CerInput, ConfusionStatsInput, HammingScoreInput,
    LossInput, PerplexityInput, TopKAccuracyInput, WerInput,
};
use burn_mpric::scale::StepOutcome;

/// What loss scaling did in one training step, as that step's metrics item carries it.
///
/// The scale used is fixed when the step scales its loss; the optimizer's decision is stored
/// into the item by the optimizer step that consumed the step's gradients. burn-train runs
/// that optimizer step before it hands the item to its metrics, so every metric reads the
/// decision of its own step, however far behind the metric processor runs. Under gradient
/// accumulation, the items of the steps before the optimizer step reach the metrics before
/// any decision exists: their `outcome` is `None`.
///
/// ```
/// use burn_mpric_learner::ScaleRecord;
///
/// let record = ScaleRecord::undecided(1024.0, 2);
/// assert_eq!(record.scale_used, 1024.0);
/// assert_eq!(record.skipped_total(), 2);
/// assert!(!record.is_skipped());
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScaleRecord {
    /// The scale the step's loss was multiplied by (PyTorch's `scaler.get_scale()` read
    /// before `scaler.update()`).
    pub scale_used: f32,
    /// The optimizer step's outcome (applied or skipped, the next scale, the counters);
    /// `None` when no optimizer step had run for this step when its item was read.
    pub outcome: Option<StepOutcome>,
    skipped_before: u64,
}

impl ScaleRecord {
    /// A record of a step with no optimizer decision (yet): its scale and the number of
    /// skipped steps before it.
    ///
    /// ```
    /// use burn_mpric_learner::ScaleRecord;
    ///
    /// assert!(ScaleRecord::undecided(8.0, 0).outcome.is_none());
    /// ```
    pub fn undecided(scale_used: f32, skipped_before: u64) -> Self {
        Self {
            scale_used,
            outcome: None,
            skipped_before,
        }
    }

    /// Whether this step's optimizer update was skipped (a non-finite gradient).
    ///
    /// ```
    /// use burn_mpric::scale::LossScaler;
    /// use burn_mpric_learner::ScaleRecord;
    ///
    /// let mut record = ScaleRecord::undecided(1.0, 0);
    /// record.outcome = Some(LossScaler::noop().update(false));
    /// assert!(record.is_skipped());
    /// ```
    pub fn is_skipped(&self) -> bool {
        self.outcome.is_some_and(|o| o.is_skipped())
    }

    /// Skipped steps so far, this step included.
    ///
    /// ```
    /// use burn_mpric::scale::LossScaler;
    /// use burn_mpric_learner::ScaleRecord;
    ///
    /// let mut scaler = LossScaler::noop();
    /// scaler.update(false);
    /// let mut record = ScaleRecord::undecided(1.0, 1);
    /// record.outcome = Some(scaler.update(false));
    /// assert_eq!(record.skipped_total(), 2);
    /// ```
    pub fn skipped_total(&self) -> u64 {
        self.outcome
            .map_or(self.skipped_before, |outcome| outcome.stats.skipped)
    }
}

/// The slot a training step leaves for its optimizer decision. The first of "the optimizer
/// decided" and "the metrics read the item" fixes its content, so what a metric logs never
/// changes afterwards.
#[derive(Debug, Clone)]
pub(crate) struct StepSlot {
    scale_used: f32,
    skipped_before: u64,
    decision: Arc<OnceLock<Option<StepOutcome>>>,
}

impl StepSlot {
    pub(crate) fn new(scale_used: f32, skipped_before: u64) -> Self {
        Self {
            scale_used,
            skipped_before,
            decision: Arc::new(OnceLock::new()),
        }
    }

    pub(crate) fn decide(&self, outcome: StepOutcome) {
        // Already read by the metrics (gradient accumulation): the item keeps what it showed.
        let _ = self.decision.set(Some(outcome));
    }

    fn read(&self) -> ScaleRecord {
        ScaleRecord {
            outcome: *self.decision.get_or_init(|| None),
            ..ScaleRecord::undecided(self.scale_used, self.skipped_before)
        }
    }
}

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
/// use burn_mpric_learner::{ScaleRecord, ScaledItem};
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
        self.record
    }
}

/// Lets metrics whose input is one of `$input` read a [`ScaledItem`] through its wrapped
/// item. Use it for metric inputs of your own; burn-train's are forwarded already.
///
/// ```
/// use burn::train::metric::Adaptor;
/// use burn_mpric_learner::{ScaleRecord, ScaledItem, forward_adaptors};
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
