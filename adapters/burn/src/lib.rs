//! guideloom as burn's data loader (burn 0.22.1): a burn [`DataLoader`] backed by a guideloom
//! [`Loader`], a token batcher that makes `[B, L]` `Tensor<2, Int>` pairs without a cast, and
//! burn's [`Dataset`] over guideloom's random-access sources.
//!
//! - [`GuideloomDataLoader`] (made by [`GuideloomDataLoader::builder`]): each
//!   [`DataLoader::iter`] is the next epoch of guideloom's keyed order (epoch `e` visits the
//!   records in [`Permutation::new(n, seed, e)`](guideloom_loader::Permutation) order when
//!   shuffling); a start epoch or a saved [`State`] can be given, so a burn-train resume at
//!   epoch `k + 1` continues the same order and a mid-epoch state resumes exactly (outside the
//!   Learner: burn-train resumes at epoch granularity). [`DataLoader::num_items`] and
//!   [`DataLoaderIterator::progress`] count records and reach `items_total` on the last batch
//!   of the epoch (burn's gradient-accumulation flush depends on it).
//!   [`DataLoader::slice`] maps to positions of the epoch's order and gives every part the same
//!   number of batches ([`SplitPolicy`]), as burn's multi-device and DDP strategies need.
//!   A failing record reaches burn as a [`DatasetError`] whose `source()` is guideloom's
//!   [`LoaderError`] naming the record and the batch.
//! - The batch a burn model receives is made on the consumer's thread from guideloom's
//!   [`Batch`] and the device by a [`DeviceCollate`]: any
//!   `Fn(Batch<T>, &Device) -> Result<O, E>`, an existing burn [`Batcher`] ([`FromBatcher`]),
//!   or [`TokenBatcher`] (language-model `(inputs, targets)` from token windows).
//! - [`SourceDataset`]: burn's [`Dataset`] for any guideloom [`DataSource`], for burn's own
//!   `DataLoaderBuilder`.
//!
//! ```
//! use burn::data::dataloader::DataLoader;
//! use burn::tensor::Device;
//! use guideloom_burn::GuideloomDataLoader;
//! use guideloom_loader::{Batch, LoaderError, RangeSource};
//! let loader = GuideloomDataLoader::builder(RangeSource::new(0, 10, 1)?)
//!     .shuffle(7)
//!     .batch_size(4)
//!     .workers(0)
//!     .build(|batch: Batch<Vec<i64>>, _device: &Device| Ok::<_, LoaderError>(batch.data))?;
//! assert_eq!(loader.num_items(), 10);
//! let mut epoch0 = Vec::new();
//! let mut it = loader.iter();
//! while let Some(batch) = it.next() {
//!     epoch0.extend(batch?);
//! }
//! assert_eq!(it.progress().items_processed, 10);
//! drop(it);
//! epoch0.sort();
//! assert_eq!(epoch0, (0..10).collect::<Vec<i64>>());
//! assert_eq!(loader.state().map(|s| s.next_batch), Some(3)); // 3 batches per epoch
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Language-model batches from a token storage, checkpointed and resumed (the README's
//! "With burn" example):
//!
//! ```
//! use burn::data::dataloader::DataLoader;
//! use burn::tensor::{DType, Device};
//! use guideloom_burn::{GuideloomDataLoader, TokenBatcher, TokenTensors};
//! use guideloom_loader::TokenWindows;
//! use guideloom_storage::ReadOptions;
//! # let tmp = tempfile::tempdir()?;
//! # let dir = tmp.path();
//! # let mut w = guideloom_storage::StreamWriter::open(dir, guideloom_formats::TokenFormat::<u16>::new())?;
//! # w.append(0, &(0..41u32).collect::<Vec<_>>())?;
//! # w.commit()?;
//!
//! const L: u64 = 4; // windows of L + 1 tokens every L tokens: inputs and targets of L tokens
//! let open = || TokenWindows::<u32>::open_any_with(dir, L + 1, L, ReadOptions::default());
//! let windows = open()?;
//! let collate = windows.collate(); // one storage read per batch, on guideloom's workers
//! let train = GuideloomDataLoader::builder(windows).shuffle(42).batch_size(2).workers(2)
//!     .collate(collate).device(Device::flex())
//!     .build(TokenBatcher)?; // each batch: TokenTensors { inputs, targets }, [2, L] Tensor<2, Int>
//! let mut epoch = train.iter(); // every iter() is the next epoch of guideloom's keyed order
//! let batch: TokenTensors = epoch.next().unwrap()?;
//! assert_eq!((batch.inputs.dims(), batch.inputs.dtype()), ([2, 4], DType::U32)); // no cast
//! drop(epoch);
//! let state = train.state().unwrap(); // guideloom's State: save it with the model and optimizer
//! # assert_eq!(state.next_batch, 1);
//! let windows = open()?; // later, in a new process: the same loader, resumed
//! let collate = windows.collate();
//! let resumed = GuideloomDataLoader::builder(windows).shuffle(42).batch_size(2).resume(state)
//!     .collate(collate).build(TokenBatcher)?;
//! let next: TokenTensors = resumed.iter().next().unwrap()?; // the batch after `batch`
//! # let ids = |t: &TokenTensors| t.targets.to_data().try_to_vec::<u32>().unwrap();
//! # let second = train.loader().batch(1).unwrap()?.data.inputs_targets().1;
//! # assert_eq!(ids(&next), second.data());
//! # assert_ne!(ids(&next), ids(&batch));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![forbid(unsafe_code)]

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use burn::data::dataloader::batcher::Batcher;
use burn::data::dataloader::{DataLoader, DataLoaderIterator, Progress};
use burn::data::dataset::{Dataset, DatasetError};
use burn::tensor::{Device, Element, Int, Tensor, TensorData};
use guideloom_loader::{
    Batch, BoxError, Cancellation, Collate, DataSource, Loader, LoaderError, LoaderIter, State, TokenBatch,
    VecCollate,
};

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

/// Makes the batch a burn model takes from guideloom's [`Batch`] and the target device; runs
/// on the thread that iterates the [`GuideloomDataLoader`].
///
/// Implemented by every `Fn(Batch<T>, &Device) -> Result<O, E> + Send + Sync` (with `E` any
/// error or message), by [`FromBatcher`] (an existing burn [`Batcher`]) and by
/// [`TokenBatcher`].
///
/// An error becomes [`LoaderError::InBatch`] naming the batch and its epoch, wrapping the
/// error itself when it is a [`LoaderError`] (return [`LoaderError::source`] or
/// [`LoaderError::Map`] to name the failing record) and [`LoaderError::Collate`] with its
/// message otherwise.
pub trait DeviceCollate<T, O>: Send + Sync {
    /// Makes one batch on `device`.
    ///
    /// # Errors
    /// Whatever the batch cannot be made from (a bad record, a shape that does not fit).
    fn collate(&self, batch: Batch<T>, device: &Device) -> Result<O, BoxError>;
}

impl<T, O, E, F> DeviceCollate<T, O> for F
where
    F: Fn(Batch<T>, &Device) -> Result<O, E> + Send + Sync,
    E: Into<BoxError>,
{
    fn collate(&self, batch: Batch<T>, device: &Device) -> Result<O, BoxError> {
        self(batch, device).map_err(Into::into)
    }
}

/// An existing burn [`Batcher<I, O>`] as a [`DeviceCollate`] over guideloom batches of records
/// (`Batch<Vec<I>>`, guideloom's default [`VecCollate`]): the batcher gets the records in
/// batch order. burn's batchers cannot fail, so this never returns an error.
#[derive(Debug, Clone, Copy, Default)]
pub struct FromBatcher<B>(pub B);

impl<I, O, B: Batcher<I, O>> DeviceCollate<Vec<I>, O> for FromBatcher<B> {
    fn collate(&self, batch: Batch<Vec<I>>, device: &Device) -> Result<O, BoxError> {
        Ok(self.0.batch(batch.data, device))
    }
}

/// The language-model tensors of one batch, made by [`TokenBatcher`].
#[derive(Debug, Clone)]
pub struct TokenTensors {
    /// `[B, L]` token ids: the first `L` tokens of each window.
    pub inputs: Tensor<2, Int>,
    /// `[B, L]` token ids: the last `L` tokens of each window (the inputs shifted by one).
    pub targets: Tensor<2, Int>,
    /// `B` flags, `true` for a padding row ([`SplitPolicy::Pad`]) whose loss should be masked.
    pub padding: Vec<bool>,
}

/// Makes [`TokenTensors`] from a batch of `L + 1`-token windows (a guideloom
/// [`TokenBatch<E>`] of shape `[B, L + 1]`, as made by `TokenWindows::collate`): `inputs` and
/// `targets` are `Tensor<2, Int>` of shape `[B, L]` created with `E`'s dtype explicitly
/// (`u32` windows give [`DType::U32`](burn::tensor::DType) tensors, `i64` windows `I64`),
/// never the device's default int dtype, so nothing is cast on the way.
///
/// The element type `E` is the one the loader reads (`TokenWindows::<E>`); to widen narrower
/// stored ids (for example a `u16` storage for a backend or an embedding that wants `u32` or
/// `i64`), open the storage with `TokenWindows::<u32>::open_any` (or `<i64>`): the loader
/// widens the ids in place while reading them, and the tensors then carry the wider dtype.
/// burn's `flex` backend stores `u16` int tensors too, so `TokenWindows::<u16>` gives `U16`
/// tensors there.
///
/// # Errors
/// [`LoaderError::Collate`] when the windows hold fewer than 2 tokens (no target).
#[derive(Debug, Clone, Copy, Default)]
pub struct TokenBatcher;

impl<E: Element> DeviceCollate<TokenBatch<E>, TokenTensors> for TokenBatcher {
    fn collate(&self, batch: Batch<TokenBatch<E>>, device: &Device) -> Result<TokenTensors, BoxError> {
        let [_, width] = batch.data.shape();
        if width < 2 {
            return Err(Box::new(LoaderError::Collate {
                detail: format!(
                    "windows of {width} tokens have no target; read windows of L + 1 >= 2 tokens"
                ),
            }));
        }
        let (inputs, targets) = batch.data.inputs_targets();
        Ok(TokenTensors {
            inputs: int_tensor(inputs, device),
            targets: int_tensor(targets, device),
            padding: batch.padding,
        })
    }
}

/// A `[rows, seq_len]` `Tensor<2, Int>` holding `batch`'s ids, created with `E`'s dtype
/// explicitly (no cast to the device's default int dtype); the buffer is moved into the
/// tensor data, not copied on the way.
pub fn int_tensor<E: Element>(batch: TokenBatch<E>, device: &Device) -> Tensor<2, Int> {
    let shape = batch.shape();
    Tensor::from_data(TensorData::new(batch.into_vec(), shape), (device, E::dtype()))
}

/// Configures a [`GuideloomDataLoader`]; made by [`GuideloomDataLoader::builder`].
///
/// Defaults: no shuffle (seed 0), batch size 32, 2 workers with guideloom's default prefetch,
/// start at epoch 0, [`SplitPolicy::Drop`], the device `Device::default()`, and guideloom's
/// [`VecCollate`] on the workers (the records as a `Vec`).
pub struct GuideloomDataLoaderBuilder<S: DataSource, C = VecCollate> {
    source: Arc<S>,
    collate: C,
    seed: u64,
    shuffle: bool,
    batch_size: u64,
    workers: usize,
    prefetch: Option<usize>,
    transforms: u64,
    start: Start,
    policy: SplitPolicy,
    device: Option<Device>,
}

impl<S: DataSource, C: fmt::Debug> fmt::Debug for GuideloomDataLoaderBuilder<S, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GuideloomDataLoaderBuilder")
            .field("records", &self.source.len())
            .field("collate", &self.collate)
            .field("seed", &self.seed)
            .field("shuffle", &self.shuffle)
            .field("batch_size", &self.batch_size)
            .field("workers", &self.workers)
            .field("prefetch", &self.prefetch)
            .field("start", &self.start)
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Clone)]
enum Start {
    Epoch(u64),
    State(State),
}

