//! Where readers find a storage's files: the [`StorageDir`] trait, with a local directory
//! ([`LocalDir`]) and an in-memory one ([`MemDir`]).
//!
//! Readers load the manifest, check the shard files' lengths and load their indexes through
//! a [`StorageDir`]. Batches of a local directory are then served by the reader's
//! [`crate::io::ReadBackend`] over a [`FileSet`] (io_uring, pread, mmap: the fast path);
//! batches of any other directory through [`StorageDir::read_requests`]. A remote object
//! store or a directory of foreign files plugs in by implementing the trait.
//!
//! Writers write through a [`WriteDir`] (the write half: open, write, truncate, sync, rename,
//! sync the directory), so every sync of a commit goes through one seam; [`LocalDir`]
//! implements both halves.

use std::collections::BTreeMap;
use std::fmt;
use std::fs::File;
use std::io::Read;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};

use crate::io::{read_exact_at, FileSet, ReadRequest, ShardFile};
use crate::{Result, StorageError};

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
    /// [`StorageDir::file_len`] against its `committed` length. Returns the position in
    /// `files` of the first file that is missing (`(i, None)`) or holds fewer than
    /// `committed` bytes (`(i, Some(actual))`), or `Ok(None)` when every file holds its
    /// committed bytes. Readers check a storage's shard files with it at open. The default
    /// asks [`StorageDir::file_len`] file by file; [`LocalDir`] examines the files relative
    /// to one open descriptor of its directory, on up to 4 threads when there are many.
    ///
    /// # Errors
    /// The error of [`StorageDir::file_len`] for the first file (in `files` order) whose
    /// length cannot be found out (or whose path does not end in a UTF-8 name), when no file
    /// before it is missing or short.
    fn check_lengths(&self, files: &[ShardFile]) -> Result<Option<(usize, Option<u64>)>> {
        for (i, f) in files.iter().enumerate() {
            match self.file_len(file_name(&f.path)?)? {
                Some(len) if len >= f.committed => {}
                found => return Ok(Some((i, found))),
            }
        }
        Ok(None)
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
            let name = file_name(&file.path)?;
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

/// The last component of `path` as text.
pub(crate) fn file_name(path: &Path) -> Result<&str> {
    path.file_name().and_then(|n| n.to_str()).ok_or_else(|| {
        StorageError::io(
            path,
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "the path does not end in a UTF-8 file name",
            ),
        )
    })
}

/// `dir/name` when `name` names a file inside `dir`: a non-empty relative path of plain
/// components (no `..`, no root, no NUL or backslash). Every file a [`LocalDir`] reads or
/// writes is named through here, so no name (from a manifest, an index, a caller) leaves the
/// storage.
///
/// # Errors
/// [`StorageError::UnsafeFile`] naming the file otherwise.
pub(crate) fn resolve(dir: &Path, name: &str) -> Result<PathBuf> {
    if !plain_name(name) {
        return Err(StorageError::UnsafeFile {
            path: dir.join(name),
            reason: "the name leaves the storage directory (only plain relative names are used)".into(),
        });
    }
    Ok(dir.join(name))
}

/// Whether `name` is a non-empty relative path of plain components (no `..`, no root, no NUL
/// or backslash): the names [`resolve`] accepts.
fn plain_name(name: &str) -> bool {
    !name.is_empty()
        && !name.contains(['\0', '\\'])
        && Path::new(name).components().all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
}

/// What a file of type `kind` is, in words (`"a FIFO"`).
fn kind_name(kind: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_symlink() {
        "a symbolic link (links are never followed)"
    } else if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_block_device() || kind.is_char_device() {
        "a device"
    } else {
        "not a regular file"
    }
}

/// The error for `path`, found to be of type `kind` instead of a regular file.
pub(crate) fn not_regular(path: &Path, kind: std::fs::FileType) -> StorageError {
    StorageError::UnsafeFile {
        path: path.to_path_buf(),
        reason: format!("it is {}, not a regular file", kind_name(kind)),
    }
}

