//! Document packing: a pack plan over document lengths (random access: packed rows are
//! records that a [`Loader`](crate::Loader) shuffles, shards and resumes), and the packed row
//! layout with per-document targets, segment ids, positions, loss mask and `cu_seqlens`.

use std::collections::BTreeSet;

use crate::{Collate, DataSource, LoaderError};

/// Domain-separation tag of a pack plan's fingerprint.
const TAG_PACK: u64 = u64::from_le_bytes(*b"glpack\0\0");

/// How documents are put into rows of `seq_len` tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PackStrategy {
    /// Concatenate the documents in order and cut every `seq_len` tokens (a document may
    /// continue in the next row; only the last row is padded). Grain's `ConcatThenSplit`
    /// with `split_full_length_features=True`.
    ConcatSplit,
    /// `bins` open rows; a document goes to the first row it fits; when it fits none, every
    /// open row is emitted (in bin order) and the document starts a fresh group. Grain's
    /// `FirstFitPackIterDataset` without bin shuffling.
    FirstFit {
        /// Open rows (at least 1).
        bins: u64,
    },
    /// As [`PackStrategy::FirstFit`], but a document goes to the fullest row it fits (ties
    /// to the lowest row). Grain's `BestFitPackIterDataset`.
    BestFit {
        /// Open rows (at least 1).
        bins: u64,
    },
    /// Offline best-fit-decreasing over all documents: sorted by length, longest first (ties
    /// in document order), each into the fullest row it fits, else a new row; rows in the
    /// order they were opened. Near-optimal row counts (at most `11/9 OPT + 6/9`: Dósa,
    /// "The Tight Bound of First Fit Decreasing Bin-Packing Algorithm Is FFD(I) <=
    /// 11/9 OPT(I) + 6/9", ESCAPE 2007, holds for best fit decreasing as well).
    BestFitDecreasing,
}

/// What happens to a document longer than a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Overflow {
    /// Planning fails with [`LoaderError::DocumentTooLong`] naming the document (the default).
    #[default]
    Error,
    /// Keep the first `seq_len` tokens; the dropped tokens are counted
    /// ([`PackPlan::dropped_tokens`]).
    Truncate,
    /// Cut the document into pieces of `seq_len` tokens (the last one shorter), each packed
    /// as a document of its own; no token is lost.
    Split,
}

/// The longest row a packing accepts, in tokens (2^32): a [`PackedRow`] holds five arrays
/// of `seq_len` entries, so a longer row could not be allocated (or would overflow `usize`
/// on the way); [`PackPlan::new`] and [`StagePacked::new`](crate::stage::StagePacked::new)
/// refuse it with [`LoaderError::InvalidConfig`].
pub const MAX_ROW_TOKENS: u64 = 1 << 32;

/// Row length, strategy, overflow policy and segment limit of a packing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PackConfig {
    /// Tokens per row (`L`).
    pub seq_len: u64,
    /// The strategy.
    pub strategy: PackStrategy,
    /// Documents longer than a row.
    pub overflow: Overflow,
    /// At most this many documents (segments) per row; `None`: no limit.
    pub max_segments: Option<u64>,
}

impl PackConfig {
    /// Rows of `seq_len` tokens by `strategy`, [`Overflow::Error`], no segment limit.
    pub fn new(seq_len: u64, strategy: PackStrategy) -> Self {
        PackConfig { seq_len, strategy, overflow: Overflow::Error, max_segments: None }
    }

    /// Sets the overflow policy.
    pub fn overflow(mut self, overflow: Overflow) -> Self {
        self.overflow = overflow;
        self
    }

    /// Sets the segment limit per row.
    pub fn max_segments(mut self, max: u64) -> Self {
        self.max_segments = Some(max);
        self
    }
}

/// A run of one document's tokens inside a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    /// The document (position in the packed source).
    pub doc: u64,
    /// First token of the document in this piece.
    pub start: u64,
    /// Tokens in this piece.
    pub len: u64,
}

