//! The fast path for token windows: records are window spans, and the collation reads a whole
//! batch straight into its `[batch, seq_len]` buffer with one storage call, widening the
//! storage's ids in place when the batch element type is wider.

use std::marker::PhantomData;
use std::path::Path;
use std::sync::Arc;

use guideloom_formats::{Dtype, Element, IntTokenFormat, Primitive, TokenElement, TokenFormat};
use guideloom_storage::{
    Manifest, MappedWindows, MmapBackend, ReadOptions, StorageDir, StorageError, StorageLocation,
    StreamReader, Window,
};

use crate::storage_sources::open_error;
#[cfg(doc)]
use crate::StreamWindows;
use crate::{BufferPool, Collate, DataSource, LoaderError, TokenBatch, WindowParams, WindowReader, Windows};

/// One window of a [`TokenWindows`] source: its record index and its element range. Getting
/// it does no I/O; [`TokenWindowCollate`] reads the windows of a batch together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WindowSpan {
    /// The window (record) index.
    pub index: u64,
    /// First element of the window in the stream.
    pub offset: u64,
    /// Window length in elements (`seq_len`).
    pub len: u64,
}

/// Token windows over a stream storage, served the fast way, as `[batch, seq_len]` batches of
/// `E` ids.
///
/// The records are those of [`StreamWindows`] (window `w` = tokens
/// `[w * stride, w * stride + seq_len)`, same count, same fingerprint, so states are
/// interchangeable), but each record is a [`WindowSpan`] and [`TokenWindows::collate`] reads
/// a whole batch into one contiguous `[batch, seq_len]` buffer with one backend call and one
/// copy per token (no per-window allocation).
///
/// Three ways to make one:
/// - [`TokenWindows::open`] (and [`TokenWindows::open_with`], with a stride and read
///   options): the storage at a path or URL may hold ids of any token dtype (`u8`, `u16`,
///   `u32`, `u64`, read from its manifest) whose values all fit `E`; narrower ids are widened
///   in place in the batch buffer. `E` is then any integer type wide enough:
///   `TokenWindows::<u32>` reads u16 and u32 storages, `TokenWindows::<i64>` (for frameworks
///   whose embedding takes `i64` ids) u8, u16 and u32 storages;
/// - [`TokenWindows::new`]: over an open reader of `E` ids;
/// - [`TokenWindows::from_int_reader`]: over a reader of ids of any integer dtype (a foreign
///   dataset's, guideloom-interop's `open_tokens`).
///
/// A stream that holds tokens but fewer than `seq_len` is refused
/// ([`LoaderError::WindowTooLong`]); an empty stream gives an empty source (a loader over it
/// yields no batch).
///
/// The language-model pattern: windows of `L + 1` tokens at stride `L`, then
/// [`TokenBatch::inputs_targets`] splits each `[B, L + 1]` batch into `[B, L]` inputs (the
/// first `L` tokens of each row) and `[B, L]` targets (the last `L`).
///
/// ```
/// use guideloom_formats::TokenFormat;
/// use guideloom_loader::{Loader, TokenLoader, TokenWindows};
/// use guideloom_storage::{ReadOptions, StreamWriter};
/// let dir = tempfile::tempdir()?;
/// let mut w = StreamWriter::open(dir.path(), TokenFormat::<u16>::new())?;
/// w.append(0, &[0, 1, 2, 3, 4])?;
/// w.append(1, &[5, 6, 7, 8])?;
/// w.commit()?;
/// // L = 4: windows of 5 tokens every 4 tokens, as i64 ids from a u16 storage.
/// let windows = TokenWindows::<i64>::open_with(dir.path(), 5, 4, ReadOptions::default())?;
/// let collate = windows.collate();
/// let loader: TokenLoader<i64> = Loader::builder(windows).batch_size(2).collate(collate).build()?;
/// let batch = loader.iter().next().unwrap()?;
/// assert_eq!(batch.data.shape(), [2, 5]);
/// assert_eq!(batch.data.data(), [0, 1, 2, 3, 4, 4, 5, 6, 7, 8]);
/// let (inputs, targets) = batch.data.inputs_targets();
/// assert_eq!(inputs.data(), [0, 1, 2, 3, 4, 5, 6, 7]);
/// assert_eq!(targets.data(), [1, 2, 3, 4, 5, 6, 7, 8]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct TokenWindows<E> {
    windows: Windows<SharedTokens>,
    _element: PhantomData<fn() -> E>,
}

