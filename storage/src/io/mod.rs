//! The reader abstraction every storage reads through: a batch of byte-range requests over a
//! set of shard files, served by a pluggable [`ReadBackend`].
//!
//! Storage readers turn a batch of windows or documents into [`ReadRequest`]s and call
//! [`ReadBackend::read_into`] once for the whole batch; the backend lays the requested bytes
//! back to back in request order into one caller buffer. Shard files are opened lazily and
//! kept in a bounded least-recently-used cache ([`FileSet`]), so a storage with thousands of
//! shards never holds more than [`ReadOptions::max_open_files`] descriptors.
//!
//! # Backends
//!
//! | backend | how | when |
//! | --- | --- | --- |
//! | [`UringBackend`] (`io_uring`) | one submission for the whole batch on a per-thread ring | Linux with the default `io-uring` feature |
//! | [`PreadBackend`] (`pread`) | one `pread(2)` per request | everywhere; the fallback |
//! | [`MmapBackend`] (`mmap`) | copies out of cached read-only maps; [`MmapBackend::map_range`] gives zero-copy slices | opt-in through an `unsafe` constructor |
//! | [`DirectBackend`] (`pread+direct`, `io_uring+direct`) | `O_DIRECT` reads through an aligned bounce buffer | cold-data benchmarks |
//! | [`AutoBackend`] (the default) | io_uring when a one-time probe succeeds, else pread | [`ReadOptions::default`] |
//! | [`HybridBackend`] (`hybrid`) | per file: the mmap path while the file is in the page cache, else [`AutoBackend`]'s | opt-in through an `unsafe` constructor (the `guideloom` binary's `auto`) |
//!
//! The environment variable [`IO_ENV_VAR`] (`GUIDELOOM_IO=pread|io_uring|auto`) forces what
//! [`AutoBackend`] picks; see [`auto_backend_choice`]. The library never maps files on its
//! own: `GUIDELOOM_IO=mmap` is not honoured here (a program that accepts the mmap contract
//! builds [`MmapBackend`] itself, as the `guideloom` binary does).

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::fs::File;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use crate::{Result, StorageError};

mod auto;
mod direct;
mod hybrid;
mod mmap;
mod pread;
#[cfg(all(target_os = "linux", feature = "io-uring"))]
mod uring;
#[cfg(not(all(target_os = "linux", feature = "io-uring")))]
#[path = "uring_stub.rs"]
mod uring;

pub use auto::{auto_backend_choice, choose_backend, AutoBackend, BackendChoice, BackendKind, IO_ENV_VAR};
pub use direct::{DirectBackend, DIRECT_ALIGN};
pub use hybrid::{HybridBackend, HybridRoute, HYBRID_MIN_RESIDENT, HYBRID_RECHECK};
pub use mmap::{MappedBytes, MmapBackend};
pub use pread::PreadBackend;
pub use uring::{io_uring_probe, UringBackend};

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

/// The files of one storage with a bounded cache of open descriptors (and, for the mmap
/// backend, of read-only maps).
///
/// Files are opened on first use. When more than `max_open` are cached, the least recently
/// used one that no read is using is closed. A descriptor in use by a read in progress (a
/// pread, or an io_uring operation in flight) is never closed under it: it stays cached and
/// counts toward the bound, so the bound is exceeded only while the reads in progress
/// together use more than `max_open` files. The io_uring backend keeps at most
/// `max(1, max_open / 2)` files in use per reading thread, so one or two reading threads never
/// exceed the bound (apart from the one file being opened), and stops pinning files for a
/// round while the files in use by all threads fill the bound (each thread still pins one), so
/// any number of reading threads exceed it by at most one file each.
pub struct FileSet {
    files: Vec<ShardFile>,
    max_open: usize,
    /// Open only regular files, never through a link (the storage rule,
    /// [`FileSet::for_storage`]); otherwise paths are opened as the caller gave them.
    strict: bool,
    cache: Mutex<Lru>,
    /// Per file, the [`HybridBackend`]'s routing state.
    residency: Box<[hybrid::Residency]>,
}

/// Cache key: file index and whether the descriptor was opened with `O_DIRECT`.
type Key = (usize, bool);

