//! The device path's steps awaiting a read: when to read them, in which order their values are
//! read, and what the host makes of what it read. Both editions' `DeviceLossScaler`s hold one;
//! only the handles (`Flag`, `Loss`: one-element device tensors) and the transaction that reads
//! them are Burn's.

use super::device::{DeviceStepRead, MAX_PENDING_STEPS};
use super::outcome::StepOutcome;
use super::overflow::Overflow;
use super::state::ScalerState;

/// One step the device has taken and the host has not read: handles to its one-element results.
///
/// ```
/// use burn_mpric_core::scale::PendingStep;
///
/// // Handles of any type: here the values themselves.
/// let step = PendingStep::new(Some(true), Some(0.5_f32)).with_overflowed(vec![]);
/// assert_eq!(step.finite, Some(true));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct PendingStep<Flag, Loss> {
    /// Whether every gradient was finite; `None` for a step without gradients (finite).
    pub finite: Option<Flag>,
    /// The step's loss, when it was given.
    pub loss: Option<Loss>,
    /// Per parameter (by path), whether its gradient overflowed: only when names are asked for.
    pub overflowed: Vec<(String, Flag)>,
}

impl<Flag, Loss> PendingStep<Flag, Loss> {
    /// A step with its finiteness flag and loss, no names.
    ///
    /// ```
    /// use burn_mpric_core::scale::PendingStep;
    ///
    /// let step = PendingStep::<bool, f32>::new(None, None);
    /// assert!(step.overflowed.is_empty());
    /// ```
    pub fn new(finite: Option<Flag>, loss: Option<Loss>) -> Self {
        Self {
            finite,
            loss,
            overflowed: Vec::new(),
        }
    }

    /// The same step with each parameter's overflow flag.
    ///
    /// ```
    /// use burn_mpric_core::scale::PendingStep;
    ///
    /// let step = PendingStep::<bool, f32>::new(None, None);
    /// let step = step.with_overflowed(vec![("w".into(), true)]);
    /// assert_eq!(step.overflowed.len(), 1);
    /// ```
    #[must_use]
    pub fn with_overflowed(self, overflowed: Vec<(String, Flag)>) -> Self {
        Self { overflowed, ..self }
    }
}

/// One value a read registers, in the order [`PendingSteps::plan`] lists them.
///
/// ```
/// use burn_mpric_core::scale::ReadHandle;
///
/// let handle: ReadHandle<'_, bool, f32> = ReadHandle::Scale;
/// assert!(!handle.is_flag());
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ReadHandle<'a, Flag, Loss> {
    /// A finiteness or overflow flag: read as a `bool`.
    Flag(&'a Flag),
    /// A step's loss: read as an `f32`.
    Loss(&'a Loss),
    /// The device's loss scale (the edition's own handle): read as an `f32`, checked against
    /// the host's after the replay.
    Scale,
}

impl<Flag, Loss> ReadHandle<'_, Flag, Loss> {
    /// Whether the value is read as a `bool` (otherwise as one `f32`).
    ///
    /// ```
    /// use burn_mpric_core::scale::ReadHandle;
    ///
    /// assert!(ReadHandle::<bool, f32>::Flag(&true).is_flag());
    /// ```
    pub fn is_flag(&self) -> bool {
        matches!(self, ReadHandle::Flag(_))
    }
}

/// A value read back, as [`ReadHandle::is_flag`] says to read it.
///
/// ```
/// use burn_mpric_core::scale::ReadValue;
///
/// assert_ne!(ReadValue::Flag(true), ReadValue::Number(1.0));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ReadValue {
    /// A flag.
    Flag(bool),
    /// A loss or the scale.
    Number(f32),
}

/// Why a read could not be settled.
///
/// ```
/// use burn_mpric_core::scale::SettleError;
///
/// let error = SettleError::UnexpectedRead("expected one loss".into());
/// assert!(error.to_string().contains("one loss"));
/// ```
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SettleError {
    /// The values read do not fit what was registered.
    #[error("{0}")]
    UnexpectedRead(String),
    /// A step reached `max` skips in a row; the outcome is that step's.
    #[error("{}", outcome.stalled_message(*max))]
    Stalled {
        /// The limit reached.
        max: u64,
        /// The step that reached it.
        outcome: Box<StepOutcome>,
    },
}

/// The steps awaiting a read, oldest first, and how often to read them.
///
/// ```
/// use burn_mpric_core::scale::{PendingStep, PendingSteps, ReadValue, ScalerState};
///
/// let mut pending = PendingSteps::new(2);
/// assert_eq!(pending.push(PendingStep::<bool, f32>::new(Some(true), None)), None);
/// assert_eq!(pending.push(PendingStep::new(Some(true), None)), None);
/// // A third step makes the first two due, read while the device runs the third.
/// assert_eq!(pending.push(PendingStep::new(Some(false), None)), Some(2));
///
/// let plan = pending.plan(2);
/// assert_eq!(plan.len(), 2);
/// let values = [ReadValue::Flag(true), ReadValue::Flag(true)];
/// let mut state = ScalerState::default();
/// let outcomes = pending.settle(2, &values, &mut state, 10, false).unwrap();
/// assert!(outcomes.iter().all(|o| !o.is_skipped()));
/// assert_eq!(pending.len(), 1);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct PendingSteps<Flag, Loss> {
    steps: Vec<PendingStep<Flag, Loss>>,
    sync_every: usize,
}

