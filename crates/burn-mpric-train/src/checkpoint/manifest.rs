//! The manifest of a checkpoint: the size and SHA-256 of every file, and the layout (tensor
//! names, shapes, dtypes) of the model and optimizer records. `--resume` checks a checkpoint
//! against it before anything is loaded.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::checkpoint::record_layout::{RecordTensor, record_tensors};
use crate::data::source::read_limited;
pub use crate::digest::FileDigest;

/// The manifest's file name inside a checkpoint folder.
///
/// ```
/// assert_eq!(burn_mpric_train::checkpoint::manifest::MANIFEST_FILE, "manifest.json");
/// ```
pub const MANIFEST_FILE: &str = "manifest.json";

/// The largest manifest read (a manifest lists a few files and one line per tensor).
///
/// ```
/// assert_eq!(burn_mpric_train::checkpoint::manifest::MAX_MANIFEST_BYTES, 16 << 20);
/// ```
pub const MAX_MANIFEST_BYTES: u64 = 16 << 20;

/// What a checkpoint folder must hold.
///
/// ```
/// use burn_mpric_train::checkpoint::manifest::Manifest;
///
/// let dir = std::env::temp_dir().join(format!("mpric-doc-manifest-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// std::fs::write(dir.join("state.mpk"), b"state").unwrap();
/// let manifest = Manifest::new(7, &[("state.mpk", b"state".as_slice())], None)?;
/// assert_eq!(manifest.read_file(&dir, "state.mpk")?, b"state");
///
/// std::fs::write(dir.join("state.mpk"), b"other").unwrap();
/// let err = manifest.read_file(&dir, "state.mpk").unwrap_err();
/// assert_eq!(err, "state.mpk: content differs from the manifest (SHA-256 mismatch)");
/// # std::fs::remove_dir_all(&dir).unwrap();
/// # Ok::<(), String>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// The step the checkpoint was written after.
    pub step: u64,
    /// Every file of the checkpoint besides the manifest.
    pub files: BTreeMap<String, FileDigest>,
    /// The tensors of the model record.
    pub model: Vec<RecordTensor>,
    /// The tensors of the optimizer record (paths start with the parameter id).
    pub optimizer: Vec<RecordTensor>,
    /// The content of the user's data files the run trains on (none for bundled data): a
    /// resumed run refuses data that changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dataset: Option<FileDigest>,
}

/// The model and optimizer records whose layouts a manifest lists.
pub type Records<'a> = (&'a [u8], &'a [u8]);

impl Manifest {
    /// A manifest of `files` (name, content), with the layouts of the model and optimizer
    /// records when given.
    ///
    /// ```
    /// use burn_mpric_train::checkpoint::manifest::Manifest;
    ///
    /// let manifest = Manifest::new(1, &[("a", b"1".as_slice()), ("b", b"22".as_slice())], None)?;
    /// assert_eq!(manifest.files["b"].bytes, 2);
    /// assert!(Manifest::new(1, &[], Some((b"x".as_slice(), b"y".as_slice()))).is_err());
    /// # Ok::<(), String>(())
    /// ```
    pub fn new(
        step: u64,
        files: &[(&str, &[u8])],
        records: Option<Records>,
    ) -> Result<Self, String> {
        let (model, optimizer) = match records {
            Some((model, optimizer)) => (
                record_tensors(model).map_err(|e| format!("model record: {e}"))?,
                record_tensors(optimizer).map_err(|e| format!("optimizer record: {e}"))?,
            ),
            None => (Vec::new(), Vec::new()),
        };
        Ok(Self {
            step,
            files: files
                .iter()
                .map(|(name, content)| (name.to_string(), FileDigest::of(content)))
                .collect(),
            model,
            optimizer,
            dataset: None,
        })
    }

    /// Reads the manifest of a checkpoint folder.
    ///
    /// ```
    /// use burn_mpric_train::checkpoint::manifest::Manifest;
    ///
    /// let err = Manifest::read("no/such/checkpoint".as_ref()).unwrap_err();
    /// assert!(err.starts_with("manifest.json: missing"), "{err}");
    /// ```
    pub fn read(dir: &Path) -> Result<Self, String> {
        let path = dir.join(MANIFEST_FILE);
        if path.exists() && !path.is_file() {
            return Err(format!("{MANIFEST_FILE}: not a regular file"));
        }
        let text = read_limited(&path, MAX_MANIFEST_BYTES).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                format!("{MANIFEST_FILE}: missing (an incomplete checkpoint, or one written by an older version)")
            } else {
                format!("{MANIFEST_FILE}: {e}")
            }
        })?;
        serde_json::from_slice(&text)
            .map_err(|e| format!("{MANIFEST_FILE}: not a valid manifest: {e}"))
    }

    /// The manifest as the JSON written to disk.
    ///
    /// ```
    /// use burn_mpric_train::checkpoint::manifest::Manifest;
    ///
    /// let manifest = Manifest::new(3, &[], None)?;
    /// assert!(manifest.to_json().contains("\"step\": 3"));
    /// # Ok::<(), String>(())
    /// ```
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// Reads file `name` of the checkpoint folder `dir`, checking its size and hash against the
    /// manifest (a file that the manifest does not list is refused). Never reads more than the
    /// manifest's size plus one byte.
    pub fn read_file(&self, dir: &Path, name: &str) -> Result<Vec<u8>, String> {
        let expected = self
            .files
            .get(name)
            .ok_or_else(|| format!("{name}: not listed in the manifest"))?;
        let path = dir.join(name);
        let meta = std::fs::metadata(&path).map_err(|e| format!("{name}: {e}"))?;
        if !meta.is_file() {
            return Err(format!("{name}: not a regular file"));
        }
        let content = read_limited(&path, expected.bytes).map_err(|e| format!("{name}: {e}"))?;
        if content.len() as u64 != expected.bytes {
            return Err(format!(
                "{name}: {} bytes where the manifest says {} (truncated or replaced)",
                content.len(),
                expected.bytes
            ));
        }
        if FileDigest::of(&content).sha256 != expected.sha256 {
            return Err(format!(
                "{name}: content differs from the manifest (SHA-256 mismatch)"
            ));
        }
        Ok(content)
    }
}

