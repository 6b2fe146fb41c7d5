//! The writer lock: one writer per storage directory at a time.

use std::fs;
use std::path::Path;

use crate::{Result, StorageError};

/// The lock file's name inside a storage directory.
const LOCK_FILE: &str = ".writer.lock";

/// The exclusive advisory lock (`flock`) a writer holds on `dir/.writer.lock` for its whole
/// life, so two writers (threads or processes) never append to one storage at once. The
/// kernel releases it when the writer is dropped or its process dies (also by `SIGKILL`).
/// Readers take no lock.
#[derive(Debug)]
pub(crate) struct WriterLock {
    _file: fs::File,
}

impl WriterLock {
    /// Takes the lock of `dir` (creating the lock file).
    ///
    /// # Errors
    /// [`StorageError::Locked`] while another writer holds it; [`StorageError::UnsafeFile`]
    /// when the lock file is not a regular file; [`StorageError::Io`] when it cannot be
    /// created or locked.
    pub(crate) fn acquire(dir: &Path) -> Result<Self> {
        let path = dir.join(LOCK_FILE);
        // Never through a link or into a FIFO planted as the lock file.
        let file = crate::fsutil::open_existing(&path, crate::fsutil::Access::Write { create: true })?;
        match file.try_lock() {
            Ok(()) => Ok(WriterLock { _file: file }),
            Err(fs::TryLockError::WouldBlock) => Err(StorageError::Locked { dir: dir.to_path_buf() }),
            Err(fs::TryLockError::Error(e)) => Err(StorageError::io(&path, e)),
        }
    }
}
