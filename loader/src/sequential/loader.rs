//! The sequential loader: builder, producer (the reading stage, on the consumer's thread),
//! worker pool (`map` and collation) and iterator.

use std::collections::{BTreeSet, VecDeque};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use crate::pool::{panic_message, Pool};
use crate::rng::record_seed;
use crate::sequential::deal::{deal, shard_order};
use crate::sequential::state::{SequentialState, ShardCursor, SEQUENTIAL_STATE_VERSION};
use crate::sequential::stream::{PackOps, Packed, Packer, RankStream, StreamConfig, StreamCursor, VecOps};
use crate::sequential::{RecordId, SequentialSource};
use crate::{
    fingerprint_words, BoxError, Cancellation, Collate, LoaderError, MapContext, VecCollate, DEFAULT_WORKERS,
    MAX_WORKERS,
};

type MapFn<T, U> = Arc<dyn Fn(T, &mut MapContext) -> Result<U, BoxError> + Send + Sync>;
/// Packing: the window length and how to cut the record type.
type PackSpec<T> = (u64, Arc<dyn PackOps<T>>);
/// The worker pool of a sequential iterator.
type BatchPool<T, O> = Pool<Raw<T>, SequentialBatch<O>>;

/// Most ranks a sequential loader deals shards to.
const MAX_WORLD_SIZE: u64 = 1 << 20;
/// Most shards open at once in a rank.
const MAX_CYCLE: u64 = 1 << 16;
/// Most records of a shuffle window.
const MAX_WINDOW: u64 = 1 << 24;

const TAG_CONFIG: u64 = u64::from_le_bytes(*b"glseqcfg");
const TAG_SOURCE: u64 = u64::from_le_bytes(*b"glseqsrc");

/// The trainer's stop hook of [`SequentialEnd::Stop`]: called before each batch; `true`
/// takes the batch, `false` ends the epoch here.
pub type StopHook = Arc<dyn Fn(&StopQuery) -> bool + Send + Sync>;

/// What the [`StopHook`] is asked before a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StopQuery {
    /// The epoch.
    pub epoch: u64,
    /// The batch's step in the epoch.
    pub step: u64,
    /// Records (or windows) this rank read for the batch.
    pub records: u64,
    /// Whether they make a full batch (`records == batch_size`).
    pub full: bool,
}

/// How an epoch ends when ranks hold different numbers of records.
///
/// Data-parallel training needs every rank to take the same number of steps: with lengths
/// known ([`ShardInfo::len_hint`](crate::ShardInfo) on every shard) the loader computes them
/// ([`SequentialEnd::Drop`], [`SequentialEnd::Pad`]); without, the trainer decides
/// ([`SequentialEnd::Stop`]).
#[derive(Clone, Default)]
pub enum SequentialEnd {
    /// Each rank reads its shards to the end; its last batch of an epoch may be short, and
    /// ranks may take different numbers of steps (default).
    #[default]
    Exhaust,
    /// Every rank takes `min over ranks of floor(records_r / B)` steps; the records left are
    /// not delivered and are reported ([`Dropped::Records`]). Needs every length hint.
    Drop,
    /// Every rank takes `max over ranks of ceil(records_r / B)` steps; a rank whose records
    /// run out re-reads its list from the start, flagged as padding. Needs every length hint.
    Pad,
    /// Before each batch the hook is asked (see [`StopQuery`]); the trainer all-reduces
    /// "every rank has a full batch" there. When it says no, the epoch ends and the rest of
    /// this rank's stream is reported ([`Dropped::Rest`]).
    Stop(StopHook),
}

impl std::fmt::Debug for SequentialEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SequentialEnd::Exhaust => "Exhaust",
            SequentialEnd::Drop => "Drop",
            SequentialEnd::Pad => "Pad",
            SequentialEnd::Stop(_) => "Stop(..)",
        })
    }
}

impl SequentialEnd {
    fn tag(&self) -> u64 {
        match self {
            SequentialEnd::Exhaust => 0,
            SequentialEnd::Drop => 1,
            SequentialEnd::Pad => 2,
            SequentialEnd::Stop(_) => 3,
        }
    }
}

/// Records of an epoch a rank did not deliver, reported by [`SequentialIter::take_dropped`].
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Dropped {
    /// Records `start..end` of `shard` ([`SequentialEnd::Drop`]).
    Records {
        /// The epoch.
        epoch: u64,
        /// The shard.
        shard: u64,
        /// First record not delivered.
        start: u64,
        /// One past the last.
        end: u64,
    },
    /// The tokens of one record from `record.offset` on: the end of a packed stream, fewer
    /// tokens than one window.
    Tokens {
        /// The epoch.
        epoch: u64,
        /// The record and the first token not delivered.
        record: RecordId,
    },
    /// Everything of a shard from a cursor on, its length unknown ([`SequentialEnd::Stop`]).
    Rest {
        /// The epoch.
        epoch: u64,
        /// The shard and where its undelivered records start.
        from: ShardCursor,
    },
}

/// One batch of one rank of a [`SequentialLoader`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SequentialBatch<T> {
    /// The collated records.
    pub data: T,
    /// The records' identities, in batch order.
    pub records: Vec<RecordId>,
    /// `true` for padding records ([`SequentialEnd::Pad`]).
    pub padding: Vec<bool>,
    /// The epoch.
    pub epoch: u64,
    /// The batch's step in its epoch.
    pub step: u64,
    /// Batches this rank delivered before this one, since the start of epoch 0.
    pub number: u64,
}

impl<T> SequentialBatch<T> {
    /// Number of records (padding included).
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether the batch holds no record (never true for a batch a loader yields).
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }
}

/// The options that shape the order.
#[derive(Debug, Clone)]
struct Config {
    seed: u64,
    shuffle: bool,
    epochs: Option<u64>,
    batch_size: u64,
    rank: u64,
    world_size: u64,
    end: SequentialEnd,
}

