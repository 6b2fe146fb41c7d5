//! What a sequential loader, its iterators and workers share ([`Shared`]): the source, the
//! `map` chain and collation, the order's options, the fingerprints; the deal of an epoch's
//! shards to ranks, the step counts, the state check and the work of a worker.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use crate::builder::{LoaderOptions, MapFn};
use crate::context::record_seed;
use crate::error::check_same;
use crate::pool::panic_message;
use crate::sequential::batch::Raw;
use crate::sequential::deal::{deal, shard_order};
use crate::sequential::interleave::InterleaveConfig;
use crate::sequential::packer::PackOps;
use crate::sequential::{
    SequentialBatch, SequentialEnd, SequentialSource, SequentialState, ShardCursor, SEQUENTIAL_STATE_VERSION,
};
use crate::{Collate, LoaderError, MapContext};

/// Most ranks a sequential loader deals shards to.
pub(crate) const MAX_WORLD_SIZE: u64 = 1 << 20;

/// Packing: the window length and how to cut the record type.
pub(crate) type PackSpec<T> = (u64, Arc<dyn PackOps<T>>);

/// What the loader, its iterators and workers share.
pub(crate) struct Shared<S: SequentialSource, U, C> {
    pub(crate) source: S,
    pub(crate) map: MapFn<S::Item, U>,
    pub(crate) collate: C,
    /// The order's options (seed, shuffle, epochs, batch size, rank, world size) and the pool's.
    pub(crate) options: LoaderOptions,
    pub(crate) end: SequentialEnd,
    pub(crate) interleave: InterleaveConfig,
    pub(crate) shards: u64,
    pub(crate) pack: Option<PackSpec<S::Item>>,
    pub(crate) config_fp: u64,
    pub(crate) source_fp: u64,
}

impl<S: SequentialSource, U, C> Shared<S, U, C> {
    /// The lists of every rank of a world of `world` ranks in `epoch`.
    pub(crate) fn standard_for(&self, epoch: u64, world: u64) -> Vec<Vec<ShardCursor>> {
        let order = shard_order(self.shards, self.options.seed, self.options.shuffle, epoch);
        let entries: Vec<ShardCursor> = order.iter().map(|&s| ShardCursor::start(s)).collect();
        self.deal_entries(&entries, world.min(MAX_WORLD_SIZE))
    }

    /// The lists of every rank in `epoch` (entries in the epoch's shard order).
    pub(crate) fn standard(&self, epoch: u64) -> Vec<Vec<ShardCursor>> {
        self.standard_for(epoch, self.options.world_size)
    }

    /// Deals `entries` (in the epoch's order) to `world` ranks.
    pub(crate) fn deal_entries(&self, entries: &[ShardCursor], world: u64) -> Vec<Vec<ShardCursor>> {
        let lengths: Option<Vec<u64>> = entries.iter().map(|e| self.interleave.left(e)).collect();
        deal(entries.len(), lengths.as_deref(), world)
            .into_iter()
            .map(|idx| idx.into_iter().map(|i| entries[i]).collect())
            .collect()
    }

    /// The step count of an epoch whose ranks hold `lists`, plus `done` steps already taken.
    pub(crate) fn steps(&self, lists: &[Vec<ShardCursor>], done: u64) -> Option<u64> {
        let records =
            |l: &Vec<ShardCursor>| l.iter().map(|e| self.interleave.left(e).unwrap_or(0)).sum::<u64>();
        let b = self.options.batch_size;
        let per_rank = lists.iter().map(records);
        match self.end {
            SequentialEnd::Drop => Some(done.saturating_add(per_rank.map(|r| r / b).min().unwrap_or(0))),
            SequentialEnd::Pad => {
                Some(done.saturating_add(per_rank.map(|r| r.div_ceil(b)).max().unwrap_or(0)))
            }
            _ => None,
        }
    }

    pub(crate) fn check(&self, state: &SequentialState) -> Result<(), LoaderError> {
        if state.version != SEQUENTIAL_STATE_VERSION {
            return Err(LoaderError::StateVersion {
                expected: SEQUENTIAL_STATE_VERSION,
                found: state.version,
            });
        }
        check_same("source", self.source_fp, state.source)?;
        check_same("config", self.config_fp, state.config)
    }
}

impl<S: SequentialSource, U, C: Collate<U>> Shared<S, U, C> {
    /// Runs `map` and the collation on a batch read by the producer.
    pub(crate) fn work(&self, raw: Raw<S::Item>) -> Result<SequentialBatch<C::Output>, LoaderError> {
        let wrap = |e| LoaderError::InBatch { batch: raw.number, epoch: raw.epoch, source: Box::new(e) };
        let mut mapped = Vec::with_capacity(raw.items.len());
        for ((item, id), &padding) in raw.items.into_iter().zip(&raw.ids).zip(&raw.padding) {
            let mut ctx = MapContext {
                seed: record_seed(self.options.seed, id),
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
