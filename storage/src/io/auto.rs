//! Backend selection: the one-time io_uring probe, the `GUIDELOOM_IO` override, the one
//! parser of backend names ([`BackendKind`]'s `FromStr`) and the default [`AutoBackend`].
//!
//! Every safe way to obtain a backend here yields io_uring or pread. The mmap backend needs
//! its `unsafe` constructor ([`super::MmapBackend::new`]), called by the program that
//! accepts its contract; an environment variable seen by the library does not count as that
//! acceptance.

use std::str::FromStr;
use std::sync::{Arc, OnceLock};

use super::backend::ReadBackend;
use super::files::FileSet;
use super::pread::PreadBackend;
use super::request::ReadRequest;
use super::uring::{cached_probe, UringBackend};
use crate::{Result, StorageError};

/// The environment variable that forces the backend [`AutoBackend`] (the default of
/// [`super::ReadOptions`]) uses: `pread`, `io_uring` or `auto` (case-insensitive, parsed by
/// [`BackendKind`]'s `FromStr`; unset or empty = `auto`). It is read once per process.
///
/// - `pread` turns io_uring off (for containers whose seccomp profile blocks it, and for the
///   CI run of the fallback path);
/// - `io_uring` uses io_uring even if the probe failed (reads then fail with
///   [`crate::StorageError::Backend`] and the probe's reason);
/// - `mmap` is **not honoured by the library**: it warns (`log::warn!`), says so in
///   [`BackendChoice::reason`] and probes as for `auto`. A program that accepts the contract
///   of [`super::MmapBackend::new`] (the `guideloom` binary does, for `GUIDELOOM_IO=mmap` and
///   `--backend mmap`) builds that backend itself.
///
/// An unrecognised value is ignored (logged as a warning) and `auto` applies.
pub const IO_ENV_VAR: &str = "GUIDELOOM_IO";

/// The I/O backends by name, as `--backend` flags and [`IO_ENV_VAR`] spell them. Parse a
/// name with `str::parse` (the one parser of backend names; case-insensitive, surrounding
/// white space ignored): `auto` (or the empty string), `pread`, `io_uring` (also `io-uring`,
/// `uring`), `mmap`.
///
/// ```
/// use guideloom_storage::BackendKind;
/// assert_eq!("io-uring".parse::<BackendKind>()?, BackendKind::IoUring);
/// assert_eq!(" MMAP ".parse::<BackendKind>()?, BackendKind::Mmap);
/// assert!(matches!(
///     "bogus".parse::<BackendKind>(),
///     Err(guideloom_storage::StorageError::UnknownBackend { name }) if name == "bogus"
/// ));
/// # Ok::<(), guideloom_storage::StorageError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BackendKind {
    /// Let the library choose: io_uring when its probe succeeds, else pread. Never the
    /// [`BackendChoice::kind`] of a choice.
    Auto,
    /// [`PreadBackend`].
    Pread,
    /// [`UringBackend`].
    IoUring,
    /// [`super::MmapBackend`] (built only through its `unsafe` constructor).
    Mmap,
}

impl BackendKind {
    /// The backend's name, as [`ReadBackend::name`] reports it (`"auto"` for
    /// [`BackendKind::Auto`]).
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Auto => "auto",
            BackendKind::Pread => "pread",
            BackendKind::IoUring => "io_uring",
            BackendKind::Mmap => "mmap",
        }
    }
}

impl std::fmt::Display for BackendKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for BackendKind {
    type Err = StorageError;

    /// # Errors
    /// [`StorageError::UnknownBackend`] for any other name.
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "" | "auto" => Ok(BackendKind::Auto),
            "pread" => Ok(BackendKind::Pread),
            "io_uring" | "io-uring" | "uring" => Ok(BackendKind::IoUring),
            "mmap" => Ok(BackendKind::Mmap),
            _ => Err(StorageError::UnknownBackend { name: s.to_string() }),
        }
    }
}

/// What [`AutoBackend`] chose and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendChoice {
    /// The chosen backend: [`BackendKind::IoUring`] or [`BackendKind::Pread`], never mmap.
    pub kind: BackendKind,
    /// Why: the environment override, or the probe's outcome (with the failure reason), and
    /// what of the environment was not honoured.
    pub reason: String,
}

/// The choice for an [`IO_ENV_VAR`] value (`None` = unset); pure apart from the cached probe,
/// so tests can check every value without touching the process environment. The kind is
/// io_uring or pread whatever the value: `mmap` is not honoured (see [`IO_ENV_VAR`]).
pub fn choose_backend(env: Option<&str>) -> BackendChoice {
    let raw = env.unwrap_or_default().trim();
    let note = match env.map(BackendKind::from_str) {
        None | Some(Ok(BackendKind::Auto)) => String::new(),
        Some(Ok(BackendKind::Pread)) => {
            return BackendChoice {
                kind: BackendKind::Pread,
                reason: format!("forced by {IO_ENV_VAR}={raw}"),
            }
        }
        Some(Ok(BackendKind::IoUring)) => {
            return BackendChoice {
                kind: BackendKind::IoUring,
                reason: format!("forced by {IO_ENV_VAR}={raw}"),
            }
        }
        Some(Ok(BackendKind::Mmap)) => {
            log::warn!(
                "{IO_ENV_VAR}={raw} is not honoured: the library never maps files on its own (the mmap \
                 backend needs its unsafe constructor); choosing between io_uring and pread"
            );
            format!(
                " ({IO_ENV_VAR}={raw} not honoured: the library never maps files on its own; a program \
                 that accepts the mmap contract builds MmapBackend itself)"
            )
        }
        Some(Err(_)) => {
            log::warn!("{IO_ENV_VAR}={raw:?} is not one of pread, io_uring, auto; using auto");
            format!(" ({IO_ENV_VAR}={raw:?} not recognised)")
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
/// opcode probe for `IORING_OP_READ`), otherwise pread; [`IO_ENV_VAR`] overrides between
/// the two. Never mmap. Reports the chosen backend's name.
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
    /// environment (`Some("pread")` = io_uring forced off; `Some("mmap")` is not honoured).
    pub fn for_env_value(value: Option<&str>) -> Self {
        Self::from_choice(choose_backend(value))
    }

    /// Builds what `choice` names; [`choose_backend`] names only io_uring or pread.
    fn from_choice(choice: BackendChoice) -> Self {
        let inner: Arc<dyn ReadBackend> = if choice.kind == BackendKind::IoUring {
            match UringBackend::new() {
                Ok(b) => Arc::new(b),
                Err(e) => Arc::new(Failing(e.to_string())),
            }
        } else {
            Arc::new(PreadBackend)
        };
        AutoBackend { choice, inner }
    }

    /// What this backend chose and why.
    pub fn choice(&self) -> &BackendChoice {
        &self.choice
    }
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
