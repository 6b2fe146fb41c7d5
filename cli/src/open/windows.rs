//! The `Windows` plan of `batches` and `bench`, and what every plan shares: the loader
//! configuration of the flags ([`LoaderArgs`]), the token storage opened by kind and dtype
//! ([`open_token_storage`]), and the window records they print or count.

use std::path::Path;
use std::sync::Arc;

use guideloom::formats::{
    DocumentTokensFormat, DocumentTokensWindow, Dtype, FormatError, IntTokenFormat, Primitive, RawWindow,
    StreamFormat, TokenElement, TokenFormat,
};
use guideloom::interop::ForeignDataset;
use guideloom::loader::{Builder, BuilderKind, DataSource, Loader, LoaderBuilder};
use guideloom::storage::{
    LocalDir, Manifest, ReadOptions, StorageDir, StorageKind, StreamReader, StreamWithMetaReader,
};

use crate::cli::{ReadArgs, WindowArgs};
use crate::error::CliResult;
use crate::open::backend::read_options;
use crate::open::print::write_list;

/// The loader configuration of `batches` and `bench`: the shared flags, and what each
/// command decides itself.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LoaderArgs<'a> {
    /// Storage, windows, sampling, workers, backend, rank and world size, elastic resume.
    pub(crate) read: &'a ReadArgs,
    /// Epochs; `None`: unbounded.
    pub(crate) epochs: Option<u64>,
    /// Drop the incomplete final (global) batch of each epoch.
    pub(crate) drop_remainder: bool,
}

impl LoaderArgs<'_> {
    /// The window flags.
    pub(crate) fn window(&self) -> &WindowArgs {
        &self.read.window
    }

    /// The distance between window starts in tokens (default: the window length).
    pub(crate) fn stride(&self) -> u64 {
        self.window().stride.unwrap_or(self.window().seq_len)
    }

    /// The configuration every loader of the flags shares, set on `builder`: seed, shuffle,
    /// epochs, rank and world size, workers, prefetch (on either loader's builder: the setters
    /// of the loader's one [`Builder`]).
    pub(crate) fn apply<K: BuilderKind, U, C>(&self, builder: Builder<K, U, C>) -> Builder<K, U, C> {
        let w = self.window();
        let mut b = builder.seed(w.seed()).shard(self.read.rank, self.read.world_size).workers(w.workers);
        b = match self.epochs {
            Some(e) => b.epochs(e),
            None => b.unbounded(),
        };
        if w.shuffle {
            b = b.shuffle(w.seed());
        }
        if let Some(p) = w.prefetch {
            b = b.prefetch(p);
        }
        b
    }

    /// The loader builder of this configuration over `source`: [`LoaderArgs::apply`], the
    /// final batch, the readahead of a remote storage, and the batch size (per rank, or
    /// `--global-batch` over all ranks).
    pub(crate) fn builder<S>(&self, source: S) -> LoaderBuilder<S>
    where
        S: DataSource + 'static,
        S::Item: 'static,
    {
        let w = self.window();
        let mut b = self.apply(Loader::builder(source)).drop_remainder(self.drop_remainder);
        if crate::open::location::is_remote(&w.dir) {
            b = b.readahead(crate::open::location::REMOTE_READAHEAD);
        }
        match self.read.elastic.global_batch {
            Some(g) => b.global_batch(g),
            None => b.batch_size(w.batch_size),
        }
    }
}

/// What a command does with the token storage [`open_token_storage`] opens: one generic
/// function per storage kind (a closure cannot be generic over the element type).
pub(crate) trait TokenStorageFn {
    /// What the command returns.
    type Output;
    /// A token stream of `E` ids.
    fn stream<E: TokenElement>(self, reader: StreamReader<TokenFormat<E>>) -> CliResult<Self::Output>;
    /// A stream-with-meta storage of `E` ids and their documents.
    fn meta<E: TokenElement>(
        self,
        reader: StreamWithMetaReader<DocumentTokensFormat<E>>,
    ) -> CliResult<Self::Output>;
    /// A dataset in another project's layout, read in place with `options`.
    fn foreign(self, data: &ForeignDataset, options: ReadOptions) -> CliResult<Self::Output>;
}

/// Opens the storage in `w.dir` (a local directory or a storage URL) typed by its kind and
/// dtype (a u16 or u32 token stream, or stream-with-meta) with the reader of `--backend`, or
/// the dataset in another project's layout there, and hands it to `f`.
///
/// # Errors
///
/// The storage cannot be opened, holds another kind or dtype, or holds tokens but fewer than
/// one window of `--seq-len` (an empty storage is not an error: it yields no batch).
pub(crate) fn open_token_storage<F: TokenStorageFn>(w: &WindowArgs, f: F) -> CliResult<F::Output> {
    if let Some(data) = crate::open::foreign::open(&w.dir, &w.foreign)? {
        holds_a_window(&w.dir, data.elements(), w.seq_len)?;
        return f.foreign(&data, read_options(w.backend)?);
    }
    let dir = storage_dir(&w.dir)?;
    let m = Manifest::load_from(dir.as_ref())?;
    let opts = read_options(w.backend)?;
    match (m.kind(), m.dtype()) {
        (StorageKind::Stream, Some(Dtype::Primitive(Primitive::U16))) => {
            open_stream::<u16, F>(w, dir, opts, f)
        }
        (StorageKind::Stream, Some(Dtype::Primitive(Primitive::U32))) => {
            open_stream::<u32, F>(w, dir, opts, f)
        }
        (StorageKind::StreamWithMeta, Some(Dtype::Primitive(Primitive::U16))) => {
            open_meta::<u16, F>(w, dir, opts, f)
        }
        (StorageKind::StreamWithMeta, Some(Dtype::Primitive(Primitive::U32))) => {
            open_meta::<u32, F>(w, dir, opts, f)
        }
        (kind, dtype) => Err(format!(
            "{} holds a {kind} storage of dtype {}; batches and bench read u16 or u32 token streams",
            w.dir.display(),
            dtype.map_or_else(|| "none".to_string(), Dtype::to_string)
        )
        .into()),
    }
}

