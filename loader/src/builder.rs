//! The one builder of every loader: the options all loaders share (order, sharding, batch
//! size, workers, prefetch, transforms fingerprint) and the `map` / `collate` chain, written
//! once for [`LoaderBuilder`](crate::LoaderBuilder) and
//! [`SequentialBuilder`](crate::sequential::SequentialBuilder) (arrow-rs's
//! `ArrowReaderBuilder<T>` pattern: one generic builder, one impl of the shared setters, one
//! impl per kind for what only that kind has and for `build`).

use std::sync::Arc;

use crate::{BoxError, Collate, LoaderError, MapContext, VecCollate, DEFAULT_WORKERS, MAX_WORKERS};

/// A `map` chain: the source's record to the record the collation takes.
pub(crate) type MapFn<T, U> = Arc<dyn Fn(T, &mut MapContext) -> Result<U, BoxError> + Send + Sync>;

/// What a [`Builder`] builds, with the options only that loader has: [`Indexed`](crate::Indexed)
/// (a [`Loader`](crate::Loader) over a [`DataSource`](crate::DataSource)) or
/// [`Sequential`](crate::sequential::Sequential) (a
/// [`SequentialLoader`](crate::sequential::SequentialLoader) over a
/// [`SequentialSource`](crate::sequential::SequentialSource)). A builder of another kind can be
/// named but not made.
pub trait BuilderKind {
    /// The record the source yields: the input of the first `map`.
    type Item;
}

/// The options every loader takes, with their defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LoaderOptions {
    pub(crate) seed: u64,
    pub(crate) shuffle: bool,
    /// `None`: unbounded.
    pub(crate) epochs: Option<u64>,
    pub(crate) rank: u64,
    pub(crate) world_size: u64,
    pub(crate) batch_size: u64,
    /// Whether [`Builder::batch_size`] was called.
    pub(crate) batch_size_set: bool,
    pub(crate) workers: usize,
    pub(crate) prefetch: Option<usize>,
    pub(crate) transforms: u64,
}

impl Default for LoaderOptions {
    fn default() -> Self {
        LoaderOptions {
            seed: 0,
            shuffle: false,
            epochs: Some(1),
            rank: 0,
            world_size: 1,
            batch_size: 32,
            batch_size_set: false,
            workers: DEFAULT_WORKERS,
            prefetch: None,
            transforms: 0,
        }
    }
}

impl LoaderOptions {
    /// The worker count and the prefetch depth (default `2 * workers`, at least 1) a loader
    /// runs with.
    ///
    /// # Errors
    /// [`LoaderError::InvalidConfig`] for more than [`MAX_WORKERS`] workers, or a prefetch of
    /// 0 with workers.
    pub(crate) fn pool(&self) -> Result<(usize, usize), LoaderError> {
        let bad = |field, detail| Err(LoaderError::InvalidConfig { field, detail });
        if self.workers > MAX_WORKERS {
            return bad("workers", format!("{} worker threads asked; at most {MAX_WORKERS}", self.workers));
        }
        let prefetch = self.prefetch.unwrap_or(2 * self.workers).max(usize::from(self.prefetch.is_none()));
        if self.workers > 0 && prefetch == 0 {
            return bad("prefetch", "must be at least 1 with worker threads".into());
        }
        Ok((self.workers, prefetch))
    }
}

/// Configures a loader: made by [`Loader::builder`](crate::Loader::builder) (a
/// [`LoaderBuilder`](crate::LoaderBuilder), kind [`Indexed`](crate::Indexed)) or
/// [`SequentialLoader::builder`](crate::sequential::SequentialLoader::builder) (a
/// [`SequentialBuilder`](crate::sequential::SequentialBuilder), kind
/// [`Sequential`](crate::sequential::Sequential)).
///
/// The setters every loader has are in one place (below); the kind adds its own
/// (`global_batch`, `drop_remainder`, `readahead` for a [`Loader`](crate::Loader); `cycle`,
/// `window_shuffle`, `end`, `pack` for a sequential one) and its `build`.
///
/// Type parameters: `K` the kind (which holds the source), `U` the record type after `map`
/// (the source's item by default), `C` the collation ([`VecCollate`] by default).
pub struct Builder<K: BuilderKind, U = <K as BuilderKind>::Item, C = VecCollate> {
    pub(crate) kind: K,
    pub(crate) map: MapFn<K::Item, U>,
    pub(crate) collate: C,
    pub(crate) options: LoaderOptions,
    /// Whether a `map` was added (user code the loader cannot bound).
    pub(crate) mapped: bool,
}

impl<K: BuilderKind + std::fmt::Debug, U, C: std::fmt::Debug> std::fmt::Debug for Builder<K, U, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Builder")
            .field("kind", &self.kind)
            .field("collate", &self.collate)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl<K: BuilderKind> Builder<K>
