//! Grain's ArrayRecord files (google/array_record `cpp/array_record_writer.cc`,
//! `cpp/array_record_reader.cc`, `cpp/layout.proto`; `python/array_record_data_source.py`),
//! read by record index through the footer.
//!
//! Layout, on the riegeli/records container ([`riegeli`]): the signature chunk, the user
//! chunks (`group_size` records each, the last may hold fewer), padding to a 64 KiB block,
//! the footer chunk (record 0 a `RiegeliFooterMetadata`, then one `ArrayRecordFooter`
//! `{chunk_offset, decoded_data_size, num_records}` per user chunk), padding, and the
//! postscript chunk, 64 KiB before the end (`RiegeliPostscript {footer_offset, magic =
//! 0x71930e704fdae05e}`), padding. Record `i` is record `i % group_size` of chunk
//! `i / group_size`; reading it reads, hashes and decompresses that one chunk.
//!
//! Open reads the postscript and the footer only, and checks them all: the file's size (at
//! least one block, whole blocks), the signature, the postscript magic, the footer's place,
//! `version == 1`, one footer entry per chunk, offsets strictly increasing below the
//! footer, the record counts against the metadata and `group_size`. Each chunk read is
//! checked against its footer entry (type, records, decoded bytes) and its hashes.

mod proto;
pub(crate) mod riegeli;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use guideloom_loader::{DataSource, LoaderError};
use guideloom_storage::{RemoteOptions, StorageError, StorageLocation};
use prost::Message;

use crate::error::{ForeignError, InteropError, Result};
use crate::files::{expand, Fs, Place};
use crate::format::ForeignFormat;
use crate::layouts::records::{in_record, record_tokens, Collected};
use crate::options::ForeignOptions;
use crate::parts::Parts;
use riegeli::{Chunks, SimpleRecords, BLOCK, SIGNATURE};

/// The postscript's magic number.
const MAGIC: u64 = 0x7193_0e70_4fda_e05e;
/// The most chunk entries a footer may list per byte of the file (an entry takes at least
/// 6 bytes of the footer chunk).
const ENTRY_BYTES: u64 = 6;

/// Whether `head` (the first bytes of a file) is a riegeli/records signature.
pub(crate) fn is_riegeli(head: &[u8]) -> bool {
    head.starts_with(&SIGNATURE)
}

/// One user chunk's footer entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    offset: u64,
    decoded: u64,
    records: u64,
}

/// One ArrayRecord file, opened through its postscript and footer: records by index, one
/// chunk read and decoded per record not in the last chunk read.
///
/// ```no_run
/// use guideloom_interop::ArrayRecordReader;
/// let file = ArrayRecordReader::open("data/train-00000-of-00008.array_record")?;
/// println!("{} records, {} per chunk", file.len(), file.group_size());
/// let record: Vec<u8> = file.record(17)?;
/// # let _ = record;
/// # Ok::<(), guideloom_interop::InteropError>(())
/// ```
#[derive(Debug)]
pub struct ArrayRecordReader {
    fs: Fs,
    name: String,
    size: u64,
    footer_offset: u64,
    entries: Vec<Entry>,
    group_size: u64,
    records: u64,
    writer_options: String,
    /// The last chunk decoded.
    cache: Mutex<Option<(usize, Arc<SimpleRecords>)>>,
    /// Chunks decoded so far.
    decoded: AtomicU64,
}

