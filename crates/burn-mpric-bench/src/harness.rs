//! Interleaved timing: every variant of a group runs once per round, so that a slow phase of a
//! noisy machine hits all variants alike, and the ratios between them are read from one run.
//! Each round starts one variant later than the one before (A B C D, B C D A, C D A B, ...):
//! no variant always runs first, right after the previous round's last (its caches, its
//! allocator state, a driver's queued work), or always last.

use std::time::{Duration, Instant};

/// One benchmarked computation on one backend variant, with its data and state built.
pub trait Case {
    /// One iteration, ended by a device sync (`Backend::sync`): the unit that is timed.
    fn step(&mut self);

    /// One iteration like [`step`](Self::step), calling `sample` at the points where the
    /// memory in use peaks (for a training step: after the forward pass, after backward, after
    /// the optimizer); the memory pass uses it. By default: after the step.
    fn step_sampled(&mut self, sample: &dyn Fn()) {
        self.step();
        sample();
    }

    /// The result the numeric error is computed from (as f32), from the state the case was
    /// built with: the forward result, or the model's prediction after a few training steps.
    fn output(&mut self) -> Vec<f32>;
}

/// How long to measure a group of variants.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    /// Untimed iterations of every variant before measuring.
    pub warmup: usize,
    /// Rounds measured at least (unless `max_rounds` is smaller).
    pub min_rounds: usize,
    /// Rounds measured at most.
    pub max_rounds: usize,
    /// After `min_rounds`, stop starting new rounds once the group has run this long.
    pub time_limit: Duration,
    /// Iterations are batched into samples of at least this long (each iteration still ends
    /// with a sync), so that microsecond-scale kernels are not lost in timer noise.
    pub min_sample: Duration,
}

/// The samples of one variant: milliseconds per iteration, one per round.
#[derive(Debug, Clone, Default)]
pub struct Samples {
    /// Milliseconds per iteration, one value per round.
    pub ms: Vec<f64>,
    /// Iterations per sample (the same for every variant of a group).
    pub iters_per_sample: usize,
}

impl Samples {
    /// The median (mean of the two middle values for an even count).
    pub fn median(&self) -> f64 {
        let mut v = self.ms.clone();
        v.sort_by(f64::total_cmp);
        match v.len() {
            0 => f64::NAN,
            n if n % 2 == 1 => v[n / 2],
            n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
        }
    }

    /// The fastest sample.
    pub fn min(&self) -> f64 {
        self.ms.iter().copied().fold(f64::INFINITY, f64::min)
    }

    /// The slowest sample.
    pub fn max(&self) -> f64 {
        self.ms.iter().copied().fold(f64::NEG_INFINITY, f64::max)
    }
}

/// The order the `n` cases run in during round `round`: a rotation that starts at case
/// `round % n`.
fn round_order(round: usize, n: usize) -> impl Iterator<Item = usize> {
    (0..n).map(move |i| (round + i) % n)
}

fn time_iters(case: &mut dyn Case, iters: usize) -> f64 {
    let start = Instant::now();
    for _ in 0..iters {
        case.step();
    }
    start.elapsed().as_secs_f64() * 1e3 / iters as f64
}

/// Warms every case up, then measures them interleaved, in rotated order (see the module
/// docs); returns one [`Samples`] per case, in the order of `cases`.
pub fn measure_interleaved(cases: &mut [Box<dyn Case>], budget: Budget) -> Vec<Samples> {
    if cases.is_empty() {
        return Vec::new();
    }
    // Warm-up, interleaved too; the last warm-up iteration of each case sizes the samples.
    let mut slowest = 0.0f64;
    for round in 0..budget.warmup.max(1) {
        for i in round_order(round, cases.len()) {
            let ms = time_iters(cases[i].as_mut(), 1);
            if round + 1 == budget.warmup.max(1) {
                slowest = slowest.max(ms);
            }
        }
    }
    let min_sample_ms = budget.min_sample.as_secs_f64() * 1e3;
    let iters = ((min_sample_ms / slowest.max(1e-6)).ceil() as usize).clamp(1, 1000);

    let mut samples = vec![
        Samples {
            ms: Vec::new(),
            iters_per_sample: iters,
        };
        cases.len()
    ];
    let start = Instant::now();
    for round in 0..budget.max_rounds {
        if round >= budget.min_rounds && start.elapsed() >= budget.time_limit {
            break;
        }
        for i in round_order(round, cases.len()) {
            samples[i].ms.push(time_iters(cases[i].as_mut(), iters));
        }
    }
    samples
}