impl<Flag, Loss> Default for PendingSteps<Flag, Loss> {
    fn default() -> Self {
        Self::new(0)
    }
}

impl<Flag, Loss> PendingSteps<Flag, Loss> {
    /// No steps; read every `sync_every` steps (0: only when asked, or once
    /// [`MAX_PENDING_STEPS`] are pending).
    ///
    /// ```
    /// use burn_mpric_core::scale::PendingSteps;
    ///
    /// assert!(PendingSteps::<bool, f32>::new(4).is_empty());
    /// ```
    pub fn new(sync_every: usize) -> Self {
        Self {
            steps: Vec::new(),
            sync_every,
        }
    }

    /// How often the steps are read (0: only when asked).
    ///
    /// ```
    /// use burn_mpric_core::scale::PendingSteps;
    ///
    /// assert_eq!(PendingSteps::<bool, f32>::new(4).sync_every(), 4);
    /// ```
    pub fn sync_every(&self) -> usize {
        self.sync_every
    }

    /// The same steps, read every `n` steps from now on.
    ///
    /// ```
    /// use burn_mpric_core::scale::PendingSteps;
    ///
    /// assert_eq!(PendingSteps::<bool, f32>::new(0).with_sync_every(8).sync_every(), 8);
    /// ```
    #[must_use]
    pub fn with_sync_every(self, n: usize) -> Self {
        Self {
            sync_every: n,
            ..self
        }
    }

    /// How many steps await a read.
    ///
    /// ```
    /// use burn_mpric_core::scale::PendingSteps;
    ///
    /// assert_eq!(PendingSteps::<bool, f32>::new(0).len(), 0);
    /// ```
    pub fn len(&self) -> usize {
        self.steps.len()
    }

    /// Whether no step awaits a read.
    ///
    /// ```
    /// use burn_mpric_core::scale::PendingSteps;
    ///
    /// assert!(PendingSteps::<bool, f32>::new(0).is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    /// Adds a step; returns how many of the oldest steps are due to be read, when a read is
    /// due: all but the newest once more than `sync_every` (or [`MAX_PENDING_STEPS`]) are
    /// pending, so that the device is already running the newest while the host reads.
    ///
    /// ```
    /// use burn_mpric_core::scale::{MAX_PENDING_STEPS, PendingStep, PendingSteps};
    ///
    /// let mut pending = PendingSteps::new(0);
    /// let due: Vec<_> = (0..=MAX_PENDING_STEPS)
    ///     .filter_map(|_| pending.push(PendingStep::<bool, f32>::new(None, None)))
    ///     .collect();
    /// assert_eq!(due, vec![MAX_PENDING_STEPS]);
    /// ```
    pub fn push(&mut self, step: PendingStep<Flag, Loss>) -> Option<usize> {
        self.steps.push(step);
        let every = match self.sync_every {
            0 => MAX_PENDING_STEPS,
            n => n.min(MAX_PENDING_STEPS),
        };
        (self.steps.len() > every).then(|| self.steps.len() - 1)
    }

