//! What a training framework's scaler handle shares between a model's clones, in both
//! editions (burn-mpric-learner's and burn-mpric-022's `ScalerHandle`): the scaler, the steps
//! waiting for its decision, the processes it steps across, the batches kept for the probe,
//! its device path and the last error, behind one lock. Only the scaler, the transport and the
//! device state are each edition's own types.

use std::any::Any;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use super::step_record::StepSlot;

/// The batches of the steps since the last optimizer step, kept for the probe of a skipped
/// step (each edition downcasts them to its model's input).
///
/// ```
/// use burn_mpric_core::scale::ProbeInputs;
///
/// let mut kept = ProbeInputs::default();
/// kept.push(Box::new(3_u8));
/// let batches = kept.take();
/// assert_eq!(batches.len(), 1);
/// assert!(kept.take().is_empty());
/// ```
#[derive(Default)]
pub struct ProbeInputs(Vec<Box<dyn Any + Send>>);

impl ProbeInputs {
    /// Keeps one more batch.
    ///
    /// ```
    /// use burn_mpric_core::scale::ProbeInputs;
    ///
    /// let mut kept = ProbeInputs::default();
    /// kept.push(Box::new("batch"));
    /// assert_eq!(kept.take().len(), 1);
    /// ```
    pub fn push(&mut self, batch: Box<dyn Any + Send>) {
        self.0.push(batch);
    }

    /// The batches kept, none left behind.
    ///
    /// ```
    /// use burn_mpric_core::scale::ProbeInputs;
    ///
    /// assert!(ProbeInputs::default().take().is_empty());
    /// ```
    pub fn take(&mut self) -> Vec<Box<dyn Any + Send>> {
        std::mem::take(&mut self.0)
    }
}

impl fmt::Debug for ProbeInputs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} batches kept for the probe", self.0.len())
    }
}

/// The state a scaler handle shares: `Scaler` the edition's loss scaler, `Parallel` its
/// transport across processes, `Device` its device-path state.
///
/// ```
/// use burn_mpric_core::scale::{HandleState, ScalerState, StepSlot};
///
/// let mut state = HandleState::<ScalerState, (), ()>::new(ScalerState::default());
/// state.pending.push(StepSlot::new(4.0, 0));
/// state.restore(ScalerState::fixed(2.0).unwrap());
/// assert!(state.pending.is_empty());
/// assert_eq!(state.scaler.scale(), 2.0);
/// ```
#[derive(Debug)]
pub struct HandleState<Scaler, Parallel, Device> {
    /// The scaler, as of the last step the host learned.
    pub scaler: Scaler,
    /// The slots of the training steps since the last optimizer step, filled with its
    /// outcome.
    pub pending: Vec<StepSlot>,
    /// The processes the optimizer steps are summed across.
    pub parallel: Option<Parallel>,
    /// The batches since the last optimizer step, for its probe.
    pub probe: ProbeInputs,
    /// The device path, once the handle is on it.
    pub device: Option<Device>,
    /// The error of the last step that could not run, or of a restore that was refused.
    pub last_error: Option<String>,
}

impl<Scaler, Parallel, Device> HandleState<Scaler, Parallel, Device> {
    /// A handle's state around `scaler`, off the device path, in one process.
    ///
    /// ```
    /// use burn_mpric_core::scale::{HandleState, ScalerState};
    ///
    /// let state = HandleState::<_, (), ()>::new(ScalerState::default());
    /// assert!(state.device.is_none() && state.last_error.is_none());
    /// ```
    pub fn new(scaler: Scaler) -> Self {
        Self {
            scaler,
            pending: Vec::new(),
            parallel: None,
            probe: ProbeInputs::default(),
            device: None,
            last_error: None,
        }
    }

    /// Replaces the scaler with a restored one. The steps waiting for a decision and the
    /// batches kept for the probe belong to the run before the restore, and are dropped.
    ///
    /// ```
    /// use burn_mpric_core::scale::{HandleState, ScalerState};
    ///
    /// let mut state = HandleState::<_, (), ()>::new(ScalerState::default());
    /// state.probe.push(Box::new(1_u8));
    /// state.restore(ScalerState::noop());
    /// assert!(state.probe.take().is_empty());
    /// ```
    pub fn restore(&mut self, scaler: Scaler) {
        self.scaler = scaler;
        self.pending.clear();
        self.probe.take();
    }

    /// Keeps `error` as the last error (see [`last_error`](Self::last_error)).
    ///
    /// ```
    /// use burn_mpric_core::scale::{HandleState, ScalerState};
    ///
    /// let mut state = HandleState::<_, (), ()>::new(ScalerState::default());
    /// state.fail("the device could not be read");
    /// assert_eq!(state.last_error.as_deref(), Some("the device could not be read"));
    /// ```
    pub fn fail(&mut self, error: impl fmt::Display) {
        self.last_error = Some(error.to_string());
    }
}

/// One [`HandleState`] shared by a model's clones, behind a lock a panic elsewhere does not
/// make unusable (every update replaces the scaler whole, so the state stays consistent).
///
/// ```
/// use burn_mpric_core::scale::{ScalerState, SharedHandle};
///
/// let handle = SharedHandle::<_, (), ()>::new(ScalerState::fixed(8.0).unwrap());
/// let clone = handle.clone();
/// clone.lock().scaler = ScalerState::fixed(2.0).unwrap();
/// assert_eq!(handle.lock().scaler.scale(), 2.0);
/// ```
pub struct SharedHandle<Scaler, Parallel, Device>(
    Arc<Mutex<HandleState<Scaler, Parallel, Device>>>,
);

impl<Scaler, Parallel, Device> SharedHandle<Scaler, Parallel, Device> {
    /// A new state around `scaler`.
    ///
    /// ```
    /// use burn_mpric_core::scale::{ScalerState, SharedHandle};
    ///
    /// let handle = SharedHandle::<_, (), ()>::new(ScalerState::noop());
    /// assert!(handle.lock().pending.is_empty());
    /// ```
    pub fn new(scaler: Scaler) -> Self {
        Self(Arc::new(Mutex::new(HandleState::new(scaler))))
    }

    /// The state, locked.
    ///
    /// ```
    /// use burn_mpric_core::scale::{ScalerState, SharedHandle};
    ///
    /// let handle = SharedHandle::<_, (), ()>::new(ScalerState::noop());
    /// handle.lock().fail("no device");
    /// assert!(handle.lock().last_error.is_some());
    /// ```
    pub fn lock(&self) -> MutexGuard<'_, HandleState<Scaler, Parallel, Device>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl<Scaler, Parallel, Device> Clone for SharedHandle<Scaler, Parallel, Device> {
    fn clone(&self) -> Self {
        Self(Arc::clone(&self.0))
    }
}

impl<Scaler: fmt::Debug, Parallel: fmt::Debug, Device: fmt::Debug> fmt::Debug
    for SharedHandle<Scaler, Parallel, Device>
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The mutex prints `<locked>` rather than wait for a lock this thread may hold.
        f.debug_tuple("SharedHandle").field(&self.0).finish()
    }
}
