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

use guideloom_formats::{Dtype, FormatError, MetaWindow, StreamWithMetaFormat};

use crate::core::{
    check_file, IndexFile, PayloadPlan, PlannedOutput, ReadPlan, Reader, ReaderIndex, ReaderKind, Sealed,
    Window, Writer,
};
use crate::dir::StorageDir;
use crate::io::{ReadRequest, ShardFile};
use crate::manifest::{Manifest, ShardEntry, MANIFEST_FILE, META, METAIDX};
use crate::markers::StreamWithMeta;
use crate::stream::StreamIndex;
use crate::{Result, StorageError};

/// Bytes of one run-index entry (first element u64, payload offset u64).
const ENTRY: u64 = 16;

/// Reads a stream-with-meta storage: its length in elements and windows decoded by the
/// format together with the metadata payloads they touch. A batch reads all element bytes
/// and payloads with one backend call; a payload touched by several windows is read once per
/// window.
///
/// Open validates what a [`crate::StreamReader`] validates, plus, per shard, that the `.meta`
/// and `.metaidx` files hold their committed bytes and that the run index is sound (a whole
/// number of 16-byte entries, no more runs than elements, first elements strictly increasing
/// from 0 and below the element count, payload offsets from 0, never decreasing, within the
/// committed `.meta` length); a damaged index is [`StorageError::CorruptIndex`], a shard
/// without its `meta`/`metaidx` entries [`StorageError::InvalidManifest`]. The index is kept
/// in memory (16 bytes per run). [`Reader::files`] holds, per shard, its `.stream` then its
/// `.meta` file.
///
/// ```
/// use guideloom_formats::{DocumentTokensFormat, TokenDocument};
/// use guideloom_storage::{StreamWithMetaReader, StreamWithMetaWriter, Window};
/// let dir = tempfile::tempdir()?;
/// let doc = |ordinal, tokens: &[u32]| TokenDocument { ordinal, tokens: tokens.to_vec(), data: vec![] };
/// let mut w = StreamWithMetaWriter::open(dir.path(), DocumentTokensFormat::<u16>::new())?;
/// w.append(0, &[doc(0, &[5, 6, 7]), doc(1, &[8, 9])])?;
/// w.commit()?;
/// let r = StreamWithMetaReader::open(dir.path(), DocumentTokensFormat::<u16>::new())?;
/// assert_eq!(r.len(), 5);
/// let out = r.read(Window::new(1, 3))?;
/// assert_eq!(out.tokens, [6, 7, 8]);
/// assert_eq!(out.document, [0, 0, 1]);
/// assert_eq!(out.position, [1, 2, 0]); // true positions: the window starts inside document 0
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub type StreamWithMetaReader<F> = Reader<StreamWithMeta<F>>;

/// Writes a stream-with-meta storage: [`Writer::append`] records to shards, then
/// [`Writer::commit`] (see [`Writer`] for shard parking and the crash rules).
///
/// Each append packs the whole record first (elements and `(key, payload?)` pairs), checks
/// the run contract and the pair count against the format's `size`, and only then writes the
/// elements to `shard-NNNNN.stream`, each run's payload once to `shard-NNNNN.meta` and one
/// 16-byte entry per run to `shard-NNNNN.metaidx`. A refused record leaves nothing behind.
pub type StreamWithMetaWriter<F> = Writer<StreamWithMeta<F>>;

/// One shard's run index, validated: `starts` strictly increasing from 0 and below the
/// shard's element count; `payloads` has one more entry (the `.meta` committed length),
/// starting at 0 and never decreasing.
#[derive(Debug, Clone)]
pub(crate) struct ShardRuns {
    starts: Vec<u64>,
    payloads: Vec<u64>,
}

/// What a stream-with-meta reader keeps in memory: the stream's layout and every shard's run
/// index.
#[derive(Debug, Clone)]
pub struct StreamWithMetaIndex {
    stream: StreamIndex,
    runs: Vec<ShardRuns>,
}

