//! burn's [`DataLoader`] over a guideloom [`Loader`]: [`GuideloomDataLoader`], one epoch per
//! `iter()` ([`EpochIter`]), and the parts [`DataLoader::slice`] makes ([`PartView`],
//! balanced by a [`SplitPolicy`]).

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use burn::data::dataloader::{DataLoader, DataLoaderIterator, Progress};
use burn::data::dataset::DatasetError;
use burn::tensor::Device;
use guideloom_loader::{Batch, Cancellation, Collate, DataSource, Loader, LoaderError, LoaderIter, State};

use crate::collate::DeviceCollate;

/// How [`DataLoader::slice`] parts of one loader are given the same number of batches.
///
/// burn's `split_dataloader` cuts an epoch of `N` records into `n` contiguous parts (the last
/// one takes the remainder), and its multi-device and DDP strategies pair the parts' batches
/// (DDP all-reduces by count), so a part with one batch more would leave its peers waiting.
/// The parts made from one loader form a group; at each `iter()` every part yields `k`
/// batches of up to `B` records, where `k` comes from the group's lengths:
///
/// - [`SplitPolicy::Drop`] (default): `k = min over parts of ceil(len / B)`; a part's records
///   past `k * B` are not yielded this epoch (with a shuffled order, other records each
///   epoch). 9 records, batch 4, 2 parts (`[0, 4)` and `[4, 9)`): one batch of 4 each, the
///   record at position 8 dropped.
/// - [`SplitPolicy::Pad`]: `k = max over parts of ceil(len / B)`; every batch is full, and a
///   part's slots past its length repeat its records from its start, flagged in
///   [`Batch::padding`] (so the collate can mask them). The same 9 records: two batches of 4
///   each; part 0's second batch is all padding, part 1's second batch holds position 8 and 3
///   padding slots.
///
/// [`DataLoader::num_items`] of a part is what it yields: `min(len, k * B)` records (drop) or
/// `k * B` slots, padding included (pad), so every part's progress completes on its last
/// batch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum SplitPolicy {
    /// Every part yields the fewest batches of the group; the rest of a longer part is dropped.
    #[default]
    Drop,
    /// Every part yields the most batches of the group, in full batches padded with flagged
    /// repeats of the part's own records.
    Pad,
}

/// What a loader, its handles and its parts share: the guideloom loader of the whole epoch,
/// the collation its parts' loaders run, burn's batch maker and the split policy.
pub(crate) struct Shared<S: DataSource, C: Collate<S::Item>, O> {
    pub(crate) loader: Loader<Arc<S>, S::Item, C>,
    pub(crate) collate: C,
    pub(crate) to_output: Arc<dyn DeviceCollate<C::Output, O>>,
    pub(crate) policy: SplitPolicy,
}

impl<S: DataSource, C: Collate<S::Item>, O> Shared<S, C, O> {
    /// Records per batch, `B`.
    fn batch_size(&self) -> u64 {
        self.loader.sampler().config().batch_size
    }

    /// The source.
    fn source(&self) -> &Arc<S> {
        self.loader.source()
    }
}

/// Where the next `iter()` starts, and the state after the last batch delivered.
#[derive(Debug)]
pub(crate) struct Cursor {
    pub(crate) next_epoch: u64,
    pub(crate) resume: Option<State>,
    pub(crate) state: Option<State>,
}

