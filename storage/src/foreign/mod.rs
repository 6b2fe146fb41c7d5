//! Token datasets in other projects' layouts, read in place: Megatron-Core indexed datasets,
//! nanoGPT and llm.c token files, MosaicML Streaming MDS, litdata optimized chunks, OLMo/Dolma
//! token files and NumPy `.npy` arrays.
//!
//! [`ForeignDataset::open`] validates a dataset (headers, offsets against file sizes, paths
//! inside its directory) without reading its tokens, and maps its files onto the stream
//! shape every [`crate::StreamReader`] reads: a list of files, each contributing element
//! ranges at byte offsets (its *segments*), in a fixed order, with the document boundaries
//! the layout records as ranges of that stream. [`ForeignDataset::reader`] then gives a
//! plain [`crate::StreamReader`] over those segments: windows cross file and segment
//! boundaries with their segmentation, batches are one backend call (io_uring, pread, mmap)
//! as for a native storage, `plan`/`fetch`/`decode` work as everywhere, and the loader's
//! token-window fast path reads them unchanged. Nothing is converted or written; compressed
//! MDS shards (zstd, gzip) are the one exception: they are decompressed into memory on open
//! and read from there.
//!
//! | layout | [`ForeignFormat`] | path | dtype | documents |
//! | --- | --- | --- | --- | --- |
//! | Megatron-Core `MMIDIDX` v1 | `megatron` | the prefix of `<prefix>.bin` / `<prefix>.idx` | from the index (codes 1-5, 8) | `document_indices` (and [`MegatronIndex`] keeps the sequences) |
//! | nanoGPT `train.bin` | `nanogpt` | a file or a glob | required ([`ForeignOptions::dtype`]) | scanned for a delimiter when one is given |
//! | llm.c / modded-nanogpt shards | `llmc` | a file or a glob (sorted byte-wise) | u16 (magic 20240520 v1), u32 (20240801 v7); header-less legacy files with an explicit dtype | scanned for a delimiter when one is given |
//! | MosaicML Streaming MDS | `mds` | the directory of `index.json` | the token column's (`ndarray`, `ndarray:<dtype>`, or `bytes` with a configured dtype, default i64) | samples |
//! | litdata optimized chunks | `litdata` | the directory of `index.json` | the token leaf's (`no_header_numpy:<i>`, `no_header_tensor:<i>`, `numpy`, `tensor`) | items |
//! | OLMo / Dolma token files | `olmo` | a file, a glob or a directory of `*.npy` (raw, no NPY header) | required | the sibling `.csv.gz`, else a delimiter scan |
//! | NumPy `.npy` v1/v2/v3 | `npy` | a file, a glob or a directory of `*.npy` | from the header (either byte order) | rows of a 2-D array; optionally one per file |
//!
//! [`ForeignDataset::open_at`] (and [`ForeignDataset::open_url`]) read the same layouts from
//! an object-store URL (`s3://bucket/data/fineweb_train_*.bin`, `gs://bucket/mds`): a
//! directory or a glob is one listing of the prefix, sorted byte-wise as locally, files are
//! read by ranged requests through the store's block cache, and errors name files as
//! `URL/name`. Locally, a directory or glob takes regular files only: a FIFO, socket, device
//! or symbolic link it matches is [`crate::StorageError::UnsafeFile`] naming it (a link is
//! followed only when the path names it directly), and sub-directories are passed over.
//!
//! Auto-detection ([`ForeignOptions::format`] `None`) picks a layout only where a magic
//! number or an index file makes it unambiguous (`index.json` of MDS or litdata, a
//! Megatron `.idx`, the NumPy or llm.c magic); raw files (nanoGPT, OLMo, legacy llm.c) need
//! the format and the dtype named.
//!
//! Sources of the layouts: NVIDIA/Megatron-LM `megatron/core/datasets/indexed_dataset.py`;
//! karpathy/nanoGPT `data/*/prepare.py`; karpathy/llm.c `dev/data/data_common.py` and
//! `llmc/dataloader.h`; KellerJordan/modded-nanogpt `data/fineweb.py`; mosaicml/streaming
//! `streaming/base/format/mds/{writer,reader,encodings}.py`; Lightning-AI/litdata
//! `src/litdata/streaming/{writer,item_loader,serializers}.py`; allenai/dolma
//! `python/dolma/tokenizer/memmap_writer.py` and allenai/OLMo-core `src/olmo_core/data/utils.py`;
//! numpy `numpy/lib/format.py`.
//!
//! Validation on open: every offset and size from a file is computed in `u64` and checked
//! against the file sizes before anything is read or allocated with it; no path from an index
//! leaves the dataset's directory; encodings that execute code (MDS `pkl`, litdata `pickle`,
//! NumPy object arrays) are refused, never decoded. Errors are
//! [`crate::StorageError::Foreign`] naming the file, with a [`ForeignError`] naming the field
//! and the numbers.

