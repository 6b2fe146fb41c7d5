//! Data sources: Grain's random-access protocol (`len` + `get`) in Rust.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crate::{LoaderError, WindowParams};

/// A random-access collection of records: Grain's `RandomAccessDataSource` protocol.
///
/// Sources are `Send + Sync` and shared by reference (an `Arc`) across the loader's workers;
/// this is what Grain's "pickleable" becomes in Rust. A source releases its resources (file
/// handles, maps) when dropped.
///
/// The loader fetches each batch with one [`DataSource::get_many_cancellable`] call, whose
/// default calls [`DataSource::get_many`], whose default calls [`DataSource::get`] per index.
/// Storage-backed sources override `get_many` to read a whole batch in one go.
///
/// # Cancellation
///
/// Dropping a loader iterator joins its workers, so it waits for `get` calls in flight, at
/// most [`SHUTDOWN_GRACE`](crate::SHUTDOWN_GRACE); a worker still inside a call after that is
/// detached (drop never hangs) and exits when the call returns. A source whose `get` can
/// block for a long or unbounded time (a network, a queue) should override
/// [`DataSource::get_many_cancellable`] and return [`LoaderError::Cancelled`] once the
/// [`Cancellation`] fires, so its workers are joined rather than detached; local-disk sources
/// need not.
///
/// ```
/// use guideloom_loader::{DataSource, LoaderError};
/// struct Squares;
/// impl DataSource for Squares {
///     type Item = u64;
///     fn len(&self) -> u64 { 10 }
///     fn get(&self, index: u64) -> Result<u64, LoaderError> {
///         if index >= 10 {
///             return Err(LoaderError::IndexOutOfRange { index, len: 10 });
///         }
///         Ok(index * index)
///     }
/// }
/// assert_eq!(Squares.get_many(&[3, 1])?, [9, 1]);
/// # Ok::<(), LoaderError>(())
/// ```
pub trait DataSource: Send + Sync {
    /// What one record is.
    type Item: Send;

    /// Number of records; valid indices are `[0, len)`.
    fn len(&self) -> u64;

    /// Whether the source has no record.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Record `index`.
    ///
    /// # Errors
    /// [`LoaderError::IndexOutOfRange`] for `index >= len()`; a source's own failures as
    /// [`LoaderError::Source`] (see [`LoaderError::source`]) naming `index`.
    fn get(&self, index: u64) -> Result<Self::Item, LoaderError>;

    /// The records at `indices`, in order (indices may repeat).
    ///
    /// # Errors
    /// The first failing record's error (default: [`DataSource::get`] per index).
    fn get_many(&self, indices: &[u64]) -> Result<Vec<Self::Item>, LoaderError> {
        indices.iter().map(|&i| self.get(i)).collect()
    }

    /// [`DataSource::get_many`] that may give up early once `cancel` fires, returning
    /// [`LoaderError::Cancelled`]. The loader calls this one. Default: `get_many`.
    ///
    /// # Errors
    /// As [`DataSource::get_many`], plus [`LoaderError::Cancelled`].
    fn get_many_cancellable(
        &self,
        indices: &[u64],
        cancel: &Cancellation,
    ) -> Result<Vec<Self::Item>, LoaderError> {
        let _ = cancel;
        self.get_many(indices)
    }

    /// A hint that the records at `indices` will be asked for soon: the loader calls it for
    /// the batches [`LoaderBuilder::readahead`](crate::LoaderBuilder::readahead) ahead of the
    /// consumer, so a source over a remote storage can start fetching their bytes. It never
    /// fails and never changes what [`DataSource::get_many`] returns. Default: nothing.
    fn prefetch(&self, indices: &[u64]) {
        let _ = indices;
    }

    /// Whether every call of [`DataSource::get_many_cancellable`] returns within a bounded
    /// time (reads from memory or a local disk; no network, no queue, no wait on another
    /// thread). A loader lets its consumer thread produce a queued batch itself while it
    /// would otherwise wait for a worker only when the source, the collation
    /// ([`Collate::bounded`](crate::Collate::bounded)) and the `map` (none set) all are: a
    /// call that blocks for ever would otherwise hold the consumer (and a drop of the
    /// iterator) with it. Default `false`; [`TokenWindows`](crate::TokenWindows) (whose
    /// records are spans, read by its collation) returns `true`.
    fn reads_bounded(&self) -> bool {
        false
    }

