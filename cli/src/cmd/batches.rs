//! `guideloom batches`: the batches a loader configuration yields, one JSON object per line,
//! for each [`Plan`]: windows of a storage, files read in order, a mixture or packing, or
//! another trainer's order.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

use guideloom::formats::{DocumentTokensFormat, TokenElement, TokenFormat};
use guideloom::interop::ForeignDataset;
use guideloom::loader::pack::PackedRow;
use guideloom::loader::sequential::{Dropped, SequentialBatch};
use guideloom::loader::stage::{StageBatch, StageState};
use guideloom::loader::{
    Batch, DataSource, Loader, LoaderError, MetaWindows, ResumeOptions, State, StreamWindows,
};
use guideloom::storage::{ReadOptions, StreamReader, StreamWithMetaReader};

use crate::cli::{BatchesArgs, OrderKind, Plan};
use crate::error::CliResult;
use crate::open::foreign::{resume_mismatch, resume_state};
use crate::open::mixpack::{self, Record};
use crate::open::order;
use crate::open::print::{print_batches, write_list, write_rows};
use crate::open::sequential::{FilesIter, Sequential};
use crate::open::state_file::read_state;
use crate::open::windows::{open_token_storage, ForeignIds, LoaderArgs, TokenStorageFn, WindowRecord};

/// Runs `guideloom batches`: prints the batches on stdout; with `--save-state` writes the
/// state after the last batch that reached stdout.
pub(crate) fn run(a: BatchesArgs) -> CliResult {
    crate::open::location::local_files(
        [
            ("--save-state", a.save_state.as_deref()),
            ("--resume", a.resume.as_deref()),
            ("--llmc-state", a.order.llmc_state.as_deref()),
        ]
        .into_iter()
        .chain(a.read.sequential.resume_ranks.iter().map(|p| ("--resume-ranks", Some(p.as_path())))),
    )?;
    let args = LoaderArgs { read: &a.read, epochs: Some(a.epochs), drop_remainder: a.drop_remainder };
    match a.plan() {
        Plan::Windows => windows(&a, args),
        Plan::Sequential => sequential(&a, args),
        Plan::MixPack => mix_pack(&a, args),
        Plan::Order(OrderKind::Megatron) => megatron(&a),
        Plan::Order(OrderKind::Llmc) => llmc(&a),
    }
}

// --- Windows -------------------------------------------------------------------------------

/// `batches` over the windows of one storage or foreign dataset.
fn windows(a: &BatchesArgs, args: LoaderArgs<'_>) -> CliResult {
    let b = Windows {
        args,
        max_batches: a.max_batches,
        save_state: a.save_state.clone(),
        resume: a.resume.clone(),
        no_tokens: a.no_tokens,
        round_down: a.read.elastic.round_down,
    };
    open_token_storage(&a.read.window, &b)
}

/// `batches` over windows, with its parsed options.
struct Windows<'a> {
    args: LoaderArgs<'a>,
    max_batches: Option<u64>,
    save_state: Option<PathBuf>,
    resume: Option<PathBuf>,
    no_tokens: bool,
    /// `--round-down`: a state of another global batch resumes at the start of its step.
    round_down: bool,
}

impl TokenStorageFn for &Windows<'_> {
    type Output = ();
    fn stream<E: TokenElement>(self, reader: StreamReader<TokenFormat<E>>) -> CliResult {
        let w = self.args.window();
        self.print(StreamWindows::with_stride(reader, w.seq_len, self.args.stride())?, None)
    }
    fn meta<E: TokenElement>(self, reader: StreamWithMetaReader<DocumentTokensFormat<E>>) -> CliResult {
        let w = self.args.window();
        self.print(MetaWindows::with_stride(reader, w.seq_len, self.args.stride())?, None)
    }
    fn foreign(self, data: &ForeignDataset, options: ReadOptions) -> CliResult {
        let w = self.args.window();
        let reader = data.reader(ForeignIds::of(data)?, options.clone())?;
        // A state saved before issue 18 holds the fingerprint of the same windows over the
        // dataset fingerprinted with its path.
        let legacy = || -> CliResult<u64> {
            let reader = data.with_legacy_fingerprint().reader(ForeignIds::of(data)?, options.clone())?;
            Ok(StreamWindows::with_stride(reader, w.seq_len, self.args.stride())?.fingerprint())
        };
        self.print(StreamWindows::with_stride(reader, w.seq_len, self.args.stride())?, Some(&legacy))
    }
}