mod error;
mod files;
mod litdata;
mod mds;
mod megatron;
mod npy;
mod raw;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use guideloom_formats::{Dtype, Primitive, StreamFormat};
use serde_json::{json, Value};

use crate::core::Reader;
use crate::dir::StorageDir;
use crate::io::{FileSet, ReadOptions, ReadRequest, ShardFile};
use crate::kind::Stream;
use crate::manifest::{FormatSpec, Manifest, ShardEntry, StorageKind};
use crate::remote::{RemoteOptions, StorageLocation};
use crate::stream::StreamIndex;
use crate::{Result, StorageError, StreamReader, Window};

pub use error::ForeignError;
pub use megatron::MegatronIndex;

use files::{Fs, Place};

/// A layout of another project that [`ForeignDataset`] reads in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ForeignFormat {
    /// Megatron-Core indexed dataset (`<prefix>.bin` + `<prefix>.idx`, `MMIDIDX` v1).
    Megatron,
    /// nanoGPT `train.bin`/`val.bin`: raw little-endian tokens, no header.
    NanoGpt,
    /// llm.c / modded-nanogpt token shards (256 × i32 header), or header-less legacy files
    /// with an explicit dtype.
    Llmc,
    /// MosaicML Streaming MDS (`index.json` v2 + `shard.NNNNN.mds`).
    Mds,
    /// litdata optimized chunks (`index.json` + `chunk-*.bin`).
    Litdata,
    /// OLMo / Dolma token files: raw tokens named `*.npy`, with `.csv.gz` document metadata.
    Olmo,
    /// NumPy `.npy` v1/v2/v3 arrays, one file or a directory of them.
    Npy,
}

impl ForeignFormat {
    /// Every layout, in a fixed order.
    pub const ALL: [ForeignFormat; 7] = [
        ForeignFormat::Megatron,
        ForeignFormat::NanoGpt,
        ForeignFormat::Llmc,
        ForeignFormat::Mds,
        ForeignFormat::Litdata,
        ForeignFormat::Olmo,
        ForeignFormat::Npy,
    ];

    /// The name [`FromStr`] parses and messages use: `megatron`, `nanogpt`, `llmc`, `mds`,
    /// `litdata`, `olmo`, `npy`.
    pub const fn name(self) -> &'static str {
        match self {
            ForeignFormat::Megatron => "megatron",
            ForeignFormat::NanoGpt => "nanogpt",
            ForeignFormat::Llmc => "llmc",
            ForeignFormat::Mds => "mds",
            ForeignFormat::Litdata => "litdata",
            ForeignFormat::Olmo => "olmo",
            ForeignFormat::Npy => "npy",
        }
    }
}

impl fmt::Display for ForeignFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ForeignFormat {
    type Err = StorageError;

    /// Parses a name of [`ForeignFormat::name`] (ASCII case ignored; `modded-nanogpt` and
    /// `dolma` are accepted as `llmc` and `olmo`).
    ///
    /// # Errors
    /// [`ForeignError::UnknownFormat`] for any other name.
    fn from_str(s: &str) -> Result<Self> {
        let s = s.trim().to_ascii_lowercase();
        let f = match s.as_str() {
            "megatron" => ForeignFormat::Megatron,
            "nanogpt" => ForeignFormat::NanoGpt,
            "llmc" | "llm.c" | "modded-nanogpt" => ForeignFormat::Llmc,
            "mds" => ForeignFormat::Mds,
            "litdata" => ForeignFormat::Litdata,
            "olmo" | "dolma" => ForeignFormat::Olmo,
            "npy" | "numpy" => ForeignFormat::Npy,
            _ => {
                return Err(StorageError::Foreign {
                    format: None,
                    path: PathBuf::new(),
                    error: Box::new(ForeignError::UnknownFormat {
                        reason: format!(
                            "{s:?} is not one of megatron, nanogpt, llmc, mds, litdata, olmo, npy"
                        ),
                    }),
                })
            }
        };
        Ok(f)
    }
}

/// The label of a format in [`StorageError::Foreign`]'s message.
pub(crate) fn format_label(format: Option<ForeignFormat>) -> &'static str {
    format.map_or("foreign", ForeignFormat::name)
}

/// A token that delimits documents in a stream that records no boundaries of its own
/// (nanoGPT, llm.c, OLMo without metadata): where the documents are cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DocumentDelimiter {
    /// The token ends each document (an end-of-text appended, as nanoGPT's openwebtext,
    /// Megatron's `--append-eod` and Dolma write): a document ends after each occurrence.
    Ends(u64),
    /// The token starts each document (a BOS prepended, as llm.c and modded-nanogpt write):
    /// a document starts at each occurrence.
    Starts(u64),
}

