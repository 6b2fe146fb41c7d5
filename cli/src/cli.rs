//! The command line: clap types of every command, their conversions to library options, and
//! the [`Plan`] of `batches` and `bench`, resolved once from their flags.
//!
//! The doc comments of fields are the `--help` texts.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};
use guideloom::formats::Primitive;
use guideloom::ingest::{DtypeChoice, Split, Tokenizer};
use guideloom::interop::ForeignFormat;
use guideloom::storage::BackendKind;

/// `guideloom`.
#[derive(Parser, Debug)]
#[command(
    name = "guideloom",
    version,
    about = "Deterministic, prefetched, checkpointable batches from sharded storage"
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// The commands; each runs in its module of `cmd/`.
#[derive(Subcommand, Debug)]
pub(crate) enum Command {
    /// Turn text or token files into a storage.
    #[command(subcommand)]
    Ingest(IngestCommand),
    /// Show a storage's manifest, counts and dtype; `--verify` checks checksums.
    Inspect(InspectArgs),
    /// Print the batches of token windows a loader configuration yields, as JSON lines.
    Batches(BatchesArgs),
    /// Measure the throughput of a loader configuration.
    Bench(BenchArgs),
    /// The main job: ingest the bundled corpus, train-loop over it, checkpoint, resume, verify.
    Demo(DemoArgs),
    /// Object-array-mapped (OAMap) datasets: nested JSON to named arrays and back.
    #[command(subcommand)]
    Oam(OamCommand),
    /// Convert a dataset in another project's layout (Megatron, nanoGPT, llm.c, MDS, litdata,
    /// OLMo, npy) to a native storage, without re-tokenizing.
    Import(ImportArgs),
    /// Copy a local storage to an object store (s3://, gs://, az://): shard files first, the
    /// manifest last.
    Upload(UploadArgs),
    /// Publish parts written by `ingest --part` (their receipts) in one atomic commit.
    CommitParts(CommitPartsArgs),
    /// List the part directories of a storage that no manifest references; delete them with
    /// --apply.
    Gc(GcArgs),
}

/// `guideloom commit-parts ROOT RECEIPT... | --receipts-dir D`.
#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("receipts").required(true).multiple(true).args(["receipt", "receipts_dir"])))]
pub(crate) struct CommitPartsArgs {
    /// The storage directory the parts were written under (a local path, or the object-store
    /// URL the parts were written to).
    pub(crate) root: PathBuf,
    /// Receipt files (the JSON `ingest --part` prints or writes with --receipt).
    pub(crate) receipt: Vec<PathBuf>,
    /// A directory whose `*.json` files are receipts.
    #[arg(long)]
    pub(crate) receipts_dir: Option<PathBuf>,
    /// What to do with a storage already in ROOT: refuse it (error), append after its shards,
    /// or overwrite its shards.
    #[arg(long, value_enum, default_value = "error")]
    pub(crate) mode: CommitModeArg,
}

/// `--mode` of commit-parts.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub(crate) enum CommitModeArg {
    Error,
    Append,
    Overwrite,
}

/// `guideloom gc ROOT [--apply]`.
#[derive(clap::Args, Debug)]
pub(crate) struct GcArgs {
    /// The storage directory (a local path or an object-store URL).
    pub(crate) root: PathBuf,
    /// Delete what is listed (default: only list it).
    #[arg(long)]
    pub(crate) apply: bool,
}

/// `guideloom upload LOCAL URL`.
#[derive(clap::Args, Debug)]
pub(crate) struct UploadArgs {
    /// The local storage directory.
    pub(crate) local: PathBuf,
    /// Where to put it: `s3://bucket/prefix` (endpoint and credentials from AWS_ENDPOINT_URL,
    /// AWS_ALLOW_HTTP, AWS_ACCESS_KEY_ID, ...), `gs://...`, `az://...`.
    pub(crate) url: String,
}

