//! Where readers find a storage's files: the [`StorageDir`] trait, with a local directory
//! ([`LocalDir`]) and an in-memory one ([`MemDir`]); and where writers put them: the
//! [`WriteDir`] trait, which both implement too.
//!
//! Readers load the manifest, tell the directory which files it commits
//! ([`StorageDir::expect_files`]), check the shard files' lengths and load their indexes
//! through a [`StorageDir`]. Batches of a local directory are then served by the reader's
//! [`crate::io::ReadBackend`] over a [`FileSet`] (io_uring, pread, mmap: the fast path);
//! batches of any other directory through [`StorageDir::read_requests`]. A remote object
//! store or a directory of foreign files plugs in by implementing the trait. No directory
//! knows the manifest's format: what a storage commits reaches it as [`ExpectedFile`]s.
//!
//! Writers write through a [`WriteDir`] (the write half: open, write, truncate, sync, rename,
//! sync the directory, and the one atomic step of a commit, [`WriteDir::replace_if`]), so
//! every sync of a commit goes through one seam.

use std::fmt;
use std::path::Path;

use crate::fsutil::name_in;
use crate::io::{FileSet, ReadRequest, ShardFile};
use crate::{Result, StorageError};

mod local;
mod mem;

pub use local::LocalDir;
#[cfg(feature = "remote")]
pub(crate) use mem::BufferedFile;
pub use mem::MemDir;

/// Read access to the files of one storage, by plain file name (`"manifest.json"`,
/// `"shard-00000.stream"`).
///
/// Contract: the files a manifest commits are written once; bytes up to a committed length
/// never change while readers are open (writers only append past them and publish through
/// the manifest).
pub trait StorageDir: Send + Sync + fmt::Debug {
    /// Where the files are: the directory of a local storage, a label for others. Error
    /// messages and [`crate::io::ShardFile::path`] name files as `path().join(name)`.
    fn path(&self) -> &Path;

    /// The local directory when the files are plain files on this machine; readers then read
    /// batches through their [`crate::io::ReadBackend`]. `None` (the default) sends every
    /// batch through [`StorageDir::read_requests`].
    fn local_dir(&self) -> Option<&Path> {
        None
    }

    /// The length in bytes of file `name`; `Ok(None)` when it does not exist.
    ///
    /// # Errors
    /// [`StorageError::Io`] when the length cannot be found out.
    fn file_len(&self, name: &str) -> Result<Option<u64>>;

    /// Checks many files at once: for each of `files` (the file named by the last component
    /// of its `path`, as in [`StorageDir::read_requests`]), in order, the outcome of
    /// [`StorageDir::file_len`] against its `committed` length. Returns the first file that is
    /// missing or holds fewer than `committed` bytes as a [`LengthFault`], or `Ok(None)` when
    /// every file holds its committed bytes. Readers check a storage's shard files with it at
    /// open. The default asks [`StorageDir::file_len`] file by file; [`LocalDir`] examines the
    /// files relative to one open descriptor of its directory, on up to 4 threads when there
    /// are many.
    ///
    /// # Errors
    /// The error of [`StorageDir::file_len`] for the first file (in `files` order) whose
    /// length cannot be found out (or whose path does not end in a UTF-8 name), when no file
    /// before it is missing or short.
    fn check_lengths(&self, files: &[ShardFile]) -> Result<Option<LengthFault>> {
        for (index, f) in files.iter().enumerate() {
            match self.file_len(name_in(self.path(), &f.path)?)? {
                Some(len) if len >= f.committed => {}
                found => return Ok(Some(LengthFault { index, found })),
            }
        }
        Ok(None)
    }

    /// What the storage in this directory commits, told by a reader once it has loaded the
    /// manifest and before it asks for any length: every file with its committed length and
    /// checksum. A directory that can use it does (a remote store asks the lengths of all
    /// files at once and checks the bytes it fetches against the checksums); the default
    /// ignores it. Each call replaces what an earlier one told. Never fails: whatever it
    /// starts that goes wrong is reported by the later call that needs it.
    fn expect_files(&self, files: &[ExpectedFile]) {
        let _ = files;
    }

