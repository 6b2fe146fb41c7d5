//! Records that are arbitrary windows of a stream: documents recorded as ranges of it, or
//! (through `guideloom-interop`) a foreign dataset's documents, Megatron sequences, litdata
//! blocks, OLMo instances.

use guideloom_storage::Window;

use crate::{fingerprint_words, DataSource, LoaderError, WindowReader};

/// A source whose record `i` is the window `spans[i]` of a stream, decoded by the reader's
/// format: documents as ranges of a stream (guideloom-interop's
/// `ForeignDataset::document_windows`), sequences (`MegatronIndex::sequence_windows`), windows
/// that stay inside each file (`ForeignDataset::file_windows`). `get_many` reads a whole batch
/// with one [`WindowReader::read_windows`] call (one backend call). The fingerprint mixes the
/// reader's with every span.
///
/// ```
/// use guideloom_formats::TokenFormat;
/// use guideloom_loader::{DataSource, Spans};
/// use guideloom_storage::{StreamReader, StreamWriter, Window};
/// let dir = tempfile::tempdir()?;
/// let mut w = StreamWriter::open(dir.path(), TokenFormat::<u16>::new())?;
/// w.append(0, &[7, 8, 0, 9, 0])?;
/// w.commit()?;
/// let reader = StreamReader::open(dir.path(), TokenFormat::<u16>::new())?;
/// // Two documents, each ended by token 0.
/// let docs = Spans::new(reader, vec![Window::new(0, 3), Window::new(3, 2)])?;
/// assert_eq!(docs.get_many(&[1, 0])?, [vec![9, 0], vec![7, 8, 0]]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Spans<R> {
    reader: R,
    spans: Vec<Window>,
    fingerprint: u64,
}

impl<R: WindowReader> Spans<R> {
    /// The records `spans` of the stream `reader` reads.
    ///
    /// # Errors
    /// [`LoaderError::InvalidConfig`] (field `spans`) naming the first span past the stream's
    /// end.
    pub fn new(reader: R, spans: Vec<Window>) -> Result<Self, LoaderError> {
        let total = reader.len();
        if let Some((i, w)) = spans.iter().enumerate().find(|(_, w)| w.end().is_none_or(|e| e > total)) {
            return Err(LoaderError::InvalidConfig {
                field: "spans",
                detail: format!(
                    "span {i} [{}, +{}) passes the end of the stream of {total} elements",
                    w.offset, w.len
                ),
            });
        }
        let mut words = Vec::with_capacity(2 * spans.len() + 2);
        words.extend([0x0073_7061_6e73, reader.fingerprint()]);
        spans.iter().for_each(|w| words.extend([w.offset, w.len]));
        Ok(Spans { fingerprint: fingerprint_words(&words), reader, spans })
    }

    /// The underlying reader.
    pub fn reader(&self) -> &R {
        &self.reader
    }

    /// The spans, record by record.
    pub fn spans(&self) -> &[Window] {
        &self.spans
    }

    fn windows(&self, indices: &[u64]) -> Result<Vec<Window>, LoaderError> {
        let len = self.spans.len() as u64;
        indices
            .iter()
            .map(|&i| {
                usize::try_from(i)
                    .ok()
                    .and_then(|i| self.spans.get(i).copied())
                    .ok_or(LoaderError::IndexOutOfRange { index: i, len })
            })
            .collect()
    }
}

impl<R: WindowReader> DataSource for Spans<R> {
    type Item = R::Output;

    fn len(&self) -> u64 {
        self.spans.len() as u64
    }

    fn get(&self, index: u64) -> Result<R::Output, LoaderError> {
        let w = self.windows(&[index])?;
        let mut out =
            self.reader.read_windows(&w).map_err(|source| LoaderError::Storage { index, source })?;
        out.pop().ok_or(LoaderError::WrongCount { expected: 1, found: 0 })
    }

    fn get_many(&self, indices: &[u64]) -> Result<Vec<R::Output>, LoaderError> {
        let w = self.windows(indices)?;
        self.reader
            .read_windows(&w)
            .map_err(|source| LoaderError::Storage { index: indices.first().copied().unwrap_or(0), source })
    }

    fn fingerprint(&self) -> u64 {
        self.fingerprint
    }
}
