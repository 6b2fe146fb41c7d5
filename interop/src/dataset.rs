//! [`ForeignDataset`]: a dataset in another project's layout, opened (the layout told or
//! detected, its files validated by the layout's reader) and read as a token stream.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use guideloom_formats::{Dtype, Primitive, StreamFormat};
use guideloom_storage::{
    FormatSpec, LayoutFile, ReadOptions, RemoteOptions, StorageDir, StorageError, StorageLocation,
    StreamLayout, StreamReader, Window,
};
use serde_json::{json, Value};

use crate::detect::detect_place;
use crate::dir::ForeignDir;
use crate::error::{ForeignError, InteropError, Result};
use crate::files::{Fs, Place};
use crate::format::ForeignFormat;
use crate::layouts::megatron_index::MegatronIndex;
use crate::layouts::scan::scan_documents;
use crate::layouts::{litdata, megatron, npy, raw};
use crate::options::ForeignOptions;
use crate::parts::{ForeignDetails, ForeignFile, Parts};

/// A dataset in another project's layout, validated and mapped onto a token stream; read it
/// with [`ForeignDataset::reader`].
///
/// ```
/// use guideloom_formats::{Primitive, TokenFormat};
/// use guideloom_interop::{DocumentDelimiter, ForeignDataset, ForeignFormat, ForeignOptions};
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
    /// Opens and validates the dataset at `path` (see the crate docs for what `path` names
    /// per layout). Reads headers and indexes only (and, with
    /// [`ForeignOptions::delimiter`], scans the tokens; with
    /// [`ForeignOptions::verify_hashes`], hashes MDS shards).
    ///
    /// # Errors
    /// [`InteropError::Dataset`] naming the file, with the [`ForeignError`] of the first
    /// check that fails ([`ForeignError::FeatureDisabled`] for a layout this build does not
    /// read); [`InteropError::Storage`] with [`StorageError::Io`] when a file cannot be read,
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
    /// use guideloom_interop::{ForeignDataset, ForeignFormat, ForeignOptions};
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
    /// As [`ForeignDataset::open`]; [`InteropError::Storage`] with [`StorageError::Remote`]
    /// when the store cannot be opened (or this build lacks guideloom-storage's `remote`
    /// feature) or a request fails.
    pub fn open_at(
        location: &StorageLocation,
        remote: &RemoteOptions,
        options: &ForeignOptions,
    ) -> Result<Self> {
        Self::open_place(&Place::at(location, remote), options)
    }

    /// [`ForeignDataset::open_at`] of `url` read by [`StorageLocation::parse`] (a local path
    /// or an object-store URL), the store's options from the environment
    /// ([`RemoteOptions::from_env`]).
    ///
    /// # Errors
    /// As [`ForeignDataset::open_at`]; [`RemoteOptions::from_env`]'s.
    pub fn open_url(url: &str, options: &ForeignOptions) -> Result<Self> {
        Self::open_place(&Place::parse(url)?, options)
    }

    fn open_place(place: &Place, options: &ForeignOptions) -> Result<Self> {
        let path = place.label();
        let format = match options.format {
            Some(f) => f,
            None => detect_place(place)?,
        };
        let mut parts = open_layout(format, place, options)?;
        let elements =
            parts.segments.iter().try_fold(0u64, |a, s| a.checked_add(s.elements)).ok_or_else(|| {
                InteropError::Dataset {
                    format: Some(format),
                    path: path.clone(),
                    error: Box::new(ForeignError::InvalidIndex {
                        reason: "the token count overflows u64".into(),
                    }),
                }
            })?;
        if options.file_documents && parts.documents.is_none() {
            let mut bounds = vec![0u64];
            for n in parts.file_elements() {
                bounds.push(bounds[bounds.len() - 1] + n);
            }
            parts.documents = Some(bounds);
        }
        if let (Some(delimiter), None) = (options.delimiter, &parts.documents) {
            let fs = Fs::new(format, parts.dir.clone());
            parts.documents = Some(scan_documents(&fs, &parts, delimiter, elements)?);
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
    pub fn file_windows(&self, len: u64, stride: u64) -> Result<Vec<Window>, StorageError> {
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
        for n in self.parts.file_elements() {
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
            ForeignDetails::Table { column, column_type, rows, groups, blocks } => {
                v["column"] = json!({"name": column, "type": column_type});
                v["rows"] = json!(rows);
                v[if self.format == ForeignFormat::Parquet { "row_groups" } else { "record_batches" }] =
                    json!(groups);
                if self.format == ForeignFormat::Parquet {
                    v["decode_blocks"] = json!(blocks);
                }
            }
            ForeignDetails::Records { records } => v["records"] = json!(records),
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

    /// The stream layout a reader of this dataset reads ([`StreamReader::from_layout`]): the
    /// files (relative to [`ForeignDataset::root`]) and their element runs, the dtype and byte
    /// order, and the description its manifest carries: kind `stream`, the dtype, format
    /// `{"name": "<layout>", "params": {files, byte order, index hash, documents}}` and one
    /// shard per file (its elements and bytes; checksum 0: foreign files carry none of
    /// guideloom's), so its fingerprint changes with the layout, the files (named relative to
    /// the dataset's root, in stream order), their sizes and their index, and not with where
    /// the dataset lives: a copy at another path or URL has the same fingerprint (issue 18).
    /// The location stays in the manifest's metadata (`"foreign"`:
    /// [`ForeignDataset::describe`]), which the fingerprint excludes. With
    /// [`ForeignDataset::with_legacy_fingerprint`], `params` also holds `"path"` (the spec
    /// before issue 18).
    pub fn layout(&self) -> StreamLayout {
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
        let mut metadata = serde_json::Map::new();
        metadata.insert("foreign".into(), self.describe());
        StreamLayout {
            files: self
                .parts
                .files
                .iter()
                .map(|f| LayoutFile { path: f.path.clone(), bytes: f.bytes })
                .collect(),
            segments: self.parts.segments.clone(),
            dtype: self.element_dtype(),
            big_endian: self.parts.big_endian,
            spec: FormatSpec { name: self.format.name().to_string(), params },
            metadata,
        }
    }

    /// A stream reader over the dataset's tokens, decoded by `format` (whose dtype must be
    /// [`ForeignDataset::element_dtype`]; `guideloom_formats::IntTokenFormat` reads any
    /// integer dtype), over [`ForeignDataset::layout`]. Batches go through `options.backend`
    /// (io_uring, pread, mmap) over the files in place; compressed MDS shards are served from
    /// memory.
    ///
    /// # Errors
    /// [`StorageError::DtypeMismatch`] (naming the dataset's path) when the format's dtype
    /// differs; [`StorageError::FormatDtype`]; the layout checks of
    /// [`StreamReader::from_layout`].
    pub fn reader<F: StreamFormat>(
        &self,
        format: F,
        options: ReadOptions,
    ) -> Result<StreamReader<F>, StorageError> {
        let want = format.dtype();
        if want != self.element_dtype() {
            return Err(StorageError::DtypeMismatch {
                path: self.path.clone(),
                expected: want.to_string(),
                found: self.element_dtype().to_string(),
            });
        }
        // The dataset's own directory serves the batches (a local one through the read
        // backend) unless files are held in memory or a remote file is named by a path below
        // the root (a remote directory reads the last component of a file's path).
        let plain = self.parts.files.iter().all(|f| f.path.components().count() == 1);
        let dir: Arc<dyn StorageDir> = if self.parts.mem.is_empty()
            && self.parts.decoded.is_empty()
            && (self.parts.dir.local_dir().is_some() || plain)
        {
            self.parts.dir.clone()
        } else {
            Arc::new(ForeignDir {
                root: self.parts.root.clone(),
                mem: self.parts.mem.clone(),
                decoded: self.parts.decoded.clone(),
                inner: self.parts.dir.clone(),
            })
        };
        StreamReader::from_layout(dir, self.layout(), format, options)
    }
}

/// The reader of `format`'s layout over `place`.
///
/// # Errors
/// [`ForeignError::FeatureDisabled`] for a layout whose feature this build lacks; the layout
/// reader's errors.
fn open_layout(format: ForeignFormat, place: &Place, options: &ForeignOptions) -> Result<Parts> {
    match format {
        ForeignFormat::Megatron => megatron::open(place, options),
        ForeignFormat::NanoGpt => raw::open_nanogpt(place, options),
        ForeignFormat::Llmc => raw::open_llmc(place, options),
        #[cfg(feature = "olmo")]
        ForeignFormat::Olmo => crate::layouts::olmo::open(place, options),
        ForeignFormat::Npy => npy::open(place, options),
        #[cfg(feature = "mds")]
        ForeignFormat::Mds => crate::layouts::mds::open(place, options),
        ForeignFormat::Litdata => litdata::open(place, options),
        #[cfg(feature = "arrow")]
        ForeignFormat::HfArrow => crate::layouts::arrow::open(place, options),
        #[cfg(feature = "parquet")]
        ForeignFormat::Parquet => crate::layouts::parquet::open(place, options),
        #[cfg(feature = "arrayrecord")]
        ForeignFormat::ArrayRecord => crate::layouts::arrayrecord::open(place, options),
        #[cfg(feature = "tfrecord")]
        ForeignFormat::TfRecord => crate::layouts::tfrecord::open(place, options),
        #[cfg(feature = "webdataset")]
        ForeignFormat::WebDataset => crate::layouts::webdataset::open(place, options),
        // Reached only for a layout whose feature is off.
        #[allow(unreachable_patterns)]
        other => Err(InteropError::Dataset {
            format: Some(other),
            path: place.label(),
            error: Box::new(ForeignError::FeatureDisabled { feature: other.feature().map_or("", |f| f.0) }),
        }),
    }
}
