//! Ingestion of real text and token files into stream storages: the library behind
//! `guideloom ingest`.
//!
//! Text is split into documents (whole files, blank-line-separated blocks, or lines),
//! tokenized in parallel with one of the BPE vocabularies `tiktoken-rs` embeds (no download),
//! and written as a token stream: the stream equals the documents' tokens concatenated in
//! input order, whatever the number of shards (each shard holds a contiguous run of
//! documents).

use std::fs;
use std::io::BufRead;
use std::path::{Path, PathBuf};

use guideloom_formats::{DocumentTokensFormat, TokenDocument, TokenElement, TokenFormat};
use guideloom_storage::{StorageError, StreamWithMetaWriter, StreamWriter};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rayon::prelude::*;
use serde_json::{json, Value};

/// Errors of ingestion (and of the other facade helpers).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IngestError {
    /// Reading an input file failed.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The input file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// An input file is not UTF-8 text.
    #[error("{path} is not valid UTF-8 text (byte {offset})")]
    NotUtf8 {
        /// The input file.
        path: PathBuf,
        /// Byte offset of the first invalid sequence.
        offset: u64,
    },
    /// A JSON Lines input line is malformed or lacks the field.
    #[error("{path} line {line}: {reason}")]
    BadJsonl {
        /// The input file.
        path: PathBuf,
        /// 1-based line number.
        line: u64,
        /// What is wrong.
        reason: String,
    },
    /// A token id does not fit the requested element type.
    #[error("token id {id} in document {document} ({source_name}) does not fit --dtype {dtype}")]
    TokenTooLarge {
        /// The id.
        id: u64,
        /// 0-based ordinal of the document in input order.
        document: u64,
        /// Where the document came from (path, and line for JSON Lines).
        source_name: String,
        /// The requested element type (`u16` or `u32`).
        dtype: &'static str,
    },
    /// The tokenizer could not be loaded.
    #[error("tokenizer {name}: {reason}")]
    Tokenizer {
        /// Tokenizer name.
        name: &'static str,
        /// Why it failed.
        reason: String,
    },
    /// The output directory already holds a storage and appending was not asked for.
    #[error("{path} already holds a guideloom storage; pass --append to add documents to it, or choose another --out")]
    Exists {
        /// The output directory.
        path: PathBuf,
    },
    /// Appending would mix incompatible data (another tokenizer, split or end-of-text rule).
    #[error("cannot append to {path}: it was written with {field} = {existing}, this ingest uses {new}")]
    AppendMismatch {
        /// The output directory.
        path: PathBuf,
        /// The metadata field that differs.
        field: String,
        /// Its value in the storage (`none` when absent).
        existing: String,
        /// Its value for this ingest.
        new: String,
    },
    /// A caller argument is invalid.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// No input file was found.
    #[error("no input files found in {0:?}")]
    NoInput(Vec<PathBuf>),
    /// Writing the storage failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// A BPE vocabulary embedded by `tiktoken-rs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Tokenizer {
    /// `cl100k_base` (GPT-3.5/4; ids < 100,277; end of text 100,257).
    Cl100k,
    /// `o200k_base` (GPT-4o; ids < 200,019; end of text 199,999).
    O200k,
    /// `r50k_base`, GPT-2's vocabulary (ids < 50,257; end of text 50,256).
    Gpt2,
}

impl Tokenizer {
    /// The name used on the command line and in manifests (`cl100k`, `o200k`, `gpt2`).
    pub fn name(self) -> &'static str {
        match self {
            Tokenizer::Cl100k => "cl100k",
            Tokenizer::O200k => "o200k",
            Tokenizer::Gpt2 => "gpt2",
        }
    }

    /// Parses a command-line name.
    pub fn from_name(s: &str) -> Option<Self> {
        match s {
            "cl100k" | "cl100k_base" => Some(Tokenizer::Cl100k),
            "o200k" | "o200k_base" => Some(Tokenizer::O200k),
            "gpt2" | "r50k" | "r50k_base" => Some(Tokenizer::Gpt2),
            _ => None,
        }
    }

    /// The id of `<|endoftext|>`.
    pub fn eos_id(self) -> u32 {
        match self {
            Tokenizer::Cl100k => 100_257,
            Tokenizer::O200k => 199_999,
            Tokenizer::Gpt2 => 50_256,
        }
    }

    /// Loads the embedded vocabulary (no network access).
    ///
    /// # Errors
    /// [`IngestError::Tokenizer`] if the embedded ranks fail to load.
    pub fn load(self) -> Result<tiktoken_rs::CoreBPE, IngestError> {
        let r = match self {
            Tokenizer::Cl100k => tiktoken_rs::cl100k_base(),
            Tokenizer::O200k => tiktoken_rs::o200k_base(),
            Tokenizer::Gpt2 => tiktoken_rs::r50k_base(),
        };
        r.map_err(|e| IngestError::Tokenizer { name: self.name(), reason: e.to_string() })
    }
}

