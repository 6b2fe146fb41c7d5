//! The hybrid backend: per shard file, reads of files in the page cache copy out of maps
//! (the [`MmapBackend`] path) and reads of the others go through io_uring or pread (the
//! [`AutoBackend`] path), decided from the file's page-cache residency (`mincore(2)`),
//! checked at first use and then at most once per recheck interval, off the batches' path
//! (the residency checker thread) unless asked to check inline.

use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use super::auto::AutoBackend;
use super::backend::{buffer_length, ReadBackend};
use super::checker;
use super::files::FileSet;
use super::mmap::MmapBackend;
use super::pages::{allowed_missing, populate_in_steps, resident_at_least, Residency, COLD, UNKNOWN, WARM};
use super::request::{ReadRequest, ShardFile};
use crate::Result;

/// The share of a file's pages that must be in the page cache for [`HybridBackend`] to read
/// it through its map: 0.99.
///
/// Why so high: on this project's benchmark machine (docs/BENCHMARKS.md, u16 windows of 2,049
/// tokens, 2 workers) maps read about 2.7 M windows/s from the page cache but 15 k/s from
/// disk (a synchronous fault per missing page), io_uring about 1.3 M/s and 50 k/s: a window
/// costs about 0.4 µs more through io_uring when cached and 47 µs more through the map when
/// not, so the map path is the faster one only while fewer than about 1 % of the windows
/// miss the cache.
pub const HYBRID_MIN_RESIDENT: f64 = 0.99;

/// How often [`HybridBackend`] re-checks a file's residency by default: 100 ms.
pub const HYBRID_RECHECK: Duration = Duration::from_millis(100);

/// Where [`HybridBackend`] sends the reads of one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HybridRoute {
    /// Copies out of the file's read-only map (the file was found in the page cache).
    Map,
    /// The io_uring or pread path (the file was found evicted, or cannot be mapped).
    Cold,
}

/// Where a [`HybridBackend`] learns how much of a shard file is in the page cache, in place of
/// its own `mincore(2)` check ([`HybridBackend::residency_probe`]): a test implementation
/// reports residency deterministically, so the routing rule is checked on any host (also one
/// whose file system keeps pages `posix_fadvise(DONTNEED)` should drop, such as tmpfs).
///
/// ```
/// use std::sync::Arc;
/// use guideloom_storage::{FileSet, HybridBackend, HybridRoute, ResidencyProbe, ShardFile};
///
/// /// Every file has 255 of its 256 pages cached.
/// #[derive(Debug)]
/// struct AlmostAll;
/// impl ResidencyProbe for AlmostAll {
///     fn resident_pages(&self, _file: &ShardFile, _len: u64) -> Option<(u64, u64)> {
///         Some((255, 256))
///     }
/// }
///
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("shard-00000.stream");
/// std::fs::write(&path, [7u8; 4096])?;
/// let files = FileSet::new(vec![ShardFile { path, shard: 0, committed: 4096 }], 4);
/// // SAFETY: nothing truncates or rewrites the file while the backend maps it.
/// // Inline checks: the first route is the probe's decision (in the background it would be
/// // the cold path until the checker thread answers).
/// let hybrid = unsafe { HybridBackend::new() }.residency_probe(Arc::new(AlmostAll)).check_in_background(false);
/// assert_eq!(hybrid.route(&files, 0)?, HybridRoute::Map); // 255/256 >= 0.99
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait ResidencyProbe: Send + Sync + std::fmt::Debug {
    /// How many pages of `file` are in the page cache and how many it has, as `(resident,
    /// total)`, for its first `len` bytes (what the backend maps: `min(committed, file
    /// length)`, never 0); `None` when unknown (the file is then read through the cold path).
    fn resident_pages(&self, file: &ShardFile, len: u64) -> Option<(u64, u64)>;
}

