//! Storages addressed by URL: a local path or an object in an object store (`s3://bucket/prefix`,
//! `gs://bucket/prefix`, `az://container/prefix`, `https://host/path`).
//!
//! [`StorageLocation::parse`] tells the two apart; [`StorageLocation::open`] gives the
//! [`StorageDir`] every reader opens through ([`crate::Reader::open_in`]). A remote location
//! is a [`RemoteDir`] (with the `remote` feature): the `object_store` crate's client for the
//! scheme, a small tokio runtime owned by the directory and bridged to the synchronous seam,
//! fixed-size blocks fetched with retries, an in-memory block map fed by readahead
//! ([`StorageDir::prefetch`]) and an optional size-bounded local cache ([`CacheOptions`]).
//! Credentials and endpoints come from `object_store`'s usual environment variables
//! (`AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP`, `AWS_ACCESS_KEY_ID`, `AWS_REGION`,
//! `GOOGLE_SERVICE_ACCOUNT`, `AZURE_STORAGE_ACCOUNT_NAME`, ...) and
//! [`RemoteOptions::store_options`]; nothing is hard-coded.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::dir::{LocalDir, StorageDir};
use crate::{Result, StorageError};

#[cfg(feature = "remote")]
mod cache;
#[cfg(feature = "remote")]
mod store;

#[cfg(feature = "remote")]
pub use store::{RemoteDir, RemoteStats};

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
    /// [`StorageError::Remote`] (op `open`) when the URL cannot be read, its store cannot be
    /// built from the environment and options, or this build lacks the `remote` feature.
    pub fn open_with(&self, options: &RemoteOptions) -> Result<Arc<dyn StorageDir>> {
        match self {
            StorageLocation::Local(p) => Ok(Arc::new(LocalDir::new(p))),
            #[cfg(feature = "remote")]
            StorageLocation::Remote(url) => Ok(Arc::new(RemoteDir::open(url, options.clone())?)),
            #[cfg(not(feature = "remote"))]
            StorageLocation::Remote(url) => {
                let _ = options;
                Err(StorageError::Remote {
                    op: "open",
                    url: url.clone(),
                    range: None,
                    attempts: 0,
                    cause: "this build of guideloom-storage has no `remote` feature".into(),
                })
            }
        }
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

/// Retries of one remote request: bounded exponential backoff with full jitter.
///
/// Attempt `n` (0-based) that fails with a retryable cause (a timeout, a 5xx answer, 503
/// SlowDown, a reset or closed connection, a body shorter than asked for) waits a uniformly
/// drawn time in `[0, min(max_backoff, initial_backoff * 2^n)]` and tries again, at most
/// `max_retries` times; the request then fails with [`StorageError::Remote`]. The worst case
/// before that error is `(max_retries + 1) * timeout + sum of the waits`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (default 8).
    pub max_retries: u32,
    /// The first backoff bound (default 50 ms).
    pub initial_backoff: Duration,
    /// The largest backoff bound (default 2 s).
    pub max_backoff: Duration,
    /// One attempt's time limit, the body included (default 30 s).
    pub timeout: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: 8,
            initial_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(2),
            timeout: Duration::from_secs(30),
        }
    }
}

impl RetryPolicy {
    /// The upper bound of the wait after failed attempt `attempt` (0-based).
    pub fn backoff_bound(&self, attempt: u32) -> Duration {
        let factor = 1u32.checked_shl(attempt.min(20)).unwrap_or(u32::MAX);
        self.initial_backoff.saturating_mul(factor).min(self.max_backoff)
    }

    /// The longest a request can take before it fails: every attempt timing out plus the
    /// largest waits.
    pub fn budget(&self) -> Duration {
        let waits: Duration = (0..self.max_retries).map(|a| self.backoff_bound(a)).sum();
        self.timeout.saturating_mul(self.max_retries + 1) + waits
    }
}

/// The local cache of a remote storage: fetched blocks kept as files in `dir`, bounded to
/// `max_bytes` (least recently used blocks are removed first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheOptions {
    /// The cache directory (created when missing); one subdirectory per storage URL.
    pub dir: PathBuf,
    /// The most bytes the cache's block files of one storage may hold (default 4 GiB when
    /// read from the environment).
    pub max_bytes: u64,
}

