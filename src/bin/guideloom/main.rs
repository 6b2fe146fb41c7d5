//! The `guideloom` command-line tool: ingest, inspect, batches, bench, demo.

/// `println!` that returns an error instead of panicking when stdout is closed (for example
/// `guideloom batches ... | head`).
macro_rules! outln {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($t)*)?
    }};
}

mod demo;
mod run;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use guideloom::ingest::{self, DtypeChoice, IngestOptions, JsonlField, Split, Tokenizer};
use guideloom::storage::{self, Manifest, StorageKind};
use serde_json::{json, Value};

pub(crate) type CliResult<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

#[derive(Parser, Debug)]
#[command(
    name = "guideloom",
    version,
    about = "Deterministic, prefetched, checkpointable batches from sharded storage"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
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

#[derive(Subcommand, Debug)]
enum OamCommand {
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

/// I/O backend names on the command line.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum BackendArg {
    /// io_uring when available, else pread (or what GUIDELOOM_IO says).
    Auto,
    /// io_uring.
    #[value(alias = "io_uring")]
    IoUring,
    /// Positional reads.
    Pread,
    /// Memory-mapped shards (do not truncate or rewrite shard files while reading; also
    /// chosen by GUIDELOOM_IO=mmap with `--backend auto`).
    Mmap,
}

#[derive(clap::Args, Debug, Clone)]
struct WindowArgs {
    /// Storage directory (a u16/u32 token stream, or stream-with-meta).
    dir: PathBuf,
    /// Window length L in tokens.
    #[arg(long)]
    seq_len: u64,
    /// Distance between window starts (default L): window w = tokens [w*S, w*S+L).
    #[arg(long)]
    stride: Option<u64>,
    /// Windows per batch per rank.
    #[arg(long, default_value_t = 1)]
    batch_size: u64,
    /// Shuffle each epoch (keyed by --seed).
    #[arg(long)]
    shuffle: bool,
    /// Seed of the shuffle and of per-record randomness.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Worker threads (0 = on the calling thread).
    #[arg(long, default_value_t = 0)]
    workers: usize,
    /// Batches in flight or ready ahead of the consumer (default 2 x workers).
    #[arg(long)]
    prefetch: Option<usize>,
    /// I/O backend.
    #[arg(long, value_enum, default_value = "auto")]
    backend: BackendArg,
}

#[derive(clap::Args, Debug)]
struct BatchesArgs {
    #[command(flatten)]
    window: WindowArgs,
    /// Epochs.
    #[arg(long, default_value_t = 1)]
    epochs: u64,
    /// This process's data-parallel rank.
    #[arg(long, default_value_t = 0)]
    rank: u64,
    /// Number of data-parallel ranks.
    #[arg(long, default_value_t = 1)]
    world_size: u64,
    /// Drop the incomplete final (global) batch of each epoch.
    #[arg(long)]
    drop_remainder: bool,
    /// Print at most K batches.
    #[arg(long)]
    max_batches: Option<u64>,
    /// Write the loader state after the last printed batch to FILE.
    #[arg(long)]
    save_state: Option<PathBuf>,
    /// Continue from a state written by --save-state (batch numbers continue).
    #[arg(long)]
    resume: Option<PathBuf>,
    /// Omit window contents.
    #[arg(long)]
    no_tokens: bool,
}

#[derive(clap::Args, Debug)]
struct BenchArgs {
    #[command(flatten)]
    window: WindowArgs,
    /// Run for T seconds (epochs repeat); default: one epoch.
    #[arg(long, conflicts_with = "max_batches")]
    seconds: Option<f64>,
    /// Stop after K batches.
    #[arg(long)]
    max_batches: Option<u64>,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args, Debug)]
