//! What can go wrong: [`InteropError`], this crate's error, and [`ForeignError`], what is
//! wrong with a foreign dataset (carried by [`InteropError::Dataset`] with the format and the
//! file).

use std::path::{Path, PathBuf};

use guideloom_loader::LoaderError;
use guideloom_storage::{StorageError, StorageKind};

use crate::format::ForeignFormat;

/// The error type of `guideloom-interop`.
///
/// A dataset that fails validation is [`InteropError::Dataset`] (the layout, the file and a
/// [`ForeignError`] with the field and the numbers); reading its files can fail as the storage
/// does ([`InteropError::Storage`]: I/O, an object store, a file that is not a regular file);
/// the orders fail on their configuration or on another trainer's files. The wrapped errors
/// print as themselves (`Display` and `source()` are theirs), so a report of the chain reads
/// the same as from the crate that raised them.
///
/// ```
/// use guideloom_interop::{ForeignDataset, ForeignError, ForeignFormat, ForeignOptions, InteropError};
/// let dir = tempfile::tempdir()?;
/// let e = ForeignDataset::open(dir.path().join("none.bin"), &ForeignOptions::new().format(ForeignFormat::Llmc))
///     .unwrap_err();
/// assert!(matches!(e.foreign_error(), Some(ForeignError::NoFiles { .. })));
/// assert!(matches!(e, InteropError::Dataset { format: Some(ForeignFormat::Llmc), .. }));
/// assert!(e.to_string().starts_with("llmc dataset "));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InteropError {
    /// A dataset in another project's layout (Megatron, nanoGPT, llm.c, MosaicML MDS,
    /// litdata, OLMo/Dolma, NumPy) is damaged, ambiguous or not supported: `error` says what,
    /// with the numbers, about file `path`.
    #[error("{} dataset {path}: {error}", format_label(*format))]
    Dataset {
        /// The layout being read; `None` when it could not be told (auto-detection failed).
        format: Option<ForeignFormat>,
        /// The file (or dataset path) the problem is in.
        path: PathBuf,
        /// What is wrong, with the field and the numbers ([`InteropError::foreign_error`]
        /// borrows it).
        error: Box<ForeignError>,
    },
    /// Reading a dataset's files failed as a storage read fails (I/O, an object-store
    /// request, a file that is not a regular file, a layout the storage refuses).
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// A loader error (a state, a source, an elastic resume).
    #[error(transparent)]
    Loader(#[from] LoaderError),
    /// An order's or a dataset's configuration is invalid (a split string, the sizes of an
    /// llm.c run, a blend's weights).
    #[error("invalid configuration: {field}: {detail}")]
    InvalidConfig {
        /// The offending setting (for example `"split"`).
        field: &'static str,
        /// Why it is refused.
        detail: String,
    },
    /// Another trainer's checkpoint (llm.c's `state_*.bin`) is not one, or does not match the
    /// data and configuration it is resumed onto.
    #[error("{what}: {detail}")]
    ForeignCheckpoint {
        /// The checkpoint kind (for example `"llm.c checkpoint"`).
        what: &'static str,
        /// What is wrong, with the expected and found values.
        detail: String,
    },
    /// A seed outside `[0, 2^32)` for Megatron's MT19937 (NumPy's `RandomState` refuses it).
    #[error("seed {seed} is outside [0, 2^32)")]
    InvalidSeed {
        /// The seed given.
        seed: u64,
    },
    /// Megatron's cached index differs from the computed one (at `entry`; when the lengths
    /// differ, `cached` and `computed` are the lengths and `entry` the shorter one).
    #[error("Megatron's cached {array} differs at entry {entry}: cached {cached}, computed {computed}")]
    CacheMismatch {
        /// `document_index`, `sample_index` (flattened pairs) or `shuffle_index`.
        array: &'static str,
        /// The first entry that differs.
        entry: u64,
        /// The cached value.
        cached: i64,
        /// The computed value.
        computed: i64,
    },
    /// A Megatron split that holds no token was requested (Megatron itself loops forever).
    #[error("the {split} split holds no token")]
    EmptySplit {
        /// `train`, `valid` or `test`.
        split: &'static str,
    },
    /// An index sized from a count a user or a file gives (`--train-samples`, component
    /// sizes, epochs) would take more memory than the limit ([`crate::MAX_INDEX_BYTES`]), or
    /// its allocation failed: refused before anything is allocated.
    #[error("the {what} would hold {count} entries ({bytes} bytes); the limit is {limit} bytes")]
    IndexTooLarge {
        /// The index (`blend index`, `document index`, ...).
        what: &'static str,
        /// Its entries, as asked (saturated at `u64::MAX`).
        count: u64,
        /// The bytes they take (saturated at `u64::MAX`).
        bytes: u64,
        /// The most bytes one index may take.
        limit: u64,
    },
    /// A native storage that [`crate::open_tokens`] cannot read as a token stream: another
    /// kind than a stream, or elements that are not integers.
    #[error("{location} holds a {kind} storage of dtype {dtype}; open_tokens reads stream storages of integer ids")]
    NotTokens {
        /// The location as given (a path or a URL).
        location: String,
        /// The storage's kind, from its manifest.
        kind: StorageKind,
        /// The storage's element dtype (`none` for document storages).
        dtype: String,
    },
}