/// Configures a [`SequentialLoader`]; made by [`SequentialLoader::builder`].
pub struct SequentialBuilder<S: SequentialSource, U = <S as SequentialSource>::Item, C = VecCollate> {
    source: S,
    map: MapFn<S::Item, U>,
    collate: C,
    cfg: Config,
    cycle: u64,
    window: u64,
    pack: Option<PackSpec<S::Item>>,
    transforms: u64,
    workers: usize,
    prefetch: Option<usize>,
}

impl<S: SequentialSource, U, C: std::fmt::Debug> std::fmt::Debug for SequentialBuilder<S, U, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SequentialBuilder")
            .field("config", &self.cfg)
            .field("cycle", &self.cycle)
            .field("window", &self.window)
            .field("pack", &self.pack.as_ref().map(|p| p.0))
            .field("collate", &self.collate)
            .field("workers", &self.workers)
            .finish_non_exhaustive()
    }
}

impl<S: SequentialSource + 'static> SequentialLoader<S>
where
    S::Item: 'static,
{
    /// Starts configuring a loader over `source`: one epoch, batch size 32, rank 0 of 1,
    /// shards in their order, one shard open at a time (`cycle` 1), no window shuffle, no
    /// packing, [`SequentialEnd::Exhaust`], [`DEFAULT_WORKERS`] workers.
    pub fn builder(source: S) -> SequentialBuilder<S> {
        SequentialBuilder {
            source,
            map: Arc::new(|item, _ctx| Ok(item)),
            collate: VecCollate,
            cfg: Config {
                seed: 0,
                shuffle: false,
                epochs: Some(1),
                batch_size: 32,
                rank: 0,
                world_size: 1,
                end: SequentialEnd::Exhaust,
            },
            cycle: 1,
            window: 1,
            pack: None,
            transforms: 0,
            workers: DEFAULT_WORKERS,
            prefetch: None,
        }
    }
}

