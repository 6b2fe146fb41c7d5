//! The sequential loader's kind of [`Builder`]: [`SequentialBuilder`], its own options
//! (cycle, window shuffle, end of an epoch, packing) and `build`.

use std::sync::Arc;

use crate::builder::{Builder, BuilderKind};
use crate::sequential::interleave::InterleaveConfig;
use crate::sequential::loader::SequentialLoader;
use crate::sequential::packer::VecOps;
use crate::sequential::shared::{PackSpec, Shared, MAX_WORLD_SIZE};
use crate::sequential::{SequentialEnd, SequentialSource};
use crate::{fingerprint_words, Collate, LoaderError, VecCollate};

/// Most shards open at once in a rank.
const MAX_CYCLE: u64 = 1 << 16;
/// Most records of a shuffle window.
const MAX_WINDOW: u64 = 1 << 24;

const TAG_CONFIG: u64 = u64::from_le_bytes(*b"glseqcfg");
const TAG_SOURCE: u64 = u64::from_le_bytes(*b"glseqsrc");

/// The [`Builder`] kind of a [`SequentialLoader`]: its source and the options only a
/// sequential loader has ([`Builder::cycle`], [`Builder::window_shuffle`], [`Builder::end`],
/// [`Builder::pack`]).
pub struct Sequential<S: SequentialSource> {
    source: S,
    cycle: u64,
    window: u64,
    end: SequentialEnd,
    pack: Option<PackSpec<S::Item>>,
}

impl<S: SequentialSource> std::fmt::Debug for Sequential<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sequential")
            .field("cycle", &self.cycle)
            .field("window", &self.window)
            .field("end", &self.end)
            .field("pack", &self.pack.as_ref().map(|p| p.0))
            .finish_non_exhaustive()
    }
}

impl<S: SequentialSource> BuilderKind for Sequential<S> {
    type Item = S::Item;
}

/// Configures a [`SequentialLoader`]; made by [`SequentialLoader::builder`]. The [`Builder`]
/// of kind [`Sequential`]: the setters every loader has, plus [`Builder::cycle`],
/// [`Builder::window_shuffle`], [`Builder::end`] and [`Builder::pack`].
pub type SequentialBuilder<S, U = <S as SequentialSource>::Item, C = VecCollate> =
    Builder<Sequential<S>, U, C>;

impl<S: SequentialSource + 'static> SequentialLoader<S>
where
    S::Item: 'static,
{
    /// Starts configuring a loader over `source`: one epoch, batch size 32, rank 0 of 1,
    /// shards in their order, one shard open at a time (`cycle` 1), no window shuffle, no
    /// packing, [`SequentialEnd::Exhaust`], [`DEFAULT_WORKERS`](crate::DEFAULT_WORKERS)
    /// workers.
    pub fn builder(source: S) -> SequentialBuilder<S> {
        Builder::new(Sequential { source, cycle: 1, window: 1, end: SequentialEnd::Exhaust, pack: None })
    }
}

impl<S: SequentialSource, U, C> Builder<Sequential<S>, U, C> {
    /// Shards a rank reads at once, taking one record from each in turn (default 1: one shard
    /// after the other). When a shard ends, the next shard of the rank's list takes its slot.
    pub fn cycle(mut self, cycle: u64) -> Self {
        self.kind.cycle = cycle;
        self
    }

    /// Shuffles each shard's records inside windows of `window` records (a bijection of each
    /// window, keyed by seed, shard, window start and epoch); the loader holds `cycle`
    /// windows. 1 (the default) turns it off.
    pub fn window_shuffle(mut self, window: u64) -> Self {
        self.kind.window = window;
        self
    }

    /// How an epoch ends (default [`SequentialEnd::Exhaust`]).
    pub fn end(mut self, end: SequentialEnd) -> Self {
        self.kind.end = end;
        self
    }

