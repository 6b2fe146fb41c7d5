//! Names for the common loader types, so a function can return a loader without spelling out
//! its source, record and collation types.

use guideloom_formats::{DocumentFormat, StreamFormat};

#[cfg(doc)]
use crate::{DataSource, VecCollate};
use crate::{Documents, Loader, StreamWindows, TokenWindowCollate, TokenWindows, WindowSpan};

/// The token-window fast path: a [`Loader`] over [`TokenWindows`] collated by [`TokenWindowCollate`],
/// whose batches carry a `[batch, seq_len]` [`TokenBatch`](crate::TokenBatch) of `E` ids.
///
/// ```
/// use std::path::Path;
/// use guideloom_loader::{Loader, LoaderError, TokenLoader, TokenWindows};
/// /// Batches of 8 windows of 129 tokens (stride 128), as u32 ids whatever the storage's
/// /// token dtype.
/// fn language_model_loader(dir: &Path, seed: u64) -> Result<TokenLoader<u32>, LoaderError> {
///     let windows = TokenWindows::<u32>::open_with(dir, 129, 128, Default::default())?;
///     let collate = windows.collate();
///     Loader::builder(windows).shuffle(seed).batch_size(8).collate(collate).build()
/// }
/// # let dir = tempfile::tempdir()?;
/// # let mut w = guideloom_storage::StreamWriter::open(dir.path(), guideloom_formats::TokenFormat::<u16>::new())?;
/// # w.append(0, &(0..2_000u32).collect::<Vec<_>>())?;
/// # w.commit()?;
/// let loader = language_model_loader(dir.path(), 7)?;
/// assert_eq!(loader.len(), 2); // (2000 - 129) / 128 + 1 = 15 windows, batches of 8
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub type TokenLoader<E> = Loader<TokenWindows<E>, WindowSpan, TokenWindowCollate<E>>;

/// A [`Loader`] over [`StreamWindows`] of format `F`: records are the format's decoded
/// windows, collated by `C` ([`VecCollate`], a `Vec` of them, by default).
pub type WindowLoader<F, C = crate::VecCollate> = Loader<StreamWindows<F>, <F as StreamFormat>::Output, C>;

/// A [`Loader`] over the [`Documents`] of a document storage of format `F`: records are the
/// decoded documents, collated by `C` ([`VecCollate`], a `Vec` of them, by default).
pub type DocumentLoader<F, C = crate::VecCollate> = Loader<Documents<F>, <F as DocumentFormat>::Output, C>;
