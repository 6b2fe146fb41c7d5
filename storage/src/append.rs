//! Append-only shard files for writers: positional writes behind a small buffer, a running
//! crc32c, and truncation of bytes left past the committed length by an interrupted session.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

use crate::dir::{WriteDir, WriteFile};
use crate::manifest::FileEntry;
use crate::{Result, StorageError};

/// Bytes buffered before a write reaches the file.
const FLUSH_AT: usize = 1 << 20;

/// Most shards of one writer whose files stay open at once; appending to more parks the least
/// recently opened ones (flushed, synced, closed; reopened on their next write).
pub(crate) const MAX_OPEN_SHARDS: usize = 32;

/// Which shards of a writer may have open files, oldest first, bounded by
/// [`MAX_OPEN_SHARDS`].
#[derive(Debug, Default)]
pub(crate) struct OpenShards {
    order: VecDeque<u64>,
    members: HashSet<u64>,
}

impl OpenShards {
    /// Records an append to `shard`; when that (re)opens its files beyond the bound, returns
    /// the least recently opened shard, whose files must be parked.
    pub(crate) fn touch(&mut self, shard: u64) -> Option<u64> {
        if !self.members.insert(shard) {
            return None;
        }
        self.order.push_back(shard);
        if self.order.len() > MAX_OPEN_SHARDS {
            let victim = self.order.pop_front()?;
            self.members.remove(&victim);
            return Some(victim);
        }
        None
    }
}

/// One shard file opened for appending, through the writer's [`WriteDir`].
#[derive(Debug)]
pub(crate) struct AppendFile {
    dir: Arc<dyn WriteDir>,
    name: String,
    /// `None` while parked (everything written is on disk and synced).
    file: Option<Box<dyn WriteFile>>,
    /// Bytes already written to the file (past the committed length when dirty).
    flushed: u64,
    /// `flushed` at the last sync (or the committed length at open): bytes up to here are
    /// durable.
    synced: u64,
    pending: Vec<u8>,
    crc: u32,
}

impl AppendFile {
    /// Opens (or creates, when `committed.bytes == 0`) file `name` of `dir` for appending
    /// after its committed bytes; anything past them (an interrupted earlier session) is
    /// truncated.
    pub(crate) fn open(
        dir: &Arc<dyn WriteDir>,
        name: String,
        shard: u64,
        committed: FileEntry,
    ) -> Result<Self> {
        let path = dir.path().join(&name);
        let mut file = dir.open_write(&name, committed.bytes == 0).map_err(|e| match e {
            StorageError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                StorageError::MissingShard { shard, path: path.clone() }
            }
            e => e,
        })?;
        let actual = file.len()?;
        if actual < committed.bytes {
            return Err(StorageError::ShardTooShort { shard, path, expected: committed.bytes, actual });
        }
        if actual > committed.bytes {
            file.set_len(committed.bytes)?;
        }
        Ok(AppendFile {
            dir: Arc::clone(dir),
            name,
            file: Some(file),
            flushed: committed.bytes,
            synced: committed.bytes,
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

    /// The open file, reopening a parked one.
    fn file(&mut self) -> Result<&mut Box<dyn WriteFile>> {
        let file = match self.file.take() {
            Some(f) => f,
            None => self.dir.open_write(&self.name, false)?,
        };
        Ok(self.file.insert(file))
    }

    /// Flushes, syncs (when anything was written since the last sync) and closes the file;
    /// the next write reopens it. Syncing before the close reports a write-back error here
    /// instead of losing it with the descriptor.
    pub(crate) fn park(&mut self) -> Result<()> {
        self.flush()?;
        if let (Some(f), true) = (&mut self.file, self.flushed != self.synced) {
            f.sync()?;
        }
        self.synced = self.flushed;
        self.file = None;
        Ok(())
    }

    /// Writes pending bytes to the file (not yet durable).
    pub(crate) fn flush(&mut self) -> Result<()> {
        if !self.pending.is_empty() {
            let at = self.flushed;
            let pending = std::mem::take(&mut self.pending);
            let written = match self.file() {
                Ok(f) => f.write_all_at(&pending, at),
                Err(e) => Err(e),
            };
            self.pending = pending;
            written?;
            self.flushed += self.pending.len() as u64;
            self.pending.clear();
        }
        Ok(())
    }

    /// Flushes and syncs ([`WriteFile::sync`]); returns the entry to commit. A file with
    /// nothing written since its last sync (a parked one included) is already durable and is
    /// not synced again.
    pub(crate) fn sync(&mut self) -> Result<FileEntry> {
        if !self.pending.is_empty() || self.flushed != self.synced {
            self.flush()?;
            self.file()?.sync()?;
            self.synced = self.flushed;
        }
        Ok(FileEntry { bytes: self.flushed, checksum: self.crc })
    }
}
