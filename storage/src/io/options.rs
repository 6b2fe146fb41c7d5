//! [`ReadOptions`]: how a reader reads (its backend and its descriptor cap).

use std::sync::Arc;

use super::auto::AutoBackend;
use super::backend::ReadBackend;

/// How a reader reads: the backend and the descriptor budget. Built from
/// [`ReadOptions::default`] with one consuming setter per field, named after it (as
/// [`crate::RemoteOptions`]):
///
/// ```
/// use std::sync::Arc;
/// use guideloom_storage::{PreadBackend, ReadBackend, ReadOptions};
/// let o = ReadOptions::default().backend(Arc::new(PreadBackend)).max_open_files(16);
/// assert_eq!((o.backend.name(), o.max_open_files), ("pread", 16));
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ReadOptions {
    /// The backend serving byte-range requests. Default: [`AutoBackend`] (io_uring when the
    /// kernel allows it, else pread; [`super::IO_ENV_VAR`] overrides; never mmap).
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
    /// Sets [`ReadOptions::backend`].
    pub fn backend(mut self, backend: Arc<dyn ReadBackend>) -> Self {
        self.backend = backend;
        self
    }

    /// Sets [`ReadOptions::max_open_files`]: keeps at most `n` shard files open.
    pub fn max_open_files(mut self, n: usize) -> Self {
        self.max_open_files = n;
        self
    }
}
