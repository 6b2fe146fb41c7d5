//! The reading stage of a sequential loader, on the consumer's thread: one rank's
//! interleave (windows, packing, padding), the epoch and step counters, and the reports of
//! dropped records.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use crate::pool::panic_message;
use crate::sequential::batch::Raw;
use crate::sequential::interleave::{Interleave, InterleaveCursor};
use crate::sequential::packer::{NextWindow, Packer};
use crate::sequential::shared::Shared;
use crate::sequential::{
    Dropped, SequentialEnd, SequentialSource, SequentialState, ShardCursor, StopQuery,
    SEQUENTIAL_STATE_VERSION,
};
use crate::{LoaderError, RecordId};

/// The reading stage of one rank: its interleave (windows, packing, padding), the
/// epoch and step counters, and the reports of dropped records.
pub(crate) struct Producer<S: SequentialSource> {
    pub(crate) epoch: u64,
    pub(crate) batch: u64,
    step: u64,
    steps: Option<u64>,
    list: Arc<Vec<ShardCursor>>,
    /// Whether `list` came from an elastic re-deal (recorded in the state).
    explicit: bool,
    interleave: Interleave<S>,
    pub(crate) padding: bool,
    /// The padding pass started and has not yet yielded a record.
    pad_fresh: bool,
    packer: Option<Packer<S::Item>>,
    done: bool,
    pub(crate) dropped: Vec<Dropped>,
}

impl<S: SequentialSource> Producer<S> {
    /// The producer at the start of `epoch`, after `batch` batches.
    pub(crate) fn at_epoch<U, C>(shared: &Shared<S, U, C>, epoch: u64, batch: u64) -> Self {
        let lists = shared.standard(epoch);
        let steps = shared.steps(&lists, 0);
        let list = Arc::new(lists.into_iter().nth(shared.options.rank as usize).unwrap_or_default());
        Producer::with_list(shared, epoch, batch, 0, steps, list, false, None)
    }

    #[allow(clippy::too_many_arguments)] // the fields of a state
    pub(crate) fn with_list<U, C>(
        shared: &Shared<S, U, C>,
        epoch: u64,
        batch: u64,
        step: u64,
        steps: Option<u64>,
        list: Arc<Vec<ShardCursor>>,
        explicit: bool,
        interleave: Option<Interleave<S>>,
    ) -> Self {
        Producer {
            epoch,
            batch,
            step,
            steps,
            interleave: interleave.unwrap_or_else(|| Interleave::new(Arc::clone(&list), epoch)),
            list,
            explicit,
            padding: false,
            pad_fresh: false,
            packer: shared.pack.as_ref().map(|(l, ops)| Packer::new(*l as usize, Arc::clone(ops))),
            done: shared.options.epochs.is_some_and(|e| epoch >= e),
            dropped: Vec::new(),
        }
    }

    /// The interleave's position (the packer's when packing).
    fn cursor(&self) -> InterleaveCursor {
        match &self.packer {
            Some(p) => p.checkpoint(&self.interleave),
            None => self.interleave.cursor(),
        }
    }

    pub(crate) fn state<U, C>(&self, shared: &Shared<S, U, C>) -> SequentialState {
        let c = self.cursor();
        SequentialState {
            version: SEQUENTIAL_STATE_VERSION,
            epoch: self.epoch,
            batch: self.batch,
            step: self.step,
            steps: self.steps,
            rank: shared.options.rank,
            world_size: shared.options.world_size,
            next: c.next,
            turn: c.turn,
            open: c.open,
            padding: self.padding,
            deal: self.explicit.then(|| self.list.to_vec()),
            config: shared.config_fp,
            source: shared.source_fp,
        }
    }

    /// The next batch, moving through epochs; `None` after the last.
    pub(crate) fn produce<U, C>(
        &mut self,
        shared: &Shared<S, U, C>,
    ) -> Result<Option<Raw<S::Item>>, LoaderError> {
        loop {
            if self.done {
                return Ok(None);
            }
            match self.fill(shared)? {
                Some(raw) => {
                    // Saturating: the counters may come from a state file.
                    self.step = self.step.saturating_add(1);
                    self.batch = self.batch.saturating_add(1);
                    if self.steps == Some(self.step) {
                        self.finish_epoch(shared);
                    }
                    return Ok(Some(raw));
                }
                None => {
                    let empty = self.step == 0;
                    self.finish_epoch(shared);
                    if empty && shared.options.epochs.is_none() {
                        self.done = true;
                    }
                }
            }
        }
    }

