//! [`Reader`]: opening a storage, its accessors and the batched read (plan, fetch, decode).

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use super::checks::check_kind_dtype;
use super::kind::{KeyOf, ReaderIndex, ReaderKind};
use super::plan::{PlannedOutput, ReadPlan};
use crate::dir::{LocalDir, StorageDir};
use crate::io::{FileSet, ReadOptions, ShardFile};
use crate::manifest::Manifest;
use crate::{Result, StorageError};

/// A storage reader of kind `K` ([`crate::StreamReader`], [`crate::DocumentReader`],
/// [`crate::StreamWithMetaReader`] name the three).
///
/// Open validates the manifest, the kind and dtype against the format, and that every shard
/// file holds its committed bytes (bytes past them are ignored); the kind checks and loads
/// its index. Shard files are opened lazily. The reader serves the manifest committed when it
/// opened (later commits are not seen) and is `Send + Sync`: share it by reference or `Arc`.
///
/// A batch is [`Reader::plan`] (keys to byte ranges, no I/O), [`Reader::fetch`] (one
/// backend call over a local directory, [`StorageDir::read_requests`] over another) and
/// [`Reader::decode`]; [`Reader::read_many`] does the three.
pub struct Reader<K: ReaderKind> {
    dir: Arc<dyn StorageDir>,
    local: bool,
    len: u64,
    manifest: Manifest,
    fingerprint: u64,
    files: FileSet,
    options: ReadOptions,
    format: K::Format,
    index: K::Index,
}

impl<K: ReaderKind> fmt::Debug for Reader<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reader")
            .field("dir", &self.dir)
            .field("kind", &self.manifest.kind())
            .field("records", &self.len())
            .field("files", &self.files)
            .field("backend", &self.options.backend.name())
            .finish()
    }
}

impl<K: ReaderKind> Reader<K> {
    /// Opens the storage in the local directory `dir` with default [`ReadOptions`].
    ///
    /// # Errors
    /// [`StorageError::NotAStorage`], [`StorageError::InvalidManifest`],
    /// [`StorageError::UnsupportedVersion`], [`StorageError::KindMismatch`],
    /// [`StorageError::DtypeMismatch`], [`StorageError::MissingShard`],
    /// [`StorageError::ShardTooShort`], and for kinds with an index
    /// [`StorageError::CorruptIndex`].
    pub fn open(dir: impl AsRef<Path>, format: K::Format) -> Result<Self> {
        Self::open_with(dir, format, ReadOptions::default())
    }

    /// Opens the storage in the local directory `dir` with explicit read options (backend,
    /// descriptor cap).
    ///
    /// # Errors
    /// As [`Reader::open`].
    pub fn open_with(dir: impl AsRef<Path>, format: K::Format, options: ReadOptions) -> Result<Self> {
        Self::open_in(Arc::new(LocalDir::new(dir.as_ref())), format, options)
    }

    /// Opens the storage in any [`StorageDir`] (a [`crate::MemDir`], a remote store). Over a
    /// directory that is not local, `options.backend` is not used: batches are read with
    /// [`StorageDir::read_requests`].
    ///
    /// # Errors
    /// As [`Reader::open`].
    pub fn open_in(dir: Arc<dyn StorageDir>, format: K::Format, options: ReadOptions) -> Result<Self> {
        let manifest = Manifest::load_from(&*dir)?;
        check_kind_dtype(&manifest, dir.path(), K::KIND, K::describe(&format).0.as_ref())?;
        dir.expect_files(&manifest.expected_files());
        let (index, files, len) = K::Index::open(&*dir, &manifest)?;
        Ok(Self::from_index(dir, manifest, index, files, len, format, options))
    }

    /// A reader over an index: the one opened from the storage's manifest, or one opened by
    /// other means (a [`crate::StreamLayout`], [`crate::StreamReader::from_layout`]), whose
    /// `manifest` is the description made for it; `files` are the files its plans name, `len`
    /// its record count.
    pub(crate) fn from_index(
        dir: Arc<dyn StorageDir>,
        manifest: Manifest,
        index: K::Index,
        files: Vec<ShardFile>,
        len: u64,
        format: K::Format,
        options: ReadOptions,
    ) -> Self {
        Reader {
            local: dir.local_dir().is_some(),
            len,
            dir,
            fingerprint: manifest.fingerprint(),
            manifest,
            files: FileSet::for_storage(files, options.max_open_files),
            options,
            format,
            index,
        }
    }

    /// Records in the storage: elements (stream kinds, all shards) or documents.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the storage holds no record.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The format records are decoded with.
    pub fn format(&self) -> &K::Format {
        &self.format
    }

    /// The committed manifest this reader serves (later commits are not seen).
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The storage directory's path ([`StorageDir::path`]).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The storage directory the reader reads through.
    pub fn storage_dir(&self) -> &Arc<dyn StorageDir> {
        &self.dir
    }