/// How text files are cut into documents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Split {
    /// One document per file (default), its whole text.
    #[default]
    File,
    /// Blocks separated by one or more blank (whitespace-only) lines; each block's lines are
    /// joined with `\n`; empty blocks are skipped.
    BlankLine,
    /// One document per non-empty line (without its line terminator).
    Line,
}

impl Split {
    /// The command-line name (`file`, `blank-line`, `line`).
    pub fn name(self) -> &'static str {
        match self {
            Split::File => "file",
            Split::BlankLine => "blank-line",
            Split::Line => "line",
        }
    }
}

/// The stored element type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DtypeChoice {
    /// `u16` when every id is below 65,536, else `u32` (default).
    #[default]
    Auto,
    /// `u16`; an id of 65,536 or more is an error naming it and its document.
    U16,
    /// `u32`.
    U32,
}

/// Options of [`ingest_text`] (and, for `shards`/`dtype`/`progress`, [`ingest_jsonl`]).
#[derive(Debug, Clone)]
pub struct IngestOptions {
    /// Vocabulary (default cl100k).
    pub tokenizer: Tokenizer,
    /// Document split (default one document per file).
    pub split: Split,
    /// Append the end-of-text id after every document (default off).
    pub eos: bool,
    /// Number of shards, at least 1 (default 1); each holds a contiguous run of documents.
    pub shards: u64,
    /// Element type (default auto).
    pub dtype: DtypeChoice,
    /// Write a stream-with-meta storage ([`DocumentTokensFormat`]) whose runs are the
    /// documents, each payload holding the document ordinal and its source (default off).
    pub doc_meta: bool,
    /// Add the documents to an existing storage of the same tokenizer/split/eos settings, in
    /// new shards after its last one (default off: an existing storage is an error).
    pub append: bool,
    /// Show a progress bar on stderr (hidden anyway when stderr is not a terminal).
    pub progress: bool,
}

impl Default for IngestOptions {
    fn default() -> Self {
        IngestOptions {
            tokenizer: Tokenizer::Cl100k,
            split: Split::File,
            eos: false,
            shards: 1,
            dtype: DtypeChoice::Auto,
            doc_meta: false,
            append: false,
            progress: false,
        }
    }
}

/// What an ingestion wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IngestReport {
    /// Documents written.
    pub documents: u64,
    /// Tokens written (elements of the stream), a total.
    pub tokens: u64,
    /// Input bytes read (text or JSON Lines), a total.
    pub input_bytes: u64,
    /// The element type chosen (`"u16"` or `"u32"`).
    pub dtype: &'static str,
    /// Shards written.
    pub shards: u64,
}

/// One document ready to write.
#[derive(Debug, Clone)]
pub struct Document {
    /// Where it came from (a path, with `:line` for lines and JSON Lines).
    pub source: String,
    /// Its token ids.
    pub tokens: Vec<u32>,
}

/// Input files of `paths`: files as given, directories walked recursively; sorted by path
/// (per argument, arguments kept in order).
///
/// # Errors
/// [`IngestError::Read`] when a path cannot be listed; [`IngestError::NoInput`] when nothing
/// is found.
pub fn collect_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, IngestError> {
    fn walk(p: &Path, out: &mut Vec<PathBuf>) -> Result<(), IngestError> {
        let meta = fs::metadata(p).map_err(|source| IngestError::Read { path: p.to_path_buf(), source })?;
        if meta.is_dir() {
            let mut entries: Vec<PathBuf> = fs::read_dir(p)
                .map_err(|source| IngestError::Read { path: p.to_path_buf(), source })?
                .map(|e| e.map(|e| e.path()))
                .collect::<Result<_, _>>()
                .map_err(|source| IngestError::Read { path: p.to_path_buf(), source })?;
            entries.sort();
            for e in entries {
                walk(&e, out)?;
            }
        } else {
            out.push(p.to_path_buf());
        }
        Ok(())
    }
    let mut out = Vec::new();
    for p in paths {
        let mut files = Vec::new();
        walk(p, &mut files)?;
        files.sort();
        out.extend(files);
    }
    if out.is_empty() {
        return Err(IngestError::NoInput(paths.to_vec()));
    }
    Ok(out)
}