where
    K::Item: 'static,
{
    /// A builder of kind `kind` with the default options, no `map` and [`VecCollate`].
    pub(crate) fn new(kind: K) -> Self {
        Builder {
            kind,
            map: Arc::new(|item, _ctx| Ok(item)),
            collate: VecCollate,
            options: LoaderOptions::default(),
            mapped: false,
        }
    }
}

impl<K: BuilderKind, U, C> Builder<K, U, C> {
    /// Shuffles every epoch, keyed by `(seed, epoch)` (default: no shuffle, seed 0): a
    /// [`Loader`](crate::Loader) visits the records in the epoch's
    /// [`Permutation`](crate::Permutation), a
    /// [`SequentialLoader`](crate::sequential::SequentialLoader) takes its shards in the
    /// epoch's [`shard_order`](crate::sequential::shard_order).
    pub fn shuffle(mut self, seed: u64) -> Self {
        self.options.shuffle = true;
        self.options.seed = seed;
        self
    }

    /// Sets the seed without shuffling (it still keys the per-record RNG, and a sequential
    /// loader's window shuffle).
    pub fn seed(mut self, seed: u64) -> Self {
        self.options.seed = seed;
        self
    }

    /// Number of epochs (default 1).
    pub fn epochs(mut self, epochs: u64) -> Self {
        self.options.epochs = Some(epochs);
        self
    }

    /// Repeats epochs without end: the iterator never ends unless a batch fails (a sequential
    /// loader's also ends at an epoch in which this rank yields no batch).
    pub fn unbounded(mut self) -> Self {
        self.options.epochs = None;
        self
    }

    /// Data-parallel sharding: this is rank `rank` of `world_size` (default 0 of 1).
    pub fn shard(mut self, rank: u64, world_size: u64) -> Self {
        self.options.rank = rank;
        self.options.world_size = world_size;
        self
    }

    /// Records per batch per rank (default 32).
    pub fn batch_size(mut self, batch_size: u64) -> Self {
        self.options.batch_size = batch_size;
        self.options.batch_size_set = true;
        self
    }

    /// Declares a fingerprint of the `map` transforms (default 0: none declared), recorded in
    /// the state ([`State`](crate::State), or the config fingerprint of a
    /// [`SequentialState`](crate::sequential::SequentialState)) so that resuming with other
    /// transforms (another augmentation, another tokenizer) is refused, naming
    /// `transforms_fingerprint` (`config` for a sequential state). The loader cannot hash a
    /// closure: compute it from what shapes your transforms (their names and parameters).
    pub fn transforms_fingerprint(mut self, fingerprint: u64) -> Self {
        self.options.transforms = fingerprint;
        self
    }

    /// Worker threads (default [`DEFAULT_WORKERS`], at most [`MAX_WORKERS`]) running `map`
    /// and the collation, and for a [`Loader`](crate::Loader) the source's reads; 0 produces
    /// batches inline on the consumer's thread. A sequential loader always reads on the
    /// consumer's thread, in order.
    pub fn workers(mut self, workers: usize) -> Self {
        self.options.workers = workers;
        self
    }

    /// Batches that may be in flight or ready ahead of the consumer (default
    /// `2 * workers`); ignored with 0 workers. Bounds the loader's memory to about
    /// `prefetch` batches.
    pub fn prefetch(mut self, prefetch: usize) -> Self {
        self.options.prefetch = Some(prefetch);
        self
    }
}

impl<K: BuilderKind, U: 'static, C> Builder<K, U, C>
where
    K::Item: 'static,
{
    /// Adds a transform run on the workers for every record (or packed window of a
    /// sequential loader), after any earlier `map`. The [`MapContext`] gives the epoch,
    /// position, record index and a per-record RNG (for a sequential loader keyed by seed,
    /// epoch and record identity, [`MapContext::record_id`]).
    pub fn map<V: 'static, F>(self, f: F) -> Builder<K, V, C>
    where
        F: Fn(U, &mut MapContext) -> V + Send + Sync + 'static,
    {
        self.try_map(move |u, ctx| Ok::<V, std::convert::Infallible>(f(u, ctx)))
    }

    /// Adds a fallible transform; an error becomes [`LoaderError::Map`] naming the record.
    pub fn try_map<V: 'static, E, F>(self, f: F) -> Builder<K, V, C>
    where
        F: Fn(U, &mut MapContext) -> Result<V, E> + Send + Sync + 'static,
        E: Into<BoxError>,
    {
        let prev = self.map;
        Builder {
            kind: self.kind,
            map: Arc::new(move |item, ctx| f(prev(item, ctx)?, ctx).map_err(Into::into)),
            collate: self.collate,
            options: self.options,
            mapped: true,
        }
    }

    /// Sets the collation (default [`VecCollate`]).
    pub fn collate<C2: Collate<U>>(self, collate: C2) -> Builder<K, U, C2> {
        Builder { kind: self.kind, map: self.map, collate, options: self.options, mapped: self.mapped }
    }
}
