//! [`PartsRoot`]: the storage a job's parts are committed into, collected from or aborted in,
//! local or on an object store, so every front end (the CLI, the Python binding) resolves a
//! root once and calls one set of functions.

use std::path::PathBuf;

use serde_json::{Map, Value};

use super::commit::{commit_parts_in, CommitMode, CommitReport};
use super::gc::{abort, gc};
use super::receipt::Receipt;
use crate::dir::LocalDir;
use crate::remote::{RemoteOptions, StorageLocation};
use crate::Result;

/// The root of a storage whose parts are committed, listed or removed: a local directory, or
/// (with the `remote` feature) an object-store prefix.
///
/// ```
/// use guideloom_storage::parts::PartsRoot;
/// use guideloom_storage::{RemoteOptions, StorageLocation};
/// let dir = tempfile::tempdir()?;
/// let root = PartsRoot::open(StorageLocation::from_path(dir.path()), || Ok(RemoteOptions::default()))?;
/// assert!(root.gc(false)?.is_empty());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum PartsRoot {
    /// A directory on this machine.
    Local(PathBuf),
    /// An object-store prefix.
    #[cfg(feature = "remote")]
    Remote(crate::RemoteDir),
}

impl PartsRoot {
    /// The root at `location`; `options` (asked only for a URL) gives the store's options.
    ///
    /// # Errors
    /// The error of `options`; [`crate::StorageError::Remote`] when the URL cannot be opened,
    /// or names a store while this build has no `remote` feature.
    pub fn open(location: StorageLocation, options: impl FnOnce() -> Result<RemoteOptions>) -> Result<Self> {
        match location {
            StorageLocation::Local(path) => Ok(PartsRoot::Local(path)),
            #[cfg(feature = "remote")]
            StorageLocation::Remote(url) => Ok(PartsRoot::Remote(crate::RemoteDir::open(&url, options()?)?)),
            #[cfg(not(feature = "remote"))]
            StorageLocation::Remote(url) => {
                let _ = options;
                Err(crate::remote::no_remote_feature(&url))
            }
        }
    }

    /// [`commit_parts_in`] on this root.
    ///
    /// # Errors
    /// As [`commit_parts_in`].
    pub fn commit(
        &self,
        receipts: &[Receipt],
        mode: CommitMode,
        metadata: Option<&Map<String, Value>>,
    ) -> Result<CommitReport> {
        match self {
            PartsRoot::Local(path) => commit_parts_in(&LocalDir::new(path), receipts, mode, metadata),
            #[cfg(feature = "remote")]
            PartsRoot::Remote(dir) => commit_parts_in(dir, receipts, mode, metadata),
        }
    }

    /// [`gc`] on this root (`gc_remote` for an object store).
    ///
    /// # Errors
    /// As [`gc`].
    pub fn gc(&self, apply: bool) -> Result<Vec<String>> {
        match self {
            PartsRoot::Local(path) => gc(path, apply),
            #[cfg(feature = "remote")]
            PartsRoot::Remote(dir) => super::gc::gc_remote(dir, apply),
        }
    }

    /// [`abort`] on this root (`abort_remote` for an object store).
    ///
    /// # Errors
    /// As [`abort`].
    pub fn abort(&self, job: &str) -> Result<Vec<String>> {
        match self {
            PartsRoot::Local(path) => abort(path, job),
            #[cfg(feature = "remote")]
            PartsRoot::Remote(dir) => super::gc::abort_remote(dir, job),
        }
    }
}