/// Splits `text` into documents as `split` says; returns `(source suffix, text)` pairs.
pub fn split_text(text: &str, split: Split) -> Vec<(String, String)> {
    match split {
        Split::File => vec![(String::new(), text.to_string())],
        Split::Line => text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(i, l)| (format!(":{}", i + 1), l.to_string()))
            .collect(),
        Split::BlankLine => {
            let mut out = Vec::new();
            let mut block: Vec<&str> = Vec::new();
            let mut start = 0;
            for (i, line) in text.lines().enumerate() {
                if line.trim().is_empty() {
                    if !block.is_empty() {
                        out.push((format!(":{}", start + 1), block.join("\n")));
                        block.clear();
                    }
                } else {
                    if block.is_empty() {
                        start = i;
                    }
                    block.push(line);
                }
            }
            if !block.is_empty() {
                out.push((format!(":{}", start + 1), block.join("\n")));
            }
            out
        }
    }
}

fn progress_bar(enabled: bool, total_bytes: u64) -> ProgressBar {
    let target = if enabled { ProgressDrawTarget::stderr() } else { ProgressDrawTarget::hidden() };
    let pb = ProgressBar::with_draw_target(Some(total_bytes), target);
    if let Ok(style) = ProgressStyle::with_template(
        "{spinner} {msg} [{bar:30}] {bytes}/{total_bytes} ({bytes_per_sec}, {eta})",
    ) {
        pb.set_style(style.progress_chars("=> "));
    }
    pb
}

fn read_text(path: &Path) -> Result<String, IngestError> {
    let bytes = fs::read(path).map_err(|source| IngestError::Read { path: path.to_path_buf(), source })?;
    String::from_utf8(bytes).map_err(|e| IngestError::NotUtf8 {
        path: path.to_path_buf(),
        offset: e.utf8_error().valid_up_to() as u64,
    })
}

/// Tokenizes the text files under `paths` into the stream storage `out`.
///
/// Files are read in [`collect_files`] order, split per [`IngestOptions::split`], tokenized
/// in parallel (rayon) with `encode_ordinary` (special-token text is treated as ordinary
/// text), optionally followed by the end-of-text id, and written in input order. The
/// manifest's metadata records the tokenizer, split, eos flag and document count.
///
/// # Errors
/// Input errors ([`IngestError::Read`], [`IngestError::NotUtf8`]),
/// [`IngestError::TokenTooLarge`] for `--dtype u16` with a larger id, storage errors.
pub fn ingest_text(out: &Path, paths: &[PathBuf], opts: &IngestOptions) -> Result<IngestReport, IngestError> {
    let files = collect_files(paths)?;
    let total_bytes: u64 = files.iter().map(|f| fs::metadata(f).map(|m| m.len()).unwrap_or(0)).sum();
    let pb = progress_bar(opts.progress, total_bytes);
    pb.set_message("tokenizing");
    let bpe = opts.tokenizer.load()?;
    let mut raw_docs = Vec::new();
    for f in &files {
        let text = read_text(f)?;
        for (suffix, doc) in split_text(&text, opts.split) {
            raw_docs.push((format!("{}{suffix}", f.display()), doc));
        }
    }
    let eos = opts.eos.then(|| opts.tokenizer.eos_id());
    let docs: Vec<Document> = raw_docs
        .into_par_iter()
        .map(|(source, text)| {
            let mut tokens = bpe.encode_ordinary(&text);
            tokens.extend(eos);
            pb.inc(text.len() as u64);
            Document { source, tokens }
        })
        .collect();
    pb.finish_and_clear();
    let meta = json!({
        "tokenizer": opts.tokenizer.name(),
        "split": opts.split.name(),
        "eos": opts.eos,
        "eos_id": opts.tokenizer.eos_id(),
    });
    let write = WriteOptions {
        shards: opts.shards,
        dtype: opts.dtype,
        target: if opts.doc_meta { Target::DocMeta } else { Target::Stream },
        append: opts.append,
        progress: opts.progress,
    };
    write_documents(out, &docs, total_bytes, meta, &write)
}

