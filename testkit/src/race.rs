//! [`RaceDir`]: a write directory without a writer lock (as an object store) that lets another
//! committer commit just before its next manifest replace, so a test can race two commits
//! deterministically over any [`WriteDir`] (the in-memory one, or a remote one on the S3 test
//! server, where the conditional put decides).

use std::path::Path;
use std::sync::{Arc, Mutex};

use guideloom_storage::{
    DirEntry, DirLock, FileSet, LengthFault, ReadRequest, Result, ShardFile, StorageDir, WriteDir, WriteFile,
};

/// What [`RaceDir`] runs before its next replace, on the directory it wraps.
type RaceHook<D> = Box<dyn FnOnce(&D) + Send>;

/// `inner` seen through a directory with no writer lock ([`DirLock::none`]) whose next
/// [`WriteDir::replace_if`] first runs the hook set by [`RaceDir::before_next_replace`]
/// (another commit into `inner`), then replaces as `inner` does; every other call is
/// `inner`'s.
pub struct RaceDir<D> {
    /// The directory raced.
    pub inner: Arc<D>,
    hook: Mutex<Option<RaceHook<D>>>,
}

impl<D: WriteDir> RaceDir<D> {
    /// `inner` with no hook set.
    pub fn new(inner: Arc<D>) -> Self {
        RaceDir { inner, hook: Mutex::new(None) }
    }

    /// Runs `f` on the inner directory just before the next replace (once).
    pub fn before_next_replace(&self, f: impl FnOnce(&D) + Send + 'static) {
        *self.hook.lock().unwrap() = Some(Box::new(f));
    }
}

impl<D: std::fmt::Debug> std::fmt::Debug for RaceDir<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RaceDir").field("inner", &self.inner).finish()
    }
}

impl<D: WriteDir> StorageDir for RaceDir<D> {
    fn path(&self) -> &Path {
        self.inner.path()
    }
    fn file_len(&self, name: &str) -> Result<Option<u64>> {
        self.inner.file_len(name)
    }
    fn check_lengths(&self, files: &[ShardFile]) -> Result<Option<LengthFault>> {
        self.inner.check_lengths(files)
    }
    fn read_at(&self, name: &str, offset: u64, out: &mut [u8]) -> Result<()> {
        self.inner.read_at(name, offset, out)
    }
    fn read_file(&self, name: &str, max_len: u64) -> Result<Option<Vec<u8>>> {
        self.inner.read_file(name, max_len)
    }
    fn read_requests(&self, files: &FileSet, requests: &[ReadRequest], out: &mut [u8]) -> Result<()> {
        self.inner.read_requests(files, requests, out)
    }
    fn list(&self) -> Result<Vec<DirEntry>> {
        self.inner.list()
    }
}

impl<D: WriteDir> WriteDir for RaceDir<D> {
    fn create_dir(&self) -> Result<()> {
        self.inner.create_dir()
    }
    fn lock(&self) -> Result<DirLock> {
        Ok(DirLock::none())
    }
    fn open_write(&self, name: &str, create: bool) -> Result<Box<dyn WriteFile>> {
        self.inner.open_write(name, create)
    }
    fn rename(&self, from: &str, to: &str) -> Result<()> {
        self.inner.rename(from, to)
    }
    fn sync_dir(&self) -> Result<()> {
        self.inner.sync_dir()
    }
    fn replace_if(&self, name: &str, expected: Option<&[u8]>, bytes: &[u8]) -> Result<()> {
        let hook = self.hook.lock().unwrap().take();
        if let Some(other) = hook {
            other(&self.inner);
        }
        self.inner.replace_if(name, expected, bytes)
    }
}
