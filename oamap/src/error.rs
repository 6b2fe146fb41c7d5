//! The error type of the object-array mapping.

/// Everything that can go wrong while describing, writing or reading OAMap arrays.
///
/// Variants about arrays name the array, so a damaged array set can be found and repaired.
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
    /// An error while reading or writing one partition of a dataset.
    #[error("partition {partition}: {source}")]
    InPartition {
        /// The partition number.
        partition: usize,
        /// What went wrong there (naming the array).
        #[source]
        source: Box<OamapError>,
    },
}

impl OamapError {
    pub(crate) fn schema(msg: impl Into<String>) -> Self {
        OamapError::Schema(msg.into())
    }
}
