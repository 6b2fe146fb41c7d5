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
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};

use crate::io::{read_exact_at, FileSet, ReadRequest};
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

    fn file_len(&self, name: &str) -> Result<Option<u64>> {
        let path = self.path.join(name);
        match std::fs::metadata(&path) {
            Ok(m) => Ok(Some(m.len())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(StorageError::io(&path, e)),
        }
    }

    fn read_at(&self, name: &str, offset: u64, out: &mut [u8]) -> Result<()> {
        let path = self.path.join(name);
        let file = File::open(&path).map_err(|e| StorageError::io(&path, e))?;
        read_exact_at(&file, out, offset, &path)
    }

    /// Reads through the open file, so a file whose length the file system does not report
    /// (a link to a device) is still cut at `max_len + 1` bytes.
    fn read_file(&self, name: &str, max_len: u64) -> Result<Option<Vec<u8>>> {
        let path = self.path.join(name);
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(StorageError::io(&path, e)),
        };
        let mut text = Vec::new();
        file.take(max_len.saturating_add(1))
            .read_to_end(&mut text)
            .map_err(|e| StorageError::io(&path, e))?;
        Ok(Some(text))
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

    fn open_write(&self, name: &str, create: bool) -> Result<Box<dyn WriteFile>> {
        let path = self.path.join(name);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .truncate(false)
            .open(&path)
            .map_err(|e| StorageError::io(&path, e))?;
        Ok(Box::new(LocalFile { path, file }))
    }

    fn rename(&self, from: &str, to: &str) -> Result<()> {
        let to = self.path.join(to);
        std::fs::rename(self.path.join(from), &to).map_err(|e| StorageError::io(&to, e))
    }

    fn sync_dir(&self) -> Result<()> {
        let d = File::open(&self.path).map_err(|e| StorageError::io(&self.path, e))?;
        d.sync_all().map_err(|e| StorageError::io(&self.path, e))
    }
}
