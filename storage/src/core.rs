//! The reader and writer every storage kind shares: [`Reader`] and [`Writer`], generic over
//! the kind ([`crate::kind`]), with the sans-IO read split ([`Reader::plan`],
//! [`Reader::fetch`], [`Reader::decode`]) and the typed [`Window`].
//!
//! A kind supplies only what differs: what the manifest records about its format ([`Kind`]),
//! how it opens its files and index and turns keys into byte ranges ([`ReaderIndex`]), how the
//! format decodes a planned output ([`ReaderKind`]), and its writer's buffers and `append`
//! ([`WriterKind`]). Opening, the manifest, the accessors, the batched read, locking,
//! metadata, shard parking and the commit exist here once.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::sync::Arc;

use guideloom_formats::Dtype;
use serde_json::{Map, Value};

use crate::append::{AppendFile, OpenShards};
use crate::dir::{DirLock, LengthFault, LocalDir, StorageDir, WriteDir};
use crate::io::{FileSet, ReadOptions, ReadRequest, ShardFile};
use crate::manifest::{
    push_shard_file_name, shard_file_name, FileEntry, FormatSpec, Manifest, ShardEntry, StorageKind,
    MANIFEST_FILE,
};
use crate::{Result, StorageError};

/// A window of a stream: `len` elements starting at element `offset` (elements, not bytes;
/// the stream is all shards concatenated in increasing id order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Window {
    /// First element.
    pub offset: u64,
    /// Number of elements.
    pub len: u64,
}

impl Window {
    /// The window of `len` elements starting at element `offset`.
    pub const fn new(offset: u64, len: u64) -> Self {
        Window { offset, len }
    }

    /// One past the last element, `None` when that overflows `u64`.
    pub fn end(self) -> Option<u64> {
        self.offset.checked_add(self.len)
    }
}

/// The byte ranges a batch of keys (windows or document indices) needs, made by
/// [`Reader::plan`] before any I/O: [`ReadPlan::requests`] over the reader's
/// [`Reader::files`], in the order [`Reader::decode`] expects their bytes, back to back
/// ([`ReadPlan::bytes`] in all).
///
/// A caller that brings its own I/O reads the requests into one buffer (for example with
/// [`StorageDir::read_requests`]) and hands it to [`Reader::decode`]; [`Reader::read_many`]
/// does plan, one backend call ([`Reader::fetch`]) and decode.
#[derive(Debug, Clone)]
pub struct ReadPlan {
    /// The fingerprint of the storage of the reader that made the plan.
    storage: u64,
    requests: Vec<ReadRequest>,
    /// Total bytes (fits `usize`: checked when the plan is finished).
    bytes: u64,
    /// Per segment: its length in units of the kind (elements, or bytes for documents) and
    /// its shard id. Segment `k` is read by request `k`.
    seg_lens: Vec<u64>,
    seg_shards: Vec<u64>,
    /// Per output: one past its last segment, and one past its last byte.
    out_seg_end: Vec<usize>,
    out_byte_end: Vec<u64>,
    /// Stream-with-meta: the payloads, read after every segment.
    payloads: Option<Box<PayloadPlan>>,
}

/// The payload part of a stream-with-meta plan. Payload `p` is read by request
/// `segments + p`; its bytes follow the element bytes of the whole batch.
#[derive(Debug, Clone, Default)]
pub(crate) struct PayloadPlan {
    /// Per payload: the shard that stored it, the elements of its run before the window,
    /// and one past its last byte inside the payload part.
    pub(crate) shard: Vec<u64>,
    pub(crate) run_offset: Vec<u64>,
    pub(crate) byte_end: Vec<u64>,
    /// Per element of every window, the index of its payload among the window's payloads.
    pub(crate) index: Vec<u32>,
    /// Per output: one past its last payload, and one past its last index entry.
    pub(crate) out_payload_end: Vec<usize>,
    pub(crate) out_index_end: Vec<usize>,
}

