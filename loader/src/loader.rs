//! The loader: builder, iterator, worker pool, reorder buffer.

use std::any::Any;
use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use crate::{
    Batch, BoxError, Cancellation, Collate, DataSource, LoaderError, MapContext, Sampler, SamplerConfig,
    SourceId, State, VecCollate, STATE_VERSION,
};

type MapFn<T, U> = Arc<dyn Fn(T, &mut MapContext) -> Result<U, BoxError> + Send + Sync>;

/// Most worker threads a loader starts (a larger request is a configuration error, not an
/// abort when the system runs out of thread stacks).
pub const MAX_WORKERS: usize = 1024;

/// Default number of worker threads.
pub const DEFAULT_WORKERS: usize = 2;

/// Configures a [`Loader`]; made by [`Loader::builder`].
///
/// Type parameters: `S` the source, `U` the record type after `map` (the source's item by
/// default), `C` the collation ([`VecCollate`] by default).
pub struct LoaderBuilder<S: DataSource, U = <S as DataSource>::Item, C = VecCollate> {
    source: S,
    map: MapFn<S::Item, U>,
    collate: C,
    config: SamplerConfig,
    workers: usize,
    prefetch: Option<usize>,
}

impl<S: DataSource, U, C: std::fmt::Debug> std::fmt::Debug for LoaderBuilder<S, U, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoaderBuilder")
            .field("records", &self.source.len())
            .field("collate", &self.collate)
            .field("config", &self.config)
            .field("workers", &self.workers)
            .field("prefetch", &self.prefetch)
            .finish_non_exhaustive()
    }
}

impl<S: DataSource, U: 'static, C> LoaderBuilder<S, U, C>
where
    S::Item: 'static,
{
    /// Shuffles each epoch with the permutation keyed by `(seed, epoch)` (default: no
    /// shuffle, seed 0).
    pub fn shuffle(mut self, seed: u64) -> Self {
        self.config.shuffle = true;
        self.config.seed = seed;
        self
    }

    /// Sets the seed without shuffling (it still keys the per-record RNG).
    pub fn seed(mut self, seed: u64) -> Self {
        self.config.seed = seed;
        self
    }

    /// Number of epochs (default 1).
    pub fn epochs(mut self, epochs: u64) -> Self {
        self.config.epochs = Some(epochs);
        self
    }

    /// Repeats epochs without end (the iterator never ends unless a batch fails).
    pub fn unbounded(mut self) -> Self {
        self.config.epochs = None;
        self
    }

    /// Data-parallel sharding: this is rank `rank` of `world_size` (default 0 of 1).
    pub fn shard(mut self, rank: u64, world_size: u64) -> Self {
        self.config.rank = rank;
        self.config.world_size = world_size;
        self
    }

    /// Records per batch per rank (default 32).
    pub fn batch_size(mut self, batch_size: u64) -> Self {
        self.config.batch_size = batch_size;
        self
    }

    /// Whether each epoch's incomplete final global batch is dropped (default `false`); see
    /// [`Sampler`] for what happens otherwise.
    pub fn drop_remainder(mut self, drop: bool) -> Self {
        self.config.drop_remainder = drop;
        self
    }

    /// Worker threads (default [`DEFAULT_WORKERS`], at most [`MAX_WORKERS`]); 0 produces
    /// batches inline on the consumer's thread.
    pub fn workers(mut self, workers: usize) -> Self {
        self.workers = workers;
        self
    }

    /// Batches that may be in flight or ready ahead of the consumer (default
    /// `2 * workers`); ignored with 0 workers. Bounds the loader's memory to about
    /// `prefetch` batches.
    pub fn prefetch(mut self, prefetch: usize) -> Self {
        self.prefetch = Some(prefetch);
        self
    }

    /// Adds a transform run on the workers for every record, after any earlier `map`.
    /// The [`MapContext`] gives the epoch, position, record index and a per-record RNG.
    pub fn map<V: 'static, F>(self, f: F) -> LoaderBuilder<S, V, C>
    where
        F: Fn(U, &mut MapContext) -> V + Send + Sync + 'static,
    {
        self.try_map(move |u, ctx| Ok::<V, std::convert::Infallible>(f(u, ctx)))
    }

    /// Adds a fallible transform; an error becomes [`LoaderError::Map`] naming the record.
    pub fn try_map<V: 'static, E, F>(self, f: F) -> LoaderBuilder<S, V, C>
    where
        F: Fn(U, &mut MapContext) -> Result<V, E> + Send + Sync + 'static,
        E: Into<BoxError>,
    {
        let prev = self.map;
        LoaderBuilder {
            source: self.source,
            map: Arc::new(move |item, ctx| f(prev(item, ctx)?, ctx).map_err(Into::into)),
            collate: self.collate,
            config: self.config,
            workers: self.workers,
            prefetch: self.prefetch,
        }
    }

    /// Sets the collation (default [`VecCollate`]).
    pub fn collate<C2: Collate<U>>(self, collate: C2) -> LoaderBuilder<S, U, C2> {
        LoaderBuilder {
            source: self.source,
            map: self.map,
            collate,
            config: self.config,
            workers: self.workers,
            prefetch: self.prefetch,
        }
    }

    /// Builds the loader.
    ///
    /// # Errors
    /// [`LoaderError::InvalidConfig`] for a zero batch size, world size, epoch count or
    /// prefetch (with workers), more than [`MAX_WORKERS`] workers, or `rank >= world_size`.
    ///
    /// An empty source, or a `drop_remainder` that leaves no batch, builds a loader with
    /// `len() == 0` whose iterators yield nothing (and start no thread). A
    /// [`StreamWindows`](crate::StreamWindows) source over a stream shorter than one window is
    /// such an empty source ([`Windows::check_fits`](crate::Windows::check_fits) says why);
    /// [`TokenWindows`](crate::TokenWindows) refuses that stream when it is opened.
    pub fn build(self) -> Result<Loader<S, U, C>, LoaderError>
    where
        C: Collate<U>,
    {
        let sampler = Sampler::new(self.source.len(), self.config)?;
        if self.workers > MAX_WORKERS {
            return Err(LoaderError::InvalidConfig {
                field: "workers",
                detail: format!("{} worker threads asked; at most {MAX_WORKERS}", self.workers),
            });
        }
        let prefetch = self.prefetch.unwrap_or(2 * self.workers).max(usize::from(self.prefetch.is_none()));
        if self.workers > 0 && prefetch == 0 {
            return Err(LoaderError::InvalidConfig {
                field: "prefetch",
                detail: "must be at least 1 with worker threads".into(),
            });
        }
        let source_id = SourceId {
            records: self.source.len(),
            fingerprint: self.source.fingerprint(),
            window: self.source.window_params(),
        };
        Ok(Loader {
            shared: Arc::new(Shared {
                source: self.source,
                map: self.map,
                collate: self.collate,
                sampler,
                source_id,
            }),
            workers: self.workers,
            prefetch,
        })
    }
}