impl StreamWithMetaIndex {
    /// Adds the payloads of every window of `plan` (a stream plan over files `2 * i`).
    fn plan_payloads(&self, mut plan: ReadPlan) -> Result<ReadPlan> {
        let too_large = || StorageError::BatchTooLarge { bytes: u64::MAX };
        // At least 1: every dtype has a field of a primitive type.
        let itemsize = self.stream.itemsize();
        let mut requests = Vec::new();
        let mut p = PayloadPlan::default();
        let mut at = 0u64;
        for w in 0..plan.len() {
            let first_payload = p.shard.len();
            for k in plan.segment_range(w) {
                let (seg, n) = (plan.segment_requests()[k], plan.segment_len(k));
                let (i, local) = (seg.file / 2, seg.offset / itemsize);
                let runs = &self.runs[i];
                let (end, shard_elements) = (local + n, self.stream.shard_elements(i));
                // The run holding `local` (starts[0] == 0 was checked on open).
                let mut r = runs.starts.partition_point(|&s| s <= local).saturating_sub(1);
                let mut pos = local;
                while pos < end {
                    let run_end = runs.starts.get(r + 1).copied().unwrap_or(shard_elements);
                    let slot = u32::try_from(p.shard.len() - first_payload).map_err(|_| too_large())?;
                    let (p0, p1) = (runs.payloads[r], runs.payloads[r + 1]);
                    requests.push(ReadRequest { file: 2 * i + 1, offset: p0, len: p1 - p0 });
                    at = at.checked_add(p1 - p0).ok_or_else(too_large)?;
                    p.shard.push(plan.segment_shard(k));
                    p.run_offset.push(pos - runs.starts[r]);
                    p.byte_end.push(at);
                    let m = usize::try_from(run_end.min(end) - pos).map_err(|_| too_large())?;
                    p.index.resize(p.index.len() + m, slot);
                    pos = run_end.min(end);
                    r += 1;
                }
            }
            p.out_payload_end.push(p.shard.len());
            p.out_index_end.push(p.index.len());
        }
        plan.set_payloads(requests, p)?;
        Ok(plan)
    }
}

impl Sealed for StreamWithMetaIndex {}

impl ReaderIndex for StreamWithMetaIndex {
    type Key = Window;

    /// Checks the stream files, the payload files and loads the run indexes.
    fn open(dir: &dyn StorageDir, m: &Manifest) -> Result<(Self, Vec<ShardFile>, u64)> {
        let (stream, data, len) = StreamIndex::open(dir, m)?;
        let mut files = Vec::with_capacity(2 * data.len());
        let mut runs = Vec::with_capacity(data.len());
        for (s, d) in m.shards().iter().zip(data) {
            let entry = |ext: &str| {
                s.files.get(ext).copied().ok_or_else(|| StorageError::InvalidManifest {
                    path: dir.path().join(MANIFEST_FILE),
                    reason: format!("shard {} lacks its {ext:?} file entry", s.id),
                })
            };
            let (meta, index) = (entry(META)?, entry(METAIDX)?);
            let meta_file = check_file(dir, s.id, &s.file_name(META), meta.bytes)?;
            runs.push(load_runs(dir, s, meta.bytes, index.bytes)?);
            files.push(d);
            files.push(meta_file);
        }
        Ok((StreamWithMetaIndex { stream, runs }, files, len))
    }

    /// The stream plan (element bytes of every window, shard `i` from file `2 * i`), then one
    /// request per payload each window touches (from file `2 * i + 1`).
    fn plan(&self, windows: &[Window]) -> Result<ReadPlan> {
        self.plan_payloads(self.stream.plan_windows(windows, 2)?)?.finish()
    }
}

impl<F: StreamWithMetaFormat> ReaderKind for StreamWithMeta<F> {
    type Index = StreamWithMetaIndex;
    type Output = F::Output;