/// The length of the regular file at `path` (not following a final symbolic link);
/// `Ok(None)` when nothing is there.
///
/// # Errors
/// [`StorageError::UnsafeFile`] when something other than a regular file is there (a link,
/// a FIFO, a directory); [`StorageError::Io`] when it cannot be examined.
pub(crate) fn regular_len(path: &Path) -> Result<Option<u64>> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_file() => Ok(Some(m.len())),
        Ok(m) => Err(not_regular(path, m.file_type())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(StorageError::io(path, e)),
    }
}

/// Fewest files per thread of [`LocalDir`]'s [`StorageDir::check_lengths`] (so a second
/// thread starts from twice this many files on).
const PARALLEL_CHECK: usize = 8192;

/// Most threads [`LocalDir`]'s [`StorageDir::check_lengths`] uses.
const MAX_CHECK_THREADS: usize = 4;

/// What [`StorageDir::check_lengths`] finds: the first file missing or short, or `None`.
type Finding = Option<(usize, Option<u64>)>;

/// [`LocalDir`]'s [`StorageDir::check_lengths`] over the directory `dir`.
fn check_local_lengths(dir: &Path, files: &[ShardFile]) -> Result<Finding> {
    let Some(fd) = open_dir_path(dir) else {
        // No descriptor of the directory (not Linux, or it cannot be opened): one path each.
        return check_chunk(dir, None, files, 0);
    };
    let threads = std::thread::available_parallelism()
        .map_or(1, usize::from)
        .min(MAX_CHECK_THREADS)
        .min(files.len() / PARALLEL_CHECK)
        .max(1);
    if threads == 1 {
        return check_chunk(dir, Some(&fd), files, 0);
    }
    let chunk = files.len().div_ceil(threads);
    let outcomes: Vec<Result<Finding>> = std::thread::scope(|scope| {
        let fd = &fd;
        let mut parts = files.chunks(chunk).enumerate();
        let first = parts.next();
        // Parts after the first on threads of their own (on this thread when one cannot be
        // started), the first on this thread meanwhile.
        let spawned: Vec<_> = parts
            .map(|(k, part)| {
                let run = move || check_chunk(dir, Some(fd), part, k * chunk);
                std::thread::Builder::new()
                    .name("guideloom-stat".into())
                    .spawn_scoped(scope, run)
                    .map_err(|_| run)
            })
            .collect();
        let mut outcomes = vec![first.map_or(Ok(None), |(_, part)| check_chunk(dir, Some(fd), part, 0))];
        for h in spawned {
            outcomes.push(match h {
                Ok(h) => h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)),
                Err(run) => run(),
            });
        }
        outcomes
    });
    // Chunks are in order and each stops at its first finding: the first chunk with one
    // holds the first finding of all.
    for outcome in outcomes {
        if !matches!(outcome, Ok(None)) {
            return outcome;
        }
    }
    Ok(None)
}

/// Checks `files` (the first at position `base` of the whole list) in order, stopping at the
/// first file that is missing, short or cannot be examined; through `fd` (a descriptor of
/// `dir`) when there is one.
fn check_chunk(
    dir: &Path,
    fd: Option<&std::os::fd::OwnedFd>,
    files: &[ShardFile],
    base: usize,
) -> Result<Finding> {
    for (i, f) in files.iter().enumerate() {
        let (name, committed) = (file_name(&f.path)?, f.committed);
        let path_len = || regular_len(&resolve(dir, name)?);
        let len = match fd {
            Some(fd) => {
                // The same name check as every other file access (no `..`, no root).
                if !plain_name(name) {
                    resolve(dir, name)?;
                }
                match stat_regular_at(fd, name) {
                    Some(Ok(len)) => Some(len),
                    Some(Err(())) => None,
                    // Not a plain regular-or-missing answer: ask again by path, for the exact
                    // error (or answer) of `regular_len`.
                    None => path_len()?,
                }
            }
            None => path_len()?,
        };
        match len {
            Some(len) if len >= committed => {}
            found => return Ok(Some((base + i, found))),
        }
    }
    Ok(None)
}

/// An `O_PATH` descriptor of the directory `dir` (Linux), or `None`.
fn open_dir_path(dir: &Path) -> Option<std::os::fd::OwnedFd> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::FromRawFd;
        use std::os::unix::ffi::OsStrExt;
        let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
        // SAFETY: `c` is a NUL-terminated string that lives across the call; `open` with
        // these flags only returns a new descriptor or -1.
        let fd = unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) };
        if fd < 0 {
            return None;
        }
        // SAFETY: `fd` was just returned by `open`, is valid and owned by nobody else.
        Some(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = dir;
        None
    }
}

