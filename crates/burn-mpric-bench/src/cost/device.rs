//! A device as the cost model sees it: matmul throughput per dtype (by the size of the
//! matmul), one effective memory bandwidth, the host's time per kernel launched and a host
//! link, taken from measured rows; and a step's modeled time on it.
//!
//! The host queues kernels (Burn's autodiff, the decorator, cubecl's launch: `launch` each)
//! while the device runs the ones queued before: a step takes the longer of the two, plus
//! its transfers, which wait for the device. On the device a kernel takes
//! `max(flops / throughput, bytes / bandwidth)` (a roofline per kernel, kernels one after
//! another); a transfer takes `bytes / link`.

use std::collections::BTreeMap;

use burn::tensor::DType;
use serde::Serialize;

use super::step::{Kernel, StepCost};

/// Matmul throughput measured at one size.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct MatmulPoint {
    /// FLOPs of the matmul.
    pub flops: f64,
    /// TFLOP/s it ran at.
    pub tflops: f64,
}

/// The parameters of one device.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeviceModel {
    /// The device and the run its parameters come from.
    pub name: String,
    /// Matmul throughput by dtype (`f32`, `f16`, `bf16`), by FLOPs, ascending.
    pub matmul: BTreeMap<String, Vec<MatmulPoint>>,
    /// Effective memory bandwidth of the memory-bound kernels, GB/s.
    pub bandwidth_gbs: f64,
    /// The host's time per kernel (the framework's work around each launch), microseconds.
    pub launch_us: f64,
    /// Host link (uploads and reads back), GB/s.
    pub link_gbs: f64,
    /// Each workload's own bandwidth, where fitted apart (see [`DeviceModel::per_workload`]);
    /// the others take `bandwidth_gbs`.
    pub bandwidth_by_workload: BTreeMap<String, f64>,
}

/// The host link the model assumes (GB/s): PCIe 5.0 x16 as pageable host memory reaches it,
/// not fitted (the steps upload too little to tell it apart).
pub const LINK_GBS: f64 = 25.0;

/// Where a step's modeled time goes, milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Modeled {
    /// The whole step: the longer of the host's and the device's time, and the transfers.
    pub ms: f64,
    /// The host's time queueing the kernels.
    pub host_ms: f64,
    /// The device's time in matmul kernels limited by their FLOPs.
    pub compute_ms: f64,
    /// The device's time in kernels limited by their bytes.
    pub memory_ms: f64,
    /// Host transfers.
    pub transfer_ms: f64,
}

/// The dtype name of a matmul's throughput table.
pub fn dtype_key(dtype: DType) -> &'static str {
    match dtype {
        DType::F16 => "f16",
        DType::BF16 => "bf16",
        DType::F64 => "f64",
        _ => "f32",
    }
}

impl DeviceModel {
    /// TFLOP/s of a matmul of `flops` at `dtype`: interpolated between the measured sizes
    /// on a log scale of FLOPs, the nearest measured size beyond either end. A dtype with
    /// no measurement runs at f32's.
    pub fn tflops(&self, dtype: DType, flops: f64) -> f64 {
        let points = self
            .matmul
            .get(dtype_key(dtype))
            .or_else(|| self.matmul.get("f32"))
            .filter(|p| !p.is_empty());
        let Some(points) = points else {
            return f64::INFINITY;
        };
        let first = points[0];
        let last = points[points.len() - 1];
        if flops <= first.flops {
            return first.tflops;
        }
        if flops >= last.flops {
            return last.tflops;
        }
        let i = points.iter().position(|p| p.flops >= flops).unwrap_or(0);
        let (a, b) = (points[i - 1], points[i]);
        let t = (flops.ln() - a.flops.ln()) / (b.flops.ln() - a.flops.ln());
        a.tflops + t * (b.tflops - a.tflops)
    }

    /// One kernel's time without its launch: its FLOPs or its bytes, whichever is longer,
    /// and which of the two it was (`true`: FLOPs).
    fn kernel_ms(&self, k: &Kernel) -> (f64, bool) {
        let memory = k.bytes() as f64 / (self.bandwidth_gbs * 1e6);
        if k.flops == 0.0 {
            return (memory, false);
        }
        let compute = k.flops / (self.tflops(k.dtype, k.flops) * 1e9);
        if compute >= memory {
            (compute, true)
        } else {
            (memory, false)
        }
    }

