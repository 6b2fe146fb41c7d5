//! Stream-with-meta storage: a stream whose every element points to a metadata payload,
//! stored once per run of equal keys (one run = the consecutive elements of one append call
//! that share a key).
//!
//! Per shard:
//!
//! ```text
//! shard-NNNNN.stream    raw little-endian elements (as a stream storage)
//! shard-NNNNN.meta      the runs' payloads back to back
//! shard-NNNNN.metaidx   one 16-byte entry per run, in element order:
//!                       u64 LE first element of the run (shard-local), u64 LE start of its
//!                       payload in .meta; a run ends where the next begins (or at the
//!                       shard's element count / the .meta committed length)
//! ```
//!
//! The index is run-length encoded: 16 bytes per run, whatever the run lengths (for example
//! 0.16 bytes per element for 10 million elements in 100,000 runs).

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use guideloom_formats::{FormatError, MetaSink, MetaWindow, StreamWithMetaFormat, Window};
use serde_json::{Map, Value};

use crate::append::{check_file, AppendFile, OpenShards};
use crate::io::{read_exact_at, FileSet, ReadOptions, ReadRequest, ShardFile};
use crate::manifest::{FileEntry, FormatSpec, Manifest, ShardEntry, StorageKind, MANIFEST_FILE};
use crate::stream::{check_kind_dtype, open_or_create_manifest, stream_files, StreamLayout, WriterLock};
use crate::{Result, StorageError};

/// Extension of the payload file.
pub(crate) const META: &str = "meta";
/// Extension of the run index file.
pub(crate) const METAIDX: &str = "metaidx";
/// Bytes of one run-index entry (first element u64, payload offset u64).
const ENTRY: u64 = 16;

struct OpenMetaShard {
    data: AppendFile,
    meta: AppendFile,
    index: AppendFile,
    elements: u64,
}

/// Writes a stream-with-meta storage: [`StreamWithMetaWriter::append`] records to shards,
/// then [`StreamWithMetaWriter::commit`].
///
/// Each append packs the whole record first (elements and `(key, payload?)` pairs), checks
/// the run contract and the pair count against the format's `size`, and only then writes the
/// elements to `shard-NNNNN.stream`, each run's payload once to `shard-NNNNN.meta` and one
/// 16-byte entry per run to `shard-NNNNN.metaidx`. A refused record leaves nothing behind.
/// Reopening a directory continues it, with the crash rules of [`crate::StreamWriter`].
///
/// ```
/// use guideloom_formats::{DocumentTokensFormat, TokenDocument};
/// use guideloom_storage::{StreamWithMetaReader, StreamWithMetaWriter};
/// let dir = tempfile::tempdir()?;
/// let doc = |ordinal, tokens: &[u32]| TokenDocument { ordinal, tokens: tokens.to_vec(), data: vec![] };
/// let mut w = StreamWithMetaWriter::open(dir.path(), DocumentTokensFormat::<u16>::new())?;
/// w.append(0, &[doc(0, &[5, 6, 7]), doc(1, &[8, 9])])?;
/// w.commit()?;
/// let r = StreamWithMetaReader::open(dir.path(), DocumentTokensFormat::<u16>::new())?;
/// assert_eq!(r.len(), 5);
/// let out = r.read(1, 3)?;
/// assert_eq!(out.tokens, [6, 7, 8]);
/// assert_eq!(out.document, [0, 0, 1]);
/// assert_eq!(out.position, [1, 2, 0]); // true positions: the window starts inside document 0
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct StreamWithMetaWriter<F: StreamWithMetaFormat> {
    dir: PathBuf,
    format: F,
    itemsize: u64,
    manifest: Manifest,
    open: BTreeMap<u64, OpenMetaShard>,
    buf: Vec<u8>,
    sink: MetaSink<F::Key>,
    idx: Vec<u8>,
    open_shards: OpenShards,
    _lock: WriterLock,
}