/// `fstatat(fd, name, AT_SYMLINK_NOFOLLOW)`: `Some(Ok(len))` for a regular file,
/// `Some(Err(()))` when nothing is there (`ENOENT`), `None` for anything else (another file
/// type, another error, a name with a NUL byte).
fn stat_regular_at(fd: &std::os::fd::OwnedFd, name: &str) -> Option<std::result::Result<u64, ()>> {
    use std::os::fd::AsRawFd;
    // The name, NUL-terminated, on the stack (shard names are short) or else on the heap.
    let mut short = [0u8; 64];
    let heap;
    let c: &std::ffi::CStr = if name.len() < short.len() {
        short[..name.len()].copy_from_slice(name.as_bytes());
        std::ffi::CStr::from_bytes_until_nul(&short).ok()?
    } else {
        heap = std::ffi::CString::new(name).ok()?;
        &heap
    };
    if c.to_bytes().len() != name.len() {
        return None; // a NUL inside the name
    }
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `fd` is an open descriptor `fd` owns for the call, `c` a NUL-terminated string
    // that lives across it, and `st` points to writable memory of a `stat`'s size, which
    // `fstatat` fills when it returns 0.
    let rc = unsafe { libc::fstatat(fd.as_raw_fd(), c.as_ptr(), st.as_mut_ptr(), libc::AT_SYMLINK_NOFOLLOW) };
    if rc != 0 {
        let missing = std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOENT);
        return missing.then_some(Err(()));
    }
    // SAFETY: `fstatat` returned 0, so it initialised `st`.
    let st = unsafe { st.assume_init() };
    ((st.st_mode & libc::S_IFMT) == libc::S_IFREG).then(|| Ok(u64::try_from(st.st_size).unwrap_or(0)))
}

/// How [`open_regular`] opens a file.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Access {
    /// Read only; `direct` adds `O_DIRECT` (Linux).
    Read {
        /// Open with `O_DIRECT`.
        direct: bool,
    },
    /// Read and write, never truncating; `create` creates a missing file.
    Write {
        /// Create the file when it is missing.
        create: bool,
    },
}

/// Opens the file at `path` the one way every storage file is opened: without following a
/// final symbolic link (`O_NOFOLLOW`), without blocking on a FIFO (`O_NONBLOCK` until the
/// type is checked), and only when the opened file is a regular file (and, for writing, has
/// no other hard link, so a write cannot reach a file outside the storage). `Ok(None)` when
/// the file does not exist (and is not to be created).
///
/// # Errors
/// [`StorageError::UnsafeFile`] naming the file when it is a link, FIFO, directory, device or
/// socket, or a hard-linked file opened for writing; [`StorageError::Io`] when it cannot be
/// opened.
pub(crate) fn open_regular(path: &Path, access: Access) -> Result<Option<File>> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    use std::os::unix::io::AsRawFd;
    let mut o = std::fs::OpenOptions::new();
    let mut flags = libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC;
    match access {
        Access::Read { direct } => {
            o.read(true);
            if direct {
                #[cfg(target_os = "linux")]
                {
                    flags |= libc::O_DIRECT;
                }
                #[cfg(not(target_os = "linux"))]
                return Err(StorageError::io(
                    path,
                    std::io::Error::new(std::io::ErrorKind::Unsupported, "O_DIRECT is Linux-only here"),
                ));
            }
        }
        Access::Write { create } => {
            o.read(true).write(true).create(create).truncate(false);
        }
    }
    o.custom_flags(flags);
    let file = match o.open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(StorageError::UnsafeFile {
                path: path.to_path_buf(),
                reason: "it is a symbolic link (links are never followed)".into(),
            })
        }
        // A FIFO without a reader (write) or a socket.
        Err(e) if e.raw_os_error() == Some(libc::ENXIO) => {
            return Err(StorageError::UnsafeFile {
                path: path.to_path_buf(),
                reason: "it is a FIFO, socket or device, not a regular file".into(),
            })
        }
        Err(e) => return Err(StorageError::io(path, e)),
    };
    let meta = file.metadata().map_err(|e| StorageError::io(path, e))?;
    if !meta.file_type().is_file() {
        return Err(not_regular(path, meta.file_type()));
    }
    if matches!(access, Access::Write { .. }) && meta.nlink() > 1 {
        return Err(StorageError::UnsafeFile {
            path: path.to_path_buf(),
            reason: format!("it has {} hard links; writing would change the other names too", meta.nlink()),
        });
    }
    // Regular files never block; clear O_NONBLOCK anyway, since io_uring would otherwise
    // answer a read that needs the disk with EAGAIN instead of waiting for it.
    let fd = file.as_raw_fd();
    // SAFETY: `fd` is a descriptor `file` owns and keeps open for both calls; F_GETFL and
    // F_SETFL take and return plain integers and touch no memory.
    let cleared = unsafe {
        let fl = libc::fcntl(fd, libc::F_GETFL);
        fl >= 0 && libc::fcntl(fd, libc::F_SETFL, fl & !libc::O_NONBLOCK) == 0
    };
    if !cleared {
        return Err(StorageError::io(path, std::io::Error::last_os_error()));
    }
    Ok(Some(file))
}

