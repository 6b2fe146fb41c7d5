//! guideloom batches as [candle](https://github.com/huggingface/candle) tensors (candle-core
//! 0.11).
//!
//! - [`LmCollate`]: the language-model collation. It reads a batch of `L + 1`-token windows
//!   with one storage call and leaves two contiguous row-major buffers, `inputs` (each
//!   window's first `L` tokens) and `targets` (its last `L`); [`LmBatch::into_tensors`] hands
//!   both to [`Tensor::from_vec`], which on the CPU moves the `Vec` into the tensor's storage:
//!   the tensors' memory is the collation's own buffers, no further copy (one upload each on
//!   CUDA or Metal).
//! - [`PackedTensors`]: a packed batch ([`PackedBatch`], from [`PackCollate`]) as `[B, L]`
//!   tensors: tokens, per-document targets, segment ids and positions as `u32` (or `i64`), and
//!   the loss mask as `f32`, since candle's `cross_entropy` has no ignore index.
//! - [`CandleBatches`]: wraps a loader iterator, yields the tensors, and keeps
//!   [`CandleBatches::state`] so that a training loop saves the data position next to its
//!   `VarMap`.
//!
//! candle has no `u16` dtype: a `u16` token storage is widened to `u32` ids while it is read
//! (open the windows as `TokenWindows::<u32>`); ask for `i64` ids with `TokenWindows::<i64>`.
//! Index dtypes accepted by candle's CPU `index_select` (what `Embedding` runs) are `u8`,
//! `u32` and `i64`.
//!
//! `examples/candle_lm.rs` trains a small transformer language model with candle-nn through
//! this crate, checkpoints model, optimizer and [`State`], and checks that a resumed process
//! continues with bit-identical losses. It works around two properties of candle-nn 0.11.1
//! that matter to any training loop: `LayerNorm::forward` and `ops::softmax_last_dim` run
//! fused kernels applied without a backward pass on contiguous inputs (a model built from
//! them trains only what follows its last norm), and `AdamW` keeps its moments private (they
//! cannot be checkpointed).
//!
//! ```
//! use candle_core::{DType, Device};
//! use guideloom_candle::{lm_windows, CandleBatches, LmLoader};
//! use guideloom_formats::TokenFormat;
//! use guideloom_loader::Loader;
//! use guideloom_storage::{ReadOptions, StreamWriter};
//! let dir = tempfile::tempdir()?;
//! let mut w = StreamWriter::open(dir.path(), TokenFormat::<u16>::new())?;
//! w.append(0, &(0..100).collect::<Vec<u32>>())?;
//! w.commit()?;
//! // L = 8: windows of 9 tokens every 8 tokens, u16 storage read as u32 ids.
//! let (windows, collate) = lm_windows::<u32>(dir.path(), 8, ReadOptions::default())?;
//! let loader: LmLoader<u32> = Loader::builder(windows).batch_size(4).collate(collate).build()?;
//! let mut batches = CandleBatches::new(loader.iter(), Device::Cpu);
//! let (inputs, targets) = batches.next().unwrap()?;
//! assert_eq!((inputs.dims(), inputs.dtype()), (&[4, 8][..], DType::U32));
//! assert_eq!(inputs.to_vec2::<u32>()?[1], [8, 9, 10, 11, 12, 13, 14, 15]);
//! assert_eq!(targets.to_vec2::<u32>()?[1], [9, 10, 11, 12, 13, 14, 15, 16]);
//! let state = batches.state(); // resume with `loader.iter_from(&state)`
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![forbid(unsafe_code)]

use std::path::Path;

use candle_core::{Device, Tensor, WithDType};
use guideloom_formats::Element;
use guideloom_interop::{open_tokens, InteropError};
/// What [`lm_windows_with`] takes to open a dataset in another project's layout (a nanoGPT
/// `train.bin`: `ForeignOptions::new().format(ForeignFormat::NanoGpt).dtype(Primitive::U16)`),
/// re-exported from guideloom-interop and guideloom-formats so that no other crate is needed.
pub use guideloom_interop::{ForeignFormat, ForeignOptions, OpenOptions, Primitive};
use guideloom_loader::pack::PackedBatch;
use guideloom_loader::{
    Collate, DataSource, Loader, LoaderError, LoaderIter, State, TokenBatch, TokenWindowCollate,
    TokenWindows, WindowSpan,
};
use guideloom_storage::ReadOptions;

#[cfg(doc)]
use guideloom_loader::pack::{PackCollate, Packed};