impl<S: SequentialSource, U: 'static, C> SequentialBuilder<S, U, C>
where
    S::Item: 'static,
{
    /// Permutes the shard order every epoch, keyed by `(seed, epoch)` ([`shard_order`];
    /// default: shards in their order, seed 0).
    pub fn shuffle(mut self, seed: u64) -> Self {
        self.cfg.shuffle = true;
        self.cfg.seed = seed;
        self
    }

    /// Sets the seed without shuffling the shard order (it still keys the window shuffle and
    /// the per-record RNG).
    pub fn seed(mut self, seed: u64) -> Self {
        self.cfg.seed = seed;
        self
    }

    /// Number of epochs (default 1).
    pub fn epochs(mut self, epochs: u64) -> Self {
        self.cfg.epochs = Some(epochs);
        self
    }

    /// Repeats epochs without end (an epoch in which this rank yields no batch ends the
    /// iteration).
    pub fn unbounded(mut self) -> Self {
        self.cfg.epochs = None;
        self
    }

    /// Data-parallel sharding: this is rank `rank` of `world_size` (default 0 of 1).
    pub fn shard(mut self, rank: u64, world_size: u64) -> Self {
        self.cfg.rank = rank;
        self.cfg.world_size = world_size;
        self
    }

    /// Records per batch (default 32).
    pub fn batch_size(mut self, batch_size: u64) -> Self {
        self.cfg.batch_size = batch_size;
        self
    }

    /// Shards a rank reads at once, taking one record from each in turn (default 1: one shard
    /// after the other). When a shard ends, the next shard of the rank's list takes its slot.
    pub fn cycle(mut self, cycle: u64) -> Self {
        self.cycle = cycle;
        self
    }

    /// Shuffles each shard's records inside windows of `window` records (a bijection of each
    /// window, keyed by seed, shard, window start and epoch); the loader holds `cycle`
    /// windows. 1 (the default) turns it off.
    pub fn window_shuffle(mut self, window: u64) -> Self {
        self.window = window;
        self
    }

    /// How an epoch ends (default [`SequentialEnd::Exhaust`]).
    pub fn end(mut self, end: SequentialEnd) -> Self {
        self.cfg.end = end;
        self
    }

    /// Declares a fingerprint of the transforms (default 0), recorded in the state's config
    /// fingerprint.
    pub fn transforms_fingerprint(mut self, fingerprint: u64) -> Self {
        self.transforms = fingerprint;
        self
    }

    /// Worker threads running `map` and the collation (default [`DEFAULT_WORKERS`], at most
    /// [`MAX_WORKERS`]); 0 runs them on the consumer's thread. Reading always happens on the
    /// consumer's thread, in order.
    pub fn workers(mut self, workers: usize) -> Self {
        self.workers = workers;
        self
    }

    /// Batches read ahead of the consumer (default `2 * workers`); ignored with 0 workers.
    pub fn prefetch(mut self, prefetch: usize) -> Self {
        self.prefetch = Some(prefetch);
        self
    }

    /// Adds a transform run on the workers for every record (or packed window), after any
    /// earlier `map`. Its [`MapContext`] names the record ([`MapContext::record_id`]) and
    /// gives a per-record RNG keyed by seed, epoch and record identity.
    pub fn map<V: 'static, F>(self, f: F) -> SequentialBuilder<S, V, C>
    where
        F: Fn(U, &mut MapContext) -> V + Send + Sync + 'static,
    {
        self.try_map(move |u, ctx| Ok::<V, std::convert::Infallible>(f(u, ctx)))
    }

    /// Adds a fallible transform; an error becomes [`LoaderError::Map`] naming the record.
    pub fn try_map<V: 'static, E, F>(self, f: F) -> SequentialBuilder<S, V, C>
    where
        F: Fn(U, &mut MapContext) -> Result<V, E> + Send + Sync + 'static,
        E: Into<BoxError>,
    {
        let prev = self.map;
        SequentialBuilder {
            source: self.source,
            map: Arc::new(move |item, ctx| f(prev(item, ctx)?, ctx).map_err(Into::into)),
            collate: self.collate,
            cfg: self.cfg,
            cycle: self.cycle,
            window: self.window,
            pack: self.pack,
            transforms: self.transforms,
            workers: self.workers,
            prefetch: self.prefetch,
        }
    }

    /// Sets the collation (default [`VecCollate`]).
    pub fn collate<C2: Collate<U>>(self, collate: C2) -> SequentialBuilder<S, U, C2> {
        SequentialBuilder {
            source: self.source,
            map: self.map,
            collate,
            cfg: self.cfg,
            cycle: self.cycle,
            window: self.window,
            pack: self.pack,
            transforms: self.transforms,
            workers: self.workers,
            prefetch: self.prefetch,
        }
    }

    /// Builds the loader.
    ///
    /// # Errors
    /// [`LoaderError::InvalidConfig`] for a zero batch size, world size, epoch count, cycle,
    /// window or prefetch (with workers), more than [`MAX_WORKERS`] workers, a world size over
    /// 2^20, `rank >= world_size`, a cycle over 2^16 or a window over 2^24 records, packing
    /// with `seq_len` 0, and [`SequentialEnd::Drop`] or [`SequentialEnd::Pad`] over a source
    /// with a shard of unknown length, or with packing (windows per shard are not known).
    pub fn build(self) -> Result<SequentialLoader<S, U, C>, LoaderError>
    where
        C: Collate<U>,
    {
        let bad = |field, detail: String| Err(LoaderError::InvalidConfig { field, detail });
        let c = &self.cfg;
        if c.batch_size == 0 {
            return bad("batch_size", "must be at least 1".into());
        }
        if c.world_size == 0 || c.world_size > MAX_WORLD_SIZE {
            return bad("world_size", format!("must be 1 to {MAX_WORLD_SIZE}, got {}", c.world_size));
        }
        if c.rank >= c.world_size {
            return bad("rank", format!("rank {} is not below world size {}", c.rank, c.world_size));
        }
        if c.epochs == Some(0) {
            return bad("epochs", "must be at least 1 (or unbounded)".into());
        }
        if self.cycle == 0 || self.cycle > MAX_CYCLE {
            return bad("cycle", format!("must be 1 to {MAX_CYCLE}, got {}", self.cycle));
        }
        if self.window == 0 || self.window > MAX_WINDOW {
            return bad("window", format!("must be 1 to {MAX_WINDOW}, got {}", self.window));
        }
        if self.workers > MAX_WORKERS {
            return bad("workers", format!("{} worker threads asked; at most {MAX_WORKERS}", self.workers));
        }
        let prefetch = self.prefetch.unwrap_or(2 * self.workers).max(usize::from(self.prefetch.is_none()));
        if self.workers > 0 && prefetch == 0 {
            return bad("prefetch", "must be at least 1 with worker threads".into());
        }
        if self.pack.as_ref().is_some_and(|p| p.0 == 0) {
            return bad("seq_len", "must be at least 1".into());
        }
        let infos = self.source.shards();
        let hints: Option<Vec<u64>> = infos.iter().map(|i| i.len_hint).collect();
        if matches!(c.end, SequentialEnd::Drop | SequentialEnd::Pad) {
            if let Some(missing) = infos.iter().position(|i| i.len_hint.is_none()) {
                return bad(
                    "end",
                    format!(
                        "{:?} needs the length of every shard; shard {missing} has no length hint",
                        c.end
                    ),
                );
            }
            if self.pack.is_some() {
                return bad(
                    "end",
                    format!("{:?} needs records of known count; packed windows are not", c.end),
                );
            }
        }
        let shards = infos.len() as u64;
        let mut source_words = vec![TAG_SOURCE, self.source.fingerprint(), shards];
        source_words.extend(infos.iter().map(|i| i.len_hint.map_or(u64::MAX, |h| h)));
        let config_fp = fingerprint_words(&[
            TAG_CONFIG,
            c.seed,
            u64::from(c.shuffle),
            u64::from(c.epochs.is_some()),
            c.epochs.unwrap_or(0),
            c.batch_size,
            self.cycle,
            self.window,
            c.end.tag(),
            self.pack.as_ref().map_or(0, |p| p.0),
            self.transforms,
        ]);
        let stream = StreamConfig {
            seed: c.seed,
            window: self.window,
            cycle: self.cycle as usize,
            hints: hints.map(Arc::new),
        };
        Ok(SequentialLoader {
            shared: Arc::new(Shared {
                source: self.source,
                map: self.map,
                collate: self.collate,
                cfg: self.cfg,
                stream,
                shards,
                pack: self.pack,
                config_fp,
                source_fp: fingerprint_words(&source_words),
            }),
            workers: self.workers,
            prefetch,
        })
    }
}

impl<S, E, U: 'static, C> SequentialBuilder<S, U, C>
where
    S: SequentialSource<Item = Vec<E>>,
    E: Copy + Send + Sync + 'static,
{
    /// Packs the rank's token records (in stream order, across record and shard boundaries)
    /// into windows of `seq_len` tokens: each record of the loader is then one window. The
    /// last tokens of a rank's epoch, fewer than one window, are reported
    /// ([`Dropped::Tokens`]). A window's identity is the record and token where it starts.
    /// With one rank, `cycle` 1 and no shuffle, the windows are those of the concatenated
    /// records cut every `seq_len` tokens (what the indexed loader reads from a storage
    /// ingested from the same records).
    pub fn pack(mut self, seq_len: u64) -> Self {
        self.pack = Some((seq_len, Arc::new(VecOps)));
        self
    }
}

/// What the loader, its iterators and workers share.
struct Shared<S: SequentialSource, U, C> {
    source: S,
    map: MapFn<S::Item, U>,
    collate: C,
    cfg: Config,
    stream: StreamConfig,
    shards: u64,
    pack: Option<PackSpec<S::Item>>,
    config_fp: u64,
    source_fp: u64,
}