/// Which document pieces each row holds: a pure function of the document lengths and the
/// configuration, so row `i` is computed (and read) independently of every other row.
///
/// ```
/// use guideloom_loader::pack::{PackConfig, PackPlan, PackStrategy};
/// let plan = PackPlan::new(&[2, 2, 2, 2], PackConfig::new(5, PackStrategy::BestFitDecreasing))?;
/// assert_eq!(plan.rows(), 2);
/// # Ok::<(), guideloom_loader::LoaderError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackPlan {
    config: PackConfig,
    /// `row_starts[r]..row_starts[r + 1]`: row `r`'s pieces.
    row_starts: Vec<usize>,
    pieces: Vec<Piece>,
    dropped: u64,
    fingerprint: u64,
}

struct Bin {
    used: u64,
    segments: u64,
    pieces: Vec<Piece>,
}

impl PackPlan {
    /// Plans rows for documents of `lengths` tokens (empty documents are skipped).
    ///
    /// # Errors
    /// [`LoaderError::InvalidConfig`] for `seq_len == 0`, `seq_len` above [`MAX_ROW_TOKENS`],
    /// `bins == 0` or `max_segments == 0` (`pack`); [`LoaderError::DocumentTooLong`] for a document
    /// longer than `seq_len` under [`Overflow::Error`] (not for [`PackStrategy::ConcatSplit`],
    /// which splits by design).
    pub fn new(lengths: &[u64], config: PackConfig) -> Result<Self, LoaderError> {
        let l = config.seq_len;
        let bad = |detail: &str| LoaderError::InvalidConfig { field: "pack", detail: detail.into() };
        if l == 0 {
            return Err(bad("rows of 0 tokens"));
        }
        if l > MAX_ROW_TOKENS {
            return Err(bad(&format!("rows of {l} tokens: more than the {MAX_ROW_TOKENS} a row can hold")));
        }
        if config.max_segments == Some(0) {
            return Err(bad("at most 0 segments per row"));
        }
        if let PackStrategy::FirstFit { bins: 0 } | PackStrategy::BestFit { bins: 0 } = config.strategy {
            return Err(bad("0 bins"));
        }
        let max_seg = config.max_segments.unwrap_or(u64::MAX);
        let mut rows: Vec<Vec<Piece>> = Vec::new();
        let mut dropped = 0u64;
        if config.strategy == PackStrategy::ConcatSplit {
            let mut row: Vec<Piece> = Vec::new();
            let mut used = 0u64;
            for (doc, &len) in lengths.iter().enumerate() {
                let mut start = 0;
                while start < len {
                    if used == l || row.len() as u64 == max_seg {
                        rows.push(std::mem::take(&mut row));
                        used = 0;
                    }
                    let take = (len - start).min(l - used);
                    row.push(Piece { doc: doc as u64, start, len: take });
                    used += take;
                    start += take;
                }
            }
            if !row.is_empty() {
                rows.push(row);
            }
        } else {
            // Documents after the overflow policy, in order.
            let mut items: Vec<Piece> = Vec::with_capacity(lengths.len());
            for (doc, &len) in lengths.iter().enumerate() {
                let doc = doc as u64;
                if len <= l {
                    if len > 0 {
                        items.push(Piece { doc, start: 0, len });
                    }
                    continue;
                }
                match config.overflow {
                    Overflow::Error => {
                        return Err(LoaderError::DocumentTooLong { index: doc, len, seq_len: l })
                    }
                    Overflow::Truncate => {
                        dropped += len - l;
                        items.push(Piece { doc, start: 0, len: l });
                    }
                    Overflow::Split => {
                        let mut start = 0;
                        while start < len {
                            items.push(Piece { doc, start, len: (len - start).min(l) });
                            start += l;
                        }
                    }
                }
            }
            match config.strategy {
                PackStrategy::FirstFit { bins } | PackStrategy::BestFit { bins } => {
                    let best = matches!(config.strategy, PackStrategy::BestFit { .. });
                    let mut open: Vec<Bin> = Vec::new();
                    for p in items {
                        let fits = |b: &Bin| b.used + p.len <= l && b.segments < max_seg;
                        let i = match choose_row(open.iter().map(|b| fits(b).then_some(b.used)), best) {
                            Some(i) => i,
                            None if (open.len() as u64) < bins => {
                                open.push(Bin { used: 0, segments: 0, pieces: Vec::new() });
                                open.len() - 1
                            }
                            None => {
                                rows.extend(open.drain(..).map(|b| b.pieces));
                                open.push(Bin { used: 0, segments: 0, pieces: Vec::new() });
                                0
                            }
                        };
                        let b = &mut open[i];
                        b.used += p.len;
                        b.segments += 1;
                        b.pieces.push(p);
                    }
                    rows.extend(open.into_iter().map(|b| b.pieces));
                }
                PackStrategy::BestFitDecreasing => {
                    let mut order = items;
                    order.sort_by_key(|p| std::cmp::Reverse(p.len)); // stable: ties in document order
                    let mut bins: Vec<Bin> = Vec::new();
                    // Bins that can still take a document, keyed by (free tokens, bin index).
                    let mut free: BTreeSet<(u64, usize)> = BTreeSet::new();
                    for p in order {
                        let i = match free.range((p.len, 0)..).next().copied() {
                            Some(key) => {
                                free.remove(&key);
                                key.1
                            }
                            None => {
                                bins.push(Bin { used: 0, segments: 0, pieces: Vec::new() });
                                bins.len() - 1
                            }
                        };
                        let b = &mut bins[i];
                        b.used += p.len;
                        b.segments += 1;
                        b.pieces.push(p);
                        if b.used < l && b.segments < max_seg {
                            free.insert((l - b.used, i));
                        }
                    }
                    rows.extend(bins.into_iter().map(|b| b.pieces));
                }
                PackStrategy::ConcatSplit => unreachable!("handled above"),
            }
        }
        let mut row_starts = vec![0usize];
        let mut pieces = Vec::new();
        for r in rows.into_iter().filter(|r| !r.is_empty()) {
            pieces.extend(r);
            row_starts.push(pieces.len());
        }
        let (tag, bins) = match config.strategy {
            PackStrategy::ConcatSplit => (1, 0),
            PackStrategy::FirstFit { bins } => (2, bins),
            PackStrategy::BestFit { bins } => (3, bins),
            PackStrategy::BestFitDecreasing => (4, 0),
        };
        let mut words =
            vec![TAG_PACK, l, tag, bins, config.max_segments.unwrap_or(0), config.overflow as u64];
        words.extend(lengths);
        let fingerprint = crate::fingerprint_words(&words);
        Ok(PackPlan { config, row_starts, pieces, dropped, fingerprint })
    }