impl ArrayRecordReader {
    /// Opens the ArrayRecord file at `path`, reading its postscript and footer.
    ///
    /// # Errors
    /// [`InteropError::Dataset`] naming the file, with [`ForeignError::FileTooSmall`],
    /// [`ForeignError::NotBlockAligned`], [`ForeignError::BadSignature`],
    /// [`ForeignError::ChunkHashMismatch`], [`ForeignError::BadMagic`] (the postscript's),
    /// [`ForeignError::FooterOutOfRange`], [`ForeignError::UnsupportedVersion`],
    /// [`ForeignError::ChunkOffsetOutOfRange`], [`ForeignError::RecordCountMismatch`],
    /// [`ForeignError::UnsupportedChunkType`] (a transposed first chunk) or
    /// [`ForeignError::ChunkDecode`]; [`InteropError::Storage`] when it cannot be read.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_at(&StorageLocation::Local(path.as_ref().to_path_buf()), &RemoteOptions::default())
    }

    /// [`ArrayRecordReader::open`] of a local path or an object-store URL (ranged reads
    /// through the store's block cache).
    ///
    /// # Errors
    /// As [`ArrayRecordReader::open`]; [`InteropError::Storage`] when the store cannot be
    /// opened or a request fails.
    pub fn open_at(location: &StorageLocation, remote: &RemoteOptions) -> Result<Self> {
        let place = Place::at(location, remote);
        let (dir, names) = expand(ForeignFormat::ArrayRecord, &place, &[])?;
        let fs = Fs::new(ForeignFormat::ArrayRecord, dir);
        match names.as_slice() {
            [name] => Self::open_in(fs, name),
            _ => Err(InteropError::Dataset {
                format: Some(ForeignFormat::ArrayRecord),
                path: place.label(),
                error: Box::new(ForeignError::UnknownFormat {
                    reason: format!("{} files match; open one ArrayRecord file", names.len()),
                }),
            }),
        }
    }

    /// Opens file `name` of `fs`.
    pub(crate) fn open_in(fs: Fs, name: &str) -> Result<Self> {
        let err = |e: ForeignError| fs.err(name, e);
        let size = fs.len(name)?;
        if size < BLOCK {
            return Err(err(ForeignError::FileTooSmall { size }));
        }
        if size % BLOCK != 0 {
            return Err(err(ForeignError::NotBlockAligned { size }));
        }
        if fs.read(name, 0, SIGNATURE.len() as u64)? != SIGNATURE {
            return Err(err(ForeignError::BadSignature));
        }
        let chunks = Chunks { fs: &fs, name };
        let postscript_at = size - BLOCK;
        let ps_chunk = records_chunk(&chunks, postscript_at, size)?;
        let ps =
            decode::<proto::RiegeliPostscript>(ps_chunk.get(0), postscript_at, "postscript").map_err(err)?;
        let magic = ps.magic.unwrap_or(0);
        if magic != MAGIC {
            return Err(err(ForeignError::BadMagic { found: format!("postscript magic {magic:#018x}") }));
        }
        let footer_offset = ps.footer_offset.unwrap_or(0);
        if footer_offset >= postscript_at || footer_offset < SIGNATURE.len() as u64 {
            return Err(err(ForeignError::FooterOutOfRange { footer_offset, postscript: postscript_at }));
        }
        let footer = records_chunk(&chunks, footer_offset, postscript_at)?;
        let meta = decode::<proto::RiegeliFooterMetadata>(footer.get(0), footer_offset, "footer metadata")
            .map_err(err)?
            .array_record_metadata
            .ok_or_else(|| {
                err(ForeignError::ChunkDecode {
                    chunk: footer_offset,
                    reason: "the footer metadata has no array_record_metadata".into(),
                })
            })?;
        let version = meta.version.unwrap_or(0);
        if version != 1 {
            return Err(err(ForeignError::UnsupportedVersion {
                field: "ArrayRecordMetadata.version",
                found: i64::try_from(version).unwrap_or(i64::MAX),
            }));
        }
        let num_chunks = meta.num_chunks.unwrap_or(0);
        if num_chunks != footer.len() as u64 - 1 || num_chunks > size / ENTRY_BYTES {
            return Err(err(ForeignError::ChunkDecode {
                chunk: footer_offset,
                reason: format!(
                    "the footer holds {} chunk entries, num_chunks is {num_chunks}",
                    footer.len().saturating_sub(1)
                ),
            }));
        }
        let mut entries = Vec::with_capacity(num_chunks as usize);
        let mut last = None::<u64>;
        for k in 0..num_chunks as usize {
            let e = decode::<proto::ArrayRecordFooter>(footer.get(k + 1), footer_offset, "chunk entry")
                .map_err(err)?;
            let entry = Entry {
                offset: e.chunk_offset.unwrap_or(0),
                decoded: e.decoded_data_size.unwrap_or(0),
                records: e.num_records.unwrap_or(0),
            };
            let out = |reason: String| err(ForeignError::ChunkOffsetOutOfRange { chunk: k as u64, reason });
            if entry.offset < SIGNATURE.len() as u64 || entry.offset >= footer_offset {
                return Err(out(format!(
                    "offset {} is outside [{}, {footer_offset}) (footer_offset)",
                    entry.offset,
                    SIGNATURE.len()
                )));
            }
            if last.is_some_and(|l| entry.offset <= l) {
                return Err(out(format!(
                    "offset {} is not after the previous chunk's {}",
                    entry.offset,
                    last.unwrap_or(0)
                )));
            }
            last = Some(entry.offset);
            entries.push(entry);
        }
        let held = entries.iter().try_fold(0u64, |a, e| a.checked_add(e.records)).unwrap_or(u64::MAX);
        let num_records = meta.num_records.unwrap_or(0);
        if held != num_records {
            return Err(err(ForeignError::RecordCountMismatch { footer: num_records, chunks: held }));
        }
        let group_size = entries.first().map_or(1, |e| e.records);
        for (k, e) in entries.iter().enumerate() {
            let is_last = k + 1 == entries.len();
            if (!is_last && e.records != group_size) || e.records == 0 || e.records > group_size {
                return Err(err(ForeignError::ChunkOffsetOutOfRange {
                    chunk: k as u64,
                    reason: format!("holds {} records, group_size is {group_size}", e.records),
                }));
            }
        }
        let reader = ArrayRecordReader {
            name: name.to_string(),
            size,
            footer_offset,
            entries,
            group_size,
            records: num_records,
            writer_options: String::from_utf8_lossy(meta.writer_options.as_deref().unwrap_or_default())
                .into_owned(),
            cache: Mutex::new(None),
            decoded: AtomicU64::new(0),
            fs,
        };
        // The first chunk's header tells a transposed file on open.
        if let Some(first) = reader.entries.first() {
            let (header, _) = reader.chunks().header(first.offset, reader.limit(0))?;
            reader.check_type(first.offset, header.chunk_type)?;
        }
        Ok(reader)
    }

    fn chunks(&self) -> Chunks<'_> {
        Chunks { fs: &self.fs, name: &self.name }
    }

    /// Where chunk `k` must end: the next chunk, or the footer.
    fn limit(&self, k: usize) -> u64 {
        self.entries.get(k + 1).map_or(self.footer_offset, |e| e.offset)
    }

    fn check_type(&self, at: u64, chunk_type: u8) -> Result<()> {
        match chunk_type {
            b'r' => Ok(()),
            b't' => Err(self
                .fs
                .err(&self.name, ForeignError::UnsupportedChunkType { chunk: at, chunk_type: 't' })),
            other => Err(self.fs.err(
                &self.name,
                ForeignError::ChunkDecode {
                    chunk: at,
                    reason: format!("a {:?} chunk where the footer lists a records chunk", char::from(other)),
                },
            )),
        }
    }

    /// The file, as errors name it.
    pub fn path(&self) -> PathBuf {
        self.fs.root.join(&self.name)
    }

    /// The file's size in bytes.
    pub fn file_bytes(&self) -> u64 {
        self.size
    }

    /// The number of records.
    pub fn len(&self) -> u64 {
        self.records
    }

    /// Whether the file holds no record.
    pub fn is_empty(&self) -> bool {
        self.records == 0
    }

    /// Records per chunk (the first chunk's count; the last chunk may hold fewer).
    pub fn group_size(&self) -> u64 {
        self.group_size
    }

    /// The number of user chunks.
    pub fn chunk_count(&self) -> u64 {
        self.entries.len() as u64
    }

    /// Where the footer chunk begins.
    pub fn footer_offset(&self) -> u64 {
        self.footer_offset
    }

    /// The writer's options string (`group_size:1,transpose:false,...,zstd:3,...`).
    pub fn writer_options(&self) -> &str {
        &self.writer_options
    }

    /// Per user chunk: its file offset, decoded bytes and records, as the footer lists them.
    pub fn chunk_index(&self) -> Vec<(u64, u64, u64)> {
        self.entries.iter().map(|e| (e.offset, e.decoded, e.records)).collect()
    }

    /// How many chunks this reader has read and decoded so far (a record of the chunk read
    /// last is served without reading it again).
    pub fn chunks_decoded(&self) -> u64 {
        self.decoded.load(Ordering::Relaxed)
    }

    /// The records of chunk `k`, read, checked and decoded (or the last chunk decoded).
    fn chunk(&self, k: usize) -> Result<Arc<SimpleRecords>> {
        if let Some((c, r)) = self.cache.lock().ok().and_then(|g| g.clone()) {
            if c == k {
                return Ok(r);
            }
        }
        let e = self.entries[k];
        let chunk = self.chunks().read(e.offset, self.limit(k))?;
        self.check_type(e.offset, chunk.header.chunk_type)?;
        if chunk.header.num_records != e.records || chunk.header.decoded_data_size != e.decoded {
            return Err(self.fs.err(
                &self.name,
                ForeignError::ChunkOffsetOutOfRange {
                    chunk: k as u64,
                    reason: format!(
                        "its header holds {} records of {} bytes, the footer says {} of {}",
                        chunk.header.num_records, chunk.header.decoded_data_size, e.records, e.decoded
                    ),
                },
            ));
        }
        let limit = self.limit(k);
        if riegeli::chunk_end(e.offset, &chunk.header).is_none_or(|end| end > limit) {
            return Err(self.fs.err(
                &self.name,
                ForeignError::ChunkOffsetOutOfRange {
                    chunk: k as u64,
                    reason: format!("the chunk at {} runs past {limit}", e.offset),
                },
            ));
        }
        let records = Arc::new(riegeli::simple_records(&chunk).map_err(|x| self.fs.err(&self.name, x))?);
        self.decoded.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut g) = self.cache.lock() {
            *g = Some((k, records.clone()));
        }
        Ok(records)
    }

    /// Record `index`'s bytes: one read and decode of its chunk (none when the chunk is the
    /// one read last).
    ///
    /// # Errors
    /// [`StorageError::OutOfRange`] for `index >= len()`; the checks of the chunk (hashes,
    /// footer entry, decoding) as [`InteropError::Dataset`] naming the file; read errors.
    pub fn record(&self, index: u64) -> Result<Vec<u8>> {
        if index >= self.records {
            return Err(StorageError::OutOfRange {
                what: "record",
                start: index,
                len: 1,
                total: self.records,
            }
            .into());
        }
        // group_size >= 1 whenever there are records.
        let (k, i) = ((index / self.group_size) as usize, (index % self.group_size) as usize);
        let chunk = self.chunk(k)?;
        chunk.get(i).map(<[u8]>::to_vec).ok_or_else(|| {
            self.fs.err(
                &self.name,
                ForeignError::ChunkOffsetOutOfRange { chunk: k as u64, reason: format!("no record {i}") },
            )
        })
    }

    /// Every record, in order, one chunk decoded at a time, each passed to `f` with its index.
    fn for_each_record(&self, mut f: impl FnMut(u64, &[u8]) -> Result<()>) -> Result<()> {
        let mut index = 0u64;
        for k in 0..self.entries.len() {
            let chunk = self.chunk(k)?;
            for i in 0..chunk.len() {
                f(index, chunk.get(i).unwrap_or_default())?;
                index += 1;
            }
        }
        Ok(())
    }
}