impl Windows<'_> {
    /// Prints the batches of the loader over `source`; `legacy`, for a foreign dataset, the
    /// fingerprint a state saved before issue 18 holds for it
    /// ([`crate::open::foreign::adopt_legacy_fingerprint`]).
    fn print<S>(&self, source: S, legacy: Option<&dyn Fn() -> CliResult<u64>>) -> CliResult
    where
        S: DataSource + 'static,
        S::Item: WindowRecord,
    {
        let loader = self.args.builder(source).build()?;
        if loader.is_empty() {
            let w = self.args.window();
            eprintln!(
                "note: no batch: {} holds {} windows of {} tokens (batch size {}, world size {})",
                w.dir.display(),
                DataSource::len(loader.source()),
                w.seq_len,
                w.batch_size,
                self.args.read.world_size
            );
        }
        let options = if self.round_down { ResumeOptions::round_down() } else { ResumeOptions::default() };
        let what = if legacy.is_some() {
            format!(
                "the dataset {} read in place (another project's layout)",
                self.args.window().dir.display()
            )
        } else {
            format!("the guideloom storage {}", self.args.window().dir.display())
        };
        let mut it = match (&self.resume, legacy) {
            (Some(p), Some(legacy)) => {
                let state = resume_state(p, loader.source().fingerprint(), legacy)?;
                loader
                    .iter_from_with(&state, options)
                    .map_err(|e| resume_mismatch(e, p, &what, &state, &loader))?
            }
            (Some(p), None) => {
                let state = read_state(p)?;
                loader
                    .iter_from_with(&state, options)
                    .map_err(|e| resume_mismatch(e, p, &what, &state, &loader))?
            }
            (None, _) => loader.iter(),
        };
        print_batches(
            &mut it,
            self.max_batches,
            self.save_state.as_deref(),
            |line, batch| self.write_line(line, batch),
            |_| {},
        )
    }

    /// One batch as a JSON object: `{"batch", "epoch", "windows", "tokens"?, "padding"?,
    /// "documents"?}`.
    fn write_line<R: WindowRecord>(&self, line: &mut String, batch: &Batch<Vec<R>>) {
        let _ = write!(line, "{{\"batch\":{},\"epoch\":{},\"windows\":", batch.number, batch.epoch);
        write_list(line, batch.indices.iter());
        if !self.no_tokens {
            line.push_str(",\"tokens\":[");
            for (i, r) in batch.data.iter().enumerate() {
                if i > 0 {
                    line.push(',');
                }
                r.write_tokens(line);
            }
            line.push(']');
        }
        if batch.padding.iter().any(|&p| p) {
            line.push_str(",\"padding\":");
            write_list(line, batch.padding.iter());
        }
        if batch.repeat.iter().any(|&r| r) {
            line.push_str(",\"repeat\":");
            write_list(line, batch.repeat.iter());
        }
        let mut docs = String::new();
        let has_docs = batch.data.iter().enumerate().all(|(i, r)| {
            if i > 0 {
                docs.push(',');
            }
            r.write_documents(&mut docs)
        });
        if has_docs && !batch.data.is_empty() {
            let _ = write!(line, ",\"documents\":[{docs}]");
        }
        line.push('}');
    }
}

// --- Sequential ----------------------------------------------------------------------------

/// `batches --sequential`: prints the batches; with `--save-state` writes the state after
/// the last batch that reached stdout; reports of records not delivered go to stderr.
fn sequential(a: &BatchesArgs, args: LoaderArgs<'_>) -> CliResult {
    let s = Sequential(args);
    s.refuse_storage_options()?;
    let loader = s.loader()?;
    let mut it = s.start(&loader, a.resume.as_deref())?;
    print_batches(
        &mut it,
        a.max_batches,
        a.save_state.as_deref(),
        |line, batch| sequential_line(line, batch, !a.no_tokens),
        report_dropped,
    )
}