impl PayloadPlan {
    /// Output `i`'s payloads and index entries (empty past the planned outputs).
    pub(crate) fn output(&self, i: usize) -> (std::ops::Range<usize>, std::ops::Range<usize>) {
        if i >= self.out_payload_end.len() || i >= self.out_index_end.len() {
            return (0..0, 0..0);
        }
        (span(&self.out_payload_end, i), span(&self.out_index_end, i))
    }
}

/// The ranges `ends[i - 1]..ends[i]` (from 0 for `i == 0`).
fn span<T: Copy + Default>(ends: &[T], i: usize) -> std::ops::Range<T> {
    let start = if i == 0 { T::default() } else { ends[i - 1] };
    start..ends[i]
}

impl ReadPlan {
    /// An empty plan for about `outputs` outputs.
    pub(crate) fn with_capacity(outputs: usize) -> Self {
        ReadPlan {
            storage: 0,
            requests: Vec::with_capacity(outputs + 4),
            bytes: 0,
            seg_lens: Vec::with_capacity(outputs + 4),
            seg_shards: Vec::with_capacity(outputs + 4),
            out_seg_end: Vec::with_capacity(outputs),
            out_byte_end: Vec::with_capacity(outputs),
            payloads: None,
        }
    }

    /// Adds a segment to the output being planned: `request` reads it, `len` units long,
    /// from shard `shard`.
    pub(crate) fn push_segment(&mut self, request: ReadRequest, len: u64, shard: u64) {
        self.requests.push(request);
        self.seg_lens.push(len);
        self.seg_shards.push(shard);
    }

    /// Closes the output being planned: its segments are those pushed since the last close,
    /// `bytes` long in all.
    ///
    /// # Errors
    /// [`StorageError::BatchTooLarge`] when the batch's bytes overflow `u64`.
    pub(crate) fn end_output(&mut self, bytes: u64) -> Result<()> {
        self.bytes = self.bytes.checked_add(bytes).ok_or(StorageError::BatchTooLarge { bytes: u64::MAX })?;
        self.out_seg_end.push(self.seg_lens.len());
        self.out_byte_end.push(self.bytes);
        Ok(())
    }

    /// Adds the payload part (stream-with-meta): its requests after the segments', its bytes
    /// after theirs.
    ///
    /// # Errors
    /// [`StorageError::BatchTooLarge`] when the batch's bytes overflow `u64`.
    pub(crate) fn set_payloads(&mut self, requests: Vec<ReadRequest>, payloads: PayloadPlan) -> Result<()> {
        let extra = payloads.byte_end.last().copied().unwrap_or(0);
        self.bytes = self.bytes.checked_add(extra).ok_or(StorageError::BatchTooLarge { bytes: u64::MAX })?;
        self.requests.extend(requests);
        self.payloads = Some(Box::new(payloads));
        Ok(())
    }

    /// Checks that the whole batch fits one buffer.
    ///
    /// # Errors
    /// [`StorageError::BatchTooLarge`] when [`ReadPlan::bytes`] does not fit `usize`.
    pub(crate) fn finish(self) -> Result<Self> {
        usize::try_from(self.bytes).map_err(|_| StorageError::BatchTooLarge { bytes: self.bytes })?;
        Ok(self)
    }

    /// The byte ranges to read, over the planning reader's [`Reader::files`], in the order
    /// their bytes lie in the buffer [`Reader::decode`] takes.
    pub fn requests(&self) -> &[ReadRequest] {
        &self.requests
    }

    /// Total bytes of all requests: the length of the buffer [`Reader::decode`] takes.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Number of outputs (keys planned).
    pub fn len(&self) -> usize {
        self.out_seg_end.len()
    }

    /// Whether the plan has no output.
    pub fn is_empty(&self) -> bool {
        self.out_seg_end.is_empty()
    }

    /// The fingerprint ([`Manifest::fingerprint`]) of the storage the plan was made for.
    pub fn storage(&self) -> u64 {
        self.storage
    }

