/// Everything that can go wrong while describing, packing or unpacking records.
///
/// Each variant carries the context needed to find the bad input: a field name, a position
/// inside the record, expected versus found values.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FormatError {
    /// A numpy `descr` could not be parsed into a [`crate::Dtype`].
    #[error("invalid numpy dtype descr {descr}: {reason}")]
    InvalidDescr {
        /// The offending descr, as JSON text.
        descr: String,
        /// Why it was refused.
        reason: String,
    },
    /// A structured dtype was described inconsistently (overlapping or duplicate fields).
    #[error("invalid structured dtype: {0}")]
    InvalidDtype(String),
    /// A token id does not fit the storage element type.
    #[error("token id {id} at position {position} does not fit the element type {dtype}")]
    TokenOutOfRange {
        /// The id that was refused.
        id: u64,
        /// Its position (0-based) inside the record being packed.
        position: u64,
        /// The element type, in numpy notation (for example `<u2`).
        dtype: String,
    },
    /// A column named by the structured dtype is absent from the record.
    #[error("missing column {field:?} (the dtype has fields {expected:?})")]
    MissingField {
        /// The absent field.
        field: String,
        /// All field names of the dtype, in order.
        expected: Vec<String>,
    },
    /// A record carries a column the dtype does not have.
    #[error("unknown column {field:?} (the dtype has fields {expected:?})")]
    UnknownField {
        /// The extra field.
        field: String,
        /// All field names of the dtype, in order.
        expected: Vec<String>,
    },
    /// A column's element type differs from the dtype's field type.
    #[error("column {field:?} has type {found} but the dtype expects {expected}")]
    FieldTypeMismatch {
        /// The field.
        field: String,
        /// The dtype's type for it, in numpy notation.
        expected: String,
        /// The type supplied, in numpy notation.
        found: String,
    },
    /// Columns of one record have different lengths.
    #[error("column {field:?} has {found} values but column {first:?} has {expected}")]
    UnequalLengths {
        /// The first column, whose length sets the expectation.
        first: String,
        /// The column whose length differs.
        field: String,
        /// Length of the first column, in values.
        expected: u64,
        /// Length of the differing column, in values.
        found: u64,
    },
    /// A byte slice is not a whole number of elements, or segments do not add up.
    #[error("bad window: {0}")]
    BadWindow(String),
    /// A format was used with data of another dtype.
    #[error("dtype mismatch: expected {expected}, found {found}")]
    DtypeMismatch {
        /// The dtype the format expects, in numpy notation (for example `<u2`).
        expected: String,
        /// The dtype encountered, in numpy notation.
        found: String,
    },
    /// The serde codec failed to encode a document.
    #[error("could not encode document: {0}")]
    Encode(String),
    /// Stored bytes could not be decoded (malformed, truncated or of another type).
    #[error("could not decode document from shard {shard}: {reason}")]
    Decode {
        /// The shard the bytes came from.
        shard: u64,
        /// The codec's explanation.
        reason: String,
    },
    /// A stream-with-meta record broke the key/payload contract.
    #[error("invalid metadata for element {position}: {reason}")]
    InvalidMeta {
        /// Position (0-based) of the element whose pair broke the contract.
        position: u64,
        /// What was wrong.
        reason: String,
    },
    /// Any other user-format failure.
    #[error("{0}")]
    Other(String),
}