impl<F: StreamWithMetaFormat> std::fmt::Debug for StreamWithMetaWriter<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamWithMetaWriter")
            .field("dir", &self.dir)
            .field("format", &self.format.name())
            .field("open_shards", &self.open.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl<F: StreamWithMetaFormat> StreamWithMetaWriter<F> {
    /// Opens or creates the stream-with-meta storage in `dir` for appending with `format`.
    ///
    /// # Errors
    /// [`StorageError::KindMismatch`] or [`StorageError::DtypeMismatch`] when `dir` holds
    /// another kind or dtype; manifest errors as in [`Manifest::load`]; I/O errors.
    pub fn open(dir: impl AsRef<Path>, format: F) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        let dtype = format.dtype();
        let spec = FormatSpec { name: format.name().to_string(), params: format.params() };
        let (manifest, lock) =
            open_or_create_manifest(&dir, StorageKind::StreamWithMeta, dtype.to_descr(), spec)?;
        Ok(StreamWithMetaWriter {
            dir,
            format,
            itemsize: dtype.itemsize(),
            manifest,
            open: BTreeMap::new(),
            buf: Vec::new(),
            sink: MetaSink::new(),
            idx: Vec::new(),
            open_shards: OpenShards::default(),
            _lock: lock,
        })
    }

    /// Appends one record to shard `shard` (any u64 id; shards are ordered by id in the
    /// stream). Returns the number of elements appended. Every run's payload belongs to
    /// `shard`.
    ///
    /// # Errors
    /// [`StorageError::Format`] wrapping [`FormatError::InvalidMeta`] when the pairs break the
    /// run contract (a key repeating after another key, a run starting without payload) or
    /// their count differs from the format's `size`, or wrapping the format's own error;
    /// nothing of the record is written then. I/O errors naming the shard file.
    pub fn append(&mut self, shard: u64, record: &F::Input) -> Result<u64> {
        let refuse = |source| StorageError::Format { shard, source };
        let size = self.format.size(record);
        self.sink.clear();
        self.buf.clear();
        let n = self.format.pack(record, &mut self.sink, &mut self.buf).map_err(refuse)?;
        self.sink.check(size).map_err(refuse)?;
        if n != size || n.checked_mul(self.itemsize) != Some(self.buf.len() as u64) {
            return Err(refuse(FormatError::Other(format!(
                "format packed {n} elements in {} bytes for a record of size {size} with {}-byte elements",
                self.buf.len(),
                self.itemsize
            ))));
        }
        if let Some(victim) = self.open_shards.touch(shard).and_then(|v| self.open.get_mut(&v)) {
            victim.data.park()?;
            victim.meta.park()?;
            victim.index.park()?;
        }
        if !self.open.contains_key(&shard) {
            let s = self.open_shard(shard)?;
            self.open.insert(shard, s);
        }
        let s = self
            .open
            .get_mut(&shard)
            .ok_or_else(|| StorageError::InvalidArgument("shard vanished".into()))?;
        let overflow = || StorageError::InvalidArgument(format!("shard {shard}: offsets overflow u64"));
        self.idx.clear();
        let mut payload_at = s.meta.len();
        for (first, payload) in self.sink.runs() {
            let first = s.elements.checked_add(first).ok_or_else(overflow)?;
            self.idx.extend_from_slice(&first.to_le_bytes());
            self.idx.extend_from_slice(&payload_at.to_le_bytes());
            payload_at = payload_at.checked_add(payload.len() as u64).ok_or_else(overflow)?;
        }
        let elements = s.elements.checked_add(n).ok_or_else(overflow)?;
        // All three writes count as appended even when a flush fails, so the files stay
        // consistent with each other and with the count.
        let data = s.data.write(&self.buf);
        let meta = s.meta.write(self.sink.payload_bytes());
        let index = s.index.write(&self.idx);
        s.elements = elements;
        data.and(meta).and(index)?;
        Ok(n)
    }

    fn open_shard(&self, shard: u64) -> Result<OpenMetaShard> {
        let empty = FileEntry { bytes: 0, checksum: 0 };
        let (data, meta, index, elements) = match self.manifest.shard(shard) {
            Some(s) => (
                FileEntry { bytes: s.bytes, checksum: s.checksum },
                s.files.get(META).copied().unwrap_or(empty),
                s.files.get(METAIDX).copied().unwrap_or(empty),
                s.elements.unwrap_or(0),
            ),
            None => (empty, empty, empty, 0),
        };
        let path = |ext| Manifest::shard_path(&self.dir, shard, ext);
        Ok(OpenMetaShard {
            data: AppendFile::open(&path(StorageKind::StreamWithMeta.data_extension()), shard, data)?,
            meta: AppendFile::open(&path(META), shard, meta)?,
            index: AppendFile::open(&path(METAIDX), shard, index)?,
            elements,
        })
    }

    /// Sets a key of the manifest's user metadata (committed with the next `commit`).
    pub fn set_metadata(&mut self, key: impl Into<String>, value: Value) {
        self.manifest.metadata.insert(key.into(), value);
    }

    /// The user metadata as it will be committed.
    pub fn metadata(&self) -> &Map<String, Value> {
        &self.manifest.metadata
    }

    /// Elements appended so far to shard `shard`, committed or not.
    pub fn shard_len(&self, shard: u64) -> u64 {
        match self.open.get(&shard) {
            Some(s) => s.elements,
            None => self.manifest.shard(shard).and_then(|s| s.elements).unwrap_or(0),
        }
    }

    /// Makes everything appended so far durable and visible: fsyncs the shard files (elements,
    /// payloads, run index), then replaces the manifest atomically. A writer may keep
    /// appending and commit again.
    ///
    /// # Errors
    /// I/O errors naming the file.
    pub fn commit(&mut self) -> Result<()> {
        for (&id, s) in &mut self.open {
            let data = s.data.sync()?;
            let meta = s.meta.sync()?;
            let index = s.index.sync()?;
            let entry = ShardEntry {
                id,
                elements: Some(s.elements),
                documents: None,
                bytes: data.bytes,
                checksum: data.checksum,
                files: BTreeMap::from([(META.to_string(), meta), (METAIDX.to_string(), index)]),
            };
            match self.manifest.shards.binary_search_by_key(&id, |s| s.id) {
                Ok(i) => self.manifest.shards[i] = entry,
                Err(i) => self.manifest.shards.insert(i, entry),
            }
        }
        self.manifest.commit(&self.dir)
    }

    /// Commits and closes the writer.
    ///
    /// # Errors
    /// As [`StreamWithMetaWriter::commit`].
    pub fn finish(mut self) -> Result<()> {
        self.commit()
    }
}