/// How [`ForeignDataset::open`] reads a dataset. `Default`: detect the layout, strict
/// validation, nothing optional.
///
/// ```
/// use guideloom_formats::Primitive;
/// use guideloom_storage::foreign::{ForeignFormat, ForeignOptions};
/// let o = ForeignOptions::new().format(ForeignFormat::NanoGpt).dtype(Primitive::U16);
/// assert_eq!((o.format, o.dtype), (Some(ForeignFormat::NanoGpt), Some(Primitive::U16)));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ForeignOptions {
    /// The layout; `None` detects it where a magic number or an index file says it.
    pub format: Option<ForeignFormat>,
    /// The element dtype of raw layouts (nanoGPT, OLMo, header-less llm.c) and of an MDS
    /// `bytes` token column (default `i64` there, LLM Foundry's historical writer). Never
    /// guessed; where the file records a dtype, a different one given here is an error.
    pub dtype: Option<Primitive>,
    /// Megatron: rebuild `sequence_pointers` from the lengths (a fix for indexes merged with
    /// numpy 2 before Megatron's 2025-09 fix, whose pointers wrapped at 2 GiB) instead of
    /// refusing them; [`MegatronIndex::repaired_pointers`] reports how many differed.
    pub repair_pointers: bool,
    /// Megatron: the index carries the multimodal `modes` array (one i8 per sequence).
    pub multimodal: bool,
    /// Megatron: with `multimodal`, accept modes stored as i32 (the 2023-07..2023-10 writer).
    pub legacy_int32_modes: bool,
    /// MDS: check every shard's hashes against `index.json` on open.
    pub verify_hashes: bool,
    /// MDS / litdata: the token column (MDS column name; litdata: the leaf index as text).
    /// Default: `tokens` when present, else the only column that can hold tokens.
    pub column: Option<String>,
    /// nanoGPT, llm.c, OLMo (without metadata): scan the tokens on open and cut documents at
    /// this delimiter.
    pub delimiter: Option<DocumentDelimiter>,
    /// NumPy / OLMo directories and globs: each file is one document.
    pub file_documents: bool,
}

impl ForeignOptions {
    /// The default options (detect the layout).
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets [`ForeignOptions::format`].
    pub fn format(mut self, format: ForeignFormat) -> Self {
        self.format = Some(format);
        self
    }

    /// Sets [`ForeignOptions::dtype`].
    pub fn dtype(mut self, dtype: Primitive) -> Self {
        self.dtype = Some(dtype);
        self
    }

    /// Sets [`ForeignOptions::repair_pointers`].
    pub fn repair_pointers(mut self, on: bool) -> Self {
        self.repair_pointers = on;
        self
    }

    /// Sets [`ForeignOptions::multimodal`].
    pub fn multimodal(mut self, on: bool) -> Self {
        self.multimodal = on;
        self
    }

    /// Sets [`ForeignOptions::verify_hashes`].
    pub fn verify_hashes(mut self, on: bool) -> Self {
        self.verify_hashes = on;
        self
    }

    /// Sets [`ForeignOptions::column`].
    pub fn column(mut self, column: impl Into<String>) -> Self {
        self.column = Some(column.into());
        self
    }

    /// Sets [`ForeignOptions::delimiter`].
    pub fn delimiter(mut self, delimiter: DocumentDelimiter) -> Self {
        self.delimiter = Some(delimiter);
        self
    }

    /// Sets [`ForeignOptions::file_documents`].
    pub fn file_documents(mut self, on: bool) -> Self {
        self.file_documents = on;
        self
    }
}

/// One file of a foreign dataset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForeignFile {
    /// The file, relative to [`ForeignDataset::root`].
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
    /// NumPy: the shape of each file.
    Npy {
        /// Per file.
        shapes: Vec<Vec<u64>>,
    },
}

/// What a layout reader found: everything [`ForeignDataset`] holds but the options.
#[derive(Debug)]
struct Parts {
    root: PathBuf,
    /// The directory `root` names, every file read through it.
    dir: Arc<dyn StorageDir>,
    dtype: Primitive,
    big_endian: bool,
    files: Vec<ForeignFile>,
    /// `(file, first byte, elements)`, in stream order.
    segments: Vec<(usize, u64, u64)>,
    /// Document boundaries (documents + 1 token offsets, from 0), where recorded.
    documents: Option<Vec<u64>>,
    /// Elements per row of a 2-D array (NumPy), so `file_windows` knows the samples.
    details: ForeignDetails,
    /// Decompressed files, by name relative to `root`.
    mem: BTreeMap<String, Arc<[u8]>>,
    /// xxh3 of the index bytes (part of the fingerprint).
    index_hash: u64,
}

