//! Reading a rank's records for a stage: the upstream [`Cursor`] (one record at a time,
//! holes and padding skipped), what every stage holds ([`Stage`]: the upstream loader, the
//! batch size and remainder rule) and the one cursor wrapper both stage iterators run on
//! ([`StageCursor`]: output batches of one epoch, numbered, with the state template).

use crate::stage::state::{check_state, StageState};
use crate::{DataSource, Loader, LoaderError, LoaderIter, State, VecCollate};

/// A kept record read from the upstream loader.
pub(crate) struct Rec<X> {
    pub(crate) batch: u64,
    pub(crate) offset: u64,
    pub(crate) epoch: u64,
    pub(crate) index: u64,
    pub(crate) item: X,
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
pub(crate) struct Cursor<S: DataSource, X: Send> {
    it: LoaderIter<S, Option<X>, VecCollate>,
    cur: Option<Cur<X>>,
    offset: usize,
}

impl<S, X> Cursor<S, X>
where
    S: DataSource + 'static,
    X: Send + 'static,
{
    pub(crate) fn start(loader: &Loader<S, Option<X>>) -> Self {
        Cursor { it: loader.iter(), cur: None, offset: 0 }
    }

    /// A cursor at slot `offset` of upstream batch `upstream.next_batch` (reads that batch now
    /// when `offset > 0`).
    pub(crate) fn open(
        loader: &Loader<S, Option<X>>,
        upstream: &State,
        offset: u64,
    ) -> Result<Self, LoaderError> {
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
    pub(crate) fn pos(&self) -> (u64, u64) {
        match &self.cur {
            Some(c) if self.offset < c.items.len() => (c.number, self.offset as u64),
            _ => (self.it.position(), 0),
        }
    }

    /// The next record that is neither a hole nor padding, or `None` at the end.
    pub(crate) fn next(&mut self) -> Result<Option<Rec<X>>, LoaderError> {
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

/// What every stage holds: the upstream loader, and the size and remainder rule of its output
/// batches.
pub(crate) struct Stage<S: DataSource, X> {
    pub(crate) loader: Loader<S, Option<X>>,
    pub(crate) batch_size: u64,
    pub(crate) drop_remainder: bool,
}

impl<S: DataSource, X> std::fmt::Debug for Stage<S, X> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stage")
            .field("batch_size", &self.batch_size)
            .field("drop_remainder", &self.drop_remainder)
            .finish_non_exhaustive()
    }
}

impl<S, X> Stage<S, X>
where
    S: DataSource + 'static,
    X: Send + 'static,
{
    /// A stage over `loader` in batches of `batch_size` (remainders kept).
    ///
    /// # Errors
    /// [`LoaderError::InvalidConfig`] (`batch_size`) for 0.
    pub(crate) fn new(loader: Loader<S, Option<X>>, batch_size: u64) -> Result<Self, LoaderError> {
        if batch_size == 0 {
            return Err(LoaderError::InvalidConfig {
                field: "batch_size",
                detail: "must be at least 1".into(),
            });
        }
        Ok(Stage { loader, batch_size, drop_remainder: false })
    }

    /// The words of a stage's fingerprint every stage has: batch size and remainder rule, and
    /// the upstream topology (batch size, rank, world size).
    pub(crate) fn words(&self) -> [u64; 5] {
        let c = self.loader.sampler().config();
        [self.batch_size, u64::from(self.drop_remainder), c.batch_size, c.rank, c.world_size]
    }

    /// The state of an iterator of the stage whose fingerprint is `fingerprint` that has
    /// delivered nothing.
    pub(crate) fn initial_state(&self, fingerprint: u64) -> StageState {
        StageState::start(self.loader.initial_state(), fingerprint)
    }

    /// The wrapper of an iterator from the first record.
    pub(crate) fn start(&self, fingerprint: u64) -> StageCursor<S, X> {
        self.cursor(Cursor::start(&self.loader), 0, fingerprint)
    }

    /// The wrapper of an iterator from `state`'s position.
    ///
    /// # Errors
    /// As [`Rebatched::iter_from`](crate::stage::Rebatched::iter_from).
    pub(crate) fn resume(
        &self,
        state: &StageState,
        fingerprint: u64,
    ) -> Result<StageCursor<S, X>, LoaderError> {
        check_state(state, fingerprint)?;
        let upstream = Cursor::open(&self.loader, &state.upstream, state.offset)?;
        Ok(self.cursor(upstream, state.next_batch, fingerprint))
    }

    fn cursor(&self, upstream: Cursor<S, X>, next_batch: u64, fingerprint: u64) -> StageCursor<S, X> {
        StageCursor {
            upstream,
            next_batch,
            batch_size: self.batch_size,
            drop_remainder: self.drop_remainder,
            template: self.initial_state(fingerprint),
            done: false,
        }
    }
}

/// What a stage batches, pulled from the upstream cursor: records ([`Rebatched`]) or packed
/// rows ([`StagePacked`]).
///
/// [`Rebatched`]: crate::stage::Rebatched
/// [`StagePacked`]: crate::stage::StagePacked
pub(crate) trait Units<S: DataSource, X: Send> {
    /// One record or row.
    type Unit;

    /// The next unit with its epoch, or `None` at the end of the data.
    fn pull(&mut self, upstream: &mut Cursor<S, X>) -> Result<Option<(u64, Self::Unit)>, LoaderError>;

    /// Takes back a unit of the next epoch, pulled while closing a batch: the next batch
    /// starts with it.
    fn put_back(&mut self, unit: Self::Unit);
}

/// The cursor wrapper both stage iterators run on: the upstream cursor, the number of the next
/// output batch, the batch size and remainder rule, and the state template.
pub(crate) struct StageCursor<S: DataSource, X: Send> {
    pub(crate) upstream: Cursor<S, X>,
    next_batch: u64,
    batch_size: u64,
    drop_remainder: bool,
    template: StageState,
    done: bool,
}

impl<S: DataSource, X: Send> std::fmt::Debug for StageCursor<S, X> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StageCursor")
            .field("next_batch", &self.next_batch)
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl<S, X> StageCursor<S, X>
where
    S: DataSource + 'static,
    X: Send + 'static,
{
    /// The checkpoint of a position: slot `offset` of upstream batch `batch`, `token` tokens of
    /// its record and `rows` rows of its group already delivered.
    pub(crate) fn state(&self, (batch, offset): (u64, u64), token: u64, rows: u64) -> StageState {
        let mut s = self.template;
        s.upstream.next_batch = batch;
        s.offset = offset;
        s.token = token;
        s.rows = rows;
        s.next_batch = self.next_batch;
        s
    }

    /// The next output batch: `(number, epoch, units)`, up to `batch_size` units of one epoch
    /// (a short last batch of an epoch dropped with `drop_remainder`); `None` at the end, and
    /// after an error (which ends the iterator).
    #[allow(clippy::type_complexity)]
    pub(crate) fn next<P: Units<S, X>>(
        &mut self,
        units: &mut P,
    ) -> Option<Result<(u64, u64, Vec<P::Unit>), LoaderError>> {
        while !self.done {
            let (mut data, mut epoch) = (Vec::new(), None);
            while (data.len() as u64) < self.batch_size {
                let (e, unit) = match units.pull(&mut self.upstream) {
                    Ok(Some(u)) => u,
                    Ok(None) => break,
                    Err(e) => {
                        self.done = true;
                        return Some(Err(e));
                    }
                };
                if epoch.is_some_and(|current| current != e) {
                    units.put_back(unit);
                    break;
                }
                epoch = Some(e);
                data.push(unit);
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
            return Some(Ok((number, epoch, data)));
        }
        None
    }
}
