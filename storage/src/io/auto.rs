//! Backend selection: the one-time io_uring probe, the `GUIDELOOM_IO` override and the
//! default [`AutoBackend`].

use std::sync::{Arc, OnceLock};

use super::{FileSet, MmapBackend, PreadBackend, ReadBackend, ReadRequest, UringBackend};
use crate::Result;

/// The environment variable that forces the backend [`AutoBackend`] (the default of
/// [`super::ReadOptions`]) uses: `pread`, `io_uring`, `mmap` or `auto` (case-insensitive;
/// unset or empty = `auto`). It is read once per process.
///
/// - `pread` turns io_uring off (for containers whose seccomp profile blocks it, and for the
///   CI run of the fallback path);
/// - `io_uring` uses io_uring even if the probe failed (reads then fail with
///   [`crate::StorageError::Backend`] and the probe's reason);
/// - `mmap` is the user's explicit opt-in to the contract of [`MmapBackend::new`]: shard files
///   must not be truncated or rewritten while readers are alive (else `SIGBUS`).
///
/// An unrecognised value is ignored (logged as a warning) and `auto` applies.
pub const IO_ENV_VAR: &str = "GUIDELOOM_IO";

/// The backends [`AutoBackend`] can choose from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BackendKind {
    /// [`PreadBackend`].
    Pread,
    /// [`UringBackend`].
    IoUring,
    /// [`MmapBackend`].
    Mmap,
}

impl BackendKind {
    /// The backend's name, as [`ReadBackend::name`] reports it.
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Pread => "pread",
            BackendKind::IoUring => "io_uring",
            BackendKind::Mmap => "mmap",
        }
    }
}

/// What [`AutoBackend`] chose and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendChoice {
    /// The chosen backend.
    pub kind: BackendKind,
    /// Why: the environment override, or the probe's outcome (with the failure reason).
    pub reason: String,
}

/// The io_uring probe's outcome, computed once per process.
pub(crate) fn cached_probe() -> &'static std::result::Result<(), String> {
    static PROBE: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    PROBE.get_or_init(super::io_uring_probe)
}

/// The choice for an [`IO_ENV_VAR`] value (`None` = unset); pure apart from the cached probe,
/// so tests can check every value without touching the process environment.
pub fn choose_backend(env: Option<&str>) -> BackendChoice {
    let value = env.map(|v| v.trim().to_ascii_lowercase()).unwrap_or_default();
    let forced = |kind: BackendKind| BackendChoice {
        kind,
        reason: format!("forced by {IO_ENV_VAR}={}", env.unwrap_or_default().trim()),
    };
    let note = match value.as_str() {
        "pread" => return forced(BackendKind::Pread),
        "io_uring" | "io-uring" | "uring" => return forced(BackendKind::IoUring),
        "mmap" => return forced(BackendKind::Mmap),
        "" | "auto" => String::new(),
        other => {
            log::warn!("{IO_ENV_VAR}={other:?} is not one of pread, io_uring, mmap, auto; using auto");
            format!(" ({IO_ENV_VAR}={other:?} not recognised)")
        }
    };
    match cached_probe() {
        Ok(()) => BackendChoice {
            kind: BackendKind::IoUring,
            reason: format!("io_uring probe succeeded (ring setup, IORING_OP_READ supported){note}"),
        },
        Err(e) => {
            BackendChoice { kind: BackendKind::Pread, reason: format!("io_uring unavailable: {e}{note}") }
        }
    }
}

/// The process-wide choice of [`AutoBackend::new`]: [`choose_backend`] of the
/// [`IO_ENV_VAR`] value, computed on first use and cached (later changes to the variable are
/// not seen). Logged once at debug level.
pub fn auto_backend_choice() -> &'static BackendChoice {
    static CHOICE: OnceLock<BackendChoice> = OnceLock::new();
    CHOICE.get_or_init(|| {
        let env = std::env::var(IO_ENV_VAR).ok();
        let choice = choose_backend(env.as_deref());
        log::debug!("guideloom-storage I/O backend: {} ({})", choice.kind.name(), choice.reason);
        choice
    })
}

/// The default backend: io_uring when the kernel allows it (a one-time probe: ring setup and
/// opcode probe for `IORING_OP_READ`), otherwise pread; [`IO_ENV_VAR`] overrides. Reports
/// the chosen backend's name.
#[derive(Debug, Clone)]
pub struct AutoBackend {
    choice: BackendChoice,
    inner: Arc<dyn ReadBackend>,
}

impl Default for AutoBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl AutoBackend {
    /// The backend of [`auto_backend_choice`] (environment read and probe run once per
    /// process).
    pub fn new() -> Self {
        Self::from_choice(auto_backend_choice().clone())
    }

    /// The backend [`choose_backend`] picks for this [`IO_ENV_VAR`] value, ignoring the real
    /// environment (`Some("pread")` = io_uring forced off).
    pub fn for_env_value(value: Option<&str>) -> Self {
        Self::from_choice(choose_backend(value))
    }

    fn from_choice(choice: BackendChoice) -> Self {
        let inner: Arc<dyn ReadBackend> = match choice.kind {
            BackendKind::Pread => Arc::new(PreadBackend),
            BackendKind::IoUring => match UringBackend::new() {
                Ok(b) => Arc::new(b),
                Err(e) => Arc::new(Failing(e.to_string())),
            },
            // SAFETY-relevant opt-in: reaching this arm needs `GUIDELOOM_IO=mmap`, which the
            // documentation of IO_ENV_VAR defines as the user's acceptance of the contract
            // of `MmapBackend::new`.
            BackendKind::Mmap => Arc::new(mmap_by_env_opt_in()),
        };
        AutoBackend { choice, inner }
    }

    /// What this backend chose and why.
    pub fn choice(&self) -> &BackendChoice {
        &self.choice
    }
}

fn mmap_by_env_opt_in() -> MmapBackend {
    // SAFETY: only called when the user set `GUIDELOOM_IO=mmap`, documented (IO_ENV_VAR) as
    // their explicit acceptance of `MmapBackend::new`'s contract: mapped shard files are not
    // truncated or rewritten while readers live.
    unsafe { MmapBackend::new() }
}

impl ReadBackend for AutoBackend {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn read_into(&self, files: &FileSet, requests: &[ReadRequest], out: &mut [u8]) -> Result<()> {
        self.inner.read_into(files, requests, out)
    }
}

/// io_uring forced although unavailable: every read fails with the probe's reason.
#[derive(Debug)]
struct Failing(String);

impl ReadBackend for Failing {
    fn name(&self) -> &'static str {
        "io_uring"
    }

    fn read_into(&self, _: &FileSet, _: &[ReadRequest], _: &mut [u8]) -> Result<()> {
        Err(crate::StorageError::Backend { backend: "io_uring", reason: self.0.clone() })
    }
}