/// The records of the simple-records chunk at `at` (its hashes checked, ending by `limit`).
fn records_chunk(chunks: &Chunks<'_>, at: u64, limit: u64) -> Result<SimpleRecords> {
    let chunk = chunks.read(at, limit)?;
    if chunk.header.chunk_type != b'r' {
        return Err(chunks.err(ForeignError::ChunkDecode {
            chunk: at,
            reason: format!("a {:?} chunk, not a records chunk", char::from(chunk.header.chunk_type)),
        }));
    }
    riegeli::simple_records(&chunk).map_err(|x| chunks.err(x))
}

/// A protobuf message from a record of the chunk at `at` (`what` names it in errors).
fn decode<M: Message + Default>(
    record: Option<&[u8]>,
    at: u64,
    what: &str,
) -> std::result::Result<M, ForeignError> {
    let bad = |reason: String| ForeignError::ChunkDecode { chunk: at, reason: format!("{what}: {reason}") };
    M::decode(record.ok_or_else(|| bad("missing".into()))?).map_err(|e| bad(e.to_string()))
}

/// Grain's `ArrayRecordDataSource` in Rust: ArrayRecord files concatenated in the order
/// given, record `i` of the whole found by bisecting the files' cumulative record counts; a
/// [`DataSource`] of records' bytes for the indexed loader.
///
/// ```no_run
/// use guideloom_interop::{ArrayRecordReader, ArrayRecordSource};
/// use guideloom_loader::DataSource;
/// let files = ["a.array_record", "b.array_record"].map(ArrayRecordReader::open);
/// let source = ArrayRecordSource::new(files.into_iter().collect::<Result<Vec<_>, _>>()?);
/// let bytes = source.get(source.len() - 1)?;
/// # let _ = bytes;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct ArrayRecordSource {
    files: Vec<ArrayRecordReader>,
    /// Records before each file, then the total.
    starts: Vec<u64>,
}

