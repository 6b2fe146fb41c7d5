//! Hole compaction and rebatching: [`Rebatched`].

use crate::stage::cursor::{Cursor, Rec, Stage, StageCursor, Units};
use crate::stage::state::{StageBatch, StageState};
use crate::{DataSource, Loader, LoaderError};

/// Domain-separation tag of the rebatching stage's fingerprint.
const TAG_REBATCH: u64 = u64::from_le_bytes(*b"glrebat\0");

/// Hole compaction and rebatching: the records of a [`Loader`] of `Option<X>` (for example
/// over a [`Filter`](crate::transforms::Filter)) without the holes (`None`) and without the sampler's
/// padding records, in order, in batches of `batch_size` records that never span two epochs
/// (the last batch of an epoch holds the rest, or is dropped with
/// [`Rebatched::drop_remainder`]). The upstream loader's batch size only sets how many records
/// a worker reads at once; with `world_size > 1` it also decides which records are this rank's
/// (see [`Sampler`](crate::Sampler)).
///
/// State ([`StageState`]): the position of the next record not yet delivered.
///
/// ```
/// use guideloom_loader::stage::Rebatched;
/// use guideloom_loader::transforms::Filter;
/// use guideloom_loader::{Loader, RangeSource};
/// let odd = Filter::new(RangeSource::new(0, 10, 1)?, |x: &i64| x % 2 == 1, 1);
/// let stage = Rebatched::new(Loader::builder(odd).batch_size(4).workers(0).build()?, 2)?;
/// let batches: Vec<Vec<i64>> = stage.iter().map(|b| b.map(|b| b.data)).collect::<Result<_, _>>()?;
/// assert_eq!(batches, [vec![1, 3], vec![5, 7], vec![9]]);
/// # Ok::<(), guideloom_loader::LoaderError>(())
/// ```
pub struct Rebatched<S: DataSource, X> {
    stage: Stage<S, X>,
}

impl<S: DataSource, X> std::fmt::Debug for Rebatched<S, X> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Rebatched").field(&self.stage).finish()
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
        Ok(Rebatched { stage: Stage::new(loader, batch_size)? })
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

    fn fingerprint(&self) -> u64 {
        let [b, drop, t0, t1, t2] = self.stage.words();
        crate::fingerprint_words(&[TAG_REBATCH, b, drop, t0, t1, t2])
    }

    /// The state of an iterator that has delivered nothing.
    pub fn initial_state(&self) -> StageState {
        self.stage.initial_state(self.fingerprint())
    }

    /// Iterates from the first record.
    pub fn iter(&self) -> RebatchedIter<S, X> {
        RebatchedIter { cursor: self.stage.start(self.fingerprint()), peeked: None }
    }

    /// Iterates from the batch after the last one delivered when `state` was taken.
    ///
    /// # Errors
    /// [`LoaderError::StateVersion`]; [`LoaderError::StateMismatch`] naming
    /// `stream.fingerprint` (another batch size, remainder rule or upstream topology),
    /// `offset`, or a field of the upstream state ([`Loader::iter_from`]); a read error of the
    /// upstream batch holding the position.
    pub fn iter_from(&self, state: &StageState) -> Result<RebatchedIter<S, X>, LoaderError> {
        Ok(RebatchedIter { cursor: self.stage.resume(state, self.fingerprint())?, peeked: None })
    }
}

/// The iterator of a [`Rebatched`] stage.
pub struct RebatchedIter<S: DataSource, X: Send> {
    cursor: StageCursor<S, X>,
    /// A record of the next epoch read while closing a batch.
    peeked: Option<Rec<X>>,
}

impl<S: DataSource, X: Send> std::fmt::Debug for RebatchedIter<S, X> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("RebatchedIter").field(&self.cursor).finish()
    }
}

impl<S, X> RebatchedIter<S, X>
where
    S: DataSource + 'static,
    X: Send + 'static,
{
    /// The checkpoint: [`Rebatched::iter_from`] continues with the next batch not delivered.
    pub fn state(&self) -> StageState {
        let pos = self.peeked.as_ref().map_or_else(|| self.cursor.upstream.pos(), |r| (r.batch, r.offset));
        self.cursor.state(pos, 0, 0)
    }
}

/// Rebatching batches the kept records one by one; a record of the next epoch waits in
/// `peeked`.
impl<S, X> Units<S, X> for Option<Rec<X>>
where
    S: DataSource + 'static,
    X: Send + 'static,
{
    type Unit = Rec<X>;

    fn pull(&mut self, upstream: &mut Cursor<S, X>) -> Result<Option<(u64, Rec<X>)>, LoaderError> {
        let r = match self.take() {
            Some(r) => Some(r),
            None => upstream.next()?,
        };
        Ok(r.map(|r| (r.epoch, r)))
    }

    fn put_back(&mut self, unit: Rec<X>) {
        *self = Some(unit);
    }
}

impl<S, X> Iterator for RebatchedIter<S, X>
where
    S: DataSource + 'static,
    X: Send + 'static,
{
    type Item = Result<StageBatch<X>, LoaderError>;

    fn next(&mut self) -> Option<Self::Item> {
        Some(self.cursor.next(&mut self.peeked)?.map(|(number, epoch, records)| {
            let (indices, data) = records.into_iter().map(|r| (r.index, r.item)).unzip();
            StageBatch { number, epoch, indices, data }
        }))
    }
}