/// A report of records not delivered, as one JSON object.
fn dropped_json(d: &Dropped) -> String {
    match d {
        Dropped::Records { epoch, shard, start, end } => {
            format!(r#"{{"epoch":{epoch},"shard":{shard},"records":[{start},{end}]}}"#)
        }
        Dropped::Tokens { epoch, record } => format!(
            r#"{{"epoch":{epoch},"shard":{},"record":{},"from_token":{}}}"#,
            record.shard, record.record, record.offset
        ),
        Dropped::Rest { epoch, from } => format!(
            r#"{{"epoch":{epoch},"shard":{},"from_record":{},"window_cursor":{},"from_token":{}}}"#,
            from.shard, from.pos.record, from.cursor, from.skip
        ),
        other => format!("{other:?}"),
    }
}

/// Prints the reports of `it` on stderr, one `dropped {...}` line each.
fn report_dropped(it: &mut FilesIter) {
    for d in it.take_dropped() {
        eprintln!("dropped {}", dropped_json(&d));
    }
}

/// One batch as a JSON object: `{"batch", "epoch", "step", "windows": [[shard, record,
/// token], ...], "tokens"?}`.
fn sequential_line(line: &mut String, batch: &SequentialBatch<Vec<Vec<u32>>>, tokens: bool) {
    let _ = write!(
        line,
        r#"{{"batch":{},"epoch":{},"step":{},"windows":["#,
        batch.number, batch.epoch, batch.step
    );
    for (i, r) in batch.records.iter().enumerate() {
        if i > 0 {
            line.push(',');
        }
        let _ = write!(line, "[{},{},{}]", r.shard, r.record, r.offset);
    }
    line.push(']');
    if tokens {
        write_rows(line, "tokens", &batch.data);
    }
    line.push('}');
}

// --- MixPack -------------------------------------------------------------------------------

/// `batches` with `--mix` and/or `--pack`.
fn mix_pack(a: &BatchesArgs, args: LoaderArgs<'_>) -> CliResult {
    let mp = &a.read.mix_pack;
    let Some((config, streaming)) = mixpack::pack_config(&a.read.window, mp) else {
        let (records, plan) = mixpack::records(&a.read.window, mp)?;
        return print_records(a, args, records, move |line, rows: &Vec<Record>| {
            write_rows(line, "tokens", rows.iter().map(|r| &r.tokens));
            if plan.is_some() {
                line.push_str(",\"sources\":");
                write_list(line, rows.iter().map(|r| r.source.unwrap_or(0)));
            }
        });
    };
    if streaming {
        let (records, plan) = mixpack::records(&a.read.window, mp)?;
        // The stage's pieces name positions of the mixture: their sources from its plan.
        let locate = |i: u64| {
            plan.as_ref().and_then(|p| p.locate(i)).map_or((0, i), |s| (s.source as usize, s.record))
        };
        let sources: Vec<u32> =
            (0..plan.as_ref().map_or(0, |p| p.len())).map(|i| locate(i).0 as u32).collect();
        let stage = mixpack::stream_stage(&args, records, config, mp.pad_id)?;
        let mut it = match &a.resume {
            Some(p) => stage.iter_from(&read_state::<StageState>(p)?)?,
            None => stage.iter(),
        };
        let result = print_batches(
            &mut it,
            a.max_batches,
            a.save_state.as_deref(),
            |line, batch: &StageBatch<PackedRow<u32>>| {
                let _ = write!(line, "{{\"batch\":{},\"epoch\":{},\"records\":", batch.number, batch.epoch);
                write_list(line, batch.indices.iter());
                if !a.no_tokens {
                    packed_fields(line, &batch.data, &|r: &PackedRow<u32>| {
                        r.pieces.iter().map(|p| sources.get(p.doc as usize).copied().unwrap_or(0)).collect()
                    });
                }
                line.push('}');
            },
            |_| {},
        );
        if it.dropped_tokens() > 0 {
            eprintln!("note: --overflow truncate dropped {} tokens", it.dropped_tokens());
        }
        return result.map_err(|e| match e.downcast::<LoaderError>() {
            Ok(e) => mixpack::too_long(*e, &a.read.window, mp, locate),
            Err(e) => e,
        });
    }
    // The library's mix-then-pack: rows carry the source of each piece (empty unmixed).
    let (packed, dropped) = mixpack::planned(&a.read.window, mp, config)?;
    if dropped > 0 {
        eprintln!("note: --overflow truncate dropped {dropped} tokens");
    }
    print_records(a, args, packed, move |line, rows: &Vec<PackedRow<u32>>| {
        packed_fields(line, rows, &|r: &PackedRow<u32>| r.sources.clone());
    })
}

/// Appends the `[B, L]` fields of packed `rows` to a JSON line; `sources` (the source of each
/// piece, from `sources_of`) when mixed, that is when any row has a source.
fn packed_fields(
    line: &mut String,
    rows: &[PackedRow<u32>],
    sources_of: &dyn Fn(&PackedRow<u32>) -> Vec<u32>,
) {
    let grid = |line: &mut String, name: &str, f: &dyn Fn(&PackedRow<u32>) -> Vec<i64>| {
        write_rows(line, name, rows.iter().map(f));
    };
    grid(line, "tokens", &|r| r.tokens.iter().map(|&t| i64::from(t)).collect());
    grid(line, "segment_ids", &|r| r.segment_ids.iter().map(|&t| i64::from(t)).collect());
    grid(line, "positions", &|r| r.positions.iter().map(|&t| i64::from(t)).collect());
    grid(line, "targets", &|r| {
        r.targets.iter().map(|&t| if t == u32::MAX { -100 } else { i64::from(t) }).collect()
    });
    let sources: Vec<Vec<u32>> = rows.iter().map(sources_of).collect();
    if sources.iter().any(|s| !s.is_empty()) {
        write_rows(line, "sources", &sources);
    }
}

/// Prints the loader's batches over `source` (records of a mixture, or planned packed rows:
/// `--max-batches`, `--save-state`, `--resume` as plain `batches` does); `fields` appends a
/// batch's data fields to its line.
fn print_records<T: Send + 'static>(
    a: &BatchesArgs,
    args: LoaderArgs<'_>,
    source: Arc<dyn DataSource<Item = T>>,
    fields: impl Fn(&mut String, &Vec<T>),
) -> CliResult {
    let loader = args.builder(source).build()?;
    let state = a.resume.as_deref().map(read_state).transpose()?;
    print_loader(a, &loader, state.as_ref(), |line, batch| {
        let _ = write!(line, "{{\"batch\":{},\"epoch\":{},\"records\":", batch.number, batch.epoch);
        write_list(line, batch.indices.iter());
        if !a.no_tokens {
            fields(line, &batch.data);
        }
        line.push('}');
    })
}

