//! Document storage: variable-size documents appended per shard, addressed by a global
//! index (shards concatenated in increasing id order).
//!
//! Per shard: `shard-NNNNN.docs` (payloads back to back) and `shard-NNNNN.index`
//! (`documents + 1` little-endian u64 offsets into the payload file, the first 0).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use guideloom_formats::DocumentFormat;
use serde_json::{Map, Value};

use crate::append::{check_file, AppendFile, OpenShards};
use crate::io::{read_exact_at, FileSet, ReadOptions, ReadRequest, ShardFile};
use crate::manifest::{FileEntry, FormatSpec, Manifest, ShardEntry, StorageKind, MANIFEST_FILE};
use crate::stream::{check_kind_dtype, open_or_create_manifest, WriterLock};
use crate::{Result, StorageError};

const INDEX: &str = "index";

struct OpenDocShard {
    data: AppendFile,
    index: AppendFile,
    documents: u64,
}

impl std::fmt::Debug for OpenDocShard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenDocShard").field("documents", &self.documents).finish()
    }
}

/// Writes a document storage: [`DocumentWriter::append`] documents to shards, then
/// [`DocumentWriter::commit`].
///
/// Opening a directory that already holds a document storage continues it (see
/// [`crate::StreamWriter`] for the crash rules, which are the same).
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
#[derive(Debug)]
pub struct DocumentWriter<F: DocumentFormat> {
    dir: PathBuf,
    format: F,
    manifest: Manifest,
    open: BTreeMap<u64, OpenDocShard>,
    open_shards: OpenShards,
    buf: Vec<u8>,
    _lock: WriterLock,
}

