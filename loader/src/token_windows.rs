//! The fast path for token windows: records are window spans, and the collation reads a whole
//! batch straight into its `[batch, seq_len]` buffer with one storage call.

use std::path::Path;
use std::sync::Arc;

use guideloom_formats::{TokenElement, TokenFormat};
use guideloom_storage::{ReadOptions, StreamReader, Window};

#[cfg(doc)]
use crate::StreamWindows;
use crate::{Collate, DataSource, LoaderError, TokenBatch, Windows};

/// One window of a [`TokenWindows`] source: its record index and its element range. Getting
/// it does no I/O; [`ReadTokens`] reads the windows of a batch together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WindowSpan {
    /// The window (record) index.
    pub index: u64,
    /// First element of the window in the stream.
    pub offset: u64,
    /// Window length in elements (`seq_len`).
    pub len: u64,
}

/// Token windows over a stream storage of `E` ids, served the fast way: the same records as
/// [`StreamWindows`] (window `w` = elements `[w * stride, w * stride + seq_len)`, same count,
/// same fingerprint, so states are interchangeable), but each record is a [`WindowSpan`] and
/// [`TokenWindows::collate`] reads a whole batch into one contiguous `[batch, seq_len]`
/// buffer with one backend call and one copy per token (no per-window allocation).
///
/// ```
/// use guideloom_formats::TokenFormat;
/// use guideloom_loader::{Loader, TokenWindows};
/// use guideloom_storage::StreamWriter;
/// let dir = tempfile::tempdir()?;
/// let mut w = StreamWriter::open(dir.path(), TokenFormat::<u16>::new())?;
/// w.append(0, &[0, 1, 2, 3, 4])?;
/// w.append(1, &[5, 6, 7, 8])?;
/// w.commit()?;
/// let windows = TokenWindows::<u16>::open(dir.path(), 4)?;
/// let collate = windows.collate();
/// let loader = Loader::builder(windows).batch_size(2).collate(collate).build()?;
/// let batch = loader.iter().next().unwrap()?;
/// assert_eq!(batch.data.shape(), [2, 4]);
/// assert_eq!(batch.data.data(), [0, 1, 2, 3, 4, 5, 6, 7]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct TokenWindows<E: TokenElement> {
    windows: Windows<Arc<StreamReader<TokenFormat<E>>>>,
}

/// Reads the windows of a batch of [`WindowSpan`]s into one [`TokenBatch`]; made by
/// [`TokenWindows::collate`].
#[derive(Debug, Clone)]
pub struct ReadTokens<E: TokenElement> {
    reader: Arc<StreamReader<TokenFormat<E>>>,
}

impl<E: TokenElement> TokenWindows<E> {
    /// Windows of `seq_len` elements starting every `stride` elements over an open reader.
    ///
    /// # Errors
    /// [`LoaderError::InvalidConfig`] when `seq_len` or `stride` is 0.
    pub fn new(reader: StreamReader<TokenFormat<E>>, seq_len: u64, stride: u64) -> Result<Self, LoaderError> {
        Ok(TokenWindows { windows: Windows::with_stride(Arc::new(reader), seq_len, stride)? })
    }

    /// Opens the stream storage in `dir` (default read options) with windows of `seq_len`
    /// and stride `seq_len`.
    ///
    /// # Errors
    /// [`LoaderError::Storage`] when the storage cannot be opened (or holds another dtype);
    /// [`LoaderError::InvalidConfig`] when `seq_len` is 0.
    pub fn open(dir: impl AsRef<Path>, seq_len: u64) -> Result<Self, LoaderError> {
        Self::open_with(dir, seq_len, seq_len, ReadOptions::default())
    }

    /// Opens with explicit stride and read options (I/O backend, descriptor cap).
    ///
    /// # Errors
    /// As [`TokenWindows::open`].
    pub fn open_with(
        dir: impl AsRef<Path>,
        seq_len: u64,
        stride: u64,
        options: ReadOptions,
    ) -> Result<Self, LoaderError> {
        let reader = StreamReader::open_with(dir, TokenFormat::<E>::new(), options)
            .map_err(|source| LoaderError::Storage { index: 0, source })?;
        Self::new(reader, seq_len, stride)
    }

    /// The collation that reads a batch of this source's windows into a `[batch, seq_len]`
    /// buffer.
    pub fn collate(&self) -> ReadTokens<E> {
        ReadTokens { reader: Arc::clone(self.windows.reader()) }
    }

    /// The underlying reader.
    pub fn reader(&self) -> &StreamReader<TokenFormat<E>> {
        self.windows.reader()
    }

    /// Window length in elements.
    pub fn seq_len(&self) -> u64 {
        self.windows.seq_len()
    }
}

impl<E: TokenElement> DataSource for TokenWindows<E> {
    type Item = WindowSpan;

    fn len(&self) -> u64 {
        self.windows.len()
    }

    fn get(&self, index: u64) -> Result<WindowSpan, LoaderError> {
        let w = self
            .windows
            .window(index)
            .ok_or(LoaderError::IndexOutOfRange { index, len: self.windows.len() })?;
        Ok(WindowSpan { index, offset: w.offset, len: w.len })
    }

    fn fingerprint(&self) -> u64 {
        self.windows.fingerprint()
    }
}

impl<E: TokenElement> Collate<WindowSpan> for ReadTokens<E> {
    type Output = TokenBatch<E>;

    fn collate(&self, records: Vec<WindowSpan>) -> Result<TokenBatch<E>, LoaderError> {
        let seq_len = records.first().map_or(0, |r| r.len);
        if let Some(r) = records.iter().find(|r| r.len != seq_len) {
            return Err(LoaderError::Collate {
                detail: format!("window {} holds {} tokens, the first holds {seq_len}", r.index, r.len),
            });
        }
        let spans: Vec<Window> = records.iter().map(|r| Window::new(r.offset, r.len)).collect();
        let mut data = vec![E::zeroed(); records.len() * seq_len as usize];
        self.reader.read_many_into(&spans, bytemuck::cast_slice_mut(&mut data)).map_err(|source| {
            LoaderError::Storage { index: records.first().map_or(0, |r| r.index), source }
        })?;
        Ok(TokenBatch::from_parts(data, records.len(), seq_len as usize))
    }
}
