//! Making burn's batch from guideloom's: [`DeviceCollate`] (any closure, an existing burn
//! [`Batcher`] through [`FromBatcher`]) and [`TokenBatcher`], language-model tensors from token
//! windows without a cast.

use burn::data::dataloader::batcher::Batcher;
use burn::tensor::{Device, Element, Int, Tensor, TensorData};
use guideloom_loader::{Batch, BoxError, LoaderError, TokenBatch};

/// Makes the batch a burn model takes from guideloom's [`Batch`] and the target device; runs
/// on the thread that iterates the [`GuideloomDataLoader`](crate::GuideloomDataLoader).
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
/// (`Batch<Vec<I>>`, guideloom's default [`VecCollate`](guideloom_loader::VecCollate)): the batcher
/// gets the records in batch order. burn's batchers cannot fail, so this never returns an error.
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
    /// `B` flags, `true` for a padding row ([`SplitPolicy::Pad`](crate::SplitPolicy::Pad)) whose
    /// loss should be masked.
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
/// `i64`), open the storage with `TokenWindows::<u32>::open` (or `<i64>`): the loader
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
