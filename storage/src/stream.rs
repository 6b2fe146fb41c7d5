//! Stream storage: fixed-size elements appended per shard, read back as windows of the
//! concatenated stream (shards in increasing id order).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use guideloom_formats::{Dtype, StreamFormat, Window};
use serde_json::{Map, Value};

use crate::append::{check_file, AppendFile, OpenShards};
use crate::io::{FileSet, ReadOptions, ReadRequest, ShardFile};
use crate::manifest::{FileEntry, FormatSpec, Manifest, ShardEntry, StorageKind, MANIFEST_FILE};
use crate::{Result, StorageError};

/// Takes the storage's writer lock, then loads the manifest of `dir` if present and checks
/// its kind and dtype against a format; creates an empty one otherwise (the directory too).
pub(crate) fn open_or_create_manifest(
    dir: &Path,
    kind: StorageKind,
    dtype: Value,
    format: FormatSpec,
) -> Result<(Manifest, WriterLock)> {
    fs::create_dir_all(dir).map_err(|e| StorageError::io(dir, e))?;
    let lock = WriterLock::acquire(dir)?;
    match Manifest::load(dir) {
        Ok(m) => {
            check_kind_dtype(&m, dir, kind, &dtype)?;
            Ok((m, lock))
        }
        Err(StorageError::NotAStorage { .. }) => Ok((Manifest::new(kind, dtype, format), lock)),
        Err(e) => Err(e),
    }
}

/// The exclusive advisory lock (`flock`) a writer holds on `dir/.writer.lock` for its whole
/// life, so two writers (threads or processes) never append to one storage at once. The
/// kernel releases it when the writer is dropped or its process dies (also by `SIGKILL`).
/// Readers take no lock.
#[derive(Debug)]
pub(crate) struct WriterLock {
    _file: fs::File,
}

impl WriterLock {
    pub(crate) fn acquire(dir: &Path) -> Result<Self> {
        let path = dir.join(".writer.lock");
        let file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| StorageError::io(&path, e))?;
        match file.try_lock() {
            Ok(()) => Ok(WriterLock { _file: file }),
            Err(fs::TryLockError::WouldBlock) => Err(StorageError::Locked { dir: dir.to_path_buf() }),
            Err(fs::TryLockError::Error(e)) => Err(StorageError::io(&path, e)),
        }
    }
}

/// Checks that a manifest is of `kind` and records `dtype`.
pub(crate) fn check_kind_dtype(m: &Manifest, dir: &Path, kind: StorageKind, dtype: &Value) -> Result<()> {
    let path = dir.join(MANIFEST_FILE);
    if m.kind != kind {
        return Err(StorageError::KindMismatch {
            path,
            expected: kind.to_string(),
            found: m.kind.to_string(),
        });
    }
    if kind != StorageKind::Document {
        let found = Dtype::from_descr(&m.dtype)
            .map_err(|e| StorageError::InvalidManifest { path: path.clone(), reason: e.to_string() })?;
        let expected = Dtype::from_descr(dtype)
            .map_err(|e| StorageError::InvalidArgument(format!("the format's dtype is invalid: {e}")))?;
        if found != expected {
            return Err(StorageError::DtypeMismatch {
                path,
                expected: expected.to_string(),
                found: found.to_string(),
            });
        }
    }
    Ok(())
}

/// Writes a stream storage: [`StreamWriter::append`] records to shards, then
/// [`StreamWriter::commit`]. At most 32 shards keep their files open at once: appending to
/// another one flushes, fsyncs and closes the least recently opened (it reopens on its next
/// append), so a writer may fill thousands of shards.
///
/// Opening a directory that already holds a stream storage continues it: new records are
/// appended after the committed ones of each shard, and bytes an interrupted session left
/// past the committed length are discarded. Nothing is visible to readers before `commit`.
///
/// ```
/// use guideloom_formats::TokenFormat;
/// use guideloom_storage::{StreamReader, StreamWriter};
/// let dir = tempfile::tempdir()?;
/// let mut w = StreamWriter::open(dir.path(), TokenFormat::<u16>::new())?;
/// w.append(0, &[1, 2, 3])?;
/// w.append(1, &[4, 5])?;
/// w.commit()?;
/// let r = StreamReader::open(dir.path(), TokenFormat::<u16>::new())?;
/// assert_eq!(r.len(), 5);
/// assert_eq!(r.read(2, 2)?, vec![3, 4]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct StreamWriter<F: StreamFormat> {
    dir: PathBuf,
    format: F,
    itemsize: u64,
    manifest: Manifest,
    open: BTreeMap<u64, (AppendFile, u64)>,
    open_shards: OpenShards,
    buf: Vec<u8>,
    _lock: WriterLock,
}

