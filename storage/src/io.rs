//! The reader abstraction every storage reads through: a batch of byte-range requests over a
//! set of shard files, served by a pluggable [`ReadBackend`].
//!
//! Storage readers turn a batch of windows or documents into [`ReadRequest`]s and call
//! [`ReadBackend::read_into`] once for the whole batch; the backend lays the requested bytes
//! back to back in request order into one caller buffer. Shard files are opened lazily and
//! kept in a bounded least-recently-used cache ([`FileSet`]), so a storage with thousands of
//! shards never holds more than [`ReadOptions::max_open_files`] descriptors.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use crate::{Result, StorageError};

/// One file of a storage as a reader sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardFile {
    /// The file's path.
    pub path: PathBuf,
    /// The shard it belongs to.
    pub shard: u64,
    /// Committed length in bytes (reads never go past it).
    pub committed: u64,
}

/// One byte range to read: `len` bytes at byte `offset` of file number `file` of a
/// [`FileSet`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadRequest {
    /// Index of the file in its [`FileSet`].
    pub file: usize,
    /// Byte offset in the file.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
}

/// The files of one storage with a bounded cache of open descriptors.
///
/// Files are opened on first use; when more than `max_open` are open, the least recently
/// used is closed (a descriptor in use by a concurrent read stays valid until that read ends,
/// so the bound can be exceeded by the number of reading threads).
pub struct FileSet {
    files: Vec<ShardFile>,
    max_open: usize,
    cache: Mutex<Lru>,
}

#[derive(Default)]
struct Lru {
    tick: u64,
    open: HashMap<usize, (Arc<File>, u64)>,
    by_tick: BTreeMap<u64, usize>,
}

impl fmt::Debug for FileSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileSet").field("files", &self.files.len()).field("max_open", &self.max_open).finish()
    }
}

impl FileSet {
    /// A file set holding at most `max_open` descriptors (at least 1).
    pub fn new(files: Vec<ShardFile>, max_open: usize) -> Self {
        FileSet { files, max_open: max_open.max(1), cache: Mutex::new(Lru::default()) }
    }

    /// Number of files.
    pub fn len(&self) -> usize {
        self.files.len()
    }

    /// Whether the set holds no file.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// The description of file `i`.
    ///
    /// # Panics
    /// When `i >= self.len()` (readers only build requests for their own files).
    pub fn file(&self, i: usize) -> &ShardFile {
        &self.files[i]
    }

    /// All files, in index order.
    pub fn files(&self) -> &[ShardFile] {
        &self.files
    }

    /// Number of descriptors currently cached open.
    pub fn open_count(&self) -> usize {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner).open.len()
    }

    /// The open handle of file `i`, opening it (and closing the least recently used one)
    /// when needed.
    ///
    /// # Errors
    /// [`StorageError::Io`] naming the file when it cannot be opened.
    pub fn handle(&self, i: usize) -> Result<Arc<File>> {
        {
            let mut lru = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
            lru.tick += 1;
            let tick = lru.tick;
            if let Some((file, old)) = lru.open.get_mut(&i) {
                let file = Arc::clone(file);
                let old = std::mem::replace(old, tick);
                lru.by_tick.remove(&old);
                lru.by_tick.insert(tick, i);
                return Ok(file);
            }
        }
        let path = &self.files[i].path;
        let file = Arc::new(File::open(path).map_err(|e| StorageError::io(path, e))?);
        let mut lru = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        lru.tick += 1;
        let tick = lru.tick;
        if let Some((_, old)) = lru.open.insert(i, (Arc::clone(&file), tick)) {
            lru.by_tick.remove(&old);
        }
        lru.by_tick.insert(tick, i);
        while lru.open.len() > self.max_open {
            let Some((_, victim)) = lru.by_tick.pop_first() else { break };
            lru.open.remove(&victim);
        }
        Ok(file)
    }
}

/// A way of reading byte ranges from shard files (pread, io_uring, mmap ...).
///
/// Every backend returns the same bytes for the same requests.
pub trait ReadBackend: Send + Sync + fmt::Debug {
    /// The backend's name (`"pread"`, `"io_uring"`, `"mmap"`).
    fn name(&self) -> &'static str;

    /// Reads every request, laying the results back to back in request order into `out`.
    ///
    /// Callers guarantee `out.len()` equals the sum of the request lengths and that every
    /// range lies inside its file's committed length.
    ///
    /// # Errors
    /// [`StorageError::Io`] or [`StorageError::ShortRead`] (end of file before the committed
    /// length: the file was truncated after the storage was opened), naming the file.
    fn read_into(&self, files: &FileSet, requests: &[ReadRequest], out: &mut [u8]) -> Result<()>;
}

/// Positional reads (`pread(2)` through `FileExt::read_at`), one call per request (more when
/// the kernel returns short reads): the portable backend.
#[derive(Debug, Clone, Copy, Default)]
pub struct PreadBackend;

impl ReadBackend for PreadBackend {
    fn name(&self) -> &'static str {
        "pread"
    }

    fn read_into(&self, files: &FileSet, requests: &[ReadRequest], out: &mut [u8]) -> Result<()> {
        let mut pos = 0usize;
        for r in requests {
            let len =
                usize::try_from(r.len).map_err(|_| StorageError::InvalidArgument("read too large".into()))?;
            let dst = &mut out[pos..pos + len];
            pos += len;
            if len == 0 {
                continue;
            }
            let file = files.handle(r.file)?;
            read_exact_at(&file, dst, r.offset, &files.file(r.file).path)?;
        }
        Ok(())
    }
}

/// Fills `dst` from `offset`, retrying short reads and `EINTR`; end of file before `dst` is
/// full is [`StorageError::ShortRead`].
pub(crate) fn read_exact_at(file: &File, dst: &mut [u8], offset: u64, path: &std::path::Path) -> Result<()> {
    let mut done = 0usize;
    while done < dst.len() {
        match file.read_at(&mut dst[done..], offset + done as u64) {
            Ok(0) => {
                return Err(StorageError::ShortRead {
                    path: path.to_path_buf(),
                    offset,
                    expected: dst.len() as u64,
                    got: done as u64,
                })
            }
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(StorageError::io(path, e)),
        }
    }
    Ok(())
}

/// How a reader reads: the backend and the descriptor budget.
#[derive(Debug, Clone)]
pub struct ReadOptions {
    /// The backend serving byte-range requests. Default: [`PreadBackend`].
    pub backend: Arc<dyn ReadBackend>,
    /// Most shard files kept open at once (default 128, at least 1).
    pub max_open_files: usize,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions { backend: Arc::new(PreadBackend), max_open_files: 128 }
    }
}

impl ReadOptions {
    /// Uses `backend`.
    pub fn with_backend(mut self, backend: Arc<dyn ReadBackend>) -> Self {
        self.backend = backend;
        self
    }

    /// Keeps at most `n` shard files open.
    pub fn with_max_open_files(mut self, n: usize) -> Self {
        self.max_open_files = n;
        self
    }
}
