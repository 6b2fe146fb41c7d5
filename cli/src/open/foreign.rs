//! Datasets in other projects' layouts, read in place: when a path is one, and the options
//! `--format`, `--dtype`, `--column`, `--hf-split`, `--repair-pointers`, `--multimodal` give.

use std::path::Path;

use guideloom::interop::{self as foreign, ForeignDataset, ForeignOptions, InteropError};
use guideloom::loader::State;
use guideloom::storage::{RemoteOptions, StorageError, StorageLocation};

use crate::cli::ForeignArgs;
use crate::error::CliResult;
use crate::open::state_file::read_state;

/// The library options of the command-line flags.
pub(crate) fn options(a: &ForeignArgs) -> ForeignOptions {
    let mut o = ForeignOptions::new().repair_pointers(a.repair_pointers).multimodal(a.multimodal);
    o.format = a.format;
    o.dtype = a.dtype;
    o.column = a.column.clone();
    o.split = a.hf_split.clone();
    o
}

/// The foreign dataset at `path` when it is one: `--format` names a layout, or `path` holds
/// no native storage and its layout is detected (a magic number or an index file). `None`:
/// read it as a native storage. `path` may be an object-store URL (`s3://bucket/data/x`):
/// the dataset is then read from the store (endpoint and credentials from the environment).
///
/// # Errors
///
/// The dataset fails validation; `--dtype` without `--format` on a path that is no storage
/// and whose layout is not detected (raw token files need `--format`). A path of no known
/// layout without `--dtype` is left to the native reader's error ("not a directory", "no
/// manifest.json").
pub(crate) fn open(path: &Path, a: &ForeignArgs) -> CliResult<Option<ForeignDataset>> {
    let location = StorageLocation::from_path(path);
    let remote = if location.is_remote() { RemoteOptions::from_env()? } else { RemoteOptions::default() };
    let native = match &location {
        StorageLocation::Local(_) => path.join("manifest.json").is_file(),
        // A glob is never a storage (and `?` would read as a URL's query).
        StorageLocation::Remote(url) if url.contains(['*', '?']) => false,
        StorageLocation::Remote(_) => location.open_with(&remote)?.file_len("manifest.json")?.is_some(),
    };
    if a.format.is_none() {
        if native {
            return Ok(None);
        }
        match foreign::detect_at(&location, &remote) {
            Ok(_) => {}
            // A FIFO, socket or link that the directory or glob matches, or a store request
            // that failed: that is the error, not the native reader's "no manifest.json" (or
            // "does not exist" for a glob that matches).
            Err(InteropError::Storage(
                e @ (StorageError::UnsafeFile { .. } | StorageError::Remote { .. }),
            )) => return Err(e.into()),
            Err(_) if a.dtype.is_some() => {
                return Err(format!(
                    "{} is not a guideloom storage: name its layout with --format (nanogpt, llmc, olmo, ...)",
                    path.display()
                )
                .into())
            }
            Err(_) => return Ok(None),
        }
    }
    Ok(Some(ForeignDataset::open_at(&location, &remote, &options(a))?))
}

/// The dataset at `path` (a local path or an object-store URL) opened with `options`.
///
/// # Errors
///
/// The dataset fails validation or the store cannot be read.
pub(crate) fn open_with(path: &Path, options: &ForeignOptions) -> CliResult<ForeignDataset> {
    let location = StorageLocation::from_path(path);
    let remote = if location.is_remote() { RemoteOptions::from_env()? } else { RemoteOptions::default() };
    Ok(ForeignDataset::open_at(&location, &remote, options)?)
}

/// Lets a state saved before issue 18 resume: those versions hashed a foreign dataset's path
/// into its fingerprint, so `state.source.fingerprint` is the one of a source over
/// [`ForeignDataset::with_legacy_fingerprint`] at the location it was saved on. When the
/// state's fingerprint is not `current` but equals `legacy()` (the same source, built over
/// the legacy-fingerprinted dataset opened at this same path), it is replaced by `current`;
/// otherwise the state is left alone, and the loader reports any mismatch as it does. Only
/// the fingerprint is forgiven: every other field is still compared, and a state from other
/// data, or from this data at another location under the old fingerprint, still fails.
///
/// # Errors
///
/// `legacy()` fails (the legacy source cannot be built).
pub(crate) fn adopt_legacy_fingerprint(
    state: &mut State,
    current: u64,
    legacy: impl FnOnce() -> CliResult<u64>,
) -> CliResult {
    if state.source.fingerprint != current && state.source.fingerprint == legacy()? {
        state.source.fingerprint = current;
    }
    Ok(())
}

/// The state of `--resume` at `path` for a loader whose source (over a foreign dataset) has
/// the fingerprint `current`: read, then [`adopt_legacy_fingerprint`] with `legacy`.
///
/// # Errors
///
/// The state file cannot be read or parsed, or `legacy()` fails.
pub(crate) fn resume_state(
    path: &Path,
    current: u64,
    legacy: impl FnOnce() -> CliResult<u64>,
) -> CliResult<State> {
    let mut state = read_state(path)?;
    adopt_legacy_fingerprint(&mut state, current, legacy)?;
    Ok(state)
}
