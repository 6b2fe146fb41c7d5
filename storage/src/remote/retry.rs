//! Retries of one request (object_store's own are off: one policy for every cause, truncated
//! bodies included): how a failed attempt is classified ([`classify`]), the loop with its
//! per-attempt timeout and jittered backoff ([`Retrier::run`]), and the [`Failure`] a request
//! ends with when the retries are spent.

use std::future::Future;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::stats::{add, Counters};
use super::RetryPolicy;
use crate::StorageError;

/// Why one request failed for good (turned into [`StorageError::Remote`]).
#[derive(Debug, Clone)]
pub(super) struct Failure {
    pub(super) op: &'static str,
    pub(super) url: String,
    pub(super) range: Option<Range<u64>>,
    pub(super) attempts: u32,
    pub(super) cause: String,
}

impl Failure {
    /// The error a reader gets.
    pub(super) fn error(&self) -> StorageError {
        StorageError::Remote {
            op: self.op,
            url: self.url.clone(),
            range: self.range.clone(),
            attempts: self.attempts,
            cause: self.cause.clone(),
        }
    }
}

/// One attempt's outcome when it failed.
pub(super) enum Attempt {
    /// Worth another attempt (timeout, 5xx, reset, truncated body).
    Retry(String),
    /// Another attempt would fail the same way (not found, denied, unsupported).
    Fatal(String),
}

/// The error of `e` and its sources, as one line.
pub(super) fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = c.source();
    }
    s
}

/// Whether the failure `e` is worth another attempt.
pub(super) fn classify(e: &object_store::Error) -> Attempt {
    use object_store::Error as E;
    match e {
        E::NotFound { .. } => Attempt::Fatal("the object does not exist".into()),
        E::InvalidPath { .. }
        | E::NotSupported { .. }
        | E::NotImplemented
        | E::PermissionDenied { .. }
        | E::Unauthenticated { .. }
        | E::UnknownConfigurationKey { .. }
        | E::Precondition { .. }
        | E::AlreadyExists { .. } => Attempt::Fatal(chain(e)),
        _ => Attempt::Retry(chain(e)),
    }
}

/// As [`classify`], for a `PUT`: a put creates its object, so "not found" there means the
/// bucket (or container) is missing.
pub(super) fn classify_put(e: &object_store::Error) -> Attempt {
    match e {
        object_store::Error::NotFound { .. } => Attempt::Fatal(
            "the bucket (or container) does not exist: a put answered not found; create the bucket first \
             or check its name"
                .into(),
        ),
        _ => classify(e),
    }
}

/// The retry loop of one directory: its policy and the sequence its waits are drawn from.
#[derive(Debug)]
pub(super) struct Retrier {
    policy: RetryPolicy,
    jitter: AtomicU64,
}

impl Retrier {
    /// Retries by `policy`.
    pub(super) fn new(policy: RetryPolicy) -> Self {
        Retrier { policy, jitter: AtomicU64::new(0) }
    }

    /// A wait in `[0, bound]`, drawn from a per-directory sequence.
    fn jittered(&self, bound: Duration) -> Duration {
        let n = self.jitter.fetch_add(1, Ordering::Relaxed);
        let x = xxhash_rust::xxh3::xxh3_64(&n.to_le_bytes());
        bound.mul_f64((x >> 11) as f64 / (1u64 << 53) as f64)
    }

    /// Runs `attempt` until it succeeds, fails for good, or the retries are spent; counts
    /// every attempt and retry in `stats`. `op`, `url` and `range` name the request in the
    /// [`Failure`] and in the log.
    pub(super) async fn run<T, F, Fut>(
        &self,
        stats: &Counters,
        op: &'static str,
        url: &str,
        range: Option<Range<u64>>,
        mut attempt: F,
    ) -> Result<T, Failure>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, Attempt>>,
    {
        let policy = &self.policy;
        let mut n = 0u32;
        loop {
            add(&stats.requests, 1);
            let outcome = match tokio::time::timeout(policy.timeout, attempt()).await {
                Ok(r) => r,
                Err(_) => Err(Attempt::Retry(format!("no answer within {:?}", policy.timeout))),
            };
            n += 1;
            let fail = |cause| Failure { op, url: url.to_string(), range: range.clone(), attempts: n, cause };
            match outcome {
                Ok(v) => return Ok(v),
                Err(Attempt::Fatal(cause)) => return Err(fail(cause)),
                Err(Attempt::Retry(cause)) if n > policy.max_retries => return Err(fail(cause)),
                Err(Attempt::Retry(cause)) => {
                    log::debug!("remote {op} {url} attempt {n} failed: {cause}; retrying");
                    add(&stats.retries, 1);
                    tokio::time::sleep(self.jittered(policy.backoff_bound(n - 1))).await;
                }
            }
        }
    }
}
