//! Weights out of Burn and back in: any module's float parameters written as a safetensors
//! file (which PyTorch, JAX, candle and Burn read) at a chosen dtype, through burn-store.
//!
//! Serving at half precision halves the weights' bytes. [`Export::for_policy`] writes at a
//! policy's compute dtype, the dtype its matmuls read; parameters that train at f32 are
//! rounded once, on the way out. Tensor names are the module paths (`layers.0.weight`), enum
//! variants left out. With [`Layout::PyTorch`] (the default) a `Linear` weight is written as
//! `[out, in]` and a norm's `gamma`/`beta` as `weight`/`bias`, as `torch.nn` names them;
//! [`Layout::Burn`] keeps Burn's `[in, out]`. The layout is recorded in the file's metadata.
//!
//! ```
//! use burn::backend::Flex;
//! use burn::nn::{Linear, LinearConfig};
//! use burn::tensor::FloatDType;
//! use burn_mpric::export::{Export, Layout, load_safetensors};
//!
//! let device = Default::default();
//! let linear: Linear<Flex> = LinearConfig::new(3, 2).init(&device);
//! let bytes = Export::new(FloatDType::F16).metadata("note", "a test").to_bytes(&linear)?;
//! assert_eq!(bytes.len() - header_len(&bytes), (3 * 2 + 2) * 2); // f16: 2 bytes a value
//!
//! let fresh: Linear<Flex> = LinearConfig::new(3, 2).init(&device);
//! let back = load_safetensors(fresh, &bytes, Layout::PyTorch, FloatDType::F32)?;
//! let (a, b) = (linear.weight.val().into_data(), back.weight.val().into_data());
//! a.assert_approx_eq::<f32>(&b, burn::tensor::Tolerance::absolute(1e-3));
//! # fn header_len(b: &[u8]) -> usize { 8 + u64::from_le_bytes(b[..8].try_into().unwrap()) as usize }
//! # Ok::<(), burn_mpric::export::ExportError>(())
//! ```

use std::path::Path;
use std::rc::Rc;

use burn::module::Module;
use burn::tensor::backend::Backend;
use burn::tensor::{DType, FloatDType};
use burn_mpric_core::ResolvedPolicy;
use burn_mpric_core::export::write_replacing;
pub use burn_mpric_core::export::{ExportError, Layout};
use burn_store::{
    BurnToPyTorchAdapter, IdentityAdapter, ModuleAdapter, ModuleSnapshot, PyTorchToBurnAdapter,
    SafetensorsStore, TensorSnapshot,
};

use crate::BurnDType;

/// How to write a module's weights: the dtype, the layout, and metadata.
///
/// ```
/// use burn::tensor::FloatDType;
/// use burn_mpric::export::Export;
///
/// let policy: burn_mpric::ResolvedPolicy = "mixed_bf16".parse().unwrap();
/// assert_eq!(Export::for_policy(policy).dtype(), FloatDType::BF16);
/// ```
#[derive(Debug, Clone)]
pub struct Export {
    dtype: FloatDType,
    layout: Layout,
    metadata: Vec<(String, String)>,
}

impl Export {
    /// Every float tensor written at `dtype`, in the PyTorch layout.
    pub fn new(dtype: FloatDType) -> Self {
        Self {
            dtype,
            layout: Layout::default(),
            metadata: Vec::new(),
        }
    }

    /// At the policy's compute dtype: what the model computes at when served.
    pub fn for_policy(policy: ResolvedPolicy) -> Self {
        Self::new(policy.compute().to_burn())
    }

    /// The dtype tensors are written at.
    pub fn dtype(&self) -> FloatDType {
        self.dtype
    }

    /// The layout to write.
    pub fn layout(mut self, layout: Layout) -> Self {
        self.layout = layout;
        self
    }

    /// A `key: value` pair for the file's metadata (safetensors keeps strings).
    pub fn metadata(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.metadata.push((key.into(), value.into()));
        self
    }