/// A part made by [`DataLoader::slice`]: positions `[start, start + len)` of each epoch's
/// order; `group` holds the lengths of all parts cut from the same loader.
#[derive(Debug, Clone)]
pub(crate) struct Part {
    start: u64,
    len: u64,
    group: Arc<Mutex<Vec<u64>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// burn's [`DataLoader`] over a guideloom [`Loader`]; see the [crate] documentation.
///
/// Type parameters: `S` the guideloom source, `C` the guideloom collation run on the workers,
/// `O` burn's batch (made by the [`DeviceCollate`] given to
/// [`GuideloomDataLoaderBuilder::build`](crate::GuideloomDataLoaderBuilder::build)).
///
/// # Epochs
///
/// Every [`DataLoader::iter`] yields one whole epoch, the next one each call (the order of epoch
/// `e` is guideloom's, keyed by `(seed, e)`; the loader is unbounded, so there is no last epoch).
/// The first call yields the start epoch, or continues a resumed [`State`] mid-epoch.
/// [`GuideloomDataLoader::state`] is the guideloom state after the last batch delivered: save it
/// with the model and optimizer to resume exactly (outside burn-train, whose Learner resumes at
/// epoch granularity: give it
/// [`GuideloomDataLoaderBuilder::start_epoch`](crate::GuideloomDataLoaderBuilder::start_epoch)).
///
/// # Handles
///
/// `clone()` and [`DataLoader::to_device`] give handles to the same cursor (the same epoch
/// counter and state), so a handle kept by the training loop sees what the Learner's copy
/// delivered. Each [`DataLoader::slice`] part has its own cursor, starting at the epoch the
/// next `iter()` of its parent would yield (a mid-epoch state is not split: a part starts
/// that state's epoch from its beginning) and its own state-less progress
/// ([`GuideloomDataLoader::state`] is `None` for a part).
///
/// # Parts
///
/// `slice(a, b)` is positions `[a, b)` of each epoch's order (of the parent's positions for
/// a part of a part), read by its own guideloom loader with the same workers and prefetch;
/// every part of a group yields the same number of batches ([`SplitPolicy`]). A part's batches
/// carry the records' source indices in [`Batch::indices`], their positions in the epoch's
/// order in [`Batch::positions`] (a padding slot's is past the part's end, as guideloom's own
/// padding positions are past `n`) and padding flags in [`Batch::padding`]; their
/// [`Batch::number`] counts the part's batches from epoch 0 (`epoch * k + j`). Every `slice`
/// call joins the group of the loader it is called on (shared by that loader's handles), so
/// slice a loader once per split.
///
/// # Errors
///
/// A failed batch is one `Err(DatasetError)` item, after which the iterator ends; its
/// `source()` is the [`LoaderError`] ([`LoaderError::InBatch`] naming the batch and epoch,
/// around the cause naming the record: [`LoaderError::record_index`]).
pub struct GuideloomDataLoader<S: DataSource, C: Collate<S::Item>, O> {
    pub(crate) shared: Arc<Shared<S, C, O>>,
    pub(crate) device: Device,
    pub(crate) part: Option<Part>,
    pub(crate) cursor: Arc<Mutex<Cursor>>,
    /// Lengths of the parts sliced from this loader (shared with its handles).
    pub(crate) children: Arc<Mutex<Vec<u64>>>,
}

impl<S: DataSource, C: Collate<S::Item>, O> Clone for GuideloomDataLoader<S, C, O> {
    fn clone(&self) -> Self {
        GuideloomDataLoader {
            shared: Arc::clone(&self.shared),
            device: self.device.clone(),
            part: self.part.clone(),
            cursor: Arc::clone(&self.cursor),
            children: Arc::clone(&self.children),
        }
    }
}

impl<S: DataSource, C: Collate<S::Item>, O> fmt::Debug for GuideloomDataLoader<S, C, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GuideloomDataLoader")
            .field("records", &self.shared.source().len())
            .field("batch_size", &self.shared.batch_size())
            .field("policy", &self.shared.policy)
            .field("device", &self.device)
            .field("part", &self.part.as_ref().map(|p| (p.start, p.start + p.len)))
            .field("cursor", &*lock(&self.cursor))
            .finish_non_exhaustive()
    }
}

