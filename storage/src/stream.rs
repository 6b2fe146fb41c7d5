//! Stream storage: fixed-size elements appended per shard, read back as windows of the
//! concatenated stream (shards in increasing id order), and the reader of a
//! [`crate::StreamLayout`] ([`StreamReader::from_layout`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use guideloom_formats::{Dtype, FormatError, RawWindow, StreamFormat};

use crate::core::{
    check_shard_files, PlannedOutput, ReadPlan, Reader, ReaderIndex, ReaderKind, Sealed, Window, Writer,
};
use crate::dir::StorageDir;
use crate::io::{MappedPieces, MmapBackend, ReadOptions, ReadRequest, ShardFile};
use crate::layout::{Segment, StreamLayout};
use crate::manifest::{Manifest, ShardEntry, StorageKind, MANIFEST_FILE};
use crate::markers::Stream;
use crate::{Result, StorageError};

/// Reads a stream storage: its length in elements and windows of the stream decoded by the
/// format. Open also checks every shard's byte size against its element count.
///
/// ```
/// use guideloom_formats::TokenFormat;
/// use guideloom_storage::{StreamReader, StreamWriter, Window};
/// let dir = tempfile::tempdir()?;
/// let mut w = StreamWriter::open(dir.path(), TokenFormat::<u16>::new())?;
/// w.append(0, &[1, 2, 3])?;
/// w.append(1, &[4, 5])?;
/// w.commit()?;
/// let r = StreamReader::open(dir.path(), TokenFormat::<u16>::new())?;
/// assert_eq!(r.len(), 5);
/// assert_eq!(r.read(Window::new(2, 2))?, vec![3, 4]);
/// // The sans-IO split: byte ranges first, then the bytes, then the decode.
/// let plan = r.plan(&[Window::new(0, 2), Window::new(3, 2)])?;
/// assert_eq!((plan.requests().len(), plan.bytes()), (2, 8));
/// let bytes = r.fetch(&plan)?;
/// assert_eq!(r.decode(&plan, &bytes)?, [vec![1, 2], vec![4, 5]]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub type StreamReader<F> = Reader<Stream<F>>;

/// Writes a stream storage: [`Writer::append`] records to shards, then [`Writer::commit`]
/// (see [`Writer`] for shard parking and the crash rules).
pub type StreamWriter<F> = Writer<Stream<F>>;

impl<F: StreamFormat> StreamReader<F> {
    /// A stream reader over the files `layout` describes, read in place through `dir` (a
    /// [`crate::LocalDir`] through `options.backend`, any other [`StorageDir`] through
    /// [`StorageDir::read_requests`]): windows, batches, `plan`/`fetch`/`decode` and the
    /// loader's sources work as over a native storage. The reader's manifest is the one
    /// [`StreamLayout::spec`] describes; nothing is written, and the files are not opened
    /// until a batch reads them (a file shorter than its committed length gives
    /// [`StorageError::ShortRead`] then).
    ///
    /// # Errors
    /// [`StorageError::DtypeMismatch`] when the format's dtype is not the layout's;
    /// [`StorageError::InvalidLayout`] when a file is not named by a relative path below
    /// `dir`, a segment names no file or lies past its file's committed bytes, a count
    /// overflows `u64`, or big-endian elements are not of a primitive dtype;
    /// [`StorageError::FormatDtype`] when the dtype cannot be stored in a manifest.
    pub fn from_layout(
        dir: Arc<dyn StorageDir>,
        layout: StreamLayout,
        format: F,
        options: ReadOptions,
    ) -> Result<Self> {
        let want = format.dtype();
        if want != layout.dtype {
            return Err(StorageError::DtypeMismatch {
                path: dir.path().to_path_buf(),
                expected: want.to_string(),
                found: layout.dtype.to_string(),
            });
        }
        let per_file = layout.check(dir.path())?;
        let StreamLayout { files, segments, dtype, big_endian, spec, metadata } = layout;
        let mut manifest = Manifest::new(StorageKind::Stream, Some(&dtype), spec)?;
        for (id, (f, elements)) in files.iter().zip(per_file).enumerate() {
            manifest.upsert(ShardEntry {
                id: id as u64,
                elements: Some(elements),
                documents: None,
                bytes: f.bytes,
                checksum: 0,
                files: BTreeMap::new(),
                path: None,
            });
        }
        *manifest.metadata_mut() = metadata;
        let index = StreamIndex::from_segments(dtype, &segments, big_endian);
        let len = index.len();
        let files = files
            .iter()
            .enumerate()
            .map(|(i, f)| ShardFile { path: dir.path().join(&f.path), shard: i as u64, committed: f.bytes })
            .collect();
        Ok(Reader::<Stream<F>>::from_index(dir, manifest, index, files, len, format, options))
    }
}

