//! [`FileSet`]: the shard files of one storage with a bounded cache of open descriptors and
//! read-only maps, held to the process's descriptor budget.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::fs::File;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use super::pages::{populate, resident_fraction, Residency};
use super::request::ShardFile;
use crate::{Result, StorageError};

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
    /// Per file, the [`super::HybridBackend`]'s routing state (shared with a background
    /// check of the file while one runs).
    residency: Box<[Arc<Residency>]>,
    /// Per file, its map once made, kept for the life of the set, when the set has at most
    /// [`MAX_KEPT_MAPS`] files (empty otherwise): reads through a kept map take no lock and no
    /// reference count. A map does not need its descriptor: the descriptor it was made from is
    /// cached and closed under `max_open` like any other, the map stays.
    kept: Box<[OnceLock<Arc<memmap2::Mmap>>]>,
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
        let residency = files.iter().map(|_| Arc::default()).collect();
        let kept = if files.len() <= MAX_KEPT_MAPS {
            files.iter().map(|_| OnceLock::new()).collect()
        } else {
            Box::default()
        };
        FileSet { files, max_open, strict: false, cache: Mutex::new(Lru::default()), residency, kept }
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
    /// The caller guarantees what [`super::MmapBackend::new`] states: no process truncates or
    /// rewrites the file while any map of it is alive.
    pub(crate) unsafe fn map(&self, i: usize) -> Result<Option<Arc<memmap2::Mmap>>> {
        // SAFETY: this function's contract is `map_with`'s.
        unsafe { self.map_with(i, true) }
    }

    /// As [`FileSet::map`], without looking at the page cache when the map is made
    /// (`scan == false`): no `mincore(2)` pass, no population, no advice. The
    /// [`super::HybridBackend`] makes its maps this way on a batch's path and checks and
    /// populates them off it.
    ///
    /// # Safety
    /// As [`FileSet::map`].
    pub(crate) unsafe fn map_unscanned(&self, i: usize) -> Result<Option<Arc<memmap2::Mmap>>> {
        // SAFETY: this function's contract is `map_with`'s.
        unsafe { self.map_with(i, false) }
    }

    /// # Safety
    /// As [`FileSet::map`].
    unsafe fn map_with(&self, i: usize, scan: bool) -> Result<Option<Arc<memmap2::Mmap>>> {
        if let Some(map) = self.kept_map(i) {
            return Ok(Some(Arc::clone(map)));
        }
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
        if scan && !(resident_fraction(&map).is_some_and(|f| f >= 0.99) && populate(&map)) {
            let _ = map.advise(memmap2::Advice::Random);
        }
        let map = Arc::new(map);
        if let Some(kept) = self.kept.get(i) {
            // Kept for the life of the set; a map another thread kept first wins.
            return Ok(Some(Arc::clone(kept.get_or_init(|| map))));
        }
        if let Some(slot) = self.lock().open.get_mut(&(i, false)) {
            slot.map.get_or_insert_with(|| Arc::clone(&map));
        }
        Ok(Some(map))
    }
}

/// The most files a [`FileSet`] keeps a map of for its whole life (a quarter of Linux's
/// default `vm.max_map_count`, 65,530, so several sets and the allocator's own maps fit
/// beside them). A set of more files caches its maps with its descriptors, under
/// `max_open`. Maps hold no descriptor: a storage of 1,024 shards read with the default
/// 128 descriptors keeps every map (before, each window of such a storage made and dropped
/// a map: 20 k windows/s against 3,500 k for the raw limit, issue 31).
pub(crate) const MAX_KEPT_MAPS: usize = 16_384;

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

impl FileSet {
    /// File `i`'s map when the set keeps maps (every file's fits the cap) and it was made:
    /// borrowed for as long as the set lives, with no lock and no reference count.
    pub(crate) fn kept_map(&self, i: usize) -> Option<&Arc<memmap2::Mmap>> {
        self.kept.get(i)?.get()
    }

    /// The routing state of file `i`.
    ///
    /// # Errors
    /// [`StorageError::FileOutOfRange`] when `i >= self.len()`.
    pub(crate) fn residency(&self, i: usize) -> Result<&Arc<Residency>> {
        self.residency.get(i).ok_or(StorageError::FileOutOfRange { index: i, files: self.files.len() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 31 regression: a set of more files than its descriptor cap (1,024 shards read with
    /// the default 128 descriptors) kept no map, so every window of a random batch made and
    /// dropped one (20 k windows/s against 3,500 k for the raw limit). Maps hold no
    /// descriptor: now every map is kept while the descriptors stay within the cap.
    #[test]
    fn issue31_maps_are_kept_for_more_files_than_descriptors() {
        let dir = tempfile::tempdir().unwrap();
        let files: Vec<ShardFile> = (0..8)
            .map(|i| {
                let path = dir.path().join(format!("f{i}"));
                std::fs::write(&path, [i as u8; 64]).unwrap();
                ShardFile { path, shard: i, committed: 64 }
            })
            .collect();
        let set = FileSet::new(files, 2);
        assert_eq!(set.max_open(), 2);
        for round in 0..2 {
            for i in 0..8 {
                // SAFETY: the test's files are neither truncated nor rewritten while mapped.
                let map = unsafe { set.map(i) }.unwrap().unwrap();
                assert_eq!(&map[..], &[i as u8; 64][..], "file {i}, round {round}");
                let kept = set.kept_map(i).expect("the map is kept");
                assert!(Arc::ptr_eq(kept, &map), "file {i}: the same map every time");
                assert!(set.lock().open.len() <= 2, "at most 2 descriptors cached");
            }
        }
        // Past the bound, maps are cached with the descriptors again (none kept).
        let many: Vec<ShardFile> = (0..MAX_KEPT_MAPS as u64 + 1)
            .map(|i| ShardFile { path: dir.path().join("f0"), shard: i, committed: 64 })
            .collect();
        let set = FileSet::new(many, 2);
        // SAFETY: as above.
        assert!(unsafe { set.map(0) }.unwrap().is_some());
        assert!(set.kept_map(0).is_none());
    }
}
