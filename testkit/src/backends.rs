//! The I/O backends every read test runs over ([`read_backends`]), shared by the storage tests
//! and the interop tests (foreign datasets read through the same backends).

use std::sync::Arc;

use guideloom_storage::{
    AutoBackend, DirectBackend, HybridBackend, MmapBackend, PreadBackend, ReadBackend, ReadOptions,
    UringBackend,
};

use crate::skip_backend;

/// Every I/O backend a read test must pass with, with a label for failure messages: pread,
/// io_uring, mmap, hybrid (maps for cached files, Auto for the others; checked on every batch),
/// Auto (what `ReadOptions::default()` picks), Auto with io_uring forced off
/// (`GUIDELOOM_IO=pread` semantics), and the two `O_DIRECT` backends.
///
/// A backend this host cannot run (the kernel or a seccomp profile refuses io_uring, the run
/// forces it off with `GUIDELOOM_IO=pread`, a temp file system refuses `O_DIRECT`) is left out
/// as a skip (`SKIPPED: <what>: <reason>`), or fails the test when `GUIDELOOM_REQUIRE_BACKENDS`
/// names it ([`skip_backend`]; CI requires both).
///
/// The mmap and hybrid backends are made under the tests' contract: the files they read live
/// in private temporary directories (or are the repository's samples), which nothing truncates
/// or rewrites while a reader is open; a test that truncates files uses its own readers.
///
/// # Panics
/// When a required backend is unavailable.
pub fn read_backends() -> Vec<(&'static str, ReadOptions)> {
    let with = |b: Arc<dyn ReadBackend>| ReadOptions::default().backend(b);
    #[allow(unsafe_code)]
    // SAFETY: the test contract above: nothing truncates or rewrites a file while it is mapped.
    let (mmap, hybrid) = unsafe { (MmapBackend::new(), HybridBackend::new()) };
    let mut v = vec![
        ("pread", with(Arc::new(PreadBackend))),
        ("mmap", with(Arc::new(mmap))),
        ("hybrid", with(Arc::new(hybrid.recheck_interval(std::time::Duration::ZERO)))),
        ("auto", ReadOptions::default()),
        ("auto, io_uring forced off", with(Arc::new(AutoBackend::for_env_value(Some("pread"))))),
    ];
    let direct = match direct_io_available() {
        Ok(()) => true,
        Err(reason) => {
            skip_backend("direct", "O_DIRECT backends", reason);
            false
        }
    };
    if direct {
        v.push(("pread+direct", with(Arc::new(DirectBackend::pread()))));
    }
    match (UringBackend::new(), DirectBackend::io_uring()) {
        _ if io_uring_forced_off() => {
            skip_backend("io_uring", "io_uring backends", "GUIDELOOM_IO=pread turns io_uring off")
        }
        (Ok(u), Ok(d)) => {
            v.push(("io_uring", with(Arc::new(u))));
            if direct {
                v.push(("io_uring+direct", with(Arc::new(d))));
            }
        }
        (Err(e), _) | (_, Err(e)) => skip_backend("io_uring", "io_uring backends", &e.to_string()),
    }
    v
}

/// Whether this run forces io_uring off (`GUIDELOOM_IO=pread`).
pub fn io_uring_forced_off() -> bool {
    std::env::var("GUIDELOOM_IO").is_ok_and(|v| v.trim().eq_ignore_ascii_case("pread"))
}

/// Whether `O_DIRECT` works where the tests put their files: the system temp dir (checked
/// once per process, [`crate::direct_io_works_in`]); `Err` with the reason when it does not.
pub fn direct_io_available() -> Result<(), &'static str> {
    static CHECK: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    let check = CHECK.get_or_init(|| crate::direct_io_works_in(&std::env::temp_dir()));
    check.as_ref().map(|_| ()).map_err(String::as_str)
}
