//! The stream stage: stateful stages that run after sampling and sharding, in order, over one
//! rank's records as a [`Loader`] delivers them (the epoch's shuffled global order, this rank's
//! share of it), with a small explicit state and never a buffer of records in the state.
//!
//! - [`Rebatched`]: hole compaction and rebatching. Records are `Option<X>` (a
//!   [`Filter`](crate::Filter) yields them; map plain records to `Some`); holes (`None`) and the
//!   sampler's padding records are dropped and batches are refilled to `batch_size` records.
//! - [`StreamPacked`]: streaming packers (concat-split, first-fit, best-fit) over the same
//!   record order, re-planned every epoch because every epoch has its own order.
//!
//! # Positions and state
//!
//! A position in the stream is `(batch, offset)`: slot `offset` of the upstream loader's batch
//! number `batch` (slots count holes and padding, so a position needs no replay to find).
//! A [`StreamState`] holds the upstream loader's [`State`] at `batch`, the `offset`, a token
//! offset into the record at that position (`token`, for a record split across groups) and the
//! rows of the in-flight group already delivered (`rows`): resuming re-reads from that
//! position, re-packs the group and skips `rows` rows. Its JSON is about 300 bytes.
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

use std::collections::VecDeque;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::pack::lay_out;
use crate::{
    DataSource, Loader, LoaderError, LoaderIter, Overflow, PackConfig, PackStrategy, PackedRow, Piece, State,
    VecCollate,
};

/// Domain-separation tags of the stages' fingerprints.
const TAG_REBATCH: u64 = u64::from_le_bytes(*b"glrebat\0");
const TAG_STREAM_PACK: u64 = u64::from_le_bytes(*b"glspack\0");

/// The [`StreamState`] format version this crate writes and reads.
pub const STREAM_STATE_VERSION: u32 = 1;

/// Checkpoint of a stream-stage iterator ([`RebatchedIter`], [`StreamPackedIter`]): O(1), a
/// few integers and the upstream loader's [`State`].
///
/// ```
/// use guideloom_loader::{Loader, Rebatched, StreamState, VecSource};
/// let loader = Loader::builder(VecSource::new((0..10u32).map(Some).collect())).batch_size(4).build()?;
/// let stage = Rebatched::new(loader, 3)?;
/// let mut it = stage.iter();
/// it.next().unwrap()?;
/// let json = it.state().to_json();
/// assert!(json.len() < 1024);
/// let state = StreamState::from_json(&json)?;
/// assert_eq!((state.upstream.next_batch, state.offset, state.next_batch), (0, 3, 1));
/// # Ok::<(), guideloom_loader::LoaderError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamState {
    /// [`STREAM_STATE_VERSION`].
    pub version: u32,
    /// Output batches delivered so far (the number of the next one).
    pub next_batch: u64,
    /// The upstream loader's state whose `next_batch` is the upstream batch holding the
    /// resume position.
    pub upstream: State,
    /// Slot of the resume position in that upstream batch (holes and padding count).
    pub offset: u64,
    /// Tokens of the record at the resume position already packed before it (a record split
    /// across rows or groups); 0 for [`Rebatched`].
    pub token: u64,
    /// Rows of the group starting at the resume position already delivered; 0 for
    /// [`Rebatched`].
    pub rows: u64,
    /// Fingerprint of the stage's configuration and the upstream topology (batch size, rank,
    /// world size): a state resumes only onto the same stage and topology.
    pub fingerprint: u64,
}

impl StreamState {
    /// The state of a stage (its `fingerprint`) that has delivered nothing, over an upstream
    /// loader at `upstream`.
    fn start(upstream: State, fingerprint: u64) -> Self {
        StreamState {
            version: STREAM_STATE_VERSION,
            next_batch: 0,
            upstream,
            offset: 0,
            token: 0,
            rows: 0,
            fingerprint,
        }
    }

    /// The state as compact JSON.
    pub fn to_json(&self) -> String {
        // Serializing plain integers and booleans cannot fail.
        match serde_json::to_string(self) {
            Ok(s) => s,
            Err(e) => panic!("serializing a StreamState failed: {e}"),
        }
    }

    /// Parses a state written by [`StreamState::to_json`].
    ///
    /// # Errors
    /// [`LoaderError::StateJson`] for malformed JSON.
    pub fn from_json(json: &str) -> Result<Self, LoaderError> {
        Ok(serde_json::from_str(json)?)
    }
}

