use std::path::PathBuf;

use guideloom_formats::FormatError;

/// Everything that can go wrong while writing, opening or reading a storage.
///
/// Variants carry the context needed to find the problem: the file path, the shard id, the
/// index or offset, and expected versus found values.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StorageError {
    /// An operating-system I/O error on `path`.
    #[error("I/O error on {path}")]
    Io {
        /// The file or directory involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The directory holds no `manifest.json`.
    #[error("{dir} is not a guideloom storage (no manifest.json)")]
    NotAStorage {
        /// The directory that was opened.
        dir: PathBuf,
    },
    /// `manifest.json` is not valid JSON or does not have the manifest's shape.
    #[error("invalid manifest {path}: {reason}")]
    InvalidManifest {
        /// The manifest file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The manifest's `format_version` is not one this build reads.
    #[error("manifest {path} has format_version {found}; this build reads versions 1 to {supported}")]
    UnsupportedVersion {
        /// The manifest file.
        path: PathBuf,
        /// The version found.
        found: u64,
        /// The newest version this build reads (and writes).
        supported: u64,
    },
    /// The storage is of another kind than the reader or writer expects.
    #[error("{path} holds a {found} storage, expected a {expected} storage")]
    KindMismatch {
        /// The manifest file.
        path: PathBuf,
        /// The kind the caller asked for.
        expected: String,
        /// The kind the manifest records.
        found: String,
    },
    /// The format's element dtype differs from the dtype the storage was written with.
    #[error("dtype mismatch for {path}: the format has dtype {expected}, the storage holds {found}")]
    DtypeMismatch {
        /// The manifest file.
        path: PathBuf,
        /// The dtype of the format passed in (numpy descr).
        expected: String,
        /// The dtype in the manifest (numpy descr).
        found: String,
    },
    /// A shard file named by the manifest does not exist.
    #[error("shard {shard}: file {path} is missing")]
    MissingShard {
        /// The shard id.
        shard: u64,
        /// The missing file.
        path: PathBuf,
    },
    /// A shard file holds fewer bytes than the manifest committed.
    #[error(
        "shard {shard}: file {path} is shorter than committed: {actual} bytes, expected at least {expected}"
    )]
    ShardTooShort {
        /// The shard id.
        shard: u64,
        /// The file.
        path: PathBuf,
        /// Committed length in bytes.
        expected: u64,
        /// Actual length in bytes.
        actual: u64,
    },
    /// A document offset index is damaged (not starting at 0, decreasing, or past the data).
    #[error("shard {shard}: corrupt index {path} at entry {entry}: {reason}")]
    CorruptIndex {
        /// The shard id.
        shard: u64,
        /// The index file.
        path: PathBuf,
        /// The entry (0-based) where the damage was found.
        entry: u64,
        /// What is wrong.
        reason: String,
    },
    /// A shard's recomputed checksum differs from the manifest's.
    #[error(
        "shard {shard}: checksum mismatch in {path}: manifest has {expected:#010x}, data gives {found:#010x}"
    )]
    ChecksumMismatch {
        /// The shard id.
        shard: u64,
        /// The file whose checksum differs.
        path: PathBuf,
        /// The committed crc32c.
        expected: u32,
        /// The crc32c of the bytes on disk.
        found: u32,
    },
    /// A window or document index past the end of the storage.
    #[error("{what} [{start}, {start}+{len}) is out of range: the storage holds {total}")]
    OutOfRange {
        /// `"window"` (in elements) or `"document"` (in documents).
        what: &'static str,
        /// First element or document requested.
        start: u64,
        /// Number requested.
        len: u64,
        /// Elements or documents in the storage.
        total: u64,
    },
    /// A read returned fewer bytes than requested (the file shrank after it was opened).
    #[error(
        "short read from {path} at byte {offset}: got {got} of {expected} bytes (file truncated after open?)"
    )]
    ShortRead {
        /// The file.
        path: PathBuf,
        /// Byte offset of the read.
        offset: u64,
        /// Bytes requested.
        expected: u64,
        /// Bytes obtained before end of file.
        got: u64,
    },
    /// The format failed to pack or unpack a record.
    #[error("format error in shard {shard}")]
    Format {
        /// The shard being written or read.
        shard: u64,
        /// The format's error.
        #[source]
        source: FormatError,
    },
    /// Another writer (thread or process) has the storage open for appending.
    #[error("{dir} is locked by another writer (one writer per storage at a time)")]
    Locked {
        /// The storage directory.
        dir: PathBuf,
    },
    /// A batch needs more bytes than one buffer can hold on this platform (its total does not
    /// fit `usize`), or more runs in one window than a `u32` counts.
    #[error("a batch of {bytes} bytes is too large to read at once")]
    BatchTooLarge {
        /// Bytes the batch needs (saturated at `u64::MAX`).
        bytes: u64,
    },
    /// An output buffer's length differs from what the requests or the read plan need.
    #[error("the buffer holds {found} bytes, but the reads need {expected}")]
    BufferLength {
        /// Bytes the requests or the plan need (saturated at `u64::MAX`).
        expected: u64,
        /// Bytes the buffer holds.
        found: u64,
    },
    /// A read request names a file the [`crate::io::FileSet`] does not have.
    #[error("file index {index} is out of range: the file set has {files} files")]
    FileOutOfRange {
        /// The index requested.
        index: usize,
        /// Files in the set.
        files: usize,
    },
    /// A read plan was given to a reader of another storage than the one that made it.
    #[error("the read plan was made for storage {found:016x}, this reader serves {expected:016x}")]
    PlanMismatch {
        /// The fingerprint of this reader's storage.
        expected: u64,
        /// The fingerprint of the storage the plan was made for.
        found: u64,
    },
    /// Appending to a shard would take its element count or a byte offset past `u64::MAX`.
    #[error("shard {shard}: appending would overflow a u64 count or offset")]
    ShardOverflow {
        /// The shard appended to.
        shard: u64,
    },
    /// The format reports a dtype that cannot be stored (its numpy descr does not parse back).
    #[error("the format's dtype cannot be stored")]
    FormatDtype {
        /// Why the dtype's descr does not parse.
        #[source]
        source: FormatError,
    },
    /// A backend name that is not one of `auto`, `io_uring` (`io-uring`, `uring`), `pread` or
    /// `mmap` (see [`crate::io::BackendKind`]).
    #[error("unknown I/O backend {name:?}: expected auto, io_uring, pread or mmap")]
    UnknownBackend {
        /// The name given.
        name: String,
    },
    /// A [`crate::StreamLayout`] given to [`crate::StreamReader::from_layout`] does not
    /// describe a stream of its files: a file not named by a relative path below the
    /// directory, a segment naming no file or passing its file's committed bytes, a count
    /// overflowing `u64`, big-endian elements of a non-primitive dtype.
    #[error("invalid stream layout in {dir}: {reason}")]
    InvalidLayout {
        /// The directory the layout's files are in.
        dir: PathBuf,
        /// What is wrong, naming the segment or file and the numbers.
        reason: String,
    },
    /// The manifest a writer was about to replace is not the one it read (or last
    /// committed), or, in an object store, a shard object it was about to put is not the
    /// version it read: another writer committed in between (without holding the writer
    /// lock, or in a store that has none; see [`crate::WriteDir::replace_if`]). Nothing of
    /// this commit was published, so neither writer's update is silently lost.
    #[error("{path} changed since this writer read it; another writer committed in between, so this commit was refused")]
    ConcurrentCommit {
        /// The file: the manifest, or the shard object.
        path: PathBuf,
    },
    /// A part job name is not a safe path component (see [`crate::parts::check_job`]).
    #[error("part job name {job:?} is refused: {reason}")]
    InvalidJob {
        /// The job name as given.
        job: String,
        /// Why it is refused.
        reason: String,
    },
    /// A part receipt is malformed: bad JSON, another receipt version, a shard path outside
    /// the part's own directory, a count field missing, receipts of several jobs.
    #[error("receipt of partition {partition} is refused: {reason}")]
    InvalidReceipt {
        /// The receipt's partition (`u64::MAX` when it could not be read).
        partition: u64,
        /// What is wrong with it.
        reason: String,
    },
    /// A part does not agree with the other parts (or, when appending, with the storage) on
    /// its kind, dtype or format.
    #[error("partition {partition} has {field} {found}, but {} has {expected}", against.map_or("the storage".to_string(), |p| format!("partition {p}")))]
    PartMismatch {
        /// The partition that disagrees.
        partition: u64,
        /// `"kind"`, `"dtype"` or `"format"`.
        field: &'static str,
        /// What the other side holds (as JSON text).
        expected: String,
        /// What the partition holds (as JSON text).
        found: String,
        /// The other side: `Some(partition)`, or `None` for the storage appended to.
        against: Option<u64>,
    },
    /// A file a part receipt names does not exist.
    #[error("partition {partition}: {path} named by its receipt does not exist")]
    PartFileMissing {
        /// The receipt's partition.
        partition: u64,
        /// The file.
        path: PathBuf,
    },
    /// A file a part receipt names holds fewer bytes than the receipt commits.
    #[error("partition {partition}: {path} holds {found} bytes, its receipt commits {expected}")]
    PartFileShort {
        /// The receipt's partition.
        partition: u64,
        /// The file.
        path: PathBuf,
        /// Committed length in the receipt.
        expected: u64,
        /// Bytes the file holds.
        found: u64,
    },
    /// A storage (or a part) already exists where a new one was asked for: committing parts
    /// with [`crate::parts::CommitMode::ErrorIfExists`] onto a committed storage, or opening a
    /// part writer on an attempt that was already written.
    #[error("{path} already holds a storage")]
    StorageExists {
        /// The storage's manifest.
        path: PathBuf,
    },
    /// Nothing to commit: no receipt, and no storage to take the kind, dtype and format from.
    #[error("no part to commit into {path}, and no storage there to take its kind from")]
    NoParts {
        /// The storage directory.
        path: PathBuf,
    },
    /// A storage file is not a regular file inside the storage: a symbolic link (never
    /// followed), a FIFO, a directory, a device or socket, a file with other hard links (for
    /// writing), or a name that would leave the storage directory (`..`, an absolute path).
    /// Guideloom reads and writes only regular files it names itself, so a planted link or
    /// FIFO can neither redirect a write nor block a read.
    #[error("{path} is refused: {reason}")]
    UnsafeFile {
        /// The file as it was named.
        path: PathBuf,
        /// What it is instead of a regular file inside the storage.
        reason: String,
    },
    /// A request to a remote object store (`s3://`, `gs://`, `az://`, `http(s)://`) failed:
    /// after its last retry (a timeout, a 5xx answer, throttling, a reset connection, a body
    /// shorter than asked for), or at once when retrying cannot help (the object does not
    /// exist, access is denied, the URL is not supported). Names the object's URL, the byte
    /// range asked for (`None` for a whole object or a metadata request), the attempts made
    /// and the last cause.
    #[error(
        "remote {op} of {url}{}: {cause}{}",
        crate::error::range_text(range),
        crate::error::attempts_text(*attempts)
    )]
    Remote {
        /// What was asked: `get`, `head`, `list`, `put`, `copy`, `delete`, `open`.
        op: &'static str,
        /// The object's URL (`s3://bucket/prefix/shard-00000.stream`).
        url: String,
        /// The byte range asked for, end exclusive.
        range: Option<std::ops::Range<u64>>,
        /// Requests made (1 when it was not retried).
        attempts: u32,
        /// The last failure, as text (the object store's error chain, or what was wrong
        /// with the answer).
        cause: String,
    },
    /// An environment variable that sets an option (`GUIDELOOM_CACHE_BYTES`,
    /// `GUIDELOOM_REMOTE_RETRIES`, ...) holds a value that does not parse as the option's type.
    #[error("environment variable {var}={value:?} is not {expected}")]
    InvalidEnv {
        /// The variable's name.
        var: &'static str,
        /// The value it holds.
        value: String,
        /// What it must hold (`a byte count (a whole number of bytes)`).
        expected: &'static str,
    },
    /// An I/O backend could not be set up or failed internally.
    #[error("I/O backend {backend}: {reason}")]
    Backend {
        /// The backend name (`io_uring`, `pread`, `mmap`).
        backend: &'static str,
        /// What failed.
        reason: String,
    },
}