/// `guideloom oam ...`.
#[derive(Subcommand, Debug)]
pub(crate) enum OamCommand {
    /// Nested JSON data -> OAMap arrays: prints {"arrays": {name: [...]}, "dtypes": {...}}, or
    /// writes an .npz (with the schema stored in it) with --out.
    Fromdata {
        /// Schema JSON (the simple form or OAMap's own schema JSON).
        #[arg(long)]
        schema: PathBuf,
        /// The data, a JSON value (usually a list of records).
        #[arg(long)]
        data: PathBuf,
        /// Write FILE.npz instead of printing JSON.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// OAMap arrays -> the value as JSON (from --schema + --arrays JSON, or from an .npz).
    Read {
        /// An .npz written by OAMap or by `oam fromdata --out` (schema stored inside).
        npz: Option<PathBuf>,
        /// Schema JSON (with --arrays).
        #[arg(long, requires = "arrays", conflicts_with = "npz")]
        schema: Option<PathBuf>,
        /// Arrays JSON, the shape `oam fromdata` prints (with --schema).
        #[arg(long, requires = "schema")]
        arrays: Option<PathBuf>,
        /// Print only element I of the top-level list.
        #[arg(long)]
        index: Option<usize>,
    },
}

/// The storage, windows, sampling and worker options `batches` and `bench` share.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct WindowArgs {
    /// Storage directory (a u16/u32 token stream, or stream-with-meta), or a dataset in
    /// another project's layout read in place (see --format).
    pub(crate) dir: PathBuf,
    #[command(flatten)]
    pub(crate) foreign: ForeignArgs,
    /// Window length L in tokens (with --order megatron: Megatron's --seq-length).
    #[arg(long, visible_alias = "seq-length")]
    pub(crate) seq_len: u64,
    /// Distance between window starts (default L): window w = tokens [w*S, w*S+L).
    #[arg(long)]
    pub(crate) stride: Option<u64>,
    /// Windows per batch per rank.
    #[arg(long, default_value_t = 1)]
    pub(crate) batch_size: u64,
    /// Shuffle each epoch (keyed by --seed).
    #[arg(long)]
    pub(crate) shuffle: bool,
    /// Seed of the shuffle and of per-record randomness [default: 0; with --order megatron:
    /// Megatron's --seed, default 1234 as in Megatron-LM].
    #[arg(long)]
    pub(crate) seed: Option<u64>,
    /// Worker threads (0 = on the calling thread).
    #[arg(long, default_value_t = 0)]
    pub(crate) workers: usize,
    /// Batches in flight or ready ahead of the consumer (default 2 x workers).
    #[arg(long)]
    pub(crate) prefetch: Option<usize>,
    /// I/O backend: auto (hybrid: shard files in the page cache read through memory maps, the
    /// others through io_uring when available, else pread; GUIDELOOM_IO may name one),
    /// io-uring, pread (both without maps), or mmap (always maps). While a shard file is
    /// mapped (auto, mmap), do not truncate or rewrite it: a truncated mapped file kills the
    /// reader with SIGBUS; use io-uring or pread when another process may do so.
    #[arg(long, default_value = "auto", value_parser = parse_backend)]
    pub(crate) backend: BackendKind,
}

impl WindowArgs {
    /// `--seed`, 0 when not given (`--order megatron` defaults to Megatron's own seed instead:
    /// [`guideloom::interop::GptConfig::DEFAULT_SEED`]).
    pub(crate) fn seed(&self) -> u64 {
        self.seed.unwrap_or(0)
    }
}

/// `guideloom batches`.
#[derive(clap::Args, Debug)]
#[command(mut_arg("dir", optional_with_sequential_mix_or_order))]
pub(crate) struct BatchesArgs {
    #[command(flatten)]
    pub(crate) read: ReadArgs,
    /// Epochs.
    #[arg(long, default_value_t = 1)]
    pub(crate) epochs: u64,
    /// Drop the incomplete final (global) batch of each epoch.
    #[arg(long)]
    pub(crate) drop_remainder: bool,
    /// Print at most K batches.
    #[arg(long)]
    pub(crate) max_batches: Option<u64>,
    /// Write the loader state after the last printed batch to FILE.
    #[arg(long)]
    pub(crate) save_state: Option<PathBuf>,
    /// Continue from a state written by --save-state (batch numbers continue).
    #[arg(long)]
    pub(crate) resume: Option<PathBuf>,
    /// Omit window contents.
    #[arg(long)]
    pub(crate) no_tokens: bool,
    #[command(flatten)]
    pub(crate) order: Box<OrderArgs>,
}

impl BatchesArgs {
    /// What this `batches` reads.
    pub(crate) fn plan(&self) -> Plan {
        self.read.plan(self.order.order)
    }
}

/// The flags `batches` and `bench` share: the storage and its windows, the data-parallel
/// rank, elastic resume, and the flags of the other plans (files read in order, mixtures
/// and packing).
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct ReadArgs {
    #[command(flatten)]
    pub(crate) window: WindowArgs,
    /// This process's data-parallel rank.
    #[arg(long, default_value_t = 0)]
    pub(crate) rank: u64,
    /// Number of data-parallel ranks.
    #[arg(long, default_value_t = 1)]
    pub(crate) world_size: u64,
    #[command(flatten)]
    pub(crate) elastic: ElasticArgs,
    #[command(flatten)]
    pub(crate) sequential: SequentialArgs,
    #[command(flatten)]
    pub(crate) mix_pack: MixPackArgs,
}