impl<S: SequentialSource, U, C> Shared<S, U, C> {
    /// The lists of every rank in `epoch` (entries in the epoch's shard order).
    fn standard(&self, epoch: u64) -> Vec<Vec<ShardCursor>> {
        self.standard_for(epoch, self.cfg.world_size)
    }

    /// Deals `entries` (in the epoch's order) to `world` ranks.
    fn deal_entries(&self, entries: &[ShardCursor], world: u64) -> Vec<Vec<ShardCursor>> {
        let lengths: Option<Vec<u64>> = entries.iter().map(|e| self.stream.left(e)).collect();
        deal(entries.len(), lengths.as_deref(), world)
            .into_iter()
            .map(|idx| idx.into_iter().map(|i| entries[i]).collect())
            .collect()
    }

    /// The step count of an epoch whose ranks hold `lists`, plus `done` steps already taken.
    fn steps(&self, lists: &[Vec<ShardCursor>], done: u64) -> Option<u64> {
        let records = |l: &Vec<ShardCursor>| l.iter().map(|e| self.stream.left(e).unwrap_or(0)).sum::<u64>();
        let b = self.cfg.batch_size;
        let per_rank = lists.iter().map(records);
        match self.cfg.end {
            SequentialEnd::Drop => Some(done.saturating_add(per_rank.map(|r| r / b).min().unwrap_or(0))),
            SequentialEnd::Pad => {
                Some(done.saturating_add(per_rank.map(|r| r.div_ceil(b)).max().unwrap_or(0)))
            }
            _ => None,
        }
    }

    fn check(&self, state: &SequentialState) -> Result<(), LoaderError> {
        if state.version != SEQUENTIAL_STATE_VERSION {
            return Err(LoaderError::StateVersion {
                expected: SEQUENTIAL_STATE_VERSION,
                found: state.version,
            });
        }
        let cmp = |field, ours: u64, theirs: u64| {
            if ours == theirs {
                Ok(())
            } else {
                Err(LoaderError::StateMismatch {
                    field,
                    expected: ours.to_string(),
                    found: theirs.to_string(),
                })
            }
        };
        cmp("source", self.source_fp, state.source)?;
        cmp("config", self.config_fp, state.config)
    }
}

impl<S: SequentialSource, U, C: Collate<U>> Shared<S, U, C> {
    /// Runs `map` and the collation on a batch read by the producer.
    fn work(&self, raw: Raw<S::Item>) -> Result<SequentialBatch<C::Output>, LoaderError> {
        let wrap = |e| LoaderError::InBatch { batch: raw.number, epoch: raw.epoch, source: Box::new(e) };
        let mut mapped = Vec::with_capacity(raw.items.len());
        for ((item, id), &padding) in raw.items.into_iter().zip(&raw.ids).zip(&raw.padding) {
            let mut ctx = MapContext {
                seed: record_seed(self.cfg.seed, id),
                epoch: raw.epoch,
                position: id.record,
                index: id.record,
                batch: raw.number,
                padding,
                rng: None,
                record: Some(*id),
            };
            match catch_unwind(AssertUnwindSafe(|| (self.map)(item, &mut ctx))) {
                Ok(Ok(u)) => mapped.push(u),
                Ok(Err(source)) => return Err(wrap(LoaderError::Map { index: id.record, source })),
                Err(p) => {
                    return Err(wrap(LoaderError::Panic {
                        index: Some(id.record),
                        message: panic_message(&*p),
                    }))
                }
            }
        }
        let data = match catch_unwind(AssertUnwindSafe(|| self.collate.collate(mapped))) {
            Ok(Ok(d)) => d,
            Ok(Err(e)) => return Err(wrap(e)),
            Err(p) => return Err(wrap(LoaderError::Panic { index: None, message: panic_message(&*p) })),
        };
        Ok(SequentialBatch {
            data,
            records: raw.ids,
            padding: raw.padding,
            epoch: raw.epoch,
            step: raw.step,
            number: raw.number,
        })
    }
}

/// A batch as read, before `map` and collation.
struct Raw<T> {
    items: Vec<T>,
    ids: Vec<RecordId>,
    padding: Vec<bool>,
    epoch: u64,
    step: u64,
    number: u64,
}

/// The reading stage of one rank: its stream (interleave, windows, packing, padding), the
/// epoch and step counters, and the reports of dropped records.
struct Producer<S: SequentialSource> {
    epoch: u64,
    batch: u64,
    step: u64,
    steps: Option<u64>,
    list: Arc<Vec<ShardCursor>>,
    /// Whether `list` came from an elastic re-deal (recorded in the state).
    explicit: bool,
    stream: RankStream<S>,
    padding: bool,
    /// The padding pass started and has not yet yielded a record.
    pad_fresh: bool,
    packer: Option<Packer<S::Item>>,
    done: bool,
    dropped: Vec<Dropped>,
}

impl<S: SequentialSource> Producer<S> {
    /// The producer at the start of `epoch`, after `batch` batches.
    fn at_epoch<U, C>(shared: &Shared<S, U, C>, epoch: u64, batch: u64) -> Self {
        let lists = shared.standard(epoch);
        let steps = shared.steps(&lists, 0);
        let list = Arc::new(lists.into_iter().nth(shared.cfg.rank as usize).unwrap_or_default());
        Producer::with_list(shared, epoch, batch, 0, steps, list, false, None)
    }

    #[allow(clippy::too_many_arguments)] // the fields of a state
    fn with_list<U, C>(
        shared: &Shared<S, U, C>,
        epoch: u64,
        batch: u64,
        step: u64,
        steps: Option<u64>,
        list: Arc<Vec<ShardCursor>>,
        explicit: bool,
        stream: Option<RankStream<S>>,
    ) -> Self {
        Producer {
            epoch,
            batch,
            step,
            steps,
            stream: stream.unwrap_or_else(|| RankStream::new(Arc::clone(&list), epoch)),
            list,
            explicit,
            padding: false,
            pad_fresh: false,
            packer: shared.pack.as_ref().map(|(l, ops)| Packer::new(*l as usize, Arc::clone(ops))),
            done: shared.cfg.epochs.is_some_and(|e| epoch >= e),
            dropped: Vec::new(),
        }
    }

