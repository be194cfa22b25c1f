//! Backend dispatch: from the recipe's backend name to a generic function over Burn's
//! `Backend`, and the [`MixedPrecision`] device that checks the policy against it.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;

use burn::tensor::backend::Backend;
use burn_mpric::{
    MixedPrecision, MpDevice, MpSettings, Policy, PolicyError, ResolvedPolicy, dtype_name,
};

use crate::adapters::{compiler_of, wgpu_device};
use crate::error::RecipeError;
use crate::recipe::{BackendConfig, BackendName};

/// Work generic over the backend; [`dispatch`] picks the backend at run time.
pub trait BackendTask {
    /// What the task returns.
    type Output;
    /// Runs on backend `B` with the inner device `device`.
    fn run<B: Backend>(self, device: B::Device, backend: BackendName) -> Self::Output;

    /// Runs on backend `B` with every device of the recipe, the main one first (never
    /// empty). By default, runs on the main device only.
    fn run_on<B: Backend>(self, devices: Vec<B::Device>, backend: BackendName) -> Self::Output
    where
        Self: Sized,
    {
        let main = devices.into_iter().next().unwrap_or_default();
        self.run::<B>(main, backend)
    }
}

/// Runs `task` on the backend and device a recipe names.
///
/// Device indices: the CPU backends have one device (0); for wgpu, vulkan and metal, 0 is the
/// default adapter and n ≥ 1 the n-th discrete GPU; for cuda, the GPU index.
pub fn dispatch<T: BackendTask>(spec: &BackendConfig, task: T) -> Result<T::Output, RecipeError> {
    check_built(spec.name)?;
    let indices = spec.device_list();
    let field = if spec.devices.is_some() {
        "backend.devices"
    } else {
        "backend.device"
    };
    let cpu_only = |name: BackendName| match indices.iter().find(|i| **i != 0) {
        None => Ok(()),
        Some(i) => Err(RecipeError::new(
            field,
            format!("{name} has one device, 0; got {i}"),
        )),
    };
    let all = |device| vec![device; indices.len()];
    let wgpu_devices = || {
        indices
            .iter()
            .map(|i| {
                wgpu_device(*i).map_err(|e| match e.field.as_str() {
                    "backend.device" => RecipeError::new(field, e.message),
                    _ => e,
                })
            })
            .collect::<Result<Vec<_>, _>>()
    };
    match spec.name {
        BackendName::Flex => {
            cpu_only(spec.name)?;
            Ok(task.run_on::<burn::backend::Flex>(all(Default::default()), spec.name))
        }
        BackendName::NdArray => {
            cpu_only(spec.name)?;
            Ok(task.run_on::<burn::backend::NdArray>(
                vec![burn::backend::ndarray::NdArrayDevice::Cpu; indices.len()],
                spec.name,
            ))
        }
        BackendName::Wgpu => Ok(task.run_on::<burn::backend::Wgpu>(wgpu_devices()?, spec.name)),
        BackendName::Vulkan => vulkan(wgpu_devices()?, task),
        BackendName::Metal => metal(wgpu_devices()?, task),
        BackendName::Cuda => cuda(spec, task),
    }
}

#[cfg(feature = "cuda")]
fn cuda<T: BackendTask>(spec: &BackendConfig, task: T) -> Result<T::Output, RecipeError> {
    let devices = spec
        .device_list()
        .into_iter()
        .map(burn::backend::cuda::CudaDevice::new)
        .collect();
    Ok(task.run_on::<burn::backend::Cuda>(devices, spec.name))
}

#[cfg(not(feature = "cuda"))]
fn cuda<T: BackendTask>(_spec: &BackendConfig, _task: T) -> Result<T::Output, RecipeError> {
    Err(not_built(BackendName::Cuda))
}

/// Burn's Wgpu compiled to SPIR-V: the same type as `Wgpu` (the compiler is chosen per build).
#[cfg(feature = "vulkan")]
fn vulkan<T: BackendTask>(
    devices: Vec<burn::backend::wgpu::WgpuDevice>,
    task: T,
) -> Result<T::Output, RecipeError> {
    Ok(task.run_on::<burn::backend::Vulkan>(devices, BackendName::Vulkan))
}

