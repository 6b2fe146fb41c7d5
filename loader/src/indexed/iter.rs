//! Iterating a [`Loader`]: from the start or from a [`State`] (resume, elastic resume with
//! [`ResumeOptions`]), and the iterator, [`LoaderIter`], with its worker pool and readahead.

use std::sync::Arc;

use crate::indexed::loader::Loader;
use crate::pool::Pool;
use crate::{Batch, Cancellation, Collate, DataSource, LoaderError, State};

impl<S, U, C> Loader<S, U, C>
where
    S: DataSource + 'static,
    U: 'static,
    C: Collate<U> + 'static,
    C::Output: 'static,
{
    /// Iterates over all batches from the first.
    pub fn iter(&self) -> LoaderIter<S, U, C> {
        self.iter_at(0)
    }

    /// Iterates from the step after the last one the consumer received when `state` was
    /// taken, on this loader's topology (which may differ from the one that wrote the state:
    /// see [`State`], "Elastic resume"). Equal to [`Loader::iter_from_with`] with the default
    /// [`ResumeOptions`] (a global batch that does not fit is refused).
    ///
    /// # Errors
    /// [`LoaderError::StateVersion`] for an unknown version, [`LoaderError::StateMismatch`]
    /// naming the first field that differs from this loader (for window sources
    /// `source.seq_len`, `source.stride`, `source.elements`; then `source.records`,
    /// `source.fingerprint`, `seed`, `shuffle`, `epochs`, `drop_remainder`,
    /// `transforms_fingerprint`; for a version-1 state `batch_size`, `drop_remainder`, `rank`,
    /// `world_size` instead of the last two; `global_batch` for a state claiming 0),
    /// [`LoaderError::ElasticResume`] when the global
    /// batch changed and the state's epoch consumed positions that are not a multiple of the
    /// new one, and [`LoaderError::StatePastEnd`] when `next_batch` exceeds the total (for an
    /// unbounded loader, [`MAX_BATCH_NUMBER`]).
    pub fn iter_from(&self, state: &State) -> Result<LoaderIter<S, U, C>, LoaderError> {
        self.iter_from_with(state, ResumeOptions::default())
    }

    /// [`Loader::iter_from`] with options: [`ResumeOptions::round_down`] accepts a global
    /// batch that does not divide the consumed positions by resuming at the start of the
    /// incomplete step, replaying (and flagging in [`Batch::repeat`]) at most `G - 1`
    /// positions.
    ///
    /// ```
    /// use guideloom_loader::{Loader, LoaderError, RangeSource, ResumeOptions};
    /// let one = |g: u64| Loader::builder(RangeSource::new(0, 20, 1).unwrap()).global_batch(g).build().unwrap();
    /// let mut it = one(6).iter();
    /// it.next().unwrap()?; // positions 0..6 consumed
    /// let state = it.state();
    /// assert!(matches!(one(4).iter_from(&state), Err(LoaderError::ElasticResume { consumed: 6, global_batch: 4 })));
    /// let b = one(4).iter_from_with(&state, ResumeOptions::round_down())?.next().unwrap()?;
    /// assert_eq!(b.data, [4, 5, 6, 7]);
    /// assert_eq!(b.repeat, [true, true, false, false]);
    /// # Ok::<(), LoaderError>(())
    /// ```
    ///
    /// # Errors
    /// As [`Loader::iter_from`], without [`LoaderError::ElasticResume`] when rounding down.
    pub fn iter_from_with(
        &self,
        state: &State,
        options: ResumeOptions,
    ) -> Result<LoaderIter<S, U, C>, LoaderError> {
        state.check_against(&self.initial_state(), self.topology())?;
        let (next, replay) = self.rescale(state, options)?;
        // A state's batch number is a user number: an unbounded loader serves batch numbers
        // up to MAX_BATCH_NUMBER, so counting on from any accepted state never overflows (a
        // state at u64::MAX used to leave the iterator waiting for a batch it never asked for).
        let total = self.total_batches().unwrap_or(MAX_BATCH_NUMBER);
        if next > total {
            return Err(LoaderError::StatePastEnd { next_batch: next, total });
        }
        let mut it = self.iter_at(next);
        it.replay = replay;
        Ok(it)
    }

    /// The step of this loader's topology where `state` resumes, and the positions it replays.
    fn rescale(&self, state: &State, options: ResumeOptions) -> Result<(u64, Option<Replay>), LoaderError> {
        let g_new = self.global_batch();
        let g_old = state.global_batch;
        if g_old == 0 {
            return Err(LoaderError::StateMismatch {
                field: "global_batch",
                expected: format!("at least 1 (this loader's is {g_new})"),
                found: "0".into(),
            });
        }
        if g_old == g_new {
            return Ok((state.next_batch, None));
        }
        let n = self.shared.sampler.num_records();
        let drop = self.shared.sampler.config().drop_remainder;
        let per_epoch = |g: u64| {
            if g == 0 {
                0
            } else if drop {
                n / g
            } else {
                n.div_ceil(g)
            }
        };
        let (old_epoch_len, new_epoch_len) = (per_epoch(g_old), per_epoch(g_new));
        if old_epoch_len == 0 {
            // The state's loader had no step at all: nothing was consumed.
            return Ok((0, None));
        }
        let epoch = state.next_batch / old_epoch_len;
        let consumed = (state.next_batch % old_epoch_len).saturating_mul(g_old);
        let steps = consumed / g_new;
        let start = epoch.saturating_mul(new_epoch_len).saturating_add(steps);
        if consumed.is_multiple_of(g_new) {
            Ok((start, None))
        } else if options.round_down {
            Ok((start, Some(Replay { epoch, until: consumed })))
        } else {
            Err(LoaderError::ElasticResume { consumed, global_batch: g_new })
        }
    }

    fn iter_at(&self, next: u64) -> LoaderIter<S, U, C> {
        LoaderIter {
            loader: Loader {
                shared: Arc::clone(&self.shared),
                workers: self.workers,
                prefetch: self.prefetch,
                readahead: self.readahead,
            },
            next,
            end: self.total_batches(),
            done: false,
            pool: None,
            dispatched: next,
            hinted: next,
            replay: None,
        }
    }
}