impl ArrayRecordSource {
    /// The files, in this order.
    pub fn new(files: Vec<ArrayRecordReader>) -> Self {
        let mut starts = vec![0u64];
        for f in &files {
            starts.push(starts[starts.len() - 1].saturating_add(f.len()));
        }
        ArrayRecordSource { files, starts }
    }

    /// The files.
    pub fn files(&self) -> &[ArrayRecordReader] {
        &self.files
    }

    /// The file and the record in it of global record `index` (`None` past the end).
    pub fn locate(&self, index: u64) -> Option<(usize, u64)> {
        if index >= *self.starts.last()? {
            return None;
        }
        let f = self.starts.partition_point(|&s| s <= index) - 1;
        Some((f, index - self.starts[f]))
    }
}

impl DataSource for ArrayRecordSource {
    type Item = Vec<u8>;

    fn len(&self) -> u64 {
        self.starts.last().copied().unwrap_or(0)
    }

    fn get(&self, index: u64) -> Result<Vec<u8>, LoaderError> {
        let (f, i) = self.locate(index).ok_or(LoaderError::IndexOutOfRange { index, len: self.len() })?;
        self.files[f].record(i).map_err(|e| LoaderError::source(index, e))
    }
}

/// Opens one ArrayRecord file, a glob, or a directory of `*.array_record` files (byte-wise
/// name order) as one token stream: each record a document, decoded as a `.npy` payload or
/// raw little-endian ids of [`ForeignOptions::dtype`] (`u8` reads records as bytes). The
/// decoded ids are held in memory (records are compressed per chunk).
pub(crate) fn open(place: &Place, options: &ForeignOptions) -> Result<Parts> {
    let format = ForeignFormat::ArrayRecord;
    let (dir, names) = expand(format, place, &["array_record"])?;
    let fs = Fs::new(format, dir);
    let mut out = Collected::new(&fs, options.dtype);
    for name in &names {
        let reader = ArrayRecordReader::open_in(fs.clone(), name)?;
        reader.for_each_record(|index, record| {
            let at = format!("record {index}");
            let tokens = record_tokens(record, out.dtype())
                .map_err(in_record(at.clone()))
                .map_err(|e| fs.err(name, e))?;
            out.push(tokens).map_err(|e| fs.err(name, in_record(at)(e)))
        })?;
        out.end_file(name, reader.len());
    }
    Ok(out.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_riegeli() {
        assert!(is_riegeli(&SIGNATURE));
        assert!(!is_riegeli(&SIGNATURE[..10]));
    }
}
