//! The seam every backend implements ([`ReadBackend`]) and what the backends share: the
//! planning of a batch into read operations ([`plan`], [`Op`]) and the `O_DIRECT` alignment.

use std::fmt;

use super::files::FileSet;
use super::request::ReadRequest;
use crate::{Result, StorageError};

/// Alignment in bytes of `O_DIRECT` offsets, lengths and buffers (the page size; covers the
/// 512 B / 4 KiB logical blocks of common devices).
pub const DIRECT_ALIGN: usize = 4096;

/// A way of reading byte ranges from shard files (pread, io_uring, mmap ...).
///
/// Every backend returns the same bytes for the same requests.
pub trait ReadBackend: Send + Sync + fmt::Debug {
    /// The backend's name (`"pread"`, `"io_uring"`, `"mmap"`, `"pread+direct"`,
    /// `"io_uring+direct"`; [`super::AutoBackend`] reports the backend it chose).
    fn name(&self) -> &'static str;

    /// Reads every request, laying the results back to back in request order into `out`.
    ///
    /// `out.len()` must equal the sum of the request lengths (bytes), and every range should
    /// lie inside its file's committed length. Requests of length 0 read nothing.
    ///
    /// # Errors
    /// [`StorageError::Io`] or [`StorageError::ShortRead`] (end of file before the committed
    /// length: the file was truncated after the storage was opened), naming the file;
    /// [`StorageError::BufferLength`] when `out.len()` differs from the total request length;
    /// [`StorageError::FileOutOfRange`] for a file index out of range;
    /// [`StorageError::BatchTooLarge`] for a request longer than memory can address;
    /// [`StorageError::Backend`] when the backend itself fails (for example an io_uring ring
    /// cannot be set up).
    fn read_into(&self, files: &FileSet, requests: &[ReadRequest], out: &mut [u8]) -> Result<()>;
}

/// One read operation of a batch: `len` bytes of file `file` at `offset` into the batch
/// buffer at `dst`; complete once `need` bytes arrived (`need < len` only for direct reads,
/// whose aligned tail may lie past the end of the file). `head` bytes at the start belong to
/// alignment padding (direct reads only); they are left out of error reports.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Op {
    pub(crate) file: usize,
    pub(crate) offset: u64,
    pub(crate) dst: usize,
    pub(crate) len: usize,
    pub(crate) need: usize,
    pub(crate) head: usize,
    pub(crate) done: usize,
}

impl Op {
    /// The typed error for an end of file after `self.done` bytes.
    pub(crate) fn short_read(&self, files: &FileSet) -> StorageError {
        StorageError::ShortRead {
            path: files.get(self.file).map(|f| f.path.clone()).ok().unwrap_or_default(),
            offset: self.offset + self.head as u64,
            expected: (self.need - self.head) as u64,
            got: self.done.saturating_sub(self.head) as u64,
        }
    }
}

/// Turns requests into [`Op`]s over a buffer of `out_len` bytes, splitting requests longer
/// than `max_op` bytes and dropping empty ones.
///
/// # Errors
/// [`StorageError::BufferLength`] when the total length differs from `out_len`;
/// [`StorageError::FileOutOfRange`] for a file index out of range.
pub(crate) fn plan(
    files: &FileSet,
    requests: &[ReadRequest],
    out_len: usize,
    max_op: usize,
) -> Result<Vec<Op>> {
    let mut ops = Vec::with_capacity(requests.len());
    let mut pos = 0usize;
    for r in requests {
        files.get(r.file)?;
        let len = usize::try_from(r.len)
            .ok()
            .filter(|&l| pos.checked_add(l).is_some_and(|end| end <= out_len))
            .ok_or_else(|| buffer_length(requests, out_len))?;
        let mut part = 0usize;
        while part < len {
            let n = (len - part).min(max_op);
            ops.push(Op {
                file: r.file,
                offset: r.offset + part as u64,
                dst: pos + part,
                len: n,
                need: n,
                head: 0,
                done: 0,
            });
            part += n;
        }
        pos += len;
    }
    if pos != out_len {
        return Err(buffer_length(requests, out_len));
    }
    Ok(ops)
}

/// The error for an output buffer of `out_len` bytes that does not fit `requests`.
pub(crate) fn buffer_length(requests: &[ReadRequest], out_len: usize) -> StorageError {
    let expected = requests.iter().fold(0u64, |a, r| a.saturating_add(r.len));
    StorageError::BufferLength { expected, found: out_len as u64 }
}