impl<E> std::fmt::Debug for TokenWindows<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenWindows")
            .field("element", &std::any::type_name::<E>())
            .field("stored", &self.windows.reader().0.dtype())
            .field("seq_len", &self.windows.seq_len())
            .field("stride", &self.windows.stride())
            .field("windows", &self.windows.len())
            .finish()
    }
}

/// Reads the windows of a batch of [`WindowSpan`]s into one [`TokenBatch`] of `E` ids, with
/// one storage call; made by [`TokenWindows::collate`].
///
/// Batches it makes hand their buffers back to its [`BufferPool`] when dropped (clones of
/// the collation share the pool), and the next batch is read into a recycled buffer: after
/// the first few batches a loader allocates and zeroes no batch memory.
pub struct TokenWindowCollate<E> {
    storage: SharedTokens,
    pool: Arc<BufferPool<E>>,
}

impl<E> std::fmt::Debug for TokenWindowCollate<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenWindowCollate")
            .field("element", &std::any::type_name::<E>())
            .field("stored", &self.storage.0.dtype())
            .field("free_buffers", &self.pool.free_buffers())
            .finish()
    }
}

impl<E> Clone for TokenWindowCollate<E> {
    fn clone(&self) -> Self {
        TokenWindowCollate { storage: self.storage.clone(), pool: Arc::clone(&self.pool) }
    }
}

impl<E> TokenWindowCollate<E> {
    /// The pool the buffers of dropped batches return to.
    pub fn pool(&self) -> &Arc<BufferPool<E>> {
        &self.pool
    }
}

impl<E: TokenElement> TokenWindows<E> {
    /// Windows of `seq_len` elements starting every `stride` elements over an open reader.
    ///
    /// # Errors
    /// [`LoaderError::InvalidConfig`] when `seq_len` or `stride` is 0;
    /// [`LoaderError::WindowTooLong`] when the stream holds tokens but fewer than `seq_len`.
    pub fn new(reader: StreamReader<TokenFormat<E>>, seq_len: u64, stride: u64) -> Result<Self, LoaderError> {
        Self::from_storage(SharedTokens(Arc::new(reader)), seq_len, stride)
    }
}

impl<E: Element> TokenWindows<E> {
    /// Opens the stream storage at `location` (a local directory, or an object-store URL
    /// such as `s3://bucket/tokens`, read by [`StorageLocation::from_path`] with the store's
    /// options from the environment, [`RemoteOptions::from_env`](guideloom_storage::RemoteOptions::from_env))
    /// whatever its token dtype (`u8`, `u16`, `u32` or `u64`, read from the manifest), as
    /// batches of `E` ids, with windows of `seq_len` tokens every `seq_len` tokens (default
    /// read options). Ids narrower than `E` are widened in place; a dataset in another
    /// project's layout is opened by guideloom-interop's `open_tokens`.
    ///
    /// ```
    /// use guideloom_formats::TokenFormat;
    /// use guideloom_loader::{Collate, DataSource, TokenWindows};
    /// use guideloom_storage::StreamWriter;
    /// let (small, large) = (tempfile::tempdir()?, tempfile::tempdir()?);
    /// let mut w = StreamWriter::open(small.path(), TokenFormat::<u16>::new())?;
    /// w.append(0, &[1, 2, 65_535])?;
    /// w.commit()?;
    /// let mut w = StreamWriter::open(large.path(), TokenFormat::<u32>::new())?;
    /// w.append(0, &[1, 2, 100_000])?;
    /// w.commit()?;
    /// // One type for both storages: u32 batches.
    /// for (dir, last) in [(small.path(), 65_535u32), (large.path(), 100_000)] {
    ///     let windows = TokenWindows::<u32>::open(dir, 3)?;
    ///     let batch = windows.collate().collate(vec![windows.get(0)?])?;
    ///     assert_eq!(batch.data(), [1, 2, last]);
    /// }
    /// // u32 ids do not all fit u16.
    /// assert!(matches!(
    ///     TokenWindows::<u16>::open(large.path(), 3),
    ///     Err(guideloom_loader::LoaderError::TokenDtype { stored, requested, .. }) if stored == "<u4" && requested == "<u2"
    /// ));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`LoaderError::Open`] when the storage cannot be opened (missing, not a stream
    /// storage, damaged, a URL whose store cannot be built); [`LoaderError::TokenDtype`] when
    /// its ids do not all fit `E` (`E` is not an integer type, is narrower than the stored
    /// ids, or is signed and as wide); [`LoaderError::InvalidConfig`] when `seq_len` is 0;
    /// [`LoaderError::WindowTooLong`] when the stream holds tokens but fewer than `seq_len`.
    pub fn open(location: impl AsRef<Path>, seq_len: u64) -> Result<Self, LoaderError> {
        Self::open_with(location, seq_len, seq_len, ReadOptions::default())
    }