    /// A fingerprint of the source's contents, recorded in a loader's [`State`](crate::State)
    /// next to [`DataSource::len`] so a state is not restored onto other data. Default 0
    /// ("only the length is checked"); storage sources return their manifest's fingerprint.
    fn fingerprint(&self) -> u64 {
        0
    }

    /// The window parameters of a window source (`seq_len`, `stride`, stream length), recorded
    /// in a loader's [`State`](crate::State) so that resuming with another window shape names
    /// the parameter that differs. Default `None` (not a window source).
    fn window_params(&self) -> Option<WindowParams> {
        None
    }
}

impl<T: DataSource + ?Sized> DataSource for Arc<T> {
    type Item = T::Item;
    fn len(&self) -> u64 {
        (**self).len()
    }
    fn get(&self, index: u64) -> Result<T::Item, LoaderError> {
        (**self).get(index)
    }
    fn get_many(&self, indices: &[u64]) -> Result<Vec<T::Item>, LoaderError> {
        (**self).get_many(indices)
    }
    fn get_many_cancellable(
        &self,
        indices: &[u64],
        cancel: &Cancellation,
    ) -> Result<Vec<T::Item>, LoaderError> {
        (**self).get_many_cancellable(indices, cancel)
    }
    fn fingerprint(&self) -> u64 {
        (**self).fingerprint()
    }
    fn reads_bounded(&self) -> bool {
        (**self).reads_bounded()
    }
    fn prefetch(&self, indices: &[u64]) {
        (**self).prefetch(indices);
    }
    fn window_params(&self) -> Option<WindowParams> {
        (**self).window_params()
    }
}

/// A shutdown signal shared by a loader iterator and its workers.
///
/// Fired when the iterator is dropped or ends on an error. Blocking sources wait on it with
/// [`Cancellation::wait_timeout`] instead of sleeping.
///
/// ```
/// use std::time::Duration;
/// use guideloom_loader::Cancellation;
/// let c = Cancellation::new();
/// assert!(!c.wait_timeout(Duration::from_millis(1)));
/// c.clone().cancel();
/// assert!(c.is_cancelled() && c.wait_timeout(Duration::from_secs(60)));
/// ```
#[derive(Debug, Clone, Default)]
pub struct Cancellation {
    inner: Arc<CancelInner>,
}

#[derive(Debug, Default)]
struct CancelInner {
    flag: AtomicBool,
    lock: Mutex<()>,
    cond: Condvar,
}

impl Cancellation {
    /// A signal that has not fired.
    pub fn new() -> Self {
        Self::default()
    }

    /// Fires the signal and wakes every waiter.
    pub fn cancel(&self) {
        let _guard = self.inner.lock.lock().unwrap_or_else(|e| e.into_inner());
        self.inner.flag.store(true, Ordering::SeqCst);
        self.inner.cond.notify_all();
    }

    /// Whether the signal has fired.
    pub fn is_cancelled(&self) -> bool {
        self.inner.flag.load(Ordering::SeqCst)
    }

    /// Blocks until the signal fires or `timeout` passes; returns whether it fired.
    pub fn wait_timeout(&self, timeout: Duration) -> bool {
        let guard = self.inner.lock.lock().unwrap_or_else(|e| e.into_inner());
        let (_guard, _) = self
            .inner
            .cond
            .wait_timeout_while(guard, timeout, |_| !self.inner.flag.load(Ordering::SeqCst))
            .unwrap_or_else(|e| e.into_inner());
        self.is_cancelled()
    }

    /// Blocks until the signal fires.
    pub fn wait(&self) {
        let guard = self.inner.lock.lock().unwrap_or_else(|e| e.into_inner());
        let _guard = self
            .inner
            .cond
            .wait_while(guard, |_| !self.inner.flag.load(Ordering::SeqCst))
            .unwrap_or_else(|e| e.into_inner());
    }
}

/// Records `start, start + step, ...` below `stop` (above it for a negative `step`), like
/// Python's `range` and Grain's `RangeDataSource`.
///
/// ```
/// use guideloom_loader::{DataSource, RangeSource};
/// let r = RangeSource::new(1, 10, 2)?;
/// assert_eq!(r.len(), 5);
/// assert_eq!(r.get_many(&[0, 1, 2, 3, 4])?, [1, 3, 5, 7, 9]);
/// # Ok::<(), guideloom_loader::LoaderError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RangeSource {
    start: i64,
    step: i64,
    len: u64,
}

