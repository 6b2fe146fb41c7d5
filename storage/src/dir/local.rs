//! [`LocalDir`]: a storage directory on the local file system, both halves of the seam.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use super::{DirEntry, DirLock, EntryKind, LengthFault, StorageDir, WriteDir, WriteFile};
use crate::error::kind_name;
use crate::fsutil::{
    name_in, open_existing, open_regular, plain_name, read_exact_at, regular_len, resolve, Access,
};
use crate::io::ShardFile;
use crate::{Result, StorageError};

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
    fn check_lengths(&self, files: &[ShardFile]) -> Result<Option<LengthFault>> {
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

/// Fewest files per thread of [`LocalDir`]'s [`StorageDir::check_lengths`] (so a second
/// thread starts from twice this many files on).
const PARALLEL_CHECK: usize = 8192;

/// Most threads [`LocalDir`]'s [`StorageDir::check_lengths`] uses.
const MAX_CHECK_THREADS: usize = 4;

/// What [`StorageDir::check_lengths`] finds: the first file missing or short, or `None`.
type Finding = Option<LengthFault>;

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
        let (name, committed) = (name_in(dir, &f.path)?, f.committed);
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
            found => return Ok(Some(LengthFault { index: base + i, found })),
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

    /// `flock` of `.writer.lock` in the directory (see the crate's writer lock).
    fn lock(&self) -> Result<DirLock> {
        Ok(DirLock::exclusive(crate::lock::WriterLock::acquire(&self.path)?))
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

    /// Holding an exclusive `flock` of the directory itself (waiting for it; other callers of
    /// `replace_if` on the directory take it too, and the kernel releases it when a process
    /// dies): compares the file with `expected`, writes `NAME.tmp` (opened as
    /// [`WriteDir::open_write`] opens, truncated, written, `fdatasync`), renames it over
    /// `NAME`, and `fsync`s the directory. No file is added to the directory.
    fn replace_if(&self, name: &str, expected: Option<&[u8]>, bytes: &[u8]) -> Result<()> {
        let path = resolve(&self.path, name)?;
        let tmp_name = format!("{name}.tmp");
        let tmp = resolve(&self.path, &tmp_name)?;
        let dir = File::open(&self.path).map_err(|e| StorageError::io(&self.path, e))?;
        dir.lock().map_err(|e| StorageError::io(&self.path, e))?;
        let holds = match expected {
            None => regular_len(&path)?.is_none(),
            Some(want) => self.read_file(name, want.len() as u64)?.is_some_and(|now| now == want),
        };
        if !holds {
            return Err(StorageError::ConcurrentCommit { path });
        }
        let mut f =
            LocalFile { file: open_existing(&tmp, Access::Write { create: true })?, path: tmp.clone() };
        f.set_len(0)?;
        f.write_all_at(bytes, 0)?;
        f.sync()?;
        drop(f);
        std::fs::rename(&tmp, &path).map_err(|e| StorageError::io(&path, e))?;
        dir.sync_all().map_err(|e| StorageError::io(&self.path, e))
    }
}
