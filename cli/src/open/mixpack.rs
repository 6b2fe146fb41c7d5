//! The `MixPack` plan of `batches` and `bench` (`--mix DIR=WEIGHT ...`, `--pack ...`): the
//! records of a weighted mixture of token storages (or of one storage), and the packing of
//! their documents into rows, planned or streaming.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use guideloom::formats::{
    DocumentTokensFormat, DocumentTokensWindow, Dtype, Primitive, TokenElement, TokenFormat,
};
use guideloom::loader::mix::{Mix, MixConfig, MixPlan, MixSchedule, Sourced};
use guideloom::loader::pack::{Overflow, PackConfig, PackStrategy, Packed, PackedRow};
use guideloom::loader::stage::{StagePacked, StagePackedIter};
use guideloom::loader::{DataSource, LoaderError, MetaDocuments, MetaWindows, StreamWindows};
use guideloom::storage::{
    Manifest, ReadOptions, StorageDir, StorageKind, StreamReader, StreamWithMetaReader,
};

use crate::cli::{MixPackArgs, MixScheduleArg, MixUnitArg, OverflowArg, PackArg, WindowArgs};
use crate::error::CliResult;
use crate::open::backend::read_options;
use crate::open::print::StateJson;
use crate::open::windows::{holds_a_window, storage_dir, LoaderArgs};

/// Token sequences of one storage, widened to u32 (windows, or documents when packing).
type Tokens = Arc<dyn DataSource<Item = Vec<u32>>>;

/// A source whose records are converted by a function (token sequences widened to u32).
struct Convert<S, F, O>(S, F, std::marker::PhantomData<fn() -> O>);

/// `s` with its records converted by `f`.
fn convert<S, F, O>(s: S, f: F) -> Convert<S, F, O> {
    Convert(s, f, std::marker::PhantomData)
}

impl<S, F, O> DataSource for Convert<S, F, O>
where
    S: DataSource,
    F: Fn(S::Item) -> O + Send + Sync,
    O: Send,
{
    type Item = O;
    fn len(&self) -> u64 {
        self.0.len()
    }
    fn get(&self, index: u64) -> Result<O, LoaderError> {
        self.0.get(index).map(&self.1)
    }
    fn get_many(&self, indices: &[u64]) -> Result<Vec<O>, LoaderError> {
        Ok(self.0.get_many(indices)?.into_iter().map(&self.1).collect())
    }
    fn fingerprint(&self) -> u64 {
        self.0.fingerprint()
    }
}

fn widen<E: TokenElement>(v: Vec<E>) -> Vec<u32> {
    v.into_iter().map(|t| Into::<u64>::into(t) as u32).collect()
}

/// Opens `path` (a local path or a storage URL): its documents (`documents`, stream-with-meta
/// storages only) or its windows, with its token count.
fn open(path: &Path, w: &WindowArgs, documents: bool) -> CliResult<(Tokens, u64)> {
    let opts = read_options(w.backend)?;
    let dir = storage_dir(path)?;
    let m = Manifest::load_from(dir.as_ref())?;
    let shape = (w.seq_len, w.stride.unwrap_or(w.seq_len));
    match (m.kind(), m.dtype(), documents) {
        (StorageKind::StreamWithMeta, Some(Dtype::Primitive(Primitive::U16)), d) => {
            open_meta::<u16>(path, dir, opts, d, shape)
        }
        (StorageKind::StreamWithMeta, Some(Dtype::Primitive(Primitive::U32)), d) => {
            open_meta::<u32>(path, dir, opts, d, shape)
        }
        (StorageKind::Stream, Some(Dtype::Primitive(Primitive::U16)), false) => {
            open_stream::<u16>(path, dir, opts, shape)
        }
        (StorageKind::Stream, Some(Dtype::Primitive(Primitive::U32)), false) => {
            open_stream::<u32>(path, dir, opts, shape)
        }
        (StorageKind::Stream, _, true) => Err(format!(
            "--pack needs document boundaries: {} is a plain token stream; ingest it with --doc-meta",
            path.display()
        )
        .into()),
        (kind, dtype, _) => Err(format!(
            "{} holds a {kind} storage of dtype {}; batches reads u16 or u32 token storages",
            path.display(),
            dtype.map_or_else(|| "none".to_string(), Dtype::to_string)
        )
        .into()),
    }
}