    /// The manifest's fingerprint ([`Manifest::fingerprint`]).
    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }

    /// The shard files and their descriptor cache.
    pub fn files(&self) -> &FileSet {
        &self.files
    }

    /// The read options (backend, descriptor cap).
    pub fn options(&self) -> &ReadOptions {
        &self.options
    }

    /// The kind's in-memory index.
    pub(crate) fn index(&self) -> &K::Index {
        &self.index
    }

    /// The byte ranges a batch of keys needs, without reading anything.
    ///
    /// # Errors
    /// [`StorageError::OutOfRange`] for a key past the end (the first one);
    /// [`StorageError::BatchTooLarge`] when the batch does not fit one buffer.
    pub fn plan(&self, keys: &[KeyOf<K>]) -> Result<ReadPlan> {
        let mut plan = self.index.plan(keys)?;
        plan.storage = self.fingerprint;
        Ok(plan)
    }

    /// Reads the bytes of `plan` with one backend call (or through the [`StorageDir`] when it
    /// is not local).
    ///
    /// # Errors
    /// [`StorageError::PlanMismatch`] for a plan of another storage; read errors of the
    /// backend ([`StorageError::Io`], [`StorageError::ShortRead`], ...).
    pub fn fetch(&self, plan: &ReadPlan) -> Result<Vec<u8>> {
        let mut out = vec![0u8; self.check_plan(plan)?];
        self.fetch_into(plan, &mut out)?;
        Ok(out)
    }

    /// [`Reader::fetch`] into `out`, which must be [`ReadPlan::bytes`] long.
    ///
    /// # Errors
    /// [`StorageError::BufferLength`] when `out` has another length; otherwise as
    /// [`Reader::fetch`].
    pub fn fetch_into(&self, plan: &ReadPlan, out: &mut [u8]) -> Result<()> {
        let bytes = self.check_plan(plan)?;
        if bytes != out.len() {
            return Err(StorageError::BufferLength { expected: plan.bytes, found: out.len() as u64 });
        }
        if self.local {
            self.options.backend.read_into(&self.files, plan.requests(), out)
        } else {
            self.dir.read_requests(&self.files, plan.requests(), out)
        }
    }

    /// Tells the storage that `plan` will be fetched soon ([`StorageDir::prefetch`]): a remote
    /// store starts fetching its ranges in the background; a local directory does nothing
    /// (the page cache and the backend are fast enough). Never fails.
    pub fn prefetch(&self, plan: &ReadPlan) {
        if !self.local {
            self.dir.prefetch(&self.files, plan.requests());
        }
    }

    /// Decodes every output of `plan` from `bytes` (the plan's requests' bytes back to back,
    /// [`ReadPlan::bytes`] long), in key order.
    ///
    /// # Errors
    /// [`StorageError::PlanMismatch`] for a plan of another storage;
    /// [`StorageError::BufferLength`] when `bytes` has another length;
    /// [`StorageError::Format`] from the format (the first failing output).
    pub fn decode(&self, plan: &ReadPlan, bytes: &[u8]) -> Result<Vec<K::Output>> {
        self.check_buffer(plan, bytes)?;
        (0..plan.len())
            .map(|i| K::decode_at(&self.format, &self.index, PlannedOutput::new(plan, i, bytes)))
            .collect()
    }

    /// Reads and decodes one record.
    ///
    /// # Errors
    /// As [`Reader::read_many`].
    pub fn read(&self, key: KeyOf<K>) -> Result<K::Output> {
        let plan = self.plan(&[key])?;
        let bytes = self.fetch(&plan)?;
        K::decode_at(&self.format, &self.index, PlannedOutput::new(&plan, 0, &bytes))
    }

    /// Reads and decodes a batch of records with one backend call; results are in key order.
    ///
    /// # Errors
    /// [`StorageError::OutOfRange`] for a key past the end; read errors of the backend;
    /// [`StorageError::Format`] from the format; the first failing key fails the batch.
    pub fn read_many(&self, keys: &[KeyOf<K>]) -> Result<Vec<K::Output>> {
        let plan = self.plan(keys)?;
        let bytes = self.fetch(&plan)?;
        self.decode(&plan, &bytes)
    }

    /// The plan's byte count as `usize`, once it is known to be this storage's plan.
    fn check_plan(&self, plan: &ReadPlan) -> Result<usize> {
        if plan.storage != self.fingerprint {
            return Err(StorageError::PlanMismatch { expected: self.fingerprint, found: plan.storage });
        }
        usize::try_from(plan.bytes).map_err(|_| StorageError::BatchTooLarge { bytes: plan.bytes })
    }

    fn check_buffer(&self, plan: &ReadPlan, bytes: &[u8]) -> Result<()> {
        if self.check_plan(plan)? != bytes.len() {
            return Err(StorageError::BufferLength { expected: plan.bytes, found: bytes.len() as u64 });
        }
        Ok(())
    }
}
