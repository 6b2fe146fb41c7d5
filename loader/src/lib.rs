//! guideloom's loader: data sources, a deterministic sampler, a worker pool with ordered
//! prefetch, batches, and exact checkpoint/resume.
//!
//! ```text
//! sampler(batch) -> record indices -> worker: source.get_many -> map (per record, own RNG)
//!    -> collate -> reorder buffer (by batch number) -> consumer iterator
//! ```
//!
//! - [`DataSource`]: Grain's random-access protocol (`len`, `get`, batched `get_many`), with
//!   [`RangeSource`], [`VecSource`], and the storage sources [`TokenWindows`] (token windows
//!   read straight into `[batch, seq_len]` buffers: the fast path for language models),
//!   [`StreamWindows`] (windows decoded by any stream format) and [`Documents`] (and, with the
//!   default feature `oamap`, `OamapRecords` over `guideloom-oamap` datasets, collated by
//!   `GatherColumns`).
//! - [`Spans`]: records that are arbitrary windows of a stream (documents, sequences); other
//!   trainers' orders (Megatron-Core's samples, llm.c's batches) and datasets in other
//!   projects' layouts are `guideloom-interop`'s, built on these sources.
//! - [`Sampler`]: a pure function from batch number to record indices: one keyed
//!   [`Permutation`] per epoch, shuffled globally, then sharded over ranks.
//! - [`Loader`]: the builder and the iterator ([`LoaderIter`]); output is identical for every
//!   worker count and prefetch depth.
//! - [`State`]: an O(1), serde-serializable checkpoint, the same on every rank; resume needs
//!   no replay, and restores onto another world size with the same global batch (elastic
//!   resume, [`LoaderBuilder::global_batch`], [`ResumeOptions`]).
//! - [`SequentialLoader`]: data that can only be read in order ([`SequentialSource`]: shards
//!   read by [`ShardReader`]s that restart from a [`ShardPos`]): shards dealt to ranks per
//!   epoch, an interleave of `cycle` open shards, window shuffle, token packing, `map` on the
//!   workers, a [`SequentialState`] of small integers and elastic resume by re-dealing the
//!   unfinished shards.
//! - Index-stage transformations, each a [`DataSource`] over sources and a pure function of
//!   the position (so they keep the O(1) state and the worker invariance): [`Mix`] (weighted
//!   mixtures with exact weights, Megatron's greedy or a closed-form proportional schedule,
//!   stop policies, stratified groups; records carry their source id), [`Filter`] (a mask),
//!   [`Slice`], [`Repeat`], [`Concat`], [`WindowShuffle`]; and packing: [`PackPlan`] puts
//!   documents into rows (concat-split, first-fit, best-fit, best-fit-decreasing), [`Packed`]
//!   reads the rows as records ([`PackedRow`]: per-document targets, segment ids,
//!   positions, loss mask, `cu_seqlens`), [`PackCollate`] stacks them.
//! - The stream stage, after sampling and sharding, over a loader's records in order with an
//!   O(1) [`StreamState`]: [`Rebatched`] (holes and padding dropped, batches refilled) and
//!   [`StreamPacked`] (concat-split, first-fit and best-fit over each epoch's shuffled order).
//! - [`TokenLoader`], [`WindowLoader`], [`DocumentLoader`]: names for the common loader
//!   types, to return a loader from a function.
//! - [`rand`]: the `rand` crate this loader is built with (0.9), re-exported so that
//!   `rand::Rng` methods work on the per-record RNG ([`MapContext::rng`]) without a matching
//!   `rand` dependency of your own.
//!
//! ```
//! use guideloom_loader::{Loader, RangeSource};
//! use guideloom_loader::rand::Rng;
//! let loader = Loader::builder(RangeSource::new(0, 100, 1)?)
//!     .shuffle(42).epochs(2).shard(1, 4)      // rank 1 of 4
//!     .map(|x, ctx| (x, ctx.rng().random::<u8>()))
//!     .batch_size(8).drop_remainder(false)
//!     .workers(2).prefetch(4)
//!     .build()?;
//! assert_eq!(loader.len(), 4);                 // ceil(100 / (8 * 4)) batches per epoch
//! let mut it = loader.iter();
//! let first = it.next().unwrap()?;
//! let state = it.state();                      // checkpoint after one batch
//! drop(it);
//! let resumed: Vec<_> = loader.iter_from(&state)?.collect::<Result<_, _>>()?;
//! let full: Vec<_> = loader.iter().collect::<Result<_, _>>()?;
//! assert_eq!(full[0], first);
//! assert_eq!(full[1..], resumed[..]);
//! # Ok::<(), guideloom_loader::LoaderError>(())
//! ```

