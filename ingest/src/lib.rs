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
//!
//! The crate holds the options and reports of an ingest here, and one module per concept:
//! the vocabularies (`tokenizer`), the input files (`input`), `ingest text` (`text`),
//! `ingest jsonl` and its field rule (`jsonl`), the spill file and the write phase (`spill`,
//! `write`), and the sequential sources (`sequential`). The `guideloom` facade re-exports it
//! as `guideloom::ingest` (feature `ingest`).

#[cfg(doc)]
use guideloom_formats::{DocumentTokensFormat, TokenFormat};

mod error;
mod input;
mod jsonl;
mod sequential;
mod spill;
mod text;
mod tokenizer;
mod write;

pub use error::IngestError;
pub use input::{collect_files, split_text};
pub use jsonl::{ingest_jsonl, JsonlField};
pub use sequential::{
    ingest_sequential, Cutter, FileReader, FileShards, JsonlCutter, JsonlReader, JsonlShards, TextCutter,
    TextReader, TextShards, READ_AHEAD_BYTES,
};
pub use text::ingest_text;
pub use tokenizer::{Tokenizer, Vocabulary};
pub use write::{shard_starts, write_documents};

/// Text tokenized per parallel round, in bytes: ingest holds about this much text, its
/// tokens and one input file at a time, whatever the corpus size.
pub const CHUNK_BYTES: usize = 16 << 20;

/// The default bound on one input document: a JSON Lines line, a text line or blank-line
/// block, or a whole-file document (256 MiB; `IngestOptions::max_document_bytes`,
/// `WriteOptions::max_document_bytes` and `--max-document-bytes` set another; the sequential
/// sources use this one). Every input reader stops at its bound with
/// [`IngestError::DocumentTooLarge`], so an endless input (`/dev/zero`) or a huge line never
/// takes more memory than that.
pub const MAX_DOCUMENT_BYTES: u64 = 256 << 20;

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