/// One output batch of a stream stage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamBatch<T> {
    /// Output batch number, from 0.
    pub number: u64,
    /// The epoch of every record in the batch.
    pub epoch: u64,
    /// For [`Rebatched`]: the record index of each item. For [`StreamPacked`]: the record of
    /// every piece, row by row, segment by segment.
    pub indices: Vec<u64>,
    /// The records ([`Rebatched`]) or rows ([`StreamPacked`]).
    pub data: Vec<T>,
}

/// A kept record read from the upstream loader.
struct Rec<X> {
    batch: u64,
    offset: u64,
    epoch: u64,
    index: u64,
    item: X,
}

/// The upstream batch being read.
struct Cur<X> {
    number: u64,
    epoch: u64,
    items: Vec<Option<X>>,
    padding: Vec<bool>,
    indices: Vec<u64>,
}

/// Reads one rank's records in order, one at a time, skipping holes and padding.
struct Cursor<S: DataSource, X: Send> {
    it: LoaderIter<S, Option<X>, VecCollate>,
    cur: Option<Cur<X>>,
    offset: usize,
}

impl<S, X> Cursor<S, X>
where
    S: DataSource + 'static,
    X: Send + 'static,
{
    fn start(loader: &Loader<S, Option<X>>) -> Self {
        Cursor { it: loader.iter(), cur: None, offset: 0 }
    }

    /// A cursor at slot `offset` of upstream batch `upstream.next_batch` (reads that batch now
    /// when `offset > 0`).
    fn open(loader: &Loader<S, Option<X>>, upstream: &State, offset: u64) -> Result<Self, LoaderError> {
        let mut c = Cursor { it: loader.iter_from(upstream)?, cur: None, offset: 0 };
        if offset > 0 {
            let len = match c.fetch()? {
                true => c.cur.as_ref().map_or(0, |b| b.items.len()),
                false => 0,
            };
            if offset > len as u64 {
                return Err(LoaderError::StateMismatch {
                    field: "offset",
                    expected: format!("at most {len} (slots of upstream batch {})", upstream.next_batch),
                    found: offset.to_string(),
                });
            }
            c.offset = offset as usize;
        }
        Ok(c)
    }

    /// Reads the next upstream batch; `false` at the end.
    fn fetch(&mut self) -> Result<bool, LoaderError> {
        match self.it.next() {
            None => Ok(false),
            Some(Err(e)) => Err(e),
            Some(Ok(b)) => {
                self.cur = Some(Cur {
                    number: b.number,
                    epoch: b.epoch,
                    items: b.data,
                    padding: b.padding,
                    indices: b.indices,
                });
                self.offset = 0;
                Ok(true)
            }
        }
    }

    /// The position of the next slot.
    fn pos(&self) -> (u64, u64) {
        match &self.cur {
            Some(c) if self.offset < c.items.len() => (c.number, self.offset as u64),
            _ => (self.it.position(), 0),
        }
    }

    /// The next record that is neither a hole nor padding, or `None` at the end.
    fn next(&mut self) -> Result<Option<Rec<X>>, LoaderError> {
        loop {
            if let Some(c) = &mut self.cur {
                while self.offset < c.items.len() {
                    let k = self.offset;
                    self.offset += 1;
                    if c.padding[k] {
                        continue;
                    }
                    if let Some(item) = c.items[k].take() {
                        return Ok(Some(Rec {
                            batch: c.number,
                            offset: k as u64,
                            epoch: c.epoch,
                            index: c.indices[k],
                            item,
                        }));
                    }
                }
            }
            if !self.fetch()? {
                return Ok(None);
            }
        }
    }
}

/// The upstream topology words of a stage's fingerprint.
fn topology_words<S, X>(loader: &Loader<S, Option<X>>) -> [u64; 3]
where
    S: DataSource + 'static,
    X: Send + 'static,
{
    let c = loader.sampler().config();
    [c.batch_size, c.rank, c.world_size]
}