impl<F: StreamFormat> StreamWriter<F> {
    /// Opens or creates the stream storage in `dir` for appending with `format`. The writer
    /// holds the storage's writer lock until it is dropped.
    ///
    /// # Errors
    /// [`StorageError::Locked`] while another writer has the storage open;
    /// [`StorageError::KindMismatch`] or [`StorageError::DtypeMismatch`] when `dir` holds
    /// another kind or dtype; manifest errors as in [`Manifest::load`]; I/O errors.
    pub fn open(dir: impl AsRef<Path>, format: F) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        let dtype = format.dtype();
        let spec = FormatSpec { name: format.name().to_string(), params: format.params() };
        let (manifest, lock) = open_or_create_manifest(&dir, StorageKind::Stream, dtype.to_descr(), spec)?;
        Ok(StreamWriter {
            dir,
            format,
            itemsize: dtype.itemsize(),
            manifest,
            open: BTreeMap::new(),
            open_shards: OpenShards::default(),
            buf: Vec::new(),
            _lock: lock,
        })
    }

    /// Appends one record to shard `shard` (any u64 id; shards are ordered by id in the
    /// stream). Returns the number of elements appended.
    ///
    /// # Errors
    /// [`StorageError::Format`] when the format refuses the record (nothing of it is
    /// written); I/O errors naming the shard file.
    pub fn append(&mut self, shard: u64, record: &F::Input) -> Result<u64> {
        self.buf.clear();
        let n = self
            .format
            .pack(record, &mut self.buf)
            .map_err(|source| StorageError::Format { shard, source })?;
        if n.checked_mul(self.itemsize) != Some(self.buf.len() as u64) {
            return Err(StorageError::Format {
                shard,
                source: guideloom_formats::FormatError::Other(format!(
                    "format packed {} bytes for {n} elements of {} bytes",
                    self.buf.len(),
                    self.itemsize
                )),
            });
        }
        let buf = std::mem::take(&mut self.buf);
        let (file, elements) = self.shard_file(shard)?;
        let written = file.write(&buf);
        *elements += n;
        self.buf = buf;
        written.map(|()| n)
    }

    fn shard_file(&mut self, shard: u64) -> Result<(&mut AppendFile, &mut u64)> {
        if let Some((victim, _)) = self.open_shards.touch(shard).and_then(|v| self.open.get_mut(&v)) {
            victim.park()?;
        }
        if !self.open.contains_key(&shard) {
            let (committed, elements) = match self.manifest.shard(shard) {
                Some(s) => (FileEntry { bytes: s.bytes, checksum: s.checksum }, s.elements.unwrap_or(0)),
                None => (FileEntry { bytes: 0, checksum: 0 }, 0),
            };
            let path = Manifest::shard_path(&self.dir, shard, StorageKind::Stream.data_extension());
            let f = AppendFile::open(&path, shard, committed)?;
            self.open.insert(shard, (f, elements));
        }
        let (f, e) = self
            .open
            .get_mut(&shard)
            .ok_or_else(|| StorageError::InvalidArgument("shard vanished".into()))?;
        Ok((f, e))
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
            Some((_, e)) => *e,
            None => self.manifest.shard(shard).and_then(|s| s.elements).unwrap_or(0),
        }
    }

    /// Makes everything appended so far durable and visible: fsyncs the shard files, then
    /// replaces the manifest atomically. A writer may keep appending and commit again.
    ///
    /// # Errors
    /// I/O errors naming the file.
    pub fn commit(&mut self) -> Result<()> {
        for (&id, (file, elements)) in &mut self.open {
            let entry = file.sync()?;
            let shard = ShardEntry {
                id,
                elements: Some(*elements),
                documents: None,
                bytes: entry.bytes,
                checksum: entry.checksum,
                files: BTreeMap::new(),
            };
            match self.manifest.shards.binary_search_by_key(&id, |s| s.id) {
                Ok(i) => self.manifest.shards[i] = shard,
                Err(i) => self.manifest.shards.insert(i, shard),
            }
        }
        self.manifest.commit(&self.dir)
    }

    /// Commits and closes the writer.
    ///
    /// # Errors
    /// As [`StreamWriter::commit`].
    pub fn finish(mut self) -> Result<()> {
        self.commit()
    }
}

/// Where each shard's elements start in the stream.
#[derive(Debug, Clone)]
pub(crate) struct StreamLayout {
    /// Shard ids, increasing.
    pub(crate) ids: Vec<u64>,
    /// `starts[i]` = first element of shard `i`; `starts[len]` = total.
    pub(crate) starts: Vec<u64>,
}

