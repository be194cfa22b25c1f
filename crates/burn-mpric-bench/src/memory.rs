//! Peak memory of one case: the process heap for the CPU backend (a counting global
//! allocator), the device memory counters of cubecl (`ComputeClient::memory_usage`) for Wgpu
//! and CUDA, read at every op boundary of an instrumented case, or polled while a case that
//! is not instrumented runs.

use std::alloc::{GlobalAlloc, Layout, System};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use burn_mpric::instrument::OpHook;
use serde::Serialize;

static HEAP_NOW: AtomicU64 = AtomicU64::new(0);
static HEAP_PEAK: AtomicU64 = AtomicU64::new(0);

/// The system allocator, counting the bytes in use and their high-water mark (two relaxed
/// atomic operations per allocation).
pub struct CountingAlloc;

fn grow(bytes: usize) {
    let now = HEAP_NOW.fetch_add(bytes as u64, Ordering::Relaxed) + bytes as u64;
    HEAP_PEAK.fetch_max(now, Ordering::Relaxed);
}

fn shrink(bytes: usize) {
    HEAP_NOW.fetch_sub(bytes as u64, Ordering::Relaxed);
}

// SAFETY: every call is forwarded to `System` unchanged; only counters are updated.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            grow(layout.size());
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            grow(layout.size());
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) };
        shrink(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            shrink(layout.size());
            grow(new_size);
        }
        new
    }
}

/// Held by the tests that allocate much on the heap, so that a test reading the heap's level
/// (the optimizer modes' bytes per parameter) sees its own allocations only.
#[cfg(test)]
pub static HEAP_TESTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Runs the (ignored) test `name` of this test binary in a process of its own, alone, and
/// fails with its output unless it ran and passed.
#[cfg(test)]
pub fn in_own_process(name: &str) {
    let exe = std::env::current_exe().expect("the test binary's path");
    let out = std::process::Command::new(exe)
        .args([name, "--exact", "--ignored", "--test-threads=1"])
        .output()
        .expect("the test binary runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{name} failed:\n{text}");
    assert!(text.contains("1 passed"), "{name} did not run:\n{text}");
}

/// [`HEAP_TESTS`], held until the guard drops (a test that failed while holding it does not
/// stop the others).
#[cfg(test)]
pub fn heap_tests() -> std::sync::MutexGuard<'static, ()> {
    HEAP_TESTS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Reads a device's bytes in use.
pub type DeviceCounter = Arc<dyn Fn() -> Result<u64, String> + Send + Sync>;

/// Where a backend's memory figures come from.
#[derive(Clone)]
pub enum MemorySource {
    /// The process heap, through [`CountingAlloc`] (CPU backends).
    Heap,
    /// A device counter, polled from a second thread while the case runs.
    Device(DeviceCounter),
}

impl MemorySource {
    /// How the figure is obtained, for the report.
    pub fn describe(&self) -> String {
        match self {
            MemorySource::Heap => "process heap (counting allocator), high-water mark".into(),
            MemorySource::Device(_) => {
                format!(
                    "device bytes in use (cubecl memory_usage), read before and after every op (a lower bound: an op's inputs and output together inside the op are not seen; polled instead for the loss-scaler and cast rows); the highest of {DEVICE_REPEATS} measurements, variants in rotated order"
                )
            }
        }
    }

    /// The bytes in use now: the heap's (exact) or the device counter's reading. A level, not
    /// a peak: what is alive at this point of the program.
    pub fn in_use(&self) -> Result<u64, String> {
        match self {
            MemorySource::Heap => Ok(HEAP_NOW.load(Ordering::Relaxed)),
            MemorySource::Device(counter) => counter(),
        }
    }

    /// How many times each variant's peak is measured: the heap figure is exact; a device
    /// figure is a lower bound that can move between measurements of one computation (what
    /// an earlier case releases while this one runs, what the poller catches of cases that
    /// are not read at every op), so it is measured several times and the highest reading is
    /// kept.
    pub fn repeats(&self) -> usize {
        match self {
            MemorySource::Heap => 1,
            MemorySource::Device(_) => DEVICE_REPEATS,
        }
    }
}

/// Measurements of a device peak per variant (see [`MemorySource::repeats`]).
pub const DEVICE_REPEATS: usize = 3;

/// The peak memory of a case, above what was in use before it was built.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Peak {
    /// Bytes.
    Bytes {
        /// Peak bytes in use while the case was built and run, minus the bytes in use before.
        bytes: u64,
    },
    /// Not measured, with the reason.
    NotReported {
        /// Why.
        reason: String,
    },
}

