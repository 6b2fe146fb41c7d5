//! One rank's records: a deterministic interleave of `cycle` open shards of the rank's list
//! (Grain's and tf.data's interleave), each read in windows, shuffled inside a window when
//! asked.

use std::sync::Arc;

use crate::sequential::{SequentialSource, ShardCursor, ShardPos, ShardReader};
use crate::{fingerprint_words, LoaderError, Permutation, RecordId};

/// Domain tag of a shuffle window's permutation seed.
const TAG_WINDOW: u64 = u64::from_le_bytes(*b"glwindow");

/// What every rank's interleave of a loader shares.
#[derive(Debug, Clone)]
pub(crate) struct InterleaveConfig {
    /// Seed of the window permutations.
    pub(crate) seed: u64,
    /// Records per shuffle window (1: no window shuffle).
    pub(crate) window: u64,
    /// Shards open at once in a rank.
    pub(crate) cycle: usize,
    /// Every shard's length, when all are known.
    pub(crate) hints: Option<Arc<Vec<u64>>>,
}

impl InterleaveConfig {
    fn hint(&self, shard: u64) -> Option<u64> {
        self.hints.as_ref().and_then(|h| usize::try_from(shard).ok().and_then(|s| h.get(s).copied()))
    }

    /// The permutation of a shuffle window of `len` records starting at record `first` of
    /// `shard`, or `None` when windows are not shuffled.
    fn window_order(&self, shard: u64, first: u64, len: u64, epoch: u64) -> Option<Permutation> {
        (self.window > 1 && len > 1)
            .then(|| Permutation::new(len, fingerprint_words(&[TAG_WINDOW, self.seed, shard, first]), epoch))
    }

    /// The records of `shard` not delivered from cursor `at` on, as `(start, end)` ranges in
    /// ascending order, or `None` when the shard's length is unknown.
    pub(crate) fn undelivered(&self, at: &ShardCursor, epoch: u64) -> Option<Vec<(u64, u64)>> {
        let hint = self.hint(at.shard)?;
        let first = at.pos.record;
        let window = self.window.min(hint.saturating_sub(first));
        let mut singles: Vec<u64> = Vec::new();
        let rest_from = if at.cursor > 0 {
            let order = self.window_order(at.shard, first, window, epoch);
            for c in at.cursor..window {
                singles.push(first + order.as_ref().and_then(|p| p.apply(c)).unwrap_or(c));
            }
            first + window
        } else {
            first
        };
        singles.sort_unstable();
        let mut ranges: Vec<(u64, u64)> = Vec::new();
        for r in singles.into_iter().chain(rest_from..hint) {
            match ranges.last_mut() {
                Some(last) if last.1 == r => last.1 = r + 1,
                _ => ranges.push((r, r + 1)),
            }
        }
        Some(ranges)
    }

    /// Records of `shard` left from cursor `at` (for dealing and step counts), or `None`
    /// when its length is unknown.
    pub(crate) fn left(&self, at: &ShardCursor) -> Option<u64> {
        Some(self.hint(at.shard)?.saturating_sub(at.pos.record).saturating_sub(at.cursor))
    }
}

/// A record pulled from a rank's interleave.
#[derive(Debug)]
pub(crate) struct Pulled<T> {
    pub(crate) item: T,
    pub(crate) id: RecordId,
    /// Tokens of the record already delivered before a restore (packing); 0 otherwise.
    pub(crate) skip: u64,
    /// The slot the record came from.
    slot: usize,
    /// That slot's cursor just before the record.
    pre: ShardCursor,
}

/// The position of a rank's interleave: the next entry of its list to open, the slot read next,
/// and the open shards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct InterleaveCursor {
    pub(crate) next: u64,
    pub(crate) turn: u64,
    pub(crate) open: Vec<ShardCursor>,
}

/// An open shard: its reader, the window of records read from it, and the window cursor.
struct Live<R: ShardReader> {
    reader: R,
    /// Position of the window's first record.
    start: ShardPos,
    buf: Vec<Option<R::Item>>,
    order: Option<Permutation>,
    cursor: u64,
}

/// A slot of the interleave: a shard, opened on first read.
struct Slot<R: ShardReader> {
    at: ShardCursor,
    live: Option<Live<R>>,
}