    /// The modeled time of `step` on this device.
    pub fn step(&self, step: &StepCost) -> Modeled {
        let mut m = Modeled {
            host_ms: step.kernels.len() as f64 * self.launch_us / 1e3,
            transfer_ms: (step.uploaded + step.downloaded) as f64 / (self.link_gbs * 1e6),
            ..Modeled::default()
        };
        for k in &step.kernels {
            match self.kernel_ms(k) {
                (ms, true) => m.compute_ms += ms,
                (ms, false) => m.memory_ms += ms,
            }
        }
        m.ms = m.host_ms.max(m.compute_ms + m.memory_ms) + m.transfer_ms;
        m
    }

    /// This device with `workload`'s own bandwidth, where it has one.
    pub fn for_workload(&self, workload: &str) -> DeviceModel {
        DeviceModel {
            bandwidth_gbs: self
                .bandwidth_by_workload
                .get(workload)
                .copied()
                .unwrap_or(self.bandwidth_gbs),
            ..self.clone()
        }
    }

    /// This device with a bandwidth of its own for each workload of `rows` (its name, a
    /// step and the step's measured milliseconds), the one that gives that step its time
    /// with this device's host time per kernel, named `name`.
    pub fn per_workload(&self, name: &str, rows: &[(&str, &StepCost, f64)]) -> DeviceModel {
        let mut d = DeviceModel {
            name: name.to_string(),
            ..self.clone()
        };
        for (workload, step, ms) in rows {
            let error = |b: f64| {
                let one = DeviceModel {
                    bandwidth_gbs: b,
                    ..self.clone()
                };
                (one.step(step).ms / ms - 1.0).abs()
            };
            let grid = |lo: f64, hi: f64| {
                (0..400)
                    .map(|i| lo * (hi / lo).powf(i as f64 / 399.0))
                    .min_by(|a, b| error(*a).total_cmp(&error(*b)))
                    .unwrap_or(lo)
            };
            let b = grid(10.0, 10_000.0);
            d.bandwidth_by_workload
                .insert(workload.to_string(), grid(b / 1.05, b * 1.05));
        }
        d
    }

