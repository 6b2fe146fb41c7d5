//! Ingestion of real text and token files into stream storages: the library behind
//! `guideloom ingest`.
//!
//! Text is split into documents (whole files, blank-line-separated blocks, or lines),
//! tokenized in parallel with one of the BPE vocabularies `tiktoken-rs` embeds (no download),
//! and written as a token stream: the stream equals the documents' tokens concatenated in
//! input order, whatever the number of shards (each shard holds a contiguous run of
//! documents).
//!
//! The same files can be read without building a storage: [`JsonlShards`] and [`TextShards`]
//! are sequential sources (each file a shard, each document a record of token ids tokenized
//! as it is read) for the loader's `SequentialLoader`; [`ingest_sequential`] writes any such
//! source to a storage.

use std::fs;
use std::io::BufRead;
use std::path::{Path, PathBuf};

#[cfg(doc)]
use guideloom_formats::{DocumentTokensFormat, TokenFormat};
use guideloom_storage::StorageError;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rayon::prelude::*;
use serde_json::{json, Value};

mod sequential;
mod spill;
mod write;

pub use sequential::{ingest_sequential, JsonlReader, JsonlShards, TextReader, TextShards, READ_AHEAD_BYTES};

use spill::{CorpusStats, Spill};
use write::{check_output, write_corpus, ShardPlanner};

/// Text tokenized per parallel round, in bytes: ingest holds about this much text, its
/// tokens and one input file at a time, whatever the corpus size.
pub const CHUNK_BYTES: usize = 16 << 20;

