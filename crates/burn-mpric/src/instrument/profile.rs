//! [`profile`]: each op's time on the device, with its dtypes in and out, and [`OpSummary`],
//! the same ops added up by kind.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

use burn_backend::DType;

use super::{LOG, OpRecord, at_each_op, record};

/// An op's method, input dtypes and output dtypes.
type Kind<'a> = (&'static str, &'a [DType], &'a [DType]);

/// One op of a [`profile`] and the time it took.
#[derive(Debug, Clone, PartialEq)]
pub struct TimedOp {
    /// The op, its float inputs' dtypes and shapes, and its outputs' dtypes.
    pub record: OpRecord,
    /// From the device being idle before the op to the device being idle after it. A host
    /// read's time runs to the next op's start, so it holds the framework's work in between.
    pub time: Duration,
}

/// What [`profile`] measured: each op in call order, and the time outside every op.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Profile {
    /// The ops in call order.
    pub ops: Vec<TimedOp>,
    /// The time between ops: the framework's own work (autodiff's bookkeeping, a decorator's
    /// dispatch), tensors made from host data, and the waits for the device.
    pub between: Duration,
}

/// The ops of a [`Profile`] of one kind (the same method, input dtypes and output dtypes),
/// added up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpSummary {
    /// Burn's method name.
    pub op: &'static str,
    /// The float inputs' dtypes.
    pub inputs: Vec<DType>,
    /// The float outputs' dtypes.
    pub outputs: Vec<DType>,
    /// How many calls.
    pub calls: usize,
    /// Their time in all.
    pub time: Duration,
}

impl Profile {
    /// The time of every op and between them.
    ///
    /// ```
    /// use std::time::Duration;
    /// use burn_mpric::instrument::Profile;
    ///
    /// let empty = Profile { ops: Vec::new(), between: Duration::from_millis(2) };
    /// assert_eq!(empty.total(), Duration::from_millis(2));
    /// ```
    pub fn total(&self) -> Duration {
        self.between + self.ops.iter().map(|op| op.time).sum::<Duration>()
    }

    /// The ops added up by kind (method, input dtypes, output dtypes), the costliest first
    /// (ties by name, so the order does not depend on the call order).
    ///
    /// ```
    /// use std::rc::Rc;
    /// use burn::backend::Flex;
    /// use burn::tensor::{DType, Tensor};
    /// use burn_mpric::instrument::{Instrumented, profile};
    ///
    /// type B = Instrumented<Flex>;
    /// let a = Tensor::<B, 2>::ones([4, 4], &Default::default());
    /// let (_, profile) = profile(Rc::new(|| ()), || {
    ///     (a.clone().exp().exp() + a.clone()).cast(DType::F16)
    /// });
    /// let summary = profile.by_kind();
    /// let exp = summary.iter().find(|s| s.op == "float_exp").unwrap();
    /// assert_eq!(exp.calls, 2);
    /// let cast = summary.iter().find(|s| s.op == "float_cast").unwrap();
    /// assert_eq!((cast.inputs.as_slice(), cast.outputs.as_slice()), (&[DType::F32][..], &[DType::F16][..]));
    /// ```
    pub fn by_kind(&self) -> Vec<OpSummary> {
        let mut kinds: HashMap<Kind<'_>, (usize, Duration)> = HashMap::new();
        for op in &self.ops {
            let r = &op.record;
            let entry = kinds
                .entry((r.op, &r.float_inputs, &r.float_outputs))
                .or_default();
            entry.0 += 1;
            entry.1 += op.time;
        }
        let mut summary: Vec<OpSummary> = kinds
            .into_iter()
            .map(|((op, inputs, outputs), (calls, time))| OpSummary {
                op,
                inputs: inputs.to_vec(),
                outputs: outputs.to_vec(),
                calls,
                time,
            })
            .collect();
        summary.sort_by(|a, b| {
            b.time
                .cmp(&a.time)
                .then_with(|| a.op.cmp(b.op))
                .then_with(|| format!("{:?}", a.inputs).cmp(&format!("{:?}", b.inputs)))
                .then_with(|| format!("{:?}", a.outputs).cmp(&format!("{:?}", b.outputs)))
        });
        summary
    }
}

/// Runs `f` and times each op the [`Instrumented`](super::Instrumented) backends on this
/// thread forward meanwhile. `sync` waits for the device (`B::sync(&device)`); it is called
/// before and after every op, so each op's time is its own and not the queue's: a profile's
/// total is slower than the same work unprofiled (no overlap of host and device), and says
/// *where* the time goes, not how much there is. On a CPU backend that runs each op as it is
/// called, `sync` may do nothing. Not nested within [`record`] or another `profile`.
///
/// ```
/// use std::rc::Rc;
/// use burn::backend::Flex;
/// use burn::tensor::{DType, Tensor, backend::Backend};
/// use burn_mpric::instrument::{Instrumented, profile};
///
/// type B = Instrumented<Flex>;
/// let device = Default::default();
/// let a = Tensor::<B, 2>::ones([64, 64], &device);
/// let (_, profile) = profile(Rc::new(move || B::sync(&device).unwrap()), || {
///     a.clone().matmul(a.clone()).exp()
/// });
/// let names: Vec<_> = profile.ops.iter().map(|op| op.record.op).collect();
/// assert_eq!(names, ["float_matmul", "float_exp"]);
/// assert_eq!(profile.ops[0].record.float_outputs, [DType::F32]);
/// ```
pub fn profile<R>(sync: Rc<dyn Fn()>, f: impl FnOnce() -> R) -> (R, Profile) {
    // Each op boundary: when the device was idle, and how many ops were logged by then. An
    // op logs itself after its "before" boundary, so the ops between two boundaries are the
    // difference of their counts.
    let marks: Rc<RefCell<Vec<(Instant, usize)>>> = Rc::default();
    let hook = {
        let (marks, sync) = (marks.clone(), sync.clone());
        Rc::new(move || {
            sync();
            let logged = LOG.with(|l| l.borrow().as_ref().map_or(0, Vec::len));
            marks.borrow_mut().push((Instant::now(), logged));
        })
    };
    sync();
    let start = Instant::now();
    let (result, log) = record(|| at_each_op(hook, f));
    sync();
    let end = (Instant::now(), log.len());

    let mut times = vec![Duration::ZERO; log.len()];
    let mut between = Duration::ZERO;
    let mut previous = (start, 0);
    for mark in marks.borrow().iter().copied().chain([end]) {
        let span = mark.0 - previous.0;
        if mark.1 == previous.1 + 1 {
            times[previous.1] += span;
        } else {
            between += span;
        }
        previous = mark;
    }
    let ops = log
        .into_iter()
        .zip(times)
        .map(|(record, time)| TimedOp { record, time })
        .collect();
    (result, Profile { ops, between })
}