    /// Number of rows.
    pub fn rows(&self) -> u64 {
        (self.row_starts.len() - 1) as u64
    }

    /// The pieces of row `row`, or `None` past the end.
    pub fn row(&self, row: u64) -> Option<&[Piece]> {
        let r = usize::try_from(row).ok()?;
        let (a, b) = (*self.row_starts.get(r)?, *self.row_starts.get(r + 1)?);
        Some(&self.pieces[a..b])
    }

    /// Tokens dropped by [`Overflow::Truncate`].
    pub fn dropped_tokens(&self) -> u64 {
        self.dropped
    }

    /// Share of padding over all rows, in `[0, 1]` (0 for no row).
    pub fn padding_share(&self) -> f64 {
        let total = self.rows() * self.config.seq_len;
        if total == 0 {
            return 0.0;
        }
        let used: u64 = self.pieces.iter().map(|p| p.len).sum();
        (total - used) as f64 / total as f64
    }

    /// The configuration.
    pub fn config(&self) -> &PackConfig {
        &self.config
    }

    /// A fingerprint of the configuration and the lengths (recorded in loader states).
    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }
}

/// One packed row of `L` tokens.
///
/// Layout (the published conventions it follows): `segment_ids` are 1-based per row with 0
/// for padding and `positions` restart at 0 in every segment (Grain's packers); `targets`
/// are shifted **per document**: the target of a token is the next token of the same
/// document, and a document's last token (also the last kept token of a truncated one) gets
/// the ignore id, as does padding (torchtune PR #2613 fixed the cross-document shift);
/// `loss_mask` is 1 exactly where the target is real; `cu_seqlens` is `[0, l1, l1 + l2, ...]`
/// over the row's segments, as flash-attention's varlen kernels take it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackedRow<T> {
    /// `[L]` tokens, `pad_id` after the last segment.
    pub tokens: Vec<T>,
    /// `[L]` next token of the same document, or the ignore id.
    pub targets: Vec<T>,
    /// `[L]` 1-based segment per token, 0 for padding.
    pub segment_ids: Vec<u32>,
    /// `[L]` position of the token in its segment, 0 for padding.
    pub positions: Vec<u32>,
    /// `[L]` 1 where `targets` is real, else 0.
    pub loss_mask: Vec<u8>,
    /// `[segments + 1]` segment boundaries.
    pub cu_seqlens: Vec<u32>,
    /// The pieces of the row (document, first token, length).
    pub pieces: Vec<Piece>,
    /// Per piece (parallel to `pieces`), the mixture source its document came from: the
    /// source's index in the [`Mix`](crate::mix::Mix) that [`Mix::pack`](crate::mix::Mix::pack)
    /// packed. Empty when the packed documents are not a mixture's (a [`Packed`] over any
    /// other source, and the rows of the streaming packer
    /// [`StagePacked`](crate::stage::StagePacked), whose pieces name positions of its source:
    /// [`MixPlan::locate`](crate::mix::MixPlan::locate) gives their sources).
    pub sources: Vec<u32>,
}

