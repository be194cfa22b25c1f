//! What both editions' safetensors export share, with no Burn in it: the weights' layout,
//! the errors, and the file written whole or not at all. The exports themselves
//! (`burn_mpric::export`, `burn_mpric_022::export`) go through each release's burn-store.

use std::path::{Path, PathBuf};

/// How weights are laid out in the file.
///
/// ```
/// use burn_mpric_core::export::Layout;
///
/// assert_eq!(Layout::default().to_string(), "pytorch");
/// assert_eq!(Layout::Burn.to_string(), "burn");
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Layout {
    /// `torch.nn`'s: `Linear` weights `[out, in]` (`y = x Wᵀ + b`), norms' `weight`/`bias`.
    #[default]
    PyTorch,
    /// Burn's: `Linear` weights `[in, out]` (`y = x W + b`), norms' `gamma`/`beta`.
    Burn,
}

impl std::fmt::Display for Layout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Layout::PyTorch => "pytorch",
            Layout::Burn => "burn",
        })
    }
}

/// Why an export or import failed.
///
/// ```
/// use burn_mpric_core::export::ExportError;
///
/// let err = ExportError::Dtype("flex32".into());
/// assert!(err.to_string().contains("f32, f16 or bf16"));
/// ```
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// A dtype safetensors export does not write.
    #[error("cannot export at {0}: choose f32, f16 or bf16")]
    Dtype(String),
    /// burn-store refused the tensors or the bytes.
    #[error("{0}")]
    Store(String),
    /// The file could not be written or read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// The file does not hold the module's tensors.
    #[error("the file does not fit the module: {0}")]
    Mismatch(String),
}

/// Writes `bytes` to a temporary file beside `path`, then renames it to `path`: `path` is
/// either the whole new file or what it was before.
///
/// ```
/// use burn_mpric_core::export::write_replacing;
///
/// let path = std::env::temp_dir().join(format!("mpric-doc-replacing-{}", std::process::id()));
/// write_replacing(&path, b"weights")?;
/// assert_eq!(std::fs::read(&path).unwrap(), b"weights");
/// assert!(write_replacing("no/such/folder/w".as_ref(), b"x").is_err());
/// # std::fs::remove_file(&path).unwrap();
/// # Ok::<(), burn_mpric_core::export::ExportError>(())
/// ```
pub fn write_replacing(path: &Path, bytes: &[u8]) -> Result<(), ExportError> {
    let io = |source| ExportError::Io {
        path: path.to_path_buf(),
        source,
    };
    let name = path.file_name().ok_or_else(|| {
        io(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a file name",
        ))
    })?;
    let tmp = path.with_file_name(format!(".{}.tmp", name.to_string_lossy()));
    std::fs::write(&tmp, bytes).map_err(io)?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io(e)
    })
}
