//! `guideloom batches --mix DIR=WEIGHT ... --pack ...`: a weighted mixture of token storages
//! and document packing, one JSON object per batch.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use guideloom::formats::{DocumentTokensFormat, Dtype, Primitive, TokenElement, TokenFormat};
use std::time::{Duration, Instant};

use guideloom::loader::mix::{Mix, MixConfig, MixSchedule};
use guideloom::loader::pack::{Overflow, PackConfig, PackStrategy, Packed, PackedRow};
use guideloom::loader::stage::{StageBatch, StagePacked, StagePackedIter, StageState};
use guideloom::loader::{Batch, DataSource, LoaderError, MetaDocuments, MetaWindows, StreamWindows};
use guideloom::storage::{Manifest, StorageKind, StreamReader, StreamWithMetaReader};
use serde_json::{json, Value};

use crate::cli::{BatchesArgs, BenchArgs, MixPackArgs, MixScheduleArg, OverflowArg, PackArg, WindowArgs};
use crate::cmd::backend::read_options;
use crate::cmd::print::StateJson;
use crate::cmd::windows::{holds_a_window, write_list, LoaderArgs};
use crate::CliResult;

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

/// Opens `dir` (a local path or a storage URL): its documents (`documents`, stream-with-meta
/// storages only) or its windows, with its token count.
fn open(dir: &Path, w: &WindowArgs, documents: bool) -> CliResult<(Tokens, u64)> {
    let opts = read_options(w.backend)?;
    let remote = crate::cmd::location::remote(dir)?;
    let m = match &remote {
        Some(d) => Manifest::load_from(d.as_ref())?,
        None => Manifest::load(dir)?,
    };
    let stride = w.stride.unwrap_or(w.seq_len);
    type Remote = Option<Arc<dyn guideloom::storage::StorageDir>>;
    fn meta<E: TokenElement>(
        dir: &Path,
        remote: Remote,
        o: guideloom::storage::ReadOptions,
        docs: bool,
        l: u64,
        s: u64,
    ) -> CliResult<(Tokens, u64)> {
        let f = DocumentTokensFormat::<E>::new();
        let r = match remote {
            Some(d) => StreamWithMetaReader::open_in(d, f, o)?,
            None => StreamWithMetaReader::open_with(dir, f, o)?,
        };
        let tokens = r.len();
        if !docs {
            holds_a_window(dir, tokens, l)?;
        }
        let source: Tokens = if docs {
            Arc::new(convert(MetaDocuments::new(r)?, widen::<E>))
        } else {
            Arc::new(convert(
                MetaWindows::with_stride(r, l, s)?,
                |w: guideloom::formats::DocumentTokensWindow<E>| widen(w.tokens),
            ))
        };
        Ok((source, tokens))
    }
    fn stream<E: TokenElement>(
        dir: &Path,
        remote: Remote,
        o: guideloom::storage::ReadOptions,
        l: u64,
        s: u64,
    ) -> CliResult<(Tokens, u64)> {
        let f = TokenFormat::<E>::new();
        let r = match remote {
            Some(d) => StreamReader::open_in(d, f, o)?,
            None => StreamReader::open_with(dir, f, o)?,
        };
        let tokens = r.len();
        holds_a_window(dir, tokens, l)?;
        Ok((Arc::new(convert(StreamWindows::with_stride(r, l, s)?, widen::<E>)), tokens))
    }
    match (m.kind(), m.dtype(), documents) {
        (StorageKind::StreamWithMeta, Some(Dtype::Primitive(Primitive::U16)), d) => {
            meta::<u16>(dir, remote, opts, d, w.seq_len, stride)
        }
        (StorageKind::StreamWithMeta, Some(Dtype::Primitive(Primitive::U32)), d) => {
            meta::<u32>(dir, remote, opts, d, w.seq_len, stride)
        }
        (StorageKind::Stream, Some(Dtype::Primitive(Primitive::U16)), false) => {
            stream::<u16>(dir, remote, opts, w.seq_len, stride)
        }
        (StorageKind::Stream, Some(Dtype::Primitive(Primitive::U32)), false) => {
            stream::<u32>(dir, remote, opts, w.seq_len, stride)
        }
        (StorageKind::Stream, _, true) => Err(format!(
            "--pack needs document boundaries: {} is a plain token stream; ingest it with --doc-meta",
            dir.display()
        )
        .into()),
        (kind, dtype, _) => Err(format!(
            "{} holds a {kind} storage of dtype {}; batches reads u16 or u32 token storages",
            dir.display(),
            dtype.map_or_else(|| "none".to_string(), Dtype::to_string)
        )
        .into()),
    }
}

