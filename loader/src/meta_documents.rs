//! The documents of a stream-with-meta storage of tokens, as records.

use guideloom_formats::{DocumentTokensFormat, TokenElement, TokenId};
use guideloom_storage::{StreamWithMetaReader, Window};

use crate::{DataSource, LoaderError};

/// Tokens read per storage call while scanning document boundaries.
const SCAN_CHUNK: u64 = 1 << 20;

/// The documents of a stream-with-meta storage written with [`DocumentTokensFormat`] (for
/// example by `ingest --doc-meta`): record `i` is the tokens of the `i`-th document in stream
/// order. Boundaries come from the stored per-token document ordinals, never from token values
/// (a document starts where the ordinal changes, so adjacent documents need distinct ordinals,
/// as `ingest` assigns them);
/// [`MetaDocuments::new`] reads them once (one pass over the stream, 2^20 tokens per
/// call) and keeps two integers per document. The lengths feed a
/// [`Packed`](crate::pack::Packed) source without reading the documents again
/// ([`MetaDocuments::lengths`]).
///
/// ```
/// use guideloom_formats::{DocumentTokensFormat, TokenDocument};
/// use guideloom_loader::{DataSource, MetaDocuments};
/// use guideloom_storage::{StreamWithMetaReader, StreamWithMetaWriter};
/// let dir = tempfile::tempdir()?;
/// let mut w = StreamWithMetaWriter::open(dir.path(), DocumentTokensFormat::<u16>::new())?;
/// let doc = |ordinal, tokens| TokenDocument { ordinal, tokens, data: Vec::new() };
/// w.append(0, &[doc(0, vec![5, 6, 0]), doc(1, vec![7, 8])])?;
/// w.commit()?;
/// let docs = MetaDocuments::new(StreamWithMetaReader::open(dir.path(), DocumentTokensFormat::<u16>::new())?)?;
/// assert_eq!(docs.lengths(), [3, 2]);
/// assert_eq!(docs.get(1)?, [7u16, 8]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct MetaDocuments<E: TokenElement, I: TokenId = u32> {
    reader: StreamWithMetaReader<DocumentTokensFormat<E, I>>,
    /// `starts[i]`: first token of document `i`; one more entry holds the stream length.
    starts: Vec<u64>,
}

impl<E: TokenElement, I: TokenId> MetaDocuments<E, I> {
    /// The documents of an open reader (scans the document ordinals once).
    ///
    /// # Errors
    /// [`LoaderError::Storage`] (index: the first token of the failing chunk) when a read
    /// fails.
    pub fn new(reader: StreamWithMetaReader<DocumentTokensFormat<E, I>>) -> Result<Self, LoaderError> {
        let n = reader.len();
        let mut starts = Vec::new();
        let mut last: Option<u64> = None;
        let mut at = 0u64;
        while at < n {
            let len = SCAN_CHUNK.min(n - at);
            let w = reader
                .read(Window::new(at, len))
                .map_err(|source| LoaderError::Storage { index: at, source })?;
            for (k, &ord) in w.document.iter().enumerate() {
                if last != Some(ord) {
                    starts.push(at + k as u64);
                    last = Some(ord);
                }
            }
            at += len;
        }
        starts.push(n);
        Ok(MetaDocuments { reader, starts })
    }

    /// Tokens per document, in record order.
    pub fn lengths(&self) -> Vec<u64> {
        self.starts.windows(2).map(|w| w[1] - w[0]).collect()
    }

    fn span(&self, index: u64) -> Result<Window, LoaderError> {
        let len = self.len();
        let i = usize::try_from(index)
            .ok()
            .filter(|_| index < len)
            .ok_or(LoaderError::IndexOutOfRange { index, len })?;
        Ok(Window::new(self.starts[i], self.starts[i + 1] - self.starts[i]))
    }
}

impl<E: TokenElement, I: TokenId> DataSource for MetaDocuments<E, I> {
    type Item = Vec<E>;

    fn len(&self) -> u64 {
        (self.starts.len() - 1) as u64
    }

    fn get(&self, index: u64) -> Result<Vec<E>, LoaderError> {
        let w = self.span(index)?;
        Ok(self.reader.read(w).map_err(|source| LoaderError::Storage { index, source })?.tokens)
    }

    fn get_many(&self, indices: &[u64]) -> Result<Vec<Vec<E>>, LoaderError> {
        let spans = indices.iter().map(|&i| self.span(i)).collect::<Result<Vec<_>, _>>()?;
        let out = self.reader.read_many(&spans).map_err(|source| LoaderError::Storage {
            index: indices.first().copied().unwrap_or(0),
            source,
        })?;
        Ok(out.into_iter().map(|w| w.tokens).collect())
    }

    fn fingerprint(&self) -> u64 {
        crate::fingerprint_words(&[0x6d65_7461_646f_6373, self.reader.fingerprint()])
    }
}