/// Checks a state's version and fingerprint.
fn check_state(state: &StreamState, fingerprint: u64) -> Result<(), LoaderError> {
    if state.version != STREAM_STATE_VERSION {
        return Err(LoaderError::StateVersion { expected: STREAM_STATE_VERSION, found: state.version });
    }
    if state.fingerprint != fingerprint {
        return Err(LoaderError::StateMismatch {
            field: "stream.fingerprint",
            expected: fingerprint.to_string(),
            found: state.fingerprint.to_string(),
        });
    }
    Ok(())
}

/// Hole compaction and rebatching: the records of a [`Loader`] of `Option<X>` (for example
/// over a [`Filter`](crate::Filter)) without the holes (`None`) and without the sampler's
/// padding records, in order, in batches of `batch_size` records that never span two epochs
/// (the last batch of an epoch holds the rest, or is dropped with
/// [`Rebatched::drop_remainder`]). The upstream loader's batch size only sets how many records
/// a worker reads at once; with `world_size > 1` it also decides which records are this rank's
/// (see [`Sampler`](crate::Sampler)).
///
/// State ([`StreamState`]): the position of the next record not yet delivered.
///
/// ```
/// use guideloom_loader::{Filter, Loader, RangeSource, Rebatched};
/// let odd = Filter::new(RangeSource::new(0, 10, 1)?, |x: &i64| x % 2 == 1, 1);
/// let stage = Rebatched::new(Loader::builder(odd).batch_size(4).workers(0).build()?, 2)?;
/// let batches: Vec<Vec<i64>> = stage.iter().map(|b| b.map(|b| b.data)).collect::<Result<_, _>>()?;
/// assert_eq!(batches, [vec![1, 3], vec![5, 7], vec![9]]);
/// # Ok::<(), guideloom_loader::LoaderError>(())
/// ```
pub struct Rebatched<S: DataSource, X> {
    loader: Loader<S, Option<X>>,
    batch_size: u64,
    drop_remainder: bool,
}

impl<S: DataSource, X> std::fmt::Debug for Rebatched<S, X> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rebatched")
            .field("batch_size", &self.batch_size)
            .field("drop_remainder", &self.drop_remainder)
            .finish_non_exhaustive()
    }
}

impl<S, X> Rebatched<S, X>
where
    S: DataSource + 'static,
    X: Send + 'static,
{
    /// Batches of `batch_size` kept records of `loader` (remainders kept).
    ///
    /// # Errors
    /// [`LoaderError::InvalidConfig`] (`batch_size`) for 0.
    pub fn new(loader: Loader<S, Option<X>>, batch_size: u64) -> Result<Self, LoaderError> {
        if batch_size == 0 {
            return Err(LoaderError::InvalidConfig {
                field: "batch_size",
                detail: "must be at least 1".into(),
            });
        }
        Ok(Rebatched { loader, batch_size, drop_remainder: false })
    }

    /// Whether the short last batch of each epoch is dropped (default `false`).
    pub fn drop_remainder(mut self, drop: bool) -> Self {
        self.drop_remainder = drop;
        self
    }

    /// The upstream loader.
    pub fn loader(&self) -> &Loader<S, Option<X>> {
        &self.loader
    }

    fn fingerprint(&self) -> u64 {
        let t = topology_words(&self.loader);
        crate::fingerprint_words(&[
            TAG_REBATCH,
            self.batch_size,
            u64::from(self.drop_remainder),
            t[0],
            t[1],
            t[2],
        ])
    }

    /// The state of an iterator that has delivered nothing.
    pub fn initial_state(&self) -> StreamState {
        StreamState::start(self.loader.initial_state(), self.fingerprint())
    }

    /// Iterates from the first record.
    pub fn iter(&self) -> RebatchedIter<S, X> {
        self.make_iter(Cursor::start(&self.loader), 0)
    }

    /// Iterates from the batch after the last one delivered when `state` was taken.
    ///
    /// # Errors
    /// [`LoaderError::StateVersion`]; [`LoaderError::StateMismatch`] naming
    /// `stream.fingerprint` (another batch size, remainder rule or upstream topology),
    /// `offset`, or a field of the upstream state ([`Loader::iter_from`]); a read error of the
    /// upstream batch holding the position.
    pub fn iter_from(&self, state: &StreamState) -> Result<RebatchedIter<S, X>, LoaderError> {
        check_state(state, self.fingerprint())?;
        let cursor = Cursor::open(&self.loader, &state.upstream, state.offset)?;
        Ok(self.make_iter(cursor, state.next_batch))
    }

    fn make_iter(&self, cursor: Cursor<S, X>, next_batch: u64) -> RebatchedIter<S, X> {
        RebatchedIter {
            cursor,
            peeked: None,
            next_batch,
            batch_size: self.batch_size,
            drop_remainder: self.drop_remainder,
            template: self.initial_state(),
            done: false,
        }
    }
}