    /// Output `i`'s segment lengths and shard ids.
    pub(crate) fn segments(&self, i: usize) -> (&[u64], &[u64]) {
        let r = self.segment_range(i);
        (&self.seg_lens[r.clone()], &self.seg_shards[r])
    }

    /// The indices of output `i`'s segments.
    pub(crate) fn segment_range(&self, i: usize) -> std::ops::Range<usize> {
        span(&self.out_seg_end, i)
    }

    /// Segment `k`'s length in units of the kind.
    pub(crate) fn segment_len(&self, k: usize) -> u64 {
        self.seg_lens[k]
    }

    /// Segment `k`'s shard id.
    pub(crate) fn segment_shard(&self, k: usize) -> u64 {
        self.seg_shards[k]
    }

    /// The segments' requests (all requests but the payloads').
    pub(crate) fn segment_requests(&self) -> &[ReadRequest] {
        &self.requests[..self.seg_lens.len()]
    }
}

/// Output `i` of a [`ReadPlan`] with the batch buffer its bytes lie in: what
/// [`ReaderKind::decode_at`] decodes. Made by the reader; read by the kinds of this crate.
#[derive(Debug, Clone, Copy)]
pub struct PlannedOutput<'a> {
    plan: &'a ReadPlan,
    i: usize,
    bytes: &'a [u8],
}

impl<'a> PlannedOutput<'a> {
    /// Output `i` of `plan` over `bytes` (already checked to be [`ReadPlan::bytes`] long).
    fn new(plan: &'a ReadPlan, i: usize, bytes: &'a [u8]) -> Self {
        PlannedOutput { plan, i, bytes }
    }

    /// The output's segment lengths and shard ids.
    pub(crate) fn segments(&self) -> (&'a [u64], &'a [u64]) {
        self.plan.segments(self.i)
    }

    /// The shard of the output's first segment (0 when it has none): what its errors name.
    pub(crate) fn first_shard(&self) -> u64 {
        self.segments().1.first().copied().unwrap_or(0)
    }

    /// The output's main bytes (elements, or a document's payload).
    pub(crate) fn bytes(&self) -> &'a [u8] {
        let r = span(&self.plan.out_byte_end, self.i);
        // Every byte end is at most the plan's bytes, which fit `usize` (checked by `finish`).
        &self.bytes[r.start as usize..r.end as usize]
    }

    /// The output's payloads (stream-with-meta); empty when the plan has no payload part.
    pub(crate) fn payloads(&self) -> OutputPayloads<'a> {
        let Some(p) = self.plan.payloads.as_deref() else { return OutputPayloads::default() };
        let main = self.plan.out_byte_end.last().copied().unwrap_or(0) as usize;
        let (payloads, entries) = p.output(self.i);
        let data = payloads
            .clone()
            .map(|k| {
                let start = if k == 0 { 0 } else { p.byte_end[k - 1] as usize };
                &self.bytes[main + start..main + p.byte_end[k] as usize]
            })
            .collect();
        OutputPayloads {
            shards: &p.shard[payloads.clone()],
            run_offsets: &p.run_offset[payloads],
            data,
            index: &p.index[entries],
        }
    }
}

/// The payloads of one planned output of a stream-with-meta plan.
#[derive(Debug, Default)]
pub(crate) struct OutputPayloads<'a> {
    /// Per payload: the shard that stored it.
    pub(crate) shards: &'a [u64],
    /// Per payload: the elements of its run before the window.
    pub(crate) run_offsets: &'a [u64],
    /// Per payload: its bytes.
    pub(crate) data: Vec<&'a [u8]>,
    /// Per element: the index of its payload.
    pub(crate) index: &'a [u32],
}

mod sealed {
    /// Keeps [`super::Kind`], [`super::ReaderIndex`] and the traits built on them to this
    /// crate's kinds.
    pub trait Sealed {}
}
pub(crate) use sealed::Sealed;