#[cfg(not(feature = "vulkan"))]
fn vulkan<T: BackendTask>(
    _devices: Vec<burn::backend::wgpu::WgpuDevice>,
    _task: T,
) -> Result<T::Output, RecipeError> {
    Err(not_built(BackendName::Vulkan))
}

/// Burn's Wgpu compiled to MSL, on Apple GPUs.
#[cfg(feature = "metal")]
fn metal<T: BackendTask>(
    devices: Vec<burn::backend::wgpu::WgpuDevice>,
    task: T,
) -> Result<T::Output, RecipeError> {
    Ok(task.run_on::<burn::backend::Metal>(devices, BackendName::Metal))
}

#[cfg(not(feature = "metal"))]
fn metal<T: BackendTask>(
    _devices: Vec<burn::backend::wgpu::WgpuDevice>,
    _task: T,
) -> Result<T::Output, RecipeError> {
    Err(not_built(BackendName::Metal))
}

/// The backends this build of `mpric` runs, in the order the recipe help lists them.
pub(crate) fn built_backends() -> Vec<BackendName> {
    [
        (BackendName::Flex, true),
        (BackendName::NdArray, true),
        (BackendName::Wgpu, true),
        (BackendName::Vulkan, cfg!(feature = "vulkan")),
        (BackendName::Metal, cfg!(feature = "metal")),
        (BackendName::Cuda, cfg!(feature = "cuda")),
    ]
    .into_iter()
    .filter_map(|(name, built)| built.then_some(name))
    .collect()
}

/// Refuses a backend this build of `mpric` was compiled without, with the feature and the
/// command that builds it.
pub(crate) fn check_built(name: BackendName) -> Result<(), RecipeError> {
    if built_backends().contains(&name) {
        Ok(())
    } else {
        Err(not_built(name))
    }
}

/// The error for a backend this build of `mpric` was compiled without: the feature and the
/// command that builds it.
fn not_built(name: BackendName) -> RecipeError {
    let built: Vec<String> = built_backends().iter().map(ToString::to_string).collect();
    RecipeError::new(
        "backend.name",
        format!(
            "`{name}` needs the `{name}` cargo feature of burn-mpric-train (cargo run --release -p burn-mpric-train --features {name} --bin mpric -- ...); accepted in this build: {}",
            built.join(", ")
        ),
    )
}

/// The compiler a backend name promises, as cubecl names it in the backend's name
/// (`cubecl<wgpu<spirv>>`): a Vulkan or Metal run on an adapter of another graphics API
/// would compile to WGSL without a word.
fn promised_compiler(backend: BackendName) -> Option<&'static str> {
    match backend {
        BackendName::Vulkan => Some("spirv"),
        BackendName::Metal => Some("msl"),
        _ => None,
    }
}

/// Device start-up can panic inside a backend (no adapter, no driver); the panic hook is
/// swapped while it runs, one start-up at a time.
static START_LOCK: Mutex<()> = Mutex::new(());

/// The mixed-precision device running `policy` on `inner`; a policy the device cannot run is
/// an error naming the `policy` field and the dtypes the backend supports, and a backend
/// that fails to start is an error naming `backend.name`.
pub fn mp_device<B: Backend>(
    inner: B::Device,
    settings: impl Into<MpSettings>,
    backend: BackendName,
) -> Result<MpDevice<B>, RecipeError> {
    let settings = settings.into();
    let policy = settings.policy();
    let inner_for_name = inner.clone();
    let result = start_guarded(|| MixedPrecision::<B>::device(inner, settings));
    match result {
        Ok(Ok(device)) => match promised_compiler(backend) {
            Some(compiler) => {
                let name = B::name(&inner_for_name);
                if compiler_of(&name) == Some(compiler) {
                    Ok(device)
                } else {
                    Err(RecipeError::new(
                        "backend.name",
                        format!(
                            "`{backend}` compiles kernels to {compiler}, but this adapter runs {name}: {backend} needs a {backend} adapter (`mpric devices` lists them); use backend `wgpu`"
                        ),
                    ))
                }
            }
            None => Ok(device),
        },
        Ok(Err(PolicyError::UnsupportedByDevice {
            slot,
            dtype,
            supported,
        })) => {
            let supported: Vec<&str> = supported.into_iter().map(dtype_name).collect();
            Err(RecipeError::new(
                "policy",
                format!(
                    "`{policy}` cannot run on {backend}: its {slot} dtype {} is not supported; {backend} supports {}",
                    dtype_name(dtype),
                    supported.join(", ")
                ),
            ))
        }
        Ok(Err(err)) => Err(RecipeError::new("policy", err.to_string())),
        Err(message) => Err(RecipeError::new(
            "backend.name",
            format!("{backend} could not start its device: {message}"),
        )),
    }
}