    /// Builds the loader.
    ///
    /// # Errors
    /// [`LoaderError::InvalidConfig`] for a zero batch size, world size, epoch count, cycle,
    /// window or prefetch (with workers), more than [`MAX_WORKERS`](crate::MAX_WORKERS)
    /// workers, a world size over 2^20, `rank >= world_size`, a cycle over 2^16 or a window
    /// over 2^24 records, packing
    /// with `seq_len` 0, and [`SequentialEnd::Drop`] or [`SequentialEnd::Pad`] over a source
    /// with a shard of unknown length, or with packing (windows per shard are not known).
    pub fn build(self) -> Result<SequentialLoader<S, U, C>, LoaderError>
    where
        C: Collate<U>,
    {
        let bad = |field, detail: String| Err(LoaderError::InvalidConfig { field, detail });
        let (c, k) = (self.options, self.kind);
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
        if k.cycle == 0 || k.cycle > MAX_CYCLE {
            return bad("cycle", format!("must be 1 to {MAX_CYCLE}, got {}", k.cycle));
        }
        if k.window == 0 || k.window > MAX_WINDOW {
            return bad("window", format!("must be 1 to {MAX_WINDOW}, got {}", k.window));
        }
        let (workers, prefetch) = c.pool()?;
        if k.pack.as_ref().is_some_and(|p| p.0 == 0) {
            return bad("seq_len", "must be at least 1".into());
        }
        let infos = k.source.shards();
        let hints: Option<Vec<u64>> = infos.iter().map(|i| i.len_hint).collect();
        if matches!(k.end, SequentialEnd::Drop | SequentialEnd::Pad) {
            if let Some(missing) = infos.iter().position(|i| i.len_hint.is_none()) {
                return bad(
                    "end",
                    format!(
                        "{:?} needs the length of every shard; shard {missing} has no length hint",
                        k.end
                    ),
                );
            }
            if k.pack.is_some() {
                return bad(
                    "end",
                    format!("{:?} needs records of known count; packed windows are not", k.end),
                );
            }
        }
        let shards = infos.len() as u64;
        let mut source_words = vec![TAG_SOURCE, k.source.fingerprint(), shards];
        source_words.extend(infos.iter().map(|i| i.len_hint.map_or(u64::MAX, |h| h)));
        let config_fp = fingerprint_words(&[
            TAG_CONFIG,
            c.seed,
            u64::from(c.shuffle),
            u64::from(c.epochs.is_some()),
            c.epochs.unwrap_or(0),
            c.batch_size,
            k.cycle,
            k.window,
            k.end.tag(),
            k.pack.as_ref().map_or(0, |p| p.0),
            c.transforms,
        ]);
        let interleave = InterleaveConfig {
            seed: c.seed,
            window: k.window,
            cycle: k.cycle as usize,
            hints: hints.map(Arc::new),
        };
        Ok(SequentialLoader {
            shared: Arc::new(Shared {
                source: k.source,
                map: self.map,
                collate: self.collate,
                options: c,
                end: k.end,
                interleave,
                shards,
                pack: k.pack,
                config_fp,
                source_fp: fingerprint_words(&source_words),
            }),
            workers,
            prefetch,
        })
    }
}

impl<S, E, U, C> Builder<Sequential<S>, U, C>
where
    S: SequentialSource<Item = Vec<E>>,
    E: Copy + Send + Sync + 'static,
{
    /// Packs the rank's token records (in the order it reads them, across record and shard
    /// boundaries) into windows of `seq_len` tokens: each record of the loader is then one
    /// window. The last tokens of a rank's epoch, fewer than one window, are reported
    /// ([`Dropped::Tokens`](crate::sequential::Dropped::Tokens)). A window's identity is the
    /// record and token where it starts. With one rank, `cycle` 1 and no shuffle, the windows
    /// are those of the concatenated records cut every `seq_len` tokens (what the indexed
    /// loader reads from a storage ingested from the same records).
    pub fn pack(mut self, seq_len: u64) -> Self {
        self.kind.pack = Some((seq_len, Arc::new(VecOps)));
        self
    }
}
