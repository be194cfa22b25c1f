//! Files written so that a killed process leaves either the old content or the new one:
//! a temporary next to the target, flushed to disk, then renamed over it.

use std::fs::{self, File};
use std::io::Write;
use std::path::Path;

use crate::error::Error;

pub(crate) fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    let mut file = File::create(path).map_err(|e| Error::io(path, e))?;
    file.write_all(bytes).map_err(|e| Error::io(path, e))?;
    file.sync_all().map_err(|e| Error::io(path, e))
}

pub(crate) fn sync_dir(dir: &Path) {
    // Makes the rename durable across a power loss; not needed against a killed process,
    // and not possible on every platform, so failures are ignored.
    if let Ok(file) = File::open(dir) {
        let _ = file.sync_all();
    }
}

/// Writes `bytes` to `path` atomically: a temporary file next to it (`.<name>.tmp`),
/// flushed, then renamed over `path`.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    let name = path
        .file_name()
        .ok_or_else(|| Error::Internal(format!("{} has no file name", path.display())))?;
    let parent = path.parent().unwrap_or_else(|| Path::new("."));
    let tmp = parent.join(format!(".{}.tmp", name.to_string_lossy()));
    write_synced(&tmp, bytes)?;
    fs::rename(&tmp, path).map_err(|e| Error::io(path, e))?;
    sync_dir(parent);
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_second_write_replaces_the_first() {
        use crate::atomic::write_atomic;

        let path = std::env::temp_dir().join(format!("mpric-doc-{}.txt", std::process::id()));
        write_atomic(&path, b"one").unwrap();
        write_atomic(&path, b"two").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        std::fs::remove_file(path).unwrap();
    }
}