    /// The stream's position (the packer's when packing).
    fn cursor(&self) -> StreamCursor {
        match &self.packer {
            Some(p) => p.checkpoint(&self.stream),
            None => self.stream.cursor(),
        }
    }

    fn state<U, C>(&self, shared: &Shared<S, U, C>) -> SequentialState {
        let c = self.cursor();
        SequentialState {
            version: SEQUENTIAL_STATE_VERSION,
            epoch: self.epoch,
            batch: self.batch,
            step: self.step,
            steps: self.steps,
            rank: shared.cfg.rank,
            world_size: shared.cfg.world_size,
            next: c.next,
            turn: c.turn,
            open: c.open,
            padding: self.padding,
            deal: self.explicit.then(|| self.list.to_vec()),
            config: shared.config_fp,
            source: shared.source_fp,
        }
    }

    /// The next batch, moving through epochs; `None` after the last.
    fn produce<U, C>(&mut self, shared: &Shared<S, U, C>) -> Result<Option<Raw<S::Item>>, LoaderError> {
        loop {
            if self.done {
                return Ok(None);
            }
            match self.fill(shared)? {
                Some(raw) => {
                    // Saturating: the counters may come from a state file.
                    self.step = self.step.saturating_add(1);
                    self.batch = self.batch.saturating_add(1);
                    if self.steps == Some(self.step) {
                        self.finish_epoch(shared);
                    }
                    return Ok(Some(raw));
                }
                None => {
                    let empty = self.step == 0;
                    self.finish_epoch(shared);
                    if empty && shared.cfg.epochs.is_none() {
                        self.done = true;
                    }
                }
            }
        }
    }

    /// Reports what this epoch leaves undelivered (with [`SequentialEnd::Drop`]) and moves to
    /// the start of the next epoch.
    fn finish_epoch<U, C>(&mut self, shared: &Shared<S, U, C>) {
        if matches!(shared.cfg.end, SequentialEnd::Drop) && !self.padding {
            let cursor = self.cursor();
            for at in self.stream.remainder(&cursor) {
                for (start, end) in shared.stream.undelivered(&at, self.epoch).unwrap_or_default() {
                    self.dropped.push(Dropped::Records { epoch: self.epoch, shard: at.shard, start, end });
                }
            }
        }
        let dropped = std::mem::take(&mut self.dropped);
        *self = Producer::at_epoch(shared, self.epoch + 1, self.batch);
        self.dropped = dropped;
    }

    /// Reads the next batch of this epoch, or `None` when the epoch is over.
    fn fill<U, C>(&mut self, shared: &Shared<S, U, C>) -> Result<Option<Raw<S::Item>>, LoaderError> {
        if self.steps.is_some_and(|s| self.step >= s) {
            return Ok(None);
        }
        let b = shared.cfg.batch_size as usize;
        let before = matches!(shared.cfg.end, SequentialEnd::Stop(_)).then(|| self.cursor());
        let mut raw = Raw {
            items: Vec::with_capacity(b),
            ids: Vec::with_capacity(b),
            padding: Vec::with_capacity(b),
            epoch: self.epoch,
            step: self.step,
            number: self.batch,
        };
        while raw.items.len() < b {
            match self.pull(shared)? {
                Some((item, id, padding)) => {
                    raw.items.push(item);
                    raw.ids.push(id);
                    raw.padding.push(padding);
                }
                None => break,
            }
        }
        if let (SequentialEnd::Stop(hook), Some(before)) = (&shared.cfg.end, before) {
            let query = StopQuery {
                epoch: self.epoch,
                step: self.step,
                records: raw.items.len() as u64,
                full: raw.items.len() == b,
            };
            let go = catch_unwind(AssertUnwindSafe(|| hook(&query)))
                .map_err(|p| LoaderError::Panic { index: None, message: panic_message(&*p) })?;
            if !go {
                for from in self.stream.remainder(&before) {
                    self.dropped.push(Dropped::Rest { epoch: self.epoch, from });
                }
                return Ok(None);
            }
        }
        Ok((!raw.items.is_empty()).then_some(raw))
    }

    /// The next record (or window) of the rank: record, identity, padding flag.
    fn pull<U, C>(
        &mut self,
        shared: &Shared<S, U, C>,
    ) -> Result<Option<(S::Item, RecordId, bool)>, LoaderError> {
        if let Some(packer) = &mut self.packer {
            return match packer.next_window(&mut self.stream, &shared.source, &shared.stream)? {
                Packed::Window(t, id) => Ok(Some((t, id, false))),
                Packed::End(tail) => {
                    for record in tail {
                        self.dropped.push(Dropped::Tokens { epoch: self.epoch, record });
                    }
                    Ok(None)
                }
            };
        }
        loop {
            if let Some(p) = self.stream.next(&shared.source, &shared.stream)? {
                self.pad_fresh = false;
                return Ok(Some((p.item, p.id, self.padding)));
            }
            if !matches!(shared.cfg.end, SequentialEnd::Pad) {
                return Ok(None);
            }
            if self.pad_fresh {
                return Err(LoaderError::InvalidConfig {
                    field: "end",
                    detail: format!(
                        "rank {} holds no record in epoch {} to pad its batches with",
                        shared.cfg.rank, self.epoch
                    ),
                });
            }
            // Padding: the rank's list again from its start, flagged.
            self.padding = true;
            self.pad_fresh = true;
            self.stream = RankStream::new(Arc::clone(&self.list), self.epoch);
        }
    }
}