/// Errors of ingestion (and of the other facade helpers).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IngestError {
    /// Reading an input file failed.
    #[error("cannot read {path}")]
    Read {
        /// The input file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// An input document (a JSON Lines line, a text line or blank-line block, or a whole-file
    /// document) is longer than [`MAX_DOCUMENT_BYTES`]; reading stopped there.
    #[error("{path} line {line}: a document longer than the {limit}-byte limit (a line, block or file this long is not read into memory)")]
    DocumentTooLarge {
        /// The input file.
        path: PathBuf,
        /// The 1-based line where the document starts (1 for a whole-file document; 0 from
        /// the sequential readers, which track byte offsets, not lines).
        line: u64,
        /// The limit in bytes ([`MAX_DOCUMENT_BYTES`]).
        limit: u64,
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
    /// A JSON Lines record read by a [`JsonlShards`] reader is malformed or lacks the field
    /// (named by its byte offset: a reader started mid-file does not know line numbers).
    #[error("{path} byte {offset}: {reason}")]
    BadJsonlRecord {
        /// The input file.
        path: PathBuf,
        /// Byte offset of the line's start.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// Reading a sequential source failed ([`ingest_sequential`]); the loader's error is the
    /// `source()`.
    #[error("reading the sequential source failed")]
    Sequential(#[source] guideloom_loader::LoaderError),
    /// A token id does not fit the requested element type.
    #[error("token id {id} in document {document} ({source_name}) does not fit the element type {dtype}")]
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
    /// The output directory cannot be created or listed.
    #[error("cannot create or list the output directory {path}")]
    Output {
        /// The output directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The output directory holds no storage but other files (ingest writes only into a new
    /// or empty directory, or a storage).
    #[error("{path} is not empty and holds no guideloom storage (it has {file:?}); choose a new or empty directory")]
    NotAStorageDirectory {
        /// The output directory.
        path: PathBuf,
        /// One of the files that are not a storage's.
        file: String,
    },
    /// The temporary file between tokenizing and writing failed.
    #[error("the temporary spill file in {path} failed")]
    Spill {
        /// The directory the spill file is in.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
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
    #[error("{path} already holds a guideloom storage and the `append` option is off")]
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
    #[error("writing the storage failed")]
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
    pub fn load(self) -> Result<Vocabulary, IngestError> {
        let r = match self {
            Tokenizer::Cl100k => tiktoken_rs::cl100k_base(),
            Tokenizer::O200k => tiktoken_rs::o200k_base(),
            Tokenizer::Gpt2 => tiktoken_rs::r50k_base(),
        };
        let bpe = r.map_err(|e| IngestError::Tokenizer { name: self.name(), reason: e.to_string() })?;
        Ok(Vocabulary { tokenizer: self, bpe })
    }
}

/// A loaded BPE vocabulary ([`Tokenizer::load`]): text to token ids and back. It wraps the
/// `tiktoken-rs` encoder, so that crate's version is not part of guideloom's API.
pub struct Vocabulary {
    tokenizer: Tokenizer,
    bpe: tiktoken_rs::CoreBPE,
}

impl std::fmt::Debug for Vocabulary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vocabulary").field("tokenizer", &self.tokenizer).finish_non_exhaustive()
    }
}

impl Vocabulary {
    /// The tokenizer this vocabulary belongs to.
    pub fn tokenizer(&self) -> Tokenizer {
        self.tokenizer
    }

    /// The token ids of `text`; special-token text (`<|endoftext|>`) is encoded as ordinary
    /// text.
    pub fn encode_ordinary(&self, text: &str) -> Vec<u32> {
        self.bpe.encode_ordinary(text)
    }

    /// The text of `ids`.
    ///
    /// # Errors
    /// [`IngestError::Tokenizer`] when an id is not in the vocabulary or the ids cut a UTF-8
    /// character.
    pub fn decode(&self, ids: &[u32]) -> Result<String, IngestError> {
        self.bpe
            .decode(ids)
            .map_err(|e| IngestError::Tokenizer { name: self.tokenizer.name(), reason: e.to_string() })
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
    /// The most bytes of one input document (a line, a blank-line block or a whole file);
    /// past it reading stops with [`IngestError::DocumentTooLarge`] naming the file and line
    /// (default [`MAX_DOCUMENT_BYTES`], 256 MiB).
    pub max_document_bytes: u64,
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
            max_document_bytes: MAX_DOCUMENT_BYTES,
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
/// A path given is taken as named (a link followed, `/dev/stdin` read). Inside a walked
/// directory only regular files and real directories are taken: symbolic links are skipped
/// (never followed, so a walk visits each real directory once, cannot loop and cannot reach
/// outside the tree), and a FIFO, socket or device is an error naming it (reading it could
/// block for ever or never end).
///
/// # Errors
/// [`IngestError::Read`] when a path cannot be listed, or names a FIFO, socket or device
/// found in a walked directory; [`IngestError::NoInput`] when nothing is found.
pub fn collect_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, IngestError> {
    fn walk(p: &Path, top: bool, out: &mut Vec<PathBuf>) -> Result<(), IngestError> {
        let read = |source| IngestError::Read { path: p.to_path_buf(), source };
        let kind = if top { fs::metadata(p) } else { fs::symlink_metadata(p) }.map_err(read)?.file_type();
        if kind.is_dir() {
            let mut entries: Vec<PathBuf> = fs::read_dir(p)
                .map_err(read)?
                .map(|e| e.map(|e| e.path()))
                .collect::<Result<_, _>>()
                .map_err(read)?;
            entries.sort();
            for e in entries {
                walk(&e, false, out)?;
            }
        } else if top || kind.is_file() {
            out.push(p.to_path_buf());
        } else if !kind.is_symlink() {
            return Err(read(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not a regular file (a FIFO, socket or device inside an input directory is not read)",
            )));
        }
        Ok(())
    }
    let mut out = Vec::new();
    for p in paths {
        let mut files = Vec::new();
        walk(p, true, &mut files)?;
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

fn progress_bar(enabled: bool, total: u64) -> ProgressBar {
    let target = if enabled { ProgressDrawTarget::stderr() } else { ProgressDrawTarget::hidden() };
    let pb = ProgressBar::with_draw_target(Some(total), target);
    if let Ok(style) = ProgressStyle::with_template(
        "{spinner} {msg} [{bar:30}] {bytes}/{total_bytes} ({bytes_per_sec}, {eta})",
    ) {
        pb.set_style(style.progress_chars("=> "));
    }
    pb
}

/// The default bound on one input document: a JSON Lines line, a text line or blank-line
/// block, or a whole-file document (256 MiB; `IngestOptions::max_document_bytes`,
/// `WriteOptions::max_document_bytes` and `--max-document-bytes` set another; the sequential
/// sources use this one). Every input reader stops at its bound with
/// [`IngestError::DocumentTooLarge`], so an endless input (`/dev/zero`) or a huge line never
/// takes more memory than that.
pub const MAX_DOCUMENT_BYTES: u64 = 256 << 20;

/// Reads line `line` of `path` from `r` into `buf` (cleared first), its terminator included:
/// its length in bytes, 0 at the end of the input.
///
/// # Errors
/// [`IngestError::Read`]; [`IngestError::DocumentTooLarge`] past `limit` bytes.
pub(crate) fn read_line_bounded(
    r: &mut (impl BufRead + ?Sized),
    buf: &mut Vec<u8>,
    path: &Path,
    line: u64,
    limit: u64,
) -> Result<usize, IngestError> {
    buf.clear();
    let n = std::io::Read::take(r, limit.saturating_add(1))
        .read_until(b'\n', buf)
        .map_err(|source| IngestError::Read { path: path.to_path_buf(), source })?;
    if n as u64 > limit {
        return Err(IngestError::DocumentTooLarge { path: path.to_path_buf(), line, limit });
    }
    Ok(n)
}

fn read_text(path: &Path, limit: u64) -> Result<String, IngestError> {
    let read = |source| IngestError::Read { path: path.to_path_buf(), source };
    let mut bytes = Vec::new();
    fs::File::open(path)
        .and_then(|f| {
            std::io::Read::read_to_end(&mut std::io::Read::take(f, limit.saturating_add(1)), &mut bytes)
        })
        .map_err(read)?;
    if bytes.len() as u64 > limit {
        return Err(IngestError::DocumentTooLarge { path: path.to_path_buf(), line: 1, limit });
    }
    String::from_utf8(bytes).map_err(|e| IngestError::NotUtf8 {
        path: path.to_path_buf(),
        offset: e.utf8_error().valid_up_to() as u64,
    })
}

/// Tokenizes the text files under `paths` into the stream storage `out`.
///
/// Files are read in [`collect_files`] order, split per [`IngestOptions::split`], tokenized
/// in parallel (rayon, [`CHUNK_BYTES`] of text per round) with `encode_ordinary`
/// (special-token text is treated as ordinary text), optionally followed by the end-of-text
/// id, and written in input order. Memory stays bounded whatever the corpus size: tokenized
/// documents go to an unnamed temporary file beside `out` first (4 bytes per token), so the
/// element type and the shard balance are known before the first byte is written, and a
/// corpus that fails (unreadable file, id too large) writes nothing. The manifest's metadata
/// records the tokenizer, split, eos flag and document count.
///
/// # Errors
/// Input errors ([`IngestError::Read`], [`IngestError::NotUtf8`]),
/// [`IngestError::TokenTooLarge`] for [`DtypeChoice::U16`] with a larger id,
/// [`IngestError::Spill`], storage errors.
pub fn ingest_text(out: &Path, paths: &[PathBuf], opts: &IngestOptions) -> Result<IngestReport, IngestError> {
    ingest_text_in_chunks(out, paths, opts, CHUNK_BYTES)
}

/// [`ingest_text`], tokenizing `chunk_bytes` of text per parallel round.
fn ingest_text_in_chunks(
    out: &Path,
    paths: &[PathBuf],
    opts: &IngestOptions,
    chunk_bytes_max: usize,
) -> Result<IngestReport, IngestError> {
    let mut files = collect_files(paths)?;
    // Never read the storage being written (an --out inside an input directory).
    if let Ok(out) = out.canonicalize() {
        files.retain(|f| !f.canonicalize().is_ok_and(|f| f.starts_with(&out)));
    }
    let total_bytes: u64 = files.iter().map(|f| fs::metadata(f).map(|m| m.len()).unwrap_or(0)).sum();
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
        max_document_bytes: opts.max_document_bytes,
    };
    check_output(out, &meta, &write)?;
    let pb = progress_bar(opts.progress, total_bytes);
    pb.set_message("tokenizing");
    let vocab = opts.tokenizer.load()?;
    let eos = opts.eos.then(|| opts.tokenizer.eos_id());
    let mut spill = Spill::new(out)?;
    let mut chunk: Vec<(String, String)> = Vec::new();
    let mut chunk_bytes = 0;
    let tokenize = |chunk: &mut Vec<(String, String)>, spill: &mut Spill| {
        let tokens: Vec<Vec<u32>> = chunk
            .par_iter()
            .map(|(_, text)| {
                let mut tokens = vocab.encode_ordinary(text);
                tokens.extend(eos);
                pb.inc(text.len() as u64);
                tokens
            })
            .collect();
        for ((source, _), tokens) in chunk.drain(..).zip(tokens) {
            spill.push(&Document { source, tokens })?;
        }
        Ok::<_, IngestError>(())
    };
    for f in &files {
        for_each_document(f, opts.split, opts.max_document_bytes, &mut |suffix, doc| {
            chunk_bytes += doc.len();
            chunk.push((format!("{}{suffix}", f.display()), doc));
            if chunk_bytes >= chunk_bytes_max {
                tokenize(&mut chunk, &mut spill)?;
                chunk_bytes = 0;
            }
            Ok(())
        })?;
    }
    tokenize(&mut chunk, &mut spill)?;
    pb.finish_and_clear();
    write_spill(out, spill, total_bytes, meta, &write)
}

/// Calls `f(source suffix, text)` for each document of the text file `path`, in order, as
/// [`split_text`] cuts them. Line and blank-line splits stream through the file (one line,
/// or one blank-line block, in memory at a time); a whole-file document is read whole.
///
/// # Errors
/// [`IngestError::Read`], [`IngestError::NotUtf8`] (with the byte offset in the file), and
/// whatever `f` returns.
fn for_each_document(
    path: &Path,
    split: Split,
    limit: u64,
    f: &mut dyn FnMut(String, String) -> Result<(), IngestError>,
) -> Result<(), IngestError> {
    if split == Split::File {
        return f(String::new(), read_text(path, limit)?);
    }
    let read_error = |source| IngestError::Read { path: path.to_path_buf(), source };
    let file = fs::File::open(path).map_err(read_error)?;
    let mut reader = std::io::BufReader::with_capacity(1 << 16, file);
    let mut raw = Vec::new();
    let (mut offset, mut number) = (0u64, 0u64);
    let mut block = String::new();
    let mut block_start = 0u64;
    loop {
        raw.clear();
        let n = read_line_bounded(&mut reader, &mut raw, path, number + 1, limit)?;
        if n == 0 {
            break;
        }
        let line = std::str::from_utf8(&raw).map_err(|e| IngestError::NotUtf8 {
            path: path.to_path_buf(),
            offset: offset + e.valid_up_to() as u64,
        })?;
        offset += n as u64;
        number += 1;
        // As `str::lines`: the terminator is `\n` or `\r\n`; the last line may have none.
        let line = match line.strip_suffix('\n') {
            Some(l) => l.strip_suffix('\r').unwrap_or(l),
            None => line,
        };
        let blank = line.trim().is_empty();
        match split {
            Split::Line if !blank => f(format!(":{number}"), line.to_string())?,
            Split::BlankLine if blank && !block.is_empty() => {
                f(format!(":{block_start}"), std::mem::take(&mut block))?;
            }
            Split::BlankLine if !blank => {
                if block.len() as u64 + line.len() as u64 >= limit {
                    let line = if block.is_empty() { number } else { block_start };
                    return Err(IngestError::DocumentTooLarge { path: path.to_path_buf(), line, limit });
                }
                if block.is_empty() {
                    block_start = number;
                } else {
                    block.push('\n');
                }
                block.push_str(line);
            }
            _ => {}
        }
    }
    if !block.is_empty() {
        f(format!(":{block_start}"), block)?;
    }
    Ok(())
}

/// Writes what a spill holds.
fn write_spill(
    out: &Path,
    spill: Spill,
    input_bytes: u64,
    meta: Value,
    write: &WriteOptions,
) -> Result<IngestReport, IngestError> {
    let stats = spill.stats().clone();
    let mut spill = Some(spill);
    write_corpus(out, &stats, input_bytes, meta, write, &mut |f| match spill.take() {
        Some(s) => s.for_each(f),
        None => Ok(()),
    })
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
    /// The most bytes of one input line (JSON Lines); past it reading stops with
    /// [`IngestError::DocumentTooLarge`] naming the file and line ([`MAX_DOCUMENT_BYTES`],
    /// 256 MiB, is the usual value).
    pub max_document_bytes: u64,
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

/// One JSON Lines line waiting to be parsed: file index, 1-based line number, text.
type PendingLine = (usize, u64, String);

/// Ingests JSON Lines files: each non-empty line an object whose field is a list of token ids
/// (or a text to tokenize) = one document. Both targets work: [`Target::Stream`] writes the
/// tokens alone, [`Target::DocMeta`] keeps each line's document boundary (ordinal and file).
///
/// Lines are parsed (and tokenized) in parallel, [`CHUNK_BYTES`] at a time, and spilled in
/// input order as [`ingest_text`] does, so memory stays bounded; errors are reported for the
/// first bad line in input order.
///
/// # Errors
/// [`IngestError::BadJsonl`] naming file and line for malformed lines, missing fields or ids
/// that are not non-negative integers below 2^32; [`IngestError::TokenTooLarge`];
/// [`IngestError::Spill`]; storage errors.
pub fn ingest_jsonl(
    out: &Path,
    files: &[PathBuf],
    field: &JsonlField,
    write: &WriteOptions,
) -> Result<IngestReport, IngestError> {
    ingest_jsonl_in_chunks(out, files, field, write, CHUNK_BYTES)
}

/// [`ingest_jsonl`], parsing `chunk_bytes` of lines per parallel round.
fn ingest_jsonl_in_chunks(
    out: &Path,
    files: &[PathBuf],
    field: &JsonlField,
    write: &WriteOptions,
    chunk_bytes_max: usize,
) -> Result<IngestReport, IngestError> {
    let meta = match field {
        JsonlField::Tokens(f) => json!({"source": "jsonl", "tokens_field": f}),
        JsonlField::Text(f, t) => json!({"source": "jsonl", "text_field": f, "tokenizer": t.name()}),
    };
    check_output(out, &meta, write)?;
    let vocab = match field {
        JsonlField::Text(_, t) => Some(t.load()?),
        JsonlField::Tokens(_) => None,
    };
    let mut spill = Spill::new(out)?;
    let mut total_bytes = 0u64;
    let mut chunk: Vec<PendingLine> = Vec::new();
    let mut chunk_bytes = 0;
    let parse_chunk = |chunk: &mut Vec<PendingLine>, spill: &mut Spill| {
        let docs: Vec<Result<Document, IngestError>> = chunk
            .par_iter()
            .map(|(f, line, text)| jsonl_document(&files[*f], *line, text, field, &vocab))
            .collect();
        chunk.clear();
        docs.into_iter().try_for_each(|d| spill.push(&d?))
    };
    for (f, path) in files.iter().enumerate() {
        let file = fs::File::open(path).map_err(|source| IngestError::Read { path: path.clone(), source })?;
        let mut reader = std::io::BufReader::new(file);
        let mut raw = Vec::new();
        for i in 0u64.. {
            match read_line_bounded(&mut reader, &mut raw, path, i + 1, write.max_document_bytes) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) => {
                    // Lines before this one come first, errors included.
                    parse_chunk(&mut chunk, &mut spill)?;
                    return Err(e);
                }
            }
            let text = raw.strip_suffix(b"\n").unwrap_or(&raw);
            let text = text.strip_suffix(b"\r").unwrap_or(text);
            let line = match std::str::from_utf8(text) {
                Ok(line) => line.to_string(),
                Err(_) => {
                    parse_chunk(&mut chunk, &mut spill)?;
                    return Err(IngestError::BadJsonl {
                        path: path.clone(),
                        line: i + 1,
                        reason: "not valid UTF-8".into(),
                    });
                }
            };
            total_bytes += line.len() as u64 + 1;
            if line.trim().is_empty() {
                continue;
            }
            chunk_bytes += line.len();
            chunk.push((f, i + 1, line));
            if chunk_bytes >= chunk_bytes_max {
                parse_chunk(&mut chunk, &mut spill)?;
                chunk_bytes = 0;
            }
        }
    }
    parse_chunk(&mut chunk, &mut spill)?;
    write_spill(out, spill, total_bytes, meta, write)
}

/// The document of one non-empty JSON Lines line.
fn jsonl_document(
    path: &Path,
    line: u64,
    text: &str,
    field: &JsonlField,
    vocab: &Option<Vocabulary>,
) -> Result<Document, IngestError> {
    let tokens = jsonl_tokens(text, field, vocab.as_ref()).map_err(|reason| IngestError::BadJsonl {
        path: path.to_path_buf(),
        line,
        reason,
    })?;
    Ok(Document { source: format!("{}:{line}", path.display()), tokens })
}

/// The token ids of one non-empty JSON Lines line: its `field` as a list of ids, or its text
/// tokenized with `vocab`; `Err` says why the line is bad.
pub(crate) fn jsonl_tokens(
    text: &str,
    field: &JsonlField,
    vocab: Option<&Vocabulary>,
) -> Result<Vec<u32>, String> {
    match field {
        JsonlField::Tokens(name) => {
            let mut de = serde_json::Deserializer::from_str(text);
            let found =
                serde::Deserializer::deserialize_map(&mut de, TokenField(name)).map_err(|e| e.to_string())?;
            de.end().map_err(|e| e.to_string())?;
            found.unwrap_or_else(|| Err(not_a_list(name)))
        }
        JsonlField::Text(name, _) => {
            let v: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
            let text = v
                .get(name)
                .and_then(Value::as_str)
                .ok_or_else(|| format!("field {name:?} is missing or not a string"))?;
            Ok(vocab.map(|b| b.encode_ordinary(text)).unwrap_or_default())
        }
    }
}

/// Field `name` of one JSON Lines object as token ids, parsed straight into a `Vec<u32>`
/// (no `serde_json::Value` for the line or per id, so a line takes about its size in memory).
/// `None` when the field is missing; `Some(Err)` says why it is not a list of ids. As a
/// `Value` would, the last of repeated keys counts.
struct TokenField<'a>(&'a str);

/// The ids of one list ([`TokenField`]).
struct TokenIds<'a>(&'a str);

/// One id: `Err` holds the value as JSON text when it is not an integer in `[0, 2^32)`.
struct TokenId;

impl<'de> serde::de::Visitor<'de> for TokenField<'_> {
    type Value = Option<Result<Vec<u32>, String>>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut m: A) -> Result<Self::Value, A::Error> {
        let mut found = None;
        while let Some(key) = m.next_key::<std::borrow::Cow<'de, str>>()? {
            if key == self.0 {
                found = Some(m.next_value_seed(TokenIds(self.0))?);
            } else {
                m.next_value::<serde::de::IgnoredAny>()?;
            }
        }
        Ok(found)
    }
}

