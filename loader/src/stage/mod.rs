//! The stage: stateful steps that run after sampling and sharding, in order, over one rank's
//! records as a [`Loader`](crate::Loader) delivers them (the epoch's shuffled global order,
//! this rank's share of it), with a small explicit state and never a buffer of records in the
//! state.
//!
//! - [`Rebatched`]: hole compaction and rebatching. Records are `Option<X>` (a
//!   [`Filter`](crate::transforms::Filter) yields them; map plain records to `Some`); holes
//!   (`None`) and the sampler's padding records are dropped and batches are refilled to
//!   `batch_size` records.
//! - [`StagePacked`]: streaming packers (concat-split, first-fit, best-fit) over the same
//!   record order, re-planned every epoch because every epoch has its own order.
//!
//! # Positions and state
//!
//! A position in a rank's records is `(batch, offset)`: slot `offset` of the upstream loader's
//! batch number `batch` (slots count holes and padding, so a position needs no replay to find).
//! A [`StageState`] holds the upstream loader's [`State`](crate::State) at `batch`, the
//! `offset`, a token offset into the record at that position (`token`, for a record split
//! across groups) and the rows of the in-flight group already delivered (`rows`): resuming
//! re-reads from that position, re-packs the group and skips `rows` rows. Its JSON is about
//! 300 bytes.
//!
//! # Laws
//!
//! - Output depends only on this rank's record sequence, so it is identical for every worker
//!   count and prefetch depth of the upstream loader (workers read records in parallel; the
//!   stage itself runs on the consumer's thread).
//! - Resuming from the state after any batch equals the uninterrupted run.
//! - No output batch spans two epochs: the last batch of an epoch may be short (dropped with
//!   `drop_remainder`), and packing groups are flushed at the end of every epoch.
//! - Ranks run their stages independently: with holes or packing, the number of batches per
//!   epoch is data-dependent and may differ between ranks and between epochs.

mod cursor;
mod pack;
mod rebatch;
mod state;

pub use pack::{StagePacked, StagePackedIter};
pub use rebatch::{Rebatched, RebatchedIter};
pub use state::{StageBatch, StageState, STAGE_STATE_VERSION};