/// What a stream reader keeps in memory: the dtype and where each shard's elements start in
/// the stream (16 bytes per shard).
#[derive(Debug, Clone)]
pub struct StreamIndex {
    dtype: Dtype,
    itemsize: u64,
    /// Shard ids, increasing.
    ids: Vec<u64>,
    /// `starts[i]` = first element of shard `i`; `starts[len]` = total.
    starts: Vec<u64>,
    /// A [`crate::StreamLayout`]'s segments ("shards" above): per segment, the file and the
    /// byte its elements start at. `None` for native storages (shard `i` is file `step * i`
    /// from byte 0).
    extents: Option<Box<Extents>>,
    /// Whether the stored elements are big-endian (a `>` NumPy array): `decode` and
    /// `read_many_into` then swap them to little-endian.
    swap: bool,
}

/// Where the segments of a [`crate::StreamLayout`] lie: parallel to [`StreamIndex`]'s `ids`.
#[derive(Debug, Clone)]
struct Extents {
    file: Vec<usize>,
    base: Vec<u64>,
}

impl StreamIndex {
    /// Elements in the stream.
    pub(crate) fn len(&self) -> u64 {
        self.starts.last().copied().unwrap_or(0)
    }

    /// The element dtype.
    pub(crate) fn dtype(&self) -> &Dtype {
        &self.dtype
    }

    /// Bytes of one element.
    pub(crate) fn itemsize(&self) -> u64 {
        self.itemsize
    }

    /// Elements in shard `i` (by position).
    pub(crate) fn shard_elements(&self, i: usize) -> u64 {
        self.starts[i + 1] - self.starts[i]
    }

    /// The index of a [`crate::StreamLayout`]: `dtype` elements (stored big-endian when
    /// `swap`) in `segments`, in stream order; segment `i` is shard `i` in windows'
    /// segmentation and errors. The caller checked the counts (`StreamLayout::check`): no
    /// byte end or total overflows `u64`.
    pub(crate) fn from_segments(dtype: Dtype, segments: &[Segment], swap: bool) -> Self {
        let itemsize = dtype.itemsize();
        let mut starts = Vec::with_capacity(segments.len() + 1);
        let (mut file, mut base) = (Vec::with_capacity(segments.len()), Vec::with_capacity(segments.len()));
        let mut total = 0u64;
        starts.push(0);
        for s in segments {
            total += s.elements;
            starts.push(total);
            file.push(s.file);
            base.push(s.offset);
        }
        let ids = (0..segments.len() as u64).collect();
        let extents = Some(Box::new(Extents { file, base }));
        StreamIndex { dtype, itemsize, ids, starts, extents, swap }
    }

    /// Whether stored elements are big-endian (swapped on decode and `read_many_into`).
    pub(crate) fn swapped(&self) -> bool {
        self.swap
    }

    /// Plans `windows`; shard `i`'s elements are read from file `step * i` (or from its
    /// extent, for a [`crate::StreamLayout`]).
    pub(crate) fn plan_windows(&self, windows: &[Window], step: usize) -> Result<ReadPlan> {
        let mut plan = ReadPlan::with_capacity(windows.len());
        for &w in windows {
            self.segments(w, |i, local, n| {
                let (file, base) = match &self.extents {
                    None => (step * i, 0),
                    Some(x) => (x.file[i], x.base[i]),
                };
                let request =
                    ReadRequest { file, offset: base + local * self.itemsize, len: n * self.itemsize };
                plan.push_segment(request, n, self.ids[i]);
            })?;
            let bytes =
                w.len.checked_mul(self.itemsize).ok_or(StorageError::BatchTooLarge { bytes: u64::MAX })?;
            plan.end_output(bytes)?;
        }
        Ok(plan)
    }

    /// Calls `f(shard index, first element inside the shard, count)` for each non-empty
    /// segment of `w`, in order.
    fn segments(&self, w: Window, mut f: impl FnMut(usize, u64, u64)) -> Result<()> {
        let total = self.len();
        let out_of_range = StorageError::OutOfRange { what: "window", start: w.offset, len: w.len, total };
        let end = w.end().filter(|&e| e <= total).ok_or(out_of_range)?;
        // First shard whose end is past `offset`.
        let mut i = self.starts[1..].partition_point(|&e| e <= w.offset);
        let mut pos = w.offset;
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

    /// A planned output as the format sees it, with the shard its errors name.
    pub(crate) fn raw_window<'a>(&self, output: PlannedOutput<'a>) -> Result<(RawWindow<'a>, u64)> {
        let ((lens, shards), shard) = (output.segments(), output.first_shard());
        let window = RawWindow::new(output.bytes(), self.itemsize, lens, shards)
            .map_err(|source| StorageError::Format { shard, source })?;
        Ok((window, shard))
    }
}