impl Peak {
    /// The highest of several measurements of one case; a measurement that was not reported
    /// wins, with its reason.
    ///
    /// Every device reading is a lower bound of the same peak (see [`peak_of`]): a reading can
    /// miss a short-lived buffer, or count as "in use before" memory that an earlier case
    /// releases while this one runs, but nothing else allocates on the device meanwhile, so
    /// no reading exceeds the peak and the highest is the tightest bound.
    pub fn highest(mut readings: Vec<Peak>) -> Option<Peak> {
        if let Some(i) = readings
            .iter()
            .position(|p| matches!(p, Peak::NotReported { .. }))
        {
            return Some(readings.swap_remove(i));
        }
        readings
            .iter()
            .filter_map(|p| match p {
                Peak::Bytes { bytes } => Some(*bytes),
                Peak::NotReported { .. } => None,
            })
            .max()
            .map(|bytes| Peak::Bytes { bytes })
    }
}

/// How a device counter is read while a case runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sampling {
    /// Only when the case calls the function it is given: the bench calls it before and after
    /// every op of a case built over [`Instrumented`](burn_mpric::instrument::Instrumented),
    /// through [`at_each_op`](burn_mpric::instrument::at_each_op). Every buffer an op returns
    /// is seen, and two readings of one computation are the same.
    EveryOp,
    /// Also by a second thread polling it all along, for cases that are not instrumented
    /// (a buffer that lives between two of their sample points is seen only by chance).
    Polled,
}

/// Runs `run` (which builds a case and runs a few iterations, calling the function it is given
/// where memory is read) and returns its peak memory.
///
/// On the heap the figure is exact (every allocation is counted) and `sampling` does not
/// matter. cubecl counts a device allocation from the op that makes it to the drop of its
/// handle; no reading sees an op's inputs and its output in use together inside the op, so
/// the device figure is a lower bound of the true peak.
pub fn peak_of(source: &MemorySource, sampling: Sampling, run: impl FnOnce(&OpHook)) -> Peak {
    match source {
        MemorySource::Heap => {
            let before = HEAP_NOW.load(Ordering::Relaxed);
            HEAP_PEAK.store(before, Ordering::Relaxed);
            run(&(Rc::new(|| {}) as OpHook));
            let peak = HEAP_PEAK.load(Ordering::Relaxed);
            Peak::Bytes {
                bytes: peak.saturating_sub(before),
            }
        }
        MemorySource::Device(counter) => {
            let before = match counter() {
                Ok(b) => b,
                Err(reason) => {
                    return Peak::NotReported { reason };
                }
            };
            let peak = Arc::new(AtomicU64::new(before));
            let stop = Arc::new(AtomicBool::new(false));
            let poller = (sampling == Sampling::Polled).then(|| {
                let (stop, counter, peak) = (stop.clone(), counter.clone(), peak.clone());
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        if let Ok(b) = counter() {
                            peak.fetch_max(b, Ordering::Relaxed);
                        }
                        std::thread::yield_now();
                    }
                })
            });
            let sample: OpHook = {
                let (counter, peak) = (counter.clone(), peak.clone());
                Rc::new(move || {
                    if let Ok(b) = counter() {
                        peak.fetch_max(b, Ordering::Relaxed);
                    }
                })
            };
            run(&sample);
            stop.store(true, Ordering::Relaxed);
            if let Some(poller) = poller {
                let _ = poller.join();
            }
            Peak::Bytes {
                bytes: peak.load(Ordering::Relaxed).saturating_sub(before),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn device_readings_keep_the_highest_lower_bound() {
        let bytes = |b| Peak::Bytes { bytes: b };
        let highest = Peak::highest(vec![bytes(120), bytes(9_000), bytes(100)]);
        assert!(
            matches!(highest, Some(Peak::Bytes { bytes: 9_000 })),
            "{highest:?}"
        );
        let failed = Peak::NotReported {
            reason: "no counter".into(),
        };
        assert!(matches!(
            Peak::highest(vec![bytes(1), failed]),
            Some(Peak::NotReported { .. })
        ));
        assert!(Peak::highest(Vec::new()).is_none());
    }

    #[test]
    fn a_device_counter_is_polled_while_the_case_runs() {
        const HIGH: u64 = 5_000;
        let level = Arc::new(AtomicU64::new(100));
        // Set by the counter when it has returned the high level to a reader: the case holds
        // that level until the poller (the only reader then) has seen it, however long the
        // machine takes to schedule it, instead of sleeping and hoping.
        let high_read = Arc::new(AtomicBool::new(false));
        let counter: DeviceCounter = {
            let (level, high_read) = (level.clone(), high_read.clone());
            Arc::new(move || {
                let bytes = level.load(Ordering::SeqCst);
                if bytes == HIGH {
                    high_read.store(true, Ordering::SeqCst);
                }
                Ok(bytes)
            })
        };
        let peak = peak_of(&MemorySource::Device(counter), Sampling::Polled, |sample| {
            level.store(3_000, Ordering::SeqCst);
            sample();
            level.store(HIGH, Ordering::SeqCst);
            let deadline = Instant::now() + Duration::from_secs(60);
            while !high_read.load(Ordering::SeqCst) {
                assert!(Instant::now() < deadline, "the poller never ran");
                std::thread::yield_now();
            }
            level.store(100, Ordering::SeqCst);
        });
        assert!(matches!(peak, Peak::Bytes { bytes: 4_900 }), "{peak:?}");
    }
}
