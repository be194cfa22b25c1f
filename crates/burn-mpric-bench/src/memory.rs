//! Peak memory of one case: the process heap for the CPU backend (a counting global
//! allocator), the device memory counters of cubecl (`ComputeClient::memory_usage`) for Wgpu
//! and CUDA, polled while the case runs.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

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
                    "device bytes in use (cubecl memory_usage), read after forward, backward and the optimizer and polled all along (a lower bound); the median of {DEVICE_REPEATS} measurements, variants in rotated order"
                )
            }
        }
    }

    /// How many times each variant's peak is measured: the heap figure is exact, a device
    /// figure moves by several MiB between measurements of one computation (what the
    /// poller catches, what the previous case released late), so it is taken as a median.
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
    /// The median of several measurements of one case (the upper one of the middle two for an
    /// even count); a measurement that was not reported wins, with its reason.
    pub fn median(mut readings: Vec<Peak>) -> Option<Peak> {
        if let Some(i) = readings
            .iter()
            .position(|p| matches!(p, Peak::NotReported { .. }))
        {
            return Some(readings.swap_remove(i));
        }
        let mut bytes: Vec<u64> = readings
            .iter()
            .filter_map(|p| match p {
                Peak::Bytes { bytes } => Some(*bytes),
                Peak::NotReported { .. } => None,
            })
            .collect();
        bytes.sort_unstable();
        bytes
            .get(bytes.len() / 2)
            .map(|&bytes| Peak::Bytes { bytes })
    }
}

/// Runs `run` (which builds a case and runs a few iterations, calling the function it is given
/// where memory peaks) and returns its peak memory.
///
/// On the heap the figure is exact (every allocation is counted). A device counter is read at
/// the sample points and by a second thread polling it all along; cubecl counts an allocation
/// from the op that makes it to the drop of its handle, so a buffer that lives only between two
/// ops can be missed: the device figure is a lower bound of the true peak.
pub fn peak_of(source: &MemorySource, run: impl FnOnce(&dyn Fn())) -> Peak {
    match source {
        MemorySource::Heap => {
            let before = HEAP_NOW.load(Ordering::Relaxed);
            HEAP_PEAK.store(before, Ordering::Relaxed);
            run(&|| {});
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
            let poller = {
                let (stop, counter, peak) = (stop.clone(), counter.clone(), peak.clone());
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        if let Ok(b) = counter() {
                            peak.fetch_max(b, Ordering::Relaxed);
                        }
                        std::thread::yield_now();
                    }
                })
            };
            run(&|| {
                if let Ok(b) = counter() {
                    peak.fetch_max(b, Ordering::Relaxed);
                }
            });
            stop.store(true, Ordering::Relaxed);
            let _ = poller.join();
            Peak::Bytes {
                bytes: peak.load(Ordering::Relaxed).saturating_sub(before),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_median_of_device_readings_ignores_one_outlier() {
        let bytes = |b| Peak::Bytes { bytes: b };
        let median = Peak::median(vec![bytes(120), bytes(100), bytes(9_000)]);
        assert!(
            matches!(median, Some(Peak::Bytes { bytes: 120 })),
            "{median:?}"
        );
        let failed = Peak::NotReported {
            reason: "no counter".into(),
        };
        assert!(matches!(
            Peak::median(vec![bytes(1), failed]),
            Some(Peak::NotReported { .. })
        ));
        assert!(Peak::median(Vec::new()).is_none());
    }

    #[test]
    fn a_device_counter_is_polled_while_the_case_runs() {
        let level = Arc::new(AtomicU64::new(100));
        let counter: DeviceCounter = {
            let level = level.clone();
            Arc::new(move || Ok(level.load(Ordering::Relaxed)))
        };
        let peak = peak_of(&MemorySource::Device(counter), |sample| {
            level.store(3_000, Ordering::Relaxed);
            sample();
            level.store(5_000, Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(20));
            level.store(100, Ordering::Relaxed);
        });
        assert!(matches!(peak, Peak::Bytes { bytes: 4_900 }), "{peak:?}");
    }
}
