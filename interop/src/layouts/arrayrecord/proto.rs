//! The protobuf messages of ArrayRecord's footer and postscript (google/array_record
//! `cpp/layout.proto`), decoded with `prost`.

/// The postscript: the last chunk's first record.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct RiegeliPostscript {
    /// Where the footer chunk begins.
    #[prost(uint64, optional, tag = "1")]
    pub(crate) footer_offset: Option<u64>,
    /// `0x71930e704fdae05e`.
    #[prost(uint64, optional, tag = "2")]
    pub(crate) magic: Option<u64>,
}

/// The footer chunk's first record.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct RiegeliFooterMetadata {
    /// The ArrayRecord metadata (required).
    #[prost(message, optional, tag = "1")]
    pub(crate) array_record_metadata: Option<ArrayRecordMetadata>,
}

/// What the writer recorded about the file.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ArrayRecordMetadata {
    /// Must be 1.
    #[prost(uint64, optional, tag = "1")]
    pub(crate) version: Option<u64>,
    /// User chunks.
    #[prost(uint64, optional, tag = "2")]
    pub(crate) num_chunks: Option<u64>,
    /// Records over all chunks.
    #[prost(uint64, optional, tag = "3")]
    pub(crate) num_records: Option<u64>,
    /// The writer's options string (`group_size:1,...`).
    #[prost(bytes = "vec", optional, tag = "4")]
    pub(crate) writer_options: Option<Vec<u8>>,
}

/// One user chunk's entry in the footer.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ArrayRecordFooter {
    /// The chunk's file position.
    #[prost(uint64, optional, tag = "1")]
    pub(crate) chunk_offset: Option<u64>,
    /// Its records' decoded bytes.
    #[prost(uint64, optional, tag = "2")]
    pub(crate) decoded_data_size: Option<u64>,
    /// Its records.
    #[prost(uint64, optional, tag = "3")]
    pub(crate) num_records: Option<u64>,
}