impl Parts {
    fn new(fs: &Fs, dtype: Primitive) -> Self {
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
            index_hash: 0,
        }
    }
}

/// A dataset in another project's layout, validated and mapped onto a token stream; read it
/// with [`ForeignDataset::reader`].
///
/// ```
/// use guideloom_formats::{Primitive, TokenFormat};
/// use guideloom_storage::foreign::{DocumentDelimiter, ForeignDataset, ForeignFormat, ForeignOptions};
/// use guideloom_storage::{ReadOptions, Window};
/// // A nanoGPT train.bin: raw u16 tokens, documents ended by 50256.
/// let dir = tempfile::tempdir()?;
/// let ids: [u16; 6] = [101, 102, 50256, 201, 202, 50256];
/// let bytes: Vec<u8> = ids.iter().flat_map(|t| t.to_le_bytes()).collect();
/// std::fs::write(dir.path().join("train.bin"), bytes)?;
/// let options = ForeignOptions::new()
///     .format(ForeignFormat::NanoGpt)
///     .dtype(Primitive::U16)
///     .delimiter(DocumentDelimiter::Ends(50256));
/// let data = ForeignDataset::open(dir.path().join("train.bin"), &options)?;
/// assert_eq!(data.elements(), 6);
/// assert_eq!(data.documents(), Some(&[0, 3, 6][..]));
/// let reader = data.reader(TokenFormat::<u16>::new(), ReadOptions::default())?;
/// assert_eq!(reader.read(Window::new(1, 3))?, vec![102, 50256, 201]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct ForeignDataset {
    format: ForeignFormat,
    path: PathBuf,
    parts: Arc<Parts>,
    elements: u64,
    /// Readers carry the fingerprint of guideloom 0.x before issue 18, whose spec held the
    /// opened path ([`ForeignDataset::with_legacy_fingerprint`]).
    legacy_fingerprint: bool,
}

impl ForeignDataset {
    /// Opens and validates the dataset at `path` (see the module docs for what `path` names
    /// per layout). Reads headers and indexes only (and, with
    /// [`ForeignOptions::delimiter`], scans the tokens; with
    /// [`ForeignOptions::verify_hashes`], hashes MDS shards).
    ///
    /// # Errors
    /// [`StorageError::Foreign`] naming the file, with the [`ForeignError`] of the first
    /// check that fails; [`StorageError::Io`] when a file cannot be read;
    /// [`StorageError::UnsafeFile`] when the named file, or one a directory listing or glob
    /// matches, is not a regular file (a FIFO, socket or device; a link found by listing).
    pub fn open(path: impl AsRef<Path>, options: &ForeignOptions) -> Result<Self> {
        Self::open_place(&Place::Local(path.as_ref().to_path_buf()), options)
    }

    /// Opens and validates the dataset at `location`: a local path as [`ForeignDataset::open`]
    /// does, or an object-store URL (`s3://bucket/data/train_*.bin`, `gs://bucket/mds`, ...)
    /// whose store is read with `remote`. What the URL names per layout is what a path names
    /// (a Megatron prefix, a file, a glob whose last component has `*`/`?`, a directory of
    /// `index.json` or of `.npy` files): directories and globs are an object listing of the
    /// prefix (one level, sorted byte-wise as locally), files are read by ranged `GET`s, and
    /// batches of [`ForeignDataset::reader`] go through the store's block cache and readahead.
    /// Errors name files as `URL/name`.
    ///
    /// ```
    /// use guideloom_formats::Primitive;
    /// use guideloom_storage::foreign::{ForeignDataset, ForeignFormat, ForeignOptions};
    /// use guideloom_storage::{RemoteOptions, StorageLocation};
    /// let dir = tempfile::tempdir()?;
    /// std::fs::write(dir.path().join("train.bin"), [1u8, 0, 2, 0])?;
    /// // A local path given as a location reads exactly as `open` does.
    /// let at = StorageLocation::parse(dir.path().join("train.bin").to_str().unwrap());
    /// let options = ForeignOptions::new().format(ForeignFormat::NanoGpt).dtype(Primitive::U16);
    /// let data = ForeignDataset::open_at(&at, &RemoteOptions::default(), &options)?;
    /// assert_eq!(data.elements(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// As [`ForeignDataset::open`]; [`StorageError::Remote`] when the store cannot be opened
    /// (or this build lacks the `remote` feature) or a request fails.
    pub fn open_at(
        location: &StorageLocation,
        remote: &RemoteOptions,
        options: &ForeignOptions,
    ) -> Result<Self> {
        let place = match location {
            StorageLocation::Local(p) => Place::Local(p.clone()),
            StorageLocation::Remote(url) => Place::Remote { url: url.clone(), options: remote.clone() },
        };
        Self::open_place(&place, options)
    }