    /// Reports what this epoch leaves undelivered (with [`SequentialEnd::Drop`]) and moves to
    /// the start of the next epoch.
    fn finish_epoch<U, C>(&mut self, shared: &Shared<S, U, C>) {
        if matches!(shared.end, SequentialEnd::Drop) && !self.padding {
            let cursor = self.cursor();
            for at in self.interleave.remainder(&cursor) {
                for (start, end) in shared.interleave.undelivered(&at, self.epoch).unwrap_or_default() {
                    self.dropped.push(Dropped::Records { epoch: self.epoch, shard: at.shard, start, end });
                }
            }
        }
        let dropped = std::mem::take(&mut self.dropped);
        *self = Producer::at_epoch(shared, self.epoch + 1, self.batch);
        self.dropped = dropped;
    }

    /// Reads the next batch of this epoch, or `None` when the epoch is over.
    fn fill<U, C>(&mut self, shared: &Shared<S, U, C>) -> Result<Option<Raw<S::Item>>, LoaderError> {
        if self.steps.is_some_and(|s| self.step >= s) {
            return Ok(None);
        }
        let b = shared.options.batch_size as usize;
        let before = matches!(shared.end, SequentialEnd::Stop(_)).then(|| self.cursor());
        let mut raw = Raw {
            items: Vec::with_capacity(b),
            ids: Vec::with_capacity(b),
            padding: Vec::with_capacity(b),
            epoch: self.epoch,
            step: self.step,
            number: self.batch,
        };
        while raw.items.len() < b {
            match self.pull(shared)? {
                Some((item, id, padding)) => {
                    raw.items.push(item);
                    raw.ids.push(id);
                    raw.padding.push(padding);
                }
                None => break,
            }
        }
        if let (SequentialEnd::Stop(hook), Some(before)) = (&shared.end, before) {
            let query = StopQuery {
                epoch: self.epoch,
                step: self.step,
                records: raw.items.len() as u64,
                full: raw.items.len() == b,
            };
            let go = catch_unwind(AssertUnwindSafe(|| hook(&query)))
                .map_err(|p| LoaderError::Panic { index: None, message: panic_message(&*p) })?;
            if !go {
                for from in self.interleave.remainder(&before) {
                    self.dropped.push(Dropped::Rest { epoch: self.epoch, from });
                }
                return Ok(None);
            }
        }
        Ok((!raw.items.is_empty()).then_some(raw))
    }

    /// The next record (or window) of the rank: record, identity, padding flag.
    fn pull<U, C>(
        &mut self,
        shared: &Shared<S, U, C>,
    ) -> Result<Option<(S::Item, RecordId, bool)>, LoaderError> {
        if let Some(packer) = &mut self.packer {
            return match packer.next_window(&mut self.interleave, &shared.source, &shared.interleave)? {
                NextWindow::Window(t, id) => Ok(Some((t, id, false))),
                NextWindow::End(tail) => {
                    for record in tail {
                        self.dropped.push(Dropped::Tokens { epoch: self.epoch, record });
                    }
                    Ok(None)
                }
            };
        }
        loop {
            if let Some(p) = self.interleave.next(&shared.source, &shared.interleave)? {
                self.pad_fresh = false;
                return Ok(Some((p.item, p.id, self.padding)));
            }
            if !matches!(shared.end, SequentialEnd::Pad) {
                return Ok(None);
            }
            if self.pad_fresh {
                return Err(LoaderError::InvalidConfig {
                    field: "end",
                    detail: format!(
                        "rank {} holds no record in epoch {} to pad its batches with",
                        shared.options.rank, self.epoch
                    ),
                });
            }
            // Padding: the rank's list again from its start, flagged.
            self.padding = true;
            self.pad_fresh = true;
            self.interleave = Interleave::new(Arc::clone(&self.list), self.epoch);
        }
    }
}