/// The errors of this crate.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The loader failed (reading, mapping or collating a batch).
    #[error(transparent)]
    Loader(#[from] LoaderError),
    /// [`lm_windows`]'s location holds no token dataset it reads: a native storage that is
    /// not a stream of integer ids, or a foreign dataset that is damaged or not supported.
    #[error(transparent)]
    Dataset(InteropError),
    /// candle refused to make a tensor (a buffer that does not match its shape, a device
    /// upload that failed).
    #[error(transparent)]
    Tensor(#[from] candle_core::Error),
    /// Buffers given to [`LmBatch::new`] do not hold `rows * seq_len` elements.
    #[error("{what} holds {found} elements, not {rows} x {seq_len}")]
    Shape {
        /// Which buffer (`"inputs"` or `"targets"`).
        what: &'static str,
        /// Rows asked for.
        rows: usize,
        /// Tokens per row asked for.
        seq_len: usize,
        /// Elements the buffer holds.
        found: usize,
    },
}

/// Lets a candle training loop (`fn ...() -> candle_core::Result<()>`) use `?` on this crate's
/// errors; the message is kept, the error value is not (candle wraps a `Display`).
impl From<Error> for candle_core::Error {
    fn from(e: Error) -> Self {
        match e {
            Error::Tensor(e) => e,
            // Not `Error::wrap`, which appends a backtrace to the message when
            // RUST_BACKTRACE is set.
            other => candle_core::Error::Wrapped(Box::new(other)),
        }
    }
}

/// A batch of `rows` language-model examples: `[rows, seq_len]` inputs and `[rows, seq_len]`
/// targets (row `r` of `targets` is row `r` of `inputs` shifted by one token), as two
/// contiguous row-major `Vec`s of `E` ids. Made by [`LmCollate`]; [`LmBatch::into_tensors`]
/// turns it into two candle tensors without copying on the CPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LmBatch<E> {
    inputs: Vec<E>,
    targets: Vec<E>,
    rows: usize,
    seq_len: usize,
}

impl<E> LmBatch<E> {
    /// A batch from its two row-major buffers of `rows * seq_len` ids each.
    ///
    /// # Errors
    /// [`Error::Shape`] when a buffer does not hold `rows * seq_len` elements (or that
    /// product overflows).
    pub fn new(inputs: Vec<E>, targets: Vec<E>, rows: usize, seq_len: usize) -> Result<Self, Error> {
        for (what, v) in [("inputs", &inputs), ("targets", &targets)] {
            if rows.checked_mul(seq_len) != Some(v.len()) {
                return Err(Error::Shape { what, rows, seq_len, found: v.len() });
            }
        }
        Ok(LmBatch { inputs, targets, rows, seq_len })
    }

    /// `[rows, seq_len]`.
    pub fn shape(&self) -> [usize; 2] {
        [self.rows, self.seq_len]
    }

    /// The `[rows, seq_len]` inputs, row-major.
    pub fn inputs(&self) -> &[E] {
        &self.inputs
    }

    /// The `[rows, seq_len]` targets, row-major.
    pub fn targets(&self) -> &[E] {
        &self.targets
    }

    /// The two buffers `(inputs, targets)`, giving up the shape.
    pub fn into_parts(self) -> (Vec<E>, Vec<E>) {
        (self.inputs, self.targets)
    }
}

impl<E: WithDType> LmBatch<E> {
    /// `(inputs, targets)` as two `[rows, seq_len]` tensors of dtype `E` on `device`, made by
    /// [`Tensor::from_vec`]: on [`Device::Cpu`] each tensor's storage is this batch's `Vec`
    /// (moved, not copied; contiguous); on a GPU one upload each.
    ///
    /// # Errors
    /// [`Error::Tensor`] when candle cannot make a tensor (a failed device upload).
    pub fn into_tensors(self, device: &Device) -> Result<(Tensor, Tensor), Error> {
        let shape = (self.rows, self.seq_len);
        let inputs = Tensor::from_vec(self.inputs, shape, device)?;
        let targets = Tensor::from_vec(self.targets, shape, device)?;
        Ok((inputs, targets))
    }
}

/// The language-model collation over [`TokenWindows`] of `L + 1` tokens (stride `L`, so every
/// token is a target once): reads the batch's windows into one `[B, L + 1]` buffer of `E` ids
/// with one storage call (narrower stored ids widened in place, `u16` to `u32` for
/// example), copies each row's last `L` ids into the targets buffer and moves each row's first
/// `L` ids to the front of the same buffer, which becomes the inputs (its capacity keeps
/// `B` spare ids). Each id is read from storage once; the result is an [`LmBatch`].
#[derive(Debug, Clone)]
pub struct LmCollate<E> {
    inner: TokenWindowCollate<E>,
}

