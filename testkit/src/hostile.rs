//! What the hostile-input tests share (storage's damaged storages, interop's damaged foreign
//! samples): [`CountingAlloc`], a global allocator that records the largest single allocation
//! of the reading thread while armed ([`with_alloc_cap`]), and [`panic_text`].
//!
//! A test binary installs the allocator itself (a library cannot choose a binary's):
//!
//! ```text
//! #[global_allocator]
//! static ALLOC: guideloom_testkit::hostile::CountingAlloc = guideloom_testkit::hostile::CountingAlloc;
//! ```

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// Records, per thread, the largest single allocation made while armed ([`with_alloc_cap`]);
/// refuses (returns null, so the process aborts naming the size) any allocation over 1 GiB
/// while armed. Disarmed it forwards everything to [`System`] unchanged.
#[derive(Debug, Clone, Copy, Default)]
pub struct CountingAlloc;

thread_local! {
    /// Allocations above this size are recorded as violations (usize::MAX: disarmed).
    static ARMED_CAP: Cell<usize> = const { Cell::new(usize::MAX) };
    /// Largest allocation seen while armed.
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

/// Armed, allocations above this many bytes are refused.
const REFUSE_ABOVE: usize = 1 << 30;

/// Notes an allocation of `size` bytes; returns whether to refuse it.
fn note_alloc(size: usize) -> bool {
    let cap = ARMED_CAP.try_with(Cell::get).unwrap_or(usize::MAX);
    if cap == usize::MAX {
        return false;
    }
    let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
    size > REFUSE_ABOVE
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged (or returns
// null, which callers of `GlobalAlloc` must handle); the thread-local cells are const-initialized
// `Cell<usize>`s without destructors, so touching them never allocates or recurses.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if note_alloc(layout.size()) {
            return std::ptr::null_mut();
        }
        // SAFETY: forwarded with the caller's layout, which meets `alloc`'s contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if note_alloc(layout.size()) {
            return std::ptr::null_mut();
        }
        // SAFETY: as `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if note_alloc(new_size) {
            return std::ptr::null_mut();
        }
        // SAFETY: `ptr` was allocated by this allocator (that is, by `System`) with `layout`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// Runs `f` with allocations on this thread capped (recorded) at `cap`; returns its result
/// and the largest single allocation it made. Meaningful only in a binary whose global
/// allocator is [`CountingAlloc`] (elsewhere the largest allocation reads 0).
pub fn with_alloc_cap<T>(cap: usize, f: impl FnOnce() -> T) -> (T, usize) {
    LARGEST.with(|l| l.set(0));
    ARMED_CAP.with(|c| c.set(cap));
    let out = f();
    ARMED_CAP.with(|c| c.set(usize::MAX));
    (out, LARGEST.with(Cell::get))
}

/// The message of a caught panic's payload (`"non-string panic"` for another payload).
pub fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic".into())
}

/// Makes a FIFO at `path` (a file that blocks whoever opens it for reading: what a reader that
/// does not check file types would hang on).
///
/// # Panics
/// When `path` is not UTF-8 or the FIFO cannot be made.
pub fn mkfifo(path: &std::path::Path) {
    let c = std::ffi::CString::new(path.as_os_str().to_str().unwrap()).unwrap();
    #[allow(unsafe_code)]
    // SAFETY: `c` is a valid NUL-terminated path.
    let made = unsafe { libc::mkfifo(c.as_ptr(), 0o600) };
    assert_eq!(made, 0, "mkfifo {}", path.display());
}

/// Runs `f` on another thread and returns its result; panics naming `what` when it does not
/// finish within 20 s (a hang).
///
/// # Panics
/// On a hang, or when `f` panics.
pub fn within_watchdog<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(std::time::Duration::from_secs(20)).unwrap_or_else(|_| panic!("{what} hung"))
}