    /// Fills `out` with the bytes of file `name` from byte `offset` on.
    ///
    /// # Errors
    /// [`StorageError::ShortRead`] when the file ends before `out` is full;
    /// [`StorageError::Io`] when it cannot be read (or does not exist).
    fn read_at(&self, name: &str, offset: u64, out: &mut [u8]) -> Result<()>;

    /// The whole file `name`, or its first `max_len + 1` bytes when it is longer (so a caller
    /// sees that it is too long without reading it all); `Ok(None)` when it does not exist.
    /// The default asks [`StorageDir::file_len`] and reads with [`StorageDir::read_at`].
    ///
    /// # Errors
    /// As [`StorageDir::read_at`].
    fn read_file(&self, name: &str, max_len: u64) -> Result<Option<Vec<u8>>> {
        let Some(len) = self.file_len(name)? else { return Ok(None) };
        let len = len.min(max_len.saturating_add(1));
        let mut out =
            vec![0u8; usize::try_from(len).map_err(|_| StorageError::BatchTooLarge { bytes: len })?];
        self.read_at(name, 0, &mut out)?;
        Ok(Some(out))
    }

    /// Reads `requests` over the files of `files` (file `i` is the file named by the last
    /// component of `files.file(i).path`), back to back in request order into `out`, as
    /// [`crate::io::ReadBackend::read_into`] does for local files. The default makes one
    /// [`StorageDir::read_at`] per request; a remote store would fetch the ranges together.
    ///
    /// # Errors
    /// [`StorageError::BufferLength`] when `out.len()` differs from the total request length;
    /// [`StorageError::FileOutOfRange`] for a request naming a file `files` does not have;
    /// errors of [`StorageDir::read_at`].
    fn read_requests(&self, files: &FileSet, requests: &[ReadRequest], out: &mut [u8]) -> Result<()> {
        let total = requests.iter().fold(0u64, |a, r| a.saturating_add(r.len));
        if total != out.len() as u64 {
            return Err(StorageError::BufferLength { expected: total, found: out.len() as u64 });
        }
        let mut pos = 0usize;
        for r in requests {
            let file = files.get(r.file)?;
            let name = name_in(self.path(), &file.path)?;
            // `total` equals `out.len()`, so every request length fits `usize`.
            let n = r.len as usize;
            self.read_at(name, r.offset, &mut out[pos..pos + n])?;
            pos += n;
        }
        Ok(())
    }

    /// A hint that `requests` over `files` (as in [`StorageDir::read_requests`]) will be read
    /// soon: a remote store starts fetching them in the background so that the later read
    /// finds the bytes in memory. Never fails (a failed fetch is fetched again, and reported,
    /// by the read); the default does nothing.
    fn prefetch(&self, files: &FileSet, requests: &[ReadRequest]) {
        let _ = (files, requests);
    }

    /// The entries directly inside the directory (not recursive), in no particular order:
    /// what foreign datasets list to expand a directory or a glob. A local directory
    /// reports each entry's own type (links are not followed; names that are not UTF-8 are
    /// left out); an object store reports its objects as files and the next level of its
    /// prefixes as directories. The default refuses.
    ///
    /// # Errors
    /// [`StorageError::Io`] naming the directory when it cannot be listed (kind
    /// [`std::io::ErrorKind::Unsupported`] from the default); [`StorageError::Remote`] (op
    /// `list`) from an object store.
    fn list(&self) -> Result<Vec<DirEntry>> {
        Err(StorageError::io(
            self.path(),
            std::io::Error::new(std::io::ErrorKind::Unsupported, "this storage directory cannot be listed"),
        ))
    }
}

/// What one entry of [`StorageDir::list`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum EntryKind {
    /// A regular file (an object of an object store).
    File,
    /// A directory (a common prefix of an object store).
    Dir,
    /// Anything else, described: `"a symbolic link"`, `"a FIFO"`, `"a socket"`, `"a device"`.
    Other(&'static str),
}

/// One entry of [`StorageDir::list`]: a name directly inside the directory and its kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// The name (one path component).
    pub name: String,
    /// What it is.
    pub kind: EntryKind,
}

