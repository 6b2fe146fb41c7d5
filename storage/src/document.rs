//! Document storage: variable-size documents appended per shard, addressed by a global
//! index (shards concatenated in increasing id order).
//!
//! Per shard: `shard-NNNNN.docs` (payloads back to back) and `shard-NNNNN.index`
//! (`documents + 1` little-endian u64 offsets into the payload file, the first 0).

use guideloom_formats::DocumentFormat;

use crate::core::{
    check_file, IndexFile, PlannedOutput, ReadPlan, Reader, ReaderIndex, ReaderKind, Sealed, Writer,
};
use crate::dir::StorageDir;
use crate::io::{ReadRequest, ShardFile};
use crate::manifest::{Manifest, ShardEntry, StorageKind, INDEX, MANIFEST_FILE};
use crate::markers::Document;
use crate::{Result, StorageError};

/// Reads a document storage by global document index ([`Reader::read`] /
/// [`Reader::read_many`], or their names here, [`Reader::get`] / [`Reader::get_many`]).
///
/// Open also checks, per shard, that the index has `documents + 1` entries starting at 0,
/// never decreasing and ending at the payload's committed length. The offsets are kept in
/// memory (8 bytes per document).
///
/// ```
/// use guideloom_formats::RawBytesFormat;
/// use guideloom_storage::{DocumentReader, DocumentWriter};
/// let dir = tempfile::tempdir()?;
/// let mut w = DocumentWriter::open(dir.path(), RawBytesFormat)?;
/// w.append(0, b"first")?;
/// w.append(1, b"")?;
/// w.append(1, b"third")?;
/// w.commit()?;
/// let r = DocumentReader::open(dir.path(), RawBytesFormat)?;
/// assert_eq!(r.len(), 3);
/// assert_eq!(r.get(2)?, b"third");
/// assert_eq!(r.locate(2)?, (1, 1));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub type DocumentReader<F> = Reader<Document<F>>;

/// Writes a document storage: [`Writer::append`] documents to shards, then
/// [`Writer::commit`] (see [`Writer`] for shard parking and the crash rules).
pub type DocumentWriter<F> = Writer<Document<F>>;

/// What a document reader keeps in memory: every shard's document offsets.
#[derive(Debug, Clone)]
pub struct DocumentIndex {
    /// Shard ids, increasing.
    ids: Vec<u64>,
    /// `doc_starts[i]` = global index of shard `i`'s first document; last = total.
    doc_starts: Vec<u64>,
    /// Per shard, its `documents + 1` offsets.
    offsets: Vec<Vec<u64>>,
}

impl DocumentIndex {
    fn len(&self) -> u64 {
        self.doc_starts.last().copied().unwrap_or(0)
    }

    /// The shard position and the index inside that shard of global document `index`.
    fn position(&self, index: u64) -> Result<(usize, u64)> {
        if index >= self.len() {
            return Err(StorageError::OutOfRange {
                what: "document",
                start: index,
                len: 1,
                total: self.len(),
            });
        }
        let i = self.doc_starts[1..].partition_point(|&e| e <= index);
        Ok((i, index - self.doc_starts[i]))
    }
}

impl Sealed for DocumentIndex {}

impl ReaderIndex for DocumentIndex {
    type Key = u64;

    /// Checks every shard's payload file and loads its index.
    fn open(dir: &dyn StorageDir, m: &Manifest) -> Result<(Self, Vec<ShardFile>, u64)> {
        let mut doc_starts = vec![0u64];
        let mut offsets = Vec::with_capacity(m.shards().len());
        let mut files = Vec::with_capacity(m.shards().len());
        let mut total = 0u64;
        for s in m.shards() {
            let docs = s.documents.unwrap_or(0);
            let name = s.file_name(StorageKind::Document.data_extension());
            files.push(check_file(dir, s.id, &name, s.bytes)?);
            offsets.push(load_index(dir, s, docs)?);
            total = total.checked_add(docs).ok_or_else(|| StorageError::InvalidManifest {
                path: dir.path().join(MANIFEST_FILE),
                reason: "document counts overflow u64".into(),
            })?;
            doc_starts.push(total);
        }
        let ids = m.shards().iter().map(|s| s.id).collect();
        Ok((DocumentIndex { ids, doc_starts, offsets }, files, total))
    }

    /// One request per document: its payload bytes.
    fn plan(&self, indices: &[u64]) -> Result<ReadPlan> {
        let mut plan = ReadPlan::with_capacity(indices.len());
        for &doc in indices {
            let (i, local) = self.position(doc)?;
            let offs = &self.offsets[i];
            let (start, end) = (offs[local as usize], offs[local as usize + 1]);
            plan.push_segment(
                ReadRequest { file: i, offset: start, len: end - start },
                end - start,
                self.ids[i],
            );
            plan.end_output(end - start)?;
        }
        plan.finish()
    }
}