struct Shared<S: DataSource, U, C> {
    source: S,
    map: MapFn<S::Item, U>,
    collate: C,
    sampler: Sampler,
    source_id: SourceId,
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

impl<S: DataSource, U, C: Collate<U>> Shared<S, U, C> {
    /// Produces batch `number` (which must exist), turning errors and panics of user code into
    /// [`LoaderError::InBatch`].
    fn produce(&self, number: u64, cancel: &Cancellation) -> Result<Batch<C::Output>, LoaderError> {
        let Some(plan) = self.sampler.batch(number) else {
            panic!("batch {number} requested past the loader's end");
        };
        let wrap = |e| LoaderError::InBatch { batch: number, epoch: plan.epoch, source: Box::new(e) };
        let fetched =
            catch_unwind(AssertUnwindSafe(|| self.source.get_many_cancellable(&plan.indices, cancel)));
        let items = match fetched {
            Ok(Ok(items)) => items,
            Ok(Err(e)) => return Err(wrap(e)),
            Err(payload) => return Err(wrap(self.locate_panic(&plan.indices, &*payload, cancel))),
        };
        if items.len() != plan.indices.len() {
            return Err(wrap(LoaderError::WrongCount {
                expected: plan.indices.len() as u64,
                found: items.len() as u64,
            }));
        }
        let mut mapped = Vec::with_capacity(items.len());
        for (i, item) in items.into_iter().enumerate() {
            let index = plan.indices[i];
            let mut ctx = MapContext {
                seed: self.sampler.config().seed,
                epoch: plan.epoch,
                position: plan.positions[i],
                index,
                batch: number,
                padding: plan.padding[i],
                rng: None,
            };
            match catch_unwind(AssertUnwindSafe(|| (self.map)(item, &mut ctx))) {
                Ok(Ok(u)) => mapped.push(u),
                Ok(Err(source)) => return Err(wrap(LoaderError::Map { index, source })),
                Err(p) => {
                    return Err(wrap(LoaderError::Panic { index: Some(index), message: panic_message(&*p) }))
                }
            }
        }
        let data = match catch_unwind(AssertUnwindSafe(|| self.collate.collate(mapped))) {
            Ok(Ok(d)) => d,
            Ok(Err(e)) => return Err(wrap(e)),
            Err(p) => return Err(wrap(LoaderError::Panic { index: None, message: panic_message(&*p) })),
        };
        Ok(Batch {
            data,
            indices: plan.indices,
            positions: plan.positions,
            padding: plan.padding,
            epoch: plan.epoch,
            number,
        })
    }

