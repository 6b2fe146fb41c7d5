//! Helpers shared by the loader's test binaries that count threads.

use std::sync::{Mutex, MutexGuard};

static SERIAL: Mutex<()> = Mutex::new(());

/// Serializes the tests of one binary that count threads or descriptors, so the counts see
/// only their own loader.
pub(crate) fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Live threads of this process named like loader workers (`guideloom-w*`).
///
/// # Panics
/// Where `/proc/self/task` cannot be read (a count of 0 there would make every "no thread
/// remains" check pass without checking).
pub(crate) fn worker_threads() -> usize {
    let tasks = std::fs::read_dir("/proc/self/task").expect("these tests need /proc/self/task");
    tasks
        .filter_map(|t| t.ok())
        .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
        .filter(|name| name.starts_with("guideloom-w"))
        .count()
}

/// [`worker_threads`] once it has come down to `expected`, waiting at most 2 s: a joined
/// thread's `/proc/self/task` entry can outlive `join` by a moment, while a thread that was
/// not joined stays and fails the caller's check.
pub(crate) fn worker_threads_down_to(expected: usize) -> usize {
    let start = std::time::Instant::now();
    loop {
        let n = worker_threads();
        if n <= expected || start.elapsed() > std::time::Duration::from_secs(2) {
            return n;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}