/// A document source packed into rows by a [`PackPlan`]: a [`DataSource`] of [`PackedRow`]s
/// (so a loader shuffles, shards and resumes rows with an O(1) state, identically for every
/// worker count).
///
/// Documents are the inner source's records (`AsRef<[T]>`: a `Vec` of token ids, for
/// example from a [`Documents`](crate::Documents) storage), packed in the inner source's
/// position order; put an index-stage transform (a [`Mix`](crate::mix::Mix), a
/// [`WindowShuffle`](crate::transforms::WindowShuffle) ...) under it to pack another order.
///
/// ```
/// use guideloom_loader::{DataSource, VecSource};
/// use guideloom_loader::pack::{PackConfig, PackStrategy, Packed};
/// let docs = VecSource::new(vec![vec![5u32, 6, 0], vec![7, 8, 0], vec![9]]);
/// let packed = Packed::scan(docs, PackConfig::new(7, PackStrategy::ConcatSplit), 0, u32::MAX)?;
/// let row = packed.get(0)?;
/// assert_eq!(row.tokens, [5, 6, 0, 7, 8, 0, 9]);
/// assert_eq!(row.targets, [6, 0, u32::MAX, 8, 0, u32::MAX, u32::MAX]);
/// assert_eq!(row.cu_seqlens, [0, 3, 6, 7]);
/// # Ok::<(), guideloom_loader::LoaderError>(())
/// ```
#[derive(Debug)]
pub struct Packed<S, T> {
    inner: S,
    plan: PackPlan,
    lengths: Vec<u64>,
    /// Per document, its mixture source ([`Mix::pack`](crate::mix::Mix::pack)); empty otherwise.
    sources: Vec<u32>,
    pad: T,
    ignore: T,
}