impl StreamLayout {
    pub(crate) fn new(shards: &[ShardEntry]) -> Result<Self> {
        let mut starts = Vec::with_capacity(shards.len() + 1);
        let mut total = 0u64;
        starts.push(0);
        for s in shards {
            total = total
                .checked_add(s.elements.unwrap_or(0))
                .ok_or_else(|| StorageError::InvalidArgument("element counts overflow u64".into()))?;
            starts.push(total);
        }
        Ok(StreamLayout { ids: shards.iter().map(|s| s.id).collect(), starts })
    }

    pub(crate) fn total(&self) -> u64 {
        self.starts.last().copied().unwrap_or(0)
    }

    /// Calls `f(shard index, first element inside the shard, count)` for each non-empty
    /// segment of `[offset, offset + len)`, in order.
    pub(crate) fn segments(&self, offset: u64, len: u64, mut f: impl FnMut(usize, u64, u64)) -> Result<()> {
        let total = self.total();
        let end = offset.checked_add(len).filter(|&e| e <= total).ok_or(StorageError::OutOfRange {
            what: "window",
            start: offset,
            len,
            total,
        })?;
        if len == 0 {
            return Ok(());
        }
        // First shard whose end is past `offset`.
        let mut i = self.starts[1..].partition_point(|&e| e <= offset);
        let mut pos = offset;
        while pos < end {
            let (s, e) = (self.starts[i], self.starts[i + 1]);
            if e > pos {
                let n = e.min(end) - pos;
                f(i, pos - s, n);
                pos += n;
            }
            i += 1;
        }
        Ok(())
    }
}

/// Reads a stream storage: its length in elements and windows of the stream decoded by the
/// format.
///
/// The reader is `Send + Sync`; share it across threads by reference or `Arc`. Open
/// validates the manifest, the dtype against the format, every shard's byte size against its
/// element count, and that every shard file holds its committed bytes (bytes past them are
/// ignored). Shard files are opened lazily.
#[derive(Debug)]
pub struct StreamReader<F: StreamFormat> {
    dir: PathBuf,
    format: F,
    dtype: Dtype,
    manifest: Manifest,
    layout: StreamLayout,
    files: FileSet,
    options: ReadOptions,
}

impl<F: StreamFormat> StreamReader<F> {
    /// Opens the stream storage in `dir` with default [`ReadOptions`].
    ///
    /// # Errors
    /// [`StorageError::NotAStorage`], [`StorageError::InvalidManifest`],
    /// [`StorageError::UnsupportedVersion`], [`StorageError::KindMismatch`],
    /// [`StorageError::DtypeMismatch`], [`StorageError::MissingShard`],
    /// [`StorageError::ShardTooShort`].
    pub fn open(dir: impl AsRef<Path>, format: F) -> Result<Self> {
        Self::open_with(dir, format, ReadOptions::default())
    }