impl InteropError {
    /// What is wrong with a foreign dataset, when this is [`InteropError::Dataset`].
    pub fn foreign_error(&self) -> Option<&ForeignError> {
        match self {
            InteropError::Dataset { error, .. } => Some(error),
            _ => None,
        }
    }
}

/// The loader's error for a reader of the dataset at `path` that could not be made
/// ([`LoaderError::Open`], as the loader's own sources report it).
pub(crate) fn open_error(path: &Path) -> impl FnOnce(StorageError) -> LoaderError + '_ {
    move |source| LoaderError::Open { path: path.to_path_buf(), source }
}

/// The label of a format in [`InteropError::Dataset`]'s message.
fn format_label(format: Option<ForeignFormat>) -> &'static str {
    format.map_or("foreign", ForeignFormat::name)
}

/// The result type of this crate.
pub type Result<T, E = InteropError> = std::result::Result<T, E>;

/// What is wrong with a foreign dataset, with the field and the numbers involved. The names
/// follow the validation lists of each layout (see the crate documentation); the file is
/// named by the [`InteropError::Dataset`] that carries this.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ForeignError {
    /// This build of the crate does not read the layout: the cargo feature that brings its
    /// dependencies is off.
    #[error("this build does not read the layout: enable guideloom-interop's `{feature}` feature")]
    FeatureDisabled {
        /// The feature (`mds`, `olmo`).
        feature: &'static str,
    },
    /// The layout could not be told from the files (no magic number or index file says it),
    /// or a raw layout was asked for without an element dtype.
    #[error("unknown format: {reason}")]
    UnknownFormat {
        /// What was found, and what to pass.
        reason: String,
    },
    /// An option the layout needs was not given (for example the dtype of a raw file).
    #[error("option `{option}` is required: {reason}")]
    MissingOption {
        /// The option's field name in `ForeignOptions`.
        option: &'static str,
        /// Why it is needed.
        reason: String,
    },
    /// No file matched the path or pattern.
    #[error("no file matches {pattern}")]
    NoFiles {
        /// The path or glob pattern.
        pattern: String,
    },
    /// The file does not start with the layout's magic number.
    #[error("bad magic number: found {found}")]
    BadMagic {
        /// The magic found (escaped bytes, or the number for llm.c).
        found: String,
    },
    /// A Megatron `.idx` of the legacy lazy/cached layout (removed from Megatron in 2023).
    #[error("legacy {magic} index: unsupported (re-run Megatron's preprocess_data.py)")]
    UnsupportedLegacyFormat {
        /// The legacy magic (`TNTIDX`).
        magic: String,
    },
    /// A header's version field holds a version this reader does not know.
    #[error("unsupported version {found} in field `{field}`")]
    UnsupportedVersion {
        /// The header field.
        field: &'static str,
        /// The version found.
        found: i64,
    },
    /// A Megatron dtype code outside the table (1-8).
    #[error("unknown dtype code {code}")]
    UnknownDTypeCode {
        /// The code found.
        code: u64,
    },
    /// The elements are not integer token ids (floats, booleans, strings, structs, ...).
    #[error("unsupported token dtype {dtype}")]
    UnsupportedTokenDType {
        /// The dtype as the file names it.
        dtype: String,
    },
    /// A NumPy object array (its data is a pickle, which is never loaded).
    #[error("unsafe dtype {descr}: object arrays are pickles and are never loaded")]
    UnsafeDType {
        /// The descr (`|O`).
        descr: String,
    },
    /// An index file shorter than its header says.
    #[error("truncated index: need {need} bytes, have {have}")]
    TruncatedIndex {
        /// Bytes the header implies.
        need: u64,
        /// Bytes in the file.
        have: u64,
    },
    /// An index or array file longer than its header says.
    #[error("{count} trailing bytes after the data the header describes")]
    TrailingBytes {
        /// Bytes past the end.
        count: u64,
    },
    /// Megatron: `document_indices[0]` is not 0.
    #[error("document_indices[0] is {found}, not 0")]
    DocumentIndexStart {
        /// The first entry.
        found: i64,
    },
    /// Megatron: `document_indices` decreases (or is empty).
    #[error("document_indices decrease at entry {entry}")]
    DocumentIndexNotMonotonic {
        /// The first entry smaller than the one before.
        entry: u64,
    },
    /// Megatron: the last document index is not the sequence count.
    #[error("document_indices end at {last}, not at the sequence count {sequences}")]
    DocumentIndexEnd {
        /// The last entry.
        last: i64,
        /// Sequences in the index.
        sequences: u64,
    },
    /// Megatron: a negative sequence length.
    #[error("sequence_lengths[{sequence}] is negative")]
    NegativeLength {
        /// The sequence.
        sequence: u64,
    },
    /// Megatron: a negative sequence pointer.
    #[error("sequence_pointers[{sequence}] is negative")]
    NegativePointer {
        /// The sequence.
        sequence: u64,
    },
    /// Megatron: a pointer differs from the end of the sequence before it (repairable with
    /// `repair_pointers`).
    #[error("sequence_pointers[{sequence}] is {found}, the lengths before it give {expected}")]
    PointerMismatch {
        /// The sequence.
        sequence: u64,
        /// The pointer on disk.
        found: i64,
        /// The byte offset the lengths give.
        expected: u64,
    },
    /// Megatron: the `.bin` size differs from the end of the last sequence.
    #[error("data file holds {have} bytes, the index needs {want}")]
    DataFileSize {
        /// Bytes in the `.bin`.
        have: u64,
        /// Bytes the index describes.
        want: u64,
    },
    /// A raw token file whose size is not a multiple of the element size.
    #[error("{bytes} bytes are not a whole number of {itemsize}-byte elements")]
    NotMultipleOfItemSize {
        /// File size.
        bytes: u64,
        /// Element size.
        itemsize: u64,
    },
    /// llm.c: a multiple-choice evaluation file, not tokens.
    #[error("magic {magic} marks an llm.c evaluation file, not a token shard")]
    NotATokenShard {
        /// The magic.
        magic: i64,
    },
    /// A file shorter than its fixed header.
    #[error("truncated header: need {need} bytes, have {have}")]
    TruncatedHeader {
        /// Header bytes.
        need: u64,
        /// Bytes in the file.
        have: u64,
    },
    /// llm.c: a negative token count.
    #[error("negative token count {found}")]
    NegativeTokenCount {
        /// The count in the header.
        found: i64,
    },
    /// A file whose size differs from the size its header implies.
    #[error("size mismatch: expected {expected} bytes, got {got}")]
    SizeMismatch {
        /// Bytes the header implies.
        expected: u64,
        /// Bytes in the file.
        got: u64,
    },
    /// The files of one dataset hold different element dtypes.
    #[error("mixed dtypes: {found}, the first file holds {expected}")]
    MixedDTypes {
        /// The dtype of the first file.
        expected: String,
        /// This file's dtype.
        found: String,
    },
    /// OLMo/Dolma: a raw token file that is really a NumPy `.npy` (open it as `npy`).
    #[error("the file starts with the NumPy magic: open it with the npy format, not as raw tokens")]
    LooksLikeNpy,
    /// OLMo/Dolma: a document metadata row outside the token file.
    #[error("metadata row {row}: [{start}, {end}) is outside the {tokens} tokens of the file")]
    MetadataOutOfRange {
        /// The row (0-based).
        row: u64,
        /// Its start.
        start: u64,
        /// Its end.
        end: u64,
        /// Tokens in the file.
        tokens: u64,
    },
    /// OLMo/Dolma: a metadata row that does not parse, or leaves a gap.
    #[error("metadata row {row}: {reason}")]
    Metadata {
        /// The row (0-based).
        row: u64,
        /// What is wrong.
        reason: String,
    },
    /// An index file (`index.json`) that is not valid JSON or lacks a field.
    #[error("invalid index: {reason}")]
    InvalidIndex {
        /// What is wrong, naming the field.
        reason: String,
    },
    /// MDS: `index.json` has a version other than 2.
    #[error("unsupported index version {found}")]
    UnsupportedIndexVersion {
        /// The version.
        found: i64,
    },
    /// MDS: a shard entry has a version other than 2.
    #[error("shard {shard}: unsupported shard version {found}")]
    UnsupportedShardVersion {
        /// The shard (0-based).
        shard: u64,
        /// The version.
        found: i64,
    },
    /// MDS: a shard of another writer (`json`, `csv`, ...).
    #[error("shard {shard}: unsupported shard format {found}")]
    UnsupportedShardFormat {
        /// The shard.
        shard: u64,
        /// The format.
        found: String,
    },
    /// MDS: a column encoding this reader does not know.
    #[error("column {column}: unknown encoding {encoding}")]
    UnknownEncoding {
        /// The column.
        column: String,
        /// The encoding.
        encoding: String,
    },
    /// An encoding or serializer that executes code on load (`pkl`, `pickle`): refused.
    #[error("column {column}: unsafe encoding {encoding} (executes code on load): refused")]
    UnsafeEncoding {
        /// The column.
        column: String,
        /// The encoding.
        encoding: String,
    },
    /// The token column is missing, or is of an encoding that cannot hold token ids.
    #[error("token column: {reason}")]
    TokenColumn {
        /// What is wrong.
        reason: String,
    },
    /// A file name from an index that would leave the dataset's directory (absolute, `..`,
    /// backslash, or a link pointing out).
    #[error("unsafe path {path:?}: it leaves the dataset directory")]
    UnsafeShardPath {
        /// The name as the index gives it.
        path: String,
    },
    /// A shard named by the index exists neither raw nor compressed.
    #[error("shard not found: {basename}")]
    ShardNotFound {
        /// The raw basename from the index.
        basename: String,
    },
    /// A compressed shard that does not decompress.
    #[error("decompression failed: {reason}")]
    DecompressionFailed {
        /// The decoder's message.
        reason: String,
    },
    /// A compression this reader does not support.
    #[error("unsupported compression {compression}")]
    UnsupportedCompression {
        /// The compression as the index names it.
        compression: String,
    },
    /// MDS: a shard's size differs from `raw_data.bytes`.
    #[error("shard size mismatch: the index says {index} bytes, the file holds {file}")]
    ShardSizeMismatch {
        /// `raw_data.bytes`.
        index: u64,
        /// Bytes of the (decompressed) shard.
        file: u64,
    },
    /// MDS: a shard's hash differs from the index (with `verify_hashes`).
    #[error("{algorithm} hash mismatch: index {expected}, data {found}")]
    HashMismatch {
        /// The algorithm (`sha1`, `xxh3_64`, ...).
        algorithm: String,
        /// The hex digest in the index.
        expected: String,
        /// The hex digest of the bytes.
        found: String,
    },
    /// MDS: a hash algorithm this reader cannot compute (with `verify_hashes`).
    #[error("unsupported hash algorithm {algorithm}")]
    UnsupportedHash {
        /// The algorithm.
        algorithm: String,
    },
    /// MDS: the shard header's sample count differs from the index.
    #[error("sample count mismatch: index {index}, shard {shard}")]
    SampleCountMismatch {
        /// `samples` in the index.
        index: u64,
        /// `n` in the shard header.
        shard: u64,
    },
    /// MDS/litdata: a sample offset outside the file, or offsets that do not end at its end.
    #[error("offset {entry} is {offset}, outside [{min}, {size}]")]
    OffsetOutOfRange {
        /// The offset entry.
        entry: u64,
        /// Its value.
        offset: u64,
        /// The smallest valid value (the end of the header).
        min: u64,
        /// The file size.
        size: u64,
    },
    /// MDS/litdata: sample offsets decrease.
    #[error("offsets decrease at entry {entry}")]
    OffsetsNotMonotonic {
        /// The first entry smaller than the one before.
        entry: u64,
    },
    /// MDS/litdata: a sample whose column sizes do not fit it.
    #[error("sample {sample}: {reason}")]
    SampleLayout {
        /// The sample (global index).
        sample: u64,
        /// What does not fit.
        reason: String,
    },
    /// litdata: a chunk whose `dim` needs more or fewer bytes than it holds.
    #[error("chunk size mismatch: dim {dim} needs {need} bytes, have {have}")]
    ChunkSizeMismatch {
        /// The chunk's `dim` (tokens).
        dim: u64,
        /// Bytes the header and `dim` need.
        need: u64,
        /// Bytes in the file.
        have: u64,
    },
    /// litdata: encrypted chunks.
    #[error("encrypted chunks are not supported")]
    Encrypted,
    /// NumPy: the header text is not the dict literal NumPy writes.
    #[error("header does not parse: {reason}")]
    HeaderParse {
        /// What is wrong.
        reason: String,
    },
    /// NumPy: a header without one of `descr`, `fortran_order`, `shape`.
    #[error("header has no key {key:?}")]
    HeaderMissingKey {
        /// The key.
        key: String,
    },
    /// NumPy: a header with a key other than `descr`, `fortran_order`, `shape`.
    #[error("header has an unexpected key {key:?}")]
    HeaderExtraKey {
        /// The key.
        key: String,
    },
    /// What is wrong inside one record, sample, chunk or tar member of a record format
    /// (ArrayRecord, TFRecord, WebDataset): `at` names it (`record 17`, `sample doc000000
    /// field npy`, `record 0 feature input_ids`), `error` says what.
    #[error("{at}: {error}")]
    InRecord {
        /// The record, sample or member, as the layout numbers or keys it.
        at: String,
        /// What is wrong with it.
        error: Box<ForeignError>,
    },
    /// Raw records (no `.npy` header) and no dtype given: their element type is not in the
    /// file.
    #[error("raw records need a dtype ({reason})")]
    DTypeRequired {
        /// The record that has no header.
        reason: String,
    },
    /// A record, field or column holds values that are not integer ids (a TFRecord float
    /// list, a string; an Arrow column that is not a `list`, `large_list` or `fixed_size_list`
    /// of an integer type; a Parquet column that is not a 1-level list of INT32/INT64).
    #[error("unsupported token type {found}")]
    UnsupportedTokenType {
        /// The type found (`float_list`, `bytes_list`; as pyarrow names a column type:
        /// `list<float>`, `string`, ...).
        found: String,
    },
    /// ArrayRecord: a file shorter than one 64 KiB block.
    #[error("file of {size} bytes is smaller than one 65536-byte block")]
    FileTooSmall {
        /// The file's size.
        size: u64,
    },
    /// ArrayRecord: the size is not a whole number of 64 KiB blocks (the writer pads footer
    /// and postscript to block boundaries).
    #[error("size {size} is not a multiple of 65536")]
    NotBlockAligned {
        /// The file's size.
        size: u64,
    },
    /// Riegeli: the file does not start with the signature chunk.
    #[error("the file does not start with the riegeli/records signature")]
    BadSignature,
    /// Riegeli: a block header's or a chunk's HighwayHash does not match (`what`: `block
    /// header`, `header`, `data`).
    #[error("chunk hash mismatch: chunk at {chunk}: {what} hash")]
    ChunkHashMismatch {
        /// The chunk's file offset (for a block header: the block's).
        chunk: u64,
        /// Which hash.
        what: &'static str,
    },
    /// Riegeli: a chunk whose type this reader does not decode (`t`: transposed records).
    #[error("chunk at {chunk}: unsupported chunk type {chunk_type:?}")]
    UnsupportedChunkType {
        /// The chunk's file offset.
        chunk: u64,
        /// The type byte as a character.
        chunk_type: char,
    },
    /// Riegeli: a chunk's data does not decode (sizes, compression, lengths).
    #[error("chunk at {chunk}: {reason}")]
    ChunkDecode {
        /// The chunk's file offset.
        chunk: u64,
        /// What is wrong, with the numbers.
        reason: String,
    },
    /// ArrayRecord: the postscript's footer offset is not before the postscript.
    #[error("footer out of range: footer_offset {footer_offset}, postscript at {postscript}")]
    FooterOutOfRange {
        /// The offset the postscript gives.
        footer_offset: u64,
        /// Where the postscript chunk is.
        postscript: u64,
    },
    /// ArrayRecord: a footer entry that is not a chunk of the file as the footer describes it.
    #[error("chunk offset out of range: chunk {chunk}: {reason}")]
    ChunkOffsetOutOfRange {
        /// The chunk's index in the footer.
        chunk: u64,
        /// What is wrong, with the numbers.
        reason: String,
    },
    /// ArrayRecord: the footer's record count differs from what its chunks hold.
    #[error("record count mismatch: footer says {footer}, chunks hold {chunks}")]
    RecordCountMismatch {
        /// `ArrayRecordMetadata.num_records`.
        footer: u64,
        /// The sum over the chunks.
        chunks: u64,
    },
    /// TFRecord: the masked crc32c of a record's length does not match.
    #[error("record {record} at offset {offset}: length crc mismatch")]
    LengthCrcMismatch {
        /// The record's index in the file.
        record: u64,
        /// Its byte offset (in the decompressed stream for a gzip file).
        offset: u64,
    },
    /// TFRecord: the masked crc32c of a record's data does not match.
    #[error("record {record} at offset {offset}: data crc mismatch")]
    DataCrcMismatch {
        /// The record's index in the file.
        record: u64,
        /// Its byte offset.
        offset: u64,
    },
    /// TFRecord: a record's length runs past the end of the file.
    #[error("record {record} at offset {offset}: length {length}, {left} bytes left")]
    RecordOutOfRange {
        /// The record's index in the file.
        record: u64,
        /// Its byte offset.
        offset: u64,
        /// The length its header gives.
        length: u64,
        /// The bytes after the length fields (data and its crc must fit).
        left: u64,
    },
    /// TFRecord: the file ends inside a record's framing.
    #[error("record {record} at offset {offset}: truncated ({have} bytes of a record)")]
    TruncatedRecord {
        /// The record's index in the file.
        record: u64,
        /// Its byte offset.
        offset: u64,
        /// The bytes there.
        have: u64,
    },
    /// TFRecord: a record that is not a `tf.train.Example`.
    #[error("record {record}: not a tf.train.Example ({reason})")]
    ExampleDecode {
        /// The record's index in the file.
        record: u64,
        /// The protobuf decoder's message.
        reason: String,
    },
    /// TFRecord: the Example has no such feature.
    #[error("record {record}: no feature {feature}; have {have}")]
    FeatureNotFound {
        /// The record's index in the file.
        record: u64,
        /// The feature asked for.
        feature: String,
        /// The features it has, sorted, comma-separated.
        have: String,
    },
    /// A TFRecord index line that does not point at a record of the file.
    #[error("index line {line}: {reason}")]
    BadRecordIndex {
        /// The line (from 1).
        line: u64,
        /// What is wrong.
        reason: String,
    },
    /// WebDataset: a tar header's checksum does not match.
    #[error("member {member} at offset {offset}: header checksum mismatch")]
    TarHeaderChecksum {
        /// The member's index in the tar (PAX and long-name headers count as members).
        member: u64,
        /// The header's byte offset.
        offset: u64,
    },
    /// WebDataset: a tar header or PAX record that does not parse.
    #[error("member {member} at offset {offset}: {reason}")]
    TarHeaderDecode {
        /// The member's index.
        member: u64,
        /// The header's byte offset.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// WebDataset: the tar ends inside a member's data.
    #[error("truncated member {member} {name}: size {size}, {present} bytes present")]
    TruncatedMember {
        /// The member's index.
        member: u64,
        /// Its name.
        name: String,
        /// The size its header gives.
        size: u64,
        /// The bytes there.
        present: u64,
    },
    /// WebDataset: a member name that is absolute, has `..` or a NUL (it would leave the
    /// dataset if extracted; nothing is ever extracted).
    #[error("unsafe member name: member {member}: {name}")]
    UnsafeMemberName {
        /// The member's index.
        member: u64,
        /// Its name.
        name: String,
    },
    /// WebDataset: a member that is not a regular file (a link, a device, a FIFO, a
    /// directory).
    #[error("unsupported member type: member {member} {name}: {kind}")]
    UnsupportedMemberType {
        /// The member's index.
        member: u64,
        /// Its name.
        name: String,
        /// What it is (`symlink`, `hard link`, ...).
        kind: String,
    },
    /// WebDataset: one sample holds the same field twice.
    #[error("sample {key}: duplicate field {field}")]
    DuplicateField {
        /// The sample's key.
        key: String,
        /// The field.
        field: String,
    },
    /// WebDataset: a sample without the token field.
    #[error("sample {key}: no field {field}")]
    MissingField {
        /// The sample's key.
        key: String,
        /// The field asked for.
        field: String,
    },
    /// NumPy: a header longer than 10,000 bytes (NumPy's own limit).
    #[error("header of {len} bytes exceeds the 10000-byte limit")]
    HeaderTooLarge {
        /// HEADER_LEN.
        len: u64,
    },
    /// NumPy: a Fortran-order 2-D array.
    #[error("unsupported layout: {layout}")]
    UnsupportedLayout {
        /// `fortran_order`.
        layout: String,
    },
    /// NumPy: a shape that is not 1-D (tokens) or 2-D (samples).
    #[error("unsupported shape {shape}")]
    UnsupportedShape {
        /// The shape as a tuple.
        shape: String,
    },
    /// NumPy: the data is shorter than the shape needs.
    #[error("data holds {have} bytes, the shape needs {need}")]
    DataSize {
        /// Bytes after the header.
        have: u64,
        /// Bytes the shape needs.
        need: u64,
    },

    // Hugging Face datasets (Arrow IPC) and Parquet (issue 28).
    /// A file a dataset's listing (`state.json`, `dataset_dict.json`) names is not there.
    #[error("file not found: {name}")]
    FileNotFound {
        /// The name as the listing gives it.
        name: String,
    },
    /// A `DatasetDict` directory opened without naming one of its splits.
    #[error("a dataset dict: name a split ({})", splits.join(", "))]
    SplitRequired {
        /// The splits `dataset_dict.json` lists.
        splits: Vec<String>,
    },
    /// The token column is not in the file's schema.
    #[error("column {column} not found; have {}", have.join(", "))]
    ColumnNotFound {
        /// The column asked for.
        column: String,
        /// The columns the schema holds, in order.
        have: Vec<String>,
    },
    /// Arrow IPC: a message whose metadata does not fit in the file (or is not positive).
    #[error("message {message} at offset {offset}: metadata {metadata} bytes, file has {file}")]
    MessageOutOfRange {
        /// The message (0 = the schema).
        message: u64,
        /// Its first byte.
        offset: u64,
        /// The declared metadata length.
        metadata: i64,
        /// The file's size.
        file: u64,
    },
    /// Arrow IPC: a message's flatbuffer does not verify, or is not what the stream needs.
    #[error("message {message} at offset {offset}: {reason}")]
    MessageDecode {
        /// The message (0 = the schema).
        message: u64,
        /// Its first byte.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// Arrow IPC: a record batch whose body runs past the end of the file.
    #[error("record batch {batch}: body needs {need} bytes at offset {offset}, {present} present")]
    TruncatedStream {
        /// The record batch (0-based, in the file).
        batch: u64,
        /// The declared body length.
        need: u64,
        /// The body's first byte.
        offset: u64,
        /// Bytes of the file from there.
        present: u64,
    },
    /// Arrow IPC: a buffer of the token column outside its batch's body, or shorter than its
    /// array needs.
    #[error("record batch {batch} buffer {buffer}: {reason}")]
    BufferOutOfRange {
        /// The record batch (0-based, in the file).
        batch: u64,
        /// The buffer (its index in the batch's buffer list).
        buffer: u64,
        /// The numbers that do not fit.
        reason: String,
    },
    /// Arrow IPC: list offsets of the token column that decrease (or start negative).
    #[error("{column} row {row}: {a} > {b}")]
    InvalidOffsets {
        /// The token column.
        column: String,
        /// The row (in the file) whose length would be negative.
        row: u64,
        /// Its start offset.
        a: i64,
        /// Its end offset.
        b: i64,
    },
    /// Arrow IPC: a list offset past the values of the token column.
    #[error("{column} row {row}: offset {offset} > {values} values")]
    ListOffsetOutOfRange {
        /// The token column.
        column: String,
        /// The row (in the file).
        row: u64,
        /// The offset.
        offset: i64,
        /// Values in the child array.
        values: u64,
    },
    /// A null list or a null token in the token column (an empty list is an empty document;
    /// a null is refused).
    #[error("{column} row {row}: null tokens")]
    NullTokens {
        /// The token column.
        column: String,
        /// The row (in the file).
        row: u64,
    },
    /// Parquet: a footer length that does not fit the file.
    #[error("footer length {footer} does not fit a file of {file} bytes")]
    FooterLengthOutOfRange {
        /// The footer length the file's tail declares.
        footer: u64,
        /// The file's size.
        file: u64,
    },
    /// Parquet: the footer (Thrift `FileMetaData`) does not decode, or a page header does not.
    #[error("footer: {reason}")]
    FooterDecode {
        /// The decoder's message.
        reason: String,
    },
    /// Parquet: a column chunk whose byte range leaves the data (ends past the footer's start).
    #[error("row group {row_group} column {column}: ends at {end}, data ends at {data_end}")]
    ColumnChunkOutOfRange {
        /// The row group.
        row_group: u64,
        /// The column's path (`input_ids.list.element`).
        column: String,
        /// The end of its byte range.
        end: u64,
        /// Where the footer starts.
        data_end: u64,
    },
    /// Parquet: a page whose decompressed bytes differ from its header's
    /// `uncompressed_page_size` (decompression stops there: a bomb produces nothing more).
    #[error("row group {row_group} column {column} page {page}: declared {declared} bytes, {found}")]
    DecompressedSizeMismatch {
        /// The row group.
        row_group: u64,
        /// The column's path.
        column: String,
        /// The page in the column chunk (0-based, dictionary page included).
        page: u64,
        /// `uncompressed_page_size`.
        declared: u64,
        /// What the frame did (`frame holds more`, the decoder's message).
        found: String,
    },
    /// Parquet: a page of the token column that does not decode (a header out of the chunk, a
    /// codec error, levels or values that do not parse).
    #[error("row group {row_group} column {column}: {reason}")]
    PageDecode {
        /// The row group.
        row_group: u64,
        /// The column's path.
        column: String,
        /// What is wrong.
        reason: String,
    },
    /// Parquet: a row group whose token column holds another number of rows than it declares.
    #[error("row group {row_group}: {found} rows, the footer says {declared}")]
    RowCountMismatch {
        /// The row group.
        row_group: u64,
        /// `num_rows`.
        declared: u64,
        /// Rows the levels hold.
        found: u64,
    },
    /// Parquet: an encrypted footer (`PARE`).
    #[error("encrypted Parquet files are not supported")]
    UnsupportedEncryption,
}