impl<S, T> Packed<S, T>
where
    S: DataSource,
    S::Item: AsRef<[T]>,
    T: Copy + Send + Sync,
{
    /// Packs `inner`, whose document `i` has `lengths[i]` tokens; `pad` fills padding and
    /// `ignore` marks targets without a next token.
    ///
    /// # Errors
    /// [`LoaderError::InvalidConfig`] (`lengths`) when `lengths` and `inner` differ in
    /// length; as [`PackPlan::new`].
    pub fn with_lengths(
        inner: S,
        lengths: Vec<u64>,
        config: PackConfig,
        pad: T,
        ignore: T,
    ) -> Result<Self, LoaderError> {
        if lengths.len() as u64 != inner.len() {
            return Err(LoaderError::InvalidConfig {
                field: "lengths",
                detail: format!("{} lengths for {} documents", lengths.len(), inner.len()),
            });
        }
        let plan = PackPlan::new(&lengths, config)?;
        Ok(Packed { inner, plan, lengths, sources: Vec::new(), pad, ignore })
    }

    /// Packs `inner`, reading every document once (1,024 at a time) to learn its length.
    ///
    /// # Errors
    /// The first read error; as [`Packed::with_lengths`].
    pub fn scan(inner: S, config: PackConfig, pad: T, ignore: T) -> Result<Self, LoaderError> {
        let n = inner.len();
        let mut lengths = Vec::with_capacity(usize::try_from(n).unwrap_or(0));
        let mut i = 0;
        while i < n {
            let ids: Vec<u64> = (i..(i + 1024).min(n)).collect();
            lengths.extend(inner.get_many(&ids)?.iter().map(|d| d.as_ref().len() as u64));
            i += ids.len() as u64;
        }
        Self::with_lengths(inner, lengths, config, pad, ignore)
    }

    /// The plan.
    pub fn plan(&self) -> &PackPlan {
        &self.plan
    }

    /// The inner (document) source.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// Tokens per document of the inner source, in its position order.
    pub fn lengths(&self) -> &[u64] {
        &self.lengths
    }

    /// Records `sources[d]` as the mixture source of document `d` ([`PackedRow::sources`]);
    /// the caller passes one per document.
    pub(crate) fn with_sources(mut self, sources: Vec<u32>) -> Self {
        debug_assert_eq!(sources.len(), self.lengths.len());
        self.sources = sources;
        self
    }

    fn layout(&self, pieces: &[Piece], docs: &[S::Item]) -> Result<PackedRow<T>, LoaderError> {
        let mut refs: Vec<&[T]> = Vec::with_capacity(docs.len());
        for (p, doc) in pieces.iter().zip(docs) {
            let doc = doc.as_ref();
            let want = self.lengths[p.doc as usize];
            if doc.len() as u64 != want {
                return Err(LoaderError::DocumentChanged {
                    index: p.doc,
                    expected: want,
                    found: doc.len() as u64,
                });
            }
            refs.push(doc);
        }
        let mut row = lay_out(&self.plan.config, self.pad, self.ignore, pieces, &refs);
        if !self.sources.is_empty() {
            row.sources =
                pieces.iter().map(|p| self.sources.get(p.doc as usize).copied().unwrap_or(0)).collect();
        }
        Ok(row)
    }
}

/// The open row a piece goes to, given each row's tokens used when the piece fits it (`None`
/// when it does not): the first that fits (first-fit), or the fullest that fits, ties to the
/// lowest (best-fit); `None` when no row fits. Shared by [`PackPlan`] and the stage's
/// streaming packer, so both choose alike.
pub(crate) fn choose_row(rows: impl IntoIterator<Item = Option<u64>>, best: bool) -> Option<usize> {
    let mut chosen: Option<(usize, u64)> = None;
    for (i, used) in rows.into_iter().enumerate() {
        let Some(used) = used else { continue };
        if chosen.is_none_or(|(_, c)| best && used > c) {
            chosen = Some((i, used));
            if !best {
                break;
            }
        }
    }
    chosen.map(|(i, _)| i)
}

