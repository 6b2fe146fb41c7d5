//! [`RemoteStats`]: what a remote directory has done since it was opened, and the counters it
//! is read from.

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of a [`crate::RemoteDir`] since it was opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RemoteStats {
    /// Requests sent (every attempt of every request).
    pub requests: u64,
    /// Attempts that failed and were retried.
    pub retries: u64,
    /// Body bytes received from the store.
    pub bytes_fetched: u64,
    /// Bytes of blocks served from the local cache instead of the store.
    pub bytes_from_cache: u64,
    /// Bytes handed to readers (`read_at`, `read_requests`).
    pub bytes_delivered: u64,
    /// Bytes requested by readahead ([`crate::StorageDir::prefetch`]).
    pub bytes_prefetched: u64,
}

/// The live counters behind [`RemoteStats`], shared by the directory and its background
/// fetches.
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) requests: AtomicU64,
    pub(super) retries: AtomicU64,
    pub(super) bytes_fetched: AtomicU64,
    pub(super) bytes_from_cache: AtomicU64,
    pub(super) bytes_delivered: AtomicU64,
    pub(super) bytes_prefetched: AtomicU64,
}

/// Adds `n` to `counter`.
pub(super) fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

impl Counters {
    /// The counters now.
    pub(super) fn snapshot(&self) -> RemoteStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        RemoteStats {
            requests: get(&self.requests),
            retries: get(&self.retries),
            bytes_fetched: get(&self.bytes_fetched),
            bytes_from_cache: get(&self.bytes_from_cache),
            bytes_delivered: get(&self.bytes_delivered),
            bytes_prefetched: get(&self.bytes_prefetched),
        }
    }
}
