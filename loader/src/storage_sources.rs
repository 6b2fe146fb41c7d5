//! Data sources over guideloom storages.

use std::path::Path;

use guideloom_formats::{DocumentFormat, StreamFormat, StreamWithMetaFormat};
use guideloom_storage::{
    DocumentReader, Reader, ReaderIndex, ReaderKind, StorageError, StreamReader, StreamWithMetaReader, Window,
};

use crate::{fingerprint_words, DataSource, LoaderError};

/// A storage reader that decodes windows of a stream ([`Window`]s, in elements): every
/// storage [`Reader`] whose keys are windows ([`StreamReader`], [`StreamWithMetaReader`]),
/// and an `Arc` of one; the readers [`Windows`] serves records from.
pub trait WindowReader: Send + Sync {
    /// One decoded window.
    type Output: Send;
    /// Elements in the stream.
    fn len(&self) -> u64;
    /// Whether the stream holds no element.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Reads and decodes a batch of windows with one storage call, in request order.
    ///
    /// # Errors
    /// The storage's error for the batch.
    fn read_windows(&self, windows: &[Window]) -> Result<Vec<Self::Output>, StorageError>;
    /// The storage manifest's fingerprint.
    fn fingerprint(&self) -> u64;
}

impl<R: WindowReader + ?Sized> WindowReader for std::sync::Arc<R> {
    type Output = R::Output;
    fn len(&self) -> u64 {
        (**self).len()
    }
    fn read_windows(&self, windows: &[Window]) -> Result<Vec<R::Output>, StorageError> {
        (**self).read_windows(windows)
    }
    fn fingerprint(&self) -> u64 {
        (**self).fingerprint()
    }
}

impl<K> WindowReader for Reader<K>
where
    K: ReaderKind,
    K::Index: ReaderIndex<Key = Window>,
    K::Output: Send,
{
    type Output = K::Output;
    fn len(&self) -> u64 {
        Reader::len(self)
    }
    fn read_windows(&self, windows: &[Window]) -> Result<Vec<K::Output>, StorageError> {
        self.read_many(windows)
    }
    fn fingerprint(&self) -> u64 {
        Reader::fingerprint(self)
    }
}

/// Windows over a stream storage ([`StreamWindows`]): record `w` is the window of elements
/// `[w * stride, w * stride + seq_len)`, decoded by the storage's format (it may cross shard
/// boundaries).
pub type StreamWindows<F> = Windows<StreamReader<F>>;

/// Windows over a stream-with-meta storage: each record is the format's unpack of the window
/// with the metadata payloads it touches (for [`guideloom_formats::DocumentTokensFormat`]:
/// tokens, per-token document ordinals and positions).
pub type MetaWindows<F> = Windows<StreamWithMetaReader<F>>;

/// Fixed-length windows over a stream storage: record `w` is the window of elements
/// `[w * stride, w * stride + seq_len)`, decoded by the storage's format (it may cross shard
/// boundaries).
///
/// There are `floor((N - seq_len) / stride) + 1` windows over a stream of `N` elements, 0 when
/// `N < seq_len`. `stride` defaults to `seq_len` (non-overlapping windows; the tail shorter
/// than `seq_len` is not read). `get_many` reads a whole batch with one
/// [`StreamReader::read_many`] call. The fingerprint mixes the manifest's fingerprint with
/// `seq_len` and `stride`.
///
/// ```
/// use guideloom_formats::TokenFormat;
/// use guideloom_loader::{DataSource, StreamWindows};
/// use guideloom_storage::StreamWriter;
/// let dir = tempfile::tempdir()?;
/// let mut w = StreamWriter::open(dir.path(), TokenFormat::<u16>::new())?;
/// w.append(0, &[0, 1, 2, 3, 4])?;
/// w.append(1, &[5, 6, 7, 8])?;
/// w.commit()?;
/// let windows = StreamWindows::open(dir.path(), TokenFormat::<u16>::new(), 4)?;
/// assert_eq!(windows.len(), 2);
/// assert_eq!(windows.get_many(&[1, 0])?, [vec![4u16, 5, 6, 7], vec![0, 1, 2, 3]]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Windows<R> {
    reader: R,
    seq_len: u64,
    stride: u64,
    count: u64,
}