/// [`open`] of a stream-with-meta storage of `E` ids: its documents (`docs`) or its windows
/// of `(seq_len, stride)`.
fn open_meta<E: TokenElement>(
    path: &Path,
    dir: Arc<dyn StorageDir>,
    opts: ReadOptions,
    docs: bool,
    (seq_len, stride): (u64, u64),
) -> CliResult<(Tokens, u64)> {
    let r = StreamWithMetaReader::open_in(dir, DocumentTokensFormat::<E>::new(), opts)?;
    let tokens = r.len();
    if docs {
        return Ok((Arc::new(convert(MetaDocuments::new(r)?, widen::<E>)), tokens));
    }
    holds_a_window(path, tokens, seq_len)?;
    let windows = MetaWindows::with_stride(r, seq_len, stride)?;
    Ok((Arc::new(convert(windows, |w: DocumentTokensWindow<E>| widen(w.tokens))), tokens))
}

/// [`open`] of a token stream of `E` ids: its windows of `(seq_len, stride)`.
fn open_stream<E: TokenElement>(
    path: &Path,
    dir: Arc<dyn StorageDir>,
    opts: ReadOptions,
    (seq_len, stride): (u64, u64),
) -> CliResult<(Tokens, u64)> {
    let r = StreamReader::open_in(dir, TokenFormat::<E>::new(), opts)?;
    let tokens = r.len();
    holds_a_window(path, tokens, seq_len)?;
    Ok((Arc::new(convert(StreamWindows::with_stride(r, seq_len, stride)?, widen::<E>)), tokens))
}

/// A record of the mixture or the single storage: its source (when mixed) and tokens.
pub(crate) struct Record {
    /// The index of its storage in `--mix` (`None`: one storage, not mixed).
    pub(crate) source: Option<u32>,
    /// Its token ids.
    pub(crate) tokens: Vec<u32>,
}

/// The records of `--mix` or of the single storage.
pub(crate) type Records = Arc<dyn DataSource<Item = Record>>;

/// The storages of `--mix` (or the single storage) opened: their records and, when mixed,
/// the mixture's configuration.
struct Opened {
    sources: Vec<Tokens>,
    mix: Option<MixConfig>,
}

/// Opens the storages of `--mix` (or the single storage), and the mixture's configuration
/// when mixed (`--mix-unit tokens`: [`MixConfig::by_tokens`]).
fn open_all(w: &WindowArgs, mp: &MixPackArgs) -> CliResult<Opened> {
    let documents = mp.pack.is_some();
    let mixed = !mp.mix.is_empty();
    if mixed && w.dir != Path::new("-") {
        return Err("with --mix, name every storage as --mix DIR=WEIGHT (no positional DIR)".into());
    }
    let dirs: Vec<(PathBuf, f64)> = if mixed { mp.mix.clone() } else { vec![(w.dir.clone(), 1.0)] };
    let (sources, tokens): (Vec<_>, Vec<u64>) =
        dirs.iter().map(|(d, _)| open(d, w, documents)).collect::<CliResult<Vec<_>>>()?.into_iter().unzip();
    // A row longer than every token of the storages packs nothing useful and would allocate
    // `--seq-len` tokens per row (README: a --seq-len longer than the data is an error).
    let total = tokens.iter().fold(0u64, |a, &t| a.saturating_add(t));
    if documents && total > 0 && total < w.seq_len {
        let named = if mixed { "the --mix storages hold" } else { "the storage holds" };
        return Err(format!(
            "no batch: {named} {total} tokens, fewer than one row of --seq-len {}",
            w.seq_len
        )
        .into());
    }
    if !mixed {
        return Ok(Opened { sources, mix: None });
    }
    let weights: Vec<f64> = dirs.iter().map(|d| d.1).collect();
    let schedule = match mp.mix_schedule {
        MixScheduleArg::Greedy => MixSchedule::Greedy,
        MixScheduleArg::Proportional => MixSchedule::Proportional,
    };
    let mut cfg = match mp.mix_unit {
        MixUnitArg::Records => MixConfig::new(&weights)?,
        MixUnitArg::Tokens => {
            let records: Vec<u64> = sources.iter().map(|s| s.len()).collect();
            // A window holds --seq-len tokens; a document its own.
            let tokens: Vec<u64> = if documents {
                tokens
            } else {
                records.iter().map(|&n| n.saturating_mul(w.seq_len)).collect()
            };
            MixConfig::by_tokens(&weights, &records, &tokens)?
        }
    };
    cfg = cfg.schedule(schedule).stop(mp.mix_stop);
    if w.shuffle {
        cfg = cfg.shuffle_sources(w.seed());
    }
    Ok(Opened { sources, mix: Some(cfg) })
}