/// Milliseconds since the first call in this process (monotonic).
fn now_ms() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    u64::try_from(START.get_or_init(Instant::now).elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// Reads page-cache-resident shard files through read-only maps and the others through
/// io_uring or pread, choosing per file.
///
/// Warm data reads fastest through a map (a `memcpy`, no system call per window); evicted
/// data reads fastest through batched io_uring reads (a map takes one synchronous page fault
/// per missing page). This backend checks each file's residency with `mincore(2)` over its
/// map the first time a batch touches the file and then at most once per recheck interval
/// ([`HYBRID_RECHECK`] by default; one thread checks, the others keep the last decision): a
/// file with at least [`HYBRID_MIN_RESIDENT`] of its pages cached is read through its map
/// ([`HybridRoute::Map`]; on the change from cold to warm the map is populated, so reads take no
/// page faults), the others through the cold backend ([`HybridRoute::Cold`]: [`AutoBackend`],
/// io_uring when the kernel allows it, else pread, following `GUIDELOOM_IO=pread|io_uring`).
/// A check scans the residency in chunks and stops as soon as too many pages are missing, so
/// checking an evicted file is cheap.
///
/// Checks run off the batches' path by default ([`HybridBackend::check_in_background`]): a
/// batch that finds a check due hands it, with the file's map (made without looking at the
/// page cache), to the process's residency checker thread and is read by the last decision,
/// through the cold path while none was made yet. So the first batch waits neither for a
/// `mincore(2)` pass nor for the population of the data set it starts (tens to hundreds of
/// milliseconds a GiB), and the map path takes over within the time of one check: a warm
/// file's decision is published before its map is populated (population follows on the same
/// thread once the files already queued are decided; until then a batch faults in the pages
/// it touches).
///
/// The decision only picks the faster path: every request is read in full whichever path it
/// takes (a page evicted after a check is faulted back in), and both return the same bytes
/// and the same typed errors. A batch whose files take both paths is read as two sub-batches
/// through buffers of their own, then laid out in request order.
///
/// Reports its name as `"hybrid"`. The routing state lives in the [`FileSet`] (per storage
/// reader), so one backend serves any number of readers.
#[derive(Debug, Clone)]
pub struct HybridBackend {
    map: MmapBackend,
    cold: Arc<dyn ReadBackend>,
    recheck_ms: u64,
    background: bool,
    probe: Option<Arc<dyn ResidencyProbe>>,
}

impl HybridBackend {
    /// The hybrid backend over [`AutoBackend::new`] for cold files, re-checking residency
    /// every [`HYBRID_RECHECK`].
    ///
    /// # Safety
    /// The contract of [`MmapBackend::new`]: for as long as any storage reader using this
    /// backend is alive, no process may truncate or rewrite its shard files (a mapped byte cut
    /// off by truncation raises `SIGBUS` when read, which kills the process; bytes rewritten
    /// in place change data already handed out). Every file this backend reads may be mapped,
    /// warm or not: residency is checked through the map.
    pub unsafe fn new() -> Self {
        // SAFETY: the caller accepted the contract of `MmapBackend::new`, stated above.
        let map = unsafe { MmapBackend::new() };
        HybridBackend {
            map,
            cold: Arc::new(AutoBackend::new()),
            recheck_ms: millis(HYBRID_RECHECK),
            background: true,
            probe: None,
        }
    }

    /// Uses `cold` for files not in the page cache (default: [`AutoBackend::new`]).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use guideloom_storage::{HybridBackend, PreadBackend, ReadBackend};
    /// // SAFETY: no process truncates or rewrites the files this backend reads.
    /// let b = unsafe { HybridBackend::new() }
    ///     .cold(Arc::new(PreadBackend))
    ///     .recheck_interval(std::time::Duration::ZERO);
    /// assert_eq!((b.name(), b.cold_backend().name()), ("hybrid", "pread"));
    /// ```
    pub fn cold(mut self, cold: Arc<dyn ReadBackend>) -> Self {
        self.cold = cold;
        self
    }

    /// Re-checks a file's residency at most once per `interval` (default
    /// [`HYBRID_RECHECK`]; whole milliseconds, rounded down; [`Duration::ZERO`] checks on
    /// every batch, for tests).
    pub fn recheck_interval(mut self, interval: Duration) -> Self {
        self.recheck_ms = millis(interval);
        self
    }

    /// Whether residency checks run on the process's residency checker thread (`true`, the
    /// default: a batch that finds a check due is read by the last decision, through the cold
    /// path before the first) or inline on the batch's path (`false`: each batch reads by a
    /// decision made for it, as tests that assert routes need).
    ///
    /// ```
    /// // SAFETY: no process truncates or rewrites the files this backend reads.
    /// let b = unsafe { guideloom_storage::HybridBackend::new() }.check_in_background(false);
    /// assert!(!b.checks_in_background());
    /// ```
    pub fn check_in_background(mut self, background: bool) -> Self {
        self.background = background;
        self
    }

    /// Whether checks run off the batches' path (set with
    /// [`HybridBackend::check_in_background`]; default `true`).
    pub fn checks_in_background(&self) -> bool {
        self.background
    }

    /// Takes each file's residency from `probe` instead of `mincore(2)` (default: `mincore`
    /// over the file's map). The rule stays the backend's: a file is read through its map when
    /// at most `floor(total * (1 - HYBRID_MIN_RESIDENT))` of its `total` pages are missing
    /// (at least [`HYBRID_MIN_RESIDENT`] resident). For tests of the routing rule on any host.
    pub fn residency_probe(mut self, probe: Arc<dyn ResidencyProbe>) -> Self {
        self.probe = Some(probe);
        self
    }

    /// The backend cold files are read through (set with [`HybridBackend::cold`]).
    pub fn cold_backend(&self) -> &Arc<dyn ReadBackend> {
        &self.cold
    }

    /// Where reads of file `file` of `files` go now: the last decision for that file, or a
    /// fresh one (a `mincore(2)` check of its map) when none was made yet or the recheck
    /// interval has passed since the last. With checks in the background (the default) a due
    /// check is started on the checker thread and this call answers the last decision
    /// ([`HybridRoute::Cold`] before the first check ends). A file that cannot be opened or
    /// mapped goes [`HybridRoute::Cold`] (whose read then reports the error); an empty file
    /// goes [`HybridRoute::Map`] (nothing to read).
    ///
    /// # Errors
    /// [`StorageError::FileOutOfRange`](crate::StorageError::FileOutOfRange) when `file >=
    /// files.len()`.
    pub fn route(&self, files: &FileSet, file: usize) -> Result<HybridRoute> {
        self.route_at(files, file, now_ms())
    }

    fn route_at(&self, files: &FileSet, file: usize, now: u64) -> Result<HybridRoute> {
        let res = files.residency(file)?;
        let next = res.next_check_ms.load(Ordering::Relaxed);
        let state = res.state.load(Ordering::Relaxed);
        let decided = |state| if state == WARM { HybridRoute::Map } else { HybridRoute::Cold };
        // One thread claims a due check; the others keep the last decision (cold before the
        // first one is known), as do all while a background check runs.
        if (state != UNKNOWN && now < next)
            || res.checking.load(Ordering::Acquire)
            || res
                .next_check_ms
                .compare_exchange(
                    next,
                    now.saturating_add(self.recheck_ms),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_err()
        {
            return Ok(decided(state));
        }
        if self.background {
            return Ok(decided(self.check_in_background_now(files, file, res, state)));
        }
        let warm = self.check(files, file, state == COLD);
        let state = if warm { WARM } else { COLD };
        res.state.store(state, Ordering::Relaxed);
        Ok(decided(state))
    }

    /// Whether file `file` is warm enough for the map path; on the change from cold to warm,
    /// maps its pages up front (`was_cold`; at the first check the map was just made, and
    /// [`FileSet::map`] populates the map of a resident file itself).
    fn check(&self, files: &FileSet, file: usize, was_cold: bool) -> bool {
        // SAFETY: `self` exists only through `HybridBackend::new`, whose caller accepted the
        // contract `FileSet::map` needs (no truncation or rewriting of mapped files).
        let map = match unsafe { files.map(file) } {
            Ok(Some(map)) => map,
            Ok(None) => return true,
            Err(_) => return false,
        };
        let warm = is_warm(self.probe.as_deref(), files.get(file).ok(), &map);
        if !warm {
            return false;
        }
        if was_cold {
            // A cold file's map was made with MADV_RANDOM and is not populated: without this,
            // each 4 KiB page would take a minor fault on first touch. With normal advice the
            // few missing pages are read with readahead instead of one by one. Advisory.
            let _ = map.advise(memmap2::Advice::Normal);
            populate_in_steps(&map);
        }
        true
    }
}

impl HybridBackend {
    /// Hands a claimed check of file `file` to the checker thread; returns the state to route
    /// by meanwhile (`state`, or the outcome when no check is needed: an empty file is warm, a
    /// file that cannot be mapped is cold).
    fn check_in_background_now(&self, files: &FileSet, file: usize, res: &Arc<Residency>, state: u8) -> u8 {
        // SAFETY: `self` exists only through `HybridBackend::new`, whose caller accepted the
        // contract `FileSet::map_unscanned` needs (no truncation or rewriting of mapped files).
        let map = match unsafe { files.map_unscanned(file) } {
            Ok(Some(map)) => map,
            Ok(None) => {
                res.state.store(WARM, Ordering::Relaxed);
                return WARM;
            }
            Err(_) => {
                res.state.store(COLD, Ordering::Relaxed);
                return COLD;
            }
        };
        res.checking.store(true, Ordering::Release);
        let res = Arc::clone(res);
        // The shard's description only for a probe (mincore needs none).
        let (probe, shard) =
            (self.probe.clone(), self.probe.as_ref().and_then(|_| files.get(file).ok().cloned()));
        checker::submit(Box::new(move || {
            let warm = is_warm(probe.as_deref(), shard.as_ref(), &map);
            if warm && state != WARM {
                // Normal advice before the readers take the map: a page not mapped yet is then
                // faulted in with its neighbours. Advisory.
                let _ = map.advise(memmap2::Advice::Normal);
            } else if !warm && state != COLD {
                // Random access on evicted data: no readahead around a stray fault.
                let _ = map.advise(memmap2::Advice::Random);
            }
            // The decision is published as soon as it is made: the batches read a warm file
            // through its map at once (faulting in what is not mapped yet) instead of through
            // the cold path until its population ends.
            res.state.store(if warm { WARM } else { COLD }, Ordering::Relaxed);
            res.checking.store(false, Ordering::Release);
            if warm && state != WARM {
                // First warm decision for this map (made without population) or a change from
                // cold: its pages mapped up front, after the checks already queued (so every
                // file of a storage is decided before any is populated).
                checker::submit(Box::new(move || {
                    populate_in_steps(&map);
                }));
            }
        }));
        state
    }
}

/// Whether `map` (of `file`) is warm enough for the map path: at least
/// [`HYBRID_MIN_RESIDENT`] of its pages resident, by `probe` when one is set, else by
/// `mincore(2)`.
fn is_warm(probe: Option<&dyn ResidencyProbe>, file: Option<&ShardFile>, map: &memmap2::Mmap) -> bool {
    match probe {
        None => resident_at_least(map, HYBRID_MIN_RESIDENT) == Some(true),
        Some(probe) => {
            file.and_then(|f| probe.resident_pages(f, map.len() as u64)).is_some_and(|(resident, total)| {
                resident <= total && total - resident <= allowed_missing(total, HYBRID_MIN_RESIDENT)
            })
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl ReadBackend for HybridBackend {
    fn name(&self) -> &'static str {
        "hybrid"
    }

    fn read_into(&self, files: &FileSet, requests: &[ReadRequest], out: &mut [u8]) -> Result<()> {
        let now = now_ms();
        // The route of each file this batch reads, decided once per batch.
        let mut routes: Vec<(usize, HybridRoute)> = Vec::new();
        let (mut warm, mut cold) = (false, false);
        for r in requests.iter().filter(|r| r.len > 0) {
            if !routes.iter().any(|(f, _)| *f == r.file) {
                let route = self.route_at(files, r.file, now)?;
                routes.push((r.file, route));
                warm |= route == HybridRoute::Map;
                cold |= route == HybridRoute::Cold;
            }
        }
        match (warm, cold) {
            (_, false) => self.map.read_into(files, requests, out),
            (false, true) => self.cold.read_into(files, requests, out),
            (true, true) => self.read_mixed(files, requests, &routes, out),
        }
    }
}

impl HybridBackend {
    /// A batch whose files take both paths: each path reads its requests into a buffer of its
    /// own, then the bytes are laid out in request order.
    fn read_mixed(
        &self,
        files: &FileSet,
        requests: &[ReadRequest],
        routes: &[(usize, HybridRoute)],
        out: &mut [u8],
    ) -> Result<()> {
        let total = requests.iter().try_fold(0u64, |a, r| a.checked_add(r.len));
        if total != Some(out.len() as u64) {
            return Err(buffer_length(requests, out.len()));
        }
        let is_map =
            |r: &ReadRequest| routes.iter().any(|&(f, route)| f == r.file && route == HybridRoute::Map);
        let (mapped, cold): (Vec<ReadRequest>, Vec<ReadRequest>) = requests.iter().partition(|r| is_map(r));
        let bytes = |v: &[ReadRequest]| v.iter().map(|r| r.len as usize).sum::<usize>();
        let (mut map_buf, mut cold_buf) = (vec![0u8; bytes(&mapped)], vec![0u8; bytes(&cold)]);
        self.map.read_into(files, &mapped, &mut map_buf)?;
        self.cold.read_into(files, &cold, &mut cold_buf)?;
        let (mut pos, mut at_map, mut at_cold) = (0usize, 0usize, 0usize);
        for r in requests {
            // Each length is at most `out.len()` (their sum is), so it fits a usize.
            let len = r.len as usize;
            let (buf, at) = if is_map(r) { (&map_buf, &mut at_map) } else { (&cold_buf, &mut at_cold) };
            out[pos..pos + len].copy_from_slice(&buf[*at..*at + len]);
            *at += len;
            pos += len;
        }
        Ok(())
    }
}