/// One shard's run index, validated: `starts` strictly increasing from 0 and below the
/// shard's element count; `payloads` has one more entry (the `.meta` committed length),
/// starting at 0 and never decreasing.
#[derive(Debug, Clone)]
pub(crate) struct ShardRuns {
    starts: Vec<u64>,
    payloads: Vec<u64>,
}

/// Reads a stream-with-meta storage: its length in elements and windows decoded by the
/// format together with the metadata payloads they touch.
///
/// Open validates what [`crate::StreamReader`] validates, plus, per shard, that the `.meta`
/// and `.metaidx` files hold their committed bytes and that the run index is sound (a whole
/// number of 16-byte entries, no more runs than elements, first elements strictly increasing
/// from 0 and below the element count, payload offsets from 0, never decreasing, within the
/// committed `.meta` length); a damaged index is [`StorageError::CorruptIndex`]. The index is
/// kept in memory (16 bytes per run). The reader is `Send + Sync`.
#[derive(Debug)]
pub struct StreamWithMetaReader<F: StreamWithMetaFormat> {
    dir: PathBuf,
    format: F,
    dtype: guideloom_formats::Dtype,
    manifest: Manifest,
    layout: StreamLayout,
    runs: Vec<ShardRuns>,
    /// Per shard `i`: its `.stream` file at `2 * i`, its `.meta` file at `2 * i + 1`.
    files: FileSet,
    options: ReadOptions,
}

/// One payload of a planned read: its shard, run offset and request (in the payload part).
struct PlannedPayload {
    shard: u64,
    run_offset: u64,
    len: u64,
}

