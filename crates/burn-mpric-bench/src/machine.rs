//! What the machine the bench ran on is: CPU, cores, memory, OS, Vulkan drivers, load.

use crate::report::{self, Machine};

/// The logical cores available to the process.
pub(crate) fn cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

fn first_line_of(path: &str, key: &str) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines().find(|l| l.starts_with(key)).and_then(|l| {
        l.split_once([':', '='])
            .map(|(_, v)| v.trim().trim_matches('"').to_string())
    })
}

pub(crate) fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "unknown".into())
}

pub(crate) fn machine(load_at_start: String) -> Machine {
    let memory = first_line_of("/proc/meminfo", "MemTotal")
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map(|kib| report::bytes(kib * 1024))
        .unwrap_or_else(|| "unknown".into());
    // The driver manifests the Vulkan loader would read (the preflight's search).
    let vulkan_icds = burn_mpric_preflight::Vulkan::probe().driver_names();
    Machine {
        cpu: first_line_of("/proc/cpuinfo", "model name").unwrap_or_else(|| "unknown".into()),
        cores: cores(),
        memory,
        os: first_line_of("/etc/os-release", "PRETTY_NAME")
            .unwrap_or_else(|| std::env::consts::OS.into()),
        vulkan_icds,
        load_average: format!("{load_at_start} -> {}", load_average()),
    }
}