/// The first file [`StorageDir::check_lengths`] found missing or short.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LengthFault {
    /// The file's position in the list checked.
    pub index: usize,
    /// What it holds: `None` when it does not exist, `Some(len)` (fewer bytes than committed)
    /// when it is short.
    pub found: Option<u64>,
}

/// One file a storage commits, as a reader tells its directory
/// ([`StorageDir::expect_files`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpectedFile {
    /// The file's name, as the [`StorageDir`] methods take it (`"shard-00000.stream"`).
    pub name: String,
    /// The shard it belongs to (named in errors about it).
    pub shard: u64,
    /// Committed length in bytes: the file holds at least this many, and readers never read
    /// past them.
    pub committed: u64,
    /// The crc32c (Castagnoli) of its first `committed` bytes.
    pub checksum: u32,
}

/// Checks that `name` is a file name every directory of this crate accepts: a non-empty
/// relative path of plain components (no `..`, no root, no NUL or backslash). Implementations
/// of [`StorageDir`] and [`WriteDir`] outside this crate call it before touching a file, so
/// that no name (from a manifest, an index, a caller) leaves the storage.
///
/// ```
/// use guideloom_storage::{check_file_name, StorageError};
/// use std::path::Path;
/// assert!(check_file_name(Path::new("data"), "shard-00000.stream").is_ok());
/// assert!(check_file_name(Path::new("data"), "sub/index.json").is_ok());
/// for bad in ["", "../x", "/etc/passwd", "a/../../b", "a\\b"] {
///     let e = check_file_name(Path::new("data"), bad).unwrap_err();
///     assert!(matches!(e, StorageError::UnsafeFile { .. }), "{bad:?}: {e}");
/// }
/// ```
///
/// # Errors
/// [`StorageError::UnsafeFile`] naming `dir.join(name)` otherwise.
pub fn check_file_name(dir: &Path, name: &str) -> Result<()> {
    crate::fsutil::resolve(dir, name).map(drop)
}

/// Write access to the files of one storage, for writers: every byte a writer writes and
/// every sync it makes goes through this trait (the write half of the file-access seam).
///
/// A commit ([`crate::Writer::commit`]) calls, in this order: [`WriteFile::sync`] on every
/// shard file with bytes not yet durable, then [`WriteDir::replace_if`] of `manifest.json`
/// with the manifest the writer read (or last committed) as the expected content. A storage
/// whose implementation keeps those promises survives a power loss at any point with exactly
/// the last commit whose sequence completed (the storage tests check this on a file system
/// that drops everything not synced), and two writers committing to one storage never lose
/// each other's commit: the second gets [`StorageError::ConcurrentCommit`].
///
/// [`LocalDir`] and [`MemDir`] implement it, the remote directory too (with the `remote`
/// feature); the test suite's power-loss file system is another implementation. Writers open
/// one with [`crate::Writer::open_in`].
pub trait WriteDir: StorageDir {
    /// Creates the directory (and its parents) when it does not exist.
    ///
    /// # Errors
    /// [`StorageError::Io`] naming the directory.
    fn create_dir(&self) -> Result<()>;

    /// Takes the directory's exclusive writer lock, held until the returned guard is dropped
    /// (one writer per storage at a time). A directory that has no lock (an object store)
    /// returns [`DirLock::none`]: two writers may then open the storage at once, and the
    /// second to commit gets [`StorageError::ConcurrentCommit`] from
    /// [`WriteDir::replace_if`].
    ///
    /// # Errors
    /// [`StorageError::Locked`] while another writer holds it; [`StorageError::Io`] when it
    /// cannot be taken.
    fn lock(&self) -> Result<DirLock>;

    /// Opens file `name` for writing without truncating it; when `create`, a missing file is
    /// created empty (a new file's name is durable only after [`WriteDir::sync_dir`]).
    ///
    /// # Errors
    /// [`StorageError::Io`] naming the file; its source has kind
    /// [`std::io::ErrorKind::NotFound`] when the file does not exist and `create` is false.
    fn open_write(&self, name: &str, create: bool) -> Result<Box<dyn WriteFile>>;

    /// Renames file `from` to `to` atomically, replacing `to` (durable only after
    /// [`WriteDir::sync_dir`]).
    ///
    /// # Errors
    /// [`StorageError::Io`] naming `to`.
    fn rename(&self, from: &str, to: &str) -> Result<()>;

