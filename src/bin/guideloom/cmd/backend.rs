//! The I/O backend of `--backend` and of `GUIDELOOM_IO`: the one place the binary chooses it.

use std::sync::Arc;

use guideloom::storage::io::IO_ENV_VAR;
use guideloom::storage::{AutoBackend, PreadBackend, ReadBackend, ReadOptions, UringBackend};

use crate::cli::BackendArg;
use crate::CliResult;

/// Read options (default descriptor cap) whose backend is the one `backend` names.
///
/// # Errors
///
/// `--backend io-uring` where io_uring cannot be set up.
pub(crate) fn read_options(backend: BackendArg) -> CliResult<ReadOptions> {
    let backend: Arc<dyn ReadBackend> = match backend {
        // Honors GUIDELOOM_IO.
        BackendArg::Auto => Arc::new(AutoBackend::new()),
        BackendArg::IoUring => Arc::new(UringBackend::new()?),
        BackendArg::Pread => Arc::new(PreadBackend),
        // `--backend mmap` is the user's explicit opt-in to the mmap contract (shard files are
        // not truncated or rewritten while this process reads them), exactly as
        // GUIDELOOM_IO=mmap is; the storage crate's safe opt-in path takes it.
        BackendArg::Mmap => Arc::new(AutoBackend::for_env_value(Some("mmap"))),
    };
    Ok(ReadOptions::default().with_backend(backend))
}

/// Warns on stderr when `GUIDELOOM_IO` holds a value the storage crate does not recognise
/// (it then uses `auto`).
pub(crate) fn warn_unknown_env_value() {
    if let Ok(v) = std::env::var(IO_ENV_VAR) {
        let known = ["", "auto", "pread", "io_uring", "io-uring", "uring", "mmap"];
        if !known.contains(&v.trim().to_ascii_lowercase().as_str()) {
            eprintln!("warning: {IO_ENV_VAR}={v:?} is not one of auto, pread, io_uring, mmap; using auto");
        }
    }
}
