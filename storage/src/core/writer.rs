//! [`Writer`]: appending records to shards, shard parking and the commit.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::sync::Arc;

use guideloom_formats::Dtype;
use serde_json::{Map, Value};

use super::checks::check_kind_dtype;
use super::kind::WriterKind;
use crate::append::{AppendFile, OpenShards};
use crate::dir::{DirLock, LocalDir, WriteDir};
use crate::manifest::{shard_file_name, FileEntry, Manifest, ShardEntry, StorageKind, MANIFEST_FILE};
use crate::Result;

/// The files of one shard a writer has open, in [`StorageKind::files`] order, and its record
/// count (elements or documents), committed or not.
#[derive(Debug)]
pub(crate) struct OpenShard {
    files: Vec<AppendFile>,
    count: u64,
}

impl OpenShard {
    /// Records appended so far, committed or not.
    pub(crate) fn count(&self) -> u64 {
        self.count
    }

    /// Length in bytes of file `k` (pending bytes included; 0 when the kind has no file `k`).
    pub(crate) fn file_len(&self, k: usize) -> u64 {
        self.files.get(k).map_or(0, AppendFile::len)
    }

    /// Appends `parts[k]` to file `k` and sets the record count to `count`. Every part counts
    /// as appended even when a flush fails (the first error is returned), so the files stay
    /// consistent with each other and with the count.
    pub(crate) fn append(&mut self, parts: &[&[u8]], count: u64) -> Result<()> {
        let mut result = Ok(());
        for (file, part) in self.files.iter_mut().zip(parts) {
            let written = file.write(part);
            if result.is_ok() {
                result = written;
            }
        }
        self.count = count;
        result
    }
}

/// The part of a [`Writer`] every kind shares: directory, lock, manifest and open shards.
#[derive(Debug)]
pub(crate) struct WriterCore {
    dir: Arc<dyn WriteDir>,
    kind: StorageKind,
    files: &'static [&'static str],
    manifest: Manifest,
    /// The manifest's bytes as this writer last read or committed them (`None`: there was
    /// none); a commit replaces only this one ([`WriteDir::replace_if`]).
    base: Option<Vec<u8>>,
    open: BTreeMap<u64, OpenShard>,
    open_shards: OpenShards,
    _lock: DirLock,
}

impl WriterCore {
    /// The manifest as last read or committed (plus pending metadata).
    pub(crate) fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// Whether the directory held a committed manifest when the writer opened it (or the
    /// writer has committed since).
    pub(crate) fn has_committed(&self) -> bool {
        self.base.is_some()
    }

    /// Bytes of one element (stream kinds; 1 for documents): the manifest's dtype, which is
    /// the format's (checked on open).
    pub(crate) fn itemsize(&self) -> u64 {
        self.manifest.dtype().map_or(1, Dtype::itemsize)
    }

    /// The open files of shard `id`, opening them (after the committed bytes; bytes an
    /// interrupted session left past them are cut) on first use; parks the least recently
    /// opened shard when more than the bound are open.
    ///
    /// # Errors
    /// I/O errors naming the file; [`StorageError::MissingShard`] or
    /// [`StorageError::ShardTooShort`] for a committed file that is gone or shorter.
    pub(crate) fn shard(&mut self, id: u64) -> Result<&mut OpenShard> {
        if let Some(victim) = self.open_shards.touch(id).and_then(|v| self.open.get_mut(&v)) {
            for f in &mut victim.files {
                f.park()?;
            }
        }
        match self.open.entry(id) {
            std::collections::btree_map::Entry::Occupied(e) => Ok(e.into_mut()),
            std::collections::btree_map::Entry::Vacant(e) => {
                let entry = self.manifest.shard(id);
                let empty = FileEntry { bytes: 0, checksum: 0 };
                let mut files = Vec::with_capacity(self.files.len());
                for (k, ext) in self.files.iter().enumerate() {
                    let committed = match (entry, k) {
                        (None, _) => empty,
                        (Some(s), 0) => FileEntry { bytes: s.bytes, checksum: s.checksum },
                        (Some(s), _) => s.files.get(*ext).copied().unwrap_or(empty),
                    };
                    let name = entry.map_or_else(|| shard_file_name(id, ext), |s| s.file_name(ext));
                    files.push(AppendFile::open(&self.dir, name, id, committed)?);
                }
                let count = entry.map_or(0, |s| s.count(self.kind));
                Ok(e.insert(OpenShard { files, count }))
            }
        }
    }
}

/// A storage writer of kind `K` ([`crate::StreamWriter`], [`crate::DocumentWriter`],
/// [`crate::StreamWithMetaWriter`] name the three): `append` records to shards, then
/// [`Writer::commit`].
///
/// At most 32 shards keep their files open at once: appending to another one flushes,
/// fsyncs and closes the least recently opened (it reopens on its next append), so a writer
/// may fill thousands of shards. Opening a directory that already holds a storage of the
/// kind continues it: new records are appended after the committed ones of each shard, and
/// bytes an interrupted session left past the committed length are discarded. Nothing is
/// visible to readers before `commit`. The writer holds the storage's writer lock until it
/// is dropped.
pub struct Writer<K: WriterKind> {
    pub(crate) core: WriterCore,
    pub(crate) format: K::Format,
    pub(crate) scratch: K::Scratch,
}