impl ReadArgs {
    /// The plan of these flags, with `--order`'s value (`batches` only).
    fn plan(&self, order: Option<OrderKind>) -> Plan {
        if self.sequential.on() {
            Plan::Sequential
        } else if self.mix_pack.on() {
            Plan::MixPack
        } else if let Some(kind) = order {
            Plan::Order(kind)
        } else {
            Plan::Windows
        }
    }
}

/// What `batches` or `bench` reads, resolved once from the flags (ripgrep's `Mode`): the
/// command dispatches on it, and no helper looks at the flags again to decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Plan {
    /// Windows of one storage (native, local or remote) or foreign dataset: the default.
    Windows,
    /// `--sequential`: `--jsonl` or `--text` files read in order, tokenized on the fly.
    Sequential,
    /// `--mix` and/or `--pack`: a weighted mixture of storages, document packing.
    MixPack,
    /// `--order megatron|llmc` (`batches` only): another trainer's sample order.
    Order(OrderKind),
}

/// `batches --mix ... --pack ...`: a weighted mixture of storages and document packing.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct MixPackArgs {
    /// A storage and its weight, DIR=WEIGHT; repeat for every source of the mixture (then the
    /// positional DIR is left out). Weights are exact decimals (0.29 is 29/100) and shares of
    /// the mixture's records: windows, or documents with --pack (see --mix-unit).
    #[arg(long, value_parser = parse_mix)]
    pub(crate) mix: Vec<(PathBuf, f64)>,
    /// What a --mix weight is a share of: records (windows, or documents with --pack; the
    /// library's MixConfig::new) or tokens (each weight divided by its storage's mean record
    /// length; MixConfig::by_tokens: 0.7 is 70 % of the tokens).
    #[arg(long, value_enum, default_value = "records", requires = "mix")]
    pub(crate) mix_unit: MixUnitArg,
    /// How positions are dealt to the sources: greedy (Megatron's blend) or proportional.
    #[arg(long, value_enum, default_value = "proportional", requires = "mix")]
    pub(crate) mix_schedule: MixScheduleArg,
    /// When the mixture ends: first-exhausted, all-exhausted (every record once),
    /// budget:N (N records, sources wrap into re-shuffled epochs) or repeat:N.
    #[arg(long, default_value = "first-exhausted", value_parser = parse_mix_stop, requires = "mix")]
    pub(crate) mix_stop: guideloom::loader::mix::MixStop,
    /// Pack documents (of stream-with-meta storages: ingest with --doc-meta) into rows of
    /// --seq-len tokens; lines then carry segment_ids, positions and targets (-100 = ignore).
    #[arg(long, value_enum)]
    pub(crate) pack: Option<PackArg>,
    /// Open rows of first-fit and best-fit.
    #[arg(long, default_value_t = 8, requires = "pack", value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) bins: u64,
    /// Token id of padding.
    #[arg(long, default_value_t = 0, requires = "pack")]
    pub(crate) pad_id: u32,
    /// A document longer than a row: error, truncate (dropped tokens reported) or split.
    #[arg(long, value_enum, default_value = "error", requires = "pack")]
    pub(crate) overflow: OverflowArg,
}

impl MixPackArgs {
    /// Whether a mixture or packing is asked for.
    pub(crate) fn on(&self) -> bool {
        !self.mix.is_empty() || self.pack.is_some()
    }
}

/// `--mix-unit`.
#[derive(ValueEnum, Clone, Copy, Debug)]
pub(crate) enum MixUnitArg {
    /// Shares of records (windows, or documents with --pack).
    Records,
    /// Shares of tokens.
    Tokens,
}

/// `--mix-schedule`.
#[derive(ValueEnum, Clone, Copy, Debug)]
pub(crate) enum MixScheduleArg {
    /// Megatron's greedy minimum-error blend.
    Greedy,
    /// The closed-form proportional schedule.
    Proportional,
}

/// `--pack`.
#[derive(ValueEnum, Clone, Copy, Debug)]
pub(crate) enum PackArg {
    /// Concatenate and cut every --seq-len tokens.
    ConcatSplit,
    /// --bins open rows, first row that fits.
    FirstFit,
    /// --bins open rows, fullest row that fits.
    BestFit,
    /// Offline best-fit-decreasing over all documents.
    PlannedBfd,
    /// Streaming concat-split over each epoch's (shuffled, sharded) order.
    StreamConcatSplit,
    /// Streaming first-fit (--bins open rows) over each epoch's order; --save-state and
    /// --resume take the stage's state.
    StreamFirstFit,
    /// Streaming best-fit (--bins open rows) over each epoch's order.
    StreamBestFit,
}

/// `--overflow`.
#[derive(ValueEnum, Clone, Copy, Debug)]
pub(crate) enum OverflowArg {
    /// Refuse, naming the document.
    Error,
    /// Keep the first --seq-len tokens.
    Truncate,
    /// Cut into rows of --seq-len tokens.
    Split,
}