/// The largest batch number a state of an unbounded loader
/// ([`Builder::unbounded`](crate::Builder::unbounded)) may resume at (2^63): no run reaches
/// it, and counting on from it never overflows a `u64`. [`Loader::iter_from`] refuses a later
/// one with [`LoaderError::StatePastEnd`].
pub const MAX_BATCH_NUMBER: u64 = 1 << 63;

/// How [`Loader::iter_from_with`] treats a state whose global batch differs from the
/// loader's. Default: refuse what does not fit ([`LoaderError::ElasticResume`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ResumeOptions {
    /// Resume at the start of the new step that holds the first unconsumed position, replaying
    /// the consumed positions before it (fewer than the new global batch) flagged in
    /// [`Batch::repeat`] (default `false`: refuse).
    pub round_down: bool,
}

impl ResumeOptions {
    /// The options with [`ResumeOptions::round_down`] on.
    pub fn round_down() -> Self {
        ResumeOptions { round_down: true }
    }
}

/// Positions `< until` of epoch `epoch` were delivered before the restore and are replayed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Replay {
    epoch: u64,
    until: u64,
}

/// The iterator over a loader's batches, in batch order: `Ok(batch)` per batch, or one
/// `Err` at the place of a failed batch, after which it ends.
///
/// With workers it owns a pool of threads (named `guideloom-w<i>`), started on the first
/// `next`; at most `prefetch` batches are in flight or ready ahead of the consumer. When the
/// source and the collation declare their calls bounded and no `map` is set
/// ([`DataSource::reads_bounded`], [`Collate::bounded`]; the token-window fast path over a
/// local storage), `next` produces a queued batch itself instead of waiting for a worker
/// (the batches are the same). Dropping it (or its ending on an error) fires the
/// [`Cancellation`] and joins every worker; a worker still inside a source call that ignores
/// the cancellation after [`SHUTDOWN_GRACE`](crate::SHUTDOWN_GRACE) is detached rather than
/// waited for, so dropping never hangs (that thread exits as soon as the call returns).
pub struct LoaderIter<S: DataSource, U, C: Collate<U>> {
    loader: Loader<S, U, C>,
    next: u64,
    end: Option<u64>,
    done: bool,
    pool: Option<Pool<(), Batch<C::Output>>>,
    /// Batch numbers below this were sent to the pool.
    dispatched: u64,
    /// Batch numbers below this were hinted to the source
    /// ([`Builder::readahead`](crate::Builder::readahead)).
    hinted: u64,
    /// Positions replayed after a rounded-down elastic restore.
    replay: Option<Replay>,
}

