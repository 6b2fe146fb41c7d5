//! The random-access loader: a source, a sampler, a `map`, a collation and a worker pool, and
//! the production of one batch. Its builder is in builder.rs ([`Loader::builder`]); iterating
//! and resuming it in iter.rs ([`Loader::iter`], [`Loader::iter_from`]).

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use crate::builder::MapFn;
use crate::pool::panic_message;
use crate::state::{StateConfig, Topology};
use crate::{
    Batch, Cancellation, Collate, DataSource, LoaderError, MapContext, Sampler, SourceId, State, VecCollate,
    STATE_VERSION,
};

/// A configured data loader: a data source, a sampler, a `map`, a collation and a worker
/// pool. Cheap to iterate many times; each [`Loader::iter`] starts its own workers.
///
/// ```
/// use guideloom_loader::{Loader, VecSource};
/// let loader = Loader::builder(VecSource::new((0..10u32).collect()))
///     .shuffle(7)
///     .epochs(2)
///     .batch_size(4)
///     .map(|x, _ctx| x * 10)
///     .workers(2)
///     .build()?;
/// assert_eq!(loader.len(), 3); // batches per epoch: 4 + 4 + 2 records
/// let batches: Vec<_> = loader.iter().collect::<Result<_, _>>()?;
/// assert_eq!(batches.len(), 6);
/// assert_eq!(batches[2].data.len(), 2);
/// let mut epoch0: Vec<u32> = batches[..3].iter().flat_map(|b| b.data.clone()).collect();
/// epoch0.sort();
/// assert_eq!(epoch0, [0, 10, 20, 30, 40, 50, 60, 70, 80, 90]);
/// # Ok::<(), guideloom_loader::LoaderError>(())
/// ```
pub struct Loader<S: DataSource, U = <S as DataSource>::Item, C = VecCollate> {
    pub(crate) shared: Arc<Shared<S, U, C>>,
    pub(crate) workers: usize,
    pub(crate) prefetch: usize,
    pub(crate) readahead: u64,
}

impl<S: DataSource, U, C> std::fmt::Debug for Loader<S, U, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loader")
            .field("sampler", &self.shared.sampler)
            .field("source", &self.shared.source_id)
            .field("workers", &self.workers)
            .field("prefetch", &self.prefetch)
            .field("readahead", &self.readahead)
            .finish_non_exhaustive()
    }
}

impl<S: DataSource, U, C> Loader<S, U, C> {
    /// Records per global step over all ranks: `batch_size * world_size`.
    pub fn global_batch(&self) -> u64 {
        let c = self.shared.sampler.config();
        c.batch_size * c.world_size
    }

    /// Batches per epoch of this rank; every epoch and every rank has this many.
    pub fn len(&self) -> u64 {
        self.shared.sampler.batches_per_epoch()
    }

    /// Whether an epoch has no batch (an empty source, or `drop_remainder` with fewer records
    /// than one global batch): the loader then yields nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Batches over all epochs, or `None` when unbounded.
    pub fn total_batches(&self) -> Option<u64> {
        self.shared.sampler.total_batches()
    }

    /// The sampler (a pure function from batch number to record indices).
    pub fn sampler(&self) -> &Sampler {
        &self.shared.sampler
    }

    /// The data source.
    pub fn source(&self) -> &S {
        &self.shared.source
    }

    /// The state of an iterator that has yielded nothing.
    pub fn initial_state(&self) -> State {
        self.state_at(0)
    }

    pub(crate) fn state_at(&self, next_batch: u64) -> State {
        State {
            version: STATE_VERSION,
            next_batch,
            global_batch: self.global_batch(),
            config: StateConfig::from(self.shared.sampler.config()),
            source: self.shared.source_id,
            transforms_fingerprint: self.shared.transforms,
            topology: None,
        }
    }

    pub(crate) fn topology(&self) -> Topology {
        let c = self.shared.sampler.config();
        Topology { rank: c.rank, world_size: c.world_size, batch_size: c.batch_size }
    }

    /// Worker threads of this loader's iterators (0: batches are produced on the consumer's
    /// thread).
    pub fn workers(&self) -> usize {
        self.workers
    }

    /// Batches in flight or ready ahead of the consumer (the default `2 * workers` resolved;
    /// ignored with 0 workers).
    pub fn prefetch(&self) -> usize {
        self.prefetch
    }
}

