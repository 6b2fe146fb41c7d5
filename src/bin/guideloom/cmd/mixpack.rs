//! `guideloom batches --mix DIR=WEIGHT ... --pack ...`: a weighted mixture of token storages
//! and document packing, one JSON object per batch.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use guideloom::formats::{DocumentTokensFormat, Dtype, Primitive, TokenElement, TokenFormat};
use guideloom::loader::{
    Batch, DataSource, LoaderError, MetaDocuments, MetaWindows, Mix, MixConfig, MixSchedule, Overflow,
    PackConfig, PackStrategy, Packed, PackedRow, StreamWindows,
};
use guideloom::storage::{Manifest, StorageKind, StreamReader, StreamWithMetaReader};

use crate::cli::{BatchesArgs, MixScheduleArg, OverflowArg, PackArg};
use crate::cmd::backend::read_options;
use crate::cmd::windows::{write_list, LoaderArgs};
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

/// Opens `dir`: its documents (`documents`, stream-with-meta storages only) or its windows.
fn open(dir: &Path, a: &BatchesArgs, documents: bool) -> CliResult<Tokens> {
    let w = &a.window;
    let opts = read_options(w.backend)?;
    let m = Manifest::load(dir)?;
    let stride = w.stride.unwrap_or(w.seq_len);
    fn meta<E: TokenElement>(
        dir: &Path,
        o: guideloom::storage::ReadOptions,
        docs: bool,
        l: u64,
        s: u64,
    ) -> CliResult<Tokens> {
        let r = StreamWithMetaReader::open_with(dir, DocumentTokensFormat::<E>::new(), o)?;
        Ok(if docs {
            Arc::new(convert(MetaDocuments::new(r)?, widen::<E>))
        } else {
            Arc::new(convert(
                MetaWindows::with_stride(r, l, s)?,
                |w: guideloom::formats::DocumentTokensWindow<E>| widen(w.tokens),
            ))
        })
    }
    fn stream<E: TokenElement>(
        dir: &Path,
        o: guideloom::storage::ReadOptions,
        l: u64,
        s: u64,
    ) -> CliResult<Tokens> {
        let r = StreamReader::open_with(dir, TokenFormat::<E>::new(), o)?;
        Ok(Arc::new(convert(StreamWindows::with_stride(r, l, s)?, widen::<E>)))
    }
    match (m.kind(), m.dtype(), documents) {
        (StorageKind::StreamWithMeta, Some(Dtype::Primitive(Primitive::U16)), d) => {
            meta::<u16>(dir, opts, d, w.seq_len, stride)
        }
        (StorageKind::StreamWithMeta, Some(Dtype::Primitive(Primitive::U32)), d) => {
            meta::<u32>(dir, opts, d, w.seq_len, stride)
        }
        (StorageKind::Stream, Some(Dtype::Primitive(Primitive::U16)), false) => {
            stream::<u16>(dir, opts, w.seq_len, stride)
        }
        (StorageKind::Stream, Some(Dtype::Primitive(Primitive::U32)), false) => {
            stream::<u32>(dir, opts, w.seq_len, stride)
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

/// Runs `batches` with `--mix` and/or `--pack`.
pub(crate) fn batches(a: BatchesArgs) -> CliResult {
    let mp = &a.mix_pack;
    let documents = mp.pack.is_some();
    let mixed = !mp.mix.is_empty();
    if mixed && a.window.dir != Path::new("-") {
        return Err("with --mix, name every storage as --mix DIR=WEIGHT (no positional DIR)".into());
    }
    let dirs: Vec<(PathBuf, f64)> = if mixed { mp.mix.clone() } else { vec![(a.window.dir.clone(), 1.0)] };
    let sources = dirs.iter().map(|(d, _)| open(d, &a, documents)).collect::<CliResult<Vec<_>>>()?;
    let args = LoaderArgs {
        window: a.window.clone(),
        epochs: Some(a.epochs),
        rank: a.rank,
        world_size: a.world_size,
        drop_remainder: a.drop_remainder,
        global_batch: a.elastic.global_batch,
    };
    let records: Arc<dyn DataSource<Item = Record>> = if mixed {
        let weights: Vec<f64> = dirs.iter().map(|d| d.1).collect();
        let schedule = match mp.mix_schedule {
            MixScheduleArg::Greedy => MixSchedule::Greedy,
            MixScheduleArg::Proportional => MixSchedule::Proportional,
        };
        let mut cfg = MixConfig::new(&weights)?.schedule(schedule).stop(mp.mix_stop);
        if a.window.shuffle {
            cfg = cfg.shuffle_sources(a.window.seed);
        }
        let mix = Mix::new(sources, cfg)?;
        Arc::new(convert(mix, |s: guideloom::loader::Sourced<Vec<u32>>| Record {
            source: Some(s.source),
            tokens: s.item,
        }))
    } else {
        let one = sources.into_iter().next().ok_or("no storage")?;
        Arc::new(Widen2(one))
    };
    let Some(pack) = mp.pack else {
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
    let strategy = match pack {
        PackArg::ConcatSplit => PackStrategy::ConcatSplit,
        PackArg::FirstFit => PackStrategy::FirstFit { bins: mp.bins },
        PackArg::BestFit => PackStrategy::BestFit { bins: mp.bins },
        PackArg::PlannedBfd => PackStrategy::BestFitDecreasing,
    };
    let overflow = match mp.overflow {
        OverflowArg::Error => Overflow::Error,
        OverflowArg::Truncate => Overflow::Truncate,
        OverflowArg::Split => Overflow::Split,
    };
    let config = PackConfig::new(a.window.seq_len, strategy).overflow(overflow);
    let sources_of: Vec<Option<u32>> =
        (0..records.len()).map(|i| records.get(i).map(|r| r.source)).collect::<Result<_, _>>()?;
    let packed = Packed::scan(AsTokens(records), config, mp.pad_id, u32::MAX)?;
    if packed.plan().dropped_tokens() > 0 {
        eprintln!("note: --overflow truncate dropped {} tokens", packed.plan().dropped_tokens());
    }
    print(&a, &args, Arc::new(packed), move |line, rows: &Vec<PackedRow<u32>>| {
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
        if mixed {
            grid(line, "sources", &|r| {
                r.pieces.iter().map(|p| i64::from(sources_of[p.doc as usize].unwrap_or(0))).collect()
            });
        }
    })
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
