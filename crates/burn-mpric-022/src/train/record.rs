//! The loss-scaling record each training step's output item carries to burn-train's metrics.

use std::sync::{Arc, OnceLock};

use burn::tensor::ExecutionError;
use burn::train::ItemLazy;
use burn::train::metric::{
    AccuracyInput, Adaptor, BleuInput, CerInput, ConfusionStatsInput, HammingScoreInput, LossInput,
    PerplexityInput, RougeLInput, TopKAccuracyInput, WerInput,
};
use burn_mpric_core::scale::StepOutcome;

/// What loss scaling did in one training step, as that step's metrics item carries it.
///
/// The scale used is fixed when the step scales its loss; the decision is stored by the
/// optimizer step that consumed the step's gradients, which burn-train runs before it hands
/// the item to its metrics. Under gradient accumulation, the items of the steps before the
/// optimizer step reach the metrics before any decision exists: their `outcome` is `None`.
///
/// # Example
///
/// ```
/// use burn_mpric_022::ScaleRecord;
///
/// let record = ScaleRecord::undecided(1024.0, 2);
/// assert_eq!(record.scale_used, 1024.0);
/// assert_eq!(record.skipped_total(), 2);
/// assert!(!record.is_skipped());
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScaleRecord {
    /// The scale the step's loss was multiplied by.
    pub scale_used: f32,
    /// The optimizer step's outcome; `None` when none had run for this step when its item
    /// was read.
    pub outcome: Option<StepOutcome>,
    skipped_before: u64,
}

impl ScaleRecord {
    /// A record with no decision (yet): the step's scale and the skipped steps before it.
    ///
    /// # Example
    ///
    /// ```
    /// assert!(burn_mpric_022::ScaleRecord::undecided(8.0, 0).outcome.is_none());
    /// ```
    pub fn undecided(scale_used: f32, skipped_before: u64) -> Self {
        Self {
            scale_used,
            outcome: None,
            skipped_before,
        }
    }

    /// Whether this step's update was skipped (a non-finite gradient).
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_022::ScaleRecord;
    /// use burn_mpric_core::scale::ScalerState;
    ///
    /// let mut record = ScaleRecord::undecided(1.0, 0);
    /// record.outcome = Some(ScalerState::noop().finish(false, None, None));
    /// assert!(record.is_skipped());
    /// ```
    pub fn is_skipped(&self) -> bool {
        self.outcome.is_some_and(|o| o.is_skipped())
    }

    /// Skipped steps so far, this step included.
    ///
    /// # Example
    ///
    /// ```
    /// use burn_mpric_022::ScaleRecord;
    /// use burn_mpric_core::scale::ScalerState;
    ///
    /// let mut scaler = ScalerState::noop();
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
/// decided" and "the item was read" fixes its content, so what a metric logs never changes.
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
        // Already read (gradient accumulation): the item keeps what it showed.
        let _ = self.decision.set(Some(outcome));
    }

    fn read(&self) -> ScaleRecord {
        ScaleRecord {
            outcome: *self.decision.get_or_init(|| None),
            ..ScaleRecord::undecided(self.scale_used, self.skipped_before)
        }
    }
}

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
        let slot = StepSlot::new(record.scale_used, record.skipped_before);
        let _ = slot.decision.set(record.outcome);
        Self { item, slot }
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
