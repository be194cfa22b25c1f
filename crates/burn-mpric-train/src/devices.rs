//! `mpric devices`: the GPU adapters wgpu finds and, for each, what a recipe's `[backend]`
//! gets there: the device index that selects it, the compiler this build's kernels go through,
//! the dtypes it runs and its matrix units (cooperative matrices, which cubecl's matmuls use
//! for f16 and bf16 where the compiler and the driver expose them).

use std::fmt::Write as _;

use burn::backend::wgpu::WgpuDevice;
use burn::tensor::DType;
use burn::tensor::backend::Backend;
use serde::Serialize;
use wgpu::DeviceType;

use crate::adapters::{NO_ADAPTER, compiler_of, default_adapter, list};
use crate::backend::{built_backends, start_guarded};
use crate::recipe::BackendName;

/// One adapter as `mpric devices` reports it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Adapter {
    /// The adapter's name (`NVIDIA H100`, `llvmpipe (LLVM 15.0.6, 256 bits)`).
    pub(crate) name: String,
    /// wgpu's device type: DiscreteGpu, IntegratedGpu, VirtualGpu, Cpu, Other.
    pub(crate) kind: String,
    /// The graphics API: Vulkan, Metal, Dx12.
    pub(crate) api: String,
    /// The driver and its version, as the driver reports them.
    pub(crate) driver: String,
    /// The `[backend] device` values that select this adapter (0: the default adapter;
    /// n ≥ 1: the n-th discrete GPU).
    pub(crate) indices: Vec<usize>,
    /// What a Burn device started on it offers; `None` when it could not start.
    pub(crate) offers: Option<Capabilities>,
    /// Why a Burn device could not start on it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) start_error: Option<String>,
}

/// What a started device offers.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Capabilities {
    /// The compiler this build's kernels go through on it: `wgsl`, `spirv` or `msl` (from the
    /// backend's own name, `cubecl<wgpu<spirv>>`).
    pub(crate) compiler: String,
    /// The float dtypes Burn runs on it, of f32, f16 and bf16.
    pub(crate) dtypes: Vec<&'static str>,
    /// Its matrix units as cubecl sees them: `A×B→C` element types of each cooperative
    /// matrix configuration, without repeats (empty: none).
    pub(crate) matrix_units: Vec<String>,
}

/// The adapters of this machine (Vulkan, Metal, DX12; GL is left out, as cubecl does), with
/// what each offers under this build.
pub(crate) fn adapters() -> Vec<Adapter> {
    let listed = list();
    let default = default_adapter();
    let mut ordinal_of_kind = std::collections::HashMap::<DeviceType, usize>::new();
    listed
        .into_iter()
        .map(|info| {
            let ordinal = {
                let next = ordinal_of_kind.entry(info.device_type).or_default();
                *next += 1;
                *next - 1
            };
            let mut indices = Vec::new();
            if default.as_ref() == Some(&info) {
                indices.push(0);
            }
            if info.device_type == DeviceType::DiscreteGpu {
                indices.push(ordinal + 1);
            }
            let device = match info.device_type {
                DeviceType::DiscreteGpu => WgpuDevice::DiscreteGpu(ordinal),
                DeviceType::IntegratedGpu => WgpuDevice::IntegratedGpu(ordinal),
                DeviceType::VirtualGpu => WgpuDevice::VirtualGpu(ordinal),
                DeviceType::Cpu => WgpuDevice::Cpu,
                DeviceType::Other => WgpuDevice::DiscreteGpu(ordinal),
            };
            let started = capabilities(device);
            Adapter {
                name: info.name.clone(),
                kind: format!("{:?}", info.device_type),
                api: format!("{:?}", info.backend),
                driver: [info.driver.as_str(), info.driver_info.as_str()]
                    .into_iter()
                    .filter(|s| !s.is_empty())
                    .collect::<Vec<_>>()
                    .join(" "),
                indices,
                start_error: started.as_ref().err().cloned(),
                offers: started.ok(),
            }
        })
        .collect()
}

fn capabilities(device: WgpuDevice) -> Result<Capabilities, String> {
    type W = burn::backend::Wgpu;
    start_guarded(|| {
        let name = W::name(&device);
        let compiler = compiler_of(&name).unwrap_or(&name).to_string();
        let dtypes = [
            ("f32", DType::F32),
            ("f16", DType::F16),
            ("bf16", DType::BF16),
        ]
        .into_iter()
        .filter(|&(_, dtype)| W::supports_dtype(&device, dtype))
        .map(|(name, _)| name)
        .collect();
        let client = <cubecl::wgpu::WgpuRuntime as cubecl::Runtime>::client(&device);
        let mut matrix_units: Vec<String> = client
            .properties()
            .features
            .matmul
            .cmma
            .iter()
            .map(|mma| format!("{}×{}→{}", mma.a_type, mma.b_type, mma.cd_type))
            .collect();
        matrix_units.dedup();
        Capabilities {
            compiler,
            dtypes,
            matrix_units,
        }
    })
}

