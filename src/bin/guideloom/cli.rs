//! The command line: clap types of every command, and their conversions to library options.
//!
//! The doc comments of fields are the `--help` texts.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};
use guideloom::ingest::{DtypeChoice, Split, Tokenizer};
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
    /// Storage directory (a u16/u32 token stream, or stream-with-meta).
    pub(crate) dir: PathBuf,
    /// Window length L in tokens.
    #[arg(long)]
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
    /// Seed of the shuffle and of per-record randomness.
    #[arg(long, default_value_t = 0)]
    pub(crate) seed: u64,
    /// Worker threads (0 = on the calling thread).
    #[arg(long, default_value_t = 0)]
    pub(crate) workers: usize,
    /// Batches in flight or ready ahead of the consumer (default 2 x workers).
    #[arg(long)]
    pub(crate) prefetch: Option<usize>,
    /// I/O backend: auto (io_uring when available, else pread; GUIDELOOM_IO may name one),
    /// io-uring, pread, or mmap (memory-mapped shards: do not truncate or rewrite shard files
    /// while reading).
    #[arg(long, default_value = "auto", value_parser = parse_backend)]
    pub(crate) backend: BackendKind,
}

/// `guideloom batches`.
#[derive(clap::Args, Debug)]
#[command(mut_arg("dir", optional_with_sequential))]
pub(crate) struct BatchesArgs {
    #[command(flatten)]
    pub(crate) window: WindowArgs,
    /// Epochs.
    #[arg(long, default_value_t = 1)]
    pub(crate) epochs: u64,
    /// This process's data-parallel rank.
    #[arg(long, default_value_t = 0)]
    pub(crate) rank: u64,
    /// Number of data-parallel ranks.
    #[arg(long, default_value_t = 1)]
    pub(crate) world_size: u64,
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
    pub(crate) elastic: ElasticArgs,
    #[command(flatten)]
    pub(crate) sequential: SequentialArgs,
}

/// `guideloom bench`.
#[derive(clap::Args, Debug)]
#[command(mut_arg("dir", optional_with_sequential))]
pub(crate) struct BenchArgs {
    #[command(flatten)]
    pub(crate) window: WindowArgs,
    /// Run for T seconds (epochs repeat); default: one epoch.
    #[arg(long, conflicts_with = "max_batches")]
    pub(crate) seconds: Option<f64>,
    /// Stop after K batches.
    #[arg(long)]
    pub(crate) max_batches: Option<u64>,
    /// Print one JSON object.
    #[arg(long)]
    pub(crate) json: bool,
    /// This process's data-parallel rank.
    #[arg(long, default_value_t = 0)]
    pub(crate) rank: u64,
    /// Number of data-parallel ranks.
    #[arg(long, default_value_t = 1)]
    pub(crate) world_size: u64,
    /// Start from a state written by `batches --save-state` (of any rank and world size with
    /// the same global batch).
    #[arg(long)]
    pub(crate) resume: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) elastic: ElasticArgs,
    #[command(flatten)]
    pub(crate) sequential: SequentialArgs,
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
    /// Read --jsonl or --text files in order instead of a storage: each file is a shard, its
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
    /// --jsonl: the field holding a list of token ids.
    #[arg(long, requires = "jsonl", conflicts_with = "text_field")]
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

/// The storage directory of `batches` and `bench` is not needed with `--sequential`.
fn optional_with_sequential(a: clap::Arg) -> clap::Arg {
    a.required(false).required_unless_present("sequential").default_value("-").hide_default_value(true)
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
    /// Output storage directory (created; an existing stream storage is appended to).
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
    /// Number of shards (contiguous runs of documents), at least 1.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub(crate) shards: u64,
    /// Element type: auto = u16 when every id < 65,536, else u32.
    #[arg(long, value_enum, default_value = "auto")]
    pub(crate) dtype: DtypeArg,
    /// Write a stream-with-meta storage whose runs are documents (ordinal + source path).
    #[arg(long)]
    pub(crate) doc_meta: bool,
    /// Add the documents to the existing storage in --out (same tokenizer, split and --eos),
    /// in new shards after its last one. Without it an existing storage is an error.
    #[arg(long)]
    pub(crate) append: bool,
    /// Input files or directories.
    #[arg(required = true)]
    pub(crate) paths: Vec<PathBuf>,
}

/// `guideloom ingest jsonl`.
#[derive(clap::Args, Debug)]
pub(crate) struct IngestJsonlArgs {
    /// Output storage directory.
    #[arg(long)]
    pub(crate) out: PathBuf,
    /// Field holding a list of token ids.
    #[arg(long, conflicts_with = "text_field", required_unless_present = "text_field")]
    pub(crate) tokens_field: Option<String>,
    /// Field holding text to tokenize with --tokenizer.
    #[arg(long)]
    pub(crate) text_field: Option<String>,
    /// BPE vocabulary for --text-field.
    #[arg(long, value_enum, default_value = "cl100k")]
    pub(crate) tokenizer: TokenizerArg,
    /// Number of shards (contiguous runs of documents), at least 1.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub(crate) shards: u64,
    /// Element type: auto = u16 when every id < 65,536, else u32.
    #[arg(long, value_enum, default_value = "auto")]
    pub(crate) dtype: DtypeArg,
    /// Add the documents to the existing storage in --out (same fields and tokenizer), in new
    /// shards after its last one. Without it an existing storage is an error.
    #[arg(long)]
    pub(crate) append: bool,
    /// Input JSON Lines files.
    #[arg(required = true)]
    pub(crate) files: Vec<PathBuf>,
}

/// `guideloom inspect`.
#[derive(clap::Args, Debug)]
pub(crate) struct InspectArgs {
    /// Storage directory.
    pub(crate) dir: PathBuf,
    /// Recompute every shard's checksum; exit non-zero naming the first bad shard.
    #[arg(long)]
    pub(crate) verify: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

/// A backend name, parsed by the storage crate (the one parser of backend names).
fn parse_backend(name: &str) -> Result<BackendKind, guideloom::storage::StorageError> {
    name.parse()
}