/// The [`PackedRow`] of `pieces`, `docs[i]` holding the tokens of `pieces[i].doc` (whole).
pub(crate) fn lay_out<T: Copy>(
    config: &PackConfig,
    pad: T,
    ignore: T,
    pieces: &[Piece],
    docs: &[&[T]],
) -> PackedRow<T> {
    let l = config.seq_len as usize;
    let mut row = PackedRow {
        tokens: vec![pad; l],
        targets: vec![ignore; l],
        segment_ids: vec![0; l],
        positions: vec![0; l],
        loss_mask: vec![0; l],
        cu_seqlens: vec![0],
        pieces: pieces.to_vec(),
        sources: Vec::new(),
    };
    let mut at = 0usize;
    for (s, (p, doc)) in pieces.iter().zip(docs).enumerate() {
        let want = doc.len() as u64;
        // The kept end of the document: a truncated one ends at `seq_len`.
        let kept = if config.strategy != PackStrategy::ConcatSplit && config.overflow == Overflow::Truncate {
            want.min(config.seq_len)
        } else {
            want
        };
        for j in 0..p.len as usize {
            let t = p.start as usize + j;
            row.tokens[at] = doc[t];
            if (t + 1) < kept as usize {
                row.targets[at] = doc[t + 1];
                row.loss_mask[at] = 1;
            }
            row.segment_ids[at] = (s + 1) as u32;
            row.positions[at] = j as u32;
            at += 1;
        }
        row.cu_seqlens.push(at as u32);
    }
    row
}

impl<S, T> DataSource for Packed<S, T>
where
    S: DataSource,
    S::Item: AsRef<[T]>,
    T: Copy + Send + Sync,
{
    type Item = PackedRow<T>;

    fn len(&self) -> u64 {
        self.plan.rows()
    }

    fn get(&self, index: u64) -> Result<PackedRow<T>, LoaderError> {
        let pieces =
            self.plan.row(index).ok_or(LoaderError::IndexOutOfRange { index, len: self.plan.rows() })?;
        let ids: Vec<u64> = pieces.iter().map(|p| p.doc).collect();
        let docs = self.inner.get_many(&ids)?;
        self.layout(pieces, &docs)
    }

    fn fingerprint(&self) -> u64 {
        crate::fingerprint_words(&[self.plan.fingerprint, self.inner.fingerprint()])
    }
}

/// `[B, L]` arrays of a batch of [`PackedRow`]s, row-major.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackedBatch<T> {
    /// Rows in the batch (`B`).
    pub rows: usize,
    /// Tokens per row (`L`).
    pub seq_len: usize,
    /// `[B, L]` tokens.
    pub tokens: Vec<T>,
    /// `[B, L]` per-document targets.
    pub targets: Vec<T>,
    /// `[B, L]` segment ids.
    pub segment_ids: Vec<u32>,
    /// `[B, L]` positions.
    pub positions: Vec<u32>,
    /// `[B, L]` loss mask.
    pub loss_mask: Vec<u8>,
    /// Per row, `[segments + 1]` boundaries.
    pub cu_seqlens: Vec<Vec<u32>>,
    /// Per row, the mixture source of each of its pieces ([`PackedRow::sources`]; empty rows
    /// when the documents are not a mixture's).
    pub sources: Vec<Vec<u32>>,
}

/// Stacks [`PackedRow`]s into a [`PackedBatch`].
#[derive(Debug, Clone, Copy, Default)]
pub struct PackCollate;

impl<T: Copy + Send + 'static> Collate<PackedRow<T>> for PackCollate {
    type Output = PackedBatch<T>;
    fn collate(&self, items: Vec<PackedRow<T>>) -> Result<PackedBatch<T>, LoaderError> {
        let seq_len = items.first().map_or(0, |r| r.tokens.len());
        let mut b = PackedBatch {
            rows: items.len(),
            seq_len,
            tokens: Vec::with_capacity(items.len() * seq_len),
            targets: Vec::with_capacity(items.len() * seq_len),
            segment_ids: Vec::with_capacity(items.len() * seq_len),
            positions: Vec::with_capacity(items.len() * seq_len),
            loss_mask: Vec::with_capacity(items.len() * seq_len),
            cu_seqlens: Vec::with_capacity(items.len()),
            sources: Vec::with_capacity(items.len()),
        };
        for r in items {
            b.tokens.extend(r.tokens);
            b.targets.extend(r.targets);
            b.segment_ids.extend(r.segment_ids);
            b.positions.extend(r.positions);
            b.loss_mask.extend(r.loss_mask);
            b.cu_seqlens.push(r.cu_seqlens);
            b.sources.push(r.sources);
        }
        Ok(b)
    }
}