/// The iterator of a [`Rebatched`] stage.
pub struct RebatchedIter<S: DataSource, X: Send> {
    cursor: Cursor<S, X>,
    /// A record of the next epoch read while closing a batch.
    peeked: Option<Rec<X>>,
    next_batch: u64,
    batch_size: u64,
    drop_remainder: bool,
    template: StreamState,
    done: bool,
}

impl<S: DataSource, X: Send> std::fmt::Debug for RebatchedIter<S, X> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RebatchedIter")
            .field("next_batch", &self.next_batch)
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl<S, X> RebatchedIter<S, X>
where
    S: DataSource + 'static,
    X: Send + 'static,
{
    /// The checkpoint: [`Rebatched::iter_from`] continues with the next batch not delivered.
    pub fn state(&self) -> StreamState {
        let (batch, offset) = self.peeked.as_ref().map_or_else(|| self.cursor.pos(), |r| (r.batch, r.offset));
        let mut s = self.template;
        s.upstream.next_batch = batch;
        s.offset = offset;
        s.next_batch = self.next_batch;
        s
    }
}

impl<S, X> Iterator for RebatchedIter<S, X>
where
    S: DataSource + 'static,
    X: Send + 'static,
{
    type Item = Result<StreamBatch<X>, LoaderError>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done {
            let (mut data, mut indices, mut epoch) = (Vec::new(), Vec::new(), None);
            while (data.len() as u64) < self.batch_size {
                let r = match self.peeked.take() {
                    Some(r) => r,
                    None => match self.cursor.next() {
                        Ok(Some(r)) => r,
                        Ok(None) => break,
                        Err(e) => {
                            self.done = true;
                            return Some(Err(e));
                        }
                    },
                };
                if epoch.is_some_and(|e| e != r.epoch) {
                    self.peeked = Some(r);
                    break;
                }
                epoch = Some(r.epoch);
                data.push(r.item);
                indices.push(r.index);
            }
            let Some(epoch) = epoch else {
                self.done = true;
                return None;
            };
            if self.drop_remainder && (data.len() as u64) < self.batch_size {
                continue;
            }
            let number = self.next_batch;
            self.next_batch += 1;
            return Some(Ok(StreamBatch { number, epoch, indices, data }));
        }
        None
    }
}