/// [`open_regular`], with a missing file an [`StorageError::Io`] error of kind
/// [`std::io::ErrorKind::NotFound`].
pub(crate) fn open_existing(path: &Path, access: Access) -> Result<File> {
    open_regular(path, access)?
        .ok_or_else(|| StorageError::io(path, std::io::Error::from(std::io::ErrorKind::NotFound)))
}

/// A storage directory on the local file system: the default of every reader's `open`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalDir {
    path: PathBuf,
}

impl LocalDir {
    /// The directory `path` (nothing is checked or opened here).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        LocalDir { path: path.into() }
    }
}

impl StorageDir for LocalDir {
    fn path(&self) -> &Path {
        &self.path
    }

    fn local_dir(&self) -> Option<&Path> {
        Some(&self.path)
    }

    /// Refuses anything but a regular file (a link, FIFO or directory in a shard's place is
    /// a [`StorageError::UnsafeFile`], not a length).
    fn file_len(&self, name: &str) -> Result<Option<u64>> {
        regular_len(&resolve(&self.path, name)?)
    }

    /// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)` relative to one `O_PATH` descriptor of the
    /// directory (Linux; the path is not resolved from the root again for every file), split
    /// over up to 4 threads (at most one per core, each with at least 8,192 files: a second
    /// thread from 16,384 files on). Anything but a regular file or a missing one is examined
    /// again the way [`StorageDir::file_len`] does, for the same error.
    fn check_lengths(&self, files: &[ShardFile]) -> Result<Option<(usize, Option<u64>)>> {
        check_local_lengths(&self.path, files)
    }

    fn read_at(&self, name: &str, offset: u64, out: &mut [u8]) -> Result<()> {
        let path = resolve(&self.path, name)?;
        let file = open_existing(&path, Access::Read { direct: false })?;
        read_exact_at(&file, out, offset, &path)
    }

    /// Reads through the open file, cut at `max_len + 1` bytes.
    fn read_file(&self, name: &str, max_len: u64) -> Result<Option<Vec<u8>>> {
        let path = resolve(&self.path, name)?;
        let Some(file) = open_regular(&path, Access::Read { direct: false })? else { return Ok(None) };
        // Sized from the file's length up front (a manifest of 100,000 shards is 10 MB).
        let len = file.metadata().map_or(0, |m| m.len()).min(max_len.saturating_add(1));
        let mut text = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
        file.take(max_len.saturating_add(1))
            .read_to_end(&mut text)
            .map_err(|e| StorageError::io(&path, e))?;
        Ok(Some(text))
    }

    /// `read_dir`, each entry's type as the directory records it (never following a link).
    fn list(&self) -> Result<Vec<DirEntry>> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(&self.path).map_err(|e| StorageError::io(&self.path, e))? {
            let entry = entry.map_err(|e| StorageError::io(&self.path, e))?;
            let Some(name) = entry.file_name().to_str().map(str::to_string) else { continue };
            let t = entry.file_type().map_err(|e| StorageError::io(entry.path(), e))?;
            let kind = if t.is_file() {
                EntryKind::File
            } else if t.is_dir() {
                EntryKind::Dir
            } else {
                EntryKind::Other(kind_name(t))
            };
            out.push(DirEntry { name, kind });
        }
        Ok(out)
    }
}