    /// What to read for the oldest `count` steps, in order: per step its flag (if it had
    /// gradients), its loss (if given) and its parameters' overflow flags; then the device's
    /// scale when `count` is every pending step, so that the replayed scale is checked.
    /// Nothing at all when there is nothing to learn.
    ///
    /// ```
    /// use burn_mpric_core::scale::{PendingStep, PendingSteps, ReadHandle};
    ///
    /// let mut pending = PendingSteps::new(0);
    /// pending.push(PendingStep::new(Some(true), Some(2.0_f32)));
    /// let plan = pending.plan(1);
    /// assert_eq!(
    ///     plan,
    ///     vec![ReadHandle::Flag(&true), ReadHandle::Loss(&2.0), ReadHandle::Scale]
    /// );
    /// assert!(PendingSteps::<bool, f32>::new(0).plan(0).ends_with(&[ReadHandle::Scale]));
    /// ```
    pub fn plan(&self, count: usize) -> Vec<ReadHandle<'_, Flag, Loss>> {
        let count = count.min(self.steps.len());
        let mut plan = Vec::new();
        for step in &self.steps[..count] {
            plan.extend(step.finite.as_ref().map(ReadHandle::Flag));
            plan.extend(step.loss.as_ref().map(ReadHandle::Loss));
            plan.extend(step.overflowed.iter().map(|(_, f)| ReadHandle::Flag(f)));
        }
        if count == self.steps.len() {
            plan.push(ReadHandle::Scale);
        }
        plan
    }

    /// Settles the oldest `count` steps from `values` (read in [`plan`](Self::plan)'s order):
    /// replays them on `state` (the host scaler's), names each skipped step's overflowed
    /// parameters when `names`, checks the device's scale against the host's when it was
    /// read, and drops the steps. The steps stay pending when the values do not fit.
    ///
    /// Fails with [`SettleError::Stalled`] when a step reached `max_consecutive_skips` skips
    /// in a row (every step is counted all the same).
    ///
    /// ```
    /// use burn_mpric_core::scale::{PendingStep, PendingSteps, ReadValue, ScalerState};
    ///
    /// let mut pending = PendingSteps::<(), f32>::new(0);
    /// pending.push(PendingStep::new(Some(()), None).with_overflowed(vec![("w".into(), ())]));
    /// let mut state = ScalerState::default();
    /// // The scale the device reached: the host's after one skipped step.
    /// let mut host = state.clone();
    /// host.finish(false, None, None);
    /// let scale = host.scale();
    /// let values = [ReadValue::Flag(false), ReadValue::Flag(true), ReadValue::Number(scale)];
    /// let outcomes = pending.settle(1, &values, &mut state, 10, true).unwrap();
    /// assert_eq!(outcomes[0].overflow.as_ref().unwrap().params, vec!["w".to_string()]);
    /// ```
    pub fn settle(
        &mut self,
        count: usize,
        values: &[ReadValue],
        state: &mut ScalerState,
        max_consecutive_skips: u64,
        names: bool,
    ) -> Result<Vec<StepOutcome>, SettleError> {
        let count = count.min(self.steps.len());
        let mut values = Values(values.iter());
        let mut read: Vec<DeviceStepRead> = Vec::with_capacity(count);
        let mut overflowed: Vec<Vec<String>> = Vec::with_capacity(count);
        for step in &self.steps[..count] {
            let finite = match step.finite {
                Some(_) => values.flag("finiteness flag")?,
                None => true,
            };
            let loss = match step.loss {
                Some(_) => Some(values.number("loss")?),
                None => None,
            };
            read.push((finite, loss));
            let mut params = Vec::new();
            for (path, _) in &step.overflowed {
                if values.flag("overflow flag")? {
                    params.push(path.clone());
                }
            }
            overflowed.push(params);
        }
        let device_scale = match count == self.steps.len() {
            true => Some(values.number("scale")?),
            false => None,
        };
        self.steps.drain(..count);
        let (mut outcomes, stalled) = state.replay(&read, max_consecutive_skips);
        if names {
            for (outcome, params) in outcomes.iter_mut().zip(overflowed) {
                if outcome.is_skipped() {
                    outcome.overflow = Some(Overflow::new(params));
                }
            }
        }
        if let Some(device) = device_scale
            && device != state.scale()
        {
            return Err(SettleError::UnexpectedRead(format!(
                "the device's loss scale {device:e} differs from the host's {:e} after the \
                 same steps",
                state.scale()
            )));
        }
        match stalled {
            Some(index) => Err(SettleError::Stalled {
                max: max_consecutive_skips,
                outcome: Box::new(outcomes[index].clone()),
            }),
            None => Ok(outcomes),
        }
    }
}

/// The values of a read, taken in [`PendingSteps::plan`]'s order, each of the kind expected.
struct Values<'a>(std::slice::Iter<'a, ReadValue>);

impl Values<'_> {
    fn next(&mut self, what: &str) -> Result<ReadValue, SettleError> {
        self.0.next().copied().ok_or_else(|| {
            SettleError::UnexpectedRead(format!("the read returned too few values: no {what}"))
        })
    }

    fn flag(&mut self, what: &str) -> Result<bool, SettleError> {
        match self.next(what)? {
            ReadValue::Flag(flag) => Ok(flag),
            other => Err(unexpected(what, other)),
        }
    }

    fn number(&mut self, what: &str) -> Result<f32, SettleError> {
        match self.next(what)? {
            ReadValue::Number(number) => Ok(number),
            other => Err(unexpected(what, other)),
        }
    }
}

fn unexpected(what: &str, read: ReadValue) -> SettleError {
    SettleError::UnexpectedRead(format!("expected the {what}, read {read:?}"))
}

/// Per parameter, one flag for all its shards: the first shard's place, the flags combined by
/// `or` (on the device). A parameter whose gradient is split across devices is named once.
///
/// ```
/// use burn_mpric_core::scale::merge_by_name;
///
/// let flags = vec![("w".to_string(), false), ("b".into(), false), ("w".into(), true)];
/// let merged = merge_by_name(flags, |a, b| a | b);
/// assert_eq!(merged, vec![("w".to_string(), true), ("b".to_string(), false)]);
/// ```
pub fn merge_by_name<Flag>(
    flags: impl IntoIterator<Item = (String, Flag)>,
    or: impl Fn(Flag, Flag) -> Flag,
) -> Vec<(String, Flag)> {
    let mut merged: Vec<(String, Option<Flag>)> = Vec::new();
    let mut at: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for (path, flag) in flags {
        match at.get(&path) {
            Some(&i) => {
                let slot: &mut Option<Flag> = &mut merged[i].1;
                *slot = slot.take().map(|before| or(before, flag));
            }
            None => {
                at.insert(path.clone(), merged.len());
                merged.push((path, Some(flag)));
            }
        }
    }
    merged
        .into_iter()
        .filter_map(|(path, flag)| flag.map(|f| (path, f)))
        .collect()
}