impl Sealed for StreamIndex {}

impl ReaderIndex for StreamIndex {
    type Key = Window;

    /// Checks the data files of a stream-kind storage (element count × itemsize = bytes,
    /// each file present with its committed bytes) and lays out the stream.
    fn open(dir: &dyn StorageDir, m: &Manifest) -> Result<(Self, Vec<ShardFile>, u64)> {
        let path = || dir.path().join(MANIFEST_FILE);
        let dtype = m.dtype().cloned().ok_or_else(|| StorageError::InvalidManifest {
            path: path(),
            reason: format!("a {} storage has no element dtype", m.kind()),
        })?;
        let itemsize = dtype.itemsize();
        let mut starts = Vec::with_capacity(m.shards().len() + 1);
        let mut total = 0u64;
        starts.push(0);
        // The manifest's entries first, then every shard file at once (`check_shard_files`); an
        // entry found wrong is reported after the files of the shards before it are checked,
        // so the first fault in shard order is the one reported, as when each shard's entry
        // and file were checked in turn.
        let mut bad_entry = None;
        let mut checked = 0;
        for s in m.shards() {
            let elements = s.elements.unwrap_or(0);
            if elements.checked_mul(itemsize) != Some(s.bytes) {
                bad_entry = Some(StorageError::InvalidManifest {
                    path: path(),
                    reason: format!(
                        "shard {} records {elements} elements of {itemsize} bytes but {} bytes",
                        s.id, s.bytes
                    ),
                });
                break;
            }
            // This shard's file is checked before its count is added to the total (the order
            // of the one-by-one checks).
            checked += 1;
            let Some(t) = total.checked_add(elements) else {
                bad_entry = Some(StorageError::InvalidManifest {
                    path: path(),
                    reason: "element counts overflow u64".into(),
                });
                break;
            };
            total = t;
            starts.push(total);
        }
        let files = check_shard_files(dir, &m.shards()[..checked], m.kind().data_extension())?;
        if let Some(e) = bad_entry {
            return Err(e);
        }
        let ids = m.shards().iter().map(|s| s.id).collect();
        Ok((StreamIndex { dtype, itemsize, ids, starts, extents: None, swap: false }, files, total))
    }

    fn plan(&self, windows: &[Window]) -> Result<ReadPlan> {
        self.plan_windows(windows, 1)?.finish()
    }
}

impl<F: StreamFormat> ReaderKind for Stream<F> {
    type Index = StreamIndex;
    type Output = F::Output;

    fn decode_at(format: &F, index: &StreamIndex, output: PlannedOutput<'_>) -> Result<F::Output> {
        if index.swap {
            // Big-endian elements (a layout's `>` array): decode a little-endian copy.
            let mut le = output.bytes().to_vec();
            swap_elements(&mut le, index.itemsize);
            let ((lens, shards), shard) = (output.segments(), output.first_shard());
            let window = RawWindow::new(&le, index.itemsize, lens, shards)
                .map_err(|source| StorageError::Format { shard, source })?;
            return format.unpack(&window).map_err(|source| StorageError::Format { shard, source });
        }
        let (window, shard) = index.raw_window(output)?;
        format.unpack(&window).map_err(|source| StorageError::Format { shard, source })
    }
}

impl<F: StreamFormat> Reader<Stream<F>> {
    /// The element dtype.
    pub fn dtype(&self) -> &Dtype {
        self.index().dtype()
    }

    /// Reads a batch of windows as raw little-endian bytes, concatenated in request order
    /// into `out` (cleared first; `sum(len) * itemsize` bytes), with one backend call.
    ///
    /// # Errors
    /// As [`Reader::read_many`], without decoding.
    pub fn read_many_raw(&self, windows: &[Window], out: &mut Vec<u8>) -> Result<()> {
        let plan = self.plan(windows)?;
        out.clear();
        // `plan` checked that its bytes fit `usize`.
        out.resize(plan.bytes() as usize, 0);
        self.fetch_into(&plan, out)?;
        if self.index().swapped() {
            swap_elements(out, self.index().itemsize());
        }
        Ok(())
    }

    /// Reads a batch of windows as raw little-endian bytes into `out`, back to back in
    /// request order, with one backend call. `out.len()` must be `sum(len) * itemsize` bytes
    /// (for example the bytes of a `[batch, seq_len]` token buffer, via
    /// `bytemuck::cast_slice_mut`), so a batch lands in its final buffer with one copy.
    ///
    /// # Errors
    /// [`StorageError::BufferLength`] when `out` has another length; otherwise as
    /// [`Reader::read_many`], without decoding.
    pub fn read_many_into(&self, windows: &[Window], out: &mut [u8]) -> Result<()> {
        let plan = self.plan(windows)?;
        self.fetch_into(&plan, out)?;
        if self.index().swapped() {
            swap_elements(out, self.index().itemsize());
        }
        Ok(())
    }
}

