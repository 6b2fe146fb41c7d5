//! Storages addressed by URL: a local path or an object in an object store (`s3://bucket/prefix`,
//! `gs://bucket/prefix`, `az://container/prefix`, `https://host/path`).
//!
//! [`StorageLocation::parse`] tells the two apart; [`StorageLocation::open`] gives the
//! [`StorageDir`] every reader opens through ([`crate::Reader::open_in`]). A remote location
//! is a `RemoteDir` (with the `remote` feature): the `object_store` crate's client for the
//! scheme, a small tokio runtime owned by the directory and bridged to the synchronous seam,
//! fixed-size blocks fetched with retries, an in-memory block map fed by readahead
//! ([`StorageDir::prefetch`]) and an optional size-bounded local cache ([`CacheOptions`]).
//! Credentials and endpoints come from `object_store`'s usual environment variables
//! (`AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP`, `AWS_ACCESS_KEY_ID`, `AWS_REGION`,
//! `GOOGLE_SERVICE_ACCOUNT`, `AZURE_STORAGE_ACCOUNT_NAME`, ...) and
//! [`RemoteOptions::store_options`]; nothing is hard-coded.
//!
//! The directory is cut along its concerns: [`RemoteOptions`] and the environment
//! (`options`), the counters (`stats`), the retry loop and its classification of failures
//! (`retry`), the block map in memory (`blocks`), object lengths (`sizes`), the checks against
//! what the reader expects (`checks`), the local cache (`cache`), the background fetches
//! (`fetch`), the directory and its client (`store`), and its two seams (`read`: the
//! [`StorageDir`], `write`: the [`crate::WriteDir`]). None of them knows the manifest's
//! format: a reader tells the directory what to expect ([`StorageDir::expect_files`]).

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use crate::dir::{LocalDir, StorageDir};
use crate::Result;

mod options;

#[cfg(feature = "remote")]
mod blocks;
#[cfg(feature = "remote")]
mod cache;
#[cfg(feature = "remote")]
mod checks;
#[cfg(feature = "remote")]
mod fetch;
#[cfg(feature = "remote")]
mod read;
#[cfg(feature = "remote")]
mod retry;
#[cfg(feature = "remote")]
mod sizes;
#[cfg(feature = "remote")]
mod stats;
#[cfg(feature = "remote")]
mod store;
#[cfg(feature = "remote")]
mod write;

pub use options::{
    CacheOptions, RemoteOptions, RetryPolicy, BLOCK_ENV, CACHE_BYTES_ENV, CACHE_DIR_ENV, RETRIES_ENV,
    TIMEOUT_ENV,
};
#[cfg(feature = "remote")]
pub use stats::RemoteStats;
#[cfg(feature = "remote")]
pub use store::RemoteDir;
#[cfg(feature = "remote")]
pub(crate) use write::UPLOAD_PART;

/// The URL schemes read as remote object stores (`file://` is read as a local path).
pub const REMOTE_SCHEMES: &[&str] =
    &["s3", "s3a", "gs", "az", "adl", "azure", "abfs", "abfss", "http", "https"];

/// Where a storage is: a local directory or a prefix in an object store.
///
/// ```
/// use guideloom_storage::StorageLocation;
/// assert!(StorageLocation::parse("s3://bucket/data/train").is_remote());
/// assert!(!StorageLocation::parse("data/train").is_remote());
/// assert_eq!(StorageLocation::parse("file:///tmp/x"), StorageLocation::Local("/tmp/x".into()));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StorageLocation {
    /// A directory on this machine.
    Local(PathBuf),
    /// An object-store URL (`s3://bucket/prefix`), without a trailing `/`.
    Remote(String),
}

impl StorageLocation {
    /// Reads `text` as a location: `SCHEME://...` with a scheme of [`REMOTE_SCHEMES`] is
    /// remote, `file://PATH` is the local `PATH`, anything else is a local path. Nothing is
    /// opened or checked here.
    pub fn parse(text: &str) -> Self {
        if let Some((scheme, rest)) = text.split_once("://") {
            let scheme = scheme.to_ascii_lowercase();
            if scheme == "file" {
                return StorageLocation::Local(PathBuf::from(rest));
            }
            if REMOTE_SCHEMES.contains(&scheme.as_str()) {
                return StorageLocation::Remote(format!("{scheme}://{}", rest.trim_end_matches('/')));
            }
        }
        StorageLocation::Local(PathBuf::from(text))
    }

    /// Reads a path given on a command line (see [`StorageLocation::parse`]); a path that is
    /// not UTF-8 is local.
    pub fn from_path(path: &std::path::Path) -> Self {
        path.to_str().map_or_else(|| StorageLocation::Local(path.to_path_buf()), StorageLocation::parse)
    }

    /// Whether this is an object-store URL.
    pub fn is_remote(&self) -> bool {
        matches!(self, StorageLocation::Remote(_))
    }

    /// Opens the location with default [`RemoteOptions`] (see [`StorageLocation::open_with`]).
    ///
    /// # Errors
    /// As [`StorageLocation::open_with`].
    pub fn open(&self) -> Result<Arc<dyn StorageDir>> {
        self.open_with(&RemoteOptions::from_env()?)
    }

    /// The [`StorageDir`] of this location: a [`LocalDir`] for a local path (nothing is
    /// checked), a `RemoteDir` for a URL (the store's client is built; no request is made).
    ///
    /// # Errors
    /// [`crate::StorageError::Remote`] (op `open`) when the URL cannot be read, its store cannot be
    /// built from the environment and options, or this build lacks the `remote` feature.
    pub fn open_with(&self, options: &RemoteOptions) -> Result<Arc<dyn StorageDir>> {
        match self {
            StorageLocation::Local(p) => Ok(Arc::new(LocalDir::new(p))),
            #[cfg(feature = "remote")]
            StorageLocation::Remote(url) => Ok(Arc::new(RemoteDir::open(url, options.clone())?)),
            #[cfg(not(feature = "remote"))]
            StorageLocation::Remote(url) => {
                let _ = options;
                Err(no_remote_feature(url))
            }
        }
    }
}

/// The error for a URL opened by a build without the `remote` feature.
#[cfg(not(feature = "remote"))]
pub(crate) fn no_remote_feature(url: &str) -> crate::StorageError {
    crate::StorageError::Remote {
        op: "open",
        url: url.to_string(),
        range: None,
        attempts: 0,
        cause: "this build of guideloom-storage has no `remote` feature".into(),
    }
}

impl fmt::Display for StorageLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StorageLocation::Local(p) => write!(f, "{}", p.display()),
            StorageLocation::Remote(u) => f.write_str(u),
        }
    }
}
