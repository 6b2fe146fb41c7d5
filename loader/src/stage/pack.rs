//! Streaming packing: [`StagePacked`], documents packed into rows over each epoch's order.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::pack::{
    choose_row, lay_out, Overflow, PackConfig, PackStrategy, PackedRow, Piece, MAX_ROW_TOKENS,
};
use crate::stage::cursor::{Cursor, Rec, Stage, StageCursor, Units};
use crate::stage::state::{StageBatch, StageState};
use crate::{DataSource, Loader, LoaderError};

/// Domain-separation tag of the packing stage's fingerprint.
const TAG_STAGE_PACK: u64 = u64::from_le_bytes(*b"glspack\0");

/// Streaming packing: the records of a [`Loader`] of `Option<X>` (documents of tokens; holes
/// and padding records are dropped) packed into rows of `seq_len` tokens in the order the
/// loader delivers them, that is over each epoch's shuffled global order (this rank's share),
/// so every epoch is packed anew; rows come in batches of `batch_size` rows
/// ([`PackedRow`]: per-document targets, segment ids, positions, loss mask, `cu_seqlens`; stack
/// them with [`PackCollate`](crate::pack::PackCollate)).
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
///   planned [`Packed`](crate::pack::Packed) source for it ([`StagePacked::new`] refuses it).
///
/// Over the same record order, the rows are those of the planned
/// [`PackPlan`](crate::pack::PackPlan)
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
/// use guideloom_loader::pack::{PackConfig, PackStrategy};
/// use guideloom_loader::stage::StagePacked;
/// use guideloom_loader::{Loader, VecSource};
/// // Document i is i + 1 repeated: lengths [3, 4, 2, 1].
/// let docs: Vec<Option<Vec<u32>>> =
///     [3usize, 4, 2, 1].iter().enumerate().map(|(i, &n)| Some(vec![i as u32 + 1; n])).collect();
/// let loader = Loader::builder(VecSource::new(docs)).batch_size(2).workers(0).build()?;
/// let cfg = PackConfig::new(6, PackStrategy::FirstFit { bins: 2 });
/// let stage = StagePacked::new(loader, cfg, 2, 0u32, u32::MAX)?;
/// let batch = stage.iter().next().unwrap()?;
/// assert_eq!(batch.data[0].tokens, [1, 1, 1, 3, 3, 4]);
/// assert_eq!(batch.data[1].tokens, [2, 2, 2, 2, 0, 0]);
/// assert_eq!(batch.indices, [0, 2, 3, 1]);
/// # Ok::<(), guideloom_loader::LoaderError>(())
/// ```
pub struct StagePacked<S: DataSource, X, T> {
    stage: Stage<S, X>,
    config: PackConfig,
    pad: T,
    ignore: T,
}

