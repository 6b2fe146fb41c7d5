//! State files of `--save-state` and `--resume`: written atomically (a temporary file in the
//! same directory, synced, renamed over the path, the directory synced), so a process killed
//! while saving leaves the previous state or the new one, never a partial file; read with a
//! size cap and only when they are regular files, and parsed by one generic reader
//! ([`read_state`]) whatever the state's type.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use guideloom::loader::LoaderError;
use serde::de::DeserializeOwned;

use crate::error::{context, CliResult};

/// The most bytes a state file may hold (a state is a few hundred bytes; a larger file is not
/// one, and is not read into memory).
pub(crate) const MAX_STATE_BYTES: u64 = 64 << 10;

/// A state file to write when the run ends. Its temporary file is created when the run
/// starts, so a path that cannot be written fails before the first batch, not after the last.
pub(crate) struct StateFile {
    path: PathBuf,
    tmp: tempfile::NamedTempFile,
}

/// The directory a state file goes to.
fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

impl StateFile {
    /// Prepares writing a state to `path`.
    ///
    /// # Errors
    /// When `path` is a directory or its directory cannot hold a new file.
    pub(crate) fn create(path: &Path) -> CliResult<Self> {
        let fail = |e: std::io::Error| context(format!("cannot write state file {}", path.display()), e);
        if path.is_dir() {
            return Err(fail(std::io::Error::from(std::io::ErrorKind::IsADirectory)).into());
        }
        let tmp =
            tempfile::Builder::new().prefix(".guideloom-state-").tempfile_in(parent(path)).map_err(fail)?;
        Ok(StateFile { path: path.to_path_buf(), tmp })
    }

    /// Writes `json` and makes it the file at the path, atomically and durably.
    ///
    /// # Errors
    /// When a write, sync or the rename fails (the previous file at the path is then intact).
    pub(crate) fn save(mut self, json: &str) -> CliResult {
        let path = self.path;
        let fail = |e: std::io::Error| context(format!("cannot write state file {}", path.display()), e);
        self.tmp.as_file_mut().write_all(json.as_bytes()).map_err(fail)?;
        self.tmp.as_file().sync_all().map_err(fail)?;
        self.tmp.persist(&path).map_err(|e| fail(e.error))?;
        std::fs::File::open(parent(&path)).and_then(|d| d.sync_all()).map_err(fail)?;
        Ok(())
    }
}

/// The state in the file at `path` (written by `--save-state`): a loader's
/// [`State`](guideloom::loader::State), a sequential loader's
/// [`SequentialState`](guideloom::loader::sequential::SequentialState) or a stage's
/// [`StageState`](guideloom::loader::stage::StageState), parsed as their `from_json` does.
///
/// # Errors
/// When the file cannot be read ([`read`]) or does not hold a state of type `S` (the
/// loader's [`LoaderError::StateJson`], after the file's name).
pub(crate) fn read_state<S: DeserializeOwned>(path: &Path) -> CliResult<S> {
    let text = read(path)?;
    serde_json::from_str(&text)
        .map_err(|e| context(format!("state file {}", path.display()), LoaderError::from(e)).into())
}

/// The text of the state file at `path`, refused when it is not a regular file (a FIFO would
/// block) or holds more than [`MAX_STATE_BYTES`].
///
/// # Errors
/// When it cannot be read, is not a regular file, is too large or is not UTF-8.
fn read(path: &Path) -> CliResult<String> {
    let what = || format!("cannot read state file {}", path.display());
    let meta = std::fs::metadata(path).map_err(|e| context(what(), e))?;
    if !meta.is_file() {
        return Err(format!("{}: not a regular file", what()).into());
    }
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_STATE_BYTES + 1).read_to_end(&mut bytes))
        .map_err(|e| context(what(), e))?;
    if bytes.len() as u64 > MAX_STATE_BYTES {
        return Err(
            format!("{}: larger than the {MAX_STATE_BYTES}-byte limit of a state file", what()).into()
        );
    }
    String::from_utf8(bytes).map_err(|e| context(what(), e).into())
}