#![forbid(unsafe_code)]

mod aliases;
mod batch;
mod error;
mod loader;
mod meta_documents;
mod mix;
#[cfg(feature = "oamap")]
mod oamap;
mod pack;
mod permutation;
mod pool;
mod rng;
mod sampler;
mod sequential;
mod source;
mod spans;
mod state;
mod storage_sources;
mod stream;
mod token_windows;
mod transforms;

/// The `rand` crate (version 0.9) the per-record RNG ([`RecordRng`]) implements `RngCore`
/// of. Import `Rng` from here (`use guideloom_loader::rand::Rng;`, or
/// `guideloom::loader::rand::Rng` through the facade): a `rand` of another major version in
/// your own `Cargo.toml` has another `Rng` trait, which `RecordRng` does not implement.
pub use rand;

pub use aliases::{DocumentLoader, TokenLoader, WindowLoader};
pub use batch::{Batch, BufferPool, Collate, StackTokens, TokenBatch, VecCollate};
pub use error::{BoxError, LoaderError};
pub use loader::{
    Loader, LoaderBuilder, LoaderIter, ResumeOptions, DEFAULT_WORKERS, MAX_BATCH_NUMBER, MAX_WORKERS,
    SHUTDOWN_GRACE,
};
pub use meta_documents::MetaDocuments;
pub use mix::{Mix, MixConfig, MixPlan, MixSchedule, MixSlot, MixStop, Sourced};
#[cfg(feature = "oamap")]
pub use oamap::{GatherColumns, OamapRecord, OamapRecords};
pub use pack::{
    Overflow, PackCollate, PackConfig, PackPlan, PackStrategy, Packed, PackedBatch, PackedRow, Piece,
    MAX_ROW_TOKENS,
};
pub use permutation::Permutation;
pub use rng::{MapContext, RecordRng};
pub use sampler::{BatchPlan, Sampler, SamplerConfig, Step, MAX_PADDING};
pub use sequential::{
    shard_order, Dropped, RecordId, SequentialBatch, SequentialBuilder, SequentialEnd, SequentialIter,
    SequentialLoader, SequentialSource, SequentialState, ShardCursor, ShardInfo, ShardPos, ShardReader,
    StopHook, StopQuery, VecShardReader, VecShards, SEQUENTIAL_STATE_VERSION,
};
pub use source::{Cancellation, DataSource, RangeSource, VecSource};
pub use spans::Spans;
pub use state::{SourceId, State, StateConfig, Topology, WindowParams, STATE_VERSION};
pub use storage_sources::{Documents, MetaWindows, StreamWindows, WindowReader, Windows};
pub use stream::{
    Rebatched, RebatchedIter, StreamBatch, StreamPacked, StreamPackedIter, StreamState, STREAM_STATE_VERSION,
};
pub use token_windows::{MappedWindowCollate, TokenWindowCollate, TokenWindows, WindowSpan};
pub use transforms::{Concat, Filter, Repeat, Slice, WindowShuffle};

/// A stable 64-bit fingerprint of `words` (SplitMix64-style mixing; identical on every
/// platform and run): what this crate's sources and transforms mix their parameters with
/// into [`DataSource::fingerprint`], for sources built outside it (guideloom-interop's
/// Megatron samples) to mix theirs the same way. Part of the state format: a value once
/// stored in a state must not change.
///
/// ```
/// use guideloom_loader::fingerprint_words;
/// assert_eq!(fingerprint_words(&[]), 0x6775_6964_656c_6f6f);
/// assert_ne!(fingerprint_words(&[1, 2]), fingerprint_words(&[2, 1]));
/// ```
pub fn fingerprint_words(words: &[u64]) -> u64 {
    let mut h = 0x6775_6964_656c_6f6fu64;
    for &w in words {
        let mut z = h ^ w.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        h = z ^ (z >> 31);
    }
    h
}