impl RangeSource {
    /// The range `start..stop` by `step`.
    ///
    /// # Errors
    /// [`LoaderError::InvalidConfig`] when `step == 0`.
    pub fn new(start: i64, stop: i64, step: i64) -> Result<Self, LoaderError> {
        if step == 0 {
            return Err(LoaderError::InvalidConfig {
                field: "step",
                detail: "a range step must not be 0".into(),
            });
        }
        let span = i128::from(stop) - i128::from(start);
        let step128 = i128::from(step);
        let len = if (span > 0) == (step > 0) && span != 0 {
            // ceil(span / step) for same-sign operands
            let (a, s) = (span.abs(), step128.abs());
            ((a + s - 1) / s) as u64
        } else {
            0
        };
        Ok(RangeSource { start, step, len })
    }
}

impl DataSource for RangeSource {
    type Item = i64;
    fn len(&self) -> u64 {
        self.len
    }
    fn get(&self, index: u64) -> Result<i64, LoaderError> {
        if index >= self.len {
            return Err(LoaderError::IndexOutOfRange { index, len: self.len });
        }
        // In range by construction: start + index * step lies between start and stop.
        Ok((i128::from(self.start) + i128::from(index) * i128::from(self.step)) as i64)
    }
    fn fingerprint(&self) -> u64 {
        crate::fingerprint_words(&[0x0072_616e_6765, self.start as u64, self.step as u64, self.len])
    }
}

/// Records held in memory; `get` clones one.
///
/// ```
/// use guideloom_loader::{DataSource, VecSource};
/// let v = VecSource::new(vec!["a", "b", "c"]);
/// assert_eq!(v.get(2)?, "c");
/// # Ok::<(), guideloom_loader::LoaderError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VecSource<T> {
    records: Vec<T>,
    fingerprint: u64,
}

impl<T> VecSource<T> {
    /// A source over `records` (fingerprint 0: a restored state checks only the length).
    pub fn new(records: Vec<T>) -> Self {
        VecSource { records, fingerprint: 0 }
    }

    /// Sets the fingerprint recorded in loader states (for example a hash of the records).
    pub fn with_fingerprint(mut self, fingerprint: u64) -> Self {
        self.fingerprint = fingerprint;
        self
    }

    /// The records.
    pub fn records(&self) -> &[T] {
        &self.records
    }
}

impl<T> From<Vec<T>> for VecSource<T> {
    fn from(records: Vec<T>) -> Self {
        VecSource::new(records)
    }
}

impl<T: Clone + Send + Sync> DataSource for VecSource<T> {
    type Item = T;
    fn len(&self) -> u64 {
        self.records.len() as u64
    }
    fn get(&self, index: u64) -> Result<T, LoaderError> {
        usize::try_from(index)
            .ok()
            .and_then(|i| self.records.get(i))
            .cloned()
            .ok_or(LoaderError::IndexOutOfRange { index, len: self.records.len() as u64 })
    }
    fn fingerprint(&self) -> u64 {
        self.fingerprint
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_match_python() {
        let items = |a, b, s| {
            let r = RangeSource::new(a, b, s).unwrap();
            (0..r.len()).map(|i| r.get(i).unwrap()).collect::<Vec<_>>()
        };
        assert_eq!(items(0, 5, 1), [0, 1, 2, 3, 4]);
        assert_eq!(items(10, 0, -3), [10, 7, 4, 1]);
        assert_eq!(items(0, 0, 1), Vec::<i64>::new());
        assert_eq!(items(5, 0, 1), Vec::<i64>::new());
        assert_eq!(items(i64::MIN, i64::MAX, i64::MAX).len(), 3);
        assert!(matches!(RangeSource::new(0, 1, 0), Err(LoaderError::InvalidConfig { field: "step", .. })));
        let r = RangeSource::new(0, 3, 1).unwrap();
        assert!(matches!(r.get(3), Err(LoaderError::IndexOutOfRange { index: 3, len: 3 })));
        assert_ne!(r.fingerprint(), RangeSource::new(0, 4, 1).unwrap().fingerprint());
    }

    #[test]
    fn vec_out_of_range() {
        let v = VecSource::new(vec![1u8, 2]);
        assert!(matches!(v.get_many(&[1, 2]), Err(LoaderError::IndexOutOfRange { index: 2, len: 2 })));
    }
}