/// What every storage kind of [`crate::kind`] states: its format and what the manifest
/// records. Sealed.
pub trait Kind: Sealed {
    /// The format records are packed and decoded with.
    type Format: Send + Sync;
    /// The storage kind the manifest records.
    const KIND: StorageKind;

    /// The element dtype the manifest records for `format` (`None` for document storages),
    /// and the format's name and parameters.
    fn describe(format: &Self::Format) -> (Option<Dtype>, FormatSpec);
}

/// What a reader of a storage kind keeps in memory after open (shard starts, document
/// offsets, run indexes): how it opens and how it turns keys into byte ranges. Implemented by
/// the index types of [`crate::kind`]; sealed.
pub trait ReaderIndex: Sealed + Send + Sync + Sized {
    /// What a read asks for: a [`Window`] (stream kinds) or a document index (`u64`).
    type Key: Copy;

    /// Checks the shard files in `dir` against `manifest` (already checked to be of the
    /// reader's kind and dtype) and loads the index; returns it with the files batches read
    /// from and the number of records (elements or documents).
    ///
    /// # Errors
    /// The open errors of the kind's reader.
    fn open(dir: &dyn StorageDir, manifest: &Manifest) -> Result<(Self, Vec<ShardFile>, u64)>;

    /// The byte ranges of `keys`.
    ///
    /// # Errors
    /// [`StorageError::OutOfRange`] for a key past the end; [`StorageError::BatchTooLarge`].
    fn plan(&self, keys: &[Self::Key]) -> Result<ReadPlan>;
}

/// What a [`Reader`] of kind `K` asks for: its index's key ([`Window`] or `u64`).
pub type KeyOf<K> = <<K as ReaderKind>::Index as ReaderIndex>::Key;

/// What a storage kind adds to a [`Reader`]: its index and how the format decodes a planned
/// output. Implemented by the kinds of [`crate::kind`]; sealed.
pub trait ReaderKind: Kind {
    /// What the reader keeps in memory.
    type Index: ReaderIndex;
    /// One decoded record.
    type Output;

    /// Decodes one planned output.
    ///
    /// # Errors
    /// [`StorageError::Format`] from the format.
    fn decode_at(
        format: &Self::Format,
        index: &Self::Index,
        output: PlannedOutput<'_>,
    ) -> Result<Self::Output>;
}

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
        Ok(Reader {
            local: dir.local_dir().is_some(),
            len,
            dir,
            fingerprint: manifest.fingerprint(),
            manifest,
            files: FileSet::for_storage(files, options.max_open_files),
            options,
            format,
            index,
        })
    }

    /// A reader over an index opened by other means than a manifest (a
    /// [`crate::StreamLayout`], [`crate::StreamReader::from_layout`]): `manifest` is the
    /// description made for it, `files` the files its plans name, `len` its record count.
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

/// Checks that `m` is of `kind` and, for stream kinds, records the dtype `dtype`.
///
/// # Errors
/// [`StorageError::KindMismatch`], [`StorageError::DtypeMismatch`],
/// [`StorageError::FormatDtype`] when `dtype`'s descr does not parse back.
pub(crate) fn check_kind_dtype(
    m: &Manifest,
    dir: &Path,
    kind: StorageKind,
    dtype: Option<&Dtype>,
) -> Result<()> {
    let path = dir.join(MANIFEST_FILE);
    if m.kind() != kind {
        return Err(StorageError::KindMismatch {
            path,
            expected: kind.to_string(),
            found: m.kind().to_string(),
        });
    }
    if let (Some(found), Some(dtype)) = (m.dtype(), dtype) {
        // Compare what the manifest would record for the format's dtype.
        let expected =
            Dtype::from_descr(&dtype.to_descr()).map_err(|source| StorageError::FormatDtype { source })?;
        if *found != expected {
            return Err(StorageError::DtypeMismatch {
                path,
                expected: expected.to_string(),
                found: found.to_string(),
            });
        }
    }
    Ok(())
}

