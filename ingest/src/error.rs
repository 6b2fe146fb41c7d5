//! [`IngestError`], the error of every fallible function of this crate.

use std::path::PathBuf;

use guideloom_storage::StorageError;

/// Errors of ingestion and of the sequential sources: the one error enum of this crate.
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
    /// document) is longer than [`MAX_DOCUMENT_BYTES`](crate::MAX_DOCUMENT_BYTES); reading stopped there.
    #[error("{path} line {line}: a document longer than the {limit}-byte limit (a line, block or file this long is not read into memory)")]
    DocumentTooLarge {
        /// The input file.
        path: PathBuf,
        /// The 1-based line where the document starts (1 for a whole-file document; 0 from
        /// the sequential readers, which track byte offsets, not lines).
        line: u64,
        /// The limit in bytes ([`MAX_DOCUMENT_BYTES`](crate::MAX_DOCUMENT_BYTES)).
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
    /// A JSON Lines record read by a [`JsonlShards`](crate::JsonlShards) reader is malformed or lacks the field
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
    /// Reading a sequential source failed ([`ingest_sequential`](crate::ingest_sequential)); the loader's error is the
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
    /// [`WriteOptions::shards`](crate::WriteOptions::shards) is 0.
    #[error("cannot write {path} in 0 shards: the number of shards must be at least 1")]
    ZeroShards {
        /// The output directory.
        path: PathBuf,
    },
    /// The new shards' ids would pass `u64::MAX` (appending to a storage whose shard ids are
    /// that high).
    #[error("cannot append to {path}: {shards} new shards after its last shard id {last} pass the largest shard id (u64::MAX)")]
    ShardIdOverflow {
        /// The output directory.
        path: PathBuf,
        /// The id of the storage's last shard.
        last: u64,
        /// The shards to add.
        shards: u64,
    },
    /// The document count would pass `u64::MAX` (appending to a storage whose metadata says it
    /// holds that many).
    #[error("cannot append to {path}: {new} new documents after its {existing} pass the largest document count (u64::MAX)")]
    DocumentCountOverflow {
        /// The output directory.
        path: PathBuf,
        /// The documents the storage's metadata counts.
        existing: u64,
        /// The documents to add.
        new: u64,
    },
    /// A sequential source was asked to read a file from a position past its end (a state
    /// saved over a file that has since been shortened).
    #[error("{path} holds {len} bytes; a position at byte {offset} is past its end")]
    PositionPastEnd {
        /// The input file.
        path: PathBuf,
        /// The position's byte offset.
        offset: u64,
        /// The file's length in bytes.
        len: u64,
    },
    /// No input file was found.
    #[error("no input files found in {0:?}")]
    NoInput(Vec<PathBuf>),
    /// Writing the storage failed.
    #[error("writing the storage failed")]
    Storage(#[from] StorageError),
}