    /// [`TokenWindows::open`] with an explicit stride and read options (I/O backend,
    /// descriptor cap).
    ///
    /// # Errors
    /// As [`TokenWindows::open`]; [`LoaderError::InvalidConfig`] also when `stride` is 0.
    pub fn open_with(
        location: impl AsRef<Path>,
        seq_len: u64,
        stride: u64,
        options: ReadOptions,
    ) -> Result<Self, LoaderError> {
        let path = location.as_ref();
        let dir = StorageLocation::from_path(path).open().map_err(open_error(path))?;
        let stored = stored_primitive(dir.as_ref()).map_err(open_error(path))?;
        let storage: Arc<dyn TokenStorage> = match stored {
            Some(Primitive::U8) => open_dyn::<u8>(path, dir, options)?,
            Some(Primitive::U16) => open_dyn::<u16>(path, dir, options)?,
            Some(Primitive::U64) => open_dyn::<u64>(path, dir, options)?,
            // A `<u4` storage; for anything else opening reports the storage's own kind or
            // dtype error.
            _ => open_dyn::<u32>(path, dir, options)?,
        };
        check_widens(path, &storage.dtype(), &E::dtype())?;
        Self::from_storage(SharedTokens(storage), seq_len, stride)
    }

    /// Windows over a reader of ids of any integer dtype ([`IntTokenFormat`]: a foreign
    /// dataset's reader (guideloom-interop's `token_windows`), or a native storage of signed
    /// ids), as batches of `E` ids. Stored ids
    /// are widened in place (signed ones sign-extended); they must all fit `E`: unsigned ids
    /// as for [`TokenWindows::open`], signed ids only into a signed `E` at least as wide.
    ///
    /// # Errors
    /// [`LoaderError::TokenDtype`] when the ids do not all fit `E`;
    /// [`LoaderError::InvalidConfig`] when `seq_len` or `stride` is 0;
    /// [`LoaderError::WindowTooLong`] when the stream holds tokens but fewer than `seq_len`.
    pub fn from_int_reader(
        reader: StreamReader<IntTokenFormat>,
        seq_len: u64,
        stride: u64,
    ) -> Result<Self, LoaderError> {
        check_widens(reader.dir(), &reader.dtype().clone(), &E::dtype())?;
        Self::from_storage(SharedTokens(Arc::new(reader)), seq_len, stride)
    }

    fn from_storage(storage: SharedTokens, seq_len: u64, stride: u64) -> Result<Self, LoaderError> {
        let windows = Windows::with_stride(storage, seq_len, stride)?;
        windows.check_fits()?;
        Ok(TokenWindows { windows, _element: PhantomData })
    }

    /// The collation that reads a batch of this source's windows into a `[batch, seq_len]`
    /// buffer of `E` ids.
    pub fn collate(&self) -> TokenWindowCollate<E> {
        TokenWindowCollate { storage: self.windows.reader().clone(), pool: Arc::default() }
    }

