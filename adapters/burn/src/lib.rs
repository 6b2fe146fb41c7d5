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
//! let open = || TokenWindows::<u32>::open_with(dir, L + 1, L, ReadOptions::default());
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

#[cfg(doc)]
use burn::data::dataloader::{batcher::Batcher, DataLoader, DataLoaderIterator};
#[cfg(doc)]
use burn::data::dataset::{Dataset, DatasetError};
#[cfg(doc)]
use guideloom_loader::{Batch, DataSource, Loader, LoaderError, State};

mod builder;
mod collate;
mod dataset;
mod loader;

pub use builder::GuideloomDataLoaderBuilder;
pub use collate::{int_tensor, DeviceCollate, FromBatcher, TokenBatcher, TokenTensors};
pub use dataset::SourceDataset;
pub use loader::{GuideloomDataLoader, SplitPolicy};