fn parse_mix(s: &str) -> Result<(PathBuf, f64), String> {
    let (dir, w) = s.rsplit_once('=').ok_or_else(|| format!("--mix {s:?}: expected DIR=WEIGHT"))?;
    let w: f64 = w.parse().map_err(|_| format!("--mix {s:?}: the weight {w:?} is not a number"))?;
    if !(w.is_finite() && w > 0.0) {
        return Err(format!("--mix {s:?}: the weight must be a finite number above 0"));
    }
    Ok((PathBuf::from(dir), w))
}

fn parse_mix_stop(s: &str) -> Result<guideloom::loader::mix::MixStop, String> {
    use guideloom::loader::mix::MixStop;
    let count = |n: &str| n.parse::<u64>().map_err(|_| format!("--mix-stop {s:?}: {n:?} is not a count"));
    match s.split_once(':') {
        None if s == "first-exhausted" => Ok(MixStop::FirstExhausted),
        None if s == "all-exhausted" => Ok(MixStop::AllExhausted),
        Some(("budget", n)) => Ok(MixStop::Budget(count(n)?)),
        Some(("repeat", n)) => Ok(MixStop::Repeat(count(n)?)),
        _ => Err(format!("--mix-stop {s:?}: expected first-exhausted, all-exhausted, budget:N or repeat:N")),
    }
}

/// Another trainer's sample order (`batches --order megatron|llmc`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OrderKind {
    /// Megatron-Core's GPTDataset / BlendedDataset samples of --seq-len + 1 tokens over
    /// --data-path, in Megatron's order; --batch-size is the micro batch, --rank/--world-size
    /// the data-parallel rank and size (the incomplete last global batch is dropped, as
    /// Megatron's sampler does).
    Megatron,
    /// llm.c's DataLoader over the shards of DIR (a file or a glob, names sorted as llm.c's
    /// glob sorts them): windows of --batch-size x --seq-len + 1 tokens, --world-size
    /// processes, sequential or (--llmc-shuffle) shuffled as process --rank shuffles.
    Llmc,
}

/// `batches --order`: samples in Megatron's or llm.c's order.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct OrderArgs {
    /// Print samples in another trainer's order (then --shuffle does not apply).
    #[arg(long, value_enum, conflicts_with = "sequential")]
    pub(crate) order: Option<OrderKind>,
    /// Megatron's --data-path: "PREFIX", "W1 PREFIX1 W2 PREFIX2 ..." for a blend, or
    /// "PREFIX1 PREFIX2 ..." (no weights: one epoch of each, blended by their sizes, each
    /// drawn until exhausted unless --train-samples caps the blend).
    #[arg(long)]
    pub(crate) data_path: Option<String>,
    /// Megatron's --split ("969,30,1"); named so because --split belongs to --text.
    #[arg(long, default_value = "969,30,1")]
    pub(crate) megatron_split: String,
    /// Which Megatron split to read: train, valid or test.
    #[arg(long, default_value = "train", value_parser = ["train", "valid", "test"])]
    pub(crate) megatron_split_name: String,
    /// Megatron's --train-samples (the samples of the split requested; a blend needs it).
    #[arg(long)]
    pub(crate) train_samples: Option<u64>,
    /// Megatron's consumed_train_samples: continue after that many samples, in whole steps
    /// of --batch-size x --world-size from there (also when it is not a multiple of them).
    /// With --resume, give the run's value again (its offset is part of the state).
    #[arg(long, default_value_t = 0)]
    pub(crate) consumed_samples: u64,
    /// llm.c's shuffled DataLoader (should_shuffle = 1): each process's own shard and batch
    /// permutations per epoch, seeded 42 + --rank.
    #[arg(long)]
    pub(crate) llmc_shuffle: bool,
    /// Continue an llm.c run from its DataLoader position: current_shard_idx ...
    #[arg(long, requires = "llmc_sample_idx", conflicts_with_all = ["resume", "llmc_state"])]
    pub(crate) llmc_shard_idx: Option<u64>,
    /// ... and current_sample_idx (batches read from that shard).
    #[arg(long, requires = "llmc_shard_idx")]
    pub(crate) llmc_sample_idx: Option<u64>,
    /// With --llmc-shuffle and --llmc-shard-idx: the epoch (0-based) the position is in.
    #[arg(long, default_value_t = 0)]
    pub(crate) llmc_epoch: u64,
    /// Continue an llm.c run from its checkpoint state_*.bin (train_gpt2.cu's save_state):
    /// its shard and sample position, and, when it shuffled, the epoch found from its shuffle
    /// state among the first --epochs.
    #[arg(long, conflicts_with = "resume")]
    pub(crate) llmc_state: Option<PathBuf>,
}

