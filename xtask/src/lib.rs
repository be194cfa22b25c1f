//! What the developer tasks share with the rest of the workspace: the Vulkan preflight
//! ([`vulkan`]), which `cargo xtask check` runs before the wgpu tests and the benchmark suite
//! (`mpric-bench`) before its wgpu rows, so that both give one reason and one fix.

pub mod vulkan;
