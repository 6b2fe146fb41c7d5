//! How a sequential epoch ends when ranks hold different numbers of records
//! ([`SequentialEnd`], with the trainer's [`StopHook`]), and what it leaves undelivered
//! ([`Dropped`]).

use std::sync::Arc;

use crate::sequential::ShardCursor;
use crate::RecordId;

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
/// known ([`ShardInfo::len_hint`](crate::sequential::ShardInfo) on every shard) the loader computes them
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
    /// this rank's records is reported ([`Dropped::Rest`]).
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
    /// The end's word in the config fingerprint.
    pub(crate) fn tag(&self) -> u64 {
        match self {
            SequentialEnd::Exhaust => 0,
            SequentialEnd::Drop => 1,
            SequentialEnd::Pad => 2,
            SequentialEnd::Stop(_) => 3,
        }
    }
}

/// Records of an epoch a rank did not deliver, reported by
/// [`SequentialIter::take_dropped`](crate::sequential::SequentialIter::take_dropped).
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
    /// The tokens of one record from `record.offset` on: the end of a rank's packed records,
    /// fewer tokens than one window.
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