/// Streaming packing: the records of a [`Loader`] of `Option<X>` (documents of tokens; holes
/// and padding records are dropped) packed into rows of `seq_len` tokens in the order the
/// loader delivers them, that is over each epoch's shuffled global order (this rank's share),
/// so every epoch is packed anew; rows come in batches of `batch_size` rows
/// ([`PackedRow`]: per-document targets, segment ids, positions, loss mask, `cu_seqlens`; stack
/// them with [`PackCollate`](crate::PackCollate)).
///
/// # Groups
///
/// - [`PackStrategy::FirstFit`] / [`PackStrategy::BestFit`] `{ bins: K }` (Grain's
///   `FirstFitPackIterDataset` / `BestFitPackIterDataset` without bin shuffling): a group
///   starts at a record and opens up to `K` rows; each document (or piece, under
///   [`Overflow::Split`]) goes to the first (best fit: the fullest, ties to the lowest) open
///   row it fits (tokens and `max_segments`), else to a new row while fewer than `K` are open;
///   the first document that fits no row and finds `K` open ends the group and starts the next
///   one. The group's rows are delivered in the order they were opened. The end of an epoch
///   (and of the data) ends the group too.
/// - [`PackStrategy::ConcatSplit`]: a group is one row: documents concatenated from the
///   group's start (a record and a token offset in it) until the row holds `seq_len` tokens or
///   `max_segments` pieces; only an epoch's last row is padded.
/// - [`PackStrategy::BestFitDecreasing`] sorts a whole epoch and is not streaming: use the
///   planned [`Packed`](crate::Packed) source for it ([`StreamPacked::new`] refuses it).
///
/// Over the same record order, the rows are those of the planned [`PackPlan`](crate::PackPlan)
/// with the same strategy (which packs a source's position order once). Padding: a streaming
/// first-fit or best-fit only sees `K` rows at a time, so its rows are less full than the
/// planned best-fit-decreasing's, which sees the whole epoch (docs/BENCHMARKS.md measures both).
///
/// # State
///
/// The position of the in-flight group's first record, the tokens of that record packed
/// before the group (`token`), and the group's rows already delivered (`rows`): the
/// group's documents are read again on resume, never stored.
///
/// ```
/// use guideloom_loader::{Loader, PackConfig, PackStrategy, StreamPacked, VecSource};
/// // Document i is i + 1 repeated: lengths [3, 4, 2, 1].
/// let docs: Vec<Option<Vec<u32>>> =
///     [3usize, 4, 2, 1].iter().enumerate().map(|(i, &n)| Some(vec![i as u32 + 1; n])).collect();
/// let loader = Loader::builder(VecSource::new(docs)).batch_size(2).workers(0).build()?;
/// let cfg = PackConfig::new(6, PackStrategy::FirstFit { bins: 2 });
/// let stage = StreamPacked::new(loader, cfg, 2, 0u32, u32::MAX)?;
/// let batch = stage.iter().next().unwrap()?;
/// assert_eq!(batch.data[0].tokens, [1, 1, 1, 3, 3, 4]);
/// assert_eq!(batch.data[1].tokens, [2, 2, 2, 2, 0, 0]);
/// assert_eq!(batch.indices, [0, 2, 3, 1]);
/// # Ok::<(), guideloom_loader::LoaderError>(())
/// ```
pub struct StreamPacked<S: DataSource, X, T> {
    loader: Loader<S, Option<X>>,
    config: PackConfig,
    batch_size: u64,
    drop_remainder: bool,
    pad: T,
    ignore: T,
}

impl<S: DataSource, X, T> std::fmt::Debug for StreamPacked<S, X, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamPacked")
            .field("config", &self.config)
            .field("batch_size", &self.batch_size)
            .field("drop_remainder", &self.drop_remainder)
            .finish_non_exhaustive()
    }
}

