//! The GPU backends by compiler: `mpric devices` against what wgpu itself reports, `backend =
//! "vulkan"` refused with the build command where this build lacks it, and, in a build with
//! the `vulkan` feature (`cargo xtask check` runs these tests once in one), the quickstart
//! trained on Burn's Wgpu compiled to SPIR-V, mixed f16 within 2% of f32.

use crate::common::{fresh_dir, run_ok};

/// The adapters as wgpu lists them, independently of `mpric`: name, graphics API, and whether
/// it offers f16 in shaders.
fn wgpu_adapters() -> Vec<(String, wgpu::Backend, bool)> {
    let mut descriptor = wgpu::InstanceDescriptor::new_without_display_handle();
    descriptor.backends = wgpu::Backends::PRIMARY;
    let instance = wgpu::Instance::new(descriptor);
    cubecl::future::block_on(instance.enumerate_adapters(wgpu::Backends::PRIMARY))
        .iter()
        .map(|adapter| {
            let info = adapter.get_info();
            let f16 = adapter.features().contains(wgpu::Features::SHADER_F16);
            (info.name, info.backend, f16)
        })
        .collect()
}

#[test]
fn devices_lists_every_adapter_with_the_compiler_of_this_build() {
    let dir = fresh_dir("devices");
    let json: serde_json::Value =
        serde_json::from_str(&run_ok(&dir, &["devices", "--json"])).unwrap();
    let reported = json.as_array().unwrap();
    let listed = wgpu_adapters();
    assert_eq!(reported.len(), listed.len(), "{json:#}");
    for ((name, api, f16), adapter) in listed.iter().zip(reported) {
        assert_eq!(adapter["name"], name.as_str());
        assert_eq!(adapter["api"], format!("{api:?}"));
        let offers = &adapter["offers"];
        assert!(offers.is_object(), "{adapter:#}");
        // cubecl compiles to SPIR-V on Vulkan only in a build with the feature.
        let compiler = match api {
            wgpu::Backend::Vulkan if cfg!(feature = "vulkan") => "spirv",
            wgpu::Backend::Metal if cfg!(feature = "metal") => "msl",
            _ => "wgsl",
        };
        assert_eq!(offers["compiler"], compiler, "{adapter:#}");
        let dtypes: Vec<&str> = offers["dtypes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_str().unwrap())
            .collect();
        assert_eq!(dtypes.contains(&"f16"), *f16, "{adapter:#}");
        assert!(dtypes.contains(&"f32"));
    }
    // The report names the device index of the default adapter.
    let text = run_ok(&dir, &["devices"]);
    if !listed.is_empty() {
        assert!(text.contains("[backend] device = 0"), "{text}");
    }
    assert!(
        text.contains("backends in this build: flex, ndarray, wgpu"),
        "{text}"
    );
}

#[cfg(not(feature = "vulkan"))]
#[test]
fn vulkan_without_the_feature_is_refused_with_the_build_command() {
    use crate::common::{run, small_recipe, write_recipe};

    let dir = fresh_dir("vulkan_not_built");
    let recipe = write_recipe(
        &dir,
        "vk.toml",
        &format!(
            "{}\n[backend]\nname = \"vulkan\"\n",
            small_recipe("steps = 2")
        ),
    );
    for command in ["check", "train"] {
        let out = run(&dir, &[command, recipe.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("backend.name: `vulkan` needs the `vulkan` cargo feature")
                && stderr.contains("--features vulkan")
                && stderr.contains("accepted in this build: flex, ndarray, wgpu"),
            "{stderr}"
        );
    }
    assert!(!dir.join("out").exists());
}

#[cfg(feature = "vulkan")]
#[test]
fn quickstart_on_vulkan_spirv_ends_within_two_percent_of_f32() {
    use crate::quickstart::final_losses_on;

    let dir = fresh_dir("quickstart_vulkan");
    let (mixed_first, mixed_last, _) = final_losses_on(&dir, "mixed", "mixed_f16", "vulkan");
    let (f32_first, f32_last, _) = final_losses_on(&dir, "full", "f32", "vulkan");
    eprintln!("vulkan: mixed_f16 {mixed_first} -> {mixed_last}; f32 {f32_first} -> {f32_last}");
    assert!(mixed_last < 0.9 * mixed_first && f32_last < 0.9 * f32_first);
    assert!(
        (mixed_last - f32_last).abs() <= 0.02 * f32_last,
        "mixed_f16 {mixed_last} vs f32 {f32_last}"
    );
    // The SPIR-V compiler ran: a Vulkan adapter's compiler in this build.
    let devices = run_ok(&dir, &["devices"]);
    assert!(devices.contains("compiler: spirv"), "{devices}");
}
