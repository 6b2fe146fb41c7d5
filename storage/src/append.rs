//! Append-only shard files for writers: positional writes behind a small buffer, a running
//! crc32c, and truncation of bytes left past the committed length by an interrupted session.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::manifest::FileEntry;
use crate::{Result, StorageError};

/// Bytes buffered before a write reaches the file.
const FLUSH_AT: usize = 1 << 20;

/// One shard file opened for appending.
#[derive(Debug)]
pub(crate) struct AppendFile {
    path: PathBuf,
    file: File,
    /// Bytes already written to the file (past the committed length when dirty).
    flushed: u64,
    pending: Vec<u8>,
    crc: u32,
}

impl AppendFile {
    /// Opens (or creates, when `committed.bytes == 0`) `path` for appending after its
    /// committed bytes; anything past them (an interrupted earlier session) is truncated.
    pub(crate) fn open(path: &Path, shard: u64, committed: FileEntry) -> Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(committed.bytes == 0)
            .truncate(false)
            .open(path)
            .map_err(|e| {
                if e.kind() == std::io::ErrorKind::NotFound {
                    StorageError::MissingShard { shard, path: path.to_path_buf() }
                } else {
                    StorageError::io(path, e)
                }
            })?;
        let actual = file.metadata().map_err(|e| StorageError::io(path, e))?.len();
        if actual < committed.bytes {
            return Err(StorageError::ShardTooShort {
                shard,
                path: path.to_path_buf(),
                expected: committed.bytes,
                actual,
            });
        }
        if actual > committed.bytes {
            file.set_len(committed.bytes).map_err(|e| StorageError::io(path, e))?;
        }
        Ok(AppendFile {
            path: path.to_path_buf(),
            file,
            flushed: committed.bytes,
            pending: Vec::new(),
            crc: committed.checksum,
        })
    }

    /// Total length in bytes, pending bytes included.
    pub(crate) fn len(&self) -> u64 {
        self.flushed + self.pending.len() as u64
    }

    /// Appends `data`. The bytes count as appended even when this returns an error (the
    /// error comes from writing buffered bytes to the file; a later flush retries them).
    pub(crate) fn write(&mut self, data: &[u8]) -> Result<()> {
        self.crc = crc32c::crc32c_append(self.crc, data);
        self.pending.extend_from_slice(data);
        if self.pending.len() >= FLUSH_AT {
            self.flush()?;
        }
        Ok(())
    }

    /// Writes pending bytes to the file (not yet durable).
    pub(crate) fn flush(&mut self) -> Result<()> {
        if !self.pending.is_empty() {
            self.file
                .write_all_at(&self.pending, self.flushed)
                .map_err(|e| StorageError::io(&self.path, e))?;
            self.flushed += self.pending.len() as u64;
            self.pending.clear();
        }
        Ok(())
    }

    /// Flushes and fsyncs; returns the entry to commit.
    pub(crate) fn sync(&mut self) -> Result<FileEntry> {
        self.flush()?;
        self.file.sync_data().map_err(|e| StorageError::io(&self.path, e))?;
        Ok(FileEntry { bytes: self.flushed, checksum: self.crc })
    }
}

/// Checks that `path` exists and holds at least `committed` bytes; returns its length.
pub(crate) fn check_file(path: &Path, shard: u64, committed: u64) -> Result<u64> {
    let actual = match std::fs::metadata(path) {
        Ok(m) => m.len(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(StorageError::MissingShard { shard, path: path.to_path_buf() })
        }
        Err(e) => return Err(StorageError::io(path, e)),
    };
    if actual < committed {
        return Err(StorageError::ShardTooShort {
            shard,
            path: path.to_path_buf(),
            expected: committed,
            actual,
        });
    }
    Ok(actual)
}

/// crc32c of the first `len` bytes of `path`, read in 1 MiB blocks.
pub(crate) fn checksum_file(path: &Path, shard: u64, len: u64) -> Result<u32> {
    let file = File::open(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            StorageError::MissingShard { shard, path: path.to_path_buf() }
        } else {
            StorageError::io(path, e)
        }
    })?;
    let mut buf = vec![0u8; (1 << 20).min(len as usize)];
    let mut crc = 0u32;
    let mut off = 0u64;
    while off < len {
        let n = (len - off).min(buf.len() as u64) as usize;
        crate::io::read_exact_at(&file, &mut buf[..n], off, path)?;
        crc = crc32c::crc32c_append(crc, &buf[..n]);
        off += n as u64;
    }
    Ok(crc)
}