impl<S: DataSource, U, C: Collate<U>> std::fmt::Debug for LoaderIter<S, U, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoaderIter")
            .field("next", &self.next)
            .field("end", &self.end)
            .field("done", &self.done)
            .field("threads", &self.pool.as_ref().map_or(0, Pool::threads))
            .finish_non_exhaustive()
    }
}

impl<S, U, C> LoaderIter<S, U, C>
where
    S: DataSource + 'static,
    U: 'static,
    C: Collate<U> + 'static,
    C::Output: 'static,
{
    /// The checkpoint: resuming from it with [`Loader::iter_from`] continues with the next
    /// batch this iterator has not yielded.
    pub fn state(&self) -> State {
        self.loader.state_at(self.next)
    }

    /// Absolute number of the next batch to yield.
    pub fn position(&self) -> u64 {
        self.next
    }

    /// Batches left to yield if none fails, or `None` when unbounded.
    pub fn remaining(&self) -> Option<u64> {
        if self.done {
            return Some(0);
        }
        self.end.map(|e| e.saturating_sub(self.next))
    }

    fn start_pool(&mut self) -> Result<(), LoaderError> {
        let shared = Arc::clone(&self.loader.shared);
        let work = Arc::new(move |number, (), cancel: &Cancellation| shared.produce(number, cancel));
        self.pool = Some(Pool::start(self.loader.workers, work, self.loader.shared.helped)?);
        Ok(())
    }

    fn fail(&mut self, e: LoaderError) -> Option<Result<Batch<C::Output>, LoaderError>> {
        self.done = true;
        if let Some(mut p) = self.pool.take() {
            p.shutdown();
        }
        Some(Err(e))
    }

    /// Flags the replayed positions of `batch`.
    /// Tells the source which records the batches up to `readahead` past those dispatched to
    /// workers read (those not told yet): a batch already in a worker's hands gains nothing
    /// from a hint, so the lead is counted from the first batch not yet dispatched.
    fn read_ahead(&mut self) {
        let k = self.loader.readahead;
        if k == 0 {
            return;
        }
        let limit = self.next.max(self.dispatched).saturating_add(k);
        let limit = self.end.map_or(limit, |e| limit.min(e));
        self.hinted = self.hinted.max(self.next);
        while self.hinted < limit {
            let Some(plan) = self.loader.shared.sampler.batch(self.hinted) else { break };
            self.loader.shared.source.prefetch(&plan.indices);
            self.hinted += 1;
        }
    }

    fn mark_repeats(&self, batch: &mut Batch<C::Output>) {
        if let Some(r) = self.replay.filter(|r| r.epoch == batch.epoch) {
            for (flag, &p) in batch.repeat.iter_mut().zip(&batch.positions) {
                *flag = p < r.until;
            }
        }
    }
}

impl<S, U, C> Iterator for LoaderIter<S, U, C>
where
    S: DataSource + 'static,
    U: 'static,
    C: Collate<U> + 'static,
    C::Output: 'static,
{
    type Item = Result<Batch<C::Output>, LoaderError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done || self.end.is_some_and(|e| self.next >= e) {
            self.done = true;
            return None;
        }
        self.read_ahead();
        if self.loader.workers == 0 {
            let r = self.loader.shared.produce(self.next, &Cancellation::new());
            return match r {
                Ok(mut b) => {
                    self.next += 1;
                    self.mark_repeats(&mut b);
                    Some(Ok(b))
                }
                Err(e) => self.fail(e),
            };
        }
        if self.pool.is_none() {
            if let Err(e) = self.start_pool() {
                return self.fail(e);
            }
        }
        let (prefetch, end) = (self.loader.prefetch as u64, self.end);
        let next = self.next;
        let Some(pool) = self.pool.as_mut() else { panic!("worker pool missing after start") };
        let top_up = |pool: &mut Pool<(), Batch<C::Output>>, dispatched: &mut u64, next: u64| {
            let limit = next.saturating_add(prefetch);
            let limit = end.map_or(limit, |e| limit.min(e));
            while *dispatched < limit && pool.send(*dispatched, ()) {
                *dispatched += 1;
            }
        };
        top_up(pool, &mut self.dispatched, next);
        let result = pool.take(next);
        match result {
            Ok(mut b) => {
                self.next += 1;
                top_up(pool, &mut self.dispatched, self.next);
                self.mark_repeats(&mut b);
                Some(Ok(b))
            }
            Err(e) => self.fail(e),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match self.remaining() {
            Some(r) => (usize::from(r > 0), usize::try_from(r).ok()),
            None => (1, None),
        }
    }
}
