//! The error type of the object-array mapping.

use std::path::PathBuf;

/// A boxed error from a codec this crate uses (the zip archive reader and writer).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Everything that can go wrong while describing, writing or reading OAMap arrays.
///
/// Variants about arrays name the array, so a damaged array set can be found and repaired.
/// A variant that wraps another error returns it from [`std::error::Error::source`] and
/// does not repeat it in its message: print the whole chain to see every cause.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OamapError {
    /// A schema (simple form or OAMap's JSON) could not be understood.
    #[error("invalid OAMap schema: {0}")]
    Schema(String),
    /// A numpy dtype name or an OAMap `D` code was not recognised.
    #[error("invalid dtype {dtype:?}: {reason}")]
    Dtype {
        /// The dtype text as given.
        dtype: String,
        /// Why it was refused.
        reason: String,
    },
    /// The source has no array of that name.
    #[error("missing array {name:?}")]
    MissingArray {
        /// The array asked for.
        name: String,
    },
    /// An array has a dtype the node cannot use (for example a float array as starts).
    #[error("array {name:?} has dtype {found}, expected {expected}")]
    ArrayDtype {
        /// The array.
        name: String,
        /// What the node needs.
        expected: String,
        /// What the array holds.
        found: String,
    },
    /// A read index is past the end of an array.
    #[error("array {name:?}: index {index} out of range (length {len})")]
    IndexOutOfRange {
        /// The array being read.
        name: String,
        /// The index asked for.
        index: u64,
        /// The array's length, in entries.
        len: u64,
    },
    /// A value read from an array is not a valid structural value (negative start,
    /// `starts > stops`, a position or tag out of range, a mask below -1 ...).
    #[error("array {name:?} at index {index}: {reason}")]
    BadValue {
        /// The array holding the bad value.
        name: String,
        /// Where in that array.
        index: u64,
        /// What is wrong with it.
        reason: String,
    },
    /// A value handed to the writer does not fit the schema.
    #[error("value at {path} does not fit the schema: {reason}")]
    Fill {
        /// A JSON-pointer-like path to the value (`""` = root).
        path: String,
        /// Why it does not fit.
        reason: String,
    },
    /// A `.npy` or `.npz` byte string could not be decoded or encoded.
    #[error("npy/npz {name:?}: {reason}")]
    Npy {
        /// The array or archive member concerned.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// The zip codec refused an `.npz` archive or one of its members (the cause is the
    /// codec's error, from `source()`).
    #[error("npz {name:?}: the archive could not be read or written")]
    Archive {
        /// The archive member concerned (`<npz>` for the whole archive).
        name: String,
        /// The codec's error.
        #[source]
        source: BoxError,
    },
    /// A file or directory could not be read, written, created, synced or renamed.
    #[error("I/O error on {path}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The operating system's error (its `kind()` tells not-found from permission denied).
        #[source]
        source: std::io::Error,
    },
    /// Text that must be JSON (a stored description, a schema member of an archive, a value
    /// handed to the writer) is not, or a value could not be turned into JSON.
    #[error("{name}: not valid JSON")]
    Json {
        /// What holds the JSON: a file path, an archive member, or the value being written.
        name: String,
        /// The JSON codec's error.
        #[source]
        source: serde_json::Error,
    },
    /// A navigation or projection asked for something the schema does not have.
    #[error("no such path {path:?}: {reason}")]
    Path {
        /// The path as given.
        path: String,
        /// Why it does not resolve.
        reason: String,
    },
    /// A string extension held bytes that are not UTF-8.
    #[error("array {name:?}: string at bytes {start}..{stop} is not UTF-8")]
    Utf8 {
        /// The byte array.
        name: String,
        /// First byte of the string.
        start: u64,
        /// One past its last byte.
        stop: u64,
    },
    /// A dataset description (offsets, partition count, top-level type) is not usable.
    #[error("invalid OAMap dataset: {0}")]
    Dataset(String),
    /// A global entry index is past the end of a dataset (or of one partition).
    #[error("entry {index} out of range (length {len})")]
    EntryOutOfRange {
        /// The entry asked for.
        index: u64,
        /// Number of entries.
        len: u64,
    },
    /// An error while reading or writing one partition of a dataset (the error, naming the
    /// array, is the `source()`).
    #[error("in partition {partition}")]
    InPartition {
        /// The partition number.
        partition: usize,
        /// What went wrong there (naming the array).
        #[source]
        source: Box<OamapError>,
    },
    /// JSON text nests deeper than this crate parses or stores
    /// ([`MAX_JSON_DEPTH`](crate::MAX_JSON_DEPTH)).
    #[error("{name}: JSON nested {found} levels deep, more than the limit of {limit}")]
    TooDeep {
        /// What holds the JSON: a file path, an archive member, or the schema being stored.
        name: String,
        /// The limit.
        limit: usize,
        /// The depth found (the first level past the limit when measuring stopped there).
        found: usize,
    },
    /// Something would grow past a stated bound: an array the writer builds, an archive
    /// member, an input file, or the JSON output of a pointer structure.
    #[error("{what}: {found} exceeds the limit of {limit}")]
    TooLarge {
        /// What grew (`array "object-L-Ds8" (bytes)`, `npz member ...`, `JSON output (values)`).
        what: String,
        /// The limit, in the unit `what` names.
        limit: u64,
        /// How much it would be (at least), in the same unit.
        found: u64,
    },
    /// A file to read or replace is not a regular file inside its directory: a symbolic
    /// link, a FIFO, a device or a directory (never followed or opened for reading).
    #[error("{path} is not a regular file ({reason}); refused")]
    UnsafeFile {
        /// The file.
        path: PathBuf,
        /// What it is instead.
        reason: String,
    },
}

impl OamapError {
    pub(crate) fn schema(msg: impl Into<String>) -> Self {
        OamapError::Schema(msg.into())
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        OamapError::Io { path: path.into(), source }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn wrapping_variants_keep_the_cause_out_of_the_message() {
        let inner = OamapError::MissingArray { name: "object-B".into() };
        let e = OamapError::InPartition { partition: 2, source: Box::new(inner) };
        assert_eq!(e.to_string(), "in partition 2");
        assert_eq!(e.source().unwrap().to_string(), "missing array \"object-B\"");
        let io = std::io::Error::new(std::io::ErrorKind::PermissionDenied, "denied");
        let e = OamapError::io("/x/y.npy", io);
        assert_eq!(e.to_string(), "I/O error on /x/y.npy");
        let src = e.source().unwrap().downcast_ref::<std::io::Error>().unwrap();
        assert_eq!(src.kind(), std::io::ErrorKind::PermissionDenied);
        let json = serde_json::from_str::<serde_json::Value>("{").unwrap_err();
        let e = OamapError::Json { name: "d/dataset.json".into(), source: json };
        assert_eq!(e.to_string(), "d/dataset.json: not valid JSON");
        assert!(e.source().is_some());
    }
}
