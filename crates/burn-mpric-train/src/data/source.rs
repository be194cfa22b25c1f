//! Reading the user's data files: where a recipe's path points, bounded reads (a file far
//! larger than memory is refused before it is read), and the content hash a checkpoint
//! records so that `--resume` refuses data that changed.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::digest::FileDigest;
use crate::error::RecipeError;

/// The largest CSV or text file a recipe reads. Data is held in memory (as f32 features or
/// u32 tokens, besides the file's own bytes while it is parsed); larger data wants a
/// streaming loader of its own.
pub const MAX_DATA_FILE_BYTES: u64 = 1 << 30;

/// A recipe's data path, resolved: relative paths start at the recipe file's folder.
pub fn resolve(base: &Path, path: &Path) -> PathBuf {
    if path.is_absolute() {
        path.to_path_buf()
    } else {
        base.join(path)
    }
}

/// An error on `dataset.path` that names the file.
pub fn file_error(path: &Path, message: impl std::fmt::Display) -> RecipeError {
    RecipeError::new("dataset.path", format!("{}: {message}", path.display()))
}

/// Why `path` cannot be opened, with a hint when a relative path would have been found from
/// the working directory instead of the recipe's folder.
fn open_error(path: &Path, written: &Path, base: &Path, err: std::io::Error) -> RecipeError {
    let hint = if written.is_relative() && base != Path::new("") && written.exists() {
        format!(
            " (relative paths are read from the recipe's folder, {}; {} exists from the working directory: write it relative to the recipe, or give its full path)",
            base.display(),
            written.display()
        )
    } else {
        String::new()
    };
    file_error(path, format!("cannot read it: {err}{hint}"))
}

/// The whole content of the file `written` (resolved against `base`), at most
/// [`MAX_DATA_FILE_BYTES`], and its digest.
pub fn read_file(
    base: &Path,
    written: &Path,
) -> Result<(PathBuf, Vec<u8>, FileDigest), RecipeError> {
    let path = resolve(base, written);
    let meta = std::fs::metadata(&path).map_err(|e| open_error(&path, written, base, e))?;
    if meta.is_dir() {
        return Err(file_error(&path, "is a folder, not a file"));
    }
    if meta.len() > MAX_DATA_FILE_BYTES {
        return Err(too_large(&path, meta.len(), true));
    }
    // Bounded even when the size on disk says nothing (pipes, devices, a growing file).
    let bytes = read_limited(&path, MAX_DATA_FILE_BYTES)
        .map_err(|e| open_error(&path, written, base, e))?;
    if bytes.len() as u64 > MAX_DATA_FILE_BYTES {
        return Err(too_large(&path, bytes.len() as u64, false));
    }
    let digest = FileDigest::of(&bytes);
    Ok((path, bytes, digest))
}

/// `exact`: `bytes` is the file's size (else the file held at least that much).
fn too_large(path: &Path, bytes: u64, exact: bool) -> RecipeError {
    file_error(
        path,
        format!(
            "{} MiB{}; a recipe reads data files of at most {} MiB into memory",
            bytes >> 20,
            if exact { "" } else { " or more" },
            MAX_DATA_FILE_BYTES >> 20
        ),
    )
}

/// At most `limit + 1` bytes of the file at `path`: a caller finds a file longer than
/// `limit` from the length, having read no more than one byte past it.
pub fn read_limited(path: &Path, limit: u64) -> std::io::Result<Vec<u8>> {
    let mut content = Vec::new();
    File::open(path)?
        .take(limit.saturating_add(1))
        .read_to_end(&mut content)?;
    Ok(content)
}

/// One digest over many files (a folder of images): each file's name relative to the
/// folder and its content, in a fixed order.
#[derive(Debug, Default)]
pub struct FolderDigest {
    hasher: Sha256,
    bytes: u64,
}

impl FolderDigest {
    /// Adds one file.
    pub fn add(&mut self, relative: &str, content: &[u8]) {
        self.hasher.update((relative.len() as u64).to_le_bytes());
        self.hasher.update(relative.as_bytes());
        self.hasher.update((content.len() as u64).to_le_bytes());
        self.hasher.update(content);
        self.bytes += content.len() as u64;
    }

    /// The digest of every file added.
    pub fn finish(self) -> FileDigest {
        FileDigest::from_hash(self.bytes, &self.hasher.finalize())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("mpric-source-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn relative_paths_start_at_the_recipe_folder() {
        let dir = scratch("resolve");
        std::fs::write(dir.join("a.csv"), "x,y\n1,2\n").unwrap();
        let (path, bytes, digest) = read_file(&dir, Path::new("a.csv")).unwrap();
        assert_eq!(path, dir.join("a.csv"));
        assert_eq!(bytes, b"x,y\n1,2\n");
        assert_eq!(digest, FileDigest::of(b"x,y\n1,2\n"));
        let absolute = dir.join("a.csv");
        assert_eq!(
            read_file(Path::new("/elsewhere"), &absolute).unwrap().0,
            absolute
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn missing_files_and_folders_are_named() {
        let dir = scratch("missing");
        let err = read_file(&dir, Path::new("nope.csv")).unwrap_err();
        assert_eq!(err.field, "dataset.path");
        assert!(
            err.message.starts_with(&format!(
                "{}: cannot read it",
                dir.join("nope.csv").display()
            )),
            "{err}"
        );
        let err = read_file(&dir, Path::new(".")).unwrap_err();
        assert!(err.message.ends_with("is a folder, not a file"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn folder_digest_sees_names_and_contents() {
        let digest = |files: &[(&str, &[u8])]| {
            let mut d = FolderDigest::default();
            files.iter().for_each(|(n, c)| d.add(n, c));
            d.finish()
        };
        let a = digest(&[("cat/1.png", b"ab"), ("dog/2.png", b"c")]);
        assert_eq!(a.bytes, 3);
        assert_ne!(a, digest(&[("cat/1.png", b"ab"), ("dog/2.png", b"d")]));
        assert_ne!(a, digest(&[("cat/1.png", b"ab"), ("cat/2.png", b"c")]));
        // The boundary between name and content is part of the hash.
        assert_ne!(digest(&[("a", b"bc")]), digest(&[("ab", b"c")]));
    }
}