    /// The collation that hands out a batch of this source's windows as views into the
    /// mapped shards ([`MappedWindows`], little-endian ids of [`TokenWindows::stored_dtype`],
    /// no copy), for consumers that gather on their own (a copy to a device, a hash). `mmap`
    /// carries the caller's acceptance of the mmap contract ([`MmapBackend::new`], an
    /// `unsafe` constructor); the batches stay valid while they live.
    ///
    /// ```no_run
    /// use guideloom_loader::{Loader, TokenWindows};
    /// use guideloom_storage::MmapBackend;
    /// let windows = TokenWindows::<u16>::open("tokens", 2049)?;
    /// // SAFETY: nothing truncates or rewrites the storage's files while this program runs.
    /// let collate = windows.mapped_collate(unsafe { MmapBackend::new() });
    /// let loader = Loader::builder(windows).batch_size(32).collate(collate).build()?;
    /// for batch in loader.iter() {
    ///     let batch = batch?;
    ///     let bytes: usize = batch.data.parts().map(|p| p.len()).sum();
    ///     assert_eq!(bytes, batch.len() * 2049 * 2);
    /// }
    /// # Ok::<(), guideloom_loader::LoaderError>(())
    /// ```
    pub fn mapped_collate(&self, mmap: MmapBackend) -> MappedWindowCollate {
        MappedWindowCollate { storage: self.windows.reader().clone(), mmap }
    }

    /// Window length in elements.
    pub fn seq_len(&self) -> u64 {
        self.windows.seq_len()
    }

    /// Elements between the starts of consecutive windows.
    pub fn stride(&self) -> u64 {
        self.windows.stride()
    }

    /// Tokens in the stream.
    pub fn elements(&self) -> u64 {
        self.windows.elements()
    }

    /// The dtype of the ids in the storage (which may be narrower than `E`).
    pub fn stored_dtype(&self) -> Dtype {
        self.windows.reader().0.dtype()
    }
}

impl<E: Element> DataSource for TokenWindows<E> {
    type Item = WindowSpan;

    fn len(&self) -> u64 {
        self.windows.len()
    }

    fn get(&self, index: u64) -> Result<WindowSpan, LoaderError> {
        let w = self
            .windows
            .window(index)
            .ok_or(LoaderError::IndexOutOfRange { index, len: self.windows.len() })?;
        Ok(WindowSpan { index, offset: w.offset, len: w.len })
    }

    fn fingerprint(&self) -> u64 {
        self.windows.fingerprint()
    }

    fn window_params(&self) -> Option<WindowParams> {
        Some(self.windows.params())
    }

    /// `true`: a record is a span computed from its index (the collation reads the bytes).
    fn reads_bounded(&self) -> bool {
        true
    }
}

impl<E: Element> Collate<WindowSpan> for TokenWindowCollate<E> {
    /// `true` over a local storage (reads from a local disk), `false` over a remote one.
    fn bounded(&self) -> bool {
        self.storage.0.local()
    }

    type Output = TokenBatch<E>;

    fn collate(&self, records: Vec<WindowSpan>) -> Result<TokenBatch<E>, LoaderError> {
        let seq_len = records.first().map_or(0, |r| r.len);
        if let Some(r) = records.iter().find(|r| r.len != seq_len) {
            return Err(LoaderError::Collate {
                detail: format!("window {} holds {} tokens, the first holds {seq_len}", r.index, r.len),
            });
        }
        let too_large = || LoaderError::Collate {
            detail: format!("{} windows of {seq_len} tokens do not fit in memory", records.len()),
        };
        let n = usize::try_from(seq_len)
            .ok()
            .and_then(|l| l.checked_mul(records.len()))
            .filter(|n| n.checked_mul(std::mem::size_of::<E>()).is_some())
            .ok_or_else(too_large)?;
        let spans: Vec<Window> = records.iter().map(|r| Window::new(r.offset, r.len)).collect();
        // A recycled buffer still holds an earlier batch's ids: every byte is overwritten below
        // (the read fills the first `n * stored` bytes, widening the rest), and on an error the
        // buffer is dropped, never handed out.
        let mut data = self.pool.take(n, E::zeroed());
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut data);
        let stored = self.storage.0.itemsize();
        // The ids land at the front of the buffer, `stored` bytes each, then widen in place.
        self.storage.0.read_into(&spans, &mut bytes[..n * stored]).map_err(|source| {
            LoaderError::Storage { index: records.first().map_or(0, |r| r.index), source }
        })?;
        widen_in_place(bytes, n, stored, std::mem::size_of::<E>(), self.storage.0.signed())?;
        Ok(TokenBatch::pooled(data, records.len(), seq_len as usize, Arc::clone(&self.pool)))
    }
}