impl<S: DataSource, X, T> std::fmt::Debug for StagePacked<S, X, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StagePacked")
            .field("stage", &self.stage)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl<S, X, T> StagePacked<S, X, T>
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
    /// of more than [`MAX_ROW_TOKENS`], 0 bins, `max_segments` 0, or
    /// [`PackStrategy::BestFitDecreasing`].
    pub fn new(
        loader: Loader<S, Option<X>>,
        config: PackConfig,
        batch_size: u64,
        pad: T,
        ignore: T,
    ) -> Result<Self, LoaderError> {
        let bad = |detail: &str| Err(LoaderError::InvalidConfig { field: "pack", detail: detail.into() });
        let stage = Stage::new(loader, batch_size)?;
        if config.seq_len == 0 {
            return bad("rows of 0 tokens");
        }
        if config.seq_len > MAX_ROW_TOKENS {
            return bad(&format!(
                "rows of {} tokens: more than the {} a row can hold",
                config.seq_len, MAX_ROW_TOKENS
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
        Ok(StagePacked { stage, config, pad, ignore })
    }

    /// Whether the short last batch of each epoch is dropped (default `false`).
    pub fn drop_remainder(mut self, drop: bool) -> Self {
        self.stage.drop_remainder = drop;
        self
    }

    /// The upstream loader.
    pub fn loader(&self) -> &Loader<S, Option<X>> {
        &self.stage.loader
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
        let [b, drop, t0, t1, t2] = self.stage.words();
        crate::fingerprint_words(&[
            TAG_STAGE_PACK,
            b,
            drop,
            c.seq_len,
            tag,
            bins,
            c.max_segments.unwrap_or(0),
            c.overflow as u64,
            t0,
            t1,
            t2,
        ])
    }

    /// The state of an iterator that has delivered nothing.
    pub fn initial_state(&self) -> StageState {
        self.stage.initial_state(self.fingerprint())
    }

    /// Iterates from the first record.
    pub fn iter(&self) -> StagePackedIter<S, X, T> {
        StagePackedIter { cursor: self.stage.start(self.fingerprint()), packing: self.packing() }
    }

    /// Iterates from the batch after the last one delivered when `state` was taken: re-reads
    /// the in-flight group from its first record and skips its rows already delivered.
    ///
    /// # Errors
    /// As [`Rebatched::iter_from`](crate::stage::Rebatched::iter_from);
    /// [`LoaderError::StateMismatch`] (`rows`) when the group has fewer rows than the state
    /// says were delivered; a packing error of the group ([`LoaderError::DocumentTooLong`]).
    pub fn iter_from(&self, state: &StageState) -> Result<StagePackedIter<S, X, T>, LoaderError> {
        let mut cursor = self.stage.resume(state, self.fingerprint())?;
        let mut packing = self.packing();
        if state.token > 0 {
            packing.carry = cursor.upstream.next()?.map(|r| Head::new(r, state.token));
        }
        if state.rows > 0 {
            let mut g =
                packing.next_group(&mut cursor.upstream)?.ok_or_else(|| LoaderError::StateMismatch {
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
            packing.group = Some(g);
        }
        Ok(StagePackedIter { cursor, packing })
    }

    fn packing(&self) -> Packing<X, T> {
        Packing {
            carry: None,
            group: None,
            config: self.config,
            pad: self.pad,
            ignore: self.ignore,
            dropped: 0,
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

/// The iterator of a [`StagePacked`] stage.
pub struct StagePackedIter<S: DataSource, X: Send, T> {
    cursor: StageCursor<S, X>,
    packing: Packing<X, T>,
}

/// What a packing iterator holds beside its cursor: the record the next group starts with,
/// the group being delivered, the packing configuration and the tokens dropped.
struct Packing<X, T> {
    /// The record the next group starts with, when it was read already.
    carry: Option<Head<X>>,
    group: Option<Group<T>>,
    config: PackConfig,
    pad: T,
    ignore: T,
    dropped: u64,
}

impl<S: DataSource, X: Send, T> std::fmt::Debug for StagePackedIter<S, X, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let dropped = self.packing.dropped;
        f.debug_struct("StagePackedIter")
            .field("cursor", &self.cursor)
            .field("dropped_tokens", &dropped)
            .finish()
    }
}

impl<S, X, T> StagePackedIter<S, X, T>
where
    S: DataSource + 'static,
    X: AsRef<[T]> + Send + 'static,
    T: Copy + Send + 'static,
{
    /// The checkpoint: [`StagePacked::iter_from`] continues with the next batch not
    /// delivered.
    pub fn state(&self) -> StageState {
        let ((batch, offset, token), rows) = match &self.packing.group {
            Some(g) if !g.rows.is_empty() => (g.start, g.emitted),
            _ => (self.packing.head_pos(&self.cursor.upstream), 0),
        };
        self.cursor.state((batch, offset), token, rows)
    }

    /// Tokens dropped by [`Overflow::Truncate`] in the groups this iterator packed (a group
    /// re-packed on resume counts again).
    pub fn dropped_tokens(&self) -> u64 {
        self.packing.dropped
    }
}

impl<X, T> Packing<X, T>
where
    X: AsRef<[T]> + Send + 'static,
    T: Copy + Send + 'static,
{
    fn head_pos<S: DataSource + 'static>(&self, upstream: &Cursor<S, X>) -> (u64, u64, u64) {
        match &self.carry {
            Some(h) => (h.batch, h.offset, h.token),
            None => {
                let (b, o) = upstream.pos();
                (b, o, 0)
            }
        }
    }

    fn pull_head<S: DataSource + 'static>(
        &mut self,
        upstream: &mut Cursor<S, X>,
    ) -> Result<Option<Head<X>>, LoaderError> {
        if let Some(h) = self.carry.take() {
            return Ok(Some(h));
        }
        Ok(upstream.next()?.map(|r| Head::new(r, 0)))
    }

    /// Packs the next group with at least one row, or `None` at the end of the data.
    fn next_group<S: DataSource + 'static>(
        &mut self,
        upstream: &mut Cursor<S, X>,
    ) -> Result<Option<Group<T>>, LoaderError> {
        loop {
            let start = self.head_pos(upstream);
            let Some(first) = self.pull_head(upstream)? else { return Ok(None) };
            let epoch = first.epoch;
            let (docs, rows) = match self.config.strategy {
                PackStrategy::ConcatSplit => self.concat_row(upstream, first)?,
                PackStrategy::FirstFit { bins } => self.fit_group(upstream, first, bins, false)?,
                PackStrategy::BestFit { bins } => self.fit_group(upstream, first, bins, true)?,
                PackStrategy::BestFitDecreasing => unreachable!("refused by StagePacked::new"),
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
    fn concat_row<S: DataSource + 'static>(
        &mut self,
        upstream: &mut Cursor<S, X>,
        head: Head<X>,
    ) -> Result<(Vec<Arc<X>>, Vec<OpenRow>), LoaderError> {
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
            next = self.pull_head(upstream)?;
        }
        Ok((docs, vec![row]))
    }

    /// A first-fit or best-fit group of at most `bins` rows from `head` on.
    #[allow(clippy::type_complexity)]
    fn fit_group<S: DataSource + 'static>(
        &mut self,
        upstream: &mut Cursor<S, X>,
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
                let i = match choose_row(open.iter().map(|r| fits(r).then_some(r.used)), best) {
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
            next = self.pull_head(upstream)?;
        }
        Ok((docs, open))
    }
}

/// Packing batches rows: a group's rows in the order they were opened, the next group packed
/// when one is used up; a row of the next epoch goes back to the front of its group.
impl<S, X, T> Units<S, X> for Packing<X, T>
where
    S: DataSource + 'static,
    X: AsRef<[T]> + Send + 'static,
    T: Copy + Send + 'static,
{
    type Unit = PackedRow<T>;

    fn pull(&mut self, upstream: &mut Cursor<S, X>) -> Result<Option<(u64, PackedRow<T>)>, LoaderError> {
        if self.group.as_ref().is_none_or(|g| g.rows.is_empty()) {
            self.group = self.next_group(upstream)?;
        }
        let Some(g) = self.group.as_mut() else { return Ok(None) };
        let Some(row) = g.rows.pop_front() else { return Ok(None) };
        g.emitted += 1;
        Ok(Some((g.epoch, row)))
    }

    fn put_back(&mut self, row: PackedRow<T>) {
        if let Some(g) = self.group.as_mut() {
            g.rows.push_front(row);
            g.emitted -= 1;
        }
    }
}

impl<S, X, T> Iterator for StagePackedIter<S, X, T>
where
    S: DataSource + 'static,
    X: AsRef<[T]> + Send + 'static,
    T: Copy + Send + 'static,
{
    type Item = Result<StageBatch<PackedRow<T>>, LoaderError>;

    fn next(&mut self) -> Option<Self::Item> {
        Some(self.cursor.next(&mut self.packing)?.map(|(number, epoch, data)| {
            let indices = data.iter().flat_map(|r| r.pieces.iter().map(|p| p.doc)).collect();
            StageBatch { number, epoch, indices, data }
        }))
    }
}