    /// The safetensors bytes of `module`'s float parameters.
    pub fn to_bytes<B: Backend, M: Module<B>>(&self, module: &M) -> Result<Vec<u8>, ExportError> {
        let dtype = match self.dtype {
            FloatDType::F32 | FloatDType::F16 | FloatDType::BF16 => DType::from(self.dtype),
            other => return Err(ExportError::Dtype(format!("{other:?}").to_lowercase())),
        };
        let cast = CastTo(dtype);
        let mut store = SafetensorsStore::from_bytes(None)
            .skip_enum_variants(true)
            .metadata("dtype", format!("{:?}", self.dtype).to_lowercase())
            .metadata("layout", self.layout.to_string());
        store = match self.layout {
            Layout::PyTorch => store.with_to_adapter(BurnToPyTorchAdapter.chain(cast)),
            Layout::Burn => store.with_to_adapter(IdentityAdapter.chain(cast)),
        };
        for (key, value) in &self.metadata {
            store = store.metadata(key.clone(), value.clone());
        }
        module
            .save_into(&mut store)
            .map_err(|e| ExportError::Store(e.to_string()))?;
        store
            .get_bytes()
            .map_err(|e| ExportError::Store(e.to_string()))
    }

    /// Writes `module`'s weights to `path`: into a temporary file beside it, then renamed,
    /// so that `path` is either the whole export or untouched.
    pub fn save<B: Backend, M: Module<B>>(
        &self,
        module: &M,
        path: &Path,
    ) -> Result<(), ExportError> {
        let bytes = self.to_bytes(module)?;
        write_replacing(path, &bytes)
    }
}

/// Loads safetensors bytes written by [`Export`] (or by PyTorch, in `Layout::PyTorch`) into
/// `module`, every float tensor cast to `dtype` (the dtype the module's parameters hold).
/// Every parameter of the module must be in the file, with its shape.
pub fn load_safetensors<B: Backend, M: Module<B>>(
    mut module: M,
    bytes: &[u8],
    layout: Layout,
    dtype: FloatDType,
) -> Result<M, ExportError> {
    let cast = CastTo(DType::from(dtype));
    let store = SafetensorsStore::from_bytes(Some(bytes.to_vec())).skip_enum_variants(true);
    let mut store = match layout {
        Layout::PyTorch => store.with_from_adapter(PyTorchToBurnAdapter.chain(cast)),
        Layout::Burn => store.with_from_adapter(IdentityAdapter.chain(cast)),
    };
    let result = module
        .load_from(&mut store)
        .map_err(|e| ExportError::Store(e.to_string()))?;
    if let Some(error) = result.errors.first() {
        return Err(ExportError::Mismatch(format!("{error:?}")));
    }
    if let Some((path, _)) = result.missing.first() {
        return Err(ExportError::Mismatch(format!(
            "no tensor `{path}` ({} of the module's tensors are missing)",
            result.missing.len()
        )));
    }
    Ok(module)
}

/// Casts every float tensor to one dtype, lazily (as the tensor is written or read).
#[derive(Debug, Clone)]
struct CastTo(DType);

impl ModuleAdapter for CastTo {
    fn adapt(&self, snapshot: &TensorSnapshot) -> TensorSnapshot {
        let target = self.0;
        if !snapshot.dtype.is_float() || snapshot.dtype == target {
            return snapshot.clone();
        }
        let data = snapshot.clone_data_fn();
        TensorSnapshot::from_closure(
            Rc::new(move || Ok(data()?.convert_dtype(target))),
            target,
            snapshot.shape.clone(),
            snapshot.path_stack.clone().unwrap_or_default(),
            snapshot.container_stack.clone().unwrap_or_default(),
            snapshot.tensor_id.unwrap_or_default(),
        )
    }

    fn clone_box(&self) -> Box<dyn ModuleAdapter> {
        Box::new(self.clone())
    }
}