impl<S, C> GuideloomDataLoaderBuilder<S, C>
where
    S: DataSource + 'static,
    S::Item: 'static,
    C: Collate<S::Item> + Clone + 'static,
    C::Output: 'static,
{
    /// Shuffles each epoch with guideloom's permutation keyed by `(seed, epoch)`.
    pub fn shuffle(mut self, seed: u64) -> Self {
        self.shuffle = true;
        self.seed = seed;
        self
    }

    /// Records per batch, `B` (default 32).
    pub fn batch_size(mut self, batch_size: u64) -> Self {
        self.batch_size = batch_size;
        self
    }

    /// guideloom worker threads that read and collate ahead of the consumer (default 2; 0
    /// reads on the consumer's thread). The output is the same for every worker count.
    pub fn workers(mut self, workers: usize) -> Self {
        self.workers = workers;
        self
    }

    /// Batches in flight or ready ahead of the consumer (default twice the workers).
    pub fn prefetch(mut self, prefetch: usize) -> Self {
        self.prefetch = Some(prefetch);
        self
    }

    /// guideloom's transforms fingerprint recorded in the loader's [`State`] (default 0;
    /// see `LoaderBuilder::transforms_fingerprint`).
    pub fn transforms_fingerprint(mut self, fingerprint: u64) -> Self {
        self.transforms = fingerprint;
        self
    }

    /// The epoch the first `iter()` yields (default 0): a burn-train run resumed from its
    /// checkpoint of epoch `k` starts at epoch `k + 1` (burn counts epochs from 1, guideloom
    /// from 0: pass burn's `k`).
    pub fn start_epoch(mut self, epoch: u64) -> Self {
        self.start = Start::Epoch(epoch);
        self
    }

    /// Resumes from a saved [`State`] (from [`GuideloomDataLoader::state`]): the first `iter()`
    /// continues its epoch with the first batch not yet delivered, and its progress counts the
    /// records delivered before; later `iter()`s yield the following epochs. The state must
    /// come from a loader like this one (same source, seed, shuffle and batch size; the
    /// adapter's guideloom loader is unbounded, so a state of a guideloom `Loader` with a
    /// fixed epoch count is refused, naming `epochs`).
    pub fn resume(mut self, state: State) -> Self {
        self.start = Start::State(state);
        self
    }

    /// How the parts made by [`DataLoader::slice`] are balanced (default
    /// [`SplitPolicy::Drop`]).
    pub fn split_policy(mut self, policy: SplitPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The device batches are made on (default `Device::default()`); burn's Learner sets its
    /// own with [`DataLoader::to_device`].
    pub fn device(mut self, device: Device) -> Self {
        self.device = Some(device);
        self
    }

    /// Sets the guideloom collation run on the workers (default [`VecCollate`]), for example
    /// `TokenWindows::collate()` to read a batch of token windows with one storage call.
    pub fn collate<C2>(self, collate: C2) -> GuideloomDataLoaderBuilder<S, C2>
    where
        C2: Collate<S::Item> + Clone + 'static,
    {
        GuideloomDataLoaderBuilder {
            source: self.source,
            collate,
            seed: self.seed,
            shuffle: self.shuffle,
            batch_size: self.batch_size,
            workers: self.workers,
            prefetch: self.prefetch,
            transforms: self.transforms,
            start: self.start,
            policy: self.policy,
            device: self.device,
        }
    }

    /// Builds the loader with `to_output` making burn's batch from each guideloom batch.
    ///
    /// # Errors
    /// guideloom's [`LoaderError::InvalidConfig`] for a zero batch size or prefetch or too
    /// many workers; for a [`GuideloomDataLoaderBuilder::resume`] state that does not fit this
    /// loader, [`LoaderError::StateVersion`] or [`LoaderError::StateMismatch`] naming the
    /// field that differs (`global_batch` for a state saved with another batch size: this
    /// loader counts epochs in batches and resumes only onto the batch size of the state), or
    /// [`LoaderError::ElasticResume`].
    pub fn build<O, D>(self, to_output: D) -> Result<GuideloomDataLoader<S, C, O>, LoaderError>
    where
        D: DeviceCollate<C::Output, O> + 'static,
    {
        let mut builder = Loader::builder(Arc::clone(&self.source))
            .batch_size(self.batch_size)
            .unbounded()
            .workers(self.workers)
            .transforms_fingerprint(self.transforms);
        builder = if self.shuffle { builder.shuffle(self.seed) } else { builder };
        if let Some(p) = self.prefetch {
            builder = builder.prefetch(p);
        }
        let loader = builder.collate(self.collate.clone()).build()?;
        let cursor = match self.start {
            Start::Epoch(e) => Cursor { next_epoch: e, resume: None, state: None },
            Start::State(state) => {
                // Refuse a state that does not fit now, not at the first `iter()`; epochs are
                // counted in batches of this size, so another global batch is refused too.
                drop(loader.iter_from(&state)?);
                if state.global_batch != loader.global_batch() {
                    return Err(LoaderError::StateMismatch {
                        field: "global_batch",
                        expected: loader.global_batch().to_string(),
                        found: state.global_batch.to_string(),
                    });
                }
                Cursor { next_epoch: 0, resume: Some(state), state: None }
            }
        };
        Ok(GuideloomDataLoader {
            shared: Arc::new(Shared {
                loader,
                source: self.source,
                collate: self.collate,
                to_output: Arc::new(to_output),
                batch_size: self.batch_size,
                workers: self.workers,
                prefetch: self.prefetch,
                policy: self.policy,
            }),
            device: self.device.unwrap_or_default(),
            part: None,
            cursor: Arc::new(Mutex::new(cursor)),
            children: Arc::new(Mutex::new(Vec::new())),
        })
    }
}

struct Shared<S: DataSource, C: Collate<S::Item>, O> {
    loader: Loader<Arc<S>, S::Item, C>,
    source: Arc<S>,
    collate: C,
    to_output: Arc<dyn DeviceCollate<C::Output, O>>,
    batch_size: u64,
    workers: usize,
    prefetch: Option<usize>,
    policy: SplitPolicy,
}

/// Where the next `iter()` starts, and the state after the last batch delivered.
#[derive(Debug)]
struct Cursor {
    next_epoch: u64,
    resume: Option<State>,
    state: Option<State>,
}

/// A part made by [`DataLoader::slice`]: positions `[start, start + len)` of each epoch's
/// order; `group` holds the lengths of all parts cut from the same loader.
#[derive(Debug, Clone)]
struct Part {
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
/// [`GuideloomDataLoaderBuilder::build`]).
///
/// # Epochs
///
/// Every [`DataLoader::iter`] yields one whole epoch, the next one each call (the order of
/// epoch `e` is guideloom's, keyed by `(seed, e)`; the loader is unbounded, so there is no last
/// epoch). The first call yields the start epoch, or continues a resumed [`State`] mid-epoch.
/// [`GuideloomDataLoader::state`] is the guideloom state after the last batch delivered:
/// save it with the model and optimizer to resume exactly (outside burn-train, whose Learner
/// resumes at epoch granularity: give it [`GuideloomDataLoaderBuilder::start_epoch`]).
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
    shared: Arc<Shared<S, C, O>>,
    device: Device,
    part: Option<Part>,
    cursor: Arc<Mutex<Cursor>>,
    /// Lengths of the parts sliced from this loader (shared with its handles).
    children: Arc<Mutex<Vec<u64>>>,
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
            .field("records", &self.shared.source.len())
            .field("batch_size", &self.shared.batch_size)
            .field("policy", &self.shared.policy)
            .field("device", &self.device)
            .field("part", &self.part.as_ref().map(|p| (p.start, p.start + p.len)))
            .field("cursor", &*lock(&self.cursor))
            .finish_non_exhaustive()
    }
}