impl<S, X, T> StreamPacked<S, X, T>
where
    S: DataSource + 'static,
    X: AsRef<[T]> + Send + 'static,
    T: Copy + Send + 'static,
{
    /// Packs the documents of `loader` by `config` into batches of `batch_size` rows; `pad`
    /// fills padding and `ignore` marks targets without a next token.
    ///
    /// # Errors
    /// [`LoaderError::InvalidConfig`]: (`batch_size`) for 0; (`pack`) for rows of 0 tokens or
    /// of more than [`MAX_ROW_TOKENS`](crate::MAX_ROW_TOKENS), 0 bins, `max_segments` 0, or [`PackStrategy::BestFitDecreasing`].
    pub fn new(
        loader: Loader<S, Option<X>>,
        config: PackConfig,
        batch_size: u64,
        pad: T,
        ignore: T,
    ) -> Result<Self, LoaderError> {
        let bad = |detail: &str| Err(LoaderError::InvalidConfig { field: "pack", detail: detail.into() });
        if batch_size == 0 {
            return Err(LoaderError::InvalidConfig {
                field: "batch_size",
                detail: "must be at least 1".into(),
            });
        }
        if config.seq_len == 0 {
            return bad("rows of 0 tokens");
        }
        if config.seq_len > crate::pack::MAX_ROW_TOKENS {
            return bad(&format!(
                "rows of {} tokens: more than the {} a row can hold",
                config.seq_len,
                crate::pack::MAX_ROW_TOKENS
            ));
        }
        if config.max_segments == Some(0) {
            return bad("at most 0 segments per row");
        }
        match config.strategy {
            PackStrategy::FirstFit { bins: 0 } | PackStrategy::BestFit { bins: 0 } => return bad("0 bins"),
            PackStrategy::BestFitDecreasing => {
                return bad(
                    "best-fit-decreasing sorts a whole epoch: plan it with Packed, it does not stream",
                )
            }
            _ => {}
        }
        Ok(StreamPacked { loader, config, batch_size, drop_remainder: false, pad, ignore })
    }

    /// Whether the short last batch of each epoch is dropped (default `false`).
    pub fn drop_remainder(mut self, drop: bool) -> Self {
        self.drop_remainder = drop;
        self
    }

    /// The upstream loader.
    pub fn loader(&self) -> &Loader<S, Option<X>> {
        &self.loader
    }

    /// The packing configuration.
    pub fn config(&self) -> &PackConfig {
        &self.config
    }

    fn fingerprint(&self) -> u64 {
        let c = &self.config;
        let (tag, bins) = match c.strategy {
            PackStrategy::ConcatSplit => (1, 0),
            PackStrategy::FirstFit { bins } => (2, bins),
            PackStrategy::BestFit { bins } => (3, bins),
            PackStrategy::BestFitDecreasing => (4, 0),
        };
        let t = topology_words(&self.loader);
        crate::fingerprint_words(&[
            TAG_STREAM_PACK,
            self.batch_size,
            u64::from(self.drop_remainder),
            c.seq_len,
            tag,
            bins,
            c.max_segments.unwrap_or(0),
            c.overflow as u64,
            t[0],
            t[1],
            t[2],
        ])
    }

    /// The state of an iterator that has delivered nothing.
    pub fn initial_state(&self) -> StreamState {
        StreamState::start(self.loader.initial_state(), self.fingerprint())
    }

    /// Iterates from the first record.
    pub fn iter(&self) -> StreamPackedIter<S, X, T> {
        self.make_iter(Cursor::start(&self.loader), 0)
    }

    /// Iterates from the batch after the last one delivered when `state` was taken: re-reads
    /// the in-flight group from its first record and skips its rows already delivered.
    ///
    /// # Errors
    /// As [`Rebatched::iter_from`]; [`LoaderError::StateMismatch`] (`rows`) when the group
    /// has fewer rows than the state says were delivered; a packing error of the group
    /// ([`LoaderError::DocumentTooLong`]).
    pub fn iter_from(&self, state: &StreamState) -> Result<StreamPackedIter<S, X, T>, LoaderError> {
        check_state(state, self.fingerprint())?;
        let cursor = Cursor::open(&self.loader, &state.upstream, state.offset)?;
        let mut it = self.make_iter(cursor, state.next_batch);
        if state.token > 0 {
            it.carry = it.cursor.next()?.map(|r| Head::new(r, state.token));
        }
        if state.rows > 0 {
            let mut g = it.next_group()?.ok_or_else(|| LoaderError::StateMismatch {
                field: "rows",
                expected: "0 (the data ends at the state's position)".into(),
                found: state.rows.to_string(),
            })?;
            if (g.rows.len() as u64) < state.rows {
                return Err(LoaderError::StateMismatch {
                    field: "rows",
                    expected: format!("at most {} (rows of the group)", g.rows.len()),
                    found: state.rows.to_string(),
                });
            }
            g.rows.drain(..state.rows as usize);
            g.emitted = state.rows;
            it.group = Some(g);
        }
        Ok(it)
    }

    fn make_iter(&self, cursor: Cursor<S, X>, next_batch: u64) -> StreamPackedIter<S, X, T> {
        StreamPackedIter {
            cursor,
            carry: None,
            group: None,
            next_batch,
            config: self.config,
            batch_size: self.batch_size,
            drop_remainder: self.drop_remainder,
            pad: self.pad,
            ignore: self.ignore,
            template: self.initial_state(),
            dropped: 0,
            done: false,
        }
    }
}

/// A record being packed, from token `token` on.
struct Head<X> {
    batch: u64,
    offset: u64,
    epoch: u64,
    index: u64,
    item: Arc<X>,
    token: u64,
}

impl<X> Head<X> {
    fn new(r: Rec<X>, token: u64) -> Self {
        Head {
            batch: r.batch,
            offset: r.offset,
            epoch: r.epoch,
            index: r.index,
            item: Arc::new(r.item),
            token,
        }
    }
}

/// A packed group: its start (batch, offset, token), its rows not yet delivered.
struct Group<T> {
    epoch: u64,
    start: (u64, u64, u64),
    rows: VecDeque<PackedRow<T>>,
    emitted: u64,
}

/// An open row of a group: tokens used, pieces (with the slot of their document).
struct OpenRow {
    used: u64,
    pieces: Vec<(usize, Piece)>,
}