/// A storage directory held in memory: files by name, each an immutable byte buffer. For
/// tests (no temp directory needed) and for storages assembled in memory.
///
/// ```
/// use guideloom_formats::TokenFormat;
/// use guideloom_storage::{MemDir, ReadOptions, StreamReader, StreamWriter, Window};
/// use std::sync::Arc;
/// let dir = tempfile::tempdir()?;
/// let mut w = StreamWriter::open(dir.path(), TokenFormat::<u16>::new())?;
/// w.append(0, &[1, 2, 3])?;
/// w.commit()?;
/// let mem = Arc::new(MemDir::copy_of(dir.path())?);
/// drop(dir); // the reader below reads only memory
/// let r = StreamReader::open_in(mem, TokenFormat::<u16>::new(), ReadOptions::default())?;
/// assert_eq!(r.read(Window::new(1, 2))?, vec![2, 3]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Default)]
pub struct MemDir {
    path: PathBuf,
    files: RwLock<BTreeMap<String, Arc<[u8]>>>,
}

impl fmt::Debug for MemDir {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let files = self.lock_read();
        let sizes: BTreeMap<&str, usize> = files.iter().map(|(k, v)| (k.as_str(), v.len())).collect();
        f.debug_struct("MemDir").field("path", &self.path).field("files", &sizes).finish()
    }
}

impl MemDir {
    /// An empty directory labelled `memory` in messages.
    pub fn new() -> Self {
        MemDir { path: PathBuf::from("memory"), files: RwLock::default() }
    }

    /// A copy of every regular file directly inside the local directory `dir` (not
    /// recursive), labelled with `dir`'s path.
    ///
    /// # Errors
    /// [`StorageError::Io`] naming the directory or file that cannot be read.
    pub fn copy_of(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref();
        let mem = MemDir { path: dir.to_path_buf(), files: RwLock::default() };
        for entry in std::fs::read_dir(dir).map_err(|e| StorageError::io(dir, e))? {
            let entry = entry.map_err(|e| StorageError::io(dir, e))?;
            let path = entry.path();
            let kind = entry.file_type().map_err(|e| StorageError::io(&path, e))?;
            if let (true, Some(name)) = (kind.is_file(), entry.file_name().to_str()) {
                let bytes = std::fs::read(&path).map_err(|e| StorageError::io(&path, e))?;
                mem.insert(name, bytes);
            }
        }
        Ok(mem)
    }

    /// Adds or replaces file `name`.
    pub fn insert(&self, name: impl Into<String>, bytes: impl Into<Arc<[u8]>>) {
        self.files.write().unwrap_or_else(PoisonError::into_inner).insert(name.into(), bytes.into());
    }

    /// Removes file `name`; returns its bytes, `None` when there was none.
    pub fn remove(&self, name: &str) -> Option<Arc<[u8]>> {
        self.files.write().unwrap_or_else(PoisonError::into_inner).remove(name)
    }

    /// The bytes of file `name`.
    pub fn get(&self, name: &str) -> Option<Arc<[u8]>> {
        self.lock_read().get(name).cloned()
    }

    /// The file names, sorted.
    pub fn names(&self) -> Vec<String> {
        self.lock_read().keys().cloned().collect()
    }

    fn lock_read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, Arc<[u8]>>> {
        self.files.read().unwrap_or_else(PoisonError::into_inner)
    }
}

impl StorageDir for MemDir {
    fn path(&self) -> &Path {
        &self.path
    }

    fn file_len(&self, name: &str) -> Result<Option<u64>> {
        Ok(self.lock_read().get(name).map(|b| b.len() as u64))
    }

    /// Every file whose name is one component, as [`EntryKind::File`].
    fn list(&self) -> Result<Vec<DirEntry>> {
        Ok(self
            .names()
            .into_iter()
            .filter(|n| !n.contains('/'))
            .map(|name| DirEntry { name, kind: EntryKind::File })
            .collect())
    }