impl<S: DataSource + 'static> GuideloomDataLoader<S, VecCollate, ()>
where
    S::Item: 'static,
{
    /// Starts configuring a loader over `source` (pass an `Arc` to share it).
    pub fn builder(source: S) -> GuideloomDataLoaderBuilder<S, VecCollate> {
        GuideloomDataLoaderBuilder {
            source: Arc::new(source),
            collate: VecCollate,
            seed: 0,
            shuffle: false,
            batch_size: 32,
            workers: guideloom_loader::DEFAULT_WORKERS,
            prefetch: None,
            transforms: 0,
            start: Start::Epoch(0),
            policy: SplitPolicy::Drop,
            device: None,
        }
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
    /// [`GuideloomDataLoaderBuilder::resume`] with it continues with the next batch. Before
    /// the first batch it is the state the first `iter()` starts from; after the last batch of
    /// epoch `e` it starts epoch `e + 1`. `None` for a [`DataLoader::slice`] part.
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
        let b = self.shared.batch_size;
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
        let full = self.part_batches(p).saturating_mul(self.shared.batch_size);
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
        let b = usize::try_from(self.shared.batch_size).unwrap_or(usize::MAX);
        let done_before = usize::try_from(first - epoch * per_epoch).unwrap_or(usize::MAX).saturating_mul(b);
        let (inner, pending) = match self.shared.loader.iter_from(&state) {
            Ok(it) => (Some(Inner::Whole(it)), None),
            Err(e) => (None, Some(e)),
        };
        EpochIter {
            owner: self,
            inner,
            pending,
            epoch,
            end: epoch.saturating_add(1).saturating_mul(per_epoch),
            processed: done_before,
            total: self.num_items(),
        }
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
        let view = PartView { source: Arc::clone(&self.shared.source), indices: Arc::clone(&indices) };
        let mut builder =
            Loader::builder(view).batch_size(self.shared.batch_size).workers(self.shared.workers);
        if let Some(pf) = self.shared.prefetch {
            builder = builder.prefetch(pf);
        }
        let (inner, pending) = match builder.collate(self.shared.collate.clone()).build() {
            Ok(loader) => {
                (Some(Inner::Part { it: loader.iter(), indices, start: p.start, len: p.len, k }), None)
            }
            Err(e) => (None, Some(e)),
        };
        EpochIter {
            owner: self,
            inner,
            pending,
            epoch,
            end: k,
            processed: 0,
            total: usize::try_from(slots).unwrap_or(usize::MAX),
        }
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
            None => self.shared.source.len(),
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
            None => (0, self.shared.source.len()),
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
struct EpochIter<'a, S: DataSource + 'static, C: Collate<S::Item> + 'static, O> {
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

impl<S, C, O> EpochIter<'_, S, C, O>
where
    S: DataSource + 'static,
    S::Item: 'static,
    C: Collate<S::Item> + Clone + 'static,
    C::Output: 'static,
{
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

/// burn's [`Dataset`] over a guideloom [`DataSource`]: `get(i)` is record `i`, `len()` the
/// record count, `get_many` one batched source call (errors, not panics, for indices out of
/// range). Errors are guideloom's [`LoaderError`] as the `source()` of a [`DatasetError`].
///
/// ```
/// use burn::data::dataset::Dataset;
/// use guideloom_burn::SourceDataset;
/// use guideloom_loader::RangeSource;
/// let data = SourceDataset::new(RangeSource::new(10, 20, 2)?);
/// assert_eq!(data.len(), 5);
/// assert_eq!(data.get(3)?, 16);
/// assert_eq!(data.get_many(vec![4, 0])?, [18, 10]);
/// assert_eq!(data.get(5).unwrap_err().to_string(), "record 5 is out of range for a source of 5 records");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct SourceDataset<S>(S);

impl<S: DataSource> SourceDataset<S> {
    /// burn's view of `source`.
    pub fn new(source: S) -> Self {
        SourceDataset(source)
    }

    /// The guideloom source.
    pub fn source(&self) -> &S {
        &self.0
    }
}

impl<S: DataSource> Dataset<S::Item> for SourceDataset<S> {
    fn get(&self, index: usize) -> Result<S::Item, DatasetError> {
        self.0.get(index as u64).map_err(DatasetError::new)
    }

    fn get_many(&self, indexes: Vec<usize>) -> Result<Vec<S::Item>, DatasetError> {
        let indices: Vec<u64> = indexes.into_iter().map(|i| i as u64).collect();
        self.0.get_many(&indices).map_err(DatasetError::new)
    }

    fn len(&self) -> usize {
        usize::try_from(self.0.len()).unwrap_or(usize::MAX)
    }
}
