//! The loader: builder, iterator, worker pool, reorder buffer.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Duration;

use crate::pool::{panic_message, Pool};
use crate::state::{StateConfig, Topology};
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
    /// The global batch asked for with [`LoaderBuilder::global_batch`].
    global_batch: Option<u64>,
    /// Whether [`LoaderBuilder::batch_size`] was called.
    batch_size_set: bool,
    transforms: u64,
    /// Whether a `map` was added (user code the loader cannot bound).
    mapped: bool,
    workers: usize,
    prefetch: Option<usize>,
    readahead: u64,
}

impl<S: DataSource, U, C: std::fmt::Debug> std::fmt::Debug for LoaderBuilder<S, U, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoaderBuilder")
            .field("records", &self.source.len())
            .field("collate", &self.collate)
            .field("config", &self.config)
            .field("global_batch", &self.global_batch)
            .field("transforms_fingerprint", &self.transforms)
            .field("workers", &self.workers)
            .field("prefetch", &self.prefetch)
            .field("readahead", &self.readahead)
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
        self.batch_size_set = true;
        self
    }

    /// Records per global step over all ranks, `G`: the batch size per rank becomes
    /// `G / world_size` (the elastic way to configure a loader: keep `G` and change the world
    /// size). Default: unset (the batch size per rank is [`LoaderBuilder::batch_size`]).
    ///
    /// [`LoaderBuilder::build`] refuses a world size that does not divide `G`
    /// ([`LoaderError::InvalidConfig`] naming both), and a batch size set explicitly that is
    /// not `G / world_size`.
    ///
    /// ```
    /// use guideloom_loader::{Loader, LoaderError, RangeSource};
    /// let six = Loader::builder(RangeSource::new(0, 100, 1)?).global_batch(24).shard(0, 6).build()?;
    /// assert_eq!((six.sampler().config().batch_size, six.global_batch()), (4, 24));
    /// let five = Loader::builder(RangeSource::new(0, 100, 1)?).global_batch(24).shard(0, 5).build();
    /// assert_eq!(
    ///     five.unwrap_err().to_string(),
    ///     "invalid configuration: world_size: the world size 5 does not divide the global batch 24"
    /// );
    /// # Ok::<(), LoaderError>(())
    /// ```
    pub fn global_batch(mut self, global_batch: u64) -> Self {
        self.global_batch = Some(global_batch);
        self
    }

    /// Declares a fingerprint of the `map` transforms (default 0: none declared), recorded in
    /// the [`State`] so that resuming with other transforms (another augmentation, another
    /// tokenizer) is refused, naming `transforms_fingerprint`. The loader cannot hash a
    /// closure: compute it from what shapes your transforms (their names and parameters).
    pub fn transforms_fingerprint(mut self, fingerprint: u64) -> Self {
        self.transforms = fingerprint;
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
            global_batch: self.global_batch,
            batch_size_set: self.batch_size_set,
            transforms: self.transforms,
            mapped: true,
            workers: self.workers,
            prefetch: self.prefetch,
            readahead: self.readahead,
        }
    }

    /// Sets the collation (default [`VecCollate`]).
    pub fn collate<C2: Collate<U>>(self, collate: C2) -> LoaderBuilder<S, U, C2> {
        LoaderBuilder {
            source: self.source,
            map: self.map,
            collate,
            config: self.config,
            global_batch: self.global_batch,
            batch_size_set: self.batch_size_set,
            transforms: self.transforms,
            mapped: self.mapped,
            workers: self.workers,
            prefetch: self.prefetch,
            readahead: self.readahead,
        }
    }

    /// Readahead: before batch `n` is produced, the source is told ([`DataSource::prefetch`])
    /// which records the next `batches` batches after those already handed to workers will
    /// read (batches `m .. m + batches`, where `m` is `n` plus the batches in flight, up to
    /// [`LoaderBuilder::prefetch`]; `m = n` without workers), so a remote storage fetches
    /// their bytes in the background, in the order they will be consumed, a full `batches`
    /// batches before a worker asks for them. Default 0 (off); it never changes the batches.
    pub fn readahead(mut self, batches: u64) -> Self {
        self.readahead = batches;
        self
    }

    /// Builds the loader.
    ///
    /// # Errors
    /// [`LoaderError::InvalidConfig`] for a zero batch size, world size, epoch count or
    /// prefetch (with workers), more than [`MAX_WORKERS`] workers, `rank >= world_size`, or a
    /// [`LoaderBuilder::global_batch`] that the world size does not divide (or that disagrees
    /// with an explicit batch size).
    ///
    /// An empty source, or a `drop_remainder` that leaves no batch, builds a loader with
    /// `len() == 0` whose iterators yield nothing (and start no thread). A
    /// [`StreamWindows`](crate::StreamWindows) source over a stream shorter than one window is
    /// such an empty source ([`Windows::check_fits`](crate::Windows::check_fits) says why);
    /// [`TokenWindows`](crate::TokenWindows) refuses that stream when it is opened.
    pub fn build(mut self) -> Result<Loader<S, U, C>, LoaderError>
    where
        C: Collate<U>,
    {
        if let Some(g) = self.global_batch {
            let w = self.config.world_size;
            let bad = |field, detail| Err(LoaderError::InvalidConfig { field, detail });
            if g == 0 {
                return bad("global_batch", "must be at least 1".into());
            }
            if w == 0 || !g.is_multiple_of(w) {
                return bad("world_size", format!("the world size {w} does not divide the global batch {g}"));
            }
            if self.batch_size_set && self.config.batch_size != g / w {
                return bad(
                    "batch_size",
                    format!(
                        "batch size {} per rank times world size {w} is not the global batch {g}",
                        self.config.batch_size
                    ),
                );
            }
            self.config.batch_size = g / w;
        }
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
        let helped = !self.mapped && self.source.reads_bounded() && self.collate.bounded();
        Ok(Loader {
            shared: Arc::new(Shared {
                helped,
                source: self.source,
                map: self.map,
                collate: self.collate,
                sampler,
                source_id,
                transforms: self.transforms,
            }),
            workers: self.workers,
            prefetch,
            readahead: self.readahead,
        })
    }
}