struct Slot {
    file: Arc<File>,
    map: Option<Arc<memmap2::Mmap>>,
    tick: u64,
}

#[derive(Default)]
struct Lru {
    tick: u64,
    open: HashMap<Key, Slot>,
    by_tick: BTreeMap<u64, Key>,
}

impl Lru {
    fn touch(&mut self, key: Key) -> Option<&mut Slot> {
        self.tick += 1;
        let tick = self.tick;
        let slot = self.open.get_mut(&key)?;
        let old = std::mem::replace(&mut slot.tick, tick);
        self.by_tick.remove(&old);
        self.by_tick.insert(tick, key);
        self.open.get_mut(&key)
    }

    /// Removes unused entries, oldest first, until at most `max` remain; returns them so the
    /// caller closes them after releasing the lock.
    fn evict(&mut self, max: usize) -> Vec<Slot> {
        let mut gone = Vec::new();
        while self.open.len() > max {
            // An entry is unused when the cache holds the only reference to its descriptor
            // (handles are only cloned under the lock, so this cannot change under us).
            let victim = self
                .by_tick
                .iter()
                .find(|(_, key)| self.open.get(key).is_some_and(|s| Arc::strong_count(&s.file) == 1))
                .map(|(&t, &k)| (t, k));
            let Some((tick, key)) = victim else { break };
            self.by_tick.remove(&tick);
            if let Some(slot) = self.open.remove(&key) {
                gone.push(slot);
            }
        }
        gone
    }
}

/// Descriptors cached open by every [`FileSet`] of the process together.
static LIVE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Descriptors cached open by every [`FileSet`] of this process, now (all threads, readers
/// and backends together; descriptors a read holds outside the cache are not counted).
pub fn open_descriptors() -> usize {
    LIVE.load(std::sync::atomic::Ordering::Relaxed)
}

/// The descriptors all [`FileSet`]s of this process may cache together: computed once, on
/// first use, from the soft `RLIMIT_NOFILE` less the descriptors open then, less a margin (a
/// quarter of what is free, at least 16); `usize::MAX` when unlimited. A set whose insertion
/// takes the process past it closes its own unused descriptors first, so readers opened one
/// after another (each within its own cap) cannot together run the process out.
pub fn shared_descriptor_budget() -> usize {
    static BUDGET: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *BUDGET.get_or_init(|| match free_descriptors() {
        None => usize::MAX,
        Some(free) => free.saturating_sub((free / 4).max(16)).max(1),
    })
}

/// The soft `RLIMIT_NOFILE` less the descriptors open now; `None` when unlimited or unknown.
fn free_descriptors() -> Option<usize> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: `getrlimit` writes a `rlimit` through a valid pointer to one.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0
        || limit.rlim_cur == libc::RLIM_INFINITY
    {
        return None;
    }
    let soft = usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX);
    let in_use = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count());
    Some(soft.saturating_sub(in_use))
}

impl Drop for FileSet {
    fn drop(&mut self) {
        let n = self.lock().open.len();
        LIVE.fetch_sub(n, std::sync::atomic::Ordering::Relaxed);
    }
}

impl fmt::Debug for FileSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileSet").field("files", &self.files.len()).field("max_open", &self.max_open).finish()
    }
}

impl FileSet {
    /// A file set holding at most `max_open` descriptors, over paths the caller chose: each is
    /// opened as given (links followed, any file type), as `open(2)` would.
    ///
    /// The cap is also held to the process's [`descriptor_budget`] (what `RLIMIT_NOFILE` leaves
    /// free now, less a margin), and is at least 1. An open that still fails with `EMFILE` or
    /// `ENFILE` (other sets, threads or rings took descriptors meanwhile) closes this set's
    /// unused descriptors and tries again before it reports the error.
    pub fn new(files: Vec<ShardFile>, max_open: usize) -> Self {
        let max_open = max_open.min(descriptor_budget()).max(1);
        let residency = files.iter().map(|_| hybrid::Residency::default()).collect();
        FileSet { files, max_open, strict: false, cache: Mutex::new(Lru::default()), residency }
    }