impl<E: Element> LmCollate<E> {
    /// The collation for `windows`.
    ///
    /// # Errors
    /// [`LoaderError::InvalidConfig`] (`seq_len`) when the windows hold fewer than 2 tokens
    /// (no input/target pair).
    pub fn new(windows: &TokenWindows<E>) -> Result<Self, LoaderError> {
        if windows.seq_len() < 2 {
            return Err(LoaderError::InvalidConfig {
                field: "seq_len",
                detail: format!(
                    "language-model windows hold L + 1 tokens with L >= 1, these hold {}",
                    windows.seq_len()
                ),
            });
        }
        Ok(LmCollate { inner: windows.collate() })
    }
}

impl<E: Element> Collate<WindowSpan> for LmCollate<E> {
    type Output = LmBatch<E>;

    fn collate(&self, records: Vec<WindowSpan>) -> Result<LmBatch<E>, LoaderError> {
        let short = records.iter().find(|r| r.len < 2);
        if let Some(r) = short {
            return Err(LoaderError::Collate {
                detail: format!(
                    "window {} holds {} tokens, a language-model window needs 2 or more",
                    r.index, r.len
                ),
            });
        }
        let windows = self.inner.collate(records)?;
        let [rows, width] = windows.shape();
        Ok(split_rows(windows.into_vec(), rows, width))
    }
}

/// Splits a row-major `[rows, width]` buffer into `[rows, width - 1]` inputs (in the same
/// buffer) and targets (a new one). `width >= 1`, `buffer.len() == rows * width`.
fn split_rows<E: Copy>(mut buffer: Vec<E>, rows: usize, width: usize) -> LmBatch<E> {
    let len = width - 1;
    let mut targets = Vec::with_capacity(rows * len);
    for row in buffer.chunks_exact(width) {
        targets.extend_from_slice(&row[1..]);
    }
    // Row r's first `len` ids move from r * width to r * len (left, so rows never overlap
    // a row not yet moved).
    for r in 1..rows {
        buffer.copy_within(r * width..r * width + len, r * len);
    }
    buffer.truncate(rows * len);
    LmBatch { inputs: buffer, targets, rows, seq_len: len }
}

/// A [`Loader`] of language-model batches: [`TokenWindows`] of `L + 1` tokens collated by
/// [`LmCollate`] into [`LmBatch`]es of `E` ids.
pub type LmLoader<E> = Loader<TokenWindows<E>, WindowSpan, LmCollate<E>>;

/// Opens the token dataset at `location` (a local path or an object-store URL: a native
/// stream storage of any token dtype whose ids fit `E`, or a dataset in another project's
/// layout, detected; guideloom-interop's [`open_tokens`]) as language-model windows of
/// `seq_len + 1` tokens every `seq_len` tokens, with their [`LmCollate`]: window `w` gives
/// inputs `tokens[w L .. w L + L]` and targets `tokens[w L + 1 .. w L + L + 1]`.
///
/// # Errors
/// [`Error::Loader`]: [`LoaderError::InvalidConfig`] when `seq_len` is 0 or `location` is not
/// UTF-8, [`LoaderError::Open`] naming the location when its storage cannot be opened or
/// read, and the errors of [`TokenWindows::from_int_reader`] (ids that do not fit `E`, a
/// stream shorter than one window); [`Error::Dataset`] when the location holds a native
/// storage that is not a token stream, or a foreign dataset that cannot be read.
pub fn lm_windows<E: Element>(
    location: impl AsRef<Path>,
    seq_len: u64,
    options: ReadOptions,
) -> Result<(TokenWindows<E>, LmCollate<E>), Error> {
    lm_windows_with(location, seq_len, &OpenOptions::default().read(options))
}