    /// Makes the directory's entries durable: the files created and renamed in it so far
    /// (`fsync` of the directory).
    ///
    /// # Errors
    /// [`StorageError::Io`] naming the directory.
    fn sync_dir(&self) -> Result<()>;

    /// Replaces file `name` with `bytes`, atomically and durably, when it holds exactly
    /// `expected` (`None`: when it does not exist): the one compare-and-swap a commit needs.
    /// Two calls with the same `expected` never both succeed, and once `Ok` is returned a
    /// reader (and a power loss) sees `bytes`; until then, and when it fails, the file is
    /// as it was. [`LocalDir`] takes a lock on the directory, compares, writes `NAME.tmp`
    /// (truncated, written, synced), renames it over `NAME` and syncs the directory;
    /// [`MemDir`] compares and replaces under its lock; an object store puts the object on
    /// the condition that it is still the version holding `expected` (HTTP `If-Match`, or
    /// `If-None-Match: *` for `None`).
    ///
    /// # Errors
    /// [`StorageError::ConcurrentCommit`] naming the file when it does not hold `expected`
    /// (nothing is written); [`StorageError::UnsafeFile`] for a name that is not plain;
    /// [`StorageError::Io`] (or [`StorageError::Remote`]) naming the file that failed.
    fn replace_if(&self, name: &str, expected: Option<&[u8]>, bytes: &[u8]) -> Result<()>;
}

/// The writer lock of a [`WriteDir`] ([`WriteDir::lock`]): released when dropped.
///
/// ```
/// use guideloom_storage::{DirLock, MemDir, StorageError, WriteDir};
/// let dir = MemDir::new();
/// let lock = dir.lock()?;
/// assert!(lock.is_exclusive());
/// assert!(matches!(dir.lock(), Err(StorageError::Locked { .. })));
/// drop(lock);
/// assert!(dir.lock().is_ok());
/// assert!(!DirLock::none().is_exclusive());
/// # Ok::<(), StorageError>(())
/// ```
pub struct DirLock {
    /// What holds the lock (`None`: no lock); dropping it releases the lock.
    guard: Option<Box<dyn Send + Sync>>,
}

impl DirLock {
    /// An exclusive lock, held as long as `guard` lives (a locked file, a flag cleared on
    /// drop).
    pub fn exclusive(guard: impl Send + Sync + 'static) -> Self {
        DirLock { guard: Some(Box::new(guard)) }
    }

    /// No lock: the directory cannot lock (an object store), and relies on
    /// [`WriteDir::replace_if`] to refuse the second of two concurrent commits.
    pub fn none() -> Self {
        DirLock { guard: None }
    }

    /// Whether this is an exclusive lock (`false` for [`DirLock::none`]).
    pub fn is_exclusive(&self) -> bool {
        self.guard.is_some()
    }
}

impl fmt::Debug for DirLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DirLock").field("exclusive", &self.is_exclusive()).finish()
    }
}

/// A file opened by [`WriteDir::open_write`]: positional writes, truncation and the sync that
/// makes them durable. Closed when dropped (dropping does not sync).
pub trait WriteFile: Send + Sync + fmt::Debug {
    /// The file's length in bytes, bytes not yet durable included.
    ///
    /// # Errors
    /// [`StorageError::Io`] naming the file.
    fn len(&self) -> Result<u64>;

    /// Whether the file holds no byte.
    ///
    /// # Errors
    /// As [`WriteFile::len`].
    fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }

    /// Cuts or extends (with zeros) the file to `len` bytes.
    ///
    /// # Errors
    /// [`StorageError::Io`] naming the file.
    fn set_len(&mut self, len: u64) -> Result<()>;

    /// Writes all of `bytes` at byte `offset`.
    ///
    /// # Errors
    /// [`StorageError::Io`] naming the file.
    fn write_all_at(&mut self, bytes: &[u8], offset: u64) -> Result<()>;

    /// Makes every byte written so far and the file's length durable (`fdatasync(2)` for a
    /// local file: the data and the metadata needed to read it back).
    ///
    /// # Errors
    /// [`StorageError::Io`] naming the file.
    fn sync(&mut self) -> Result<()>;
}