/// A record of the mixture or the single storage: its source (when mixed) and tokens.
struct Record {
    source: Option<u32>,
    tokens: Vec<u32>,
}

/// The records of `--mix` (or of the single storage), and whether they are mixed.
fn records(w: &WindowArgs, mp: &MixPackArgs) -> CliResult<(Arc<dyn DataSource<Item = Record>>, bool)> {
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
        let one = sources.into_iter().next().ok_or("no storage")?;
        return Ok((Arc::new(Widen2(one)), false));
    }
    let weights: Vec<f64> = dirs.iter().map(|d| d.1).collect();
    let schedule = match mp.mix_schedule {
        MixScheduleArg::Greedy => MixSchedule::Greedy,
        MixScheduleArg::Proportional => MixSchedule::Proportional,
    };
    let mut cfg = MixConfig::new(&weights)?.schedule(schedule).stop(mp.mix_stop);
    if w.shuffle {
        cfg = cfg.shuffle_sources(w.seed);
    }
    let mix = Mix::new(sources, cfg)?;
    Ok((
        Arc::new(convert(mix, |s: guideloom::loader::mix::Sourced<Vec<u32>>| Record {
            source: Some(s.source),
            tokens: s.item,
        })),
        true,
    ))
}

/// The packing of `--pack` (rows of `--seq-len` tokens), and whether it streams.
fn pack_config(w: &WindowArgs, mp: &MixPackArgs) -> Option<(PackConfig, bool)> {
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

/// Documents as optional token sequences: the records of a stream stage.
type StreamDocs = Arc<dyn DataSource<Item = Option<Vec<u32>>>>;

/// The streaming packer of `--pack stream-*` over `records`, rows per batch as the loader's
/// batch size (records per rank per batch).
fn stream_stage(
    args: &LoaderArgs,
    records: Arc<dyn DataSource<Item = Record>>,
    config: PackConfig,
    pad: u32,
) -> CliResult<StagePacked<StreamDocs, Vec<u32>, u32>> {
    let docs: StreamDocs = Arc::new(convert(AsTokens(records), Some));
    let loader = args.builder(docs).build()?;
    let rows = loader.sampler().config().batch_size;
    Ok(StagePacked::new(loader, config, rows, pad, u32::MAX)?.drop_remainder(args.drop_remainder))
}

/// The source of every record of a mixture (read once, for the `sources` of packed rows).
fn sources_of(records: &Arc<dyn DataSource<Item = Record>>, mixed: bool) -> CliResult<Vec<Option<u32>>> {
    if !mixed {
        return Ok(Vec::new());
    }
    Ok((0..records.len()).map(|i| records.get(i).map(|r| r.source)).collect::<Result<_, _>>()?)
}

impl StateJson for StagePackedIter<StreamDocs, Vec<u32>, u32> {
    fn state_json(&self) -> String {
        self.state().to_json()
    }
}

/// Appends the `[B, L]` fields of packed `rows` to a JSON line (`sources` when mixed).
fn packed_fields(line: &mut String, rows: &[PackedRow<u32>], sources_of: &[Option<u32>]) {
    let grid = |line: &mut String, name: &str, f: &dyn Fn(&PackedRow<u32>) -> Vec<i64>| {
        let _ = write!(line, ",\"{name}\":[");
        for (i, r) in rows.iter().enumerate() {
            if i > 0 {
                line.push(',');
            }
            write_list(line, f(r));
        }
        line.push(']');
    };
    grid(line, "tokens", &|r| r.tokens.iter().map(|&t| i64::from(t)).collect());
    grid(line, "segment_ids", &|r| r.segment_ids.iter().map(|&t| i64::from(t)).collect());
    grid(line, "positions", &|r| r.positions.iter().map(|&t| i64::from(t)).collect());
    grid(line, "targets", &|r| {
        r.targets.iter().map(|&t| if t == u32::MAX { -100 } else { i64::from(t) }).collect()
    });
    if !sources_of.is_empty() {
        grid(line, "sources", &|r| {
            r.pieces
                .iter()
                .map(|p| i64::from(sources_of.get(p.doc as usize).copied().flatten().unwrap_or(0)))
                .collect()
        });
    }
}

/// Runs `batches` with `--mix` and/or `--pack`.
pub(crate) fn batches(a: BatchesArgs) -> CliResult {
    let mp = &a.mix_pack;
    let (records, mixed) = records(&a.window, mp)?;
    let args = LoaderArgs {
        window: a.window.clone(),
        epochs: Some(a.epochs),
        rank: a.rank,
        world_size: a.world_size,
        drop_remainder: a.drop_remainder,
        global_batch: a.elastic.global_batch,
    };
    let Some((config, streaming)) = pack_config(&a.window, mp) else {
        return print(&a, &args, records, |line, rows: &Vec<Record>| {
            line.push_str(",\"tokens\":[");
            for (i, r) in rows.iter().enumerate() {
                if i > 0 {
                    line.push(',');
                }
                write_list(line, &r.tokens);
            }
            line.push(']');
            if mixed {
                line.push_str(",\"sources\":");
                write_list(line, rows.iter().map(|r| r.source.unwrap_or(0)));
            }
        });
    };
    let sources_of = sources_of(&records, mixed)?;
    if streaming {
        let stage = stream_stage(&args, records, config, mp.pad_id)?;
        let mut it = match &a.resume {
            Some(p) => {
                let text = super::state_file::read(p)?;
                let state = StageState::from_json(&text)
                    .map_err(|e| super::context(format!("state file {}", p.display()), e))?;
                stage.iter_from(&state)?
            }
            None => stage.iter(),
        };
        let result = super::print::print_batches(
            &mut it,
            a.max_batches,
            a.save_state.as_deref(),
            |line, batch: &StageBatch<PackedRow<u32>>| {
                let _ = write!(line, "{{\"batch\":{},\"epoch\":{},\"records\":", batch.number, batch.epoch);
                write_list(line, batch.indices.iter());
                if !a.no_tokens {
                    packed_fields(line, &batch.data, &sources_of);
                }
                line.push('}');
            },
            |_| {},
        );
        if it.dropped_tokens() > 0 {
            eprintln!("note: --overflow truncate dropped {} tokens", it.dropped_tokens());
        }
        return result;
    }
    let packed = Packed::scan(AsTokens(records), config, mp.pad_id, u32::MAX)?;
    if packed.plan().dropped_tokens() > 0 {
        eprintln!("note: --overflow truncate dropped {} tokens", packed.plan().dropped_tokens());
    }
    print(&a, &args, Arc::new(packed), move |line, rows: &Vec<PackedRow<u32>>| {
        packed_fields(line, rows, &sources_of);
    })
}

/// Rows (or records), tokens and real (non-padding) tokens of one batch.
type Counts = (u64, u64, u64);

/// Runs `bench --mix ... / --pack ...`: one epoch (or `--seconds`, or `--max-batches`) of the
/// pipeline `batches` runs with the same options, timed from before the storages are opened
/// (so planned packing counts its scan and plan), reported as a line of text or one JSON
/// object with rows/s and the share of padding.
pub(crate) fn bench(a: &BenchArgs, epochs: Option<u64>) -> CliResult {
    let mp = &a.mix_pack;
    if a.resume.is_some() {
        return Err("bench --mix/--pack starts from the first batch (no --resume)".into());
    }
    if let Some(path) = &a.lengths_out {
        let (records, _) = records(&a.window, mp)?;
        let mut text = String::new();
        for i in 0..records.len() {
            let _ = writeln!(text, "{}", records.get(i)?.tokens.len());
        }
        std::fs::write(path, text)
            .map_err(|e| super::context(format!("--lengths-out {}", path.display()), e))?;
    }
    let start = Instant::now();
    let (records, _mixed) = records(&a.window, mp)?;
    let args = LoaderArgs {
        window: a.window.clone(),
        epochs,
        rank: a.rank,
        world_size: a.world_size,
        drop_remainder: false,
        global_batch: a.elastic.global_batch,
    };
    let row_counts = |rows: &[PackedRow<u32>]| {
        let real = rows.iter().map(|r| r.segment_ids.iter().filter(|&&s| s != 0).count() as u64).sum();
        (rows.len() as u64, rows.iter().map(|r| r.tokens.len() as u64).sum(), real)
    };
    let measure = |batches: &mut dyn Iterator<Item = Result<Counts, LoaderError>>| -> CliResult<Value> {
        let (mut n, mut rows, mut tokens, mut real) = (0u64, 0u64, 0u64, 0u64);
        let mut first = None;
        let deadline = a.seconds.map(Duration::from_secs_f64);
        for b in batches {
            let (r, t, x) = b?;
            first.get_or_insert_with(|| start.elapsed().as_secs_f64());
            (n, rows, tokens, real) = (n + 1, rows + r, tokens + t, real + x);
            if a.max_batches.is_some_and(|k| n >= k) || deadline.is_some_and(|d| start.elapsed() >= d) {
                break;
            }
        }
        let seconds = start.elapsed().as_secs_f64();
        Ok(json!({
            "batches": n,
            "rows": rows,
            "tokens": tokens,
            "real_tokens": real,
            "padding_share": if tokens == 0 { 0.0 } else { (tokens - real) as f64 / tokens as f64 },
            "seconds": seconds,
            "rows_per_s": rows as f64 / seconds,
            "tokens_per_s": tokens as f64 / seconds,
            "first_batch_s": first.unwrap_or(seconds),
        }))
    };
    let (report, name) = match pack_config(&a.window, mp) {
        None => {
            let loader = args.builder(records).build()?;
            let mut it = loader.iter().map(|b| {
                b.map(|b| {
                    let t: u64 = b.data.iter().map(|r| r.tokens.len() as u64).sum();
                    (b.data.len() as u64, t, t)
                })
            });
            (measure(&mut it)?, "records".to_string())
        }
        Some((config, true)) => {
            let stage = stream_stage(&args, records, config, mp.pad_id)?;
            let mut it = stage.iter().map(|b| b.map(|b| row_counts(&b.data)));
            (measure(&mut it)?, format!("stream {:?}", config.strategy))
        }
        Some((config, false)) => {
            let packed = Packed::scan(AsTokens(records), config, mp.pad_id, u32::MAX)?;
            let loader = args.builder(packed).build()?;
            let mut it = loader.iter().map(|b| b.map(|b| row_counts(&b.data)));
            (measure(&mut it)?, format!("planned {:?}", config.strategy))
        }
    };
    let mut report = report;
    if let Value::Object(o) = &mut report {
        o.insert("pipeline".into(), json!(name));
        o.insert("sources".into(), json!(mp.mix.len().max(1)));
        o.insert("workers".into(), json!(a.window.workers));
        o.insert("seq_len".into(), json!(a.window.seq_len));
        o.insert("batch_size".into(), json!(a.window.batch_size));
        o.insert("seed".into(), json!(a.window.seed));
    }
    if a.json {
        outln!("{report}");
    } else {
        let f = |k: &str| report[k].as_f64().unwrap_or(0.0);
        outln!(
            "{name}: {} batches, {} rows, {} tokens ({:.2} % padding) in {:.3} s: {:.0} rows/s, {:.1} M tokens/s; first batch after {:.2} ms ({} workers)",
            report["batches"],
            report["rows"],
            report["tokens"],
            f("padding_share") * 100.0,
            f("seconds"),
            f("rows_per_s"),
            f("tokens_per_s") / 1e6,
            f("first_batch_s") * 1e3,
            a.window.workers
        );
    }
    Ok(())
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
struct AsTokens(Arc<dyn DataSource<Item = Record>>);

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

/// Prints the loader's batches over `source` (`--max-batches`, `--save-state`, `--resume` as
/// plain `batches` does); `fields` appends a batch's data fields to its line.
fn print<T: Send + 'static>(
    a: &BatchesArgs,
    args: &LoaderArgs,
    source: Arc<dyn DataSource<Item = T>>,
    fields: impl Fn(&mut String, &Vec<T>),
) -> CliResult {
    let loader = args.builder(source).build()?;
    let mut it = match &a.resume {
        Some(p) => loader.iter_from(&crate::cmd::batches::read_state(p)?)?,
        None => loader.iter(),
    };
    super::print::print_batches(
        &mut it,
        a.max_batches,
        a.save_state.as_deref(),
        |line, batch: &Batch<Vec<T>>| {
            let _ = write!(line, "{{\"batch\":{},\"epoch\":{},\"records\":", batch.number, batch.epoch);
            write_list(line, batch.indices.iter());
            if !a.no_tokens {
                fields(line, &batch.data);
            }
            line.push('}');
        },
        |_| {},
    )
}