    fn decode_at(format: &F, index: &StreamWithMetaIndex, output: PlannedOutput<'_>) -> Result<F::Output> {
        let (stream, shard) = index.stream.raw_window(output)?;
        let fail = |source| StorageError::Format { shard, source };
        let p = output.payloads();
        let window = MetaWindow::new(stream, p.shards, p.index, &p.data, p.run_offsets).map_err(fail)?;
        format.unpack(&window).map_err(fail)
    }
}

impl<F: StreamWithMetaFormat> Reader<StreamWithMeta<F>> {
    /// The element dtype.
    pub fn dtype(&self) -> &Dtype {
        self.index().stream.dtype()
    }

    /// Number of runs, that is of stored payloads (all shards).
    pub fn run_count(&self) -> u64 {
        self.index().runs.iter().map(|r| r.starts.len() as u64).sum()
    }
}

impl<F: StreamWithMetaFormat> Writer<StreamWithMeta<F>> {
    /// Appends one record to shard `shard` (any u64 id; shards are ordered by id in the
    /// stream). Returns the number of elements appended. Every run's payload belongs to
    /// `shard`.
    ///
    /// # Errors
    /// [`StorageError::Format`] wrapping [`FormatError::InvalidMeta`] when the pairs break the
    /// run contract (a key repeating after another key, a run starting without payload) or
    /// their count differs from the format's `size`, or wrapping the format's own error;
    /// nothing of the record is written then. [`StorageError::ShardOverflow`]; I/O errors
    /// naming the shard file.
    pub fn append(&mut self, shard: u64, record: &F::Input) -> Result<u64> {
        let refuse = |source| StorageError::Format { shard, source };
        let size = self.format.size(record);
        let (buf, sink, idx) = &mut self.scratch;
        sink.clear();
        buf.clear();
        let n = self.format.pack(record, sink, buf).map_err(refuse)?;
        sink.check(size).map_err(refuse)?;
        let itemsize = self.core.itemsize();
        if n != size || n.checked_mul(itemsize) != Some(buf.len() as u64) {
            return Err(refuse(FormatError::Other(format!(
                "format packed {n} elements in {} bytes for a record of size {size} with {itemsize}-byte elements",
                buf.len()
            ))));
        }
        let s = self.core.shard(shard)?;
        let overflow = || StorageError::ShardOverflow { shard };
        idx.clear();
        let mut payload_at = s.file_len(1);
        for (first, payload) in sink.runs() {
            let first = s.count().checked_add(first).ok_or_else(overflow)?;
            idx.extend_from_slice(&first.to_le_bytes());
            idx.extend_from_slice(&payload_at.to_le_bytes());
            payload_at = payload_at.checked_add(payload.len() as u64).ok_or_else(overflow)?;
        }
        let count = s.count().checked_add(n).ok_or_else(overflow)?;
        s.append(&[buf, sink.payload_bytes(), idx], count)?;
        Ok(n)
    }
}

/// Reads and validates a shard's run index (see [`ShardRuns`]).
pub(crate) fn load_runs(
    dir: &dyn StorageDir,
    s: &ShardEntry,
    meta_bytes: u64,
    index_bytes: u64,
) -> Result<ShardRuns> {
    let file = IndexFile::new(dir, s, METAIDX);
    let corrupt = |entry, reason| file.corrupt(entry, reason);
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
    file.check(index_bytes)?;
    // `count <= elements` and the file holds at least `index_bytes` bytes (both checked), so
    // these allocations are bounded by real file sizes.
    let cap = usize::try_from(count).map_err(|_| corrupt(0, format!("{count} runs do not fit in memory")))?;
    let mut starts = Vec::with_capacity(cap);
    let mut payloads = Vec::with_capacity(cap + 1);
    let mut block = vec![0u8; (1usize << 20).min(cap * ENTRY as usize)];
    let mut read = 0u64;
    while read < index_bytes {
        let n = (index_bytes - read).min(block.len() as u64) as usize;
        file.read_at(read, &mut block[..n])?;
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