impl<R: ShardReader> Slot<R> {
    fn new(at: ShardCursor) -> Self {
        Slot { at, live: None }
    }

    /// Reads the next window of `live` (at most `cfg.window` records, none past the hint).
    fn load(live: &mut Live<R>, shard: u64, cfg: &InterleaveConfig, epoch: u64) -> Result<(), LoaderError> {
        live.start = live.reader.pos();
        let hint = cfg.hint(shard);
        let n = hint.map_or(cfg.window, |h| cfg.window.min(h.saturating_sub(live.start.record)));
        live.buf.clear();
        live.cursor = 0;
        for _ in 0..n {
            match live.reader.next_record()? {
                Some(t) => live.buf.push(Some(t)),
                None => match hint {
                    Some(expected) => {
                        return Err(LoaderError::ShardLength {
                            shard,
                            expected,
                            found: live.start.record.saturating_add(live.buf.len() as u64),
                        })
                    }
                    None => break,
                },
            }
        }
        let got = live.buf.len() as u64;
        let at = live.reader.pos();
        if at.record != live.start.record.saturating_add(got) {
            return Err(LoaderError::shard(
                shard,
                live.start.record,
                format!(
                    "the reader reported record {} after reading {got} records from record {}",
                    at.record, live.start.record
                ),
            ));
        }
        live.order = cfg.window_order(shard, live.start.record, got, epoch);
        Ok(())
    }

    /// The next record of this slot's shard (with its identity, its skip and the slot's cursor
    /// before it; the caller sets the slot number); `None` at the shard's end.
    fn read<S>(
        &mut self,
        source: &S,
        cfg: &InterleaveConfig,
        epoch: u64,
    ) -> Result<Option<Pulled<R::Item>>, LoaderError>
    where
        S: SequentialSource<Reader = R, Item = R::Item>,
    {
        let shard = self.at.shard;
        if self.live.is_none() {
            let reader = source.open(shard, self.at.pos)?;
            if reader.pos() != self.at.pos {
                return Err(LoaderError::shard(
                    shard,
                    self.at.pos.record,
                    format!("opened at {:?}, the reader is at {:?}", self.at.pos, reader.pos()),
                ));
            }
            let mut live = Live { reader, start: self.at.pos, buf: Vec::new(), order: None, cursor: 0 };
            Self::load(&mut live, shard, cfg, epoch)?;
            if self.at.cursor > live.buf.len() as u64 {
                return Err(LoaderError::StateMismatch {
                    field: "open",
                    expected: format!("a window cursor of at most {} for shard {shard}", live.buf.len()),
                    found: self.at.cursor.to_string(),
                });
            }
            live.cursor = self.at.cursor;
            self.live = Some(live);
        }
        let Some(live) = self.live.as_mut() else { panic!("slot opened above") };
        if live.cursor == live.buf.len() as u64 {
            Self::load(live, shard, cfg, epoch)?;
            if live.buf.is_empty() {
                return Ok(None);
            }
        }
        let c = live.cursor;
        let i = live.order.as_ref().and_then(|p| p.apply(c)).unwrap_or(c);
        let Some(item) = live.buf.get_mut(i as usize).and_then(Option::take) else {
            panic!("window record {i} of shard {shard} taken twice")
        };
        let pre = ShardCursor { shard, pos: live.start, cursor: c, skip: self.at.skip };
        let skip = std::mem::take(&mut self.at.skip);
        live.cursor += 1;
        let id = RecordId { shard, record: live.start.record.saturating_add(i), offset: 0 };
        Ok(Some(Pulled { item, id, skip, slot: 0, pre }))
    }

    /// Where this slot is: the window start and cursor, or the reader's position once the
    /// window is used up.
    fn checkpoint(&self) -> ShardCursor {
        match &self.live {
            None => self.at,
            Some(l) if l.cursor == l.buf.len() as u64 => {
                ShardCursor { shard: self.at.shard, pos: l.reader.pos(), cursor: 0, skip: self.at.skip }
            }
            Some(l) => {
                ShardCursor { shard: self.at.shard, pos: l.start, cursor: l.cursor, skip: self.at.skip }
            }
        }
    }
}

