//! Storages given by URL (`s3://bucket/prefix`, `gs://`, `az://`, `http(s)://`): what the
//! commands that take a storage directory do when the argument is a URL.

use std::path::Path;
use std::sync::Arc;

use guideloom::storage::{StorageDir, StorageLocation};

use crate::error::CliResult;

/// Batches hinted ahead of the consumer for a remote storage (the loader's readahead).
pub(crate) const REMOTE_READAHEAD: u64 = 16;

/// The storage directory of a remote URL argument (the store's options from the environment:
/// `AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP`, credentials, `GUIDELOOM_CACHE_DIR`, ...); `None` for
/// a local path.
pub(crate) fn remote(arg: &Path) -> CliResult<Option<Arc<dyn StorageDir>>> {
    let loc = StorageLocation::from_path(arg);
    if !loc.is_remote() {
        unknown_scheme(arg)?;
        return Ok(None);
    }
    Ok(Some(loc.open()?))
}

/// Refuses `SCHEME://...` with a scheme that is not an object store's (nor `file`) when no
/// local path of that name exists: a mistyped or unsupported URL, which would otherwise be
/// reported as a missing local directory.
///
/// # Errors
///
/// `arg` reads as a URL of an unknown scheme.
fn unknown_scheme(arg: &Path) -> CliResult {
    let Some((scheme, _)) = arg.to_str().and_then(|t| t.split_once("://")) else { return Ok(()) };
    let url_like = scheme.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && scheme.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
    if !url_like || scheme.eq_ignore_ascii_case("file") || arg.exists() {
        return Ok(());
    }
    let known: Vec<String> =
        guideloom::storage::remote::REMOTE_SCHEMES.iter().map(|s| format!("{s}://")).collect();
    Err(format!(
        "{}: unknown URL scheme {scheme:?}; the supported ones are {} (and file:// for a local path)",
        arg.display(),
        known.join(", ")
    )
    .into())
}

/// Whether `arg` is a remote URL.
pub(crate) fn is_remote(arg: &Path) -> bool {
    StorageLocation::from_path(arg).is_remote()
}

/// Refuses an object-store URL where a command reads or writes local files only: `what`
/// names the argument (`--workdir`), `instead` says what to do.
///
/// # Errors
///
/// `arg` is a remote URL.
pub(crate) fn local_only(arg: &Path, what: &str, instead: &str) -> CliResult {
    if is_remote(arg) {
        return Err(format!(
            "{what} {}: an object-store URL, but {what} takes a local path; {instead}",
            arg.display()
        )
        .into());
    }
    Ok(())
}

/// Refuses an object-store URL given to a flag that names a local file the command reads or
/// writes (`--save-state`, `--resume`, `--llmc-state`, `--lengths-out`, `--resume-ranks`):
/// `flags` pairs each flag with its paths.
///
/// # Errors
///
/// One of the paths is a remote URL.
pub(crate) fn local_files<'a>(flags: impl IntoIterator<Item = (&'a str, Option<&'a Path>)>) -> CliResult {
    for (flag, path) in flags {
        if let Some(p) = path {
            local_only(p, flag, "give a local file (copy it to or from the store yourself)")?;
        }
    }
    Ok(())
}

/// `ingest --out URL`: runs `ingest` into a local temporary storage, then uploads it (shard
/// objects first, the manifest last: a run killed at any point leaves the storage that was
/// at the URL before in force). `None` (nothing done) when `out` is a local path.
///
/// # Errors
///
/// `--append` (not supported remotely), a prefix that already holds a storage (refused
/// before `ingest` runs), the store, `ingest`'s own errors, or the upload.
pub(crate) fn ingest_remote<R>(
    out: &Path,
    append: bool,
    ingest: impl FnOnce(&Path) -> CliResult<R>,
) -> CliResult<Option<R>> {
    let StorageLocation::Remote(url) = StorageLocation::from_path(out) else { return Ok(None) };
    if append {
        return Err(format!(
            "--append with a remote --out ({url}) is not supported: ingest into a local storage with --append, then `guideloom upload` it"
        )
        .into());
    }
    let dir = guideloom::storage::RemoteDir::open(&url, guideloom::storage::RemoteOptions::from_env()?)?;
    // As for a local --out: refused before anything is read or tokenized.
    if dir.file_len(guideloom::storage::MANIFEST_FILE)?.is_some() {
        return Err(format!("{url} already holds a storage; give --out another prefix").into());
    }
    let staging = Staging::new()?;
    let local = staging.path().join("storage");
    let r = ingest(&local)?;
    dir.upload(&local)?;
    Ok(Some(r))
}

/// The names of staging directories start with this, then the process id and `-`.
const STAGING_PREFIX: &str = "guideloom-staging-";

/// The local storage `ingest --out URL` writes before uploading it: a directory in the
/// system's temporary directory named `guideloom-staging-<pid>-<random>`, removed when this
/// value drops (the command ends or fails), when the process gets SIGINT or SIGTERM (a thread
/// removes it, then the signal takes its default course), and, should the process die
/// otherwise (SIGKILL, a crash), by the next `ingest --out URL`, which removes the staging
/// directories of this user whose process is gone.
struct Staging {
    dir: Option<tempfile::TempDir>,
    handle: Option<signal_hook::iterator::Handle>,
}

impl Staging {
    fn new() -> CliResult<Self> {
        let dir =
            tempfile::Builder::new().prefix(&format!("{STAGING_PREFIX}{}-", std::process::id())).tempdir()?;
        remove_stale_staging(dir.path());
        let path = dir.path().to_path_buf();
        let mut signals =
            signal_hook::iterator::Signals::new([signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM])?;
        let handle = signals.handle();
        std::thread::spawn(move || {
            if let Some(sig) = signals.forever().next() {
                // The writer may still be adding files: a few tries.
                for _ in 0..5 {
                    if std::fs::remove_dir_all(&path).is_ok() || !path.exists() {
                        break;
                    }
                }
                let _ = signal_hook::low_level::emulate_default_handler(sig);
                std::process::exit(128 + sig);
            }
        });
        Ok(Staging { dir: Some(dir), handle: Some(handle) })
    }

    fn path(&self) -> &Path {
        self.dir.as_ref().map_or(Path::new(""), |d| d.path())
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            h.close();
        }
        drop(self.dir.take());
    }
}

/// Removes the staging directories beside `mine` (one this process just made) that belong to
/// this user and to a process that no longer runs (`/proc/<pid>` is gone): those of a run
/// killed before it could remove its own. Entries that are links, not directories, of another
/// user, or not named as staging directories are left alone.
fn remove_stale_staging(mine: &Path) {
    use std::os::unix::fs::MetadataExt;
    // Without /proc (not Linux) no process can be told gone: nothing is removed.
    if !Path::new("/proc/self").exists() {
        return;
    }
    let (Some(parent), Ok(me)) = (mine.parent(), std::fs::symlink_metadata(mine)) else { return };
    let Ok(entries) = std::fs::read_dir(parent) else { return };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(STAGING_PREFIX))
            .and_then(|rest| rest.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(m) = std::fs::symlink_metadata(e.path()) else { continue };
        if !m.is_dir() || m.uid() != me.uid() || e.path() == mine {
            continue;
        }
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}