/// The report: one block per adapter, then what this build offers and how to get the rest.
pub(crate) fn report(adapters: &[Adapter]) -> String {
    let mut text = String::new();
    if adapters.is_empty() {
        let _ = writeln!(text, "{NO_ADAPTER}");
    }
    for adapter in adapters {
        let indices = match adapter.indices.as_slice() {
            [] => "not selectable by index".to_string(),
            list => format!(
                "[backend] device = {}",
                list.iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(" or ")
            ),
        };
        let _ = writeln!(
            text,
            "{} ({}, {}; {indices})",
            adapter.name, adapter.kind, adapter.api
        );
        if !adapter.driver.is_empty() {
            let _ = writeln!(text, "  driver: {}", adapter.driver);
        }
        match (&adapter.offers, &adapter.start_error) {
            (Some(caps), _) => {
                let units = if caps.matrix_units.is_empty() {
                    "none".to_string()
                } else {
                    caps.matrix_units.join(", ")
                };
                let _ = writeln!(text, "  compiler: {}", caps.compiler);
                let _ = writeln!(text, "  dtypes: {}", caps.dtypes.join(", "));
                let _ = writeln!(text, "  matrix units: {units}");
                if let Some(advice) = advice(adapter, caps) {
                    let _ = writeln!(text, "  {advice}");
                }
            }
            (None, why) => {
                let why = why.as_deref().unwrap_or("unknown failure");
                let _ = writeln!(text, "  could not start: {why}");
            }
        }
    }
    let built: Vec<String> = built_backends().iter().map(ToString::to_string).collect();
    let _ = writeln!(text, "backends in this build: {}", built.join(", "));
    text
}

/// What to pick on this adapter, when this build leaves something on the table.
fn advice(adapter: &Adapter, caps: &Capabilities) -> Option<String> {
    let built = built_backends();
    match (adapter.api.as_str(), caps.compiler.as_str()) {
        ("Vulkan", "wgsl") if !built.contains(&BackendName::Vulkan) => Some(
            "SPIR-V (bf16 and matrix units where the driver has them): backend = \"vulkan\" in an mpric built with --features vulkan".into(),
        ),
        ("Metal", "wgsl") if !built.contains(&BackendName::Metal) => Some(
            "MSL (matrix units on Apple GPUs): backend = \"metal\" in an mpric built with --features metal".into(),
        ),
        ("Vulkan", "spirv") => Some(format!(
            "backend = \"vulkan\" (or \"wgpu\": one compiler per build){}",
            if caps.dtypes.contains(&"bf16") {
                ""
            } else {
                "; no bf16 here: the driver lacks VK_KHR_shader_bfloat16, use f16 policies"
            }
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn adapter(api: &str, compiler: &str, dtypes: Vec<&'static str>) -> Adapter {
        Adapter {
            name: "gpu".into(),
            kind: "DiscreteGpu".into(),
            api: api.into(),
            driver: String::new(),
            indices: vec![0, 1],
            offers: Some(Capabilities {
                compiler: compiler.into(),
                dtypes,
                matrix_units: vec!["f16×f16→f32".into()],
            }),
            start_error: None,
        }
    }

    #[test]
    fn the_report_names_how_to_select_each_adapter_and_what_it_offers() {
        let text = report(&[adapter("Vulkan", "spirv", vec!["f32", "f16"])]);
        assert!(text.starts_with("gpu (DiscreteGpu, Vulkan; [backend] device = 0 or 1)\n"));
        assert!(
            text.contains("  compiler: spirv\n  dtypes: f32, f16\n"),
            "{text}"
        );
        assert!(text.contains("  matrix units: f16×f16→f32\n"), "{text}");
        assert!(text.contains("no bf16 here"), "{text}");
    }

    #[test]
    fn a_vulkan_adapter_on_wgsl_is_told_how_to_get_spirv() {
        let text = report(&[adapter("Vulkan", "wgsl", vec!["f32", "f16"])]);
        assert_eq!(
            text.contains("--features vulkan"),
            !built_backends().contains(&BackendName::Vulkan),
            "{text}"
        );
        let none = report(&[]);
        assert!(none.starts_with("wgpu found no GPU adapter"), "{none}");
        assert!(none.contains("backends in this build: flex, ndarray, wgpu"));
    }
}