/// One rank's interleave over its list of shards (each with the cursor it starts from).
pub(crate) struct Interleave<S: SequentialSource> {
    list: Arc<Vec<ShardCursor>>,
    next: usize,
    turn: usize,
    slots: Vec<Slot<S::Reader>>,
    epoch: u64,
}

impl<S: SequentialSource> std::fmt::Debug for Interleave<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Interleave")
            .field("epoch", &self.epoch)
            .field("list", &self.list.len())
            .field("cursor", &self.cursor())
            .finish()
    }
}

impl<S: SequentialSource> Interleave<S> {
    /// The interleave of `list` from its start.
    pub(crate) fn new(list: Arc<Vec<ShardCursor>>, epoch: u64) -> Self {
        Interleave { list, next: 0, turn: 0, slots: Vec::new(), epoch }
    }

    /// The interleave of `list` at `cursor`.
    ///
    /// # Errors
    /// [`LoaderError::StateMismatch`] when the cursor does not fit the list and `cycle`.
    pub(crate) fn restore(
        list: Arc<Vec<ShardCursor>>,
        epoch: u64,
        cursor: &InterleaveCursor,
        cycle: usize,
    ) -> Result<Self, LoaderError> {
        let bad = |field, expected: String, found: u64| {
            Err(LoaderError::StateMismatch { field, expected, found: found.to_string() })
        };
        if cursor.next > list.len() as u64 {
            return bad("next", format!("at most {} (shards of this rank)", list.len()), cursor.next);
        }
        if cursor.open.len() > cycle {
            return bad("open", format!("at most {cycle} open shards (the cycle)"), cursor.open.len() as u64);
        }
        if cursor.turn >= (cursor.open.len() as u64).max(1) {
            return bad("turn", format!("below {}", cursor.open.len().max(1)), cursor.turn);
        }
        Ok(Interleave {
            list,
            next: cursor.next as usize,
            turn: cursor.turn as usize,
            slots: cursor.open.iter().map(|&c| Slot::new(c)).collect(),
            epoch,
        })
    }

    /// The next record of the rank, or `None` when every shard of its list is read.
    ///
    /// # Errors
    /// The source's failures.
    pub(crate) fn next(
        &mut self,
        source: &S,
        cfg: &InterleaveConfig,
    ) -> Result<Option<Pulled<S::Item>>, LoaderError> {
        loop {
            while self.slots.len() < cfg.cycle && self.next < self.list.len() {
                self.slots.push(Slot::new(self.list[self.next]));
                self.next += 1;
            }
            if self.slots.is_empty() {
                return Ok(None);
            }
            let i = self.turn.min(self.slots.len() - 1);
            match self.slots[i].read(source, cfg, self.epoch)? {
                Some(p) => {
                    self.turn = (i + 1) % self.slots.len();
                    return Ok(Some(Pulled { slot: i, ..p }));
                }
                None if self.next < self.list.len() => {
                    // Grain's interleave: the next shard takes the finished one's slot.
                    self.slots[i] = Slot::new(self.list[self.next]);
                    self.next += 1;
                }
                None => {
                    self.slots.remove(i);
                    if self.turn >= self.slots.len() {
                        self.turn = 0;
                    }
                }
            }
        }
    }

    /// The interleave's position now.
    pub(crate) fn cursor(&self) -> InterleaveCursor {
        InterleaveCursor {
            next: self.next as u64,
            turn: self.turn as u64,
            open: self.slots.iter().map(Slot::checkpoint).collect(),
        }
    }

    /// The interleave's position just before `p`, the record last pulled.
    pub(crate) fn cursor_before(&self, p: &Pulled<S::Item>) -> InterleaveCursor {
        let mut c = self.cursor();
        c.open[p.slot] = p.pre;
        c.turn = p.slot as u64;
        c
    }

    /// The shards (with their cursors) that still hold undelivered records from `cursor` on:
    /// the open ones, then the rest of the list.
    pub(crate) fn remainder(&self, cursor: &InterleaveCursor) -> Vec<ShardCursor> {
        let from = (cursor.next as usize).min(self.list.len());
        cursor.open.iter().copied().chain(self.list[from..].iter().copied()).collect()
    }
}