    /// After `get_many` panicked: retries the records one at a time to name the first one whose
    /// `get` panics (error path only; skipped once cancelled).
    fn locate_panic(
        &self,
        indices: &[u64],
        payload: &(dyn Any + Send),
        cancel: &Cancellation,
    ) -> LoaderError {
        for &i in indices {
            if cancel.is_cancelled() {
                break;
            }
            if let Err(p) = catch_unwind(AssertUnwindSafe(|| self.source.get(i))) {
                return LoaderError::Panic { index: Some(i), message: panic_message(&*p) };
            }
        }
        LoaderError::Panic { index: None, message: panic_message(payload) }
    }
}

/// A configured data loader: a data source, a sampler, a `map`, a collation and a worker
/// pool. Cheap to iterate many times; each [`Loader::iter`] starts its own workers.
///
/// ```
/// use guideloom_loader::{Loader, VecSource};
/// let loader = Loader::builder(VecSource::new((0..10u32).collect()))
///     .shuffle(7)
///     .epochs(2)
///     .batch_size(4)
///     .map(|x, _ctx| x * 10)
///     .workers(2)
///     .build()?;
/// assert_eq!(loader.len(), 3); // batches per epoch: 4 + 4 + 2 records
/// let batches: Vec<_> = loader.iter().collect::<Result<_, _>>()?;
/// assert_eq!(batches.len(), 6);
/// assert_eq!(batches[2].data.len(), 2);
/// let mut epoch0: Vec<u32> = batches[..3].iter().flat_map(|b| b.data.clone()).collect();
/// epoch0.sort();
/// assert_eq!(epoch0, [0, 10, 20, 30, 40, 50, 60, 70, 80, 90]);
/// # Ok::<(), guideloom_loader::LoaderError>(())
/// ```
pub struct Loader<S: DataSource, U = <S as DataSource>::Item, C = VecCollate> {
    shared: Arc<Shared<S, U, C>>,
    workers: usize,
    prefetch: usize,
}

impl<S: DataSource, U, C> std::fmt::Debug for Loader<S, U, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loader")
            .field("sampler", &self.shared.sampler)
            .field("source", &self.shared.source_id)
            .field("workers", &self.workers)
            .field("prefetch", &self.prefetch)
            .finish_non_exhaustive()
    }
}

impl<S: DataSource + 'static> Loader<S>
where
    S::Item: 'static,
{
    /// Starts configuring a loader over `source` (to share a source, pass an `Arc`).
    pub fn builder(source: S) -> LoaderBuilder<S> {
        LoaderBuilder {
            source,
            map: Arc::new(|item, _ctx| Ok(item)),
            collate: VecCollate,
            config: SamplerConfig::default(),
            workers: DEFAULT_WORKERS,
            prefetch: None,
        }
    }
}