/// `guideloom bench`.
#[derive(clap::Args, Debug)]
#[command(mut_arg("dir", optional_with_sequential))]
pub(crate) struct BenchArgs {
    #[command(flatten)]
    pub(crate) read: ReadArgs,
    /// Run for T seconds (epochs repeat); default: one epoch.
    #[arg(long, conflicts_with = "max_batches")]
    pub(crate) seconds: Option<f64>,
    /// Stop after K batches.
    #[arg(long)]
    pub(crate) max_batches: Option<u64>,
    /// Print one JSON object.
    #[arg(long)]
    pub(crate) json: bool,
    /// Start from a state written by `batches --save-state` (of any rank and world size with
    /// the same global batch).
    #[arg(long)]
    pub(crate) resume: Option<PathBuf>,
    /// With --pack: before measuring, write the token count of every document packed, one
    /// per line in record order, to this file (for packers of other projects to read).
    #[arg(long, requires = "pack")]
    pub(crate) lengths_out: Option<PathBuf>,
}

impl BenchArgs {
    /// What this `bench` reads (`bench` has no `--order`).
    pub(crate) fn plan(&self) -> Plan {
        self.read.plan(None)
    }
}

/// Elastic resume of a storage (`batches`, `bench`): a state restores onto another rank and
/// world size.
#[derive(clap::Args, Debug, Clone, Default)]
pub(crate) struct ElasticArgs {
    /// Windows per global step over all ranks, G: the batch size per rank becomes
    /// G / --world-size (which must divide it). A state saved under any world size with the
    /// same G resumes exactly on this one.
    #[arg(long, conflicts_with = "batch_size")]
    pub(crate) global_batch: Option<u64>,
    /// On --resume with another global batch, restart at the step that holds the first
    /// unconsumed window, replaying the ones before it (flagged "repeat"), instead of refusing.
    #[arg(long, requires = "resume")]
    pub(crate) round_down: bool,
}

/// Files read in order, tokenized on the fly (`batches --sequential`, `bench --sequential`).
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct SequentialArgs {
    /// Read --jsonl, --text, --tfrecord or --webdataset files in order instead of a storage:
    /// each file is a shard, its
    /// documents are tokenized as they are read and packed into windows of --seq-len tokens
    /// (--shuffle permutes the file order per epoch).
    #[arg(long, requires = "sequential_input")]
    pub(crate) sequential: bool,
    /// JSON Lines files, one document per non-empty line (with --tokens-field or --text-field).
    #[arg(long, num_args = 1.., requires = "sequential", group = "sequential_input")]
    pub(crate) jsonl: Vec<PathBuf>,
    /// Plain UTF-8 text files (documents per --split, tokenized with --tokenizer).
    #[arg(long, num_args = 1.., requires = "sequential", group = "sequential_input", conflicts_with = "jsonl")]
    pub(crate) text: Vec<PathBuf>,
    /// TFRecord files in order (a file, glob or directory of `*.tfrecord`, `*.tfrecord.gz`;
    /// a local path or a URL): each record's tf.train.Example int64 feature (--tokens-field,
    /// default `input_ids`) is a document.
    #[arg(long, requires = "sequential", group = "sequential_input", conflicts_with_all = ["jsonl", "text"])]
    pub(crate) tfrecord: Option<String>,
    /// WebDataset tar shards in order (a file, glob or directory of `*.tar`, `*.tar.gz`; a
    /// local path or a URL): each sample's token field (--tokens-field, default `npy`; a
    /// `txt` field is tokenized with --tokenizer) is a document.
    #[arg(long, requires = "sequential", group = "sequential_input", conflicts_with_all = ["jsonl", "text", "tfrecord"])]
    pub(crate) webdataset: Option<String>,
    /// --jsonl: the field holding a list of token ids; --tfrecord: the int64 feature;
    /// --webdataset: the token field (`npy`, `input_ids.npy`, `json:<key>`, `txt`).
    #[arg(long, requires = "sequential_input", conflicts_with = "text_field")]
    pub(crate) tokens_field: Option<String>,
    /// --jsonl: the field holding text to tokenize with --tokenizer.
    #[arg(long, requires = "jsonl")]
    pub(crate) text_field: Option<String>,
    /// BPE vocabulary of --text and --text-field (embedded; no download).
    #[arg(long, value_enum, default_value = "cl100k")]
    pub(crate) tokenizer: TokenizerArg,
    /// --text: documents are files, blank-line-separated blocks, or lines.
    #[arg(long, value_enum, default_value = "file")]
    pub(crate) split: SplitArg,
    /// --text: append the tokenizer's end-of-text id after each document.
    #[arg(long, requires = "text")]
    pub(crate) eos: bool,
    /// Files each rank reads at once, one document from each in turn.
    #[arg(long, default_value_t = 1, requires = "sequential")]
    pub(crate) cycle: u64,
    /// Shuffle each file's documents inside windows of this many documents (keyed by --seed;
    /// 1 = off).
    #[arg(long, default_value_t = 1, requires = "sequential")]
    pub(crate) window_shuffle: u64,
    /// Count each file's documents first and deal the files to ranks by length (longest
    /// first) instead of round-robin.
    #[arg(long, requires = "sequential")]
    pub(crate) count_lengths: bool,
    /// Elastic resume: the states of all ranks of an earlier run (each written by
    /// --save-state), restored onto this --rank of --world-size.
    #[arg(long, num_args = 1.., requires = "sequential", conflicts_with = "resume")]
    pub(crate) resume_ranks: Vec<PathBuf>,
}