/// A batch of stream windows as zero-copy views into the mapped shard files, made by
/// [`Reader::map_many`]: window `i` is the concatenation of [`MappedWindows::window`]`(i)`'s
/// pieces (one per shard it crosses, in stream order), each a `&[u8]` of little-endian element
/// bytes. The batch holds one reference to the map of each shard it reads (none per window),
/// so its views stay valid while it lives, whatever the reader's descriptor cache closes.
///
/// A piece of a page-aligned map at an offset that is a multiple of the element size is
/// aligned for that element, so `bytemuck::cast_slice` turns it into `&[u16]` (`&[u32]` ...)
/// without copying.
#[derive(Debug, Clone, Default)]
pub struct MappedWindows {
    pieces: MappedPieces,
    /// Per window: one past its last piece.
    ends: Vec<usize>,
}

impl MappedWindows {
    /// Number of windows.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether the batch holds no window.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The pieces of window `i` in stream order (one per shard the window crosses), or
    /// `None` when `i >= len()`.
    pub fn window(&self, i: usize) -> Option<impl ExactSizeIterator<Item = &[u8]> + '_> {
        let end = *self.ends.get(i)?;
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        let pieces = self.pieces.pieces.get(start..end)?;
        Some(pieces.iter().map(|p| self.pieces.bytes(p)))
    }

    /// Every piece of every window, in batch order.
    pub fn parts(&self) -> impl ExactSizeIterator<Item = &[u8]> + '_ {
        self.pieces.pieces.iter().map(|p| self.pieces.bytes(p))
    }
}

impl<F: StreamFormat> Reader<Stream<F>> {
    /// A batch of windows as views into the mapped shards ([`MappedWindows`]), without
    /// copying a byte: for callers that gather on their own (a copy to a device, a hash).
    /// The mmap contract is the caller's, accepted when it built `mmap`
    /// ([`MmapBackend::new`]); the reader's own backend is not used.
    ///
    /// # Errors
    /// [`StorageError::OutOfRange`] for a window past the end; [`StorageError::Backend`]
    /// when the storage is not in a local directory or its elements are big-endian (a
    /// layout's `>` array: its bytes cannot be served as little-endian in place); otherwise
    /// as [`MmapBackend::map_range`].
    pub fn map_many(&self, windows: &[Window], mmap: &MmapBackend) -> Result<MappedWindows> {
        let refuse = |reason: &str| StorageError::Backend { backend: "mmap", reason: reason.into() };
        if self.storage_dir().local_dir().is_none() {
            return Err(refuse("zero-copy views need a storage in a local directory"));
        }
        if self.index().swapped() {
            return Err(refuse("big-endian elements cannot be viewed in place as little-endian ids"));
        }
        let plan = self.plan(windows)?;
        let pieces = mmap.map_pieces(self.files(), plan.requests())?;
        let ends = (0..plan.len()).map(|i| plan.segment_range(i).end).collect();
        Ok(MappedWindows { pieces, ends })
    }
}

impl<F: StreamFormat> Writer<Stream<F>> {
    /// Appends one record to shard `shard` (any u64 id; shards are ordered by id in the
    /// stream). Returns the number of elements appended.
    ///
    /// # Errors
    /// [`StorageError::Format`] when the format refuses the record (nothing of it is
    /// written); [`StorageError::ShardOverflow`]; I/O errors naming the shard file.
    pub fn append(&mut self, shard: u64, record: &F::Input) -> Result<u64> {
        let buf = &mut self.scratch;
        buf.clear();
        let n = self.format.pack(record, buf).map_err(|source| StorageError::Format { shard, source })?;
        let itemsize = self.core.itemsize();
        if n.checked_mul(itemsize) != Some(buf.len() as u64) {
            let reason = format!("format packed {} bytes for {n} elements of {itemsize} bytes", buf.len());
            return Err(StorageError::Format { shard, source: FormatError::Other(reason) });
        }
        let s = self.core.shard(shard)?;
        let count = s.count().checked_add(n).ok_or(StorageError::ShardOverflow { shard })?;
        s.append(&[buf], count)?;
        Ok(n)
    }
}

/// Reverses the bytes of every `itemsize`-byte element of `bytes` (big- to little-endian).
fn swap_elements(bytes: &mut [u8], itemsize: u64) {
    if let Ok(size @ 2..) = usize::try_from(itemsize) {
        bytes.chunks_exact_mut(size).for_each(<[u8]>::reverse);
    }
}