/// Hands out the windows of a batch of [`WindowSpan`]s as views into the mapped shards
/// ([`MappedWindows`], no copy); made by [`TokenWindows::mapped_collate`].
#[derive(Clone)]
pub struct MappedWindowCollate {
    storage: SharedTokens,
    mmap: MmapBackend,
}

impl std::fmt::Debug for MappedWindowCollate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MappedWindowCollate").field("stored", &self.storage.0.dtype()).finish()
    }
}

impl Collate<WindowSpan> for MappedWindowCollate {
    type Output = MappedWindows;

    fn collate(&self, records: Vec<WindowSpan>) -> Result<MappedWindows, LoaderError> {
        let spans: Vec<Window> = records.iter().map(|r| Window::new(r.offset, r.len)).collect();
        self.storage
            .0
            .map_many(&spans, &self.mmap)
            .map_err(|source| LoaderError::Storage { index: records.first().map_or(0, |r| r.index), source })
    }
}

/// What the token-window path needs of a stream storage of token ids, whatever their dtype:
/// implemented by `StreamReader<TokenFormat<S>>` for every token element type `S`.
trait TokenStorage: Send + Sync + std::fmt::Debug {
    /// Tokens in the stream.
    fn len(&self) -> u64;
    /// The manifest's fingerprint.
    fn fingerprint(&self) -> u64;
    /// The stored id dtype.
    fn dtype(&self) -> Dtype;
    /// Bytes per stored id.
    fn itemsize(&self) -> usize;
    /// Whether the stored ids are signed (sign-extended when widened).
    fn signed(&self) -> bool {
        false
    }
    /// Whether the storage's files are local ([`guideloom_storage::StorageDir::local_dir`]).
    fn local(&self) -> bool;
    /// Reads windows as little-endian ids, back to back, into `out`.
    fn read_into(&self, windows: &[Window], out: &mut [u8]) -> Result<(), StorageError>;
    /// The windows as views into the mapped shards.
    fn map_many(&self, windows: &[Window], mmap: &MmapBackend) -> Result<MappedWindows, StorageError>;
}

impl<S: TokenElement> TokenStorage for StreamReader<TokenFormat<S>> {
    fn len(&self) -> u64 {
        StreamReader::len(self)
    }
    fn fingerprint(&self) -> u64 {
        StreamReader::fingerprint(self)
    }
    fn dtype(&self) -> Dtype {
        S::dtype()
    }
    fn itemsize(&self) -> usize {
        std::mem::size_of::<S>()
    }
    fn local(&self) -> bool {
        self.storage_dir().local_dir().is_some()
    }
    fn read_into(&self, windows: &[Window], out: &mut [u8]) -> Result<(), StorageError> {
        self.read_many_into(windows, out)
    }
    fn map_many(&self, windows: &[Window], mmap: &MmapBackend) -> Result<MappedWindows, StorageError> {
        StreamReader::map_many(self, windows, mmap)
    }
}

impl TokenStorage for StreamReader<IntTokenFormat> {
    fn len(&self) -> u64 {
        StreamReader::len(self)
    }
    fn fingerprint(&self) -> u64 {
        StreamReader::fingerprint(self)
    }
    fn dtype(&self) -> Dtype {
        StreamReader::dtype(self).clone()
    }
    fn itemsize(&self) -> usize {
        self.format().primitive().size() as usize
    }
    fn signed(&self) -> bool {
        self.format().signed()
    }
    fn local(&self) -> bool {
        self.storage_dir().local_dir().is_some()
    }
    fn read_into(&self, windows: &[Window], out: &mut [u8]) -> Result<(), StorageError> {
        self.read_many_into(windows, out)
    }
    fn map_many(&self, windows: &[Window], mmap: &MmapBackend) -> Result<MappedWindows, StorageError> {
        StreamReader::map_many(self, windows, mmap)
    }
}

