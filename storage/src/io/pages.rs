//! Page-cache residency of mapped files (`mincore(2)`), populating maps up front, and the
//! per-file routing state the [`super::HybridBackend`] keeps from it. A leaf.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8};
use std::sync::OnceLock;

/// Per-file routing state of the [`super::HybridBackend`], kept in the [`super::FileSet`] (one
/// per file, shared with the background check of that file while one runs): the last
/// decision, when the next check is due, and whether a check is running now.
#[derive(Debug, Default)]
pub(crate) struct Residency {
    /// [`UNKNOWN`], [`COLD`] or [`WARM`].
    pub(super) state: AtomicU8,
    /// Milliseconds since the process's first check (the hybrid backend's `now_ms`) at which
    /// the next check is due.
    pub(super) next_check_ms: AtomicU64,
    /// A background check of this file was handed to the checker thread and has not ended.
    pub(super) checking: AtomicBool,
}

pub(super) const UNKNOWN: u8 = 0;
pub(super) const COLD: u8 = 1;
pub(super) const WARM: u8 = 2;

/// The page size, from `sysconf(_SC_PAGESIZE)` (4096 if it does not say).
fn page_size() -> usize {
    static PAGE: OnceLock<usize> = OnceLock::new();
    *PAGE.get_or_init(|| {
        // SAFETY: `sysconf` only reads a configuration value.
        let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        usize::try_from(n).ok().filter(|&n| n > 0 && n.is_power_of_two()).unwrap_or(4096)
    })
}

/// How many of `pages` pages may be missing from the page cache for at least `min` (0 to 1)
/// of them to be resident: `floor(pages * (1 - min))` (truncation toward zero makes the test
/// strict: with `min` 0.99, 2 of 256 pages, 1 of 100, 0 of 99).
pub(crate) fn allowed_missing(pages: u64, min: f64) -> u64 {
    (pages as f64 * (1.0 - min.clamp(0.0, 1.0))) as u64
}

/// Whether at least `min` (0 to 1) of `map`'s pages are in the page cache, from `mincore(2)`
/// over chunks of 1,024 pages, stopping at the first chunk after which too many pages are known to
/// be missing; `None` when the kernel does not say. An empty map is resident.
pub(crate) fn resident_at_least(map: &memmap2::Mmap, min: f64) -> Option<bool> {
    const CHUNK_PAGES: usize = 1024;
    let page = page_size();
    let pages = map.len().div_ceil(page);
    let allowed = allowed_missing(pages as u64, min) as usize;
    // `mincore`'s vector is `unsigned char *` on Linux and `char *` on the BSDs and macOS.
    #[cfg(target_os = "linux")]
    type Flag = u8;
    #[cfg(not(target_os = "linux"))]
    type Flag = libc::c_char;
    let mut vec: Vec<Flag> = vec![0; pages.min(CHUNK_PAGES)];
    let mut missing = 0usize;
    let mut first = 0usize;
    while first < pages {
        let n = (pages - first).min(CHUNK_PAGES);
        let start = first * page;
        let len = (n * page).min(map.len() - start);
        // SAFETY: `map` is a live mapping of `map.len()` bytes at a page-aligned address
        // (mmap(2) returns one); `start` is a multiple of the page size inside it and
        // `start + len <= map.len()`, so the range is mapped and page-aligned at its start;
        // `vec` holds at least `n` bytes, one per page of the range, which is all mincore(2)
        // writes. It only reads page-table and page-cache state, not the mapped bytes.
        let rc =
            unsafe { libc::mincore(map.as_ptr().add(start) as *mut libc::c_void, len, vec.as_mut_ptr()) };
        if rc != 0 {
            return None;
        }
        missing += vec[..n].iter().filter(|&&b| b & 1 == 0).count();
        if missing > allowed {
            return Some(false);
        }
        first += n;
    }
    Some(true)
}

/// The fraction (0 to 1) of `map`'s pages that are in the page cache, from `mincore(2)`;
/// `None` when the kernel does not say.
pub(crate) fn resident_fraction(map: &memmap2::Mmap) -> Option<f64> {
    const PAGE: usize = 4096; // the smallest page size Linux uses; a larger one needs fewer bytes
    let pages = map.len().div_ceil(PAGE);
    if pages == 0 {
        return None;
    }
    // `mincore`'s vector is `unsigned char *` on Linux and `char *` on the BSDs and macOS.
    #[cfg(target_os = "linux")]
    type Flag = u8;
    #[cfg(not(target_os = "linux"))]
    type Flag = libc::c_char;
    let mut vec: Vec<Flag> = vec![0; pages];
    // SAFETY: `map` is a live mapping of `map.len()` bytes at a page-aligned address (mmap(2)
    // returns one), and `vec` holds at least one byte per page of that range, which is all
    // mincore(2) writes; it only reads page-table state, not the mapped bytes.
    let rc = unsafe { libc::mincore(map.as_ptr() as *mut libc::c_void, map.len(), vec.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    Some(vec.iter().filter(|&&b| b & 1 == 1).count() as f64 / pages as f64)
}

/// [`populate`] in steps of [`POPULATE_STEP`] bytes, for the residency checker thread: each
/// `madvise` holds the process's memory-map lock for reading only over its step, so a reader
/// thread's `mmap` or large allocation (which takes it for writing) waits for one step, not
/// for the whole file. Whether the kernel populated every step.
pub(crate) fn populate_in_steps(map: &memmap2::Mmap) -> bool {
    #[cfg(target_os = "linux")]
    {
        let mut ok = true;
        let mut at = 0usize;
        while at < map.len() {
            let len = POPULATE_STEP.min(map.len() - at);
            ok &= map.advise_range(memmap2::Advice::PopulateRead, at, len).is_ok();
            at += len;
        }
        ok
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = map;
        false
    }
}

/// Bytes one step of [`populate_in_steps`] maps: 2 MiB (512 pages of 4 KiB; tens of
/// microseconds of page-table work).
pub(crate) const POPULATE_STEP: usize = 2 << 20;

/// Maps every page of `map` up front (`MADV_POPULATE_READ`, Linux 5.14+); whether the kernel
/// did. Other systems have no such advice: `false`.
pub(crate) fn populate(map: &memmap2::Mmap) -> bool {
    #[cfg(target_os = "linux")]
    return map.advise(memmap2::Advice::PopulateRead).is_ok();
    #[cfg(not(target_os = "linux"))]
    {
        let _ = map;
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 33: the hybrid backend's residency threshold (0.99) on both sides of a whole page
    /// and exactly on it, by hand: `floor(n * 0.01)` pages may be missing (`1 - 0.99` is
    /// 0.010000000000000009 in binary, so 100 pages give 1.0000000000000009 -> 1).
    #[test]
    fn issue33_allowed_missing_pages_at_the_threshold() {
        let min = crate::io::HYBRID_MIN_RESIDENT;
        assert_eq!(min, 0.99);
        for (pages, allowed) in
            [(0, 0), (1, 0), (99, 0), (100, 1), (101, 1), (199, 1), (200, 2), (201, 2), (1000, 10)]
        {
            assert_eq!(allowed_missing(pages, min), allowed, "{pages} pages");
        }
        // The clamp: a minimum above 1 allows nothing missing, below 0 everything.
        assert_eq!(allowed_missing(100, 1.5), 0);
        assert_eq!(allowed_missing(100, -1.0), 100);
        assert_eq!(allowed_missing(100, 1.0), 0);
        assert_eq!(allowed_missing(100, 0.0), 100);
    }
}