/// How [`write_documents`] writes.
#[derive(Debug, Clone, Copy)]
pub struct WriteOptions {
    /// Number of new shards, at least 1; each holds a contiguous run of documents.
    pub shards: u64,
    /// Element type.
    pub dtype: DtypeChoice,
    /// Storage kind.
    pub target: Target,
    /// Add to an existing storage (new shards after its last one, document ordinals
    /// continuing its count) instead of refusing it.
    pub append: bool,
    /// Show progress bars on stderr.
    pub progress: bool,
}

/// The storage kind [`write_documents`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// A token stream storage ([`TokenFormat`]).
    Stream,
    /// A stream-with-meta storage ([`DocumentTokensFormat`]) whose runs are the documents;
    /// each payload is the document's ordinal and its source (path, `:line` for lines).
    DocMeta,
}

/// Options of [`ingest_jsonl`].
#[derive(Debug, Clone)]
pub enum JsonlField {
    /// The field holds a list of token ids.
    Tokens(String),
    /// The field holds text to tokenize with the given vocabulary.
    Text(String, Tokenizer),
}

/// Ingests JSON Lines files: each non-empty line an object whose field is a list of token ids
/// (or a text to tokenize) = one document. `write.target` must be [`Target::Stream`] for token
/// ids; both targets work.
///
/// # Errors
/// [`IngestError::BadJsonl`] naming file and line for malformed lines, missing fields or ids
/// that are not non-negative integers below 2^32; [`IngestError::TokenTooLarge`]; storage
/// errors.
pub fn ingest_jsonl(
    out: &Path,
    files: &[PathBuf],
    field: &JsonlField,
    write: &WriteOptions,
) -> Result<IngestReport, IngestError> {
    let bpe = match field {
        JsonlField::Text(_, t) => Some(t.load()?),
        JsonlField::Tokens(_) => None,
    };
    let mut docs = Vec::new();
    let mut total_bytes = 0u64;
    for path in files {
        let f = fs::File::open(path).map_err(|source| IngestError::Read { path: path.clone(), source })?;
        for (i, line) in std::io::BufReader::new(f).lines().enumerate() {
            let line = line.map_err(|source| {
                if source.kind() == std::io::ErrorKind::InvalidData {
                    IngestError::BadJsonl {
                        path: path.clone(),
                        line: i as u64 + 1,
                        reason: "not valid UTF-8".into(),
                    }
                } else {
                    IngestError::Read { path: path.clone(), source }
                }
            })?;
            total_bytes += line.len() as u64 + 1;
            if line.trim().is_empty() {
                continue;
            }
            let bad =
                |reason: String| IngestError::BadJsonl { path: path.clone(), line: i as u64 + 1, reason };
            let v: Value = serde_json::from_str(&line).map_err(|e| bad(e.to_string()))?;
            let source = format!("{}:{}", path.display(), i + 1);
            let tokens = match field {
                JsonlField::Tokens(name) => {
                    let list = v.get(name).and_then(Value::as_array).ok_or_else(|| {
                        bad(format!("field {name:?} is missing or not a list of token ids"))
                    })?;
                    list.iter()
                        .enumerate()
                        .map(|(j, id)| {
                            id.as_u64().and_then(|x| u32::try_from(x).ok()).ok_or_else(|| {
                                bad(format!(
                                    "token {j} of field {name:?} is {id}, not an integer in [0, 2^32)"
                                ))
                            })
                        })
                        .collect::<Result<Vec<u32>, _>>()?
                }
                JsonlField::Text(name, _) => {
                    let text = v
                        .get(name)
                        .and_then(Value::as_str)
                        .ok_or_else(|| bad(format!("field {name:?} is missing or not a string")))?;
                    bpe.as_ref().map(|b| b.encode_ordinary(text)).unwrap_or_default()
                }
            };
            docs.push(Document { source, tokens });
        }
    }
    let meta = match field {
        JsonlField::Tokens(f) => json!({"source": "jsonl", "tokens_field": f}),
        JsonlField::Text(f, t) => json!({"source": "jsonl", "text_field": f, "tokenizer": t.name()}),
    };
    write_documents(out, &docs, total_bytes, meta, write)
}