/// One window of a planned read: its ranges in the segment, payload and index lists.
struct PlannedWindow {
    segs: std::ops::Range<usize>,
    payloads: std::ops::Range<usize>,
    index: std::ops::Range<usize>,
    bytes: u64,
}

impl<F: StreamWithMetaFormat> StreamWithMetaReader<F> {
    /// Opens the stream-with-meta storage in `dir` with default [`ReadOptions`].
    ///
    /// # Errors
    /// [`StorageError::NotAStorage`], [`StorageError::InvalidManifest`] (also when a shard
    /// lacks its `meta`/`metaidx` entries), [`StorageError::UnsupportedVersion`],
    /// [`StorageError::KindMismatch`], [`StorageError::DtypeMismatch`],
    /// [`StorageError::MissingShard`], [`StorageError::ShardTooShort`],
    /// [`StorageError::CorruptIndex`].
    pub fn open(dir: impl AsRef<Path>, format: F) -> Result<Self> {
        Self::open_with(dir, format, ReadOptions::default())
    }

    /// Opens with explicit read options (backend, descriptor cap).
    ///
    /// # Errors
    /// As [`StreamWithMetaReader::open`].
    pub fn open_with(dir: impl AsRef<Path>, format: F, options: ReadOptions) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        let manifest = Manifest::load(&dir)?;
        let dtype = format.dtype();
        check_kind_dtype(&manifest, &dir, StorageKind::StreamWithMeta, &dtype.to_descr())?;
        let data = stream_files(&dir, &manifest, dtype.itemsize(), StorageKind::StreamWithMeta)?;
        let layout = StreamLayout::new(&manifest.shards)?;
        let mut files = Vec::with_capacity(2 * data.len());
        let mut runs = Vec::with_capacity(data.len());
        for (s, d) in manifest.shards.iter().zip(data) {
            let entry = |ext: &str| {
                s.files.get(ext).copied().ok_or_else(|| StorageError::InvalidManifest {
                    path: dir.join(MANIFEST_FILE),
                    reason: format!("shard {} lacks its {ext:?} file entry", s.id),
                })
            };
            let meta = entry(META)?;
            let index = entry(METAIDX)?;
            let meta_path = Manifest::shard_path(&dir, s.id, META);
            check_file(&meta_path, s.id, meta.bytes)?;
            runs.push(load_runs(&dir, s, meta.bytes, index.bytes)?);
            files.push(d);
            files.push(ShardFile { path: meta_path, shard: s.id, committed: meta.bytes });
        }
        Ok(StreamWithMetaReader {
            dir,
            format,
            dtype,
            manifest,
            layout,
            runs,
            files: FileSet::new(files, options.max_open_files),
            options,
        })
    }

    /// Number of elements in the stream (all shards).
    pub fn len(&self) -> u64 {
        self.layout.total()
    }

    /// Whether the stream holds no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of runs, that is of stored payloads (all shards).
    pub fn run_count(&self) -> u64 {
        self.runs.iter().map(|r| r.starts.len() as u64).sum()
    }

    /// The element dtype.
    pub fn dtype(&self) -> &guideloom_formats::Dtype {
        &self.dtype
    }

    /// The format windows are decoded with.
    pub fn format(&self) -> &F {
        &self.format
    }

    /// The committed manifest this reader serves (later commits are not seen).
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The storage directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The manifest's fingerprint ([`Manifest::fingerprint`]).
    pub fn fingerprint(&self) -> u64 {
        self.manifest.fingerprint()
    }

    /// The shard files (per shard, its `.stream` then its `.meta` file) and their descriptor
    /// cache.
    pub fn files(&self) -> &FileSet {
        &self.files
    }

    /// The read options (backend, descriptor cap).
    pub fn options(&self) -> &ReadOptions {
        &self.options
    }

    /// Reads and decodes the window of `len` elements starting at element `offset`, with the
    /// payloads it touches.
    ///
    /// # Errors
    /// [`StorageError::OutOfRange`] past the end; read errors of the backend;
    /// [`StorageError::Format`] from unpack.
    pub fn read(&self, offset: u64, len: u64) -> Result<F::Output> {
        let mut out = self.read_many(&[(offset, len)])?;
        out.pop().ok_or_else(|| StorageError::InvalidArgument("no window decoded".into()))
    }

    /// Reads and decodes a batch of windows `(offset, len)` (in elements) with one backend
    /// call for all element bytes and payloads of the batch; results are in request order.
    /// A payload touched by several windows is read once per window.
    ///
    /// # Errors
    /// As [`StreamWithMetaReader::read`]; the first failing window fails the batch.
    pub fn read_many(&self, windows: &[(u64, u64)]) -> Result<Vec<F::Output>> {
        let itemsize = self.dtype.itemsize();
        let too_large = || StorageError::InvalidArgument("batch too large".into());
        let mut elem_requests = Vec::with_capacity(windows.len() + 4);
        let mut pay_requests = Vec::new();
        let mut segs: Vec<(u64, u64)> = Vec::new();
        let mut payloads: Vec<PlannedPayload> = Vec::new();
        let mut index: Vec<u32> = Vec::new();
        let mut plan = Vec::with_capacity(windows.len());
        let mut pieces: Vec<(usize, u64, u64)> = Vec::new();
        for &(offset, len) in windows {
            pieces.clear();
            self.layout.segments(offset, len, |i, local, n| pieces.push((i, local, n)))?;
            let (seg0, pay0, idx0) = (segs.len(), payloads.len(), index.len());
            for &(i, local, n) in &pieces {
                let id = self.layout.ids[i];
                elem_requests.push(ReadRequest { file: 2 * i, offset: local * itemsize, len: n * itemsize });
                segs.push((n, id));
                let runs = &self.runs[i];
                let shard_elements = self.layout.starts[i + 1] - self.layout.starts[i];
                let end = local + n;
                // The run holding `local` (starts[0] == 0 was checked on open).
                let mut r = runs.starts.partition_point(|&s| s <= local).saturating_sub(1);
                let mut pos = local;
                while pos < end {
                    let start = runs.starts[r];
                    let run_end = runs.starts.get(r + 1).copied().unwrap_or(shard_elements);
                    let k = u32::try_from(payloads.len() - pay0).map_err(|_| {
                        StorageError::InvalidArgument("a window touches more than u32::MAX payloads".into())
                    })?;
                    let (p0, p1) = (runs.payloads[r], runs.payloads[r + 1]);
                    pay_requests.push(ReadRequest { file: 2 * i + 1, offset: p0, len: p1 - p0 });
                    payloads.push(PlannedPayload { shard: id, run_offset: pos - start, len: p1 - p0 });
                    let m = run_end.min(end) - pos;
                    index.resize(index.len() + usize::try_from(m).map_err(|_| too_large())?, k);
                    pos += m;
                    r += 1;
                }
            }
            plan.push(PlannedWindow {
                segs: seg0..segs.len(),
                payloads: pay0..payloads.len(),
                index: idx0..index.len(),
                bytes: len.checked_mul(itemsize).ok_or_else(too_large)?,
            });
        }
        let elem_total = plan.iter().try_fold(0u64, |a, w| a.checked_add(w.bytes)).ok_or_else(too_large)?;
        let total = payloads
            .iter()
            .try_fold(elem_total, |a, p| a.checked_add(p.len))
            .and_then(|t| usize::try_from(t).ok())
            .ok_or_else(too_large)?;
        let mut bytes = vec![0u8; total];
        elem_requests.extend_from_slice(&pay_requests);
        self.options.backend.read_into(&self.files, &elem_requests, &mut bytes)?;

        let (elem_bytes, pay_bytes) = bytes.split_at(elem_total as usize);
        let mut pay_slices = Vec::with_capacity(payloads.len());
        let mut at = 0usize;
        for p in &payloads {
            let n = p.len as usize;
            pay_slices.push(&pay_bytes[at..at + n]);
            at += n;
        }
        let mut out = Vec::with_capacity(windows.len());
        let mut pos = 0usize;
        for w in plan {
            let n = w.bytes as usize;
            let (lens, shards): (Vec<u64>, Vec<u64>) = segs[w.segs].iter().copied().unzip();
            let first = shards.first().copied().unwrap_or(0);
            let fail = |source| StorageError::Format { shard: first, source };
            let stream = Window::new(&elem_bytes[pos..pos + n], itemsize, &lens, &shards).map_err(fail)?;
            let planned = &payloads[w.payloads.clone()];
            let doc_shard: Vec<u64> = planned.iter().map(|p| p.shard).collect();
            let run_offset: Vec<u64> = planned.iter().map(|p| p.run_offset).collect();
            let window =
                MetaWindow::new(stream, &doc_shard, &index[w.index], &pay_slices[w.payloads], &run_offset)
                    .map_err(fail)?;
            out.push(self.format.unpack(&window).map_err(fail)?);
            pos += n;
        }
        Ok(out)
    }
}