    /// [`ForeignDataset::open_at`] of `url` read by [`StorageLocation::parse`] (a local path
    /// or an object-store URL), the store's options from the environment
    /// ([`RemoteOptions::from_env`]).
    ///
    /// # Errors
    /// As [`ForeignDataset::open_at`]; [`RemoteOptions::from_env`]'s.
    pub fn open_url(url: &str, options: &ForeignOptions) -> Result<Self> {
        let location = StorageLocation::parse(url);
        let remote = if location.is_remote() { RemoteOptions::from_env()? } else { RemoteOptions::default() };
        Self::open_at(&location, &remote, options)
    }

    fn open_place(place: &Place, options: &ForeignOptions) -> Result<Self> {
        let path = place.label();
        let format = match options.format {
            Some(f) => f,
            None => detect_place(place)?,
        };
        let mut parts = match format {
            ForeignFormat::Megatron => megatron::open(place, options)?,
            ForeignFormat::NanoGpt => raw::open_nanogpt(place, options)?,
            ForeignFormat::Llmc => raw::open_llmc(place, options)?,
            ForeignFormat::Olmo => raw::open_olmo(place, options)?,
            ForeignFormat::Npy => npy::open(place, options)?,
            ForeignFormat::Mds => mds::open(place, options)?,
            ForeignFormat::Litdata => litdata::open(place, options)?,
        };
        let elements = parts.segments.iter().try_fold(0u64, |a, s| a.checked_add(s.2)).ok_or_else(|| {
            StorageError::Foreign {
                format: Some(format),
                path: path.clone(),
                error: Box::new(ForeignError::InvalidIndex {
                    reason: "the token count overflows u64".into(),
                }),
            }
        })?;
        if options.file_documents && parts.documents.is_none() {
            let mut bounds = vec![0u64];
            let mut per_file = vec![0u64; parts.files.len()];
            for s in &parts.segments {
                per_file[s.0] += s.2;
            }
            for n in per_file {
                bounds.push(bounds[bounds.len() - 1] + n);
            }
            parts.documents = Some(bounds);
        }
        if let (Some(delimiter), None) = (options.delimiter, &parts.documents) {
            let fs = Fs::new(format, parts.dir.clone());
            parts.documents = Some(raw::scan_documents(&fs, &parts, delimiter, elements)?);
        }
        Ok(ForeignDataset { format, path, parts: Arc::new(parts), elements, legacy_fingerprint: false })
    }

    /// The layout.
    pub fn format(&self) -> ForeignFormat {
        self.format
    }

    /// The path it was opened with.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The dataset's directory: every file is inside it.
    pub fn root(&self) -> &Path {
        &self.parts.root
    }

    /// The element dtype (little-endian as read; see [`ForeignDataset::big_endian`]).
    pub fn dtype(&self) -> Primitive {
        self.parts.dtype
    }

    /// Whether the files store the elements big-endian (a `>` NumPy array); readers swap.
    pub fn big_endian(&self) -> bool {
        self.parts.big_endian
    }

    /// The files, in stream order.
    pub fn files(&self) -> &[ForeignFile] {
        &self.parts.files
    }

    /// Tokens in the stream (all files).
    pub fn elements(&self) -> u64 {
        self.elements
    }

    /// The document boundaries where the layout records documents (or a delimiter was
    /// given): `documents + 1` token offsets, the first 0, non-decreasing; document `i` is
    /// tokens `[b[i], b[i + 1])`.
    pub fn documents(&self) -> Option<&[u64]> {
        self.parts.documents.as_deref()
    }

    /// The number of documents, where recorded.
    pub fn document_count(&self) -> Option<u64> {
        self.documents().map(|b| b.len().saturating_sub(1) as u64)
    }

    /// Document `i` as a window of the stream; `None` past the end or without documents.
    pub fn document(&self, i: u64) -> Option<Window> {
        let b = self.documents()?;
        let i = usize::try_from(i).ok()?;
        let (s, e) = (*b.get(i)?, *b.get(i.checked_add(1)?)?);
        Some(Window::new(s, e - s))
    }

    /// Every document as a window of the stream (empty without documents).
    pub fn document_windows(&self) -> Vec<Window> {
        self.documents()
            .map_or_else(Vec::new, |b| b.windows(2).map(|p| Window::new(p[0], p[1] - p[0])).collect())
    }

    /// What the layout records beyond tokens and documents.
    pub fn details(&self) -> &ForeignDetails {
        &self.parts.details
    }

    /// The Megatron index (sequences, pointers, documents, modes); `None` for other layouts.
    pub fn megatron(&self) -> Option<&MegatronIndex> {
        match &self.parts.details {
            ForeignDetails::Megatron(m) => Some(m),
            _ => None,
        }
    }

