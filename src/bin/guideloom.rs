//! The `guideloom` command-line tool: ingest, inspect, batches, bench, demo.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use guideloom::ingest::{self, DtypeChoice, IngestOptions, JsonlField, Split, Tokenizer};
use guideloom::storage::{self, Manifest, StorageKind};
use serde_json::{json, Value};

type CliResult<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

#[derive(Parser, Debug)]
#[command(name = "guideloom", version, about = "Deterministic, prefetched, checkpointable batches from sharded storage")]
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
    /// Number of shards (contiguous runs of documents).
    #[arg(long, default_value_t = 1)]
    shards: u64,
    /// Element type: auto = u16 when every id < 65,536, else u32.
    #[arg(long, value_enum, default_value = "auto")]
    dtype: DtypeArg,
    /// Write a stream-with-meta storage whose runs are documents (ordinal + source path).
    #[arg(long)]
    doc_meta: bool,
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
    /// Number of shards (contiguous runs of documents).
    #[arg(long, default_value_t = 1)]
    shards: u64,
    /// Element type: auto = u16 when every id < 65,536, else u32.
    #[arg(long, value_enum, default_value = "auto")]
    dtype: DtypeArg,
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
    let result = match cli.command {
        Command::Ingest(IngestCommand::Text(a)) => ingest_text(a),
        Command::Ingest(IngestCommand::Jsonl(a)) => ingest_jsonl(a),
        Command::Inspect(a) => inspect(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
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
    let r = ingest::ingest_jsonl(&a.out, &a.files, &field, a.shards, a.dtype.into(), true)?;
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
fn summary(dir: &std::path::Path, m: &Manifest) -> Value {
    let elements: u64 = m.shards.iter().filter_map(|s| s.elements).sum();
    let documents: Option<u64> = match m.kind {
        StorageKind::Document => Some(m.shards.iter().filter_map(|s| s.documents).sum()),
        _ => m.metadata.get("documents").and_then(Value::as_u64),
    };
    let bytes: u64 = m.shards.iter().map(|s| s.bytes + s.files.values().map(|f| f.bytes).sum::<u64>()).sum();
    let shards: Vec<Value> = m
        .shards
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
    json!({
        "path": dir.display().to_string(),
        "kind": m.kind.as_str(),
        "dtype": m.dtype,
        "format": m.format,
        "elements": elements,
        "documents": documents,
        "bytes": bytes,
        "shards": shards,
        "metadata": m.metadata,
        "fingerprint": format!("{:016x}", m.fingerprint()),
    })
}

fn inspect(a: InspectArgs) -> CliResult {
    let m = Manifest::load(&a.dir)?;
    let mut s = summary(&a.dir, &m);
    let verified = if a.verify { Some(storage::verify(&a.dir)) } else { None };
    if a.json {
        if let Some(v) = &verified {
            s["verified"] = json!(v.is_ok());
        }
        println!("{s}");
    } else {
        println!("storage   {}", a.dir.display());
        println!("kind      {}", s["kind"].as_str().unwrap_or("?"));
        println!("dtype     {}", m.dtype);
        println!("format    {} {}", m.format.name, m.format.params);
        println!("elements  {}", s["elements"]);
        if let Some(d) = s["documents"].as_u64() {
            println!("documents {d}");
        }
        println!("bytes     {}", s["bytes"]);
        println!("shards    {}", m.shards.len());
        for sh in &m.shards {
            let count = match (sh.elements, sh.documents) {
                (Some(e), _) => format!("{e} elements"),
                (None, Some(d)) => format!("{d} documents"),
                _ => String::new(),
            };
            println!("  shard {:>5}  {count:>18}  {:>14} bytes  crc32c {:08x}", sh.id, sh.bytes, sh.checksum);
        }
        if !m.metadata.is_empty() {
            println!("metadata  {}", Value::Object(m.metadata.clone()));
        }
    }
    match verified {
        Some(Ok(r)) => {
            eprintln!("verified {} shards, {} files, {} bytes: all checksums match", r.shards, r.files, r.bytes);
            Ok(())
        }
        Some(Err(e)) => Err(Box::new(e)),
        None => Ok(()),
    }
}