impl<S, U, C> Loader<S, U, C>
where
    S: DataSource + 'static,
    U: 'static,
    C: Collate<U> + 'static,
    C::Output: 'static,
{
    /// Batches per epoch of this rank; every epoch and every rank has this many.
    pub fn len(&self) -> u64 {
        self.shared.sampler.batches_per_epoch()
    }

    /// Whether an epoch has no batch (an empty source, or `drop_remainder` with fewer records
    /// than one global batch): the loader then yields nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Batches over all epochs, or `None` when unbounded.
    pub fn total_batches(&self) -> Option<u64> {
        self.shared.sampler.total_batches()
    }

    /// The sampler (a pure function from batch number to record indices).
    pub fn sampler(&self) -> &Sampler {
        &self.shared.sampler
    }

    /// The data source.
    pub fn source(&self) -> &S {
        &self.shared.source
    }

    /// The state of an iterator that has yielded nothing.
    pub fn initial_state(&self) -> State {
        self.state_at(0)
    }

    fn state_at(&self, next_batch: u64) -> State {
        State {
            version: STATE_VERSION,
            next_batch,
            config: *self.shared.sampler.config(),
            source: self.shared.source_id,
        }
    }

    /// Produces batch `number` alone, on the calling thread (for debugging "what did batch N
    /// see?"), or `None` past the last batch. Equal to what an iterator yields at `number`.
    ///
    /// # Errors
    /// As the iterator: [`LoaderError::InBatch`] wrapping the failure.
    pub fn batch(&self, number: u64) -> Option<Result<Batch<C::Output>, LoaderError>> {
        self.shared.sampler.batch(number)?;
        Some(self.shared.produce(number, &Cancellation::new()))
    }

    /// Iterates over all batches from the first.
    pub fn iter(&self) -> LoaderIter<S, U, C> {
        self.iter_at(0)
    }

    /// Iterates from the batch after the last one the consumer received when `state` was
    /// taken.
    ///
    /// # Errors
    /// [`LoaderError::StateVersion`] for an unknown version, [`LoaderError::StateMismatch`]
    /// naming the first field that differs from this loader (for window sources
    /// `source.seq_len`, `source.stride`, `source.elements`; then `source.records`,
    /// `source.fingerprint`, `seed`, `shuffle`, `epochs`, `batch_size`, `drop_remainder`,
    /// `rank`, `world_size`), and
    /// [`LoaderError::StatePastEnd`] when `next_batch` exceeds the total.
    pub fn iter_from(&self, state: &State) -> Result<LoaderIter<S, U, C>, LoaderError> {
        state.check_against(&self.initial_state())?;
        if let Some(total) = self.total_batches() {
            if state.next_batch > total {
                return Err(LoaderError::StatePastEnd { next_batch: state.next_batch, total });
            }
        }
        Ok(self.iter_at(state.next_batch))
    }

    fn iter_at(&self, next: u64) -> LoaderIter<S, U, C> {
        LoaderIter {
            loader: Loader {
                shared: Arc::clone(&self.shared),
                workers: self.workers,
                prefetch: self.prefetch,
            },
            next,
            end: self.total_batches(),
            done: false,
            pool: None,
        }
    }
}

type BatchResult<O> = Result<Batch<O>, LoaderError>;

/// How long dropping an iterator waits for its workers to leave before detaching the ones
/// still inside a source call that ignores the [`Cancellation`].
pub const SHUTDOWN_GRACE: Duration = Duration::from_millis(500);

struct Pool<O> {
    jobs: Option<Sender<u64>>,
    results: Receiver<(u64, BatchResult<O>)>,
    handles: Vec<JoinHandle<()>>,
    /// Receives a worker's number when it leaves its loop (sent by [`ExitNotice`]).
    exited: Receiver<usize>,
    cancel: Cancellation,
    dispatched: u64,
    reorder: BTreeMap<u64, BatchResult<O>>,
}

/// Sends its worker's number on drop, that is when the worker leaves its loop, even by
/// unwinding.
struct ExitNotice(usize, Sender<usize>);

impl Drop for ExitNotice {
    fn drop(&mut self) {
        let _ = self.1.send(self.0);
    }
}

impl<O> Pool<O> {
    /// Fires the cancellation, closes the job queue, and joins every worker that leaves within
    /// [`SHUTDOWN_GRACE`]. Workers finish the batch in hand (sources that block observe the
    /// cancellation) and exit; a worker stuck in a source call that ignores the cancellation
    /// is detached instead (it exits when that call returns: its job queue is closed and its
    /// result has no receiver), so shutting down never hangs.
    fn shutdown(&mut self) {
        self.cancel.cancel();
        self.jobs = None;
        self.reorder.clear();
        let deadline = Instant::now() + SHUTDOWN_GRACE;
        let mut left = vec![false; self.handles.len()];
        let mut waiting = self.handles.len();
        while waiting > 0 {
            match self.exited.recv_deadline(deadline) {
                Ok(i) => {
                    if let Some(l) = left.get_mut(i).filter(|l| !**l) {
                        *l = true;
                        waiting -= 1;
                    }
                }
                Err(_) => break,
            }
        }
        for (h, left) in self.handles.drain(..).zip(left) {
            if left || h.is_finished() {
                // A worker catches every panic of user code; a join error would be a loader
                // bug, and there is nobody left to report it to.
                let _ = h.join();
            }
            // Otherwise dropping the handle detaches the stuck worker.
        }
    }
}