/// A shared token storage of any id dtype; [`Windows`] cuts it into windows.
#[derive(Debug, Clone)]
struct SharedTokens(Arc<dyn TokenStorage>);

impl WindowReader for SharedTokens {
    /// A window's ids as little-endian bytes.
    type Output = Vec<u8>;
    fn len(&self) -> u64 {
        self.0.len()
    }
    fn read_windows(&self, windows: &[Window]) -> Result<Vec<Vec<u8>>, StorageError> {
        let size = self.0.itemsize();
        let bytes = |len: u64| usize::try_from(len).ok().and_then(|l| l.checked_mul(size));
        let total = windows.iter().try_fold(0usize, |acc, w| bytes(w.len).and_then(|b| acc.checked_add(b)));
        let Some(total) = total else {
            let bytes =
                windows.iter().fold(0u64, |acc, w| acc.saturating_add(w.len.saturating_mul(size as u64)));
            return Err(StorageError::BatchTooLarge { bytes });
        };
        let mut all = vec![0u8; total];
        self.0.read_into(windows, &mut all)?;
        let mut rest = &all[..];
        Ok(windows
            .iter()
            .map(|w| {
                let (head, tail) = rest.split_at(bytes(w.len).unwrap_or(0));
                rest = tail;
                head.to_vec()
            })
            .collect())
    }
    fn fingerprint(&self) -> u64 {
        self.0.fingerprint()
    }
}

/// The primitive dtype of the storage in `dir` according to its manifest, or `None` when the
/// manifest's dtype is not a primitive.
fn stored_primitive(dir: &dyn StorageDir) -> Result<Option<Primitive>, StorageError> {
    let manifest = Manifest::load_from(dir)?;
    Ok(match manifest.dtype() {
        Some(Dtype::Primitive(p)) => Some(*p),
        _ => None,
    })
}

fn open_dyn<S: TokenElement>(
    path: &Path,
    dir: Arc<dyn StorageDir>,
    options: ReadOptions,
) -> Result<Arc<dyn TokenStorage>, LoaderError> {
    let reader = StreamReader::open_in(dir, TokenFormat::<S>::new(), options).map_err(open_error(path))?;
    Ok(Arc::new(reader))
}

/// Checks that every id of the `stored` integer dtype fits the integer dtype `out`: unsigned
/// ids into an unsigned type at least as wide or a signed one wider, signed ids into a
/// signed type at least as wide.
fn check_widens(dir: &Path, stored: &Dtype, out: &Dtype) -> Result<(), LoaderError> {
    let unsigned =
        |p: Primitive| matches!(p, Primitive::U8 | Primitive::U16 | Primitive::U32 | Primitive::U64);
    let fits = match (stored, out) {
        (Dtype::Primitive(s), Dtype::Primitive(o)) if unsigned(*s) && o.is_integer() => {
            if unsigned(*o) {
                o.size() >= s.size()
            } else {
                o.size() > s.size()
            }
        }
        (Dtype::Primitive(s), Dtype::Primitive(o)) if s.is_integer() && o.is_integer() => {
            !unsigned(*o) && o.size() >= s.size()
        }
        _ => false,
    };
    if fits {
        Ok(())
    } else {
        Err(LoaderError::TokenDtype {
            path: dir.to_path_buf(),
            stored: stored.to_string(),
            requested: out.to_string(),
        })
    }
}

/// Turns the first `n` little-endian ids of `from` bytes each at the front of `bytes` into `n`
/// native-endian integers of `to` bytes each filling `bytes`, in place, last id first (an id's
/// new bytes only cover ids already moved). `to >= from`; each id fits `to` bytes (checked at
/// open), so the unsigned pattern is also the signed one; `signed` ids are sign-extended.
fn widen_in_place(
    bytes: &mut [u8],
    n: usize,
    from: usize,
    to: usize,
    signed: bool,
) -> Result<(), LoaderError> {
    match (from, to) {
        (1, 1) | (2, 2) | (4, 4) | (8, 8) if cfg!(target_endian = "little") => {}
        (1, 1) => {}
        (2, 2) => widen::<2, 2>(bytes, n, false),
        (4, 4) => widen::<4, 4>(bytes, n, false),
        (8, 8) => widen::<8, 8>(bytes, n, false),
        (1, 2) => widen::<1, 2>(bytes, n, signed),
        (1, 4) => widen::<1, 4>(bytes, n, signed),
        (1, 8) => widen::<1, 8>(bytes, n, signed),
        (2, 4) => widen::<2, 4>(bytes, n, signed),
        (2, 8) => widen::<2, 8>(bytes, n, signed),
        (4, 8) => widen::<4, 8>(bytes, n, signed),
        _ => {
            return Err(LoaderError::Collate {
                detail: format!("cannot widen {from}-byte ids to {to}-byte elements"),
            })
        }
    }
    Ok(())
}