/// How a remote storage is read: block size, coalescing, concurrency, readahead, retries,
/// memory and the local cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteOptions {
    /// Objects are fetched and cached in blocks of this many bytes (default 1 MiB; the last
    /// block of an object is shorter).
    pub block_size: u64,
    /// Missing blocks at most this many bytes apart are fetched in one request (default
    /// 1 MiB: one round trip costs more than reading the gap).
    pub coalesce_gap: u64,
    /// Requests in flight at once (default 64: a request's latency holds its slot while the
    /// server could serve another, so with 20 ms per request 32 left the server idle part of
    /// the time in docs/BENCHMARKS.md's remote figures).
    pub max_in_flight: usize,
    /// Readahead bytes in flight at once (default 64 MiB, and never more than half of
    /// `memory_bytes`); demand reads are never held back.
    pub max_readahead_bytes: u64,
    /// Fetched blocks kept in memory, bytes (default 256 MiB; least recently used go first).
    pub memory_bytes: u64,
    /// Retries of every request.
    pub retry: RetryPolicy,
    /// The local block cache; `None` keeps blocks only in memory.
    pub cache: Option<CacheOptions>,
    /// Options for the store's builder, as `object_store` names them (`aws_endpoint`,
    /// `aws_allow_http`, `aws_region`, `google_service_account`, ...), applied after the
    /// environment's.
    pub store_options: Vec<(String, String)>,
}

impl Default for RemoteOptions {
    fn default() -> Self {
        RemoteOptions {
            block_size: 1 << 20,
            coalesce_gap: 1 << 20,
            max_in_flight: 64,
            max_readahead_bytes: 64 << 20,
            memory_bytes: 256 << 20,
            retry: RetryPolicy::default(),
            cache: None,
            store_options: Vec::new(),
        }
    }
}

/// Environment variable: the local cache directory of remote storages (unset: no cache).
pub const CACHE_DIR_ENV: &str = "GUIDELOOM_CACHE_DIR";
/// Environment variable: the cache's bound in bytes (default 4 GiB).
pub const CACHE_BYTES_ENV: &str = "GUIDELOOM_CACHE_BYTES";
/// Environment variable: the retries of a remote request (default 8).
pub const RETRIES_ENV: &str = "GUIDELOOM_REMOTE_RETRIES";
/// Environment variable: one remote attempt's time limit in milliseconds (default 30000).
pub const TIMEOUT_ENV: &str = "GUIDELOOM_REMOTE_TIMEOUT_MS";
/// Environment variable: the block size in bytes (default 1 MiB).
pub const BLOCK_ENV: &str = "GUIDELOOM_REMOTE_BLOCK";

impl RemoteOptions {
    /// The defaults, changed by [`CACHE_DIR_ENV`], [`CACHE_BYTES_ENV`], [`RETRIES_ENV`],
    /// [`TIMEOUT_ENV`] and [`BLOCK_ENV`] where set.
    ///
    /// # Errors
    /// [`StorageError::InvalidEnv`] when a variable's value does not parse as a whole number.
    pub fn from_env() -> Result<Self> {
        fn num(var: &'static str, expected: &'static str) -> Result<Option<u64>> {
            match std::env::var(var) {
                Ok(v) => v.trim().parse::<u64>().map(Some).map_err(|_| StorageError::InvalidEnv {
                    var,
                    value: v,
                    expected,
                }),
                Err(_) => Ok(None),
            }
        }
        const BYTES: &str = "a byte count (a whole number of bytes)";
        let mut o = RemoteOptions::default();
        if let Some(dir) = std::env::var_os(CACHE_DIR_ENV).filter(|d| !d.is_empty()) {
            o.cache = Some(CacheOptions {
                dir: dir.into(),
                max_bytes: num(CACHE_BYTES_ENV, BYTES)?.unwrap_or(4 << 30),
            });
        }
        if let Some(n) = num(RETRIES_ENV, "a whole number of retries")? {
            o.retry.max_retries = u32::try_from(n).unwrap_or(u32::MAX);
        }
        if let Some(ms) = num(TIMEOUT_ENV, "a whole number of milliseconds")? {
            o.retry.timeout = Duration::from_millis(ms);
        }
        if let Some(b) = num(BLOCK_ENV, BYTES)? {
            o.block_size = b.max(1);
        }
        Ok(o)
    }
}
