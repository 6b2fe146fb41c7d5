//! [`MemDir`]: a storage directory held in memory, both halves of the seam; and
//! [`BufferedFile`], the [`WriteFile`] of directories that publish a file whole on sync (this
//! one and the remote one).

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::{DirEntry, DirLock, EntryKind, StorageDir, WriteDir, WriteFile};
use crate::fsutil::resolve;
use crate::{Result, StorageError};

type Files = BTreeMap<String, Arc<[u8]>>;

/// A storage directory held in memory: files by name, each an immutable byte buffer. For
/// tests (no temp directory needed) and for storages assembled in memory.
///
/// As a [`WriteDir`] a file opened for writing is kept apart and published whole on
/// [`WriteFile::sync`] (what was not synced is not seen), a rename moves a file, and
/// [`WriteDir::replace_if`] compares and replaces under the directory's lock. Names are
/// checked as every directory of this crate checks them ([`crate::check_file_name`]).
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
/// let r = StreamReader::open_in(mem.clone(), TokenFormat::<u16>::new(), ReadOptions::default())?;
/// assert_eq!(r.read(Window::new(1, 2))?, vec![2, 3]);
/// // A writer appends in memory too.
/// let mut w = StreamWriter::open_in(mem.clone(), TokenFormat::<u16>::new())?;
/// w.append(0, &[4])?;
/// w.commit()?;
/// drop(w);
/// let r = StreamReader::open_in(mem, TokenFormat::<u16>::new(), ReadOptions::default())?;
/// assert_eq!(r.read(Window::new(0, 4))?, vec![1, 2, 3, 4]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Default)]
pub struct MemDir {
    path: PathBuf,
    files: Arc<RwLock<Files>>,
    locked: Arc<AtomicBool>,
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
        MemDir { path: PathBuf::from("memory"), ..MemDir::default() }
    }

    /// A copy of every regular file directly inside the local directory `dir` (not
    /// recursive), labelled with `dir`'s path.
    ///
    /// # Errors
    /// [`StorageError::Io`] naming the directory or file that cannot be read.
    pub fn copy_of(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref();
        let mem = MemDir { path: dir.to_path_buf(), ..MemDir::default() };
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
        self.lock_write().insert(name.into(), bytes.into());
    }

    /// Removes file `name`; returns its bytes, `None` when there was none.
    pub fn remove(&self, name: &str) -> Option<Arc<[u8]>> {
        self.lock_write().remove(name)
    }

    /// The bytes of file `name`.
    pub fn get(&self, name: &str) -> Option<Arc<[u8]>> {
        self.lock_read().get(name).cloned()
    }

    /// The file names, sorted.
    pub fn names(&self) -> Vec<String> {
        self.lock_read().keys().cloned().collect()
    }

    fn lock_read(&self) -> RwLockReadGuard<'_, Files> {
        self.files.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn lock_write(&self) -> RwLockWriteGuard<'_, Files> {
        self.files.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// `path/name` when `name` is a plain name.
    fn resolve(&self, name: &str) -> Result<PathBuf> {
        resolve(&self.path, name)
    }

    fn not_found(&self, name: &str) -> StorageError {
        StorageError::io(self.path.join(name), std::io::Error::from(std::io::ErrorKind::NotFound))
    }
}

impl StorageDir for MemDir {
    fn path(&self) -> &Path {
        &self.path
    }