    /// Windows of `len` tokens every `stride` tokens inside each file, never crossing one,
    /// the tail of each file dropped: litdata's `TokensLoader` blocks (`stride = len`),
    /// OLMo-core's `NumpyFSLDataset` instances, per-shard llm.c batches. In stream order.
    ///
    /// # Errors
    /// [`StorageError::OutOfRange`] when `len` or `stride` is 0.
    pub fn file_windows(&self, len: u64, stride: u64) -> Result<Vec<Window>> {
        if len == 0 || stride == 0 {
            return Err(StorageError::OutOfRange {
                what: "file window",
                start: 0,
                len,
                total: self.elements,
            });
        }
        let mut out = Vec::new();
        let mut start = 0u64;
        let mut per_file = vec![0u64; self.parts.files.len()];
        for s in &self.parts.segments {
            per_file[s.0] += s.2;
        }
        for n in per_file {
            let mut w = 0u64;
            while w.checked_add(len).is_some_and(|e| e <= n) {
                out.push(Window::new(start + w, len));
                w += stride;
            }
            start += n;
        }
        Ok(out)
    }

    /// The dtype as a format must state it to read this dataset.
    pub fn element_dtype(&self) -> Dtype {
        Dtype::Primitive(self.parts.dtype)
    }

    /// A description for `inspect` and for states: format, path, dtype, byte order,
    /// elements, documents, files (relative path, bytes, elements) and the layout's details.
    pub fn describe(&self) -> Value {
        let files: Vec<Value> = self
            .parts
            .files
            .iter()
            .map(|f| json!({"path": f.path.display().to_string(), "bytes": f.bytes, "elements": f.elements}))
            .collect();
        let mut v = json!({
            "format": self.format.name(),
            "path": self.path.display().to_string(),
            "dtype": self.parts.dtype.descr(),
            "byte_order": if self.parts.big_endian { "big" } else { "little" },
            "elements": self.elements,
            "documents": self.document_count(),
            "files": files,
        });
        match &self.parts.details {
            ForeignDetails::Megatron(m) => {
                v["sequences"] = json!(m.sequence_count());
                v["multimodal"] = json!(m.modes().is_some());
                v["repaired_pointers"] = json!(m.repaired_pointers());
            }
            ForeignDetails::Llmc { versions } => v["versions"] = json!(versions),
            ForeignDetails::Mds { samples, column } => {
                v["samples"] = json!(samples);
                v["column"] = json!({"name": column.0, "encoding": column.1});
            }
            ForeignDetails::Litdata { item_loader, items } => {
                v["item_loader"] = json!(item_loader);
                v["items"] = json!(items);
            }
            ForeignDetails::Npy { shapes } => v["shapes"] = json!(shapes),
            ForeignDetails::None => {}
        }
        v
    }

    /// This dataset with readers whose fingerprint is the one a state saved before issue 18
    /// holds: the same spec as [`ForeignDataset::reader`]'s manifest plus `"path"`, the path
    /// or URL this dataset was opened with (as [`ForeignDataset::path`] prints it). Those
    /// versions hashed where the data lived, so a state saved on `data/x` did not resume on
    /// `./data/x`, on a copy, or on its `s3://` upload. Meant only to recognise such a state
    /// for the same location: compare a saved `source.fingerprint` with a source built over
    /// `with_legacy_fingerprint().reader(..)`, and when equal resume with the current one (the
    /// `guideloom` CLI does this for `--resume`). Data and every other behaviour are
    /// unchanged.
    pub fn with_legacy_fingerprint(&self) -> Self {
        ForeignDataset { legacy_fingerprint: true, ..self.clone() }
    }

    /// The manifest a reader of this dataset serves: kind `stream`, the dtype, format
    /// `{"name": "<layout>", "params": {files, byte order, index hash, documents}}` and one
    /// shard per file (its elements and bytes; checksum 0: foreign files carry none of
    /// guideloom's), so its fingerprint changes with the layout, the files (named relative to
    /// the dataset's root, in stream order), their sizes and their index, and not with where
    /// the dataset lives: a copy at another path or URL has the same fingerprint (issue 18).
    /// The location stays in the manifest's metadata ([`ForeignDataset::describe`]), which
    /// the fingerprint excludes. With [`ForeignDataset::with_legacy_fingerprint`], `params`
    /// also holds `"path"` (the spec before issue 18).
    fn manifest(&self) -> Result<Manifest> {
        let files: Vec<Value> =
            self.parts.files.iter().map(|f| json!([f.path.display().to_string(), f.bytes])).collect();
        let mut params = json!({
            "files": files,
            "byte_order": if self.parts.big_endian { "big" } else { "little" },
            "index_xxh3": format!("{:016x}", self.parts.index_hash),
            "documents": self.document_count(),
        });
        if self.legacy_fingerprint {
            params["path"] = json!(self.path.display().to_string());
        }
        let spec = FormatSpec { name: self.format.name().to_string(), params };
        let mut m = Manifest::new(StorageKind::Stream, Some(&self.element_dtype()), spec)?;
        for (id, f) in self.parts.files.iter().enumerate() {
            m.upsert(ShardEntry {
                id: id as u64,
                elements: Some(f.elements),
                documents: None,
                bytes: f.bytes,
                checksum: 0,
                files: BTreeMap::new(),
            });
        }
        m.metadata_mut().insert("foreign".into(), self.describe());
        Ok(m)
    }