impl<R: WindowReader> Windows<R> {
    /// Windows of `seq_len` elements with stride `seq_len` over an open reader.
    ///
    /// # Errors
    /// [`LoaderError::InvalidConfig`] when `seq_len` is 0.
    pub fn new(reader: R, seq_len: u64) -> Result<Self, LoaderError> {
        Self::with_stride(reader, seq_len, seq_len)
    }

    /// Windows of `seq_len` elements starting every `stride` elements.
    ///
    /// # Errors
    /// [`LoaderError::InvalidConfig`] when `seq_len` or `stride` is 0.
    pub fn with_stride(reader: R, seq_len: u64, stride: u64) -> Result<Self, LoaderError> {
        if seq_len == 0 {
            return Err(LoaderError::InvalidConfig { field: "seq_len", detail: "must be at least 1".into() });
        }
        if stride == 0 {
            return Err(LoaderError::InvalidConfig { field: "stride", detail: "must be at least 1".into() });
        }
        let n = reader.len();
        let count = if n < seq_len { 0 } else { (n - seq_len) / stride + 1 };
        Ok(Windows { reader, seq_len, stride, count })
    }

    /// The underlying reader.
    pub fn reader(&self) -> &R {
        &self.reader
    }

    /// Elements per window.
    pub fn seq_len(&self) -> u64 {
        self.seq_len
    }

    /// Elements between the starts of consecutive windows.
    pub fn stride(&self) -> u64 {
        self.stride
    }

    /// Window `w` (elements `[w * stride, w * stride + seq_len)`), or `None` when
    /// `w >= len()`.
    pub fn window(&self, w: u64) -> Option<Window> {
        (w < self.count).then(|| Window::new(w * self.stride, self.seq_len))
    }

    fn windows(&self, indices: &[u64]) -> Result<Vec<Window>, LoaderError> {
        indices
            .iter()
            .map(|&i| self.window(i).ok_or(LoaderError::IndexOutOfRange { index: i, len: self.count }))
            .collect()
    }
}

impl<F: StreamFormat> Windows<StreamReader<F>> {
    /// Opens the stream storage in `dir` and makes windows of `seq_len` (stride `seq_len`).
    ///
    /// # Errors
    /// [`LoaderError::Storage`] (index 0) when the storage cannot be opened;
    /// [`LoaderError::InvalidConfig`] when `seq_len` is 0.
    pub fn open(dir: impl AsRef<Path>, format: F, seq_len: u64) -> Result<Self, LoaderError> {
        let reader =
            StreamReader::open(dir, format).map_err(|source| LoaderError::Storage { index: 0, source })?;
        Self::new(reader, seq_len)
    }
}

impl<F: StreamWithMetaFormat> Windows<StreamWithMetaReader<F>> {
    /// Opens the stream-with-meta storage in `dir` and makes windows of `seq_len` (stride
    /// `seq_len`).
    ///
    /// # Errors
    /// [`LoaderError::Storage`] (index 0) when the storage cannot be opened;
    /// [`LoaderError::InvalidConfig`] when `seq_len` is 0.
    pub fn open(dir: impl AsRef<Path>, format: F, seq_len: u64) -> Result<Self, LoaderError> {
        let reader = StreamWithMetaReader::open(dir, format)
            .map_err(|source| LoaderError::Storage { index: 0, source })?;
        Self::new(reader, seq_len)
    }
}

impl<R: WindowReader> DataSource for Windows<R> {
    type Item = R::Output;

    fn len(&self) -> u64 {
        self.count
    }

