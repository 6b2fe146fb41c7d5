//! Every path of the Rust crates the binding uses, in one place (through the facade crate), so
//! that a move inside the crates changes only this file.

pub(crate) use guideloom::formats::{
    DocumentFormat, Dtype, Element, FormatError, IntTokenFormat, MetaSink, MetaWindow, Primitive, RawWindow,
    StreamFormat, StreamWithMetaFormat, TokenElement, TokenFormat,
};
pub(crate) use guideloom::interop::{
    open_token_records, token_windows, ForeignDataset, ForeignError, ForeignFormat, ForeignOptions,
    GptConfig, InteropError, LlmcRun, LlmcRunOptions, MegatronRun, MegatronRunOptions, MegatronSample,
    MegatronSamples, MegatronSplit, OpenOptions, RecordUnit, U32Records,
};
pub(crate) use guideloom::loader::mix::{Mix, MixConfig, MixSchedule, MixStop, Sourced};
pub(crate) use guideloom::loader::pack::{Overflow, PackConfig, PackStrategy, Packed, PackedRow};
pub(crate) use guideloom::loader::transforms::Slice;
pub(crate) use guideloom::loader::{
    Collate, DataSource, Loader, LoaderBuilder, LoaderError, LoaderIter, ResumeOptions, Spans, State,
    TokenBatch, TokenWindowCollate, TokenWindows, VecCollate, WindowSpan, STATE_VERSION,
};
pub(crate) use guideloom::oamap::fs as oamap_fs;
pub(crate) use guideloom::oamap::{
    from_data as from_oamap_data, parse_json as oamap_parse_json, Array as OamArray,
    ArraySource as OamArraySource, Column, DatasetDescription, Dtype as OamDtype, NodeId, NodeKind,
    OamapError, PartitionArrays, Reader as OamReader, Schema as OamSchema, Value as OamValue,
    DEFAULT_MAX_NPZ_TOTAL,
};
pub(crate) use guideloom::storage::kind::Stream as StreamKind;
pub(crate) use guideloom::storage::parts::{CommitMode, PartWriter, PartsRoot, Receipt};
pub(crate) use guideloom::storage::{
    DocumentReader, DocumentWriter, Manifest, PreadBackend, ReadOptions, RemoteOptions, StorageDir,
    StorageError, StorageLocation, StreamReader, StreamWithMetaReader, StreamWithMetaWriter, StreamWriter,
    Window, Writer, WriterKind,
};