    /// A stream reader over the dataset's tokens, decoded by `format` (whose dtype must be
    /// [`ForeignDataset::element_dtype`]; `guideloom_formats::IntTokenFormat` reads any
    /// integer dtype). Batches go through `options.backend` (io_uring, pread, mmap) over the
    /// files in place; compressed MDS shards are served from memory.
    ///
    /// # Errors
    /// [`StorageError::DtypeMismatch`] when the format's dtype differs;
    /// [`StorageError::FormatDtype`].
    pub fn reader<F: StreamFormat>(&self, format: F, options: ReadOptions) -> Result<StreamReader<F>> {
        let want = format.dtype();
        if want != self.element_dtype() {
            return Err(StorageError::DtypeMismatch {
                path: self.path.clone(),
                expected: want.to_string(),
                found: self.element_dtype().to_string(),
            });
        }
        let ids = (0..self.parts.segments.len() as u64).collect();
        let index =
            StreamIndex::foreign(self.element_dtype(), &self.parts.segments, ids, self.parts.big_endian)?;
        let files = self
            .parts
            .files
            .iter()
            .enumerate()
            .map(|(i, f)| ShardFile {
                path: self.parts.root.join(&f.path),
                shard: i as u64,
                committed: f.bytes,
            })
            .collect();
        // The dataset's own directory serves the batches (a local one through the read
        // backend) unless files are held in memory or a remote file is named by a path below
        // the root (a remote directory reads the last component of a file's path).
        let plain = self.parts.files.iter().all(|f| f.path.components().count() == 1);
        let dir: Arc<dyn StorageDir> =
            if self.parts.mem.is_empty() && (self.parts.dir.local_dir().is_some() || plain) {
                self.parts.dir.clone()
            } else {
                Arc::new(ForeignDir {
                    root: self.parts.root.clone(),
                    mem: self.parts.mem.clone(),
                    inner: self.parts.dir.clone(),
                })
            };
        let manifest = self.manifest()?;
        Ok(Reader::<Stream<F>>::from_index(dir, manifest, index, files, self.elements, format, options))
    }
}

/// A foreign dataset's directory with some files held in memory (decompressed MDS shards):
/// names relative to the root, in memory first, else on disk.
#[derive(Debug)]
struct ForeignDir {
    root: PathBuf,
    mem: BTreeMap<String, Arc<[u8]>>,
    /// The dataset's directory, for the files not in memory.
    inner: Arc<dyn StorageDir>,
}

impl StorageDir for ForeignDir {
    fn path(&self) -> &Path {
        &self.root
    }

    fn file_len(&self, name: &str) -> Result<Option<u64>> {
        match self.mem.get(name) {
            Some(b) => Ok(Some(b.len() as u64)),
            None => self.inner.file_len(name),
        }
    }

    fn read_at(&self, name: &str, offset: u64, out: &mut [u8]) -> Result<()> {
        let Some(bytes) = self.mem.get(name) else {
            return self.inner.read_at(name, offset, out);
        };
        let start = usize::try_from(offset).map_or(bytes.len(), |o| o.min(bytes.len()));
        let available = &bytes[start..];
        if available.len() < out.len() {
            return Err(StorageError::ShortRead {
                path: self.root.join(name),
                offset,
                expected: out.len() as u64,
                got: available.len() as u64,
            });
        }
        out.copy_from_slice(&available[..out.len()]);
        Ok(())
    }

    /// Names files by their path below the root (an MDS index may point into
    /// sub-directories), not by their last component.
    fn read_requests(&self, files: &FileSet, requests: &[ReadRequest], out: &mut [u8]) -> Result<()> {
        let total = requests.iter().fold(0u64, |a, r| a.saturating_add(r.len));
        if total != out.len() as u64 {
            return Err(StorageError::BufferLength { expected: total, found: out.len() as u64 });
        }
        let mut pos = 0usize;
        for r in requests {
            let file = files.get(r.file)?;
            let rel = file.path.strip_prefix(&self.root).unwrap_or(&file.path);
            let name = rel.to_str().ok_or_else(|| {
                StorageError::io(
                    &file.path,
                    std::io::Error::new(std::io::ErrorKind::InvalidInput, "not UTF-8"),
                )
            })?;
            let n = r.len as usize;
            self.read_at(name, r.offset, &mut out[pos..pos + n])?;
            pos += n;
        }
        Ok(())
    }
}

