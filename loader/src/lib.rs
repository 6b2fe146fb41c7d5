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
//! - [`Loader`]: configured by a [`LoaderBuilder`] (the one [`Builder`], whose setters every
//!   loader shares), iterated by a [`LoaderIter`]; output is identical for every worker count
//!   and prefetch depth.
//! - [`State`]: an O(1), serde-serializable checkpoint, the same on every rank; resume needs
//!   no replay, and restores onto another world size with the same global batch (elastic
//!   resume, [`Builder::global_batch`], [`ResumeOptions`]).
//!
//! Families of their own, in public modules:
//!
//! - [`sequential`]: data that can only be read in order
//!   ([`SequentialSource`](sequential::SequentialSource): shards read by
//!   [`ShardReader`](sequential::ShardReader)s that restart from a
//!   [`ShardPos`](sequential::ShardPos)), read by a
//!   [`SequentialLoader`](sequential::SequentialLoader): shards dealt to ranks per epoch, an
//!   interleave of `cycle` open shards, window shuffle, token packing, `map` on the workers, a
//!   [`SequentialState`](sequential::SequentialState) of small integers and elastic resume by
//!   re-dealing the unfinished shards.
//! - Index-stage transformations, each a [`DataSource`] over sources and a pure function of
//!   the position (so they keep the O(1) state and the worker invariance): [`mix`]
//!   ([`Mix`](mix::Mix): weighted mixtures with exact weights, Megatron's greedy or a
//!   closed-form proportional schedule, stop policies, stratified groups; records carry their
//!   source id) and [`transforms`] ([`Filter`](transforms::Filter), a mask;
//!   [`Slice`](transforms::Slice), [`Repeat`](transforms::Repeat),
//!   [`Concat`](transforms::Concat), [`WindowShuffle`](transforms::WindowShuffle)).
//! - [`pack`]: [`PackPlan`](pack::PackPlan) puts documents into rows (concat-split,
//!   first-fit, best-fit, best-fit-decreasing), [`Packed`](pack::Packed) reads the rows as
//!   records ([`PackedRow`](pack::PackedRow): per-document targets, segment ids, positions,
//!   loss mask, `cu_seqlens`), [`PackCollate`](pack::PackCollate) stacks them.
//! - [`stage`]: after sampling and sharding, over a loader's records in order with an O(1)
//!   [`StageState`](stage::StageState): [`Rebatched`](stage::Rebatched) (holes and padding
//!   dropped, batches refilled) and [`StagePacked`](stage::StagePacked) (concat-split,
//!   first-fit and best-fit over each epoch's shuffled order).
//!
//! And:
//!
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
mod builder;
mod context;
mod error;
mod indexed;
mod meta_documents;
pub mod mix;
#[cfg(feature = "oamap")]
mod oamap;
pub mod pack;
mod permutation;
mod pool;
mod rng;
mod sampler;
pub mod sequential;
mod source;
mod spans;
pub mod stage;
mod state;
mod storage_sources;
mod token_windows;
pub mod transforms;

/// The `rand` crate (version 0.9) the per-record RNG ([`RecordRng`]) implements `RngCore`
/// of. Import `Rng` from here (`use guideloom_loader::rand::Rng;`, or
/// `guideloom::loader::rand::Rng` through the facade): a `rand` of another major version in
/// your own `Cargo.toml` has another `Rng` trait, which `RecordRng` does not implement.
pub use rand;

pub use aliases::{DocumentLoader, TokenLoader, WindowLoader};
pub use batch::{Batch, BufferPool, Collate, StackTokens, TokenBatch, VecCollate};
pub use builder::{Builder, BuilderKind};
pub use context::{MapContext, RecordId};
pub use error::{BoxError, LoaderError};
pub use indexed::{Indexed, Loader, LoaderBuilder, LoaderIter, ResumeOptions, MAX_BATCH_NUMBER};
pub use meta_documents::MetaDocuments;
#[cfg(feature = "oamap")]
pub use oamap::{GatherColumns, OamapRecord, OamapRecords};
pub use permutation::Permutation;
pub use pool::{DEFAULT_WORKERS, MAX_WORKERS, SHUTDOWN_GRACE};
pub use rng::RecordRng;
pub use sampler::{BatchPlan, Sampler, SamplerConfig, Step, MAX_PADDING};
pub use source::{Cancellation, DataSource, RangeSource, VecSource};
pub use spans::Spans;
pub use state::{SourceId, State, StateConfig, Topology, WindowParams, STATE_VERSION};
pub use storage_sources::{Documents, MetaWindows, StreamWindows, WindowReader, Windows};
pub use token_windows::{MappedWindowCollate, TokenWindowCollate, TokenWindows, WindowSpan};

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
