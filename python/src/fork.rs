//! Fork safety. The io_uring backend keeps one ring per thread in a thread-local; a forked child
//! inherits its parent's ring (shared memory with the parent), so readers opened in a forked child
//! read with `pread` instead. Python's `os.register_at_fork(after_in_child=...)` calls
//! `_after_fork_in_child` (registered by `guideloom/__init__.py`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use pyo3::prelude::*;

use crate::rust_api::{PreadBackend, ReadOptions};

static FORKED: AtomicBool = AtomicBool::new(false);

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(_after_fork_in_child, m)?)?;
    Ok(())
}

/// Marks this process as a forked child: readers opened from now on use `pread`.
#[pyfunction]
fn _after_fork_in_child() {
    FORKED.store(true, Ordering::SeqCst);
}

/// The read options of every reader the binding opens.
pub(crate) fn read_options() -> ReadOptions {
    let options = ReadOptions::default();
    if FORKED.load(Ordering::SeqCst) {
        options.backend(Arc::new(PreadBackend))
    } else {
        options
    }
}
