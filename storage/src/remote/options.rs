//! How a remote storage is read: [`RemoteOptions`] (blocks, coalescing, concurrency,
//! readahead, memory), its [`RetryPolicy`] and its [`CacheOptions`], and the environment
//! variables that change the defaults.
//!
//! Every option struct here is built the same way: its `Default` (or `new`), then bare
//! consuming setters named after the fields (`RemoteOptions::default().block_size(4096)`).
//! The fields are public to read; the structs are `#[non_exhaustive]`, so an option added
//! later breaks no caller.

use std::path::PathBuf;
use std::time::Duration;

use crate::{Result, StorageError};

/// Retries of one remote request: bounded exponential backoff with full jitter.
///
/// Attempt `n` (0-based) that fails with a retryable cause (a timeout, a 5xx answer, 503
/// SlowDown, a reset or closed connection, a body shorter than asked for) waits a uniformly
/// drawn time in `[0, min(max_backoff, initial_backoff * 2^n)]` and tries again, at most
/// `max_retries` times; the request then fails with [`StorageError::Remote`]. The worst case
/// before that error is `(max_retries + 1) * timeout + sum of the waits`.
///
/// ```
/// use guideloom_storage::RetryPolicy;
/// use std::time::Duration;
/// let p = RetryPolicy::default().max_retries(2).timeout(Duration::from_secs(1));
/// assert_eq!(p.backoff_bound(0), Duration::from_millis(50));
/// assert_eq!(p.budget(), Duration::from_millis(3_150));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
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
    /// Sets [`RetryPolicy::max_retries`].
    pub fn max_retries(mut self, n: u32) -> Self {
        self.max_retries = n;
        self
    }

    /// Sets [`RetryPolicy::initial_backoff`].
    pub fn initial_backoff(mut self, bound: Duration) -> Self {
        self.initial_backoff = bound;
        self
    }

    /// Sets [`RetryPolicy::max_backoff`].
    pub fn max_backoff(mut self, bound: Duration) -> Self {
        self.max_backoff = bound;
        self
    }

    /// Sets [`RetryPolicy::timeout`].
    pub fn timeout(mut self, limit: Duration) -> Self {
        self.timeout = limit;
        self
    }

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

/// The local cache of a remote storage: fetched blocks (and whole small files with their
/// entity tags) kept as files in `dir`, bounded to `max_bytes` (least recently used blocks
/// are removed first).
///
/// ```
/// use guideloom_storage::CacheOptions;
/// let c = CacheOptions::new("/tmp/cache", 1 << 30);
/// assert_eq!(c.max_bytes, 1 << 30);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CacheOptions {
    /// The cache directory (created when missing); one subdirectory per storage URL.
    pub dir: PathBuf,
    /// The most bytes the cache's files of one storage may hold (default 4 GiB when read from
    /// the environment).
    pub max_bytes: u64,
}

impl CacheOptions {
    /// A cache in `dir` holding at most `max_bytes` per storage.
    pub fn new(dir: impl Into<PathBuf>, max_bytes: u64) -> Self {
        CacheOptions { dir: dir.into(), max_bytes }
    }

    /// Sets [`CacheOptions::dir`].
    pub fn dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.dir = dir.into();
        self
    }

    /// Sets [`CacheOptions::max_bytes`].
    pub fn max_bytes(mut self, bytes: u64) -> Self {
        self.max_bytes = bytes;
        self
    }
}

/// How a remote storage is read: block size, coalescing, concurrency, readahead, retries,
/// memory and the local cache.
///
/// ```
/// use guideloom_storage::{CacheOptions, RemoteOptions, RetryPolicy};
/// let o = RemoteOptions::default()
///     .block_size(64 << 10)
///     .retry(RetryPolicy::default().max_retries(3))
///     .cache(CacheOptions::new("/tmp/cache", 1 << 30))
///     .store_option("aws_region", "us-east-1");
/// assert_eq!((o.block_size, o.retry.max_retries), (64 << 10, 3));
/// assert_eq!(o.store_options, [("aws_region".to_string(), "us-east-1".to_string())]);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
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

impl RemoteOptions {
    /// Sets [`RemoteOptions::block_size`] (at least 1).
    pub fn block_size(mut self, bytes: u64) -> Self {
        self.block_size = bytes.max(1);
        self
    }

    /// Sets [`RemoteOptions::coalesce_gap`].
    pub fn coalesce_gap(mut self, bytes: u64) -> Self {
        self.coalesce_gap = bytes;
        self
    }

    /// Sets [`RemoteOptions::max_in_flight`].
    pub fn max_in_flight(mut self, requests: usize) -> Self {
        self.max_in_flight = requests;
        self
    }

    /// Sets [`RemoteOptions::max_readahead_bytes`].
    pub fn max_readahead_bytes(mut self, bytes: u64) -> Self {
        self.max_readahead_bytes = bytes;
        self
    }

    /// Sets [`RemoteOptions::memory_bytes`].
    pub fn memory_bytes(mut self, bytes: u64) -> Self {
        self.memory_bytes = bytes;
        self
    }

    /// Sets [`RemoteOptions::retry`].
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// Sets [`RemoteOptions::cache`] (a cache in `cache.dir`).
    pub fn cache(mut self, cache: CacheOptions) -> Self {
        self.cache = Some(cache);
        self
    }

    /// Keeps blocks only in memory ([`RemoteOptions::cache`] `None`).
    pub fn no_cache(mut self) -> Self {
        self.cache = None;
        self
    }

    /// Adds one option for the store's builder (see [`RemoteOptions::store_options`]).
    pub fn store_option(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.store_options.push((key.into(), value.into()));
        self
    }

    /// Sets [`RemoteOptions::store_options`] (replacing those set before).
    pub fn store_options(mut self, options: impl IntoIterator<Item = (String, String)>) -> Self {
        self.store_options = options.into_iter().collect();
        self
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
