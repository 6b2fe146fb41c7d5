//! The spill file between the two phases of an ingest: tokenized documents written in input
//! order to an unnamed temporary file, with the corpus statistics the write phase needs before
//! its first byte (element type, shard balance).

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::{Document, IngestError};

/// What the write phase must know about the whole corpus before it writes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct CorpusStats {
    /// Documents.
    pub(crate) documents: u64,
    /// Tokens, all documents.
    pub(crate) tokens: u64,
    /// The first token id above `u16::MAX`: (document ordinal, id, document source).
    pub(crate) over_u16: Option<(u64, u32, String)>,
}

impl CorpusStats {
    /// Counts one more document (the next in input order).
    pub(crate) fn add(&mut self, doc: &Document) {
        if self.over_u16.is_none() {
            if let Some(&id) = doc.tokens.iter().find(|&&t| t > u32::from(u16::MAX)) {
                self.over_u16 = Some((self.documents, id, doc.source.clone()));
            }
        }
        self.documents += 1;
        self.tokens += doc.tokens.len() as u64;
    }

    /// The statistics of documents held in memory.
    pub(crate) fn of(docs: &[Document]) -> Self {
        let mut s = CorpusStats::default();
        docs.iter().for_each(|d| s.add(d));
        s
    }
}

/// Tokenized documents spilled to disk in input order. Record layout (native, private to one
/// process): u64 source length, source bytes, u64 token count, tokens as u32 little-endian.
/// The file has no name (it is unlinked on creation), so nothing is left behind, even by a
/// killed process.
#[derive(Debug)]
pub(crate) struct Spill {
    path: PathBuf,
    file: BufWriter<File>,
    stats: CorpusStats,
}

impl Spill {
    /// A new spill in the nearest existing directory among `near` and its ancestors (so it is
    /// on the output's file system), else in the system's temporary directory.
    pub(crate) fn new(near: &Path) -> Result<Self, IngestError> {
        let dir = near.ancestors().find(|p| p.is_dir()).map_or_else(std::env::temp_dir, Path::to_path_buf);
        let file =
            tempfile::tempfile_in(&dir).map_err(|source| IngestError::Spill { path: dir.clone(), source })?;
        Ok(Spill { path: dir, file: BufWriter::with_capacity(1 << 20, file), stats: CorpusStats::default() })
    }

    /// Appends one document.
    pub(crate) fn push(&mut self, doc: &Document) -> Result<(), IngestError> {
        self.stats.add(doc);
        let io = |source| IngestError::Spill { path: self.path.clone(), source };
        let mut put = |bytes: &[u8]| self.file.write_all(bytes);
        put(&(doc.source.len() as u64).to_le_bytes()).map_err(io)?;
        put(doc.source.as_bytes()).map_err(io)?;
        put(&(doc.tokens.len() as u64).to_le_bytes()).map_err(io)?;
        for t in &doc.tokens {
            put(&t.to_le_bytes()).map_err(io)?;
        }
        Ok(())
    }

    /// The statistics of the documents pushed so far.
    pub(crate) fn stats(&self) -> &CorpusStats {
        &self.stats
    }

    /// Calls `f` on every document in push order, reusing one buffer.
    pub(crate) fn for_each(
        self,
        f: &mut dyn FnMut(&Document) -> Result<(), IngestError>,
    ) -> Result<(), IngestError> {
        let path = self.path;
        let io = |source| IngestError::Spill { path: path.clone(), source };
        let mut file = self.file.into_inner().map_err(|e| io(e.into_error()))?;
        file.seek(SeekFrom::Start(0)).map_err(io)?;
        let mut r = BufReader::with_capacity(1 << 20, file);
        let mut doc = Document { source: String::new(), tokens: Vec::new() };
        let (mut source, mut tokens) = (Vec::new(), Vec::new());
        let mut word = [0u8; 8];
        for _ in 0..self.stats.documents {
            r.read_exact(&mut word).map_err(io)?;
            source.resize(len(u64::from_le_bytes(word), 1, &path)?, 0);
            r.read_exact(&mut source).map_err(io)?;
            r.read_exact(&mut word).map_err(io)?;
            tokens.resize(len(u64::from_le_bytes(word), 4, &path)?, 0);
            r.read_exact(&mut tokens).map_err(io)?;
            let text = std::str::from_utf8(&source)
                .map_err(|e| io(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))?;
            doc.source.clear();
            doc.source.push_str(text);
            doc.tokens.clear();
            doc.tokens.extend(tokens.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])));
            f(&doc)?;
        }
        Ok(())
    }
}

/// A length read back from the spill, in bytes (`count * size`), checked to fit memory.
fn len(count: u64, size: u64, path: &Path) -> Result<usize, IngestError> {
    count.checked_mul(size).and_then(|n| usize::try_from(n).ok()).ok_or_else(|| IngestError::Spill {
        path: path.to_path_buf(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, "spill record length overflows"),
    })
}
