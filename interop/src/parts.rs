//! What a layout reader finds in a dataset ([`Parts`]: the files, the element runs, the
//! documents), and the public views of it: [`ForeignFile`] and [`ForeignDetails`].

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use guideloom_formats::Primitive;
use guideloom_storage::{Segment, StorageDir};

use crate::dir::DecodedFile;
use crate::files::Fs;
use crate::layouts::megatron_index::MegatronIndex;

/// One file of a foreign dataset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForeignFile {
    /// The file, relative to [`crate::ForeignDataset::root`].
    pub path: PathBuf,
    /// Its size in bytes (decompressed size for a compressed MDS shard).
    pub bytes: u64,
    /// The tokens it contributes to the stream.
    pub elements: u64,
}

/// What a layout records beyond tokens and documents.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ForeignDetails {
    /// Nothing more (nanoGPT, OLMo).
    None,
    /// Megatron: sequences, pointers, document indices, modes.
    Megatron(MegatronIndex),
    /// llm.c: the header version of each file (0 for a header-less legacy file).
    Llmc {
        /// Per file: 1 (GPT-2, u16), 7 (Llama-3, u32) or 0 (raw).
        versions: Vec<u32>,
    },
    /// MDS: the sample count of each shard, and the token column.
    Mds {
        /// Per shard, in index order.
        samples: Vec<u64>,
        /// The token column's name and encoding.
        column: (String, String),
    },
    /// litdata: the item loader and each chunk's token count (`dim`) or item count.
    Litdata {
        /// `TokensLoader` or `PyTreeLoader`.
        item_loader: String,
        /// Per chunk: its items.
        items: Vec<u64>,
    },
    /// Record formats (ArrayRecord, TFRecord, WebDataset): the records (samples) of each
    /// file, each one document.
    Records {
        /// Per file, in stream order.
        records: Vec<u64>,
    },
    /// NumPy: the shape of each file.
    Npy {
        /// Per file.
        shapes: Vec<Vec<u64>>,
    },
    /// Hugging Face Arrow and Parquet: the token column, and per file its rows (documents)
    /// and its record batches (Arrow) or row groups (Parquet).
    Table {
        /// The token column's name.
        column: String,
        /// Its type as pyarrow names it (`list<int32>`, `large_list<uint16>`, ...).
        column_type: String,
        /// Per file: rows.
        rows: Vec<u64>,
        /// Per file: record batches (Arrow) or row groups (Parquet).
        groups: Vec<u64>,
        /// Per file: the units a read decodes (Parquet: one per data page with an offset
        /// index, else one per row group; a random window costs the blocks it spans, in
        /// decoded bytes about `tokens / blocks` times the dtype's size each, plus the
        /// dictionary page), 0 for Arrow (read in place, nothing decoded).
        blocks: Vec<u64>,
    },
}

/// What a layout reader found: everything [`crate::ForeignDataset`] holds but the options.
#[derive(Debug)]
pub(crate) struct Parts {
    /// The dataset's directory: every file is named relative to it.
    pub(crate) root: PathBuf,
    /// The directory `root` names, every file read through it.
    pub(crate) dir: Arc<dyn StorageDir>,
    /// The element dtype.
    pub(crate) dtype: Primitive,
    /// Whether the files store the elements big-endian.
    pub(crate) big_endian: bool,
    /// The files, in stream order.
    pub(crate) files: Vec<ForeignFile>,
    /// The element runs, in stream order.
    pub(crate) segments: Vec<Segment>,
    /// Document boundaries (documents + 1 token offsets, from 0), where recorded.
    pub(crate) documents: Option<Vec<u64>>,
    /// What the layout records beyond tokens and documents.
    pub(crate) details: ForeignDetails,
    /// Decompressed files, by name relative to `root`.
    pub(crate) mem: BTreeMap<String, Arc<[u8]>>,
    /// Files whose elements are decoded on demand (Parquet token columns), by name relative
    /// to `root`: the stream reads them as raw little-endian elements.
    pub(crate) decoded: BTreeMap<String, Arc<dyn DecodedFile>>,
    /// xxh3 of the index bytes (part of the fingerprint).
    pub(crate) index_hash: u64,
}

impl Parts {
    /// Nothing found yet in the directory of `fs`: elements of `dtype`, little-endian.
    pub(crate) fn new(fs: &Fs, dtype: Primitive) -> Self {
        Parts {
            root: fs.root.clone(),
            dir: fs.dir.clone(),
            dtype,
            big_endian: false,
            files: Vec::new(),
            segments: Vec::new(),
            documents: None,
            details: ForeignDetails::None,
            mem: BTreeMap::new(),
            decoded: BTreeMap::new(),
            index_hash: 0,
        }
    }

    /// The elements of each file (the sum of its segments'), in file order.
    pub(crate) fn file_elements(&self) -> Vec<u64> {
        let mut per_file = vec![0u64; self.files.len()];
        for s in &self.segments {
            per_file[s.file] += s.elements;
        }
        per_file
    }
}