/// Checks that file `name` of `dir` exists and holds at least `committed` bytes.
///
/// # Errors
/// [`StorageError::MissingShard`], [`StorageError::ShardTooShort`], [`StorageError::Io`].
pub(crate) fn check_file(dir: &dyn StorageDir, shard: u64, name: &str, committed: u64) -> Result<ShardFile> {
    let path = dir.path().join(name);
    match dir.file_len(name)? {
        None => Err(StorageError::MissingShard { shard, path }),
        Some(actual) if actual < committed => {
            Err(StorageError::ShardTooShort { shard, path, expected: committed, actual })
        }
        Some(_) => Ok(ShardFile { path, shard, committed }),
    }
}

/// Checks the `ext` files of `shards` (their main data files: committed length
/// [`ShardEntry::bytes`]) as [`check_file`] does one by one, in order, all through one
/// [`StorageDir::check_lengths`] call, and returns them as [`ShardFile`]s.
///
/// # Errors
/// As [`check_file`], for the first file (in order) that fails.
pub(crate) fn check_shard_files(
    dir: &dyn StorageDir,
    shards: &[ShardEntry],
    ext: &str,
) -> Result<Vec<ShardFile>> {
    let base = dir.path();
    let mut name = String::new();
    let files: Vec<ShardFile> = shards
        .iter()
        .map(|s| {
            name.clear();
            push_shard_file_name(&mut name, s.id, ext);
            ShardFile { path: base.join(&name), shard: s.id, committed: s.bytes }
        })
        .collect();
    match dir.check_lengths(&files)? {
        None => Ok(files),
        Some(LengthFault { index, found }) => {
            let ShardFile { path, shard, committed: expected } = files[index].clone();
            Err(match found {
                None => StorageError::MissingShard { shard, path },
                Some(actual) => StorageError::ShardTooShort { shard, path, expected, actual },
            })
        }
    }
}

/// An index file of a shard (`.index`, `.metaidx`) being loaded: checked, read, and named in
/// [`StorageError::CorruptIndex`].
pub(crate) struct IndexFile<'a> {
    dir: &'a dyn StorageDir,
    shard: u64,
    name: String,
}

impl<'a> IndexFile<'a> {
    /// The `ext` file of shard `shard` in `dir`.
    pub(crate) fn new(dir: &'a dyn StorageDir, shard: u64, ext: &str) -> Self {
        IndexFile { dir, shard, name: crate::manifest::shard_file_name(shard, ext) }
    }

    /// Checks that the file holds at least `committed` bytes (see [`check_file`]).
    pub(crate) fn check(&self, committed: u64) -> Result<()> {
        check_file(self.dir, self.shard, &self.name, committed).map(drop)
    }

    /// Fills `out` from byte `offset` of the file.
    pub(crate) fn read_at(&self, offset: u64, out: &mut [u8]) -> Result<()> {
        self.dir.read_at(&self.name, offset, out)
    }

    /// The error for damage found at `entry`.
    pub(crate) fn corrupt(&self, entry: u64, reason: String) -> StorageError {
        StorageError::CorruptIndex {
            shard: self.shard,
            path: self.dir.path().join(&self.name),
            entry,
            reason,
        }
    }
}

/// What a storage kind adds to a [`Writer`]: the buffers it packs records into (its
/// `append` is its own). Implemented by the kinds of [`crate::kind`]; sealed.
pub trait WriterKind: Kind {
    /// Buffers the kind packs records into.
    type Scratch: Default;
}

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
                    files.push(AppendFile::open(&self.dir, shard_file_name(id, ext), id, committed)?);
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
    /// [`StorageError::Locked`] while another writer has the storage open;
    /// [`StorageError::KindMismatch`] or [`StorageError::DtypeMismatch`] when `dir` holds
    /// another kind or dtype; [`StorageError::FormatDtype`]; manifest errors as in
    /// [`Manifest::load`]; I/O errors.
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
    /// I/O errors naming the file; [`StorageError::ConcurrentCommit`] when the manifest is no
    /// longer the one this writer read or last committed (another writer committed in
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
