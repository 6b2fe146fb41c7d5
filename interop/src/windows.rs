//! The loader's token-window fast path over a foreign dataset: [`token_windows`].

use guideloom_formats::{Element, IntTokenFormat};
use guideloom_loader::{LoaderError, TokenWindows};
use guideloom_storage::{ReadOptions, StorageError};

use crate::dataset::ForeignDataset;
use crate::error::open_error;

/// Windows of `seq_len` tokens every `stride` tokens over a foreign dataset (Megatron,
/// nanoGPT, llm.c, MDS, litdata, OLMo, NumPy) read in place, as batches of `E` ids: the same
/// fast path as a native storage (one backend call per batch, straight into the
/// `[batch, seq_len]` buffer): [`TokenWindows::from_int_reader`] over
/// [`ForeignDataset::reader`]. The source's fingerprint is that of the dataset's description
/// (layout, files and sizes, index hash), so a state names the data it was made on.
///
/// ```
/// use guideloom_formats::Primitive;
/// use guideloom_interop::{token_windows, ForeignDataset, ForeignFormat, ForeignOptions};
/// use guideloom_loader::{Collate, DataSource};
/// use guideloom_storage::ReadOptions;
/// let dir = tempfile::tempdir()?;
/// let ids: Vec<u8> = (0u16..10).flat_map(|t| t.to_le_bytes()).collect();
/// std::fs::write(dir.path().join("train.bin"), ids)?; // a nanoGPT train.bin
/// let options = ForeignOptions::new().format(ForeignFormat::NanoGpt).dtype(Primitive::U16);
/// let data = ForeignDataset::open(dir.path().join("train.bin"), &options)?;
/// let windows = token_windows::<i64>(&data, 5, 4, ReadOptions::default())?;
/// assert_eq!(windows.len(), 2);
/// let batch = windows.collate().collate(vec![windows.get(1)?, windows.get(0)?])?;
/// assert_eq!(batch.data(), [4, 5, 6, 7, 8, 0, 1, 2, 3, 4]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
/// [`LoaderError::Open`] (naming the dataset's path) when the reader cannot be made;
/// otherwise as [`TokenWindows::from_int_reader`]: [`LoaderError::TokenDtype`] when the ids do
/// not all fit `E`, [`LoaderError::InvalidConfig`] when `seq_len` or `stride` is 0,
/// [`LoaderError::WindowTooLong`] when the stream holds tokens but fewer than `seq_len`.
pub fn token_windows<E: Element>(
    data: &ForeignDataset,
    seq_len: u64,
    stride: u64,
    options: ReadOptions,
) -> Result<TokenWindows<E>, LoaderError> {
    let format = IntTokenFormat::new(data.dtype())
        .map_err(|source| open_error(data.path())(StorageError::Format { shard: 0, source }))?;
    let reader = data.reader(format, options).map_err(open_error(data.path()))?;
    TokenWindows::from_int_reader(reader, seq_len, stride)
}
