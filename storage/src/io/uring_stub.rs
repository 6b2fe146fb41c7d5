//! Stand-in for the io_uring backend in builds without it (not Linux, or the `io-uring`
//! feature off): construction fails with the reason, and `Auto` picks pread.

use super::backend::{Op, ReadBackend};
use super::files::FileSet;
use super::request::ReadRequest;
use crate::{Result, StorageError};

const REASON: &str = "this build has no io_uring support (not Linux, or the `io-uring` feature is off)";

/// Always fails in this build: see [`UringBackend::new`].
///
/// # Errors
/// The reason io_uring is unavailable.
pub fn io_uring_probe() -> std::result::Result<(), String> {
    Err(REASON.into())
}

/// The probe's outcome: always the reason this build has no io_uring.
pub(crate) fn cached_probe() -> &'static std::result::Result<(), String> {
    static PROBE: std::sync::OnceLock<std::result::Result<(), String>> = std::sync::OnceLock::new();
    PROBE.get_or_init(io_uring_probe)
}

/// The io_uring backend; this build has none, so it cannot be constructed.
#[derive(Debug, Clone, Copy)]
pub struct UringBackend {
    _private: (),
}

impl UringBackend {
    /// Fails: this build has no io_uring support.
    ///
    /// # Errors
    /// Always [`StorageError::Backend`].
    pub fn new() -> Result<Self> {
        Err(StorageError::Backend { backend: "io_uring", reason: REASON.into() })
    }
}

impl ReadBackend for UringBackend {
    fn name(&self) -> &'static str {
        "io_uring"
    }

    fn read_into(&self, _: &FileSet, _: &[ReadRequest], _: &mut [u8]) -> Result<()> {
        Err(StorageError::Backend { backend: "io_uring", reason: REASON.into() })
    }
}

pub(crate) fn run_ops(_: &FileSet, _: &mut [Op], _: &mut [u8], _: bool) -> Result<()> {
    Err(StorageError::Backend { backend: "io_uring", reason: REASON.into() })
}