/// Reads and validates a shard's run index (see [`ShardRuns`]).
pub(crate) fn load_runs(dir: &Path, s: &ShardEntry, meta_bytes: u64, index_bytes: u64) -> Result<ShardRuns> {
    let path = Manifest::shard_path(dir, s.id, METAIDX);
    let corrupt = |entry: u64, reason: String| StorageError::CorruptIndex {
        shard: s.id,
        path: path.clone(),
        entry,
        reason,
    };
    let elements = s.elements.unwrap_or(0);
    if !index_bytes.is_multiple_of(ENTRY) {
        return Err(corrupt(
            index_bytes / ENTRY,
            format!("committed length {index_bytes} is not a whole number of {ENTRY}-byte entries"),
        ));
    }
    let count = index_bytes / ENTRY;
    if count > elements || (elements > 0 && count == 0) {
        return Err(corrupt(0, format!("{count} runs for {elements} elements")));
    }
    check_file(&path, s.id, index_bytes)?;
    // `count <= elements` and the file holds at least `index_bytes` bytes (both checked), so
    // these allocations are bounded by real file sizes.
    let cap = usize::try_from(count).map_err(|_| corrupt(0, format!("{count} runs do not fit in memory")))?;
    let mut starts = Vec::with_capacity(cap);
    let mut payloads = Vec::with_capacity(cap + 1);
    let file = File::open(&path).map_err(|e| StorageError::io(&path, e))?;
    let mut block = vec![0u8; (1usize << 20).min(cap * ENTRY as usize)];
    let mut read = 0u64;
    while read < index_bytes {
        let n = (index_bytes - read).min(block.len() as u64) as usize;
        read_exact_at(&file, &mut block[..n], read, &path)?;
        for c in block[..n].chunks_exact(ENTRY as usize) {
            let entry = starts.len() as u64;
            let (mut a, mut b) = ([0u8; 8], [0u8; 8]);
            a.copy_from_slice(&c[..8]);
            b.copy_from_slice(&c[8..]);
            let (first, payload) = (u64::from_le_bytes(a), u64::from_le_bytes(b));
            match starts.last() {
                None if first != 0 => {
                    return Err(corrupt(0, format!("first run starts at element {first}, not 0")))
                }
                Some(&prev) if first <= prev => {
                    return Err(corrupt(entry, format!("run starts at element {first}, not after {prev}")))
                }
                _ if first >= elements => {
                    return Err(corrupt(entry, format!("run starts at element {first} of {elements}")))
                }
                _ => {}
            }
            match payloads.last() {
                None if payload != 0 => {
                    return Err(corrupt(0, format!("first payload starts at {payload}, not 0")))
                }
                Some(&prev) if payload < prev => {
                    return Err(corrupt(
                        entry,
                        format!("payload offset {payload} is below the previous {prev}"),
                    ))
                }
                _ if payload > meta_bytes => {
                    return Err(corrupt(
                        entry,
                        format!("payload offset {payload} is past the committed payload length {meta_bytes}"),
                    ))
                }
                _ => {}
            }
            starts.push(first);
            payloads.push(payload);
        }
        read += n as u64;
    }
    payloads.push(meta_bytes);
    Ok(ShardRuns { starts, payloads })
}
