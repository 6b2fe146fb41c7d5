//! Data sources over guideloom storages.

use std::path::Path;

use guideloom_formats::{DocumentFormat, StreamFormat};
use guideloom_storage::{DocumentReader, StreamReader};

use crate::{fingerprint_words, DataSource, LoaderError};

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
pub struct StreamWindows<F: StreamFormat> {
    reader: StreamReader<F>,
    seq_len: u64,
    stride: u64,
    count: u64,
}

impl<F: StreamFormat> StreamWindows<F> {
    /// Windows of `seq_len` elements with stride `seq_len` over an open reader.
    ///
    /// # Errors
    /// [`LoaderError::InvalidConfig`] when `seq_len` is 0.
    pub fn new(reader: StreamReader<F>, seq_len: u64) -> Result<Self, LoaderError> {
        Self::with_stride(reader, seq_len, seq_len)
    }

    /// Windows of `seq_len` elements starting every `stride` elements.
    ///
    /// # Errors
    /// [`LoaderError::InvalidConfig`] when `seq_len` or `stride` is 0.
    pub fn with_stride(reader: StreamReader<F>, seq_len: u64, stride: u64) -> Result<Self, LoaderError> {
        if seq_len == 0 {
            return Err(LoaderError::InvalidConfig { field: "seq_len", detail: "must be at least 1".into() });
        }
        if stride == 0 {
            return Err(LoaderError::InvalidConfig { field: "stride", detail: "must be at least 1".into() });
        }
        let n = reader.len();
        let count = if n < seq_len { 0 } else { (n - seq_len) / stride + 1 };
        Ok(StreamWindows { reader, seq_len, stride, count })
    }

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

    /// The underlying reader.
    pub fn reader(&self) -> &StreamReader<F> {
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

    /// Window `w` as `(offset, len)` in elements, or `None` when `w >= len()`.
    pub fn window(&self, w: u64) -> Option<(u64, u64)> {
        (w < self.count).then(|| (w * self.stride, self.seq_len))
    }

    fn windows(&self, indices: &[u64]) -> Result<Vec<(u64, u64)>, LoaderError> {
        indices
            .iter()
            .map(|&i| self.window(i).ok_or(LoaderError::IndexOutOfRange { index: i, len: self.count }))
            .collect()
    }
}

impl<F: StreamFormat> DataSource for StreamWindows<F> {
    type Item = F::Output;

    fn len(&self) -> u64 {
        self.count
    }

    fn get(&self, index: u64) -> Result<F::Output, LoaderError> {
        let (offset, len) = self.windows(&[index])?[0];
        self.reader.read(offset, len).map_err(|source| LoaderError::Storage { index, source })
    }

    /// One [`StreamReader::read_many`] call for all windows. When it fails, the windows are
    /// read one at a time to name the first failing one.
    fn get_many(&self, indices: &[u64]) -> Result<Vec<F::Output>, LoaderError> {
        let windows = self.windows(indices)?;
        self.reader.read_many(&windows).map_err(|batch_error| {
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