impl<O> Drop for Pool<O> {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The iterator over a loader's batches, in batch order: `Ok(batch)` per batch, or one
/// `Err` at the place of a failed batch, after which it ends.
///
/// With workers it owns a pool of threads (named `guideloom-w<i>`), started on the first
/// `next`; at most `prefetch` batches are in flight or ready ahead of the consumer. Dropping
/// it (or its ending on an error) fires the [`Cancellation`] and joins every worker; a worker
/// still inside a source call that ignores the cancellation after [`SHUTDOWN_GRACE`] is
/// detached rather than waited for, so dropping never hangs (that thread exits as soon as the
/// call returns).
pub struct LoaderIter<S: DataSource, U, C: Collate<U>> {
    loader: Loader<S, U, C>,
    next: u64,
    end: Option<u64>,
    done: bool,
    pool: Option<Pool<C::Output>>,
}

impl<S: DataSource, U, C: Collate<U>> std::fmt::Debug for LoaderIter<S, U, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoaderIter")
            .field("next", &self.next)
            .field("end", &self.end)
            .field("done", &self.done)
            .field("threads", &self.pool.as_ref().map_or(0, |p| p.handles.len()))
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
        let (job_tx, job_rx) = crossbeam_channel::unbounded::<u64>();
        let (res_tx, res_rx) = crossbeam_channel::unbounded();
        let (exit_tx, exit_rx) = crossbeam_channel::unbounded();
        let mut pool = Pool {
            jobs: Some(job_tx),
            results: res_rx,
            exited: exit_rx,
            handles: Vec::with_capacity(self.loader.workers),
            cancel: Cancellation::new(),
            dispatched: self.next,
            reorder: BTreeMap::new(),
        };
        for i in 0..self.loader.workers {
            let shared = Arc::clone(&self.loader.shared);
            let (jobs, results, cancel) = (job_rx.clone(), res_tx.clone(), pool.cancel.clone());
            let notice = ExitNotice(i, exit_tx.clone());
            let spawned = std::thread::Builder::new().name(format!("guideloom-w{i}")).spawn(move || {
                let _notice = notice;
                while let Ok(number) = jobs.recv() {
                    if cancel.is_cancelled() {
                        break;
                    }
                    // `produce` already turns panics of user code into errors; this catches a
                    // loader bug so the consumer still gets an `Err` instead of waiting forever.
                    let r = catch_unwind(AssertUnwindSafe(|| shared.produce(number, &cancel)))
                        .unwrap_or_else(|p| {
                            Err(LoaderError::Panic { index: None, message: panic_message(&*p) })
                        });
                    if results.send((number, r)).is_err() {
                        break;
                    }
                }
            });
            match spawned {
                Ok(h) => pool.handles.push(h),
                Err(e) => return Err(LoaderError::Spawn(e)), // `pool` drops: joins those started
            }
        }
        self.pool = Some(pool);
        Ok(())
    }

    fn fail(&mut self, e: LoaderError) -> Option<Result<Batch<C::Output>, LoaderError>> {
        self.done = true;
        if let Some(mut p) = self.pool.take() {
            p.shutdown();
        }
        Some(Err(e))
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
        if self.loader.workers == 0 {
            let r = self.loader.shared.produce(self.next, &Cancellation::new());
            return match r {
                Ok(b) => {
                    self.next += 1;
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
        let top_up = |pool: &mut Pool<C::Output>, next: u64| {
            let limit = next.saturating_add(prefetch);
            let limit = end.map_or(limit, |e| limit.min(e));
            while pool.dispatched < limit {
                match &pool.jobs {
                    Some(tx) if tx.send(pool.dispatched).is_ok() => pool.dispatched += 1,
                    _ => break,
                }
            }
        };
        top_up(pool, next);
        let result = loop {
            if let Some(r) = pool.reorder.remove(&next) {
                break r;
            }
            match pool.results.recv() {
                Ok((n, r)) => {
                    pool.reorder.insert(n, r);
                }
                Err(_) => {
                    break Err(LoaderError::Panic {
                        index: None,
                        message: format!("every worker exited while batch {next} was pending"),
                    })
                }
            }
        };
        match result {
            Ok(b) => {
                self.next += 1;
                top_up(pool, self.next);
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