/// A loader over a [`SequentialSource`]: shards dealt to ranks per epoch, read in order
/// inside a rank, batched, mapped and collated on worker threads.
///
/// # Order
///
/// Epoch `e` takes the shards in [`shard_order`]`(shards, seed, shuffle, e)`. They are dealt
/// to the `W` ranks: when every shard has a length hint, longest-processing-time first
/// (shards by decreasing length, each to the rank with the fewest records so far; ties to the
/// shard earlier in the epoch's order and to the lower rank), otherwise round-robin (the
/// `i`-th shard of the order to rank `i mod W`). A rank's list keeps the epoch's order. The
/// rank reads its list through `cycle` slots: the first `cycle` shards open, one record from
/// each slot in turn; a finished shard's slot takes the next shard of the list, and when the
/// list is used up the slot closes. With a window shuffle each slot reads its shard in
/// windows of `window` records and delivers each window in a permuted order. With packing,
/// the records (token lists) are cut into windows of `seq_len` tokens across record and
/// shard boundaries. `B` consecutive records (or windows) make a batch; the end of an epoch
/// follows [`SequentialEnd`]. Nothing of this depends on the worker count or prefetch depth:
/// reading happens on the consumer's thread, `map` and the collation on the workers.
///
/// # State and resume
///
/// [`SequentialIter::state`] is a [`SequentialState`] of small integers (epoch, batch counts,
/// next shard of the list, the open shards' positions and window cursors, a token skip when
/// packing). [`SequentialLoader::iter_from`] restores it on the same rank and world size:
/// the continuation is exactly the uninterrupted run's. A restore re-reads at most one shuffle
/// window per open shard, and with packing the record a window starts in.
///
/// # Elastic resume
///
/// [`SequentialLoader::iter_from_ranks`] takes the states of **all** ranks of the old world
/// (taken at the same step) and restores this rank of the new one. When the world size is
/// unchanged it is [`SequentialLoader::iter_from`] with this rank's state. Otherwise the
/// unfinished shards of the epoch keep their positions (window cursors and token skips
/// included) and are re-dealt over the new world (longest-processing-time on the records they
/// have left, when known): no record is lost or repeated, but which records share a step
/// changes (unlike the random-access [`Loader`](crate::Loader), whose step sets survive a
/// world-size change). The new rank's state records its re-dealt list until the epoch ends;
/// later epochs are those of a run started with the new world size.
///
/// ```
/// use guideloom_loader::{SequentialEnd, SequentialLoader, VecShards};
/// // Four shards of lengths 5, 3, 4, 2; record k of shard s is s * 10 + k.
/// let shards: Vec<Vec<u32>> = [5, 3, 4, 2].iter().enumerate().map(|(s, &n)| (0..n).map(|k| s as u32 * 10 + k).collect()).collect();
/// let rank0 = SequentialLoader::builder(VecShards::new(shards))
///     .shard(0, 2).cycle(2).batch_size(2).end(SequentialEnd::Drop).build()?;
/// assert_eq!(rank0.deal(0), [vec![0, 3], vec![1, 2]]); // by length; lists in shard order
/// let mut it = rank0.iter();
/// let batches: Vec<Vec<u32>> = (&mut it).map(|b| b.map(|b| b.data)).collect::<Result<_, _>>()?;
/// assert_eq!(batches, [vec![0, 30], vec![1, 31], vec![2, 3]]); // record 4 of shard 0 is dropped
/// assert_eq!(it.take_dropped().len(), 1);
/// # Ok::<(), guideloom_loader::LoaderError>(())
/// ```
pub struct SequentialLoader<S: SequentialSource, U = <S as SequentialSource>::Item, C = VecCollate> {
    shared: Arc<Shared<S, U, C>>,
    workers: usize,
    prefetch: usize,
}

impl<S: SequentialSource, U, C> std::fmt::Debug for SequentialLoader<S, U, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SequentialLoader")
            .field("config", &self.shared.cfg)
            .field("shards", &self.shared.shards)
            .field("workers", &self.workers)
            .field("prefetch", &self.prefetch)
            .finish_non_exhaustive()
    }
}

