//! `guideloom batches`: the batches of token windows a loader configuration yields, one JSON
//! object per line.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use guideloom::formats::{DocumentTokensFormat, TokenElement, TokenFormat};
use guideloom::interop::ForeignDataset;
use guideloom::loader::{Batch, DataSource, MetaWindows, ResumeOptions, State, StreamWindows};
use guideloom::storage::ReadOptions;
use guideloom::storage::{StreamReader, StreamWithMetaReader};

use crate::cli::BatchesArgs;
use crate::cmd::windows::{
    open_token_storage, write_list, ForeignIds, LoaderArgs, TokenStorageFn, WindowRecord,
};
use crate::CliResult;

/// `guideloom batches` with its parsed options.
struct Batches {
    args: LoaderArgs,
    max_batches: Option<u64>,
    save_state: Option<PathBuf>,
    resume: Option<PathBuf>,
    no_tokens: bool,
    /// `--round-down`: a state of another global batch resumes at the start of its step.
    round_down: bool,
}

/// Runs `guideloom batches`: prints the batches on stdout; with `--save-state` writes the
/// state after the last batch that reached stdout.
pub(crate) fn run(a: BatchesArgs) -> CliResult {
    crate::cmd::location::local_files(
        [
            ("--save-state", a.save_state.as_deref()),
            ("--resume", a.resume.as_deref()),
            ("--llmc-state", a.order.llmc_state.as_deref()),
        ]
        .into_iter()
        .chain(a.sequential.resume_ranks.iter().map(|p| ("--resume-ranks", Some(p.as_path())))),
    )?;
    if a.sequential.on() {
        return crate::cmd::sequential::batches(&a);
    }
    if a.mix_pack.on() {
        return crate::cmd::mixpack::batches(a);
    }
    if a.order.order.is_some() {
        return crate::cmd::order::batches(&a);
    }
    let b = Batches {
        args: LoaderArgs {
            window: a.window,
            epochs: Some(a.epochs),
            rank: a.rank,
            world_size: a.world_size,
            drop_remainder: a.drop_remainder,
            global_batch: a.elastic.global_batch,
        },
        max_batches: a.max_batches,
        save_state: a.save_state,
        resume: a.resume,
        no_tokens: a.no_tokens,
        round_down: a.elastic.round_down,
    };
    open_token_storage(&b.args.window, &b)
}

impl TokenStorageFn for &Batches {
    type Output = ();
    fn stream<E: TokenElement>(self, reader: StreamReader<TokenFormat<E>>) -> CliResult {
        let w = &self.args.window;
        self.print(StreamWindows::with_stride(reader, w.seq_len, self.args.stride())?, None)
    }
    fn meta<E: TokenElement>(self, reader: StreamWithMetaReader<DocumentTokensFormat<E>>) -> CliResult {
        let w = &self.args.window;
        self.print(MetaWindows::with_stride(reader, w.seq_len, self.args.stride())?, None)
    }
    fn foreign(self, data: &ForeignDataset, options: ReadOptions) -> CliResult {
        let w = &self.args.window;
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

impl Batches {
    /// Prints the batches of the loader over `source`; `legacy`, for a foreign dataset, the
    /// fingerprint a state saved before issue 18 holds for it
    /// ([`crate::cmd::foreign::adopt_legacy_fingerprint`]).
    fn print<S>(&self, source: S, legacy: Option<&dyn Fn() -> CliResult<u64>>) -> CliResult
    where
        S: DataSource + 'static,
        S::Item: WindowRecord,
    {
        let loader = self.args.builder(source).build()?;
        if loader.is_empty() {
            let w = &self.args.window;
            eprintln!(
                "note: no batch: {} holds {} windows of {} tokens (batch size {}, world size {})",
                w.dir.display(),
                DataSource::len(loader.source()),
                w.seq_len,
                w.batch_size,
                self.args.world_size
            );
        }
        let options = if self.round_down { ResumeOptions::round_down() } else { ResumeOptions::default() };
        let mut it = match &self.resume {
            Some(p) => {
                let mut state = read_state(p)?;
                if let Some(legacy) = legacy {
                    let current = loader.source().fingerprint();
                    crate::cmd::foreign::adopt_legacy_fingerprint(&mut state, current, legacy)?;
                }
                loader.iter_from_with(&state, options)?
            }
            None => loader.iter(),
        };
        super::print::print_batches(
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

/// Reads a state file written by `--save-state`.
pub(crate) fn read_state(p: &Path) -> CliResult<State> {
    let text = super::state_file::read(p)?;
    State::from_json(&text).map_err(|e| super::context(format!("state file {}", p.display()), e).into())
}
