//! Content hashes: what a checkpoint's manifest lists of each file, and of the data a run
//! trains on.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Size and content hash of one file.
///
/// ```
/// use burn_mpric_train::checkpoint::manifest::FileDigest;
///
/// let digest = FileDigest::of(b"abc");
/// assert_eq!(digest.bytes, 3);
/// assert!(digest.sha256.starts_with("ba7816bf"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileDigest {
    /// Size in bytes.
    pub bytes: u64,
    /// SHA-256 of the content, lowercase hex.
    pub sha256: String,
}

impl FileDigest {
    /// The digest of `content`.
    ///
    /// ```
    /// use burn_mpric_train::checkpoint::manifest::FileDigest;
    ///
    /// assert_ne!(FileDigest::of(b"a"), FileDigest::of(b"b"));
    /// ```
    pub fn of(content: &[u8]) -> Self {
        Self::from_hash(content.len() as u64, &Sha256::digest(content))
    }

    /// The digest of `bytes` bytes whose SHA-256 is `hash`.
    pub(crate) fn from_hash(bytes: u64, hash: &[u8]) -> Self {
        let mut sha256 = String::with_capacity(64);
        for byte in hash {
            let _ = write!(sha256, "{byte:02x}");
        }
        Self { bytes, sha256 }
    }
}