impl<S, U, C> SequentialLoader<S, U, C>
where
    S: SequentialSource + 'static,
    U: 'static,
    C: Collate<U> + 'static,
    C::Output: 'static,
{
    /// The source.
    pub fn source(&self) -> &S {
        &self.shared.source
    }

    /// The shards of every rank in epoch `epoch` (from its start), each list in the epoch's
    /// order.
    pub fn deal(&self, epoch: u64) -> Vec<Vec<u64>> {
        self.shared.standard(epoch).into_iter().map(|l| l.into_iter().map(|c| c.shard).collect()).collect()
    }

    /// Batches every rank takes in epoch `epoch` with [`SequentialEnd::Drop`] or
    /// [`SequentialEnd::Pad`]; `None` for the other ends (the count is not known ahead).
    pub fn steps(&self, epoch: u64) -> Option<u64> {
        self.shared.steps(&self.shared.standard(epoch), 0)
    }

    /// The state of an iterator that has yielded nothing.
    pub fn initial_state(&self) -> SequentialState {
        Producer::at_epoch(&self.shared, 0, 0).state(&self.shared)
    }

    /// Iterates from the first batch of epoch 0.
    pub fn iter(&self) -> SequentialIter<S, U, C> {
        self.iter_with(Producer::at_epoch(&self.shared, 0, 0))
    }

    /// Iterates from the first batch of epoch `epoch` (as a run that delivered nothing before;
    /// batch numbers start at 0).
    pub fn iter_from_epoch(&self, epoch: u64) -> SequentialIter<S, U, C> {
        self.iter_with(Producer::at_epoch(&self.shared, epoch, 0))
    }

    /// Iterates from the batch after the last one the consumer received when `state` was
    /// taken, on the same rank and world size.
    ///
    /// # Errors
    /// [`LoaderError::StateVersion`]; [`LoaderError::StateMismatch`] naming `source`,
    /// `config`, `rank` or `world_size` (for another world size use
    /// [`SequentialLoader::iter_from_ranks`]), or `steps`, `next`, `open`, `turn` for a state
    /// that does not fit this loader's deal.
    pub fn iter_from(&self, state: &SequentialState) -> Result<SequentialIter<S, U, C>, LoaderError> {
        let shared = &self.shared;
        shared.check(state)?;
        let mismatch = |field, ours: u64, theirs: u64| LoaderError::StateMismatch {
            field,
            expected: ours.to_string(),
            found: theirs.to_string(),
        };
        if state.world_size != shared.cfg.world_size {
            return Err(mismatch("world_size", shared.cfg.world_size, state.world_size));
        }
        if state.rank != shared.cfg.rank {
            return Err(mismatch("rank", shared.cfg.rank, state.rank));
        }
        if shared.cfg.epochs.is_some_and(|e| state.epoch >= e) {
            return Ok(self.iter_with(Producer::at_epoch(shared, state.epoch, state.batch)));
        }
        let list = match &state.deal {
            Some(list) => Arc::new(list.clone()),
            None => {
                let lists = shared.standard(state.epoch);
                let expected = shared.steps(&lists, 0);
                if expected != state.steps {
                    let show = |s: Option<u64>| s.map_or_else(|| "none".to_string(), |s| s.to_string());
                    return Err(LoaderError::StateMismatch {
                        field: "steps",
                        expected: show(expected),
                        found: show(state.steps),
                    });
                }
                Arc::new(lists.into_iter().nth(shared.cfg.rank as usize).unwrap_or_default())
            }
        };
        let cursor = StreamCursor { next: state.next, turn: state.turn, open: state.open.clone() };
        let stream = RankStream::restore(Arc::clone(&list), state.epoch, &cursor, shared.stream.cycle)?;
        let mut p = Producer::with_list(
            shared,
            state.epoch,
            state.batch,
            state.step,
            state.steps,
            list,
            state.deal.is_some(),
            Some(stream),
        );
        p.padding = state.padding;
        Ok(self.iter_with(p))
    }

    /// Restores this rank from the states of all ranks of an earlier run, on this loader's
    /// world size (elastic resume; see the type's documentation).
    ///
    /// # Errors
    /// As [`SequentialLoader::iter_from`] for each state, plus
    /// [`LoaderError::StateMismatch`] naming `world_size` when the states are not one per
    /// rank `0..world_size` of one world, `epoch` when they are of different epochs, and
    /// `open` when two of them hold the same shard.
    pub fn iter_from_ranks(
        &self,
        states: &[SequentialState],
    ) -> Result<SequentialIter<S, U, C>, LoaderError> {
        let shared = &self.shared;
        let old_world = states.first().map_or(0, |s| s.world_size);
        let ranks: BTreeSet<u64> = states.iter().map(|s| s.rank).collect();
        if states.is_empty()
            || states.iter().any(|s| s.world_size != old_world)
            || ranks.len() != states.len()
            || ranks.iter().any(|&r| r >= old_world)
            || states.len() as u64 != old_world
        {
            return Err(LoaderError::StateMismatch {
                field: "world_size",
                expected: "one state per rank 0..world_size of one world".into(),
                found: format!("{} states of ranks {ranks:?}", states.len()),
            });
        }
        for s in states {
            shared.check(s)?;
        }
        let epoch = states[0].epoch;
        if let Some(s) = states.iter().find(|s| s.epoch != epoch) {
            return Err(LoaderError::StateMismatch {
                field: "epoch",
                expected: epoch.to_string(),
                found: s.epoch.to_string(),
            });
        }
        if old_world == shared.cfg.world_size {
            let Some(mine) = states.iter().find(|s| s.rank == shared.cfg.rank) else {
                panic!("the ranks were checked to be 0..world_size")
            };
            return self.iter_from(mine);
        }
        let batch = states.iter().map(|s| s.batch).max().unwrap_or(0);
        let step = states.iter().map(|s| s.step).max().unwrap_or(0);
        if shared.cfg.epochs.is_some_and(|e| epoch >= e) {
            return Ok(self.iter_with(Producer::at_epoch(shared, epoch, batch)));
        }
        // The old ranks' lists, and what of them is left.
        let old_lists = shared.standard_for(epoch, old_world);
        let mut left: Vec<ShardCursor> = Vec::new();
        for s in states {
            if s.padding {
                continue; // its records are used up
            }
            let list = match &s.deal {
                Some(l) => l.clone(),
                None => old_lists.get(s.rank as usize).cloned().unwrap_or_default(),
            };
            if s.next > list.len() as u64 {
                return Err(LoaderError::StateMismatch {
                    field: "next",
                    expected: format!("at most {} (shards of rank {})", list.len(), s.rank),
                    found: s.next.to_string(),
                });
            }
            left.extend(s.open.iter().copied());
            left.extend(list[s.next as usize..].iter().copied());
        }
        let order = shard_order(shared.shards, shared.cfg.seed, shared.cfg.shuffle, epoch);
        let mut place = vec![u64::MAX; order.len()];
        for (p, &s) in order.iter().enumerate() {
            place[s as usize] = p as u64;
        }
        let mut seen = BTreeSet::new();
        for c in &left {
            if c.shard >= shared.shards || !seen.insert(c.shard) {
                return Err(LoaderError::StateMismatch {
                    field: "open",
                    expected: format!("each of {} shards in at most one state", shared.shards),
                    found: format!("shard {} twice or out of range", c.shard),
                });
            }
        }
        left.sort_by_key(|c| place[c.shard as usize]);
        let lists = shared.deal_entries(&left, shared.cfg.world_size);
        let steps = shared.steps(&lists, step);
        let list = Arc::new(lists.into_iter().nth(shared.cfg.rank as usize).unwrap_or_default());
        Ok(self.iter_with(Producer::with_list(shared, epoch, batch, step, steps, list, true, None)))
    }

    fn iter_with(&self, producer: Producer<S>) -> SequentialIter<S, U, C> {
        let state = producer.state(&self.shared);
        SequentialIter {
            shared: Arc::clone(&self.shared),
            workers: self.workers,
            prefetch: self.prefetch,
            producer,
            pool: None,
            queue: VecDeque::new(),
            state,
            dropped: Vec::new(),
            tail: Vec::new(),
            producer_done: false,
            done: false,
        }
    }
}