/// As [`lm_windows`], with all of [`open_tokens`]'s options: the read options, the object
/// store's and, for a dataset whose layout is not detected (raw token files), its layout and
/// token type.
///
/// ```
/// use guideloom_candle::{lm_windows_with, ForeignFormat, ForeignOptions, OpenOptions, Primitive};
/// let dir = tempfile::tempdir()?;
/// let bin = dir.path().join("train.bin"); // nanoGPT: raw little-endian u16 ids
/// std::fs::write(&bin, (0u16..20).flat_map(u16::to_le_bytes).collect::<Vec<u8>>())?;
/// let options = OpenOptions::default()
///     .foreign(ForeignOptions::new().format(ForeignFormat::NanoGpt).dtype(Primitive::U16));
/// let (windows, _collate) = lm_windows_with::<u32>(&bin, 4, &options)?;
/// assert_eq!(guideloom_loader::DataSource::len(&windows), 4); // windows of 5 tokens every 4
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
/// As [`lm_windows`].
pub fn lm_windows_with<E: Element>(
    location: impl AsRef<Path>,
    seq_len: u64,
    options: &OpenOptions,
) -> Result<(TokenWindows<E>, LmCollate<E>), Error> {
    if seq_len == 0 {
        return Err(
            LoaderError::InvalidConfig { field: "seq_len", detail: "must be at least 1".into() }.into()
        );
    }
    let path = location.as_ref();
    let text = path.to_str().ok_or_else(|| LoaderError::InvalidConfig {
        field: "location",
        detail: format!("{} is not UTF-8", path.display()),
    })?;
    let opened = open_tokens(text, options).and_then(|data| data.windows::<E>(seq_len + 1, seq_len));
    let windows = match opened {
        Ok(w) => w,
        Err(InteropError::Loader(e)) => return Err(e.into()),
        Err(InteropError::Storage(source)) => {
            return Err(LoaderError::Open { path: path.to_path_buf(), source }.into())
        }
        Err(e) => return Err(Error::Dataset(e)),
    };
    let collate = LmCollate::new(&windows)?;
    Ok((windows, collate))
}

/// Token ids that become candle ids: `u32` and `i64` as they are (no copy), `u16` widened to
/// `u32` (candle has no `u16`; one pass, one new buffer).
pub trait CandleId: Copy + Send + 'static {
    /// The candle element type (`u32` or `i64`).
    type Id: WithDType;
    /// The ids as candle elements, in the same buffer when the type does not change.
    fn into_ids(ids: Vec<Self>) -> Vec<Self::Id>;
}

impl CandleId for u32 {
    type Id = u32;
    fn into_ids(ids: Vec<u32>) -> Vec<u32> {
        ids
    }
}

impl CandleId for i64 {
    type Id = i64;
    fn into_ids(ids: Vec<i64>) -> Vec<i64> {
        ids
    }
}

impl CandleId for u16 {
    type Id = u32;
    fn into_ids(ids: Vec<u16>) -> Vec<u32> {
        ids.into_iter().map(u32::from).collect()
    }
}

/// A packed batch as candle tensors, all `[B, L]` (`B` rows of `L` tokens), from
/// [`PackedBatch::into_tensors`](IntoTensors::into_tensors).
///
/// The layout is guideloom's [`Packed`] rows': `segment_ids` 1-based per row and 0 for
/// padding, `positions` restarting at 0 in every segment, `targets` the next token of the
/// same document (or the packer's ignore id), `loss_mask` 1.0 exactly where the target is
/// real, else 0.0. candle's `cross_entropy` has no ignore index: build the [`Packed`] source
/// with an ignore id that is a valid vocabulary id (0, say) so that gathering the targets
/// never goes out of range, and weight the per-token loss by `loss_mask`
/// (`(nll * mask).sum() / mask.sum()`).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PackedTensors {
    /// `[B, L]` token ids (`u32`, or `i64` from `i64` rows).
    pub tokens: Tensor,
    /// `[B, L]` per-document targets, same dtype as `tokens`.
    pub targets: Tensor,
    /// `[B, L]` `u32` segment ids.
    pub segment_ids: Tensor,
    /// `[B, L]` `u32` positions within the segment.
    pub positions: Tensor,
    /// `[B, L]` `f32` loss mask (1.0 or 0.0).
    pub loss_mask: Tensor,
    /// Per row, the `[segments + 1]` segment boundaries (`[0, l1, l1 + l2, ...]`).
    pub cu_seqlens: Vec<Vec<u32>>,
}

/// A collated value that becomes candle tensors on a device: what [`CandleBatches`] yields.
pub trait IntoTensors {
    /// The tensors.
    type Tensors;
    /// Makes the tensors on `device` (without copying the buffers on the CPU where the
    /// element type is a candle dtype).
    ///
    /// # Errors
    /// [`Error::Tensor`] when candle refuses a buffer (its length does not match the
    /// shape) or the upload fails.
    fn into_tensors(self, device: &Device) -> Result<Self::Tensors, Error>;
}

impl<E: WithDType> IntoTensors for LmBatch<E> {
    /// `(inputs, targets)`, both `[B, L]`.
    type Tensors = (Tensor, Tensor);
    fn into_tensors(self, device: &Device) -> Result<(Tensor, Tensor), Error> {
        LmBatch::into_tensors(self, device)
    }
}