impl SequentialArgs {
    /// Whether the command reads files in order.
    pub(crate) fn on(&self) -> bool {
        self.sequential
    }
}

/// The storage directory of `bench` is not needed with `--sequential` or `--mix`.
fn optional_with_sequential(a: clap::Arg) -> clap::Arg {
    a.required(false)
        .required_unless_present_any(["sequential", "mix"])
        .default_value("-")
        .hide_default_value(true)
}

/// `batches`' DIR: left out with `--sequential`, `--mix` or `--order` (Megatron's
/// `--data-path` names the data).
fn optional_with_sequential_mix_or_order(a: clap::Arg) -> clap::Arg {
    a.required(false)
        .required_unless_present_any(["sequential", "mix", "order"])
        .default_value("-")
        .hide_default_value(true)
}

/// `guideloom demo`.
#[derive(clap::Args, Debug)]
pub(crate) struct DemoArgs {
    /// Text files or directories (default: the bundled Austen novels).
    #[arg(long, num_args = 1..)]
    pub(crate) corpus: Vec<PathBuf>,
    /// Where to write the storage and the state (default: a temporary directory, removed).
    #[arg(long)]
    pub(crate) workdir: Option<PathBuf>,
}

/// `guideloom ingest ...`.
#[derive(Subcommand, Debug)]
pub(crate) enum IngestCommand {
    /// Tokenize UTF-8 text files (directories are walked, paths sorted) into a token stream.
    Text(IngestTextArgs),
    /// JSON Lines: each line an object whose field holds token ids (or text) = one document.
    Jsonl(IngestJsonlArgs),
}

/// `--tokenizer`.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub(crate) enum TokenizerArg {
    Cl100k,
    O200k,
    Gpt2,
}

impl From<TokenizerArg> for Tokenizer {
    fn from(t: TokenizerArg) -> Self {
        match t {
            TokenizerArg::Cl100k => Tokenizer::Cl100k,
            TokenizerArg::O200k => Tokenizer::O200k,
            TokenizerArg::Gpt2 => Tokenizer::Gpt2,
        }
    }
}

/// `--split`.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub(crate) enum SplitArg {
    File,
    BlankLine,
    Line,
}

impl From<SplitArg> for Split {
    fn from(s: SplitArg) -> Self {
        match s {
            SplitArg::File => Split::File,
            SplitArg::BlankLine => Split::BlankLine,
            SplitArg::Line => Split::Line,
        }
    }
}

/// `--dtype` of ingest.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub(crate) enum DtypeArg {
    Auto,
    U16,
    U32,
}

impl From<DtypeArg> for DtypeChoice {
    fn from(d: DtypeArg) -> Self {
        match d {
            DtypeArg::Auto => DtypeChoice::Auto,
            DtypeArg::U16 => DtypeChoice::U16,
            DtypeArg::U32 => DtypeChoice::U32,
        }
    }
}

/// `guideloom ingest text`.
#[derive(clap::Args, Debug)]
pub(crate) struct IngestTextArgs {
    /// Output storage directory: new, empty, or (with --append) an existing storage.
    #[arg(long)]
    pub(crate) out: PathBuf,
    /// BPE vocabulary (embedded; no download).
    #[arg(long, value_enum, default_value = "cl100k")]
    pub(crate) tokenizer: TokenizerArg,
    /// Documents are files, blank-line-separated blocks, or lines.
    #[arg(long, value_enum, default_value = "file")]
    pub(crate) split: SplitArg,
    /// Append the tokenizer's end-of-text id after each document.
    #[arg(long)]
    pub(crate) eos: bool,
    #[command(flatten)]
    pub(crate) write: IngestWriteArgs,
    /// Input files or directories.
    #[arg(required = true)]
    pub(crate) paths: Vec<PathBuf>,
}