impl<S, C, O: 'static> GuideloomDataLoader<S, C, O>
where
    S: DataSource + 'static,
    S::Item: 'static,
    C: Collate<S::Item> + Clone + 'static,
    C::Output: 'static,
{
    /// The guideloom checkpoint after the last batch delivered (by any handle of this loader):
    /// [`GuideloomDataLoaderBuilder::resume`](crate::GuideloomDataLoaderBuilder::resume) with it
    /// continues with the next batch. Before the first batch it is the state the first `iter()`
    /// starts from; after the last batch of epoch `e` it starts epoch `e + 1`. `None` for a
    /// [`DataLoader::slice`] part.
    pub fn state(&self) -> Option<State> {
        if self.part.is_some() {
            return None;
        }
        let cur = lock(&self.cursor);
        if let Some(s) = cur.state.or(cur.resume) {
            return Some(s);
        }
        let mut s = self.shared.loader.initial_state();
        s.next_batch = cur.next_epoch.saturating_mul(self.shared.loader.len());
        Some(s)
    }

    /// The epoch the next `iter()` yields (or continues, after a mid-epoch resume).
    pub fn next_epoch(&self) -> u64 {
        let cur = lock(&self.cursor);
        let per_epoch = self.shared.loader.len();
        cur.resume.and_then(|s| s.next_batch.checked_div(per_epoch)).unwrap_or(cur.next_epoch)
    }

    /// The guideloom loader behind the whole epoch (its sampler gives each epoch's order).
    pub fn loader(&self) -> &Loader<Arc<S>, S::Item, C> {
        &self.shared.loader
    }

    /// The device batches are made on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Batches per epoch of this loader or part (what one `iter()` yields if nothing fails).
    pub fn batches_per_epoch(&self) -> u64 {
        match &self.part {
            None => self.shared.loader.len(),
            Some(p) => self.part_batches(p),
        }
    }

    /// `k`: the batches every part of `p`'s group yields.
    fn part_batches(&self, p: &Part) -> u64 {
        let b = self.shared.batch_size();
        let group = lock(&p.group);
        let per_part = group.iter().map(|len| len.div_ceil(b));
        match self.shared.policy {
            SplitPolicy::Drop => per_part.min(),
            SplitPolicy::Pad => per_part.max(),
        }
        .unwrap_or(0)
    }

    /// Slots (records, padding included) a part yields per epoch.
    fn part_slots(&self, p: &Part) -> u64 {
        let full = self.part_batches(p).saturating_mul(self.shared.batch_size());
        match self.shared.policy {
            SplitPolicy::Drop => p.len.min(full),
            SplitPolicy::Pad if p.len == 0 => 0,
            SplitPolicy::Pad => full,
        }
    }

    /// Claims the next epoch: `(epoch, first batch number)`.
    fn claim_epoch(&self) -> (u64, u64) {
        let mut cur = lock(&self.cursor);
        let per_epoch = self.shared.loader.len();
        let resumed =
            cur.resume.take().and_then(|s| Some((s.next_batch.checked_div(per_epoch)?, s.next_batch)));
        let (epoch, first) = match resumed {
            Some((epoch, next)) if self.part.is_none() => (epoch, next),
            // A part starts the state's epoch from its beginning.
            Some((epoch, _)) => (epoch, epoch * per_epoch),
            None => (cur.next_epoch, cur.next_epoch.saturating_mul(per_epoch)),
        };
        cur.next_epoch = epoch.saturating_add(1);
        if self.part.is_none() {
            // Nothing of this epoch is delivered yet: the state is where it starts.
            let mut state = self.shared.loader.initial_state();
            state.next_batch = first;
            cur.state = Some(state);
        }
        (epoch, first)
    }

    fn whole_epoch_iter(&self) -> EpochIter<'_, S, C, O> {
        let (epoch, first) = self.claim_epoch();
        let per_epoch = self.shared.loader.len();
        let mut state = self.shared.loader.initial_state();
        state.next_batch = first;
        let b = usize::try_from(self.shared.batch_size()).unwrap_or(usize::MAX);
        let done_before = usize::try_from(first - epoch * per_epoch).unwrap_or(usize::MAX).saturating_mul(b);
        let inner = self.shared.loader.iter_from(&state).map(Inner::Whole);
        let end = epoch.saturating_add(1).saturating_mul(per_epoch);
        EpochIter::new(self, inner, epoch, end, done_before, self.num_items())
    }

    fn part_iter(&self, p: &Part) -> EpochIter<'_, S, C, O> {
        let (epoch, _) = self.claim_epoch();
        let k = self.part_batches(p);
        let slots = self.part_slots(p);
        let sampler = self.shared.loader.sampler();
        let mut indices = Vec::with_capacity(usize::try_from(slots).unwrap_or(0));
        for s in 0..slots {
            let position = p.start + s % p.len;
            // In range: parts lie inside [0, n).
            indices.push(sampler.order(epoch, position).unwrap_or(position));
        }
        let indices = Arc::new(indices);
        let view = PartView { source: Arc::clone(self.shared.source()), indices: Arc::clone(&indices) };
        let whole = &self.shared.loader;
        let builder = Loader::builder(view)
            .batch_size(self.shared.batch_size())
            .workers(whole.workers())
            .prefetch(whole.prefetch());
        let inner = builder.collate(self.shared.collate.clone()).build().map(|loader| Inner::Part {
            it: loader.iter(),
            indices,
            start: p.start,
            len: p.len,
            k,
        });
        EpochIter::new(self, inner, epoch, k, 0, usize::try_from(slots).unwrap_or(usize::MAX))
    }
}

