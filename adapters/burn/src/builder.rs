//! Configuring a [`GuideloomDataLoader`]: [`GuideloomDataLoaderBuilder`], a guideloom
//! [`LoaderBuilder`] (which holds the order, batch size, workers, prefetch and transforms
//! fingerprint) plus what only the burn loader has (start, split policy, device, the
//! collation kept for the parts).

use std::fmt;
use std::sync::{Arc, Mutex};

#[cfg(doc)]
use burn::data::dataloader::DataLoader;
use burn::tensor::Device;
use guideloom_loader::{Collate, DataSource, Loader, LoaderBuilder, LoaderError, State, VecCollate};

use crate::collate::DeviceCollate;
use crate::loader::{Cursor, GuideloomDataLoader, Shared, SplitPolicy};

/// Configures a [`GuideloomDataLoader`]; made by [`GuideloomDataLoader::builder`].
///
/// Defaults: no shuffle (seed 0), batch size 32, 2 workers with guideloom's default prefetch,
/// start at epoch 0, [`SplitPolicy::Drop`], the device `Device::default()`, and guideloom's
/// [`VecCollate`] on the workers (the records as a `Vec`).
pub struct GuideloomDataLoaderBuilder<S: DataSource, C = VecCollate> {
    /// The guideloom loader's own options; `build` makes it unbounded.
    loader: LoaderBuilder<Arc<S>>,
    /// Run on the workers; kept to read the parts made by [`DataLoader::slice`] too.
    collate: C,
    start: Start,
    policy: SplitPolicy,
    device: Option<Device>,
}

impl<S: DataSource, C: fmt::Debug> fmt::Debug for GuideloomDataLoaderBuilder<S, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GuideloomDataLoaderBuilder")
            .field("loader", &self.loader)
            .field("collate", &self.collate)
            .field("start", &self.start)
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

/// Where the first `iter()` starts.
#[derive(Debug, Clone)]
enum Start {
    Epoch(u64),
    State(State),
}

impl<S: DataSource + 'static> GuideloomDataLoader<S, VecCollate, ()>
where
    S::Item: 'static,
{
    /// Starts configuring a loader over `source` (pass an `Arc` to share it).
    pub fn builder(source: S) -> GuideloomDataLoaderBuilder<S, VecCollate> {
        GuideloomDataLoaderBuilder {
            loader: Loader::builder(Arc::new(source)),
            collate: VecCollate,
            start: Start::Epoch(0),
            policy: SplitPolicy::Drop,
            device: None,
        }
    }
}

impl<S, C> GuideloomDataLoaderBuilder<S, C>
where
    S: DataSource + 'static,
    S::Item: 'static,
    C: Collate<S::Item> + Clone + 'static,
    C::Output: 'static,
{
    /// Sets an option of the guideloom loader.
    fn with(mut self, set: impl FnOnce(LoaderBuilder<Arc<S>>) -> LoaderBuilder<Arc<S>>) -> Self {
        self.loader = set(self.loader);
        self
    }

    /// Shuffles each epoch with guideloom's permutation keyed by `(seed, epoch)`
    /// ([`LoaderBuilder::shuffle`](guideloom_loader::Builder::shuffle)).
    pub fn shuffle(self, seed: u64) -> Self {
        self.with(|b| b.shuffle(seed))
    }

    /// Records per batch, `B` (default 32).
    pub fn batch_size(self, batch_size: u64) -> Self {
        self.with(|b| b.batch_size(batch_size))
    }

    /// guideloom worker threads that read and collate ahead of the consumer (default 2; 0
    /// reads on the consumer's thread). The output is the same for every worker count.
    pub fn workers(self, workers: usize) -> Self {
        self.with(|b| b.workers(workers))
    }

    /// Batches in flight or ready ahead of the consumer (default twice the workers).
    pub fn prefetch(self, prefetch: usize) -> Self {
        self.with(|b| b.prefetch(prefetch))
    }

    /// guideloom's transforms fingerprint recorded in the loader's [`State`] (default 0;
    /// see [`LoaderBuilder::transforms_fingerprint`](guideloom_loader::Builder::transforms_fingerprint)).
    pub fn transforms_fingerprint(self, fingerprint: u64) -> Self {
        self.with(|b| b.transforms_fingerprint(fingerprint))
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
        let GuideloomDataLoaderBuilder { loader, start, policy, device, .. } = self;
        GuideloomDataLoaderBuilder { loader, collate, start, policy, device }
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
        let loader = self.loader.unbounded().collate(self.collate.clone()).build()?;
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
                collate: self.collate,
                to_output: Arc::new(to_output),
                policy: self.policy,
            }),
            device: self.device.unwrap_or_default(),
            part: None,
            cursor: Arc::new(Mutex::new(cursor)),
            children: Arc::new(Mutex::new(Vec::new())),
        })
    }
}
