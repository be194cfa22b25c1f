//! Cohorts of the device path's optimizer: the parameters whose one-element state (Adam's
//! betas' powers, SGD's first-step flag) is the same, so that a step computes their
//! coefficients once rather than once per parameter. Both editions' `DeviceOptimizer`s keep
//! their bookkeeping here; only the state tensors are Burn's.

use std::collections::HashMap;
use std::hash::Hash;

/// Which cohort each parameter is in, and the next cohort's number.
///
/// ```
/// use burn_mpric_core::optim::Cohorts;
///
/// // Parameters 1 and 2 on one device with the same one-element state, 3 on another.
/// let entries = vec![(1, "gpu:0", vec![7]), (2, "gpu:0", vec![7]), (3, "gpu:1", vec![7])];
/// let mut cohorts = Cohorts::grouped(entries);
/// assert_eq!(cohorts.recorded(1), cohorts.recorded(2));
/// assert_ne!(cohorts.recorded(1), cohorts.recorded(3));
/// // A parameter the record did not group is a cohort of its own.
/// assert_eq!(cohorts.recorded(4), 2);
/// ```
#[derive(Debug, Clone)]
pub struct Cohorts<Id> {
    of: HashMap<Id, u64>,
    next: u64,
}

impl<Id> Default for Cohorts<Id> {
    fn default() -> Self {
        Self {
            of: HashMap::new(),
            next: 0,
        }
    }
}

impl<Id: Hash + Eq + Copy> Cohorts<Id> {
    /// No parameter yet.
    ///
    /// ```
    /// use burn_mpric_core::optim::Cohorts;
    ///
    /// assert_eq!(Cohorts::<u64>::new().fresh(), 0);
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// The cohorts of a loaded record: parameters on the same device whose one-element state
    /// is the same `key` (its bits) are one cohort, numbered in the order they come.
    ///
    /// ```
    /// use burn_mpric_core::optim::Cohorts;
    ///
    /// let mut cohorts = Cohorts::grouped(vec![(7, (), 1), (8, (), 2)]);
    /// assert_eq!((cohorts.recorded(7), cohorts.recorded(8)), (0, 1));
    /// ```
    pub fn grouped<Device: PartialEq, Key: PartialEq>(
        entries: impl IntoIterator<Item = (Id, Device, Key)>,
    ) -> Self {
        let mut seen: Vec<(Device, Key)> = Vec::new();
        let mut of = HashMap::new();
        for (id, device, key) in entries {
            let cohort = match seen.iter().position(|(d, k)| *d == device && *k == key) {
                Some(found) => found,
                None => {
                    seen.push((device, key));
                    seen.len() - 1
                }
            };
            of.insert(id, cohort as u64);
        }
        Self::numbered(of)
    }

    /// Each parameter a cohort of its own (when a record's state could not be read).
    ///
    /// ```
    /// use burn_mpric_core::optim::Cohorts;
    ///
    /// let mut cohorts = Cohorts::separate([5, 6]);
    /// assert_ne!(cohorts.recorded(5), cohorts.recorded(6));
    /// ```
    pub fn separate(ids: impl IntoIterator<Item = Id>) -> Self {
        Self::numbered(ids.into_iter().zip(0..).collect())
    }

    fn numbered(of: HashMap<Id, u64>) -> Self {
        let next = of.values().max().map_or(0, |last| last + 1);
        Self { of, next }
    }

    /// A new cohort's number.
    ///
    /// ```
    /// use burn_mpric_core::optim::Cohorts;
    ///
    /// let mut cohorts = Cohorts::<u64>::new();
    /// assert_eq!((cohorts.fresh(), cohorts.fresh()), (0, 1));
    /// ```
    pub fn fresh(&mut self) -> u64 {
        self.next += 1;
        self.next - 1
    }

    /// The cohort of a parameter that has state: the one recorded, or a new one of its own.
    ///
    /// ```
    /// use burn_mpric_core::optim::Cohorts;
    ///
    /// let mut cohorts = Cohorts::<u64>::new();
    /// assert_eq!(cohorts.recorded(3), 0);
    /// ```
    pub fn recorded(&mut self, id: Id) -> u64 {
        match self.of.get(&id) {
            Some(&cohort) => cohort,
            None => self.fresh(),
        }
    }

    /// Records `id` in `cohort` (after a step).
    ///
    /// ```
    /// use burn_mpric_core::optim::Cohorts;
    ///
    /// let mut cohorts = Cohorts::<u64>::new();
    /// cohorts.set(3, 9);
    /// assert_eq!(cohorts.recorded(3), 9);
    /// ```
    pub fn set(&mut self, id: Id, cohort: u64) {
        self.of.insert(id, cohort);
    }
}

/// One step's cohorts: per cohort the parameters were in (`was`; `None` for new parameters)
/// and device, the value the step computes once for it (`C`: the coefficients) and the cohort
/// its parameters become.
///
/// ```
/// use burn_mpric_core::optim::{Cohorts, StepCohorts};
///
/// let mut cohorts = Cohorts::<u64>::new();
/// let mut step = StepCohorts::new();
/// let mut computed = 0;
/// for _ in 0..3 {
///     step.find_or_make(Some(0), &"gpu:0", &mut cohorts, || computed += 1);
/// }
/// let (becomes, _) = step.find_or_make(Some(0), &"gpu:1", &mut cohorts, || computed += 1);
/// assert_eq!((computed, becomes), (2, 1));
/// ```
#[derive(Debug, Clone)]
pub struct StepCohorts<Device, C> {
    cohorts: Vec<(Option<u64>, Device, u64, C)>,
}

impl<Device, C> Default for StepCohorts<Device, C> {
    fn default() -> Self {
        Self {
            cohorts: Vec::new(),
        }
    }
}

impl<Device: PartialEq + Clone, C> StepCohorts<Device, C> {
    /// None yet.
    ///
    /// ```
    /// use burn_mpric_core::optim::StepCohorts;
    ///
    /// let step = StepCohorts::<(), ()>::new();
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// The cohort the parameters of `was` on `device` become this step, and its value, made
    /// by `make` the first time (one cohort per device: its coefficients live on one device,
    /// and a step over several devices updates parameters on each).
    ///
    /// ```
    /// use burn_mpric_core::optim::{Cohorts, StepCohorts};
    ///
    /// let mut step = StepCohorts::new();
    /// let (_, value) = step.find_or_make(None, &(), &mut Cohorts::<u64>::new(), || 4);
    /// assert_eq!(*value, 4);
    /// ```
    pub fn find_or_make<Id: Hash + Eq + Copy>(
        &mut self,
        was: Option<u64>,
        device: &Device,
        cohorts: &mut Cohorts<Id>,
        make: impl FnOnce() -> C,
    ) -> (u64, &C) {
        let found = self
            .cohorts
            .iter()
            .position(|(w, d, _, _)| *w == was && d == device);
        let index = match found {
            Some(index) => index,
            None => {
                let value = make();
                let becomes = cohorts.fresh();
                self.cohorts.push((was, device.clone(), becomes, value));
                self.cohorts.len() - 1
            }
        };
        let (_, _, becomes, value) = &self.cohorts[index];
        (*becomes, value)
    }
}