impl<S: DataSource, U, C: Collate<U>> Loader<S, U, C> {
    /// Produces batch `number` alone, on the calling thread (for debugging "what did batch N
    /// see?"), or `None` past the last batch. Equal to what an iterator yields at `number`.
    ///
    /// # Errors
    /// As the iterator: [`LoaderError::InBatch`] wrapping the failure.
    pub fn batch(&self, number: u64) -> Option<Result<Batch<C::Output>, LoaderError>> {
        self.shared.sampler.batch(number)?;
        Some(self.shared.produce(number, &Cancellation::new()))
    }
}

/// What a loader, its iterators and workers share.
pub(crate) struct Shared<S: DataSource, U, C> {
    /// Whether the consumer produces a queued batch itself while it waits for a worker: only
    /// when the source and the collation declare their calls bounded and no `map` is set
    /// ([`DataSource::reads_bounded`]), so a call that never returns can only hold a worker,
    /// never the consumer.
    pub(crate) helped: bool,
    pub(crate) source: S,
    pub(crate) map: MapFn<S::Item, U>,
    pub(crate) collate: C,
    pub(crate) sampler: Sampler,
    pub(crate) source_id: SourceId,
    pub(crate) transforms: u64,
}

impl<S: DataSource, U, C: Collate<U>> Shared<S, U, C> {
    /// Produces batch `number` (which must exist), turning errors and panics of user code into
    /// [`LoaderError::InBatch`].
    pub(crate) fn produce(
        &self,
        number: u64,
        cancel: &Cancellation,
    ) -> Result<Batch<C::Output>, LoaderError> {
        let Some(plan) = self.sampler.batch(number) else {
            panic!("batch {number} requested past the loader's end");
        };
        let wrap = |e| LoaderError::InBatch { batch: number, epoch: plan.epoch, source: Box::new(e) };
        let fetched =
            catch_unwind(AssertUnwindSafe(|| self.source.get_many_cancellable(&plan.indices, cancel)));
        let items = match fetched {
            Ok(Ok(items)) => items,
            Ok(Err(e)) => return Err(wrap(e)),
            Err(payload) => return Err(wrap(self.locate_panic(&plan.indices, &*payload, cancel))),
        };
        if items.len() != plan.indices.len() {
            return Err(wrap(LoaderError::WrongCount {
                expected: plan.indices.len() as u64,
                found: items.len() as u64,
            }));
        }
        let mut mapped = Vec::with_capacity(items.len());
        for (i, item) in items.into_iter().enumerate() {
            let index = plan.indices[i];
            let mut ctx = MapContext {
                seed: self.sampler.config().seed,
                epoch: plan.epoch,
                position: plan.positions[i],
                index,
                batch: number,
                padding: plan.padding[i],
                rng: None,
                record: None,
            };
            match catch_unwind(AssertUnwindSafe(|| (self.map)(item, &mut ctx))) {
                Ok(Ok(u)) => mapped.push(u),
                Ok(Err(source)) => return Err(wrap(LoaderError::Map { index, source })),
                Err(p) => {
                    return Err(wrap(LoaderError::Panic { index: Some(index), message: panic_message(&*p) }))
                }
            }
        }
        let data = match catch_unwind(AssertUnwindSafe(|| self.collate.collate(mapped))) {
            Ok(Ok(d)) => d,
            Ok(Err(e)) => return Err(wrap(e)),
            Err(p) => return Err(wrap(LoaderError::Panic { index: None, message: panic_message(&*p) })),
        };
        Ok(Batch {
            data,
            repeat: vec![false; plan.indices.len()],
            indices: plan.indices,
            positions: plan.positions,
            padding: plan.padding,
            epoch: plan.epoch,
            number,
        })
    }

    /// After `get_many` panicked: retries the records one at a time to name the first one whose
    /// `get` panics (error path only; skipped once cancelled).
    fn locate_panic(
        &self,
        indices: &[u64],
        payload: &(dyn Any + Send),
        cancel: &Cancellation,
    ) -> LoaderError {
        for &i in indices {
            if cancel.is_cancelled() {
                break;
            }
            if let Err(p) = catch_unwind(AssertUnwindSafe(|| self.source.get(i))) {
                return LoaderError::Panic { index: Some(i), message: panic_message(&*p) };
            }
        }
        LoaderError::Panic { index: None, message: panic_message(payload) }
    }
}