impl<K: WriterKind> fmt::Debug for Writer<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Writer")
            .field("dir", &self.core.dir)
            .field("kind", &self.core.kind)
            .field("open_shards", &self.core.open.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl<K: WriterKind> Writer<K> {
    /// Opens or creates the storage in the local directory `dir` (the directory too) for
    /// appending with `format`.
    ///
    /// # Errors
    /// [`StorageError::Locked`](crate::StorageError::Locked) while another writer has the storage
    /// open; [`StorageError::KindMismatch`](crate::StorageError::KindMismatch) or
    /// [`StorageError::DtypeMismatch`](crate::StorageError::DtypeMismatch) when `dir` holds another
    /// kind or dtype; [`StorageError::FormatDtype`](crate::StorageError::FormatDtype); manifest
    /// errors as in [`Manifest::load`]; I/O errors.
    pub fn open(dir: impl AsRef<Path>, format: K::Format) -> Result<Self> {
        Self::open_in(Arc::new(LocalDir::new(dir.as_ref())), format)
    }

    /// [`Writer::open`] through any [`WriteDir`]: every write, sync and rename of the writer
    /// goes through `dir`.
    ///
    /// # Errors
    /// As [`Writer::open`].
    pub fn open_in(dir: Arc<dyn WriteDir>, format: K::Format) -> Result<Self> {
        let (dtype, spec) = K::describe(&format);
        dir.create_dir()?;
        let lock = dir.lock()?;
        // The lock is held before the manifest is read, so no other (locking) writer commits
        // between this read and this writer's commits.
        let (manifest, base) = match Manifest::read_text(&*dir)? {
            Some(text) => {
                let m = Manifest::from_text(&text, &dir.path().join(MANIFEST_FILE))?;
                m.check_links(&*dir)?;
                check_kind_dtype(&m, dir.path(), K::KIND, dtype.as_ref())?;
                (m, Some(text))
            }
            None => (Manifest::new(K::KIND, dtype.as_ref(), spec)?, None),
        };
        let core = WriterCore {
            dir,
            kind: K::KIND,
            files: K::KIND.files(),
            manifest,
            base,
            open: BTreeMap::new(),
            open_shards: OpenShards::default(),
            _lock: lock,
        };
        Ok(Writer { core, format, scratch: K::Scratch::default() })
    }

    /// The storage directory.
    pub fn dir(&self) -> &Path {
        self.core.dir.path()
    }

    /// The format records are packed with.
    pub fn format(&self) -> &K::Format {
        &self.format
    }

    /// Sets a key of the manifest's user metadata (committed with the next `commit`).
    pub fn set_metadata(&mut self, key: impl Into<String>, value: Value) {
        self.core.manifest.metadata_mut().insert(key.into(), value);
    }

    /// The user metadata as it will be committed.
    pub fn metadata(&self) -> &Map<String, Value> {
        self.core.manifest.metadata()
    }

    /// Records (elements, or documents for document storages) appended so far to shard
    /// `shard`, committed or not.
    pub fn shard_len(&self, shard: u64) -> u64 {
        match self.core.open.get(&shard) {
            Some(s) => s.count,
            None => self.core.manifest.shard(shard).map_or(0, |s| s.count(self.core.kind)),
        }
    }

    /// Makes everything appended so far durable and visible: syncs the shard files, then
    /// replaces the manifest atomically, only if it is still the one this writer read or last
    /// committed ([`WriteDir::replace_if`]; locally a temp file, sync, rename, sync of the
    /// directory). A writer may keep appending and commit again.
    ///
    /// # Errors
    /// I/O errors naming the file;
    /// [`StorageError::ConcurrentCommit`](crate::StorageError::ConcurrentCommit) when the manifest
    /// is no longer the one this writer read or last committed (another writer committed in
    /// between): nothing is committed, and the other writer's commit stays.
    pub fn commit(&mut self) -> Result<()> {
        let core = &mut self.core;
        for (&id, s) in &mut core.open {
            let mut entries = Vec::with_capacity(s.files.len());
            for f in &mut s.files {
                entries.push(f.sync()?);
            }
            let Some((main, aux)) = entries.split_first() else { continue };
            let stream = core.kind != StorageKind::Document;
            core.manifest.upsert(ShardEntry {
                id,
                elements: stream.then_some(s.count),
                documents: (!stream).then_some(s.count),
                bytes: main.bytes,
                checksum: main.checksum,
                files: core.files.iter().skip(1).map(|e| e.to_string()).zip(aux.iter().copied()).collect(),
                path: core.manifest.shard(id).and_then(|s| s.path.clone()),
            });
        }
        // Replace only the manifest this writer read or last committed: a writer that got
        // around the lock (a lock file removed under it, or an object store, which has none)
        // must not have its commit lost.
        let text = core.manifest.commit(&*core.dir, core.base.as_deref())?;
        core.base = Some(text);
        Ok(())
    }

    /// Commits and closes the writer.
    ///
    /// # Errors
    /// As [`Writer::commit`].
    pub fn finish(mut self) -> Result<()> {
        self.commit()
    }
}