impl<F: DocumentFormat> ReaderKind for Document<F> {
    type Index = DocumentIndex;
    type Output = F::Output;

    fn decode_at(format: &F, _: &DocumentIndex, output: PlannedOutput<'_>) -> Result<F::Output> {
        let shard = output.first_shard();
        format.unpack(output.bytes(), shard).map_err(|source| StorageError::Format { shard, source })
    }
}

impl<F: DocumentFormat> Reader<Document<F>> {
    /// Reads and decodes document `index` ([`Reader::read`]).
    ///
    /// # Errors
    /// [`StorageError::OutOfRange`], backend read errors, [`StorageError::Format`].
    pub fn get(&self, index: u64) -> Result<F::Output> {
        self.read(index)
    }

    /// Reads and decodes a batch of documents with one backend call; results in request order
    /// ([`Reader::read_many`]).
    ///
    /// # Errors
    /// As [`Reader::get`]; the first failing document fails the batch.
    pub fn get_many(&self, indices: &[u64]) -> Result<Vec<F::Output>> {
        self.read_many(indices)
    }

    /// The shard id and the index inside that shard of global document `index`.
    ///
    /// # Errors
    /// [`StorageError::OutOfRange`] when `index >= len()`.
    pub fn locate(&self, index: u64) -> Result<(u64, u64)> {
        let (i, local) = self.index().position(index)?;
        Ok((self.index().ids[i], local))
    }
}

impl<F: DocumentFormat> Writer<Document<F>> {
    /// Appends one document to shard `shard`; returns its size in bytes.
    ///
    /// # Errors
    /// [`StorageError::Format`] when the format refuses the document (nothing is written);
    /// [`StorageError::ShardOverflow`]; I/O errors naming the file.
    pub fn append(&mut self, shard: u64, document: &F::Input) -> Result<u64> {
        let buf = &mut self.scratch;
        buf.clear();
        self.format.pack(document, buf).map_err(|source| StorageError::Format { shard, source })?;
        let s = self.core.shard(shard)?;
        let overflow = || StorageError::ShardOverflow { shard };
        let end = s.file_len(0).checked_add(buf.len() as u64).ok_or_else(overflow)?;
        let count = s.count().checked_add(1).ok_or_else(overflow)?;
        // The document's end offset; a new index file starts with offset 0 before it.
        let mut entries = [0u8; 16];
        entries[8..].copy_from_slice(&end.to_le_bytes());
        let index = if s.file_len(1) == 0 { &entries[..] } else { &entries[8..] };
        s.append(&[buf, index], count)?;
        Ok(buf.len() as u64)
    }
}

/// Reads and validates a shard's offset index.
pub(crate) fn load_index(dir: &dyn StorageDir, s: &ShardEntry, docs: u64) -> Result<Vec<u64>> {
    let file = IndexFile::new(dir, s, INDEX);
    let corrupt = |entry, reason| file.corrupt(entry, reason);
    let committed = s.files.get(INDEX).map_or(0, |f| f.bytes);
    let expected = docs.checked_add(1).and_then(|n| n.checked_mul(8));
    if expected != Some(committed) {
        return Err(StorageError::InvalidManifest {
            path: dir.path().join(MANIFEST_FILE),
            reason: format!(
                "shard {}: {docs} documents need an index of {:?} bytes, manifest has {committed}",
                s.id, expected
            ),
        });
    }
    file.check(committed)?;
    // The file holds at least `committed` bytes (checked above), so this allocation is
    // justified by the file's real size.
    let mut raw = vec![0u8; committed as usize];
    file.read_at(0, &mut raw)?;
    let mut offs = Vec::with_capacity(raw.len() / 8);
    let mut prev = 0u64;
    for (i, c) in raw.chunks_exact(8).enumerate() {
        let mut b = [0u8; 8];
        b.copy_from_slice(c);
        let v = u64::from_le_bytes(b);
        if i == 0 && v != 0 {
            return Err(corrupt(0, format!("first offset is {v}, expected 0")));
        }
        if v < prev {
            return Err(corrupt(i as u64, format!("offset {v} is below the previous offset {prev}")));
        }
        if v > s.bytes {
            return Err(corrupt(
                i as u64,
                format!("offset {v} is past the committed payload length {}", s.bytes),
            ));
        }
        prev = v;
        offs.push(v);
    }
    if prev != s.bytes {
        return Err(corrupt(
            docs,
            format!("last offset {prev} differs from the committed payload length {}", s.bytes),
        ));
    }
    Ok(offs)
}