/// Checks that a record's tensors are the tensors a module expects: the same names, shapes and
/// dtypes, in the same order. `what` names the record in messages.
///
/// ```
/// use burn_mpric_train::checkpoint::manifest::same_layout;
/// use burn_mpric_train::checkpoint::record_layout::RecordTensor;
///
/// let t = |path: &str, shape: Vec<u64>| RecordTensor { path: path.into(), id: None, shape, dtype: "F32".into() };
/// let expected = [t("w", vec![4, 8]), t("b", vec![8])];
/// assert!(same_layout(&expected, &expected, "model.mpk").is_ok());
/// let err = same_layout(&[t("w", vec![4, 2]), t("b", vec![2])], &expected, "model.mpk").unwrap_err();
/// assert_eq!(err, "model.mpk: `w` is [4, 2] F32 where the recipe's model has [4, 8] F32");
/// let err = same_layout(&[t("w", vec![4, 8])], &expected, "model.mpk").unwrap_err();
/// assert_eq!(err, "model.mpk: lacks `b` [8] F32 of the recipe's model");
/// ```
pub fn same_layout(
    found: &[RecordTensor],
    expected: &[RecordTensor],
    what: &str,
) -> Result<(), String> {
    for (i, want) in expected.iter().enumerate() {
        let Some(got) = found.get(i) else {
            return Err(format!(
                "{what}: lacks `{}` {:?} {} of the recipe's model",
                want.path, want.shape, want.dtype
            ));
        };
        if got.path != want.path {
            return Err(format!(
                "{what}: holds `{}` where the recipe's model has `{}`",
                got.path, want.path
            ));
        }
        if got.shape != want.shape || got.dtype != want.dtype {
            return Err(format!(
                "{what}: `{}` is {:?} {} where the recipe's model has {:?} {}",
                got.path, got.shape, got.dtype, want.shape, want.dtype
            ));
        }
    }
    if let Some(extra) = found.get(expected.len()) {
        return Err(format!(
            "{what}: holds `{}` {:?}, which the recipe's model does not have",
            extra.path, extra.shape
        ));
    }
    Ok(())
}

/// Checks that every tensor of an optimizer record is state of a parameter of `model` (its
/// path starts with that parameter's id) with the parameter's shape, or flat with its number
/// of elements (the device path's optimizer, `sync_every`), or a one-element scalar of that
/// state (the low-precision and device-path optimizers keep Adam's step count as the betas'
/// powers).
///
/// ```
/// use burn_mpric_train::checkpoint::manifest::optimizer_fits;
/// use burn_mpric_train::checkpoint::record_layout::RecordTensor;
///
/// let t = |path: &str, id: Option<&str>, shape: Vec<u64>| RecordTensor {
///     path: path.into(), id: id.map(Into::into), shape, dtype: "F32".into(),
/// };
/// let model = [t("w", Some("p1"), vec![4, 8])];
/// assert!(optimizer_fits(&[t("p1.Rank2.moment_1", None, vec![4, 8])], &model).is_ok());
/// assert!(optimizer_fits(&[t("p1.V1.Rank2.scalars.0", None, vec![1])], &model).is_ok());
/// assert!(optimizer_fits(&[t("p1.0", None, vec![32])], &model).is_ok());
/// assert!(optimizer_fits(&[t("p1.0", None, vec![31])], &model).is_err());
/// assert!(optimizer_fits(&[t("p1.Rank2.moment_1", None, vec![8, 4])], &model).is_err());
/// let err = optimizer_fits(&[t("p9.Rank2.moment_1", None, vec![4, 8])], &model).unwrap_err();
/// assert!(err.contains("parameter p9, which the model does not have"), "{err}");
/// ```
pub fn optimizer_fits(optimizer: &[RecordTensor], model: &[RecordTensor]) -> Result<(), String> {
    for state in optimizer {
        let id = state.path.split('.').next().unwrap_or_default();
        let Some(param) = model.iter().find(|p| p.id.as_deref() == Some(id)) else {
            return Err(format!(
                "optimizer.mpk: holds state for parameter {id}, which the model does not have (an optimizer record of another run?)"
            ));
        };
        let flat = [param.shape.iter().product::<u64>()];
        if state.shape != param.shape && state.shape != flat && state.shape != [1] {
            return Err(format!(
                "optimizer.mpk: state `{}` is {:?} but its parameter `{}` is {:?}",
                state.path, state.shape, param.path, param.shape
            ));
        }
    }
    Ok(())
}