/// How `ingest text` and `ingest jsonl` write their storage.
#[derive(clap::Args, Debug)]
pub(crate) struct IngestWriteArgs {
    /// Number of shards (contiguous runs of documents), at least 1.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub(crate) shards: u64,
    /// Element type: auto = u16 when every id < 65,536, else u32.
    #[arg(long, value_enum, default_value = "auto")]
    pub(crate) dtype: DtypeArg,
    /// Write a stream-with-meta storage whose runs are documents (ordinal + source: path, with
    /// the line for line splits and JSON Lines), so packing and `batches` see document
    /// boundaries.
    #[arg(long)]
    pub(crate) doc_meta: bool,
    /// Add the documents to the existing storage in --out (written with the same tokenizer,
    /// split and --eos, or the same JSON field), in new shards after its last one. Without it
    /// an existing storage is an error.
    #[arg(long)]
    pub(crate) append: bool,
    /// The most bytes of one input document (a JSON Lines line, a text line or blank-line
    /// block, a whole file); a longer one stops the ingest with an error naming its file and
    /// line.
    #[arg(long, default_value_t = guideloom::ingest::MAX_DOCUMENT_BYTES,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) max_document_bytes: u64,
    /// Write one part of a job instead of the storage: JOB:PARTITION:ATTEMPT, under
    /// --out/_parts/JOB/; prints the part's receipt (JSON) for `commit-parts`, or writes it to
    /// --receipt.
    #[arg(long, value_parser = parse_part, conflicts_with_all = ["append", "workers"])]
    pub(crate) part: Option<(String, u64, u64)>,
    /// With --part: write the receipt to this file instead of stdout.
    #[arg(long, requires = "part")]
    pub(crate) receipt: Option<PathBuf>,
    /// Split the input files into up to N contiguous groups, ingest them as N parts in parallel
    /// and commit them at once (the token stream is the same as with 1; not with --append or
    /// --doc-meta).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=256),
          conflicts_with_all = ["append", "doc_meta"])]
    pub(crate) workers: u64,
}

/// Parses `JOB:PARTITION:ATTEMPT` (the job is checked when the part is opened).
fn parse_part(s: &str) -> Result<(String, u64, u64), String> {
    let mut it = s.rsplitn(3, ':');
    let (Some(attempt), Some(partition), Some(job)) = (it.next(), it.next(), it.next()) else {
        return Err(format!("{s:?} is not JOB:PARTITION:ATTEMPT"));
    };
    let num = |v: &str, what: &str| v.parse::<u64>().map_err(|e| format!("{what} {v:?}: {e}"));
    Ok((job.to_string(), num(partition, "partition")?, num(attempt, "attempt")?))
}

/// `guideloom ingest jsonl`.
#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("field").required(true).args(["tokens_field", "text_field"])))]
pub(crate) struct IngestJsonlArgs {
    /// Output storage directory: new, empty, or (with --append) an existing storage.
    #[arg(long)]
    pub(crate) out: PathBuf,
    /// Field holding a list of token ids.
    #[arg(long)]
    pub(crate) tokens_field: Option<String>,
    /// Field holding text to tokenize with --tokenizer.
    #[arg(long)]
    pub(crate) text_field: Option<String>,
    /// BPE vocabulary for --text-field.
    #[arg(long, value_enum, default_value = "cl100k")]
    pub(crate) tokenizer: TokenizerArg,
    #[command(flatten)]
    pub(crate) write: IngestWriteArgs,
    /// Input JSON Lines files.
    #[arg(required = true)]
    pub(crate) files: Vec<PathBuf>,
}

/// `guideloom inspect`.
#[derive(clap::Args, Debug)]
pub(crate) struct InspectArgs {
    /// Storage directory, or a dataset in another project's layout (see --format).
    pub(crate) dir: PathBuf,
    #[command(flatten)]
    pub(crate) foreign: ForeignArgs,
    /// Recompute every shard's checksum; exit non-zero naming the first bad shard.
    #[arg(long)]
    pub(crate) verify: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub(crate) json: bool,
    #[command(flatten)]
    pub(crate) order: InspectOrderArgs,
}

/// `inspect --order megatron`: the sizes of Megatron's indices for a configuration.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct InspectOrderArgs {
    /// Print the index sizes and epochs of Megatron's order over DIR (a Megatron prefix), or
    /// over --data-path (one JSON object).
    #[arg(long, value_parser = ["megatron"])]
    pub(crate) order: Option<String>,
    /// Megatron's --data-path: "PREFIX", or "W1 PREFIX1 W2 PREFIX2 ..." (default: DIR).
    #[arg(long, requires = "order")]
    pub(crate) data_path: Option<String>,
    /// Megatron's --split.
    #[arg(long, default_value = "969,30,1")]
    pub(crate) megatron_split: String,
    /// Which Megatron split: train, valid or test.
    #[arg(long, default_value = "train", value_parser = ["train", "valid", "test"])]
    pub(crate) megatron_split_name: String,
    /// Megatron's --train-samples.
    #[arg(long, requires = "order")]
    pub(crate) train_samples: Option<u64>,
    /// Megatron's --seq-length.
    #[arg(long, requires = "order", required_if_eq("order", "megatron"))]
    pub(crate) seq_length: Option<u64>,
    /// Megatron's --seed (Megatron-LM's default).
    #[arg(long, default_value_t = guideloom::interop::GptConfig::DEFAULT_SEED)]
    pub(crate) seed: u64,
}