impl<'de> serde::de::DeserializeSeed<'de> for TokenIds<'_> {
    type Value = Result<Vec<u32>, String>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for TokenIds<'_> {
    type Value = Result<Vec<u32>, String>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a list of token ids")
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut s: A) -> Result<Self::Value, A::Error> {
        let mut ids = Vec::new();
        let mut bad = None;
        while let Some(id) = s.next_element_seed(TokenId)? {
            match id {
                Ok(id) if bad.is_none() => ids.push(id),
                Ok(_) => {}
                Err(v) => {
                    bad.get_or_insert_with(|| {
                        format!(
                            "token {} of field {:?} is {v}, not an integer in [0, 2^32)",
                            ids.len(),
                            self.0
                        )
                    });
                }
            }
        }
        Ok(bad.map_or(Ok(ids), Err))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut m: A) -> Result<Self::Value, A::Error> {
        while m.next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?.is_some() {}
        Ok(Err(not_a_list(self.0)))
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(Err(not_a_list(self.0)))
    }

    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(Err(not_a_list(self.0)))
    }

    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(Err(not_a_list(self.0)))
    }

    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(Err(not_a_list(self.0)))
    }

    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(Err(not_a_list(self.0)))
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Err(not_a_list(self.0)))
    }
}

/// Why field `name` is not a token list.
fn not_a_list(name: &str) -> String {
    format!("field {name:?} is missing or not a list of token ids")
}

