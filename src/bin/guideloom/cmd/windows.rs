//! What `batches` and `bench` share: the token storage opened by kind and dtype, the loader
//! configuration, and the window records they print or count.

use std::fmt::Write as _;
use std::path::Path;

use guideloom::formats::{
    DocumentTokensFormat, DocumentTokensWindow, Dtype, FormatError, IntTokenFormat, Primitive, RawWindow,
    StreamFormat, TokenElement, TokenFormat,
};
use guideloom::interop::ForeignDataset;
use guideloom::loader::{DataSource, LoaderBuilder};
use guideloom::storage::{Manifest, ReadOptions, StorageKind, StreamReader, StreamWithMetaReader};

use crate::cli::WindowArgs;
use crate::cmd::backend::read_options;
use crate::CliResult;

/// The loader configuration of `batches` and `bench`.
#[derive(Debug, Clone)]
pub(crate) struct LoaderArgs {
    /// Storage, windows, sampling, workers and backend.
    pub(crate) window: WindowArgs,
    /// Epochs; `None`: unbounded.
    pub(crate) epochs: Option<u64>,
    /// This process's data-parallel rank.
    pub(crate) rank: u64,
    /// Number of data-parallel ranks.
    pub(crate) world_size: u64,
    /// Drop the incomplete final (global) batch of each epoch.
    pub(crate) drop_remainder: bool,
    /// Windows per global step over all ranks (`--global-batch`): the batch size per rank
    /// becomes `G / world_size` instead of `--batch-size`.
    pub(crate) global_batch: Option<u64>,
}

impl LoaderArgs {
    /// The distance between window starts in tokens (default: the window length).
    pub(crate) fn stride(&self) -> u64 {
        self.window.stride.unwrap_or(self.window.seq_len)
    }

    /// The loader builder of this configuration over `source`.
    pub(crate) fn builder<S>(&self, source: S) -> LoaderBuilder<S>
    where
        S: DataSource + 'static,
        S::Item: 'static,
    {
        let w = &self.window;
        let mut b = guideloom::loader::Loader::builder(source)
            .seed(w.seed)
            .drop_remainder(self.drop_remainder)
            .shard(self.rank, self.world_size)
            .workers(w.workers);
        b = match self.epochs {
            Some(e) => b.epochs(e),
            None => b.unbounded(),
        };
        if w.shuffle {
            b = b.shuffle(w.seed);
        }
        if let Some(p) = w.prefetch {
            b = b.prefetch(p);
        }
        if crate::cmd::location::is_remote(&w.dir) {
            b = b.readahead(crate::cmd::location::REMOTE_READAHEAD);
        }
        match self.global_batch {
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

/// Opens the storage in `w.dir` typed by its kind and dtype (a u16 or u32 token stream, or
/// stream-with-meta) with the reader of `--backend`, and hands it to `f`.
///
/// # Errors
///
/// The storage cannot be opened, holds another kind or dtype, or holds tokens but fewer than
/// one window of `--seq-len` (an empty storage is not an error: it yields no batch).
pub(crate) fn open_token_storage<F: TokenStorageFn>(w: &WindowArgs, f: F) -> CliResult<F::Output> {
    if let Some(data) = crate::cmd::foreign::open(&w.dir, &w.foreign)? {
        holds_a_window(&w.dir, data.elements(), w.seq_len)?;
        return f.foreign(&data, read_options(w.backend)?);
    }
    if let Some(dir) = crate::cmd::location::remote(&w.dir)? {
        return open_remote(w, dir, f);
    }
    let m = Manifest::load(&w.dir)?;
    let opts = read_options(w.backend)?;
    match (m.kind(), m.dtype()) {
        (StorageKind::Stream, Some(Dtype::Primitive(Primitive::U16))) => open_stream::<u16, F>(w, opts, f),
        (StorageKind::Stream, Some(Dtype::Primitive(Primitive::U32))) => open_stream::<u32, F>(w, opts, f),
        (StorageKind::StreamWithMeta, Some(Dtype::Primitive(Primitive::U16))) => {
            open_meta::<u16, F>(w, opts, f)
        }
        (StorageKind::StreamWithMeta, Some(Dtype::Primitive(Primitive::U32))) => {
            open_meta::<u32, F>(w, opts, f)
        }
        (kind, dtype) => Err(format!(
            "{} holds a {kind} storage of dtype {}; batches and bench read u16 or u32 token streams",
            w.dir.display(),
            dtype.map_or_else(|| "none".to_string(), Dtype::to_string)
        )
        .into()),
    }
}

/// [`open_token_storage`] over a remote storage directory.
fn open_remote<F: TokenStorageFn>(
    w: &WindowArgs,
    dir: std::sync::Arc<dyn guideloom::storage::StorageDir>,
    f: F,
) -> CliResult<F::Output> {
    let m = Manifest::load_from(dir.as_ref())?;
    let opts = read_options(w.backend)?;
    match (m.kind(), m.dtype()) {
        (StorageKind::Stream, Some(Dtype::Primitive(Primitive::U16))) => {
            let r = StreamReader::open_in(dir, TokenFormat::<u16>::new(), opts)?;
            holds_a_window(&w.dir, r.len(), w.seq_len)?;
            f.stream(r)
        }
        (StorageKind::Stream, Some(Dtype::Primitive(Primitive::U32))) => {
            let r = StreamReader::open_in(dir, TokenFormat::<u32>::new(), opts)?;
            holds_a_window(&w.dir, r.len(), w.seq_len)?;
            f.stream(r)
        }
        (StorageKind::StreamWithMeta, Some(Dtype::Primitive(Primitive::U16))) => {
            let r = StreamWithMetaReader::open_in(dir, DocumentTokensFormat::<u16>::new(), opts)?;
            holds_a_window(&w.dir, r.len(), w.seq_len)?;
            f.meta(r)
        }
        (StorageKind::StreamWithMeta, Some(Dtype::Primitive(Primitive::U32))) => {
            let r = StreamWithMetaReader::open_in(dir, DocumentTokensFormat::<u32>::new(), opts)?;
            holds_a_window(&w.dir, r.len(), w.seq_len)?;
            f.meta(r)
        }
        (kind, dtype) => Err(format!(
            "{} holds a {kind} storage of dtype {}; batches and bench read u16 or u32 token streams",
            w.dir.display(),
            dtype.map_or_else(|| "none".to_string(), Dtype::to_string)
        )
        .into()),
    }
}

fn open_stream<E: TokenElement, F: TokenStorageFn>(
    w: &WindowArgs,
    opts: ReadOptions,
    f: F,
) -> CliResult<F::Output> {
    let reader = StreamReader::open_with(&w.dir, TokenFormat::<E>::new(), opts)?;
    holds_a_window(&w.dir, reader.len(), w.seq_len)?;
    f.stream(reader)
}

fn open_meta<E: TokenElement, F: TokenStorageFn>(
    w: &WindowArgs,
    opts: ReadOptions,
    f: F,
) -> CliResult<F::Output> {
    let reader = StreamWithMetaReader::open_with(&w.dir, DocumentTokensFormat::<E>::new(), opts)?;
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

/// Appends `items` as a JSON list of their `Display` forms (numbers, booleans).
pub(crate) fn write_list<T: std::fmt::Display>(out: &mut String, items: impl IntoIterator<Item = T>) {
    out.push('[');
    for (i, t) in items.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{t}");
    }
    out.push(']');
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