    /// Opens the stream storage in `dir` with explicit read options (backend, descriptor cap).
    ///
    /// # Errors
    /// As [`StreamReader::open`].
    pub fn open_with(dir: impl AsRef<Path>, format: F, options: ReadOptions) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        let manifest = Manifest::load(&dir)?;
        let dtype = format.dtype();
        check_kind_dtype(&manifest, &dir, StorageKind::Stream, &dtype.to_descr())?;
        let files = stream_files(&dir, &manifest, dtype.itemsize(), StorageKind::Stream)?;
        let layout = StreamLayout::new(&manifest.shards)?;
        Ok(StreamReader {
            dir,
            format,
            dtype,
            layout,
            manifest,
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

    /// The element dtype.
    pub fn dtype(&self) -> &Dtype {
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

    /// The shard files and their descriptor cache.
    pub fn files(&self) -> &FileSet {
        &self.files
    }

    /// The read options (backend, descriptor cap).
    pub fn options(&self) -> &ReadOptions {
        &self.options
    }

    /// Reads and decodes the window of `len` elements starting at element `offset`.
    ///
    /// # Errors
    /// [`StorageError::OutOfRange`] past the end; read errors of the backend;
    /// [`StorageError::Format`] from unpack.
    pub fn read(&self, offset: u64, len: u64) -> Result<F::Output> {
        let mut out = self.read_many(&[(offset, len)])?;
        out.pop().ok_or_else(|| StorageError::InvalidArgument("no window decoded".into()))
    }

    /// Reads and decodes a batch of windows `(offset, len)` (in elements) with one backend
    /// call; results are in request order.
    ///
    /// # Errors
    /// As [`StreamReader::read`]; the first failing window fails the batch.
    pub fn read_many(&self, windows: &[(u64, u64)]) -> Result<Vec<F::Output>> {
        let plan = self.plan(windows)?;
        let mut bytes = vec![0u8; plan.bytes];
        self.options.backend.read_into(&self.files, &plan.requests, &mut bytes)?;
        let itemsize = self.dtype.itemsize();
        let mut out = Vec::with_capacity(windows.len());
        let mut pos = 0usize;
        for (w, seg) in windows.iter().zip(plan.ranges) {
            let n = (w.1 * itemsize) as usize;
            let (lens, shards) = (&plan.lens[seg.clone()], &plan.shards[seg]);
            let first = shards.first().copied().unwrap_or(0);
            let format = |source| StorageError::Format { shard: first, source };
            let window = Window::new(&bytes[pos..pos + n], itemsize, lens, shards).map_err(format)?;
            out.push(self.format.unpack(&window).map_err(format)?);
            pos += n;
        }
        Ok(out)
    }

    /// Reads a batch of windows `(offset, len)` as raw little-endian bytes, concatenated in
    /// request order into `out` (cleared first; `sum(len) * itemsize` bytes).
    ///
    /// # Errors
    /// As [`StreamReader::read`], without decoding.
    pub fn read_many_raw(&self, windows: &[(u64, u64)], out: &mut Vec<u8>) -> Result<()> {
        let plan = self.plan(windows)?;
        out.clear();
        out.resize(plan.bytes, 0);
        self.options.backend.read_into(&self.files, &plan.requests, out)
    }

    /// Reads a batch of windows `(offset, len)` as raw little-endian bytes into `out`, back to
    /// back in request order, with one backend call. `out.len()` must be
    /// `sum(len) * itemsize` bytes (for example the bytes of a `[batch, seq_len]` token buffer,
    /// via `bytemuck::cast_slice_mut`), so a batch lands in its final buffer with one copy.
    ///
    /// # Errors
    /// [`StorageError::InvalidArgument`] when `out` has another length; otherwise as
    /// [`StreamReader::read`], without decoding.
    pub fn read_many_into(&self, windows: &[(u64, u64)], out: &mut [u8]) -> Result<()> {
        let plan = self.plan(windows)?;
        if plan.bytes != out.len() {
            return Err(StorageError::InvalidArgument(format!(
                "read_many_into: the windows hold {} bytes but the buffer has {}",
                plan.bytes,
                out.len()
            )));
        }
        self.options.backend.read_into(&self.files, &plan.requests, out)
    }

    /// The byte requests of a batch of windows and each window's segmentation.
    fn plan(&self, windows: &[(u64, u64)]) -> Result<BatchPlan> {
        let itemsize = self.dtype.itemsize();
        let mut plan = BatchPlan {
            requests: Vec::with_capacity(windows.len() + 4),
            lens: Vec::with_capacity(windows.len() + 4),
            shards: Vec::with_capacity(windows.len() + 4),
            ranges: Vec::with_capacity(windows.len()),
            bytes: 0,
        };
        let mut total = 0u64;
        for &(offset, len) in windows {
            let start = plan.lens.len();
            self.layout.segments(offset, len, |i, local, n| {
                plan.requests.push(ReadRequest { file: i, offset: local * itemsize, len: n * itemsize });
                plan.lens.push(n);
                plan.shards.push(self.layout.ids[i]);
            })?;
            plan.ranges.push(start..plan.lens.len());
            total += len * itemsize;
        }
        plan.bytes =
            usize::try_from(total).map_err(|_| StorageError::InvalidArgument("batch too large".into()))?;
        Ok(plan)
    }
}

/// A batch of windows turned into byte requests: window `i`'s segments are
/// `lens[ranges[i]]` elements from shards `shards[ranges[i]]`; `bytes` in all.
struct BatchPlan {
    requests: Vec<ReadRequest>,
    lens: Vec<u64>,
    shards: Vec<u64>,
    ranges: Vec<std::ops::Range<usize>>,
    bytes: usize,
}

/// The data files of a stream-kind storage, checked: element count × itemsize = bytes, and
/// each file exists and holds its committed bytes.
pub(crate) fn stream_files(
    dir: &Path,
    m: &Manifest,
    itemsize: u64,
    kind: StorageKind,
) -> Result<Vec<ShardFile>> {
    let path = dir.join(MANIFEST_FILE);
    let mut files = Vec::with_capacity(m.shards.len());
    for s in &m.shards {
        let elements = s.elements.unwrap_or(0);
        if elements.checked_mul(itemsize) != Some(s.bytes) {
            return Err(StorageError::InvalidManifest {
                path,
                reason: format!(
                    "shard {} records {elements} elements of {itemsize} bytes but {} bytes",
                    s.id, s.bytes
                ),
            });
        }
        let p = Manifest::shard_path(dir, s.id, kind.data_extension());
        check_file(&p, s.id, s.bytes)?;
        files.push(ShardFile { path: p, shard: s.id, committed: s.bytes });
    }
    Ok(files)
}