/// The iterator of a [`StreamPacked`] stage.
pub struct StreamPackedIter<S: DataSource, X: Send, T> {
    cursor: Cursor<S, X>,
    /// The record the next group starts with, when it was read already.
    carry: Option<Head<X>>,
    group: Option<Group<T>>,
    next_batch: u64,
    config: PackConfig,
    batch_size: u64,
    drop_remainder: bool,
    pad: T,
    ignore: T,
    template: StreamState,
    dropped: u64,
    done: bool,
}

impl<S: DataSource, X: Send, T> std::fmt::Debug for StreamPackedIter<S, X, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamPackedIter")
            .field("next_batch", &self.next_batch)
            .field("dropped_tokens", &self.dropped)
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl<S, X, T> StreamPackedIter<S, X, T>
where
    S: DataSource + 'static,
    X: AsRef<[T]> + Send + 'static,
    T: Copy + Send + 'static,
{
    /// The checkpoint: [`StreamPacked::iter_from`] continues with the next batch not
    /// delivered.
    pub fn state(&self) -> StreamState {
        let (start, rows) = match &self.group {
            Some(g) if !g.rows.is_empty() => (g.start, g.emitted),
            _ => (self.head_pos(), 0),
        };
        let mut s = self.template;
        s.upstream.next_batch = start.0;
        s.offset = start.1;
        s.token = start.2;
        s.rows = rows;
        s.next_batch = self.next_batch;
        s
    }

    /// Tokens dropped by [`Overflow::Truncate`] in the groups this iterator packed (a group
    /// re-packed on resume counts again).
    pub fn dropped_tokens(&self) -> u64 {
        self.dropped
    }

    fn head_pos(&self) -> (u64, u64, u64) {
        match &self.carry {
            Some(h) => (h.batch, h.offset, h.token),
            None => {
                let (b, o) = self.cursor.pos();
                (b, o, 0)
            }
        }
    }

    fn pull(&mut self) -> Result<Option<Head<X>>, LoaderError> {
        if let Some(h) = self.carry.take() {
            return Ok(Some(h));
        }
        Ok(self.cursor.next()?.map(|r| Head::new(r, 0)))
    }

    /// Packs the next group with at least one row, or `None` at the end of the data.
    fn next_group(&mut self) -> Result<Option<Group<T>>, LoaderError> {
        loop {
            let start = self.head_pos();
            let Some(first) = self.pull()? else { return Ok(None) };
            let epoch = first.epoch;
            let (docs, rows) = match self.config.strategy {
                PackStrategy::ConcatSplit => self.concat_row(first)?,
                PackStrategy::FirstFit { bins } => self.fit_group(first, bins, false)?,
                PackStrategy::BestFit { bins } => self.fit_group(first, bins, true)?,
                PackStrategy::BestFitDecreasing => unreachable!("refused by StreamPacked::new"),
            };
            let laid: VecDeque<PackedRow<T>> = rows
                .into_iter()
                .filter(|r| !r.pieces.is_empty())
                .map(|r| {
                    let pieces: Vec<Piece> = r.pieces.iter().map(|p| p.1).collect();
                    let refs: Vec<&[T]> = r.pieces.iter().map(|p| (*docs[p.0]).as_ref()).collect();
                    lay_out(&self.config, self.pad, self.ignore, &pieces, &refs)
                })
                .collect();
            if !laid.is_empty() {
                return Ok(Some(Group { epoch, start, rows: laid, emitted: 0 }));
            }
            // Only empty documents before the end of an epoch: the next group starts after them.
        }
    }

    /// One concat-split row from `head` on.
    #[allow(clippy::type_complexity)]
    fn concat_row(&mut self, head: Head<X>) -> Result<(Vec<Arc<X>>, Vec<OpenRow>), LoaderError> {
        let l = self.config.seq_len;
        let max_seg = self.config.max_segments.unwrap_or(u64::MAX);
        let epoch = head.epoch;
        let mut docs: Vec<Arc<X>> = Vec::new();
        let mut row = OpenRow { used: 0, pieces: Vec::new() };
        let mut next = Some(head);
        while let Some(mut h) = next.take() {
            if h.epoch != epoch || row.used == l || row.pieces.len() as u64 == max_seg {
                self.carry = Some(h);
                break;
            }
            let len = (*h.item).as_ref().len() as u64;
            if h.token < len {
                let take = (len - h.token).min(l - row.used);
                docs.push(Arc::clone(&h.item));
                row.pieces.push((docs.len() - 1, Piece { doc: h.index, start: h.token, len: take }));
                row.used += take;
                h.token += take;
                if h.token < len {
                    self.carry = Some(h);
                    break;
                }
            }
            if row.used == l || row.pieces.len() as u64 == max_seg {
                break;
            }
            next = self.pull()?;
        }
        Ok((docs, vec![row]))
    }

    /// A first-fit or best-fit group of at most `bins` rows from `head` on.
    #[allow(clippy::type_complexity)]
    fn fit_group(
        &mut self,
        head: Head<X>,
        bins: u64,
        best: bool,
    ) -> Result<(Vec<Arc<X>>, Vec<OpenRow>), LoaderError> {
        let l = self.config.seq_len;
        let max_seg = self.config.max_segments.unwrap_or(u64::MAX);
        let epoch = head.epoch;
        let mut docs: Vec<Arc<X>> = Vec::new();
        let mut open: Vec<OpenRow> = Vec::new();
        let mut next = Some(head);
        'records: while let Some(mut h) = next.take() {
            if h.epoch != epoch {
                self.carry = Some(h);
                break;
            }
            let len = (*h.item).as_ref().len() as u64;
            let end = match self.config.overflow {
                Overflow::Error if len > l && h.token == 0 => {
                    return Err(LoaderError::DocumentTooLong { index: h.index, len, seq_len: l })
                }
                Overflow::Truncate => len.min(l),
                _ => len,
            };
            let mut slot = None;
            while h.token < end {
                let plen = (end - h.token).min(l);
                let fits = |r: &OpenRow| r.used + plen <= l && (r.pieces.len() as u64) < max_seg;
                let mut chosen: Option<usize> = None;
                for (i, r) in open.iter().enumerate() {
                    if fits(r) && chosen.is_none_or(|c| best && r.used > open[c].used) {
                        chosen = Some(i);
                        if !best {
                            break;
                        }
                    }
                }
                let i = match chosen {
                    Some(i) => i,
                    None if (open.len() as u64) < bins => {
                        open.push(OpenRow { used: 0, pieces: Vec::new() });
                        open.len() - 1
                    }
                    None => {
                        self.carry = Some(h);
                        break 'records;
                    }
                };
                let s = *slot.get_or_insert_with(|| {
                    docs.push(Arc::clone(&h.item));
                    docs.len() - 1
                });
                if h.token == 0 && len > end {
                    self.dropped += len - end;
                }
                open[i].used += plen;
                open[i].pieces.push((s, Piece { doc: h.index, start: h.token, len: plen }));
                h.token += plen;
            }
            next = self.pull()?;
        }
        Ok((docs, open))
    }
}