    /// The host's time per kernel and the bandwidth that give `rows` (a step and its
    /// measured milliseconds) their measured times, with this model's matmul throughput
    /// and link: the pair with the least sum of squared relative errors, searched on a
    /// logarithmic grid (1 to 1000 us, 10 GB/s to 10 TB/s), then on a finer one around the
    /// best. `None` without rows.
    pub fn fit(self, rows: &[(&StepCost, f64)]) -> Option<Self> {
        if rows.is_empty() {
            return None;
        }
        let error = |launch_us: f64, bandwidth_gbs: f64| -> f64 {
            let d = DeviceModel {
                launch_us,
                bandwidth_gbs,
                ..self.clone()
            };
            rows.iter()
                .map(|(step, ms)| (d.step(step).ms / ms - 1.0).powi(2))
                .sum()
        };
        let search = |(l0, l1): (f64, f64), (b0, b1): (f64, f64)| -> (f64, f64) {
            const N: usize = 120;
            let at = |lo: f64, hi: f64, i: usize| lo * (hi / lo).powf(i as f64 / (N - 1) as f64);
            let mut best = (f64::INFINITY, l0, b0);
            for i in 0..N {
                for j in 0..N {
                    let (l, b) = (at(l0, l1, i), at(b0, b1, j));
                    let e = error(l, b);
                    if e < best.0 {
                        best = (e, l, b);
                    }
                }
            }
            (best.1, best.2)
        };
        let (l, b) = search((1.0, 1000.0), (10.0, 10_000.0));
        let (l, b) = search((l / 1.1, l * 1.1), (b / 1.1, b * 1.1));
        Some(DeviceModel {
            launch_us: l,
            bandwidth_gbs: b,
            ..self
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device() -> DeviceModel {
        DeviceModel {
            name: "test".into(),
            matmul: BTreeMap::from([(
                "f32".to_string(),
                vec![
                    MatmulPoint {
                        flops: 1e9,
                        tflops: 10.0,
                    },
                    MatmulPoint {
                        flops: 1e11,
                        tflops: 30.0,
                    },
                ],
            )]),
            bandwidth_gbs: 1000.0,
            launch_us: 10.0,
            link_gbs: 20.0,
            bandwidth_by_workload: BTreeMap::new(),
        }
    }

    fn kernel(flops: f64, bytes: u64) -> Kernel {
        Kernel {
            method: "k",
            class: if flops > 0.0 {
                super::super::step::KernelClass::Matmul
            } else {
                super::super::step::KernelClass::Elementwise
            },
            flops,
            dtype: DType::F32,
            read: bytes,
            written: 0,
        }
    }

    #[test]
    fn throughput_is_interpolated_on_a_log_scale_and_held_beyond_the_ends() {
        let d = device();
        assert_eq!(d.tflops(DType::F32, 1e8), 10.0);
        assert_eq!(d.tflops(DType::F32, 1e12), 30.0);
        assert!((d.tflops(DType::F32, 1e10) - 20.0).abs() < 1e-9);
        // No f16 row: f32's throughput.
        assert!((d.tflops(DType::F16, 1e10) - 20.0).abs() < 1e-9);
    }

    #[test]
    fn a_step_takes_the_longer_of_host_and_device_and_its_transfers() {
        let d = device();
        let step = StepCost {
            // 1 GB at 1000 GB/s: 1 ms; 1e11 FLOPs at 30 TFLOP/s: 3.33 ms (compute-bound).
            kernels: vec![kernel(0.0, 1_000_000_000), kernel(1e11, 1000)],
            uploaded: 20_000_000,
            downloaded: 0,
        };
        let m = d.step(&step);
        assert!((m.memory_ms - 1.0).abs() < 1e-9, "{m:?}");
        assert!((m.compute_ms - 1e11 / 30e9).abs() < 1e-9, "{m:?}");
        assert!((m.host_ms - 0.02).abs() < 1e-12);
        assert!((m.transfer_ms - 1.0).abs() < 1e-9);
        assert!((m.ms - (m.memory_ms + m.compute_ms + m.transfer_ms)).abs() < 1e-12);
        // A thousand small kernels: the host's queueing sets the time.
        let small = StepCost {
            kernels: (0..1000).map(|_| kernel(0.0, 1000)).collect(),
            ..StepCost::default()
        };
        let m = d.step(&small);
        assert!((m.ms - 10.0).abs() < 1e-9, "{m:?}");
    }

    /// Rows made by a known device are fitted back to its launch cost and bandwidth.
    #[test]
    fn the_fit_recovers_the_parameters_that_made_the_rows() {
        let _heap = crate::memory::heap_tests();
        let truth = device();
        let steps: Vec<StepCost> = [
            (10, 4_000_000_000u64),
            (2000, 50_000_000),
            (300, 900_000_000),
        ]
        .into_iter()
        .map(|(n, bytes)| StepCost {
            kernels: (0..n)
                .map(|i| kernel(if i == 0 { 1e10 } else { 0.0 }, bytes / n))
                .collect(),
            uploaded: 1_000_000,
            downloaded: 0,
        })
        .collect();
        let rows: Vec<(&StepCost, f64)> = steps.iter().map(|s| (s, truth.step(s).ms)).collect();
        let start = DeviceModel {
            bandwidth_gbs: 300.0,
            launch_us: 1.0,
            ..device()
        };
        let fitted = start.fit(&rows).expect("rows");
        assert!((fitted.launch_us / 10.0 - 1.0).abs() < 0.01, "{fitted:?}");
        assert!(
            (fitted.bandwidth_gbs / 1000.0 - 1.0).abs() < 0.01,
            "{fitted:?}"
        );
        assert_eq!(fitted.link_gbs, truth.link_gbs);
        // A bandwidth of its own for one workload, from its row alone.
        let slow = DeviceModel {
            bandwidth_gbs: 250.0,
            ..truth.clone()
        };
        let own = truth.per_workload("own", &[("slow", &steps[0], slow.step(&steps[0]).ms)]);
        assert!((own.for_workload("slow").bandwidth_gbs / 250.0 - 1.0).abs() < 0.01);
        assert_eq!(own.for_workload("other").bandwidth_gbs, truth.bandwidth_gbs);
    }
}