impl<S: SequentialSource, U, C> Shared<S, U, C> {
    /// The lists of every rank of a world of `world` ranks in `epoch`.
    fn standard_for(&self, epoch: u64, world: u64) -> Vec<Vec<ShardCursor>> {
        let order = shard_order(self.shards, self.cfg.seed, self.cfg.shuffle, epoch);
        let entries: Vec<ShardCursor> = order.iter().map(|&s| ShardCursor::start(s)).collect();
        self.deal_entries(&entries, world.min(MAX_WORLD_SIZE))
    }
}

/// A batch read and sent to the workers, or a failure in its place.
enum Pending {
    Batch { number: u64, state: SequentialState, dropped: Vec<Dropped> },
    Failed(LoaderError),
}

/// The iterator of a [`SequentialLoader`]: `Ok(batch)` per batch in order, or one `Err` at
/// the place of a failed batch, after which it ends. Dropping it joins its workers, as the
/// random-access [`LoaderIter`](crate::LoaderIter) does.
pub struct SequentialIter<S: SequentialSource, U, C: Collate<U>> {
    shared: Arc<Shared<S, U, C>>,
    workers: usize,
    prefetch: usize,
    producer: Producer<S>,
    pool: Option<BatchPool<S::Item, C::Output>>,
    queue: VecDeque<Pending>,
    /// The state after the last delivered batch.
    state: SequentialState,
    /// Reports of batches delivered, not yet taken.
    dropped: Vec<Dropped>,
    /// Reports made after the last batch was read.
    tail: Vec<Dropped>,
    producer_done: bool,
    done: bool,
}

impl<S: SequentialSource, U, C: Collate<U>> std::fmt::Debug for SequentialIter<S, U, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SequentialIter")
            .field("state", &self.state)
            .field("queued", &self.queue.len())
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl<S, U, C> SequentialIter<S, U, C>
where
    S: SequentialSource + 'static,
    U: 'static,
    C: Collate<U> + 'static,
    C::Output: 'static,
{
    /// The checkpoint after the last batch this iterator yielded.
    pub fn state(&self) -> SequentialState {
        self.state.clone()
    }

    /// The records reported dropped at epoch ends this iterator has passed (in the order
    /// reported), since the last call.
    pub fn take_dropped(&mut self) -> Vec<Dropped> {
        std::mem::take(&mut self.dropped)
    }

    fn fail(&mut self, e: LoaderError) -> Option<Result<SequentialBatch<C::Output>, LoaderError>> {
        self.done = true;
        if let Some(mut p) = self.pool.take() {
            p.shutdown();
        }
        Some(Err(e))
    }

    /// Reads the next batch: `Ok(None)` after the last.
    fn read(&mut self) -> Result<Option<Raw<S::Item>>, LoaderError> {
        let (batch, epoch) = (self.producer.batch, self.producer.epoch);
        self.producer.produce(&self.shared).map_err(|e| LoaderError::InBatch {
            batch,
            epoch,
            source: Box::new(e),
        })
    }

    fn top_up(&mut self) {
        while !self.producer_done && self.queue.len() < self.prefetch {
            match self.read() {
                Ok(Some(raw)) => {
                    let number = raw.number;
                    let state = self.producer.state(&self.shared);
                    let dropped = std::mem::take(&mut self.producer.dropped);
                    let sent = self.pool.as_ref().is_some_and(|p| p.send(number, raw));
                    if !sent {
                        self.producer_done = true;
                        self.queue.push_back(Pending::Failed(LoaderError::Panic {
                            index: None,
                            message: "the worker pool closed its queue".into(),
                        }));
                        return;
                    }
                    self.queue.push_back(Pending::Batch { number, state, dropped });
                }
                Ok(None) => {
                    self.producer_done = true;
                    self.tail = std::mem::take(&mut self.producer.dropped);
                }
                Err(e) => {
                    self.producer_done = true;
                    self.queue.push_back(Pending::Failed(e));
                }
            }
        }
    }
}

impl<S, U, C> Iterator for SequentialIter<S, U, C>
where
    S: SequentialSource + 'static,
    U: 'static,
    C: Collate<U> + 'static,
    C::Output: 'static,
{
    type Item = Result<SequentialBatch<C::Output>, LoaderError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        if self.workers == 0 {
            return match self.read() {
                Ok(Some(raw)) => match self.shared.work(raw) {
                    Ok(b) => {
                        self.state = self.producer.state(&self.shared);
                        self.dropped.append(&mut self.producer.dropped);
                        Some(Ok(b))
                    }
                    Err(e) => self.fail(e),
                },
                Ok(None) => {
                    self.state = self.producer.state(&self.shared);
                    self.dropped.append(&mut self.producer.dropped);
                    self.done = true;
                    None
                }
                Err(e) => self.fail(e),
            };
        }
        if self.pool.is_none() {
            let shared = Arc::clone(&self.shared);
            let work = Arc::new(move |_n, raw: Raw<S::Item>, _c: &Cancellation| shared.work(raw));
            match Pool::start(self.workers, work, false) {
                Ok(p) => self.pool = Some(p),
                Err(e) => return self.fail(e),
            }
        }
        self.top_up();
        match self.queue.pop_front() {
            None => {
                self.state = self.producer.state(&self.shared);
                self.dropped.append(&mut self.tail);
                self.done = true;
                if let Some(mut p) = self.pool.take() {
                    p.shutdown();
                }
                None
            }
            Some(Pending::Failed(e)) => self.fail(e),
            Some(Pending::Batch { number, state, mut dropped }) => {
                let Some(pool) = self.pool.as_mut() else { panic!("worker pool missing after start") };
                match pool.take(number) {
                    Ok(b) => {
                        self.state = state;
                        self.dropped.append(&mut dropped);
                        self.top_up();
                        Some(Ok(b))
                    }
                    Err(e) => self.fail(e),
                }
            }
        }
    }
}