struct DemoArgs {
    /// Text files or directories (default: the bundled Austen novels).
    #[arg(long, num_args = 1..)]
    corpus: Vec<PathBuf>,
    /// Where to write the storage and the state (default: a temporary directory, removed).
    #[arg(long)]
    workdir: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
enum IngestCommand {
    /// Tokenize UTF-8 text files (directories are walked, paths sorted) into a token stream.
    Text(IngestTextArgs),
    /// JSON Lines: each line an object whose field holds token ids (or text) = one document.
    Jsonl(IngestJsonlArgs),
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum TokenizerArg {
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

#[derive(Clone, Copy, Debug, ValueEnum)]
enum SplitArg {
    File,
    BlankLine,
    Line,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum DtypeArg {
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

#[derive(clap::Args, Debug)]
struct IngestTextArgs {
    /// Output storage directory (created; an existing stream storage is appended to).
    #[arg(long)]
    out: PathBuf,
    /// BPE vocabulary (embedded; no download).
    #[arg(long, value_enum, default_value = "cl100k")]
    tokenizer: TokenizerArg,
    /// Documents are files, blank-line-separated blocks, or lines.
    #[arg(long, value_enum, default_value = "file")]
    split: SplitArg,
    /// Append the tokenizer's end-of-text id after each document.
    #[arg(long)]
    eos: bool,
    /// Number of shards (contiguous runs of documents), at least 1.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    shards: u64,
    /// Element type: auto = u16 when every id < 65,536, else u32.
    #[arg(long, value_enum, default_value = "auto")]
    dtype: DtypeArg,
    /// Write a stream-with-meta storage whose runs are documents (ordinal + source path).
    #[arg(long)]
    doc_meta: bool,
    /// Add the documents to the existing storage in --out (same tokenizer, split and --eos),
    /// in new shards after its last one. Without it an existing storage is an error.
    #[arg(long)]
    append: bool,
    /// Input files or directories.
    #[arg(required = true)]
    paths: Vec<PathBuf>,
}

#[derive(clap::Args, Debug)]
struct IngestJsonlArgs {
    /// Output storage directory.
    #[arg(long)]
    out: PathBuf,
    /// Field holding a list of token ids.
    #[arg(long, conflicts_with = "text_field", required_unless_present = "text_field")]
    tokens_field: Option<String>,
    /// Field holding text to tokenize with --tokenizer.
    #[arg(long)]
    text_field: Option<String>,
    /// BPE vocabulary for --text-field.
    #[arg(long, value_enum, default_value = "cl100k")]
    tokenizer: TokenizerArg,
    /// Number of shards (contiguous runs of documents), at least 1.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    shards: u64,
    /// Element type: auto = u16 when every id < 65,536, else u32.
    #[arg(long, value_enum, default_value = "auto")]
    dtype: DtypeArg,
    /// Add the documents to the existing storage in --out (same fields and tokenizer), in new
    /// shards after its last one. Without it an existing storage is an error.
    #[arg(long)]
    append: bool,
    /// Input JSON Lines files.
    #[arg(required = true)]
    files: Vec<PathBuf>,
}

#[derive(clap::Args, Debug)]
struct InspectArgs {
    /// Storage directory.
    dir: PathBuf,
    /// Recompute every shard's checksum; exit non-zero naming the first bad shard.
    #[arg(long)]
    verify: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Ok(v) = std::env::var(guideloom::storage::IO_ENV_VAR) {
        if v.parse::<guideloom::storage::BackendKind>().is_err() {
            eprintln!(
                "warning: {}={v:?} is not one of auto, pread, io_uring, mmap; using auto",
                guideloom::storage::IO_ENV_VAR
            );
        }
    }
    let result = match cli.command {
        Command::Ingest(IngestCommand::Text(a)) => ingest_text(a),
        Command::Ingest(IngestCommand::Jsonl(a)) => ingest_jsonl(a),
        Command::Inspect(a) => inspect(a),
        Command::Batches(a) => batches(a),
        Command::Bench(a) => bench(a),
        Command::Demo(a) => demo::run(a.corpus, a.workdir),
        Command::Oam(c) => oam(c),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // A closed stdout (`| head`) ends the output; it is not a failure.
        Err(e)
            if e.downcast_ref::<std::io::Error>()
                .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) =>
        {
            ExitCode::SUCCESS
        }
        Err(e) => {
            let mut msg = e.to_string();
            let mut src = e.source();
            while let Some(s) = src {
                let s_msg = s.to_string();
                if !msg.contains(&s_msg) {
                    msg.push_str(": ");
                    msg.push_str(&s_msg);
                }
                src = s.source();
            }
            eprintln!("error: {msg}");
            ExitCode::FAILURE
        }
    }
}

fn ingest_text(a: IngestTextArgs) -> CliResult {
    let opts = IngestOptions {
        tokenizer: a.tokenizer.into(),
        split: match a.split {
            SplitArg::File => Split::File,
            SplitArg::BlankLine => Split::BlankLine,
            SplitArg::Line => Split::Line,
        },
        eos: a.eos,
        shards: a.shards,
        dtype: a.dtype.into(),
        doc_meta: a.doc_meta,
        append: a.append,
        progress: true,
    };
    let r = ingest::ingest_text(&a.out, &a.paths, &opts)?;
    print_report(&a.out, &r);
    Ok(())
}

fn ingest_jsonl(a: IngestJsonlArgs) -> CliResult {
    let field = match (a.tokens_field, a.text_field) {
        (Some(f), _) => JsonlField::Tokens(f),
        (None, Some(f)) => JsonlField::Text(f, a.tokenizer.into()),
        (None, None) => return Err("one of --tokens-field or --text-field is required".into()),
    };
    let write = ingest::WriteOptions {
        shards: a.shards,
        dtype: a.dtype.into(),
        target: ingest::Target::Stream,
        append: a.append,
        progress: true,
    };
    let r = ingest::ingest_jsonl(&a.out, &a.files, &field, &write)?;
    print_report(&a.out, &r);
    Ok(())
}

fn print_report(out: &std::path::Path, r: &ingest::IngestReport) {
    eprintln!(
        "wrote {}: {} documents, {} tokens ({}), {} shards, from {} input bytes",
        out.display(),
        r.documents,
        r.tokens,
        r.dtype,
        r.shards,
        r.input_bytes
    );
}

/// The summary `inspect --json` prints.
fn summary(dir: &std::path::Path, m: &Manifest) -> CliResult<Value> {
    fn sum(dir: &std::path::Path, it: impl Iterator<Item = u64>) -> CliResult<u64> {
        let mut total = 0u64;
        for v in it {
            total = total
                .checked_add(v)
                .ok_or_else(|| format!("{}: the manifest's counts or sizes overflow u64", dir.display()))?;
        }
        Ok(total)
    }
    let elements = sum(dir, m.shards().iter().filter_map(|s| s.elements))?;
    let documents: Option<u64> = match m.kind() {
        StorageKind::Document => Some(sum(dir, m.shards().iter().filter_map(|s| s.documents))?),
        _ => m.metadata().get("documents").and_then(Value::as_u64),
    };
    let files =
        m.shards().iter().flat_map(|s| std::iter::once(s.bytes).chain(s.files.values().map(|f| f.bytes)));
    let bytes = sum(dir, files)?;
    let shards: Vec<Value> = m
        .shards()
        .iter()
        .map(|s| {
            let mut o = json!({"id": s.id, "bytes": s.bytes, "checksum": format!("{:08x}", s.checksum)});
            if let Some(e) = s.elements {
                o["elements"] = json!(e);
            }
            if let Some(d) = s.documents {
                o["documents"] = json!(d);
            }
            o
        })
        .collect();
    Ok(json!({
        "path": dir.display().to_string(),
        "kind": m.kind().as_str(),
        "dtype": m.dtype_descr(),
        "format": m.format(),
        "elements": elements,
        "documents": documents,
        "bytes": bytes,
        "shards": shards,
        "metadata": m.metadata(),
        "fingerprint": format!("{:016x}", m.fingerprint()),
    }))
}

fn inspect(a: InspectArgs) -> CliResult {
    if !a.dir.is_dir() {
        return Err(format!("{} is not a directory", a.dir.display()).into());
    }
    let m = Manifest::load(&a.dir)?;
    let mut s = summary(&a.dir, &m)?;
    let verified = if a.verify { Some(storage::verify(&a.dir)) } else { None };
    if a.json {
        if let Some(v) = &verified {
            s["verified"] = json!(v.is_ok());
        }
        outln!("{s}");
    } else {
        outln!("storage   {}", a.dir.display());
        outln!("kind      {}", s["kind"].as_str().unwrap_or("?"));
        match m.dtype() {
            Some(d) => outln!("dtype     {d}"),
            None => outln!("dtype     {}", m.dtype_descr()),
        }
        outln!("format    {} {}", m.format().name, m.format().params);
        outln!("elements  {}", s["elements"]);
        if let Some(d) = s["documents"].as_u64() {
            outln!("documents {d}");
        }
        outln!("bytes     {}", s["bytes"]);
        outln!("shards    {}", m.shards().len());
        for sh in m.shards() {
            let count = match (sh.elements, sh.documents) {
                (Some(e), _) => format!("{e} elements"),
                (None, Some(d)) => format!("{d} documents"),
                _ => String::new(),
            };
            outln!("  shard {:>5}  {count:>18}  {:>14} bytes  crc32c {:08x}", sh.id, sh.bytes, sh.checksum);
        }
        if !m.metadata().is_empty() {
            outln!("metadata  {}", Value::Object(m.metadata().clone()));
        }
    }
    match verified {
        Some(Ok(r)) => {
            eprintln!(
                "verified {} shards, {} files, {} bytes: all checksums match",
                r.shards, r.files, r.bytes
            );
            Ok(())
        }
        Some(Err(e)) => Err(Box::new(e)),
        None => Ok(()),
    }
}

fn loader_args(
    w: WindowArgs,
    epochs: Option<u64>,
    rank: u64,
    world_size: u64,
    drop_remainder: bool,
) -> run::LoaderArgs {
    run::LoaderArgs {
        dir: w.dir,
        seq_len: w.seq_len,
        stride: w.stride,
        batch_size: w.batch_size,
        shuffle: w.shuffle,
        seed: w.seed,
        epochs,
        workers: w.workers,
        prefetch: w.prefetch,
        rank,
        world_size,
        drop_remainder,
        backend: w.backend,
    }
}

fn batches(a: BatchesArgs) -> CliResult {
    let b = run::Batches {
        args: loader_args(a.window, Some(a.epochs), a.rank, a.world_size, a.drop_remainder),
        max_batches: a.max_batches,
        save_state: a.save_state,
        resume: a.resume,
        no_tokens: a.no_tokens,
    };
    run::with_source(&b.args, &b)
}

fn bench(a: BenchArgs) -> CliResult {
    if let Some(t) = a.seconds {
        if !(t.is_finite() && t > 0.0 && t <= 1e6) {
            return Err(format!("--seconds must be a positive number of seconds up to 1e6, got {t}").into());
        }
    }
    if a.max_batches == Some(0) {
        return Err("--max-batches must be at least 1".into());
    }
    let b = run::Bench {
        args: loader_args(a.window, Some(1), 0, 1, false),
        seconds: a.seconds,
        max_batches: a.max_batches,
        json: a.json,
    };
    let t = b.run()?;
    if t.batches == 0 {
        return Err(format!(
            "no batch to measure: {} holds no window of {} tokens for this configuration",
            b.args.dir.display(),
            b.args.seq_len
        )
        .into());
    }
    let backend = run::read_options(b.args.backend)?.backend.name();
    let extra = json!({"backend": backend, "workers": b.args.workers, "seq_len": b.args.seq_len, "batch_size": b.args.batch_size});
    if b.json {
        outln!("{}", t.to_json(extra));
    } else {
        outln!(
            "{} batches, {} windows, {} tokens in {:.3} s: {:.0} windows/s, {:.1} M tokens/s, {:.1} MB/s; first batch after {:.2} ms ({backend}, {} workers)",
            t.batches,
            t.windows,
            t.tokens,
            t.seconds,
            t.windows as f64 / t.seconds,
            t.tokens as f64 / t.seconds / 1e6,
            t.bytes as f64 / t.seconds / 1e6,
            t.first_batch_seconds * 1e3,
            b.args.workers
        );
    }
    Ok(())
}

/// Read options for a `--backend` value. `auto` follows `GUIDELOOM_IO` (parsed by the
/// storage crate's `BackendKind`): the library honours `pread` and `io_uring`, and this tool
/// honours `mmap` itself, as it does `--backend mmap`.
pub(crate) fn backend_options(b: BackendArg) -> CliResult<guideloom::storage::ReadOptions> {
    use guideloom::storage::{
        AutoBackend, BackendKind, MmapBackend, PreadBackend, ReadBackend, ReadOptions, UringBackend,
        IO_ENV_VAR,
    };
    use std::sync::Arc;
    let env = std::env::var(IO_ENV_VAR).ok().and_then(|v| v.parse::<BackendKind>().ok());
    let backend: Arc<dyn ReadBackend> = match b {
        // Honours GUIDELOOM_IO=pread|io_uring.
        BackendArg::Auto if env != Some(BackendKind::Mmap) => Arc::new(AutoBackend::new()),
        BackendArg::IoUring => Arc::new(UringBackend::new()?),
        BackendArg::Pread => Arc::new(PreadBackend),
        // `--backend mmap`, or `GUIDELOOM_IO=mmap` with the default `--backend auto`.
        BackendArg::Auto | BackendArg::Mmap => {
            // SAFETY: `MmapBackend::new` requires that no process truncates or rewrites a
            // mapped shard file while this process reads it (else SIGBUS, or bytes changing
            // under shared slices). The user asked for mmap by name, which this tool's help
            // documents as accepting that contract. guideloom's own writers only append past
            // the committed bytes and publish through the manifest, which live maps tolerate,
            // and this tool does not write the storage it reads.
            Arc::new(unsafe { MmapBackend::new() })
        }
    };
    Ok(ReadOptions::default().with_backend(backend))
}

fn read_json(p: &std::path::Path) -> CliResult<Value> {
    let text = std::fs::read(p).map_err(|e| format!("cannot read {}: {e}", p.display()))?;
    serde_json::from_slice(&text).map_err(|e| format!("{} is not valid JSON: {e}", p.display()).into())
}

fn oam(c: OamCommand) -> CliResult {
    use guideloom::formats::oamap;
    match c {
        OamCommand::Fromdata { schema, data, out } => {
            let (schema, data) = (read_json(&schema)?, read_json(&data)?);
            match out {
                Some(path) => {
                    let bytes = oamap::oam_fromdata_npz(&schema, &data)?;
                    std::fs::write(&path, bytes)
                        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
                }
                None => outln!("{}", oamap::oam_fromdata_json(&schema, &data)?),
            }
        }
        OamCommand::Read { npz, schema, arrays, index } => {
            let value = match (npz, schema, arrays) {
                (Some(p), _, _) => {
                    let bytes = std::fs::read(&p).map_err(|e| format!("cannot read {}: {e}", p.display()))?;
                    oamap::oam_read_npz(bytes, index)?
                }
                (None, Some(s), Some(a)) => oamap::oam_read_json(&read_json(&s)?, &read_json(&a)?, index)?,
                _ => return Err("give an .npz file, or --schema and --arrays".into()),
            };
            outln!("{value}");
        }
    }
    Ok(())
}