    fn file_len(&self, name: &str) -> Result<Option<u64>> {
        self.resolve(name)?;
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
        let path = self.resolve(name)?;
        let Some(bytes) = self.get(name) else { return Err(self.not_found(name)) };
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

/// The writer lock of a [`MemDir`]: the flag, cleared when dropped.
struct MemLock(Arc<AtomicBool>);

impl Drop for MemLock {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// Files are kept apart while written and published whole on [`WriteFile::sync`]; the
/// directory needs no creating and no sync.
impl WriteDir for MemDir {
    fn create_dir(&self) -> Result<()> {
        Ok(())
    }

    fn lock(&self) -> Result<DirLock> {
        if self.locked.swap(true, Ordering::AcqRel) {
            return Err(StorageError::Locked { dir: self.path.clone() });
        }
        Ok(DirLock::exclusive(MemLock(Arc::clone(&self.locked))))
    }

    /// A missing file is created empty at once (when `create`); the content written is seen
    /// from the next [`WriteFile::sync`] on.
    fn open_write(&self, name: &str, create: bool) -> Result<Box<dyn WriteFile>> {
        let path = self.resolve(name)?;
        let bytes = {
            let mut files = self.lock_write();
            match files.get(name) {
                Some(b) => b.to_vec(),
                None if create => {
                    files.insert(name.to_string(), Arc::from(Vec::new()));
                    Vec::new()
                }
                None => return Err(self.not_found(name)),
            }
        };
        let files = Arc::clone(&self.files);
        let name = name.to_string();
        let publish = move |bytes: &[u8]| {
            files.write().unwrap_or_else(PoisonError::into_inner).insert(name.clone(), Arc::from(bytes));
            Ok(())
        };
        Ok(Box::new(BufferedFile::new(path, bytes, publish)))
    }

    fn rename(&self, from: &str, to: &str) -> Result<()> {
        self.resolve(from)?;
        let to_path = self.resolve(to)?;
        let mut files = self.lock_write();
        let Some(bytes) = files.remove(from) else {
            return Err(StorageError::io(to_path, std::io::Error::from(std::io::ErrorKind::NotFound)));
        };
        files.insert(to.to_string(), bytes);
        Ok(())
    }

    fn sync_dir(&self) -> Result<()> {
        Ok(())
    }

    /// Compares and replaces holding the directory's write lock.
    fn replace_if(&self, name: &str, expected: Option<&[u8]>, bytes: &[u8]) -> Result<()> {
        let path = self.resolve(name)?;
        let mut files = self.lock_write();
        if files.get(name).map(|b| &b[..]) != expected {
            return Err(StorageError::ConcurrentCommit { path });
        }
        files.insert(name.to_string(), Arc::from(bytes));
        Ok(())
    }
}

/// What a [`BufferedFile`] does with its whole content on sync.
type Publish = Box<dyn FnMut(&[u8]) -> Result<()> + Send + Sync>;

/// A file opened for writing whose content is kept in memory and handed whole to `publish` on
/// [`WriteFile::sync`] (nothing when unchanged since the last sync): the [`WriteFile`] of
/// [`MemDir`] and of the remote directory (which puts it as one object).
pub(crate) struct BufferedFile {
    path: PathBuf,
    bytes: Vec<u8>,
    dirty: bool,
    publish: Publish,
}

impl fmt::Debug for BufferedFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BufferedFile")
            .field("path", &self.path)
            .field("len", &self.bytes.len())
            .field("dirty", &self.dirty)
            .finish_non_exhaustive()
    }
}

impl BufferedFile {
    /// The file `path` (named in errors) holding `bytes`, published by `publish`.
    pub(crate) fn new(
        path: PathBuf,
        bytes: Vec<u8>,
        publish: impl FnMut(&[u8]) -> Result<()> + Send + Sync + 'static,
    ) -> Self {
        BufferedFile { path, bytes, dirty: false, publish: Box::new(publish) }
    }

    /// `len` as an in-memory length.
    fn usize_len(&self, len: u64) -> Result<usize> {
        usize::try_from(len).map_err(|_| StorageError::BatchTooLarge { bytes: len })
    }
}

impl WriteFile for BufferedFile {
    fn len(&self) -> Result<u64> {
        Ok(self.bytes.len() as u64)
    }

    fn set_len(&mut self, len: u64) -> Result<()> {
        let len = self.usize_len(len)?;
        self.bytes.resize(len, 0);
        self.dirty = true;
        Ok(())
    }

    fn write_all_at(&mut self, bytes: &[u8], offset: u64) -> Result<()> {
        let end = self.usize_len(offset.saturating_add(bytes.len() as u64))?;
        if self.bytes.len() < end {
            self.bytes.resize(end, 0);
        }
        self.bytes[end - bytes.len()..end].copy_from_slice(bytes);
        self.dirty = true;
        Ok(())
    }

    fn sync(&mut self) -> Result<()> {
        if self.dirty {
            (self.publish)(&self.bytes)?;
            self.dirty = false;
        }
        Ok(())
    }
}