/// Tells the layout of `path` where a magic number or an index file makes it unambiguous.
///
/// # Errors
/// [`ForeignError::UnknownFormat`] otherwise (raw files need the format and a dtype).
pub fn detect(path: &Path) -> Result<ForeignFormat> {
    detect_place(&Place::Local(path.to_path_buf()))
}

/// [`detect`] of a local path or an object-store URL (see [`ForeignDataset::open_at`]).
///
/// # Errors
/// As [`detect`]; [`StorageError::Remote`] when the store cannot be opened or listed.
pub fn detect_at(location: &StorageLocation, remote: &RemoteOptions) -> Result<ForeignFormat> {
    match location {
        StorageLocation::Local(p) => detect(p),
        StorageLocation::Remote(url) => {
            detect_place(&Place::Remote { url: url.clone(), options: remote.clone() })
        }
    }
}

fn detect_place(place: &Place) -> Result<ForeignFormat> {
    let path = place.label();
    let unknown = |reason: String| StorageError::Foreign {
        format: None,
        path: path.clone(),
        error: Box::new(ForeignError::UnknownFormat { reason }),
    };
    if let Some((dir, entries)) = place.as_dir()? {
        if entries.iter().any(|e| e.name == "index.json" && e.kind != crate::dir::EntryKind::Dir) {
            let fs = Fs::new(ForeignFormat::Mds, dir.clone());
            let text = fs.read_whole("index.json", files::MAX_INDEX_BYTES)?;
            let v: Value = serde_json::from_slice(&text)
                .map_err(|e| unknown(format!("index.json is not JSON ({e})")))?;
            if v.get("chunks").is_some() && v.get("config").is_some() {
                return Ok(ForeignFormat::Litdata);
            }
            if v.get("shards").is_some() {
                return Ok(ForeignFormat::Mds);
            }
            return Err(unknown("index.json is neither MDS (shards) nor litdata (chunks, config)".into()));
        }
        let npys = files::with_ext(dir.as_ref(), &entries, "npy")?;
        if !npys.is_empty() && npys.iter().all(|f| files::starts_with(dir.as_ref(), f, npy::MAGIC)) {
            return Ok(ForeignFormat::Npy);
        }
        return Err(unknown(
            "a directory without index.json or NumPy files; name the format (raw files also need a dtype)"
                .into(),
        ));
    }
    let (parent, name) = place.split();
    if let Some(idx) = name.as_deref().map(megatron::idx_name) {
        if files::starts_with(parent.dir()?.as_ref(), &idx, megatron::MAGIC) {
            return Ok(ForeignFormat::Megatron);
        }
    }
    let (dir, names) = files::expand(ForeignFormat::Npy, place, &[])?;
    if let Some(first) = names.first() {
        if files::starts_with(dir.as_ref(), first, npy::MAGIC) {
            return Ok(ForeignFormat::Npy);
        }
        if raw::has_llmc_header(dir.as_ref(), first) {
            return Ok(ForeignFormat::Llmc);
        }
        return Err(unknown(
            "no magic number of a known layout: raw tokens (nanogpt, olmo, legacy llm.c) need the format and a dtype"
                .into(),
        ));
    }
    Err(StorageError::Foreign {
        format: None,
        path: path.clone(),
        error: Box::new(ForeignError::NoFiles { pattern: path.display().to_string() }),
    })
}

/// Checks a chunk's table of `n + 1` item offsets (MDS shards, litdata chunks): each inside
/// `[header, size]`, never decreasing, the last exactly `size` (the end of the file).
///
/// # Errors
/// [`ForeignError::OffsetOutOfRange`] naming the entry, [`ForeignError::OffsetsNotMonotonic`].
fn check_offsets(offsets: &[u64], header: u64, size: u64) -> std::result::Result<(), ForeignError> {
    for (k, &o) in offsets.iter().enumerate() {
        if o > size || o < header {
            return Err(ForeignError::OffsetOutOfRange { entry: k as u64, offset: o, min: header, size });
        }
        if k > 0 && o < offsets[k - 1] {
            return Err(ForeignError::OffsetsNotMonotonic { entry: k as u64 });
        }
    }
    match offsets.last() {
        Some(&last) if last != size => Err(ForeignError::OffsetOutOfRange {
            entry: offsets.len() as u64 - 1,
            offset: last,
            min: header,
            size,
        }),
        _ => Ok(()),
    }
}