/// Runs `start` (a device start-up, which can panic inside a backend: no adapter, no driver)
/// with the panic hook silenced, one start-up at a time; a panic becomes the first line of
/// its message.
pub(crate) fn start_guarded<T>(start: impl FnOnce() -> T) -> Result<T, String> {
    let _guard = START_LOCK
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let result = catch_unwind(AssertUnwindSafe(start));
    std::panic::set_hook(hook);
    result.map_err(|panic| {
        let message = panic
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| panic.downcast_ref::<&str>().copied())
            .unwrap_or("unknown failure");
        message.lines().next().unwrap_or_default().to_string()
    })
}

/// Starts a device of the backend with `policy` and returns the policy as it resolves there
/// (`half` becomes f16 or bf16) and the backend's own name, which says what its kernels are
/// compiled to (`cubecl<wgpu<spirv>>`): what `mpric check` and `mpric policy` ask of a
/// backend.
pub struct ResolvePolicy(pub Policy);

impl BackendTask for ResolvePolicy {
    type Output = Result<(ResolvedPolicy, String), RecipeError>;

    fn run<B: Backend>(self, device: B::Device, backend: BackendName) -> Self::Output {
        let name = device.clone();
        mp_device::<B>(device, self.0, backend).map(|d| (d.policy(), B::name(&name)))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_task_runs_on_the_named_backend() {
        use crate::backend::{BackendTask, dispatch};
        use crate::recipe::{BackendConfig, BackendName};
        use burn::tensor::backend::Backend;

        struct Name;
        impl BackendTask for Name {
            type Output = String;
            fn run<B: Backend>(self, _device: B::Device, backend: BackendName) -> String {
                format!("{backend}: {}", B::name(&Default::default()))
            }
        }
        let out = dispatch(&BackendConfig::default(), Name).unwrap();
        assert!(out.starts_with("flex"));
    }

    #[test]
    fn a_device_the_backend_lacks_is_a_field_error() {
        use crate::backend::{BackendTask, dispatch};
        use crate::recipe::{BackendConfig, BackendName};
        use burn::tensor::backend::Backend;

        struct One;
        impl BackendTask for One {
            type Output = usize;
            fn run<B: Backend>(self, _device: B::Device, _backend: BackendName) -> usize {
                1
            }
        }
        let spec = BackendConfig {
            name: BackendName::NdArray,
            ..BackendConfig::default()
        };
        assert_eq!(dispatch(&spec, One).unwrap(), 1);
        let bad = BackendConfig {
            device: 3,
            ..BackendConfig::default()
        };
        assert_eq!(dispatch(&bad, One).unwrap_err().field, "backend.device");
    }

    #[test]
    fn a_policy_the_device_cannot_run_names_the_policy_field() {
        use crate::backend::mp_device;
        use crate::recipe::BackendName;
        use burn::backend::NdArray;

        let policy: burn_mpric::Policy = "mixed_f16".parse().unwrap();
        let err =
            mp_device::<NdArray>(Default::default(), policy, BackendName::NdArray).unwrap_err();
        assert_eq!(err.field, "policy");
        assert!(err.message.contains("ndarray supports f64, f32"), "{err}");
    }

    #[test]
    fn half_resolves_to_what_the_device_runs() -> Result<(), crate::RecipeError> {
        use crate::backend::{ResolvePolicy, dispatch};
        use crate::recipe::{BackendConfig, BackendName};

        let spec = BackendConfig {
            name: BackendName::Flex,
            device: 0,
            devices: None,
        };
        let (resolved, name) = dispatch(&spec, ResolvePolicy("c=half".parse().unwrap()))??;
        assert_eq!(resolved.to_string(), "p=f32,c=bf16,o=bf16");
        assert_eq!(
            name,
            <burn::backend::Flex as burn::tensor::backend::Backend>::name(&Default::default())
        );
        Ok(())
    }
}