/// Index of the first document of each shard: contiguous runs balanced by token count.
pub fn shard_starts(docs: &[Document], shards: u64) -> Vec<usize> {
    let shards = shards.max(1) as usize;
    let total: u64 = docs.iter().map(|d| d.tokens.len() as u64).sum();
    let mut starts = vec![0usize];
    let mut acc = 0u64;
    for (i, d) in docs.iter().enumerate() {
        let k = starts.len();
        if k < shards && acc >= total * k as u64 / shards as u64 && i > *starts.last().unwrap_or(&0) {
            starts.push(i);
        }
        acc += d.tokens.len() as u64;
    }
    while starts.len() < shards {
        starts.push(docs.len());
    }
    starts
}

/// Writes documents as a token storage (see [`ingest_text`]). `meta` (a JSON object) goes to
/// the manifest's user metadata, with `documents` set to the storage's document count.
///
/// An existing storage at `out` is refused unless `write.append`; appending requires the
/// same metadata values (tokenizer, split, end-of-text rule ...) and the same kind, writes new
/// shards after the last existing one, continues document ordinals, and keeps the existing
/// element type (`auto` picks it).
///
/// # Errors
/// [`IngestError::Exists`], [`IngestError::AppendMismatch`],
/// [`IngestError::TokenTooLarge`], [`IngestError::InvalidArgument`] for zero shards, storage
/// errors.
pub fn write_documents(
    out: &Path,
    docs: &[Document],
    input_bytes: u64,
    mut meta: Value,
    write: &WriteOptions,
) -> Result<IngestReport, IngestError> {
    if write.shards == 0 {
        return Err(IngestError::InvalidArgument("the number of shards must be at least 1".into()));
    }
    let existing = match guideloom_storage::Manifest::load(out) {
        Ok(m) => Some(m),
        Err(StorageError::NotAStorage { .. }) => None,
        Err(e) => return Err(e.into()),
    };
    let (first_shard, first_ordinal, existing_dtype) = match &existing {
        None => (0, 0, None),
        Some(_) if !write.append => return Err(IngestError::Exists { path: out.to_path_buf() }),
        Some(m) => {
            if let Value::Object(new) = &meta {
                for (k, v) in new {
                    let old = m.metadata().get(k);
                    if old != Some(v) {
                        return Err(IngestError::AppendMismatch {
                            path: out.to_path_buf(),
                            field: k.clone(),
                            existing: old.map_or_else(|| "none".to_string(), Value::to_string),
                            new: v.to_string(),
                        });
                    }
                }
            }
            let next = m.shards().last().map_or(Some(0), |s| s.id.checked_add(1)).ok_or_else(|| {
                IngestError::InvalidArgument("the storage's last shard id is u64::MAX".into())
            })?;
            let documents = m.metadata().get("documents").and_then(Value::as_u64).unwrap_or(0);
            (next, documents, Some(m.dtype_descr().clone()))
        }
    };
    let (shards, dtype, progress, target) = (write.shards, write.dtype, write.progress, write.target);
    let too_large = |limit: u64, dtype: &'static str| {
        docs.iter().enumerate().find_map(|(i, d)| {
            d.tokens.iter().find(|&&t| u64::from(t) > limit).map(|&t| IngestError::TokenTooLarge {
                id: u64::from(t),
                document: i as u64,
                source_name: d.source.clone(),
                dtype,
            })
        })
    };
    let use_u16 = match dtype {
        DtypeChoice::U16 => match too_large(u64::from(u16::MAX), "u16") {
            Some(e) => return Err(e),
            None => true,
        },
        DtypeChoice::U32 => false,
        DtypeChoice::Auto => match existing_dtype.as_ref().and_then(Value::as_str) {
            Some("<u2") => match too_large(u64::from(u16::MAX), "u16") {
                Some(e) => return Err(e),
                None => true,
            },
            Some(_) => false,
            None => too_large(u64::from(u16::MAX), "u16").is_none(),
        },
    };
    if let Value::Object(m) = &mut meta {
        m.insert("documents".into(), json!(first_ordinal + docs.len() as u64));
    }
    let starts = shard_starts(docs, shards);
    let place = Placement { starts: &starts, first_shard, first_ordinal };
    let pb = progress_bar(progress, docs.len() as u64);
    pb.set_message("writing documents");
    let tokens = match (target, use_u16) {
        (Target::Stream, true) => write_typed::<u16>(out, docs, &place, meta, &pb)?,
        (Target::Stream, false) => write_typed::<u32>(out, docs, &place, meta, &pb)?,
        (Target::DocMeta, true) => write_doc_meta::<u16>(out, docs, &place, meta, &pb)?,
        (Target::DocMeta, false) => write_doc_meta::<u32>(out, docs, &place, meta, &pb)?,
    };
    pb.finish_and_clear();
    Ok(IngestReport {
        documents: docs.len() as u64,
        tokens,
        input_bytes,
        dtype: if use_u16 { "u16" } else { "u32" },
        shards: starts.len() as u64,
    })
}