/// The records of `--mix` (or of the single storage), and, when mixed, the mixture's plan
/// (the source and record of every position).
pub(crate) fn records(w: &WindowArgs, mp: &MixPackArgs) -> CliResult<(Records, Option<MixPlan>)> {
    let Opened { sources, mix } = open_all(w, mp)?;
    let Some(cfg) = mix else {
        let one = sources.into_iter().next().ok_or("no storage")?;
        return Ok((Arc::new(Widen2(one)), None));
    };
    let mix = Mix::new(sources, cfg)?;
    let plan = mix.plan().clone();
    Ok((
        Arc::new(convert(mix, |s: Sourced<Vec<u32>>| Record { source: Some(s.source), tokens: s.item })),
        Some(plan),
    ))
}

/// The packing of `--pack` (rows of `--seq-len` tokens), and whether it streams.
pub(crate) fn pack_config(w: &WindowArgs, mp: &MixPackArgs) -> Option<(PackConfig, bool)> {
    let (strategy, streaming) = match mp.pack? {
        PackArg::ConcatSplit => (PackStrategy::ConcatSplit, false),
        PackArg::FirstFit => (PackStrategy::FirstFit { bins: mp.bins }, false),
        PackArg::BestFit => (PackStrategy::BestFit { bins: mp.bins }, false),
        PackArg::PlannedBfd => (PackStrategy::BestFitDecreasing, false),
        PackArg::StreamConcatSplit => (PackStrategy::ConcatSplit, true),
        PackArg::StreamFirstFit => (PackStrategy::FirstFit { bins: mp.bins }, true),
        PackArg::StreamBestFit => (PackStrategy::BestFit { bins: mp.bins }, true),
    };
    let overflow = match mp.overflow {
        OverflowArg::Error => Overflow::Error,
        OverflowArg::Truncate => Overflow::Truncate,
        OverflowArg::Split => Overflow::Split,
    };
    Some((PackConfig::new(w.seq_len, strategy).overflow(overflow), streaming))
}

/// Documents as optional token sequences: the records of a stage.
pub(crate) type StreamDocs = Arc<dyn DataSource<Item = Option<Vec<u32>>>>;

/// The streaming packer of `--pack stream-*`.
pub(crate) type Stage = StagePacked<StreamDocs, Vec<u32>, u32>;

/// The streaming packer of `--pack stream-*` over `records`, rows per batch as the loader's
/// batch size (records per rank per batch).
pub(crate) fn stream_stage(
    args: &LoaderArgs<'_>,
    records: Records,
    config: PackConfig,
    pad: u32,
) -> CliResult<Stage> {
    let docs: StreamDocs = Arc::new(convert(AsTokens(records), Some));
    let loader = args.builder(docs).build()?;
    let rows = loader.sampler().config().batch_size;
    Ok(StagePacked::new(loader, config, rows, pad, u32::MAX)?.drop_remainder(args.drop_remainder))
}