impl<E: WithDType> IntoTensors for TokenBatch<E> {
    /// The `[B, L]` ids as they are.
    type Tensors = Tensor;
    fn into_tensors(self, device: &Device) -> Result<Tensor, Error> {
        let shape = (self.shape()[0], self.shape()[1]);
        Ok(Tensor::from_vec(self.into_vec(), shape, device)?)
    }
}

impl<T: CandleId> IntoTensors for PackedBatch<T> {
    /// All five arrays as `[B, L]` tensors; tokens, targets, segment ids and positions move
    /// without a copy on the CPU (`u16` ids are widened once), the `u8` loss mask becomes a
    /// new `f32` buffer.
    type Tensors = PackedTensors;
    fn into_tensors(self, device: &Device) -> Result<PackedTensors, Error> {
        let PackedBatch {
            rows, seq_len, tokens, targets, segment_ids, positions, loss_mask, cu_seqlens, ..
        } = self;
        let shape = (rows, seq_len);
        let mask: Vec<f32> = loss_mask.into_iter().map(f32::from).collect();
        Ok(PackedTensors {
            tokens: Tensor::from_vec(T::into_ids(tokens), shape, device)?,
            targets: Tensor::from_vec(T::into_ids(targets), shape, device)?,
            segment_ids: Tensor::from_vec(segment_ids, shape, device)?,
            positions: Tensor::from_vec(positions, shape, device)?,
            loss_mask: Tensor::from_vec(mask, shape, device)?,
            cu_seqlens,
        })
    }
}

/// A loader iterator whose batches arrive as candle tensors on one device: yields
/// `Ok(tensors)` per batch ([`IntoTensors::Tensors`] of the collated value: `(inputs,
/// targets)` for an [`LmLoader`]) or one `Err`, after which it ends.
///
/// [`CandleBatches::state`] is the checkpoint of the data position: saved after a training
/// step next to the model (`varmap.save(...)`) and the optimizer, it resumes with
/// `CandleBatches::new(loader.iter_from(&state)?, device)`, which yields exactly the batches
/// the interrupted run had not yet consumed.
pub struct CandleBatches<S: DataSource, U, C: Collate<U>> {
    iter: LoaderIter<S, U, C>,
    device: Device,
}

impl<S: DataSource, U, C: Collate<U>> std::fmt::Debug for CandleBatches<S, U, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CandleBatches").field("iter", &self.iter).field("device", &self.device).finish()
    }
}

impl<S, U, C> CandleBatches<S, U, C>
where
    S: DataSource + 'static,
    U: 'static,
    C: Collate<U> + 'static,
    C::Output: IntoTensors + 'static,
{
    /// Wraps a loader iterator (`loader.iter()`, or `loader.iter_from(&state)?` to resume);
    /// tensors are made on `device`.
    pub fn new(iter: LoaderIter<S, U, C>, device: Device) -> Self {
        CandleBatches { iter, device }
    }

    /// The checkpoint: resuming from it continues with the next batch not yet yielded.
    pub fn state(&self) -> State {
        self.iter.state()
    }

    /// Absolute number of the next batch to yield (counted from the first batch of epoch 0).
    pub fn position(&self) -> u64 {
        self.iter.position()
    }

    /// The device the tensors are made on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The wrapped loader iterator.
    pub fn into_inner(self) -> LoaderIter<S, U, C> {
        self.iter
    }
}

impl<S, U, C> Iterator for CandleBatches<S, U, C>
where
    S: DataSource + 'static,
    U: 'static,
    C: Collate<U> + 'static,
    C::Output: IntoTensors + 'static,
{
    type Item = Result<<C::Output as IntoTensors>::Tensors, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        let batch = self.iter.next()?;
        Some(batch.map_err(Error::from).and_then(|b| b.data.into_tensors(&self.device)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_rows_moves_inputs_left_and_copies_targets() {
        let b = split_rows(vec![0u32, 1, 2, 10, 11, 12, 20, 21, 22], 3, 3);
        assert_eq!(b.inputs(), [0, 1, 10, 11, 20, 21]);
        assert_eq!(b.targets(), [1, 2, 11, 12, 21, 22]);
        assert_eq!(b.shape(), [3, 2]);
        let one = split_rows(vec![7i64, 8], 1, 2);
        assert_eq!((one.inputs(), one.targets()), (&[7i64][..], &[8i64][..]));
    }
}
