//! Whether wgpu has an adapter on this machine, asked before a wgpu device is started: without
//! one, cubecl panics in a worker thread and the probe saw only a closed channel. The reason
//! and the fix are the Vulkan preflight's (burn-mpric-preflight), which `cargo xtask check`
//! gives too.

use burn_mpric_preflight::Vulkan;

/// What needs an adapter, as the preflight's message names it.
pub const WGPU_ROWS: &str = "the wgpu rows";

/// The number of wgpu adapters on the backends cubecl uses (Vulkan, Metal, DX12; GL is left
/// out, its EGL probe prints to stderr on machines without a display).
fn adapter_count() -> usize {
    let mut descriptor = wgpu::InstanceDescriptor::new_without_display_handle();
    descriptor.backends = wgpu::Backends::PRIMARY;
    let instance = wgpu::Instance::new(descriptor);
    cubecl::future::block_on(instance.enumerate_adapters(wgpu::Backends::PRIMARY)).len()
}

/// Why the wgpu rows cannot run when wgpu listed `adapters` adapters, in one line with the
/// fix (what `vulkan` lacks, or drivers that gave no adapter); `None` when there is one.
pub fn unavailable(adapters: usize, vulkan: &Vulkan) -> Option<String> {
    (adapters == 0).then(|| vulkan.no_adapter().message(WGPU_ROWS))
}

/// [`unavailable`] on this machine.
pub fn wgpu_unavailable() -> Option<String> {
    let adapters = crate::guard::guarded(adapter_count).unwrap_or(0);
    unavailable(adapters, &Vulkan::probe())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine(loader: bool, manifests: &[&str]) -> Vulkan {
        Vulkan {
            searched: true,
            loader,
            driver_files: None,
            manifests: manifests.iter().map(Into::into).collect(),
        }
    }

    #[test]
    fn an_adapter_is_enough() {
        assert_eq!(unavailable(1, &machine(false, &[])), None);
    }

    #[test]
    fn no_adapters_become_one_line_with_the_reason_and_the_fix() {
        let no_loader = unavailable(0, &machine(false, &[])).unwrap();
        assert!(
            no_loader.starts_with("no Vulkan loader (libvulkan.so.1)"),
            "{no_loader}"
        );

        let no_driver = unavailable(0, &machine(true, &[])).unwrap();
        assert!(
            no_driver.starts_with("no Vulkan driver on this machine"),
            "{no_driver}"
        );

        let icd = "/usr/share/vulkan/icd.d/lvp_icd.x86_64.json";
        let silent = unavailable(0, &machine(true, &[icd])).unwrap();
        assert!(silent.contains("(lvp_icd.x86_64.json)"), "{silent}");

        let listed = Vulkan {
            driver_files: Some(("VK_ICD_FILENAMES".into(), "/nonexistent".into())),
            ..machine(true, &[])
        };
        let listed = unavailable(0, &listed).unwrap();
        assert!(listed.contains("VK_ICD_FILENAMES=/nonexistent"), "{listed}");

        for message in [no_loader, no_driver, silent, listed] {
            assert!(!message.contains('\n'), "{message}");
            assert!(message.contains("the wgpu rows need one: "), "{message}");
            assert!(
                message.contains("apt-get install -y mesa-vulkan-drivers"),
                "{message}"
            );
        }
    }
}