/// Where documents go: `starts[s]` = index of the first document of new shard `s`, whose id
/// is `first_shard + s`; document `i` gets ordinal `first_ordinal + i`.
struct Placement<'a> {
    starts: &'a [usize],
    first_shard: u64,
    first_ordinal: u64,
}

/// Appends the documents shard by shard (every shard is created, even when it receives no
/// document) through `append(shard, document)`, where `None` creates the shard; returns the
/// tokens written.
fn fill_shards(
    docs: &[Document],
    place: &Placement<'_>,
    pb: &ProgressBar,
    mut append: impl FnMut(u64, Option<(u64, &Document)>) -> Result<u64, StorageError>,
) -> Result<u64, IngestError> {
    let mut total = 0;
    for (s, &start) in place.starts.iter().enumerate() {
        let end = place.starts.get(s + 1).copied().unwrap_or(docs.len());
        let shard = place.first_shard + s as u64;
        append(shard, None)?;
        for (i, d) in docs.iter().enumerate().take(end).skip(start) {
            total += append(shard, Some((place.first_ordinal + i as u64, d)))?;
            pb.inc(1);
        }
    }
    Ok(total)
}

fn metadata_entries(meta: Value) -> impl Iterator<Item = (String, Value)> {
    match meta {
        Value::Object(m) => m.into_iter().collect::<Vec<_>>(),
        _ => Vec::new(),
    }
    .into_iter()
}

fn write_typed<E: TokenElement>(
    out: &Path,
    docs: &[Document],
    place: &Placement<'_>,
    meta: Value,
    pb: &ProgressBar,
) -> Result<u64, IngestError> {
    let mut w = StreamWriter::open(out, TokenFormat::<E, u32>::new())?;
    for (k, v) in metadata_entries(meta) {
        w.set_metadata(k, v);
    }
    let total =
        fill_shards(docs, place, pb, |shard, doc| w.append(shard, doc.map_or(&[][..], |(_, d)| &d.tokens)))?;
    w.commit()?;
    Ok(total)
}

fn write_doc_meta<E: TokenElement>(
    out: &Path,
    docs: &[Document],
    place: &Placement<'_>,
    meta: Value,
    pb: &ProgressBar,
) -> Result<u64, IngestError> {
    let mut w = StreamWithMetaWriter::open(out, DocumentTokensFormat::<E, u32>::new())?;
    for (k, v) in metadata_entries(meta) {
        w.set_metadata(k, v);
    }
    let total = fill_shards(docs, place, pb, |shard, doc| match doc {
        None => w.append(shard, &[]),
        Some((ordinal, d)) => {
            let doc = TokenDocument { ordinal, tokens: d.tokens.clone(), data: d.source.as_bytes().to_vec() };
            w.append(shard, std::slice::from_ref(&doc))
        }
    })?;
    w.commit()?;
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_modes() {
        let t = "a b\nc\n\n \nd\n\n";
        assert_eq!(
            split_text(t, Split::Line),
            vec![(":1".into(), "a b".into()), (":2".into(), "c".into()), (":5".into(), "d".into())]
        );
        assert_eq!(
            split_text(t, Split::BlankLine),
            vec![(":1".into(), "a b\nc".into()), (":5".into(), "d".into())]
        );
        assert_eq!(split_text(t, Split::File), vec![(String::new(), t.to_string())]);
    }

    #[test]
    fn shards_are_contiguous_and_balanced() {
        let docs: Vec<Document> =
            (0..10).map(|i| Document { source: i.to_string(), tokens: vec![0; 10] }).collect();
        assert_eq!(shard_starts(&docs, 1), vec![0]);
        assert_eq!(shard_starts(&docs, 2), vec![0, 5]);
        assert_eq!(shard_starts(&docs, 3), vec![0, 4, 7]);
        assert_eq!(shard_starts(&docs[..1], 3), vec![0, 1, 1]);
        assert_eq!(shard_starts(&[], 2), vec![0, 0]);
    }
}