/// A backend name, parsed by the storage crate (the one parser of backend names).
fn parse_backend(name: &str) -> Result<BackendKind, guideloom::storage::StorageError> {
    name.parse()
}

/// How to read a dataset in another project's layout, in place (`inspect`, `batches`, `bench`,
/// `import`).
#[derive(clap::Args, Debug, Clone, Default)]
pub(crate) struct ForeignArgs {
    /// The dataset's layout: megatron (PATH is the prefix of PREFIX.bin/.idx), nanogpt (a
    /// train.bin, or a glob), llmc (llm.c / modded-nanogpt shards: a file or a glob), mds or
    /// litdata (the directory of index.json), olmo (Dolma token files: a file, glob or
    /// directory), npy (a .npy, glob or directory), arrow (a Hugging Face `save_to_disk`
    /// directory, or Arrow IPC stream files), parquet (a .parquet, glob or directory),
    /// arrayrecord (Grain's ArrayRecord files), tfrecord (TFRecord files, .gz too), webdataset
    /// (tar shards: a file, glob or directory). Default: detected where a magic number or an
    /// index file makes it unambiguous; raw layouts (nanogpt, olmo) need it.
    #[arg(long, value_parser = parse_foreign_format)]
    pub(crate) format: Option<ForeignFormat>,
    /// Element dtype of raw token files (nanogpt, olmo, header-less llm.c), of an MDS
    /// `bytes` column (default i64 there), of raw ArrayRecord records, of raw TFRecord records
    /// (instead of tf.train.Example) and of a raw WebDataset field: u8, i8, u16, i16, u32,
    /// i32, u64, i64. Never guessed.
    #[arg(long, value_parser = parse_token_dtype)]
    pub(crate) dtype: Option<Primitive>,
    /// MDS: the token column (default: `tokens`); litdata: the token leaf's index; Hugging
    /// Face Arrow and Parquet: the list column of token ids (default: `input_ids`); TFRecord:
    /// the tf.train.Example int64 feature (default: `input_ids`); WebDataset: the token field
    /// (default: `npy`; `input_ids.npy`, or `json:<key>` for a list in the json field).
    #[arg(long)]
    pub(crate) column: Option<String>,
    /// Hugging Face `DatasetDict` directories: the split to read (train, validation, ...).
    #[arg(long = "hf-split")]
    pub(crate) hf_split: Option<String>,
    /// Megatron: rebuild sequence pointers from the lengths (indexes merged with numpy 2
    /// before Megatron's 2025-09 fix) instead of refusing them.
    #[arg(long)]
    pub(crate) repair_pointers: bool,
    /// Megatron: the index carries the multimodal modes array.
    #[arg(long)]
    pub(crate) multimodal: bool,
}

/// `guideloom import`.
#[derive(clap::Args, Debug)]
pub(crate) struct ImportArgs {
    /// The dataset to convert (see --format).
    pub(crate) path: PathBuf,
    #[command(flatten)]
    pub(crate) foreign: ForeignArgs,
    /// Output storage directory (must not hold a storage).
    #[arg(long)]
    pub(crate) out: PathBuf,
    /// Element type of the storage: auto = u16 for ids stored in 1 or 2 bytes, else u32.
    #[arg(long, value_enum, default_value = "auto")]
    pub(crate) out_dtype: DtypeArg,
    /// Write a stream-with-meta storage whose runs are the dataset's documents (where it
    /// records them), instead of a plain token stream.
    #[arg(long)]
    pub(crate) doc_meta: bool,
}

/// A layout name, parsed by the interop crate.
fn parse_foreign_format(name: &str) -> Result<ForeignFormat, guideloom::interop::InteropError> {
    name.parse()
}

/// A token dtype name (`u16`, `i32`, ...).
fn parse_token_dtype(name: &str) -> Result<Primitive, String> {
    let p = match name.trim().to_ascii_lowercase().as_str() {
        "u8" | "uint8" => Primitive::U8,
        "i8" | "int8" => Primitive::I8,
        "u16" | "uint16" => Primitive::U16,
        "i16" | "int16" => Primitive::I16,
        "u32" | "uint32" => Primitive::U32,
        "i32" | "int32" => Primitive::I32,
        "u64" | "uint64" => Primitive::U64,
        "i64" | "int64" => Primitive::I64,
        other => return Err(format!("{other:?} is not one of u8, i8, u16, i16, u32, i32, u64, i64")),
    };
    Ok(p)
}
