//! Sequential sources: data that can only be read in order (a large JSON Lines or text
//! corpus read once, row groups, a generator), split deterministically over ranks and read
//! by a [`SequentialLoader`].
//!
//! A [`SequentialSource`] is made of shards (files, row groups, generators), each with an
//! optional length hint; a [`ShardReader`] reads one shard in order and reports a small,
//! copyable [`ShardPos`] it restarts from. The loader
//! - permutes the shard order per epoch (keyed by `(seed, epoch)`, when shuffling);
//! - deals the shards to ranks: longest-processing-time first when every length is known
//!   (ties to the earlier shard in the epoch's order and to the lower rank), round-robin
//!   otherwise;
//! - reads, inside a rank, a deterministic interleave of `cycle` open shards, optionally with
//!   a window shuffle (a bijection inside each window of a shard's records, re-read on
//!   restore: no unrecorded shuffle buffer), optionally packing token records into windows;
//! - runs `map` and the collation on its worker threads, so its output never depends on the
//!   worker count.
//!
//! See [`SequentialLoader`] for the order, the end of an epoch, the state and elastic resume.
//! A record's identity is a [`RecordId`](crate::RecordId) (in the crate root, beside the
//! [`MapContext`](crate::MapContext) that carries it).

mod batch;
mod builder;
mod deal;
mod end;
mod interleave;
mod iter;
mod loader;
mod packer;
mod producer;
mod shared;
mod source;
mod state;

pub use batch::SequentialBatch;
pub use builder::{Sequential, SequentialBuilder};
pub use deal::shard_order;
pub use end::{Dropped, SequentialEnd, StopHook, StopQuery};
pub use iter::SequentialIter;
pub use loader::SequentialLoader;
pub use source::{SequentialSource, ShardInfo, ShardPos, ShardReader, VecShardReader, VecShards};
pub use state::{SequentialState, ShardCursor, SEQUENTIAL_STATE_VERSION};