    fn read_at(&self, name: &str, offset: u64, out: &mut [u8]) -> Result<()> {
        let path = self.path.join(name);
        let Some(bytes) = self.get(name) else {
            return Err(StorageError::io(path, std::io::Error::from(std::io::ErrorKind::NotFound)));
        };
        let start = usize::try_from(offset).map_or(bytes.len(), |o| o.min(bytes.len()));
        let available = &bytes[start..];
        if available.len() < out.len() {
            return Err(StorageError::ShortRead {
                path,
                offset,
                expected: out.len() as u64,
                got: available.len() as u64,
            });
        }
        out.copy_from_slice(&available[..out.len()]);
        Ok(())
    }
}

/// Write access to the files of one storage, for writers: every byte a writer writes and
/// every sync it makes goes through this trait (the write half of the file-access seam).
///
/// A commit ([`crate::Writer::commit`]) calls, in this order: [`WriteFile::sync`] on every
/// shard file with bytes not yet durable, then [`WriteDir::open_write`] of
/// `manifest.json.tmp` (truncated with [`WriteFile::set_len`], written,
/// [`WriteFile::sync`]), [`WriteDir::rename`] of it over `manifest.json`, and
/// [`WriteDir::sync_dir`]. A storage whose implementation keeps those promises survives a
/// power loss at any point with exactly the last commit whose sequence completed (the
/// storage tests check this on a file system that drops everything not synced).
///
/// [`LocalDir`] implements it for local directories; the test suite's power-loss file system
/// is another implementation. Writers open one with [`crate::Writer::open_in`].
pub trait WriteDir: StorageDir {
    /// Creates the directory (and its parents) when it does not exist.
    ///
    /// # Errors
    /// [`StorageError::Io`] naming the directory.
    fn create_dir(&self) -> Result<()>;

    /// Takes the directory's exclusive writer lock, held until the returned guard is dropped
    /// (one writer per storage at a time).
    ///
    /// # Errors
    /// [`StorageError::Locked`] while another writer holds it; [`StorageError::Io`] when it
    /// cannot be taken.
    fn lock(&self) -> Result<Box<dyn fmt::Debug + Send + Sync>>;

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

/// A local file opened for writing ([`LocalDir`]'s [`WriteFile`]).
#[derive(Debug)]
struct LocalFile {
    path: PathBuf,
    file: File,
}

impl WriteFile for LocalFile {
    fn len(&self) -> Result<u64> {
        Ok(self.file.metadata().map_err(|e| StorageError::io(&self.path, e))?.len())
    }

    fn set_len(&mut self, len: u64) -> Result<()> {
        self.file.set_len(len).map_err(|e| StorageError::io(&self.path, e))
    }

    fn write_all_at(&mut self, bytes: &[u8], offset: u64) -> Result<()> {
        use std::os::unix::fs::FileExt;
        self.file.write_all_at(bytes, offset).map_err(|e| StorageError::io(&self.path, e))
    }

    fn sync(&mut self) -> Result<()> {
        self.file.sync_data().map_err(|e| StorageError::io(&self.path, e))
    }
}

impl WriteDir for LocalDir {
    fn create_dir(&self) -> Result<()> {
        std::fs::create_dir_all(&self.path).map_err(|e| StorageError::io(&self.path, e))
    }

    fn lock(&self) -> Result<Box<dyn fmt::Debug + Send + Sync>> {
        Ok(Box::new(crate::lock::WriterLock::acquire(&self.path)?))
    }

    /// Opens without following a link and only a regular file: a symbolic link, FIFO, directory or hard-linked file
    /// in the file's place is a [`StorageError::UnsafeFile`], never written through.
    fn open_write(&self, name: &str, create: bool) -> Result<Box<dyn WriteFile>> {
        let path = resolve(&self.path, name)?;
        let file = open_existing(&path, Access::Write { create })?;
        Ok(Box::new(LocalFile { path, file }))
    }

    /// Renames within the directory; a link at `to` is replaced, never followed.
    fn rename(&self, from: &str, to: &str) -> Result<()> {
        let from = resolve(&self.path, from)?;
        let to = resolve(&self.path, to)?;
        std::fs::rename(from, &to).map_err(|e| StorageError::io(&to, e))
    }

    fn sync_dir(&self) -> Result<()> {
        let d = File::open(&self.path).map_err(|e| StorageError::io(&self.path, e))?;
        d.sync_all().map_err(|e| StorageError::io(&self.path, e))
    }
}
