//! The sequential loader: [`SequentialLoader`], its order, its state and (elastic) resume.
//! Its builder is in builder.rs ([`SequentialLoader::builder`]), its iterator in iter.rs.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::sequential::deal::shard_order;
use crate::sequential::interleave::{Interleave, InterleaveCursor};
use crate::sequential::iter::SequentialIter;
use crate::sequential::producer::Producer;
use crate::sequential::shared::Shared;
use crate::sequential::{SequentialSource, SequentialState, ShardCursor};
use crate::{Collate, LoaderError, VecCollate};

/// A loader over a [`SequentialSource`]: shards dealt to ranks per epoch, read in order
/// inside a rank, batched, mapped and collated on worker threads.
///
/// # Order
///
/// Epoch `e` takes the shards in [`shard_order`]`(shards, seed, shuffle, e)`. They are dealt to the
/// `W` ranks: when every shard has a length hint, longest-processing-time first (shards by
/// decreasing length, each to the rank with the fewest records so far; ties to the shard earlier in
/// the epoch's order and to the lower rank), otherwise round-robin (the `i`-th shard of the order
/// to rank `i mod W`). A rank's list keeps the epoch's order. The rank reads its list through
/// `cycle` slots: the first `cycle` shards open, one record from each slot in turn; a finished
/// shard's slot takes the next shard of the list, and when the list is used up the slot closes.
/// With a window shuffle each slot reads its shard in windows of `window` records and delivers each
/// window in a permuted order. With packing, the records (token lists) are cut into windows of
/// `seq_len` tokens across record and shard boundaries. `B` consecutive records (or windows) make a
/// batch; the end of an epoch follows [`SequentialEnd`](crate::sequential::SequentialEnd). Nothing
/// of this depends on the worker count or prefetch depth: reading happens on the consumer's thread,
/// `map` and the collation on the workers.
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
/// use guideloom_loader::sequential::{SequentialEnd, SequentialLoader, VecShards};
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
    pub(crate) shared: Arc<Shared<S, U, C>>,
    pub(crate) workers: usize,
    pub(crate) prefetch: usize,
}

impl<S: SequentialSource, U, C> std::fmt::Debug for SequentialLoader<S, U, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SequentialLoader")
            .field("options", &self.shared.options)
            .field("end", &self.shared.end)
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

    /// Batches every rank takes in epoch `epoch` with
    /// [`SequentialEnd::Drop`](crate::sequential::SequentialEnd::Drop) or
    /// [`SequentialEnd::Pad`](crate::sequential::SequentialEnd::Pad); `None` for the other ends
    /// (the count is not known ahead).
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
        if state.world_size != shared.options.world_size {
            return Err(mismatch("world_size", shared.options.world_size, state.world_size));
        }
        if state.rank != shared.options.rank {
            return Err(mismatch("rank", shared.options.rank, state.rank));
        }
        if shared.options.epochs.is_some_and(|e| state.epoch >= e) {
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
                Arc::new(lists.into_iter().nth(shared.options.rank as usize).unwrap_or_default())
            }
        };
        let cursor = InterleaveCursor { next: state.next, turn: state.turn, open: state.open.clone() };
        let interleave =
            Interleave::restore(Arc::clone(&list), state.epoch, &cursor, shared.interleave.cycle)?;
        let mut p = Producer::with_list(
            shared,
            state.epoch,
            state.batch,
            state.step,
            state.steps,
            list,
            state.deal.is_some(),
            Some(interleave),
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
        if old_world == shared.options.world_size {
            let Some(mine) = states.iter().find(|s| s.rank == shared.options.rank) else {
                panic!("the ranks were checked to be 0..world_size")
            };
            return self.iter_from(mine);
        }
        let batch = states.iter().map(|s| s.batch).max().unwrap_or(0);
        let step = states.iter().map(|s| s.step).max().unwrap_or(0);
        if shared.options.epochs.is_some_and(|e| epoch >= e) {
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
        let order = shard_order(shared.shards, shared.options.seed, shared.options.shuffle, epoch);
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
        // A shard whose known length is used up (read to its end but still in its slot) is
        // finished: only the unfinished shards are re-dealt (issue 33: a finished one took a
        // slot of the new rank and changed the order its list is read in).
        left.retain(|c| shared.interleave.left(c) != Some(0));
        left.sort_by_key(|c| place[c.shard as usize]);
        let lists = shared.deal_entries(&left, shared.options.world_size);
        let steps = shared.steps(&lists, step);
        let list = Arc::new(lists.into_iter().nth(shared.options.rank as usize).unwrap_or_default());
        Ok(self.iter_with(Producer::with_list(shared, epoch, batch, step, steps, list, true, None)))
    }

    fn iter_with(&self, producer: Producer<S>) -> SequentialIter<S, U, C> {
        SequentialIter::new(Arc::clone(&self.shared), self.workers, self.prefetch, producer)
    }
}