struct Shared<S: DataSource, U, C> {
    /// Whether the consumer produces a queued batch itself while it waits for a worker: only
    /// when the source and the collation declare their calls bounded and no `map` is set
    /// ([`DataSource::reads_bounded`]), so a call that never returns can only hold a worker,
    /// never the consumer.
    helped: bool,
    source: S,
    map: MapFn<S::Item, U>,
    collate: C,
    sampler: Sampler,
    source_id: SourceId,
    transforms: u64,
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
                record: None,
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
            repeat: vec![false; plan.indices.len()],
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
    readahead: u64,
}

impl<S: DataSource, U, C> std::fmt::Debug for Loader<S, U, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loader")
            .field("sampler", &self.shared.sampler)
            .field("source", &self.shared.source_id)
            .field("workers", &self.workers)
            .field("prefetch", &self.prefetch)
            .field("readahead", &self.readahead)
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
            global_batch: None,
            batch_size_set: false,
            transforms: 0,
            mapped: false,
            workers: DEFAULT_WORKERS,
            prefetch: None,
            readahead: 0,
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
    /// Records per global step over all ranks: `batch_size * world_size`.
    pub fn global_batch(&self) -> u64 {
        let c = self.shared.sampler.config();
        c.batch_size * c.world_size
    }

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
            global_batch: self.global_batch(),
            config: StateConfig::from(self.shared.sampler.config()),
            source: self.shared.source_id,
            transforms_fingerprint: self.shared.transforms,
            topology: None,
        }
    }

    fn topology(&self) -> Topology {
        let c = self.shared.sampler.config();
        Topology { rank: c.rank, world_size: c.world_size, batch_size: c.batch_size }
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

/// The largest batch number a state of an unbounded loader ([`LoaderBuilder::unbounded`])
/// may resume at (2^63): no run reaches it, and counting on from it never overflows a `u64`.
/// [`Loader::iter_from`] refuses a later one with [`LoaderError::StatePastEnd`].
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

/// How long dropping an iterator waits for its workers to leave before detaching the ones
/// still inside a source call that ignores the [`Cancellation`].
pub const SHUTDOWN_GRACE: Duration = Duration::from_millis(500);

/// The iterator over a loader's batches, in batch order: `Ok(batch)` per batch, or one
/// `Err` at the place of a failed batch, after which it ends.
///
/// With workers it owns a pool of threads (named `guideloom-w<i>`), started on the first
/// `next`; at most `prefetch` batches are in flight or ready ahead of the consumer. When the
/// source and the collation declare their calls bounded and no `map` is set
/// ([`DataSource::reads_bounded`], [`Collate::bounded`]; the token-window fast path over a
/// local storage), `next` produces a queued batch itself instead of waiting for a worker
/// (the batches are the same). Dropping
/// it (or its ending on an error) fires the [`Cancellation`] and joins every worker; a worker
/// still inside a source call that ignores the cancellation after [`SHUTDOWN_GRACE`] is
/// detached rather than waited for, so dropping never hangs (that thread exits as soon as the
/// call returns).
pub struct LoaderIter<S: DataSource, U, C: Collate<U>> {
    loader: Loader<S, U, C>,
    next: u64,
    end: Option<u64>,
    done: bool,
    pool: Option<Pool<(), Batch<C::Output>>>,
    /// Batch numbers below this were sent to the pool.
    dispatched: u64,
    /// Batch numbers below this were hinted to the source ([`LoaderBuilder::readahead`]).
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