fn widen<const FROM: usize, const TO: usize>(bytes: &mut [u8], n: usize, signed: bool) {
    let shift = 64 - 8 * FROM as u32;
    for i in (0..n).rev() {
        let mut le = [0u8; 8];
        le[..FROM].copy_from_slice(&bytes[i * FROM..(i + 1) * FROM]);
        let mut v = u64::from_le_bytes(le);
        if signed && shift > 0 {
            v = (((v << shift) as i64) >> shift) as u64;
        }
        let ne = v.to_ne_bytes();
        let value = if cfg!(target_endian = "little") { &ne[..TO] } else { &ne[8 - TO..] };
        bytes[i * TO..(i + 1) * TO].copy_from_slice(value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widening_in_place_keeps_every_id() {
        let ids: [u16; 4] = [0, 1, 0x1234, u16::MAX];
        let mut out = [0u64; 4];
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut out);
        for (i, id) in ids.iter().enumerate() {
            bytes[2 * i..2 * i + 2].copy_from_slice(&id.to_le_bytes());
        }
        widen_in_place(bytes, 4, 2, 8, false).unwrap();
        assert_eq!(out, [0, 1, 0x1234, 65_535]);

        let mut out = [0i32; 3];
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut out);
        bytes[..3].copy_from_slice(&[7, 0, 255]);
        widen_in_place(bytes, 3, 1, 4, false).unwrap();
        assert_eq!(out, [7, 0, 255]);
        assert!(matches!(widen_in_place(&mut [0u8; 4], 2, 2, 1, false), Err(LoaderError::Collate { .. })));

        // Signed ids are sign-extended.
        let ids: [i32; 3] = [-1, 128_000, i32::MIN];
        let mut out = [0i64; 3];
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut out);
        for (i, id) in ids.iter().enumerate() {
            bytes[4 * i..4 * i + 4].copy_from_slice(&id.to_le_bytes());
        }
        widen_in_place(bytes, 3, 4, 8, true).unwrap();
        assert_eq!(out, [-1, 128_000, i64::from(i32::MIN)]);
    }

    #[test]
    fn only_lossless_widenings_are_accepted() {
        let dir = Path::new("d");
        let ok = |stored, out| check_widens(dir, &Dtype::Primitive(stored), &Dtype::Primitive(out)).is_ok();
        assert!(ok(Primitive::U16, Primitive::U16));
        assert!(ok(Primitive::U16, Primitive::U32));
        assert!(ok(Primitive::U16, Primitive::I32));
        assert!(ok(Primitive::U32, Primitive::I64));
        assert!(ok(Primitive::U8, Primitive::I16));
        assert!(!ok(Primitive::U32, Primitive::U16));
        assert!(!ok(Primitive::U32, Primitive::I32));
        assert!(!ok(Primitive::U64, Primitive::I64));
        assert!(!ok(Primitive::U16, Primitive::F32));
        assert!(!ok(Primitive::F32, Primitive::U64));
        assert!(ok(Primitive::I32, Primitive::I32));
        assert!(ok(Primitive::I32, Primitive::I64));
        assert!(ok(Primitive::I16, Primitive::I32));
        assert!(!ok(Primitive::I32, Primitive::U32));
        assert!(!ok(Primitive::I32, Primitive::U64));
        assert!(!ok(Primitive::I64, Primitive::I32));
        let e = check_widens(dir, &Dtype::Primitive(Primitive::U32), &Dtype::Primitive(Primitive::U16))
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "d holds token ids of dtype <u4, which do not all fit the requested element type <u2"
        );
    }
}