impl<'de> serde::de::DeserializeSeed<'de> for TokenId {
    type Value = Result<u32, String>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for TokenId {
    type Value = Result<u32, String>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a token id")
    }

    fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
        Ok(u32::try_from(v).map_err(|_| v.to_string()))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
        Ok(u32::try_from(v).map_err(|_| v.to_string()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
        Ok(Err(serde_json::Number::from_f64(v).map_or_else(|| v.to_string(), |n| n.to_string())))
    }

    fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
        Ok(Err(v.to_string()))
    }

    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Err(serde_json::Value::from(v).to_string()))
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Err("null".into()))
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut s: A) -> Result<Self::Value, A::Error> {
        while s.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        Ok(Err("a list".into()))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut m: A) -> Result<Self::Value, A::Error> {
        while m.next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?.is_some() {}
        Ok(Err("an object".into()))
    }
}

/// Index of the first document of each shard: contiguous runs balanced by token count (the
/// cut [`write_documents`] and the ingest functions make).
pub fn shard_starts(docs: &[Document], shards: u64) -> Vec<usize> {
    let total: u64 = docs.iter().map(|d| d.tokens.len() as u64).sum();
    let mut plan = ShardPlanner::new(shards, total);
    let mut starts = vec![0usize];
    for (i, d) in docs.iter().enumerate() {
        if plan.starts_shard(i as u64, d.tokens.len() as u64) {
            starts.push(i);
        }
    }
    starts.resize(plan.shards() as usize, docs.len());
    starts
}

