//! The I/O backend of `--backend` and of `GUIDELOOM_IO`: the one place the binary chooses it.

use std::sync::Arc;

use guideloom::storage::{
    AutoBackend, BackendKind, HybridBackend, MmapBackend, PreadBackend, ReadBackend, ReadOptions,
    UringBackend, IO_ENV_VAR,
};

use crate::error::CliResult;

/// Read options (default descriptor cap) whose backend is the one `backend` names. `auto`
/// follows `GUIDELOOM_IO` (parsed by the storage crate's [`BackendKind`]): unset (or `auto`)
/// is this tool's default, the hybrid backend (shard files in the page cache read through
/// maps, the others through io_uring or pread); `pread` and `io_uring` name the library's
/// backends (no maps), and this tool honours `mmap` itself, as it does `--backend mmap`.
///
/// # Errors
///
/// `--backend io-uring` where io_uring cannot be set up.
pub(crate) fn read_options(backend: BackendKind) -> CliResult<ReadOptions> {
    let env = std::env::var(IO_ENV_VAR).ok().and_then(|v| v.parse::<BackendKind>().ok());
    let backend: Arc<dyn ReadBackend> = match backend {
        // GUIDELOOM_IO=pread|io_uring: the library's choice, which never maps.
        BackendKind::Auto if matches!(env, Some(BackendKind::Pread | BackendKind::IoUring)) => {
            Arc::new(AutoBackend::new())
        }
        // The default: `--backend auto` with GUIDELOOM_IO unset, `auto` or unrecognised.
        BackendKind::Auto if env != Some(BackendKind::Mmap) => {
            // SAFETY: `HybridBackend::new` has the contract of `MmapBackend::new` (no process
            // truncates or rewrites a shard file while this process reads it, else SIGBUS or
            // bytes changing under shared slices). This tool accepts it for its default, as
            // ripgrep does for its maps, and its help and README say so (with `--backend
            // io-uring` or `pread` as the way to avoid maps). guideloom's own writers only
            // append past the committed bytes and publish through the manifest, which live
            // maps tolerate, and this tool does not write the storage it reads.
            Arc::new(unsafe { HybridBackend::new() })
        }
        BackendKind::IoUring => Arc::new(UringBackend::new()?),
        BackendKind::Pread => Arc::new(PreadBackend),
        // `--backend mmap`, or `GUIDELOOM_IO=mmap` with the default `--backend auto`.
        BackendKind::Auto | BackendKind::Mmap => {
            // SAFETY: `MmapBackend::new` requires that no process truncates or rewrites a
            // mapped shard file while this process reads it (else SIGBUS, or bytes changing
            // under shared slices). The user asked for mmap by name, which this tool's help
            // documents as accepting that contract. guideloom's own writers only append past
            // the committed bytes and publish through the manifest, which live maps tolerate,
            // and this tool does not write the storage it reads.
            Arc::new(unsafe { MmapBackend::new() })
        }
        other => return Err(format!("this tool has no {} backend", other.name()).into()),
    };
    Ok(ReadOptions::default().backend(backend))
}

/// Warns on stderr when `GUIDELOOM_IO` holds a value the storage crate does not recognise
/// (it then uses `auto`).
pub(crate) fn warn_unknown_env_value() {
    if let Ok(v) = std::env::var(IO_ENV_VAR) {
        if v.parse::<BackendKind>().is_err() {
            eprintln!("warning: {IO_ENV_VAR}={v:?} is not one of auto, pread, io_uring, mmap; using auto");
        }
    }
}