impl<S, C, O> DataLoader<O> for GuideloomDataLoader<S, C, O>
where
    S: DataSource + 'static,
    S::Item: 'static,
    C: Collate<S::Item> + Clone + 'static,
    C::Output: 'static,
    O: 'static,
{
    fn iter<'a>(&'a self) -> Box<dyn DataLoaderIterator<O> + 'a> {
        match &self.part {
            None => Box::new(self.whole_epoch_iter()),
            Some(p) => Box::new(self.part_iter(p)),
        }
    }

    fn num_items(&self) -> usize {
        let n = match &self.part {
            None => self.shared.source().len(),
            Some(p) => self.part_slots(p),
        };
        usize::try_from(n).unwrap_or(usize::MAX)
    }

    fn to_device(&self, device: &Device) -> Arc<dyn DataLoader<O>> {
        let mut handle = self.clone();
        handle.device = device.clone();
        Arc::new(handle)
    }

    fn slice(&self, start: usize, end: usize) -> Arc<dyn DataLoader<O>> {
        let (base, len) = match &self.part {
            None => (0, self.shared.source().len()),
            Some(p) => (p.start, p.len),
        };
        let a = (start as u64).min(len);
        let b = (end as u64).clamp(a, len);
        lock(&self.children).push(b - a);
        let next_epoch = self.next_epoch();
        Arc::new(GuideloomDataLoader {
            shared: Arc::clone(&self.shared),
            device: self.device.clone(),
            part: Some(Part { start: base + a, len: b - a, group: Arc::clone(&self.children) }),
            cursor: Arc::new(Mutex::new(Cursor { next_epoch, resume: None, state: None })),
            children: Arc::new(Mutex::new(Vec::new())),
        })
    }
}

/// The records at one part's positions of one epoch, as a source of their own.
struct PartView<S> {
    source: Arc<S>,
    indices: Arc<Vec<u64>>,
}

impl<S: DataSource> PartView<S> {
    fn index(&self, i: u64) -> Result<u64, LoaderError> {
        usize::try_from(i)
            .ok()
            .and_then(|i| self.indices.get(i))
            .copied()
            .ok_or(LoaderError::IndexOutOfRange { index: i, len: self.indices.len() as u64 })
    }
}

impl<S: DataSource> DataSource for PartView<S> {
    type Item = S::Item;
    fn len(&self) -> u64 {
        self.indices.len() as u64
    }
    fn get(&self, index: u64) -> Result<S::Item, LoaderError> {
        self.source.get(self.index(index)?)
    }
    fn get_many_cancellable(
        &self,
        indices: &[u64],
        cancel: &Cancellation,
    ) -> Result<Vec<S::Item>, LoaderError> {
        let real = indices.iter().map(|&i| self.index(i)).collect::<Result<Vec<_>, _>>()?;
        self.source.get_many_cancellable(&real, cancel)
    }
    fn get_many(&self, indices: &[u64]) -> Result<Vec<S::Item>, LoaderError> {
        self.get_many_cancellable(indices, &Cancellation::new())
    }
}

enum Inner<S: DataSource + 'static, C: Collate<S::Item> + 'static> {
    Whole(LoaderIter<Arc<S>, S::Item, C>),
    Part { it: LoaderIter<PartView<S>, S::Item, C>, indices: Arc<Vec<u64>>, start: u64, len: u64, k: u64 },
}

