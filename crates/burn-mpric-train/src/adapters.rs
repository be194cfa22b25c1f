//! The GPU adapters wgpu finds, as cubecl's device selection sees them, and the wgpu device a
//! recipe's `[backend] device` index names.

use crate::error::RecipeError;

/// Why wgpu has nothing to run on, and what to install.
pub(crate) const NO_ADAPTER: &str = "wgpu found no GPU adapter: no Vulkan (or Metal/DX12) driver is installed; install the GPU's driver, or mesa-vulkan-drivers for a software one";

/// The backends cubecl uses (Vulkan, Metal, DX12); GL is left out, its EGL probe prints to
/// stderr on machines without a display.
fn instance() -> wgpu::Instance {
    let mut descriptor = wgpu::InstanceDescriptor::new_without_display_handle();
    descriptor.backends = wgpu::Backends::PRIMARY;
    wgpu::Instance::new(descriptor)
}

/// The adapters wgpu lists, as cubecl's device selection sees them.
pub(crate) fn list() -> Vec<wgpu::AdapterInfo> {
    cubecl::future::block_on(instance().enumerate_adapters(wgpu::Backends::PRIMARY))
        .iter()
        .map(|adapter| adapter.get_info())
        .collect()
}

/// The adapter `WgpuDevice::DefaultDevice` starts on: wgpu's high-performance choice.
pub(crate) fn default_adapter() -> Option<wgpu::AdapterInfo> {
    cubecl::future::block_on(instance().request_adapter(&wgpu::RequestAdapterOptions {
        power_preference: wgpu::PowerPreference::HighPerformance,
        force_fallback_adapter: false,
        compatible_surface: None,
    }))
    .ok()
    .map(|adapter| adapter.get_info())
}

/// The wgpu device of a recipe's index, after checking that the machine has it: 0 is the
/// default adapter, n ≥ 1 the n-th discrete GPU (as cubecl counts them). cubecl panics in a
/// worker thread on a device that does not exist; this names what is there instead.
pub(crate) fn wgpu_device(index: usize) -> Result<burn::backend::wgpu::WgpuDevice, RecipeError> {
    use burn::backend::wgpu::WgpuDevice;
    use wgpu::DeviceType;

    let adapters = list();
    if adapters.is_empty() {
        return Err(RecipeError::new(
            "backend.name",
            format!("{NO_ADAPTER}, or use backend `flex`"),
        ));
    }
    let Some(n) = index.checked_sub(1) else {
        return Ok(WgpuDevice::DefaultDevice);
    };
    let count = |kind: DeviceType| adapters.iter().filter(|a| a.device_type == kind).count();
    // cubecl takes the n-th discrete GPU, or else the n-th adapter of type "other".
    if n < count(DeviceType::DiscreteGpu) || n < count(DeviceType::Other) {
        return Ok(WgpuDevice::DiscreteGpu(n));
    }
    let found: Vec<String> = adapters
        .iter()
        .map(|a| format!("{} ({:?})", a.name, a.device_type))
        .collect();
    let gpus = match count(DeviceType::DiscreteGpu) {
        0 => "there is no discrete GPU".to_string(),
        d => format!("1..={d} are the discrete GPUs"),
    };
    Err(RecipeError::new(
        "backend.device",
        format!(
            "wgpu has no device {index}: 0 is the default adapter, {gpus}; this machine has {}",
            found.join(", ")
        ),
    ))
}

/// The compiler a cube backend's name says its kernels go through: `spirv` in
/// `cubecl<wgpu<spirv>>` (also under a decorator, `mixed_precision<cubecl<wgpu<wgsl>>>`);
/// `None` for a backend that is not wgpu.
pub(crate) fn compiler_of(backend_name: &str) -> Option<&str> {
    let (_, rest) = backend_name.rsplit_once("wgpu<")?;
    rest.split('>').next()
}

#[cfg(test)]
mod tests {
    use super::compiler_of;

    #[test]
    fn the_compiler_is_read_from_the_backends_name() {
        assert_eq!(compiler_of("cubecl<wgpu<spirv>>"), Some("spirv"));
        assert_eq!(
            compiler_of("mixed_precision<cubecl<wgpu<wgsl>>>"),
            Some("wgsl")
        );
        assert_eq!(compiler_of("flex"), None);
    }
}