impl StorageError {
    /// The [`StorageError::UnsafeFile`] for `path`, found to be of type `kind` (a FIFO, a
    /// socket, a device, a directory, a link) instead of a regular file: the refusal every
    /// reader of this crate gives, for readers of files outside a storage to give too.
    pub fn not_regular(path: &std::path::Path, kind: std::fs::FileType) -> Self {
        StorageError::UnsafeFile {
            path: path.to_path_buf(),
            reason: format!("it is {}, not a regular file", kind_name(kind)),
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        StorageError::Io { path: path.into(), source }
    }
}

/// What a file of type `kind` is, in words (`"a FIFO"`).
pub(crate) fn kind_name(kind: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_symlink() {
        "a symbolic link (links are never followed)"
    } else if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_block_device() || kind.is_char_device() {
        "a device"
    } else {
        "not a regular file"
    }
}

/// ` bytes A..B` for a range, nothing for none.
pub(crate) fn range_text(range: &Option<std::ops::Range<u64>>) -> String {
    range.as_ref().map_or_else(String::new, |r| format!(" bytes {}..{}", r.start, r.end))
}

/// `" (after N attempt(s))"`, or nothing when no request was made (`attempts` 0: the URL or
/// the store's options were refused before any request).
pub(crate) fn attempts_text(attempts: u32) -> String {
    if attempts == 0 {
        String::new()
    } else {
        format!(" (after {attempts} attempt(s))")
    }
}

/// The result type of this crate.
pub type Result<T, E = StorageError> = std::result::Result<T, E>;
