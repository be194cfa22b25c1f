//! [`ScaleRecord`] and [`StepSlot`]: what loss scaling did in one training step, as a
//! training framework's per-step metrics item carries it, and [`AwaitingSteps`]: the slots
//! of steps taken on the device path and not read yet (both editions' burn-train
//! integrations use them).

use std::collections::VecDeque;
use std::sync::{Arc, OnceLock};

use super::outcome::StepOutcome;

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
/// use burn_mpric_core::scale::ScaleRecord;
///
/// let record = ScaleRecord::undecided(1024.0, 2);
/// assert_eq!(record.scale_used, 1024.0);
/// assert_eq!(record.skipped_total(), 2);
/// assert!(!record.is_skipped());
/// ```
#[derive(Debug, Clone, PartialEq)]
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
    /// use burn_mpric_core::scale::ScaleRecord;
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
    /// use burn_mpric_core::scale::{ScaleRecord, ScalerState};
    ///
    /// let mut record = ScaleRecord::undecided(1.0, 0);
    /// record.outcome = Some(ScalerState::noop().update(false));
    /// assert!(record.is_skipped());
    /// ```
    pub fn is_skipped(&self) -> bool {
        self.outcome.as_ref().is_some_and(StepOutcome::is_skipped)
    }

    /// Skipped steps so far, this step included.
    ///
    /// ```
    /// use burn_mpric_core::scale::{ScaleRecord, ScalerState};
    ///
    /// let mut scaler = ScalerState::noop();
    /// scaler.update(false);
    /// let mut record = ScaleRecord::undecided(1.0, 1);
    /// record.outcome = Some(scaler.update(false));
    /// assert_eq!(record.skipped_total(), 2);
    /// ```
    pub fn skipped_total(&self) -> u64 {
        self.outcome
            .as_ref()
            .map_or(self.skipped_before, |outcome| outcome.stats.skipped)
    }
}

/// The slot a training step leaves for its optimizer decision. The first of "the optimizer
/// decided" ([`decide`](Self::decide)) and "the metrics read the item" ([`read`](Self::read))
/// fixes its content, so what a metric logs never changes afterwards. Clones share the slot.
///
/// ```
/// use burn_mpric_core::scale::{ScalerState, StepSlot};
///
/// let slot = StepSlot::new(4.0, 0);
/// slot.clone().decide(ScalerState::noop().update(false));
/// assert!(slot.read().is_skipped());
///
/// let read_first = StepSlot::new(4.0, 0);
/// assert!(read_first.read().outcome.is_none());
/// read_first.decide(ScalerState::noop().update(false)); // too late: the item keeps what it showed
/// assert!(read_first.read().outcome.is_none());
/// ```
#[derive(Debug, Clone)]
pub struct StepSlot {
    scale_used: f32,
    skipped_before: u64,
    decision: Arc<OnceLock<Option<StepOutcome>>>,
}

impl StepSlot {
    /// An undecided slot for a step whose loss was scaled by `scale_used`, after
    /// `skipped_before` skipped steps.
    pub fn new(scale_used: f32, skipped_before: u64) -> Self {
        Self {
            scale_used,
            skipped_before,
            decision: Arc::new(OnceLock::new()),
        }
    }

    /// A slot that holds `record` already, decided or not: reads give it back unchanged.
    ///
    /// ```
    /// use burn_mpric_core::scale::{ScaleRecord, StepSlot};
    ///
    /// let record = ScaleRecord::undecided(2.0, 3);
    /// assert_eq!(StepSlot::fixed(record.clone()).read(), record);
    /// ```
    pub fn fixed(record: ScaleRecord) -> Self {
        let slot = Self::new(record.scale_used, record.skipped_before);
        let _ = slot.decision.set(record.outcome);
        slot
    }

    /// Stores the optimizer step's outcome, unless the slot was read already.
    pub fn decide(&self, outcome: StepOutcome) {
        // Already read by the metrics (gradient accumulation): the item keeps what it showed.
        let _ = self.decision.set(Some(outcome));
    }

    /// The record as it stands; the first read of an undecided slot fixes it undecided.
    pub fn read(&self) -> ScaleRecord {
        let outcome = self.decision.get_or_init(|| None).clone();
        // A step decided on the device learns its scale with its outcome.
        let scale_used = outcome.as_ref().map_or(self.scale_used, |o| o.scale_used);
        ScaleRecord {
            outcome,
            ..ScaleRecord::undecided(scale_used, self.skipped_before)
        }
    }
}

/// The training steps of the optimizer steps taken on the device path and not read yet: one
/// list of [`StepSlot`]s per optimizer step (several with gradient accumulation or several
/// devices), oldest first, and a stop a read found. A read's outcomes go to their optimizer
/// steps' slots in order.
///
/// ```
/// use burn_mpric_core::scale::{AwaitingSteps, ScalerState, StepSlot};
///
/// let mut awaiting = AwaitingSteps::default();
/// let (first, second) = (StepSlot::new(4.0, 0), StepSlot::new(4.0, 0));
/// awaiting.push(vec![first.clone()]);
/// awaiting.push(vec![second.clone()]);
/// // One step read, the newest still pending on the device.
/// awaiting.decide(&[ScalerState::noop().update(false)], 1);
/// assert!(first.read().is_skipped());
/// assert!(second.read().outcome.is_none());
/// assert_eq!(awaiting.len(), 1);
/// ```
#[derive(Debug, Default)]
pub struct AwaitingSteps {
    steps: VecDeque<Vec<StepSlot>>,
    stop: Option<String>,
}

impl AwaitingSteps {
    /// The slots of the optimizer step just taken.
    pub fn push(&mut self, slots: Vec<StepSlot>) {
        self.steps.push_back(slots);
    }

    /// Hands each outcome read (oldest first) to its optimizer step's slots; whatever the
    /// read did, the steps kept are the newest `pending` (those the device still holds).
    pub fn decide(&mut self, outcomes: &[StepOutcome], pending: usize) {
        for outcome in outcomes {
            for slot in self.steps.pop_front().unwrap_or_default() {
                slot.decide(outcome.clone());
            }
        }
        let read = self.steps.len().saturating_sub(pending);
        self.steps.drain(..read);
    }

    /// A read found a stall: the next step stops the run with `why`.
    pub fn stop(&mut self, why: String) {
        self.stop = Some(why);
    }

    /// The stop a read found, once.
    pub fn take_stop(&mut self) -> Option<String> {
        self.stop.take()
    }

    /// Forgets every step and the stop (a restored checkpoint starts over).
    pub fn clear(&mut self) {
        self.steps.clear();
        self.stop = None;
    }

    /// Optimizer steps not read yet.
    pub fn len(&self) -> usize {
        self.steps.len()
    }

    /// Whether every optimizer step was read.
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }
}
