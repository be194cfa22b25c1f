//! One writer per output folder: an OS-level advisory lock (`flock` on Unix, `LockFileEx` on
//! Windows, through the standard library's `File::try_lock`) on `<output>/.mpric.lock`. The
//! operating system releases it when the process ends, however it ends, so a killed run never
//! leaves a stale lock behind.

use std::fs::{File, OpenOptions, TryLockError};
use std::path::Path;

use crate::error::Error;

/// The lock file's name inside an output folder.
pub const LOCK_FILE: &str = ".mpric.lock";

/// The lock on an output folder, held until dropped.
#[derive(Debug)]
pub struct RunLock {
    _file: File,
}

impl RunLock {
    /// Creates the output folder if needed and locks it, failing at once (without waiting)
    /// when another process holds the lock. The folder must be writable.
    pub fn acquire(output: &Path) -> Result<Self, Error> {
        std::fs::create_dir_all(output).map_err(|e| Error::io(output, e))?;
        let path = output.join(LOCK_FILE);
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| Error::io(&path, e))?;
        match file.try_lock() {
            Ok(()) => Ok(Self { _file: file }),
            Err(TryLockError::WouldBlock) => Err(Error::Locked {
                path: output.to_path_buf(),
            }),
            Err(TryLockError::Error(e)) => Err(Error::io(&path, e)),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_second_run_is_refused_until_the_first_lets_go() -> Result<(), crate::Error> {
        use crate::run::lock::RunLock;

        let output = std::env::temp_dir().join(format!("mpric-doc-lock-{}", std::process::id()));
        let held = RunLock::acquire(&output)?;
        let err = RunLock::acquire(&output).unwrap_err();
        assert!(
            err.to_string()
                .contains("another mpric run is writing to this output folder"),
            "{err}"
        );
        assert_eq!(err.exit_code(), 2);
        drop(held);
        assert!(RunLock::acquire(&output).is_ok());
        std::fs::remove_dir_all(&output).unwrap();
        Ok(())
    }
}