    fn get(&self, index: u64) -> Result<R::Output, LoaderError> {
        let windows = self.windows(&[index])?;
        let mut out =
            self.reader.read_windows(&windows).map_err(|source| LoaderError::Storage { index, source })?;
        out.pop().ok_or(LoaderError::WrongCount { expected: 1, found: 0 })
    }

    /// One [`WindowReader::read_windows`] call for all windows. When it fails, the windows
    /// are read one at a time to name the first failing one.
    fn get_many(&self, indices: &[u64]) -> Result<Vec<R::Output>, LoaderError> {
        let windows = self.windows(indices)?;
        self.reader.read_windows(&windows).map_err(|batch_error| {
            for &i in indices {
                if let Err(e) = self.get(i) {
                    return e;
                }
            }
            LoaderError::Storage { index: indices.first().copied().unwrap_or(0), source: batch_error }
        })
    }

    fn fingerprint(&self) -> u64 {
        fingerprint_words(&[0x7769_6e64_6f77, self.reader.fingerprint(), self.seq_len, self.stride])
    }
}

/// The documents of a document storage: record `i` is document `i`, decoded by the storage's
/// format. `get_many` reads a whole batch with one [`DocumentReader::get_many`] call; the
/// fingerprint is the manifest's.
///
/// ```
/// use guideloom_formats::RawBytesFormat;
/// use guideloom_loader::{DataSource, Documents};
/// use guideloom_storage::DocumentWriter;
/// let dir = tempfile::tempdir()?;
/// let mut w = DocumentWriter::open(dir.path(), RawBytesFormat)?;
/// w.append(0, b"first")?;
/// w.append(1, b"second")?;
/// w.commit()?;
/// let docs = Documents::open(dir.path(), RawBytesFormat)?;
/// assert_eq!(docs.len(), 2);
/// assert_eq!(docs.get(1)?, b"second");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Documents<F: DocumentFormat> {
    reader: DocumentReader<F>,
}

impl<F: DocumentFormat> Documents<F> {
    /// The documents of an open reader.
    pub fn new(reader: DocumentReader<F>) -> Self {
        Documents { reader }
    }

    /// Opens the document storage in `dir`.
    ///
    /// # Errors
    /// [`LoaderError::Storage`] (index 0) when the storage cannot be opened.
    pub fn open(dir: impl AsRef<Path>, format: F) -> Result<Self, LoaderError> {
        DocumentReader::open(dir, format)
            .map(Documents::new)
            .map_err(|source| LoaderError::Storage { index: 0, source })
    }

    /// The underlying reader.
    pub fn reader(&self) -> &DocumentReader<F> {
        &self.reader
    }

    fn check(&self, indices: &[u64]) -> Result<(), LoaderError> {
        let len = self.reader.len();
        match indices.iter().find(|&&i| i >= len) {
            Some(&index) => Err(LoaderError::IndexOutOfRange { index, len }),
            None => Ok(()),
        }
    }
}

impl<F: DocumentFormat> DataSource for Documents<F> {
    type Item = F::Output;

    fn len(&self) -> u64 {
        self.reader.len()
    }

    fn get(&self, index: u64) -> Result<F::Output, LoaderError> {
        self.check(&[index])?;
        self.reader.get(index).map_err(|source| LoaderError::Storage { index, source })
    }

    /// One [`DocumentReader::get_many`] call for all documents. When it fails, the documents
    /// are read one at a time to name the first failing one.
    fn get_many(&self, indices: &[u64]) -> Result<Vec<F::Output>, LoaderError> {
        self.check(indices)?;
        self.reader.get_many(indices).map_err(|batch_error| {
            for &i in indices {
                if let Err(e) = self.get(i) {
                    return e;
                }
            }
            LoaderError::Storage { index: indices.first().copied().unwrap_or(0), source: batch_error }
        })
    }

    fn fingerprint(&self) -> u64 {
        self.reader.fingerprint()
    }
}