/// How long each group is measured: a quick run, or `--full`.
pub(crate) fn default_budget(full: bool) -> Budget {
    if full {
        Budget {
            warmup: 5,
            min_rounds: 10,
            max_rounds: 200,
            time_limit: Duration::from_secs(40),
            min_sample: Duration::from_millis(20),
        }
    } else {
        Budget {
            warmup: 2,
            min_rounds: 7,
            max_rounds: 40,
            time_limit: Duration::from_secs(8),
            min_sample: Duration::from_millis(4),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::rc::Rc;

    use super::*;

    struct Sleep(u64);

    impl Case for Sleep {
        fn step(&mut self) {
            std::thread::sleep(Duration::from_micros(self.0));
        }

        fn output(&mut self) -> Vec<f32> {
            vec![self.0 as f32]
        }
    }

    /// Appends its index to a shared log at every iteration.
    struct Logged {
        index: usize,
        log: Rc<RefCell<Vec<usize>>>,
    }

    impl Case for Logged {
        fn step(&mut self) {
            self.log.borrow_mut().push(self.index);
        }

        fn output(&mut self) -> Vec<f32> {
            Vec::new()
        }
    }

    /// One warm-up round, then exactly three rounds of one iteration per sample.
    fn three_rounds() -> Budget {
        Budget {
            warmup: 1,
            min_rounds: 3,
            max_rounds: 3,
            time_limit: Duration::ZERO,
            min_sample: Duration::ZERO,
        }
    }

    #[test]
    fn rounds_rotate_the_order() {
        let orders: Vec<Vec<usize>> = (0..4).map(|r| round_order(r, 3).collect()).collect();
        assert_eq!(orders, [[0, 1, 2], [1, 2, 0], [2, 0, 1], [0, 1, 2]]);

        let log = Rc::new(RefCell::new(Vec::new()));
        let mut cases: Vec<Box<dyn Case>> = (0..3)
            .map(|index| {
                Box::new(Logged {
                    index,
                    log: log.clone(),
                }) as Box<dyn Case>
            })
            .collect();
        let samples = measure_interleaved(&mut cases, three_rounds());
        assert!(samples.iter().all(|s| s.ms.len() == 3));
        // The warm-up round, then the three measured rounds, each one step further.
        assert_eq!(*log.borrow(), [0, 1, 2, 0, 1, 2, 1, 2, 0, 2, 0, 1]);
    }

    #[test]
    fn statistics_of_samples() {
        let s = Samples {
            ms: vec![3.0, 1.0, 2.0, 10.0],
            iters_per_sample: 1,
        };
        assert_eq!(s.median(), 2.5);
        assert_eq!(s.min(), 1.0);
        assert_eq!(s.max(), 10.0);
    }

    #[test]
    fn interleaved_rounds_time_every_case() {
        let sleeps_us = [200u64, 600];
        let mut cases: Vec<Box<dyn Case>> = sleeps_us
            .iter()
            .map(|&us| Box::new(Sleep(us)) as Box<dyn Case>)
            .collect();
        let samples = measure_interleaved(&mut cases, three_rounds());
        assert_eq!(samples.len(), 2);
        // A sleep lasts at least as long as asked, whatever else the machine runs, so each
        // sample is bounded below by its own case's step: the timer covers the step it
        // belongs to. (An upper bound or an order between the cases would depend on the
        // machine's load: that is the benchmark's business, not a test's.)
        for (s, us) in samples.iter().zip(sleeps_us) {
            assert_eq!(s.iters_per_sample, 1);
            assert_eq!(s.ms.len(), 3);
            assert!(
                s.ms.iter().all(|&ms| ms >= us as f64 / 1e3),
                "{s:?} for {us} µs"
            );
        }
    }
}