impl<S, X, T> Iterator for StreamPackedIter<S, X, T>
where
    S: DataSource + 'static,
    X: AsRef<[T]> + Send + 'static,
    T: Copy + Send + 'static,
{
    type Item = Result<StreamBatch<PackedRow<T>>, LoaderError>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done {
            let (mut data, mut epoch): (Vec<PackedRow<T>>, Option<u64>) = (Vec::new(), None);
            while (data.len() as u64) < self.batch_size {
                if self.group.as_ref().is_none_or(|g| g.rows.is_empty()) {
                    match self.next_group() {
                        Ok(Some(g)) => self.group = Some(g),
                        Ok(None) => {
                            self.group = None;
                            break;
                        }
                        Err(e) => {
                            self.done = true;
                            return Some(Err(e));
                        }
                    }
                }
                let Some(g) = self.group.as_mut() else { break };
                if epoch.is_some_and(|e| e != g.epoch) {
                    break;
                }
                epoch = Some(g.epoch);
                if let Some(row) = g.rows.pop_front() {
                    g.emitted += 1;
                    data.push(row);
                }
            }
            let Some(epoch) = epoch else {
                self.done = true;
                return None;
            };
            if self.drop_remainder && (data.len() as u64) < self.batch_size {
                continue;
            }
            let number = self.next_batch;
            self.next_batch += 1;
            let indices = data.iter().flat_map(|r| r.pieces.iter().map(|p| p.doc)).collect();
            return Some(Ok(StreamBatch { number, epoch, indices, data }));
        }
        None
    }
}