/// One epoch of a [`GuideloomDataLoader`].
pub(crate) struct EpochIter<'a, S: DataSource + 'static, C: Collate<S::Item> + 'static, O> {
    owner: &'a GuideloomDataLoader<S, C, O>,
    inner: Option<Inner<S, C>>,
    /// An error to yield before ending (the iterator could not start).
    pending: Option<LoaderError>,
    epoch: u64,
    /// Whole epoch: the first batch number of the next epoch; part: the batches to yield.
    end: u64,
    processed: usize,
    total: usize,
}

impl<'a, S, C, O> EpochIter<'a, S, C, O>
where
    S: DataSource + 'static,
    S::Item: 'static,
    C: Collate<S::Item> + Clone + 'static,
    C::Output: 'static,
{
    /// One epoch read by `inner` (or, when it could not start, its error as the only item).
    fn new(
        owner: &'a GuideloomDataLoader<S, C, O>,
        inner: Result<Inner<S, C>, LoaderError>,
        epoch: u64,
        end: u64,
        processed: usize,
        total: usize,
    ) -> Self {
        let (inner, pending) = match inner {
            Ok(inner) => (Some(inner), None),
            Err(e) => (None, Some(e)),
        };
        EpochIter { owner, inner, pending, epoch, end, processed, total }
    }

    fn fail(&mut self, e: LoaderError) -> Option<Result<O, DatasetError>> {
        self.inner = None;
        Some(Err(DatasetError::new(e)))
    }

    fn next_batch(&mut self) -> Option<Result<Batch<C::Output>, LoaderError>> {
        match self.inner.as_mut()? {
            Inner::Whole(it) => {
                if LoaderIter::position(it) >= self.end {
                    return None;
                }
                it.next()
            }
            Inner::Part { it, indices, start, len, k } => {
                if LoaderIter::position(it) >= *k {
                    return None;
                }
                let (epoch, base) = (self.epoch, self.epoch.saturating_mul(*k));
                Some(match it.next()? {
                    Ok(mut b) => {
                        for (j, &view) in b.positions.iter().enumerate() {
                            b.padding[j] = view >= *len;
                        }
                        // The view does not shuffle: its positions are its indices.
                        b.indices = b.positions.iter().map(|&v| indices[v as usize]).collect();
                        b.positions = b.positions.iter().map(|&v| *start + v).collect();
                        b.number += base;
                        b.epoch = epoch;
                        Ok(b)
                    }
                    Err(LoaderError::InBatch { batch, source, .. }) => {
                        Err(LoaderError::InBatch { batch: base + batch, epoch, source })
                    }
                    Err(e) => Err(e),
                })
            }
        }
    }
}

impl<S, C, O> Iterator for EpochIter<'_, S, C, O>
where
    S: DataSource + 'static,
    S::Item: 'static,
    C: Collate<S::Item> + Clone + 'static,
    C::Output: 'static,
{
    type Item = Result<O, DatasetError>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(e) = self.pending.take() {
            return self.fail(e);
        }
        let batch = match self.next_batch()? {
            Ok(b) => b,
            Err(e) => return self.fail(e),
        };
        let (number, epoch, records) = (batch.number, batch.epoch, batch.len());
        let state = match &self.inner {
            Some(Inner::Whole(it)) => Some(it.state()),
            _ => None,
        };
        match self.owner.shared.to_output.collate(batch, &self.owner.device) {
            Ok(o) => {
                self.processed = self.processed.saturating_add(records);
                if state.is_some() {
                    lock(&self.owner.cursor).state = state;
                }
                Some(Ok(o))
            }
            Err(e) => {
                let cause = match e.downcast::<LoaderError>() {
                    Ok(l) => l,
                    Err(other) => Box::new(LoaderError::Collate { detail: other.to_string() }),
                };
                self.fail(LoaderError::InBatch { batch: number, epoch, source: cause })
            }
        }
    }
}

impl<S, C, O> DataLoaderIterator<O> for EpochIter<'_, S, C, O>
where
    S: DataSource + 'static,
    S::Item: 'static,
    C: Collate<S::Item> + Clone + 'static,
    C::Output: 'static,
{
    fn progress(&self) -> Progress {
        Progress::new(self.processed, self.total, Some("records".into()))
    }
}