/// Packed rows of the planned packing of `--pack` (not streaming).
pub(crate) type Rows = Arc<dyn DataSource<Item = PackedRow<u32>>>;

/// The planned packing of `--pack` (not streaming) of `--mix` or the single storage, scanned
/// and planned before the first batch, through the library's one call ([`Mix::pack`]: rows
/// carry the source of each piece), and the tokens `--overflow truncate` dropped.
pub(crate) fn planned(w: &WindowArgs, mp: &MixPackArgs, config: PackConfig) -> CliResult<(Rows, u64)> {
    let Opened { sources, mix } = open_all(w, mp)?;
    Ok(match mix {
        Some(cfg) => {
            let mix = Mix::new(sources, cfg)?;
            let plan = mix.plan().clone();
            let packed = mix.pack(config, mp.pad_id, u32::MAX).map_err(|e| {
                too_long(e, w, mp, |i| plan.locate(i).map_or((0, i), |s| (s.source as usize, s.record)))
            })?;
            let dropped = packed.plan().dropped_tokens();
            (Arc::new(packed), dropped)
        }
        None => {
            let one = sources.into_iter().next().ok_or("no storage")?;
            let packed =
                Packed::scan(one, config, mp.pad_id, u32::MAX).map_err(|e| too_long(e, w, mp, |i| (0, i)))?;
            let dropped = packed.plan().dropped_tokens();
            (Arc::new(packed), dropped)
        }
    })
}

/// `e`, or for a document longer than a row ([`LoaderError::DocumentTooLong`] at position `i`
/// of the packed records, which `locate` turns into (storage, document)), an error naming the
/// storage, the document and the flags that accept it.
pub(crate) fn too_long(
    e: LoaderError,
    w: &WindowArgs,
    mp: &MixPackArgs,
    locate: impl Fn(u64) -> (usize, u64),
) -> Box<dyn std::error::Error + Send + Sync> {
    let LoaderError::DocumentTooLong { index, len, seq_len } = e else { return e.into() };
    let (source, document) = locate(index);
    let storage =
        mp.mix.get(source).map_or_else(|| w.dir.display().to_string(), |(d, _)| d.display().to_string());
    format!(
        "--pack: document {document} of {storage} has {len} tokens, more than a row of --seq-len {seq_len}; \
         pass --overflow truncate (keep its first {seq_len} tokens) or --overflow split (cut it into \
         rows of {seq_len}), or a larger --seq-len"
    )
    .into()
}

impl StateJson for StagePackedIter<StreamDocs, Vec<u32>, u32> {
    fn state_json(&self) -> String {
        self.state().to_json()
    }
}

/// The single storage's records as [`Record`]s.
struct Widen2(Tokens);

impl DataSource for Widen2 {
    type Item = Record;
    fn len(&self) -> u64 {
        self.0.len()
    }
    fn get(&self, index: u64) -> Result<Record, LoaderError> {
        Ok(Record { source: None, tokens: self.0.get(index)? })
    }
    fn get_many(&self, indices: &[u64]) -> Result<Vec<Record>, LoaderError> {
        Ok(self.0.get_many(indices)?.into_iter().map(|tokens| Record { source: None, tokens }).collect())
    }
    fn fingerprint(&self) -> u64 {
        self.0.fingerprint()
    }
}

/// [`Record`]s as token sequences for [`Packed`].
pub(crate) struct AsTokens(Records);

impl DataSource for AsTokens {
    type Item = Vec<u32>;
    fn len(&self) -> u64 {
        self.0.len()
    }
    fn get(&self, index: u64) -> Result<Vec<u32>, LoaderError> {
        Ok(self.0.get(index)?.tokens)
    }
    fn get_many(&self, indices: &[u64]) -> Result<Vec<Vec<u32>>, LoaderError> {
        Ok(self.0.get_many(indices)?.into_iter().map(|r| r.tokens).collect())
    }
    fn fingerprint(&self) -> u64 {
        self.0.fingerprint()
    }
}