/// Prints the batches of `loader` from `state` (or its start) with [`print_batches`]
/// (`--max-batches`, `--save-state`), each line made by `write_line`.
fn print_loader<S: DataSource + 'static>(
    a: &BatchesArgs,
    loader: &Loader<S>,
    state: Option<&State>,
    write_line: impl FnMut(&mut String, &Batch<Vec<S::Item>>),
) -> CliResult {
    let mut it = match state {
        Some(s) => loader.iter_from(s)?,
        None => loader.iter(),
    };
    print_batches(&mut it, a.max_batches, a.save_state.as_deref(), write_line, |_| {})
}

// --- Order ---------------------------------------------------------------------------------

/// `batches --order megatron`: Megatron's samples from `--consumed-samples` (or `--resume`)
/// on, numbered as Megatron numbers them.
fn megatron(a: &BatchesArgs) -> CliResult {
    let run = order::megatron(a)?;
    print_loader(a, &run.loader, Some(&run.state), |line, batch| {
        let _ = write!(line, "{{\"batch\":{},\"epoch\":{},\"samples\":", batch.number, batch.epoch);
        write_list(line, batch.indices.iter().map(|i| i + run.offset));
        if !a.no_tokens {
            write_rows(line, "tokens", batch.data.iter().map(|s| &s.tokens));
        }
        if run.blend {
            line.push_str(",\"sources\":");
            write_list(line, batch.data.iter().map(|s| s.dataset));
        }
        line.push('}');
    })
}

/// `batches --order llmc`: llm.c's batches, with llm.c's epochs.
fn llmc(a: &BatchesArgs) -> CliResult {
    let run = order::llmc(a)?;
    print_loader(a, &run.loader, Some(&run.state), |line, batch| {
        let epoch = if run.shuffle { batch.number / run.per_epoch } else { batch.epoch };
        let _ = write!(line, "{{\"batch\":{},\"epoch\":{epoch},\"windows\":", batch.number);
        write_list(line, batch.indices.iter());
        if !a.no_tokens {
            line.push_str(",\"tokens\":");
            write_list(line, batch.data.iter().flatten());
        }
        line.push('}');
    })
}