/// Writes documents held in memory as a token storage (see [`ingest_text`]). `meta` (a JSON
/// object) goes to the manifest's user metadata, with `documents` set to the storage's
/// document count.
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
    meta: Value,
    write: &WriteOptions,
) -> Result<IngestReport, IngestError> {
    let stats = CorpusStats::of(docs);
    write_corpus(out, &stats, input_bytes, meta, write, &mut |f| docs.iter().try_for_each(f))
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

    /// Every file of a storage directory, by name, except the writer lock.
    fn storage_files(dir: &Path) -> Vec<(String, Vec<u8>)> {
        let mut files: Vec<_> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.file_name().unwrap() != ".writer.lock")
            .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), fs::read(&p).unwrap()))
            .collect();
        files.sort();
        files
    }

    #[test]
    fn text_ingest_in_one_byte_chunks_writes_the_same_storage_as_one_chunk() {
        let tmp = tempfile::tempdir().unwrap();
        let input = tmp.path().join("in");
        fs::create_dir(&input).unwrap();
        fs::write(input.join("a.txt"), "It is a truth universally acknowledged.\n\nThat a single man")
            .unwrap();
        fs::write(input.join("b.txt"), "in possession of a good fortune\n\nmust be in want of a wife.\n")
            .unwrap();
        for doc_meta in [false, true] {
            let opts = IngestOptions {
                split: Split::BlankLine,
                shards: 3,
                eos: true,
                doc_meta,
                ..Default::default()
            };
            let (one, many) =
                (tmp.path().join(format!("one{doc_meta}")), tmp.path().join(format!("many{doc_meta}")));
            let a = ingest_text_in_chunks(&one, std::slice::from_ref(&input), &opts, usize::MAX).unwrap();
            let b = ingest_text_in_chunks(&many, std::slice::from_ref(&input), &opts, 1).unwrap();
            assert_eq!(a, b);
            assert_eq!((a.documents, a.shards, a.dtype), (4, 3, "u32"));
            assert_eq!(storage_files(&one), storage_files(&many));
        }
    }

    #[test]
    fn jsonl_ingest_in_chunks_reports_the_first_bad_line_in_input_order() {
        let tmp = tempfile::tempdir().unwrap();
        let input = tmp.path().join("in.jsonl");
        let mut bytes = b"{\"ids\": [1, 2]}\n{\"ids\": [3]}\n{\"ids\": \"x\"}\n{\"ids\": [4]}\n".to_vec();
        bytes.extend_from_slice(b"{\"ids\": [\xff]}\n");
        fs::write(&input, &bytes).unwrap();
        let write = WriteOptions {
            shards: 1,
            dtype: DtypeChoice::Auto,
            target: Target::Stream,
            append: false,
            progress: false,
            max_document_bytes: MAX_DOCUMENT_BYTES,
        };
        for chunk in [1, 20, usize::MAX] {
            let out = tmp.path().join(format!("out{chunk}"));
            let e = ingest_jsonl_in_chunks(
                &out,
                std::slice::from_ref(&input),
                &JsonlField::Tokens("ids".into()),
                &write,
                chunk,
            )
            .unwrap_err();
            assert!(matches!(e, IngestError::BadJsonl { line: 3, .. }), "chunk {chunk}: {e:?}");
            assert!(!out.join("manifest.json").exists(), "a failed ingest writes nothing");
        }
        fs::write(&input, b"{\"ids\": [1, 2]}\n\n{\"ids\": [70000]}\n{\"ids\": [3]}\n").unwrap();
        for chunk in [1, usize::MAX] {
            let out = tmp.path().join(format!("ok{chunk}"));
            let r = ingest_jsonl_in_chunks(
                &out,
                std::slice::from_ref(&input),
                &JsonlField::Tokens("ids".into()),
                &write,
                chunk,
            )
            .unwrap();
            assert_eq!((r.documents, r.tokens, r.dtype, r.input_bytes), (3, 4, "u32", 47));
            let u16_write = WriteOptions { dtype: DtypeChoice::U16, ..write };
            let e = ingest_jsonl_in_chunks(
                &tmp.path().join(format!("u16{chunk}")),
                std::slice::from_ref(&input),
                &JsonlField::Tokens("ids".into()),
                &u16_write,
                chunk,
            )
            .unwrap_err();
            assert!(
                matches!(&e, IngestError::TokenTooLarge { id: 70000, document: 1, source_name, .. } if source_name.ends_with("in.jsonl:3")),
                "{e:?}"
            );
        }
    }

    #[test]
    fn streamed_splits_equal_split_text() {
        let tmp = tempfile::tempdir().unwrap();
        let cases = [
            "",
            "\n",
            "a",
            "a b\nc\n\n \nd\n\n",
            "x\r\ny\r\n\r\nz",
            "one\r",
            "\n\n  \nlast block\nstill\n",
            "é\n\nü",
        ];
        for (i, text) in cases.iter().enumerate() {
            let path = tmp.path().join(format!("{i}.txt"));
            fs::write(&path, text).unwrap();
            for split in [Split::File, Split::Line, Split::BlankLine] {
                let mut got = Vec::new();
                for_each_document(&path, split, MAX_DOCUMENT_BYTES, &mut |suffix, doc| {
                    got.push((suffix, doc));
                    Ok(())
                })
                .unwrap();
                assert_eq!(got, split_text(text, split), "case {i} {split:?}");
            }
        }
        let bad = tmp.path().join("bad.txt");
        fs::write(&bad, b"ok line\nsecond \xff line\n").unwrap();
        for split in [Split::File, Split::Line, Split::BlankLine] {
            let e = for_each_document(&bad, split, MAX_DOCUMENT_BYTES, &mut |_, _| Ok(())).unwrap_err();
            assert!(matches!(e, IngestError::NotUtf8 { offset: 15, .. }), "{split:?}: {e:?}");
        }
    }

    #[test]
    fn issue12_the_output_is_checked_before_the_input_is_read() {
        let tmp = tempfile::tempdir().unwrap();
        let good = tmp.path().join("good.txt");
        fs::write(&good, "Some text.").unwrap();
        let bad = tmp.path().join("bad.txt");
        fs::write(&bad, b"\xff").unwrap();
        let out = tmp.path().join("out");
        ingest_text(&out, std::slice::from_ref(&good), &IngestOptions::default()).unwrap();
        // An existing storage is refused before the (unreadable) input is touched.
        let e = ingest_text(&out, std::slice::from_ref(&bad), &IngestOptions::default()).unwrap_err();
        assert!(matches!(e, IngestError::Exists { .. }), "{e:?}");
        // An append with another tokenizer names the tokenizer, not the end-of-text id it implies.
        let gpt2 = IngestOptions { tokenizer: Tokenizer::Gpt2, append: true, ..Default::default() };
        let e = ingest_text(&out, std::slice::from_ref(&bad), &gpt2).unwrap_err();
        assert!(
            matches!(&e, IngestError::AppendMismatch { field, existing, new, .. }
                if field == "tokenizer" && existing == "\"cl100k\"" && new == "\"gpt2\""),
            "{e:?}"
        );
        // A directory of other files is not written into.
        let mine = tmp.path().join("mine");
        fs::create_dir(&mine).unwrap();
        fs::write(mine.join("notes.txt"), "keep").unwrap();
        let e = ingest_text(&mine, std::slice::from_ref(&good), &IngestOptions::default()).unwrap_err();
        assert!(matches!(&e, IngestError::NotAStorageDirectory { file, .. } if file == "notes.txt"), "{e:?}");
        let names: Vec<_> = fs::read_dir(&mine).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["notes.txt"]);
    }

    /// Issue 19, class 3: token lists are parsed straight into ids (no `Value` per element),
    /// with the same results and messages as before for good and bad lines.
    #[test]
    fn issue19_unbounded_memory_from_inputs_token_lists_parse_without_values() {
        let field = JsonlField::Tokens("ids".into());
        let parse = |t: &str| jsonl_tokens(t, &field, None);
        assert_eq!(parse(r#"{"x":{"a":[1,[2]]},"ids":[0,1,4294967295],"y":"z"}"#), Ok(vec![0, 1, u32::MAX]));
        assert_eq!(parse(r#"{"ids":[9],"ids":[5,6]}"#), Ok(vec![5, 6]));
        assert_eq!(parse(r#"{"ids":[]}"#), Ok(vec![]));
        let not_int = |j: usize, v: &str| {
            Err(format!("token {j} of field \"ids\" is {v}, not an integer in [0, 2^32)"))
        };
        assert_eq!(parse(r#"{"ids":[1,4294967296,-1]}"#), not_int(1, "4294967296"));
        assert_eq!(parse(r#"{"ids":[-1]}"#), not_int(0, "-1"));
        assert_eq!(parse(r#"{"ids":[1,2.5]}"#), not_int(1, "2.5"));
        assert_eq!(parse(r#"{"ids":[1,2,"7"]}"#), not_int(2, "\"7\""));
        assert_eq!(parse(r#"{"ids":[null]}"#), not_int(0, "null"));
        let not_list = Err("field \"ids\" is missing or not a list of token ids".to_string());
        for line in
            [r#"{"other":[1]}"#, r#"{"ids":5}"#, r#"{"ids":{"a":1}}"#, r#"{"ids":"abc"}"#, r#"{"ids":null}"#]
        {
            assert_eq!(parse(line), not_list, "{line}");
        }
        for line in [r#"{"ids":[1,2]"#, r#"{"ids":[1]} x"#, "[1,2]", ""] {
            assert!(parse(line).is_err(), "{line}");
        }
    }
}
