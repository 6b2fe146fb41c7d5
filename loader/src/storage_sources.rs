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
    /// Hints that `windows` will be read soon (readahead of a remote storage); the default
    /// does nothing.
    fn prefetch_windows(&self, windows: &[Window]) {
        let _ = windows;
    }
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
    fn prefetch_windows(&self, windows: &[Window]) {
        (**self).prefetch_windows(windows);
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
    /// Plans the windows and hands the plan to [`Reader::prefetch`] (nothing for a local
    /// storage).
    fn prefetch_windows(&self, windows: &[Window]) {
        if self.storage_dir().local_dir().is_none() {
            if let Ok(plan) = self.plan(windows) {
                self.prefetch(&plan);
            }
        }
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
/// `seq_len` and `stride`; [`DataSource::window_params`] reports `seq_len`, `stride` and `N`,
/// so a [`State`](crate::State) names the one that differs on resume.
///
/// A stream shorter than `seq_len` gives a source of no record, and a loader over it builds
/// and yields no batch (as any empty source does). [`Windows::check_fits`] says why:
/// [`LoaderError::WindowTooLong`] naming `seq_len` and `N` when the stream holds elements but
/// fewer than `seq_len`. (The token-window fast path, [`TokenWindows`](crate::TokenWindows),
/// refuses such a stream when it is built.)
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

    /// Elements in the stream the windows are cut from.
    pub fn elements(&self) -> u64 {
        self.reader.len()
    }

    /// Says why this source has no window when its stream is not empty.
    ///
    /// # Errors
    /// [`LoaderError::WindowTooLong`] naming `seq_len` and the stream's element count when the
    /// stream holds at least one element but fewer than `seq_len` (so there is no window and
    /// a loader over it yields no batch). An empty stream is `Ok`: it is an empty source.
    ///
    /// ```
    /// use guideloom_formats::TokenFormat;
    /// use guideloom_loader::{DataSource, LoaderError, StreamWindows};
    /// use guideloom_storage::StreamWriter;
    /// let dir = tempfile::tempdir()?;
    /// let mut w = StreamWriter::open(dir.path(), TokenFormat::<u16>::new())?;
    /// w.append(0, &[1, 2, 3])?;
    /// w.commit()?;
    /// let windows = StreamWindows::open(dir.path(), TokenFormat::<u16>::new(), 8)?;
    /// assert_eq!(windows.len(), 0);
    /// let why = windows.check_fits().unwrap_err();
    /// assert!(matches!(why, LoaderError::WindowTooLong { seq_len: 8, elements: 3 }));
    /// assert!(StreamWindows::open(dir.path(), TokenFormat::<u16>::new(), 3)?.check_fits().is_ok());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn check_fits(&self) -> Result<(), LoaderError> {
        let elements = self.elements();
        if elements > 0 && elements < self.seq_len {
            return Err(LoaderError::WindowTooLong { seq_len: self.seq_len, elements });
        }
        Ok(())
    }

    /// The window parameters: `seq_len`, `stride` and the stream's element count.
    pub fn params(&self) -> crate::WindowParams {
        crate::WindowParams { seq_len: self.seq_len, stride: self.stride, elements: self.elements() }
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
    /// [`LoaderError::Open`] when the storage cannot be opened;
    /// [`LoaderError::InvalidConfig`] when `seq_len` is 0.
    pub fn open(dir: impl AsRef<Path>, format: F, seq_len: u64) -> Result<Self, LoaderError> {
        let dir = dir.as_ref();
        let reader = StreamReader::open(dir, format).map_err(open_error(dir))?;
        Self::new(reader, seq_len)
    }
}

impl<F: StreamWithMetaFormat> Windows<StreamWithMetaReader<F>> {
    /// Opens the stream-with-meta storage in `dir` and makes windows of `seq_len` (stride
    /// `seq_len`).
    ///
    /// # Errors
    /// [`LoaderError::Open`] when the storage cannot be opened;
    /// [`LoaderError::InvalidConfig`] when `seq_len` is 0.
    pub fn open(dir: impl AsRef<Path>, format: F, seq_len: u64) -> Result<Self, LoaderError> {
        let dir = dir.as_ref();
        let reader = StreamWithMetaReader::open(dir, format).map_err(open_error(dir))?;
        Self::new(reader, seq_len)
    }
}

impl<R: WindowReader> DataSource for Windows<R> {
    type Item = R::Output;

    fn prefetch(&self, indices: &[u64]) {
        if let Ok(windows) = self.windows(indices) {
            self.reader.prefetch_windows(&windows);
        }
    }

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
        self.reader.read_windows(&windows).map_err(|e| name_failing_record(e, indices, |i| self.get(i)))
    }

    fn fingerprint(&self) -> u64 {
        fingerprint_words(&[0x7769_6e64_6f77, self.reader.fingerprint(), self.seq_len, self.stride])
    }

    fn window_params(&self) -> Option<crate::WindowParams> {
        Some(self.params())
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
    /// [`LoaderError::Open`] when the storage cannot be opened.
    pub fn open(dir: impl AsRef<Path>, format: F) -> Result<Self, LoaderError> {
        let dir = dir.as_ref();
        DocumentReader::open(dir, format).map(Documents::new).map_err(open_error(dir))
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
        self.reader.get_many(indices).map_err(|e| name_failing_record(e, indices, |i| self.get(i)))
    }

    fn fingerprint(&self) -> u64 {
        self.reader.fingerprint()
    }
}

/// The error of a batched read that failed with `batch_error`: the first of `indices` whose
/// own read (`get`) fails, or `batch_error` at the first index when each read alone succeeds.
/// A remote request that failed after its retries is not repeated record by record (that
/// would spend every retry again).
fn name_failing_record<T>(
    batch_error: StorageError,
    indices: &[u64],
    get: impl Fn(u64) -> Result<T, LoaderError>,
) -> LoaderError {
    let first = indices.first().copied().unwrap_or(0);
    if matches!(batch_error, StorageError::Remote { .. }) {
        return LoaderError::Storage { index: first, source: batch_error };
    }
    for &i in indices {
        if let Err(e) = get(i) {
            return e;
        }
    }
    LoaderError::Storage { index: first, source: batch_error }
}

/// Turns a storage's open failure into [`LoaderError::Open`] naming `dir`.
pub(crate) fn open_error(dir: &Path) -> impl FnOnce(StorageError) -> LoaderError + '_ {
    move |source| LoaderError::Open { path: dir.to_path_buf(), source }
}
