use std::error::Error as StdError;

/// A boxed error from user code (a data source, a `map` function, a collation).
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// The error type of `guideloom-loader`.
///
/// Errors raised while producing a batch reach the consumer wrapped in
/// [`LoaderError::InBatch`], which names the batch and its epoch; [`LoaderError::record_index`]
/// and [`LoaderError::batch`] look through that wrapper.
///
/// A variant that wraps a cause returns it from [`std::error::Error::source`] and does not
/// repeat it in its own message: a reporter walks the chain (as below) to print everything
/// once.
///
/// ```
/// use guideloom_loader::LoaderError;
/// let e = LoaderError::InBatch {
///     batch: 3,
///     epoch: 0,
///     source: Box::new(LoaderError::source(7, "disk on fire")),
/// };
/// assert_eq!(e.record_index(), Some(7));
/// assert_eq!(e.batch(), Some(3));
/// assert_eq!(e.to_string(), "batch 3 (epoch 0)");
/// let mut report = e.to_string();
/// let mut cause = std::error::Error::source(&e);
/// while let Some(c) = cause {
///     report = format!("{report}: {c}");
///     cause = c.source();
/// }
/// assert_eq!(report, "batch 3 (epoch 0): record 7: disk on fire");
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoaderError {
    /// A data source failed to read record `index` (the cause is the error's `source()`).
    #[error("record {index}")]
    Source {
        /// The record index (in the source's `[0, len)`).
        index: u64,
        /// What the source reported.
        source: BoxError,
    },
    /// A sequential source failed to open or read record `record` of shard `shard` (the
    /// cause is the error's `source()`).
    #[error("shard {shard}, record {record}")]
    Shard {
        /// The shard.
        shard: u64,
        /// The record's index in the shard (the position being opened or read).
        record: u64,
        /// What the source reported.
        source: BoxError,
    },
    /// A shard of a sequential source ended before its length hint.
    #[error("shard {shard} ended after {found} records; its length hint is {expected}")]
    ShardLength {
        /// The shard.
        shard: u64,
        /// Its length hint.
        expected: u64,
        /// Records it held.
        found: u64,
    },
    /// A storage read failed for record `index` (a window or a document); the storage's
    /// error is the `source()`.
    #[error("record {index}: storage read failed")]
    Storage {
        /// The record index (window or document number).
        index: u64,
        /// The storage's error.
        source: guideloom_storage::StorageError,
    },
    /// A storage could not be opened (missing, not a storage, another kind or dtype, damaged
    /// manifest or shards); the storage's error is the `source()`. No record was read.
    #[error("could not open the storage in {path}")]
    Open {
        /// The storage directory.
        path: std::path::PathBuf,
        /// The storage's error.
        source: guideloom_storage::StorageError,
    },
    /// A token storage holds ids of a dtype that the requested batch element type cannot hold
    /// without loss (for example `<u4` ids into `u16`), or ids of a non-token dtype.
    #[error("{path} holds token ids of dtype {stored}, which do not all fit the requested element type {requested}")]
    TokenDtype {
        /// The storage directory.
        path: std::path::PathBuf,
        /// The storage's element dtype (numpy descr, for example `<u4`).
        stored: String,
        /// The requested batch element dtype (numpy descr, for example `<u2`).
        requested: String,
    },
    /// A window source's `seq_len` is longer than its stream, which holds at least one
    /// element: not one window fits, so a loader over it would yield no batch. (An empty
    /// stream is not an error: it is an empty source.)
    #[error(
        "seq_len {seq_len} is longer than the stream's {elements} elements (tokens): not one window fits, so there is no batch"
    )]
    WindowTooLong {
        /// The window length asked for, in elements.
        seq_len: u64,
        /// Elements (tokens) in the stream.
        elements: u64,
    },
    /// A record index at or past the source's length was requested.
    #[error("record {index} is out of range for a source of {len} records")]
    IndexOutOfRange {
        /// The requested index.
        index: u64,
        /// The source's length.
        len: u64,
    },
    /// A document is longer than a packed row and the overflow policy is
    /// [`Overflow::Error`](crate::pack::Overflow::Error).
    #[error("document {index} has {len} tokens, more than a row of {seq_len}")]
    DocumentTooLong {
        /// The document (its position in the packed source).
        index: u64,
        /// Its length in tokens.
        len: u64,
        /// The row length.
        seq_len: u64,
    },
    /// A document read for a packed row has another length than when the rows were planned.
    #[error("document {index} has {found} tokens, but the pack plan was made for {expected}")]
    DocumentChanged {
        /// The document.
        index: u64,
        /// Its length in the plan.
        expected: u64,
        /// Its length now.
        found: u64,
    },
    /// A source's `get_many` returned a different number of records than requested.
    #[error("get_many returned {found} records for {expected} indices")]
    WrongCount {
        /// Indices requested.
        expected: u64,
        /// Records returned.
        found: u64,
    },
    /// The `map` function failed on record `index` (its error is the `source()`).
    #[error("map failed on record {index}")]
    Map {
        /// The record index.
        index: u64,
        /// What the map function reported.
        source: BoxError,
    },
    /// Collating a batch failed (for example windows of unequal lengths).
    #[error("collate: {detail}")]
    Collate {
        /// What went wrong.
        detail: String,
    },
    /// User code (source, map or collation) panicked.
    #[error("panicked{}: {message}", .index.map(|i| format!(" on record {i}")).unwrap_or_default())]
    Panic {
        /// The record being processed, when the loader could locate it.
        index: Option<u64>,
        /// The panic message.
        message: String,
    },
    /// An error raised while producing batch `batch` (absolute batch number of this rank);
    /// the underlying error is the `source()`.
    #[error("batch {batch} (epoch {epoch})")]
    InBatch {
        /// Absolute batch number (counted from the first batch of epoch 0).
        batch: u64,
        /// The batch's epoch.
        epoch: u64,
        /// The underlying error.
        source: Box<LoaderError>,
    },
    /// A source read was abandoned because the loader is shutting down.
    #[error("cancelled: the loader is shutting down")]
    Cancelled,
    /// The builder's configuration is invalid.
    #[error("invalid configuration: {field}: {detail}")]
    InvalidConfig {
        /// The offending setting (for example `"batch_size"`).
        field: &'static str,
        /// Why it is refused.
        detail: String,
    },
    /// A state was written by an unsupported state format version.
    #[error("state version {found} is not supported (this loader writes version {expected})")]
    StateVersion {
        /// The version this loader reads and writes.
        expected: u32,
        /// The version found in the state.
        found: u32,
    },
    /// A state does not match the loader it is restored into.
    #[error("state mismatch: {field}: the loader has {expected}, the state has {found}")]
    StateMismatch {
        /// The field that differs (for example `"batch_size"` or `"source.fingerprint"`).
        field: &'static str,
        /// The loader's value.
        expected: String,
        /// The state's value.
        found: String,
    },
    /// An elastic restore with another global batch: the state's epoch consumed `consumed`
    /// positions of its order, which is not a multiple of the loader's global batch, so no
    /// step of the new topology starts there (ask for
    /// [`ResumeOptions::round_down`](crate::ResumeOptions) to replay the rest of the step).
    #[error(
        "cannot resume with the global batch {global_batch}: the state's epoch consumed {consumed} positions, not a multiple of it"
    )]
    ElasticResume {
        /// Positions of the epoch's order consumed when the state was taken.
        consumed: u64,
        /// The loader's global batch (`batch_size * world_size`).
        global_batch: u64,
    },
    /// A state points past the end of the loader's batches.
    #[error("state resumes at batch {next_batch}, but the loader has only {total} batches")]
    StatePastEnd {
        /// The state's next batch.
        next_batch: u64,
        /// The loader's total number of batches.
        total: u64,
    },
    /// A worker thread could not be started (the OS error is the `source()`).
    #[error("could not spawn a worker thread")]
    Spawn(#[source] std::io::Error),
    /// A state could not be parsed (the JSON error is the `source()`).
    #[error("not a valid loader state (JSON)")]
    StateJson(#[from] serde_json::Error),
}

impl LoaderError {
    /// A [`LoaderError::Source`] for record `index` from any error or message.
    pub fn source(index: u64, error: impl Into<BoxError>) -> Self {
        LoaderError::Source { index, source: error.into() }
    }

    /// A [`LoaderError::Shard`] for record `record` of shard `shard` from any error or
    /// message.
    pub fn shard(shard: u64, record: u64, error: impl Into<BoxError>) -> Self {
        LoaderError::Shard { shard, record, source: error.into() }
    }

    /// The record index this error is about, looking through [`LoaderError::InBatch`].
    pub fn record_index(&self) -> Option<u64> {
        match self {
            LoaderError::Source { index, .. }
            | LoaderError::Storage { index, .. }
            | LoaderError::IndexOutOfRange { index, .. }
            | LoaderError::DocumentTooLong { index, .. }
            | LoaderError::DocumentChanged { index, .. }
            | LoaderError::Map { index, .. } => Some(*index),
            LoaderError::Panic { index, .. } => *index,
            LoaderError::InBatch { source, .. } => source.record_index(),
            _ => None,
        }
    }

    /// The absolute batch number this error was raised in, if it came from a batch.
    pub fn batch(&self) -> Option<u64> {
        match self {
            LoaderError::InBatch { batch, .. } => Some(*batch),
            _ => None,
        }
    }

    /// Whether this error is (or wraps) a panic of user code.
    pub fn is_panic(&self) -> bool {
        match self {
            LoaderError::Panic { .. } => true,
            LoaderError::InBatch { source, .. } => source.is_panic(),
            _ => false,
        }
    }
}

/// `Ok` when a saved state's `theirs` is this loader's `ours`, else
/// [`LoaderError::StateMismatch`] naming `field` with both.
pub(crate) fn check_same<T: PartialEq + std::fmt::Display>(
    field: &'static str,
    ours: T,
    theirs: T,
) -> Result<(), LoaderError> {
    if ours == theirs {
        Ok(())
    } else {
        Err(LoaderError::StateMismatch { field, expected: ours.to_string(), found: theirs.to_string() })
    }
}
