//! Datasets in other projects' layouts, read in place: when a path is one, and the options
//! `--format`, `--dtype`, `--column`, `--hf-split`, `--repair-pointers`, `--multimodal` give.

use std::path::Path;

use guideloom::interop::{self as foreign, ForeignDataset, ForeignOptions, InteropError};
use guideloom::loader::{DataSource, Loader, LoaderError, State};
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
            Err(_) if matches!(location, StorageLocation::Local(_)) && path.is_file() => {
                return Err(not_a_storage_file(path, "batches, bench and inspect read it in place").into())
            }
            Err(_) => return Ok(None),
        }
    }
    Ok(Some(ForeignDataset::open_at(&location, &remote, &options(a))?))
}

/// The error for a local file given where a storage is expected, when its layout is not
/// detected by its contents (raw token files: nanoGPT, header-less llm.c, OLMo): it names the
/// flags that read it (`--format`, `--dtype`), and `then` says what they make possible.
pub(crate) fn not_a_storage_file(path: &Path, then: &str) -> String {
    format!(
        "{} is a file, not a guideloom storage (a directory with manifest.json), and its layout is not \
         detected from its contents: name its layout and token type with --format and --dtype \
         (nanoGPT's train.bin: --format nanogpt --dtype u16; llm.c files before 2024-05-21: \
         --format llmc --dtype i32; OLMo: --format olmo --dtype u32); {then}",
        path.display()
    )
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

/// `e`, or for a saved state of another source ([`LoaderError::StateMismatch`] of
/// `source.fingerprint`) an error naming both sides: the loader's data (`what`: its layout and
/// path or URL), record count and fingerprint, and the state's (`state_path`), and why an
/// imported copy does not take the state of the dataset read in place.
pub(crate) fn resume_mismatch<S: DataSource, U, C>(
    e: LoaderError,
    state_path: &Path,
    what: &str,
    state: &State,
    loader: &Loader<S, U, C>,
) -> Box<dyn std::error::Error + Send + Sync> {
    if !matches!(e, LoaderError::StateMismatch { field: "source.fingerprint", .. }) {
        return e.into();
    }
    let records = DataSource::len(loader.source());
    let same = if state.source.records == records { " (the same count)" } else { "" };
    // The loader's error follows: both fingerprints, the loader's first.
    Box::new(crate::error::context(
        format!(
            "--resume {}: the state was saved over other data than this run reads. This run: {what}, \
             {records} records; the state: {} records{same}. A state resumes only on the data it was saved \
             on, read the same way: a dataset read in place and its `guideloom import` copy have different \
             fingerprints (the copy's comes from its manifest: shard counts and checksums), while \
             `guideloom upload` keeps a storage's fingerprint (the same manifest)",
            state_path.display(),
            state.source.records,
        ),
        e,
    ))
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