    /// As [`FileSet::new`], for the files of a storage, which readers open this way: a file
    /// is opened only when it is a regular file, never through a symbolic link and never
    /// blocking on a FIFO put in its place (a [`StorageError::UnsafeFile`] otherwise).
    pub fn for_storage(files: Vec<ShardFile>, max_open: usize) -> Self {
        let mut set = FileSet::new(files, max_open);
        set.strict = true;
        set
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

    /// The descriptor cap this set was built with (at least 1).
    pub fn max_open(&self) -> usize {
        self.max_open
    }

    /// Number of descriptors currently cached open.
    pub fn open_count(&self) -> usize {
        self.lock().open.len()
    }

    /// Whether the descriptors in use by reads in progress (held outside the cache) already
    /// fill the cap, so opening another one would exceed it. Cheap when the cache is below
    /// the cap; otherwise one pass over the cached entries. (Only the io_uring backend asks.)
    #[cfg_attr(not(all(target_os = "linux", feature = "io-uring")), allow(dead_code))]
    pub(crate) fn saturated(&self) -> bool {
        let lru = self.lock();
        lru.open.len() >= self.max_open
            && lru.open.values().filter(|s| Arc::strong_count(&s.file) > 1).count() >= self.max_open
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Lru> {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The description of file `i`.
    ///
    /// # Errors
    /// [`StorageError::FileOutOfRange`] when `i >= self.len()`.
    pub fn get(&self, i: usize) -> Result<&ShardFile> {
        self.files.get(i).ok_or(StorageError::FileOutOfRange { index: i, files: self.files.len() })
    }

    /// The open handle of file `i`, opening it (and closing the least recently used unused
    /// one) when needed. While the caller holds the handle, the cache never closes it.
    ///
    /// # Errors
    /// [`StorageError::Io`] naming the file when it cannot be opened;
    /// [`StorageError::FileOutOfRange`] when `i >= self.len()`.
    pub fn handle(&self, i: usize) -> Result<Arc<File>> {
        self.handle_with(i, false)
    }

    /// As [`FileSet::handle`], with a descriptor opened with `O_DIRECT` (cached separately;
    /// both kinds count toward the cap).
    pub(crate) fn handle_direct(&self, i: usize) -> Result<Arc<File>> {
        self.handle_with(i, true)
    }

    fn handle_with(&self, i: usize, direct: bool) -> Result<Arc<File>> {
        let key = (i, direct);
        if let Some(slot) = self.lock().touch(key) {
            return Ok(Arc::clone(&slot.file));
        }
        let path = &self.get(i)?.path;
        let open = || {
            if self.strict {
                crate::fsutil::open_existing(path, crate::fsutil::Access::Read { direct })
            } else {
                open_file(path, direct).map_err(|e| StorageError::io(path, e))
            }
        };
        let file = Arc::new(match open() {
            Err(StorageError::Io { source, .. })
                if matches!(source.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) =>
            {
                // Out of descriptors: close every unused one of this set, then retry once.
                let gone = self.lock().evict(0);
                LIVE.fetch_sub(gone.len(), std::sync::atomic::Ordering::Relaxed);
                drop(gone);
                open()?
            }
            r => r?,
        });
        let gone = {
            let mut lru = self.lock();
            lru.tick += 1;
            let tick = lru.tick;
            let slot = Slot { file: Arc::clone(&file), map: None, tick };
            match lru.open.insert(key, slot) {
                Some(old) => {
                    lru.by_tick.remove(&old.tick);
                }
                None => {
                    LIVE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
            lru.by_tick.insert(tick, key);
            // This set's own cap, and the process's: past the shared budget, close this set's
            // unused descriptors until the process is back within it (or none is unused).
            let over =
                LIVE.load(std::sync::atomic::Ordering::Relaxed).saturating_sub(shared_descriptor_budget());
            let keep = self.max_open.min(lru.open.len().saturating_sub(over));
            let gone = lru.evict(keep);
            LIVE.fetch_sub(gone.len(), std::sync::atomic::Ordering::Relaxed);
            gone
        };
        drop(gone);
        Ok(file)
    }

    /// A read-only map of the first `min(committed, file length)` bytes of file `i`, cached
    /// with its descriptor; `None` when that length is 0 (no zero-length map is made).
    ///
    /// # Safety
    /// The caller guarantees what [`MmapBackend::new`] states: no process truncates or
    /// rewrites the file while any map of it is alive.
    pub(crate) unsafe fn map(&self, i: usize) -> Result<Option<Arc<memmap2::Mmap>>> {
        if let Some(map) = self.lock().touch((i, false)).and_then(|s| s.map.clone()) {
            return Ok(Some(map));
        }
        let shard = self.get(i)?;
        let file = self.handle(i)?;
        let actual = file.metadata().map_err(|e| StorageError::io(&shard.path, e))?.len();
        let len = actual.min(shard.committed);
        if len == 0 {
            return Ok(None);
        }
        let len = usize::try_from(len).map_err(|_| StorageError::Backend {
            backend: "mmap",
            reason: format!("{} is too large to map on this platform", shard.path.display()),
        })?;
        // SAFETY: the map is read-only and covers only bytes the file holds now; the caller
        // upholds this function's contract (nobody truncates or rewrites the file while the
        // map lives), which is what makes reading through the map sound.
        let map = unsafe { memmap2::MmapOptions::new().len(len).map(&*file) }
            .map_err(|e| StorageError::io(&shard.path, e))?;
        // A shard already in the page cache is mapped up front (MADV_POPULATE_READ: no I/O,
        // one pass over the page tables instead of a fault per 4 KiB page on first touch, the
        // largest cost of a warm mmap epoch). Otherwise random access is the loader's
        // pattern: without MADV_RANDOM a fault on evicted data reads `read_ahead_kb` around it
        // (8 MiB here: 200 ms per batch of 32 windows, measured). Advisory; an error changes
        // nothing but speed.
        if !(mmap::resident_fraction(&map).is_some_and(|f| f >= 0.99) && mmap::populate(&map)) {
            let _ = map.advise(memmap2::Advice::Random);
        }
        let map = Arc::new(map);
        if let Some(slot) = self.lock().open.get_mut(&(i, false)) {
            slot.map.get_or_insert_with(|| Arc::clone(&map));
        }
        Ok(Some(map))
    }
}

/// Descriptors a new [`FileSet`] may hold: the soft `RLIMIT_NOFILE` less the descriptors this
/// process has open now, less a margin for everything else (a quarter of what is free, at
/// least 16: io_uring rings, sockets, the caller's files), halved so two sets opened together
/// still fit; at least 1. `usize::MAX` when the limit is unlimited or cannot be read.
pub fn descriptor_budget() -> usize {
    let Some(free) = free_descriptors() else { return usize::MAX };
    let margin = (free / 4).max(16);
    (free.saturating_sub(margin) / 2).max(1)
}

fn open_file(path: &std::path::Path, direct: bool) -> std::io::Result<File> {
    let mut o = std::fs::OpenOptions::new();
    o.read(true);
    #[cfg(target_os = "linux")]
    if direct {
        use std::os::unix::fs::OpenOptionsExt;
        o.custom_flags(libc::O_DIRECT);
    }
    #[cfg(not(target_os = "linux"))]
    if direct {
        return Err(std::io::Error::new(std::io::ErrorKind::Unsupported, "O_DIRECT is Linux-only here"));
    }
    o.open(path)
}

/// A way of reading byte ranges from shard files (pread, io_uring, mmap ...).
///
/// Every backend returns the same bytes for the same requests.
pub trait ReadBackend: Send + Sync + fmt::Debug {
    /// The backend's name (`"pread"`, `"io_uring"`, `"mmap"`, `"pread+direct"`,
    /// `"io_uring+direct"`; [`AutoBackend`] reports the backend it chose).
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
            path: files.files.get(self.file).map(|f| f.path.clone()).unwrap_or_default(),
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

/// How a reader reads: the backend and the descriptor budget.
#[derive(Debug, Clone)]
pub struct ReadOptions {
    /// The backend serving byte-range requests. Default: [`AutoBackend`] (io_uring when the
    /// kernel allows it, else pread; [`IO_ENV_VAR`] overrides; never mmap).
    pub backend: Arc<dyn ReadBackend>,
    /// Most shard files kept open at once (default 128, at least 1).
    pub max_open_files: usize,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions { backend: Arc::new(AutoBackend::new()), max_open_files: 128 }
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