/// The storage directory of `path`: the store of a URL, or the local directory.
///
/// # Errors
/// An unknown URL scheme, or a store that cannot be opened.
pub(crate) fn storage_dir(path: &Path) -> CliResult<Arc<dyn StorageDir>> {
    Ok(match crate::open::location::remote(path)? {
        Some(dir) => dir,
        None => Arc::new(LocalDir::new(path)),
    })
}

fn open_stream<E: TokenElement, F: TokenStorageFn>(
    w: &WindowArgs,
    dir: Arc<dyn StorageDir>,
    opts: ReadOptions,
    f: F,
) -> CliResult<F::Output> {
    let reader = StreamReader::open_in(dir, TokenFormat::<E>::new(), opts)?;
    holds_a_window(&w.dir, reader.len(), w.seq_len)?;
    f.stream(reader)
}

fn open_meta<E: TokenElement, F: TokenStorageFn>(
    w: &WindowArgs,
    dir: Arc<dyn StorageDir>,
    opts: ReadOptions,
    f: F,
) -> CliResult<F::Output> {
    let reader = StreamWithMetaReader::open_in(dir, DocumentTokensFormat::<E>::new(), opts)?;
    holds_a_window(&w.dir, reader.len(), w.seq_len)?;
    f.meta(reader)
}

/// Fails when a storage of `tokens` tokens (at least one) is shorter than one window of
/// `seq_len`, naming both.
pub(crate) fn holds_a_window(dir: &Path, tokens: u64, seq_len: u64) -> CliResult {
    if tokens > 0 && tokens < seq_len {
        return Err(format!(
            "no batch: the storage {} holds {tokens} tokens, fewer than one window of --seq-len {seq_len}",
            dir.display()
        )
        .into());
    }
    Ok(())
}

/// One window's content as printed: tokens, plus per-token document ordinals for
/// stream-with-meta storages.
pub(crate) trait WindowRecord: Send + 'static {
    /// Appends the token ids as a JSON list.
    fn write_tokens(&self, out: &mut String);
    /// Appends the per-token document ordinals as a JSON list; `false` (nothing written)
    /// where the storage records no documents.
    fn write_documents(&self, out: &mut String) -> bool;
    /// The number of tokens.
    fn token_count(&self) -> u64;
    /// The sum of the token ids (`guideloom bench`'s order-independent checksum).
    fn token_sum(&self) -> u64;
}

impl<E: TokenElement> WindowRecord for Vec<E> {
    fn write_tokens(&self, out: &mut String) {
        write_list(out, self.iter().map(|&t| Into::<u64>::into(t)));
    }
    fn write_documents(&self, _out: &mut String) -> bool {
        false
    }
    fn token_count(&self) -> u64 {
        self.len() as u64
    }
    fn token_sum(&self) -> u64 {
        self.iter().map(|&t| Into::<u64>::into(t)).sum()
    }
}

/// The ids of one window of a foreign dataset, as `i64` ([`ForeignIds`] decodes them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct IdRow(pub(crate) Vec<i64>);

/// [`IntTokenFormat`] with its windows wrapped as [`IdRow`]s (what `batches` prints).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ForeignIds(pub(crate) IntTokenFormat);

impl ForeignIds {
    /// The ids of `data`'s dtype.
    pub(crate) fn of(data: &ForeignDataset) -> CliResult<Self> {
        Ok(ForeignIds(IntTokenFormat::new(data.dtype())?))
    }
}

impl StreamFormat for ForeignIds {
    type Input = [i64];
    type Output = IdRow;
    fn name(&self) -> &str {
        self.0.name()
    }
    fn dtype(&self) -> Dtype {
        self.0.dtype()
    }
    fn pack(&self, record: &[i64], out: &mut Vec<u8>) -> Result<u64, FormatError> {
        self.0.pack(record, out)
    }
    fn unpack(&self, window: &RawWindow<'_>) -> Result<IdRow, FormatError> {
        self.0.unpack(window).map(IdRow)
    }
}

impl WindowRecord for IdRow {
    fn write_tokens(&self, out: &mut String) {
        write_list(out, self.0.iter());
    }
    fn write_documents(&self, _out: &mut String) -> bool {
        false
    }
    fn token_count(&self) -> u64 {
        self.0.len() as u64
    }
    fn token_sum(&self) -> u64 {
        self.0.iter().fold(0u64, |a, &t| a.wrapping_add(t as u64))
    }
}

impl<E: TokenElement> WindowRecord for DocumentTokensWindow<E> {
    fn write_tokens(&self, out: &mut String) {
        write_list(out, self.tokens.iter().map(|&t| Into::<u64>::into(t)));
    }
    fn write_documents(&self, out: &mut String) -> bool {
        write_list(out, self.document.iter());
        true
    }
    fn token_count(&self) -> u64 {
        self.tokens.len() as u64
    }
    fn token_sum(&self) -> u64 {
        self.tokens.token_sum()
    }
}