impl<F: DocumentFormat> DocumentWriter<F> {
    /// Opens or creates the document storage in `dir` for appending with `format`. The
    /// writer holds the storage's writer lock until it is dropped.
    ///
    /// # Errors
    /// [`StorageError::Locked`] while another writer has the storage open;
    /// [`StorageError::KindMismatch`] when `dir` holds another kind; manifest and I/O errors.
    pub fn open(dir: impl AsRef<Path>, format: F) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        let spec = FormatSpec { name: format.name().to_string(), params: format.params() };
        let (manifest, lock) = open_or_create_manifest(&dir, StorageKind::Document, Value::Null, spec)?;
        Ok(DocumentWriter {
            dir,
            format,
            manifest,
            open: BTreeMap::new(),
            open_shards: OpenShards::default(),
            buf: Vec::new(),
            _lock: lock,
        })
    }

    /// Appends one document to shard `shard`; returns its size in bytes.
    ///
    /// # Errors
    /// [`StorageError::Format`] when the format refuses the document (nothing is written);
    /// I/O errors naming the file.
    pub fn append(&mut self, shard: u64, document: &F::Input) -> Result<u64> {
        self.buf.clear();
        self.format.pack(document, &mut self.buf).map_err(|source| StorageError::Format { shard, source })?;
        if let Some(victim) = self.open_shards.touch(shard).and_then(|v| self.open.get_mut(&v)) {
            victim.data.park()?;
            victim.index.park()?;
        }
        if !self.open.contains_key(&shard) {
            let (data, index, documents) = match self.manifest.shard(shard) {
                Some(s) => (
                    FileEntry { bytes: s.bytes, checksum: s.checksum },
                    s.files.get(INDEX).copied().unwrap_or(FileEntry { bytes: 0, checksum: 0 }),
                    s.documents.unwrap_or(0),
                ),
                None => (FileEntry { bytes: 0, checksum: 0 }, FileEntry { bytes: 0, checksum: 0 }, 0),
            };
            let data = AppendFile::open(&Manifest::shard_path(&self.dir, shard, "docs"), shard, data)?;
            let mut index = AppendFile::open(&Manifest::shard_path(&self.dir, shard, INDEX), shard, index)?;
            if index.len() == 0 {
                index.write(&0u64.to_le_bytes())?;
            }
            self.open.insert(shard, OpenDocShard { data, index, documents });
        }
        let s = self
            .open
            .get_mut(&shard)
            .ok_or_else(|| StorageError::InvalidArgument("shard vanished".into()))?;
        // Both writes count as appended even when a flush fails, so the counts stay consistent.
        let data = s.data.write(&self.buf);
        let index = s.index.write(&s.data.len().to_le_bytes());
        s.documents += 1;
        data.and(index)?;
        Ok(self.buf.len() as u64)
    }

    /// Sets a key of the manifest's user metadata (committed with the next `commit`).
    pub fn set_metadata(&mut self, key: impl Into<String>, value: Value) {
        self.manifest.metadata.insert(key.into(), value);
    }

    /// The user metadata as it will be committed.
    pub fn metadata(&self) -> &Map<String, Value> {
        &self.manifest.metadata
    }

    /// Makes everything appended so far durable and visible (fsync shard files, then replace
    /// the manifest atomically).
    ///
    /// # Errors
    /// I/O errors naming the file.
    pub fn commit(&mut self) -> Result<()> {
        for (&id, s) in &mut self.open {
            let data = s.data.sync()?;
            let index = s.index.sync()?;
            let entry = ShardEntry {
                id,
                elements: None,
                documents: Some(s.documents),
                bytes: data.bytes,
                checksum: data.checksum,
                files: BTreeMap::from([(INDEX.to_string(), index)]),
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
    /// As [`DocumentWriter::commit`].
    pub fn finish(mut self) -> Result<()> {
        self.commit()
    }
}

/// Reads a document storage by global document index.
///
/// Open validates the manifest and, per shard, that the payload and index files hold their
/// committed bytes, that the index has `documents + 1` entries starting at 0, never
/// decreasing and ending at the payload's committed length. The offsets are kept in memory
/// (8 bytes per document).
#[derive(Debug)]
pub struct DocumentReader<F: DocumentFormat> {
    dir: PathBuf,
    format: F,
    manifest: Manifest,
    /// `doc_starts[i]` = global index of shard `i`'s first document; last = total.
    doc_starts: Vec<u64>,
    /// Per shard, its `documents + 1` offsets.
    offsets: Vec<Vec<u64>>,
    files: FileSet,
    options: ReadOptions,
}

impl<F: DocumentFormat> DocumentReader<F> {
    /// Opens the document storage in `dir` with default [`ReadOptions`].
    ///
    /// # Errors
    /// Manifest errors, [`StorageError::KindMismatch`], [`StorageError::MissingShard`],
    /// [`StorageError::ShardTooShort`], [`StorageError::CorruptIndex`].
    pub fn open(dir: impl AsRef<Path>, format: F) -> Result<Self> {
        Self::open_with(dir, format, ReadOptions::default())
    }

    /// Opens with explicit read options.
    ///
    /// # Errors
    /// As [`DocumentReader::open`].
    pub fn open_with(dir: impl AsRef<Path>, format: F, options: ReadOptions) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        let manifest = Manifest::load(&dir)?;
        check_kind_dtype(&manifest, &dir, StorageKind::Document, &Value::Null)?;
        let mut doc_starts = vec![0u64];
        let mut offsets = Vec::with_capacity(manifest.shards.len());
        let mut files = Vec::with_capacity(manifest.shards.len());
        let mut total = 0u64;
        for s in &manifest.shards {
            let docs = s.documents.unwrap_or(0);
            let data_path = Manifest::shard_path(&dir, s.id, "docs");
            check_file(&data_path, s.id, s.bytes)?;
            let offs = load_index(&dir, s, docs)?;
            files.push(ShardFile { path: data_path, shard: s.id, committed: s.bytes });
            offsets.push(offs);
            total = total.checked_add(docs).ok_or_else(|| StorageError::InvalidManifest {
                path: dir.join(MANIFEST_FILE),
                reason: "document counts overflow u64".into(),
            })?;
            doc_starts.push(total);
        }
        Ok(DocumentReader {
            dir,
            format,
            manifest,
            doc_starts,
            offsets,
            files: FileSet::new(files, options.max_open_files),
            options,
        })
    }

    /// Number of documents (all shards).
    pub fn len(&self) -> u64 {
        self.doc_starts.last().copied().unwrap_or(0)
    }

    /// Whether the storage holds no document.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The committed manifest this reader serves.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The storage directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The format documents are decoded with.
    pub fn format(&self) -> &F {
        &self.format
    }

    /// The manifest's fingerprint ([`Manifest::fingerprint`]).
    pub fn fingerprint(&self) -> u64 {
        self.manifest.fingerprint()
    }

    /// The shard files and their descriptor cache.
    pub fn files(&self) -> &FileSet {
        &self.files
    }

    /// The shard id and the index inside that shard of global document `index`.
    ///
    /// # Errors
    /// [`StorageError::OutOfRange`] when `index >= len()`.
    pub fn locate(&self, index: u64) -> Result<(u64, u64)> {
        let (i, local) = self.position(index)?;
        Ok((self.manifest.shards[i].id, local))
    }

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

    /// Reads and decodes document `index`.
    ///
    /// # Errors
    /// [`StorageError::OutOfRange`], backend read errors, [`StorageError::Format`].
    pub fn get(&self, index: u64) -> Result<F::Output> {
        let mut v = self.get_many(&[index])?;
        v.pop().ok_or_else(|| StorageError::InvalidArgument("no document decoded".into()))
    }

    /// Reads and decodes a batch of documents with one backend call; results in request order.
    ///
    /// # Errors
    /// As [`DocumentReader::get`].
    pub fn get_many(&self, indices: &[u64]) -> Result<Vec<F::Output>> {
        let mut requests = Vec::with_capacity(indices.len());
        let mut total = 0u64;
        for &index in indices {
            let (i, local) = self.position(index)?;
            let offs = &self.offsets[i];
            let (start, end) = (offs[local as usize], offs[local as usize + 1]);
            requests.push(ReadRequest { file: i, offset: start, len: end - start });
            total += end - start;
        }
        let total =
            usize::try_from(total).map_err(|_| StorageError::InvalidArgument("batch too large".into()))?;
        let mut bytes = vec![0u8; total];
        self.options.backend.read_into(&self.files, &requests, &mut bytes)?;
        let mut out = Vec::with_capacity(indices.len());
        let mut pos = 0usize;
        for r in &requests {
            let shard = self.files.file(r.file).shard;
            let b = &bytes[pos..pos + r.len as usize];
            out.push(self.format.unpack(b, shard).map_err(|source| StorageError::Format { shard, source })?);
            pos += r.len as usize;
        }
        Ok(out)
    }
}

/// Reads and validates a shard's offset index.
pub(crate) fn load_index(dir: &Path, s: &ShardEntry, docs: u64) -> Result<Vec<u64>> {
    let path = Manifest::shard_path(dir, s.id, INDEX);
    let corrupt = |entry: u64, reason: String| StorageError::CorruptIndex {
        shard: s.id,
        path: path.clone(),
        entry,
        reason,
    };
    let committed = s.files.get(INDEX).map_or(0, |f| f.bytes);
    let expected = docs.checked_add(1).and_then(|n| n.checked_mul(8));
    if expected != Some(committed) {
        return Err(StorageError::InvalidManifest {
            path: dir.join(MANIFEST_FILE),
            reason: format!(
                "shard {}: {docs} documents need an index of {:?} bytes, manifest has {committed}",
                s.id, expected
            ),
        });
    }
    check_file(&path, s.id, committed)?;
    // The file holds at least `committed` bytes (checked above), so this allocation is
    // justified by the file's real size.
    let mut raw = vec![0u8; committed as usize];
    let file = std::fs::File::open(&path).map_err(|e| StorageError::io(&path, e))?;
    read_exact_at(&file, &mut raw, 0, &path)?;
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
