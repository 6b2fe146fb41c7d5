//! `manifest.json`: the file that makes a storage self-describing and commits what was
//! written.
//!
//! A writer commits by replacing the whole manifest in one atomic step
//! ([`crate::WriteDir::replace_if`]: locally, writing `manifest.json.tmp`, fsyncing it,
//! renaming it over `manifest.json` and fsyncing the directory), so a reader sees either the
//! old or the new manifest, never a mix. Readers trust only the byte and element counts the
//! manifest records.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use guideloom_formats::Dtype;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::dir::{ExpectedFile, LocalDir, StorageDir, WriteDir};
use crate::{Result, StorageError};

/// The manifest format version this build writes when a shard names its files by a path
/// ([`ShardEntry::path`], a storage committed from parts); it reads this one and every
/// earlier one. A manifest without such a shard is written as version 1
/// ([`FORMAT_VERSION_FLAT`]), as before, so that older builds still read it.
pub const FORMAT_VERSION: u64 = 2;

/// The manifest format version of a storage whose shard files all have the flat names
/// `shard-{id:05}.{ext}` (the first version; written whenever no shard has a path).
pub const FORMAT_VERSION_FLAT: u64 = 1;

/// The longest [`ShardEntry::path`] accepted, in bytes.
pub const MAX_SHARD_PATH_BYTES: usize = 1024;

/// The largest `manifest.json` a reader accepts, in bytes (256 MiB: about a million shards).
pub const MAX_MANIFEST_BYTES: u64 = 256 << 20;

/// The manifest's file name inside a storage directory.
pub const MANIFEST_FILE: &str = "manifest.json";

/// Extension of the elements file of the stream kinds.
pub(crate) const STREAM: &str = "stream";
/// Extension of a document shard's payload file.
pub(crate) const DOCS: &str = "docs";
/// Extension of a document shard's offset index.
pub(crate) const INDEX: &str = "index";
/// Extension of a stream-with-meta shard's payload file.
pub(crate) const META: &str = "meta";
/// Extension of a stream-with-meta shard's run index.
pub(crate) const METAIDX: &str = "metaidx";

/// The three storage kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum StorageKind {
    /// Fixed-size elements concatenated into one stream.
    Stream,
    /// Variable-size documents addressed by a global index.
    Document,
    /// A stream whose elements point to per-run metadata payloads.
    StreamWithMeta,
}

impl StorageKind {
    /// The kind's name as written in the manifest (`"stream"`, `"document"`,
    /// `"stream_with_meta"`).
    pub fn as_str(self) -> &'static str {
        match self {
            StorageKind::Stream => "stream",
            StorageKind::Document => "document",
            StorageKind::StreamWithMeta => "stream_with_meta",
        }
    }

    /// Extensions of a shard's files, its main data file first.
    pub(crate) fn files(self) -> &'static [&'static str] {
        match self {
            StorageKind::Stream => &[STREAM],
            StorageKind::Document => &[DOCS, INDEX],
            StorageKind::StreamWithMeta => &[STREAM, META, METAIDX],
        }
    }

    /// Extension of a shard's main data file (`stream`, `docs`).
    pub fn data_extension(self) -> &'static str {
        match self {
            StorageKind::Stream | StorageKind::StreamWithMeta => STREAM,
            StorageKind::Document => DOCS,
        }
    }
}

impl std::fmt::Display for StorageKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The format recorded in the manifest: its name and parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FormatSpec {
    /// Format name (for example `"tokens"`).
    pub name: String,
    /// Format parameters (JSON; `null` when it has none).
    #[serde(default)]
    pub params: Value,
}

/// Committed length and checksum of one file of a shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    /// Committed length in bytes; bytes past it are ignored.
    pub bytes: u64,
    /// crc32c of the committed bytes.
    pub checksum: u32,
}

/// One shard as committed in the manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardEntry {
    /// Shard id; the stream and the global document index follow increasing ids.
    pub id: u64,
    /// Elements in the shard (stream kinds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elements: Option<u64>,
    /// Documents in the shard (document kind).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub documents: Option<u64>,
    /// Committed length of the main data file, in bytes.
    pub bytes: u64,
    /// crc32c of the main data file's committed bytes.
    pub checksum: u32,
    /// Other files of the shard, by extension (`"index"`, `"meta"`, `"metaidx"`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub files: BTreeMap<String, FileEntry>,
    /// Where the shard's files are, relative to the storage directory, without their
    /// extension: the files are `{path}.{ext}` (for example
    /// `_parts/job/000003-0/shard-00000` names `_parts/job/000003-0/shard-00000.stream`).
    /// `None` (the default, not written): `shard-{id:05}.{ext}`. Set by
    /// [`crate::parts::commit_parts`], so that committing parts copies no byte. Checked on
    /// load ([`check_shard_path`]): relative, normalized, no `..`, no root, and never followed
    /// out of a local storage through a symbolic link. Not part of
    /// [`Manifest::fingerprint`] (it says where the bytes are, not what they are).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

impl ShardEntry {
    /// The shard's record count for `kind`: elements (stream kinds) or documents.
    pub(crate) fn count(&self, kind: StorageKind) -> u64 {
        match kind {
            StorageKind::Stream | StorageKind::StreamWithMeta => self.elements.unwrap_or(0),
            StorageKind::Document => self.documents.unwrap_or(0),
        }
    }

    /// The name of the shard's `ext` file relative to the storage directory: `{path}.{ext}`
    /// when the entry has a [`ShardEntry::path`], else `shard-{id:05}.{ext}`.
    pub fn file_name(&self, ext: &str) -> String {
        let mut name = String::new();
        self.push_file_name(&mut name, ext);
        name
    }

    /// Appends [`ShardEntry::file_name`]`(ext)` to `out`.
    pub(crate) fn push_file_name(&self, out: &mut String, ext: &str) {
        match &self.path {
            Some(p) => {
                out.push_str(p);
                out.push('.');
                out.push_str(ext);
            }
            None => push_shard_file_name(out, self.id, ext),
        }
    }
}

/// What is wrong with the shape of `shards` of a `kind` storage, if anything: ids not strictly
/// increasing, a shard without the count field of its kind, or a `files` key other than one of
/// the kind's extensions (file names come from the kind, never from the entry). Shared by the
/// manifest's checks and a part receipt's.
pub(crate) fn shards_shape_fault(kind: StorageKind, shards: &[ShardEntry]) -> Option<String> {
    for w in shards.windows(2) {
        if w[0].id >= w[1].id {
            return Some(format!("shard ids must increase: {} then {}", w[0].id, w[1].id));
        }
    }
    for s in shards {
        let counted = match kind {
            StorageKind::Stream | StorageKind::StreamWithMeta => s.elements.is_some(),
            StorageKind::Document => s.documents.is_some(),
        };
        if !counted {
            return Some(format!("shard {} lacks its element or document count", s.id));
        }
        if let Some(key) = s.files.keys().find(|k| !kind.files()[1..].contains(&k.as_str())) {
            return Some(format!("shard {} names file {key:?}, which a {kind} storage does not have", s.id));
        }
    }
    None
}

/// Checks a [`ShardEntry::path`]: non-empty, at most [`MAX_SHARD_PATH_BYTES`] bytes, relative
/// and normalized (components separated by single `/`, none empty, `.` or `..`; no leading or
/// trailing `/`), of printable characters other than `\\` (no NUL, no control character).
///
/// ```
/// use guideloom_storage::check_shard_path;
/// assert!(check_shard_path("_parts/job/000001-0/shard-00000").is_ok());
/// for bad in ["", "/abs", "a/../b", "../x", "a//b", "./a", "a/", "a\\b", "a\u{0}b", "."] {
///     assert!(check_shard_path(bad).is_err(), "{bad:?}");
/// }
/// ```
///
/// # Errors
/// The reason, as text, when the path is refused.
pub fn check_shard_path(path: &str) -> std::result::Result<(), String> {
    if path.is_empty() {
        return Err("the shard path is empty".into());
    }
    if path.len() > MAX_SHARD_PATH_BYTES {
        return Err(format!("the shard path is longer than {MAX_SHARD_PATH_BYTES} bytes"));
    }
    if path.chars().any(|c| c.is_control() || c == '\\') {
        return Err(format!("the shard path {path:?} holds a control character or a backslash"));
    }
    if path.starts_with('/') {
        return Err(format!("the shard path {path:?} is absolute; it must be relative to the storage"));
    }
    for component in path.split('/') {
        match component {
            "" => return Err(format!("the shard path {path:?} is not normalized (an empty component)")),
            "." | ".." => {
                return Err(format!("the shard path {path:?} holds a {component:?} component"));
            }
            _ => {}
        }
    }
    Ok(())
}

/// The parsed and validated `manifest.json` of a storage.
///
/// Fields are read through accessors: a manifest obtained from [`Manifest::load`] (or from a
/// reader) has passed [`Manifest::load`]'s checks, and only writers, holding the storage's
/// writer lock, change and commit one.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Manifest {
    format_version: u64,
    kind: StorageKind,
    dtype: Value,
    format: FormatSpec,
    checksum_algorithm: String,
    shards: Vec<ShardEntry>,
    metadata: Map<String, Value>,
    /// `dtype` parsed (stream kinds); not written.
    #[serde(skip)]
    element_dtype: Option<Dtype>,
}

/// The version of a `manifest.json`, read before anything else (the other fields are
/// skipped without being built).
#[derive(Deserialize)]
struct VersionOnly {
    #[serde(default)]
    format_version: Option<Value>,
}

/// `manifest.json` as written, before validation.
#[derive(Deserialize)]
struct ManifestFile {
    format_version: u64,
    kind: StorageKind,
    #[serde(default)]
    dtype: Value,
    format: FormatSpec,
    checksum_algorithm: String,
    shards: Vec<ShardEntry>,
    #[serde(default)]
    metadata: Map<String, Value>,
}

impl Manifest {
    /// An empty manifest of `kind` whose elements have `dtype` (`None` for document
    /// storages).
    ///
    /// # Errors
    /// [`StorageError::FormatDtype`] when `dtype`'s numpy descr does not parse back.
    pub(crate) fn new(kind: StorageKind, dtype: Option<&Dtype>, format: FormatSpec) -> Result<Self> {
        let (dtype, element_dtype) = match dtype {
            Some(d) => {
                let descr = d.to_descr();
                let parsed =
                    Dtype::from_descr(&descr).map_err(|source| StorageError::FormatDtype { source })?;
                (descr, Some(parsed))
            }
            None => (Value::Null, None),
        };
        Ok(Manifest {
            format_version: FORMAT_VERSION_FLAT,
            kind,
            dtype,
            format,
            checksum_algorithm: "crc32c".into(),
            shards: Vec::new(),
            metadata: Map::new(),
            element_dtype,
        })
    }

    /// Reads and validates `dir/manifest.json`: version, checksum algorithm, unique
    /// increasing shard ids, each shard's count field of the storage's kind, and for stream
    /// kinds a dtype that parses.
    ///
    /// # Errors
    /// [`StorageError::NotAStorage`] when there is no manifest,
    /// [`StorageError::InvalidManifest`] for bad JSON, shape or content,
    /// [`StorageError::UnsupportedVersion`] for another version.
    pub fn load(dir: &Path) -> Result<Self> {
        Self::load_from(&LocalDir::new(dir))
    }

    /// [`Manifest::load`] through any [`StorageDir`].
    ///
    /// # Errors
    /// As [`Manifest::load`].
    pub fn load_from(dir: &dyn StorageDir) -> Result<Self> {
        let Some(text) = Self::read_text(dir)? else {
            return Err(StorageError::NotAStorage { dir: dir.path().to_path_buf() });
        };
        let m = Self::from_text(&text, &dir.path().join(MANIFEST_FILE))?;
        m.check_links(dir)?;
        Ok(m)
    }

    /// In a local directory, checks that no directory on a shard's path
    /// ([`ShardEntry::path`]) is a symbolic link (or anything but a directory), so that no
    /// shard file is reached out of the storage through a link. Nothing to check for flat
    /// shards or other directories.
    ///
    /// # Errors
    /// [`StorageError::UnsafeFile`] naming the directory; [`StorageError::Io`].
    pub(crate) fn check_links(&self, dir: &dyn StorageDir) -> Result<()> {
        let Some(local) = dir.local_dir() else { return Ok(()) };
        let mut checked = std::collections::HashSet::new();
        for s in self.shards.iter().filter(|s| s.path.is_some()) {
            crate::fsutil::check_no_links(local, &s.file_name(self.kind.data_extension()), &mut checked)?;
        }
        Ok(())
    }

    /// The bytes of `dir`'s `manifest.json`; `Ok(None)` when there is none.
    ///
    /// # Errors
    /// [`StorageError::InvalidManifest`] when it is larger than [`MAX_MANIFEST_BYTES`]; the
    /// directory's errors.
    pub(crate) fn read_text(dir: &dyn StorageDir) -> Result<Option<Vec<u8>>> {
        // A manifest is a few hundred bytes per shard; never read an unbounded file (a
        // damaged or hostile manifest, a link to a device) into memory.
        let Some(text) = dir.read_file(MANIFEST_FILE, MAX_MANIFEST_BYTES)? else { return Ok(None) };
        if text.len() as u64 > MAX_MANIFEST_BYTES {
            return Err(StorageError::InvalidManifest {
                path: dir.path().join(MANIFEST_FILE),
                reason: format!("larger than the {MAX_MANIFEST_BYTES}-byte limit of a manifest"),
            });
        }
        Ok(Some(text))
    }

    /// The manifest `text` (the bytes of the file `path`, named in errors), parsed and checked.
    ///
    /// # Errors
    /// [`StorageError::InvalidManifest`], [`StorageError::UnsupportedVersion`].
    pub(crate) fn from_text(text: &[u8], path: &Path) -> Result<Self> {
        let path = path.to_path_buf();
        // Two passes over the text, no `Value` tree of the whole manifest (which took about
        // 1 KB per shard at its peak): the version alone (every other field skipped), then,
        // for this version, the typed fields.
        let version: VersionOnly = serde_json::from_slice(text)
            .map_err(|e| StorageError::InvalidManifest { path: path.clone(), reason: e.to_string() })?;
        let version = version.format_version.as_ref().and_then(Value::as_u64);
        match version {
            Some(FORMAT_VERSION_FLAT | FORMAT_VERSION) => {}
            Some(found) => {
                return Err(StorageError::UnsupportedVersion { path, found, supported: FORMAT_VERSION })
            }
            None => {
                return Err(StorageError::InvalidManifest {
                    path,
                    reason: "format_version is missing or not a non-negative integer".into(),
                })
            }
        }
        let file: ManifestFile = serde_json::from_slice(text)
            .map_err(|e| StorageError::InvalidManifest { path: path.clone(), reason: e.to_string() })?;
        let mut manifest = Manifest {
            format_version: file.format_version,
            kind: file.kind,
            dtype: file.dtype,
            format: file.format,
            checksum_algorithm: file.checksum_algorithm,
            shards: file.shards,
            metadata: file.metadata,
            element_dtype: None,
        };
        manifest.validate(&path)?;
        Ok(manifest)
    }

    /// Checks internal consistency (checksum algorithm, strictly increasing shard ids, for
    /// each shard the count field of its kind) and parses the dtype of stream kinds.
    fn validate(&mut self, path: &Path) -> Result<()> {
        let bad = |reason: String| StorageError::InvalidManifest { path: path.to_path_buf(), reason };
        if self.checksum_algorithm != "crc32c" {
            return Err(bad(format!("unknown checksum_algorithm {:?}", self.checksum_algorithm)));
        }
        shards_shape_fault(self.kind, &self.shards).map_or(Ok(()), |reason| Err(bad(reason)))?;
        for s in &self.shards {
            if let Some(p) = &s.path {
                if self.format_version < FORMAT_VERSION {
                    return Err(bad(format!(
                        "shard {} has a path, which format_version {} does not allow",
                        s.id, self.format_version
                    )));
                }
                check_shard_path(p).map_err(|reason| bad(format!("shard {}: {reason}", s.id)))?;
            }
        }
        self.element_dtype = match self.kind {
            StorageKind::Stream | StorageKind::StreamWithMeta => {
                Some(Dtype::from_descr(&self.dtype).map_err(|e| bad(e.to_string()))?)
            }
            StorageKind::Document => None,
        };
        Ok(())
    }

    /// Writes the manifest atomically into `dir` when the manifest there is still `expected`
    /// (its bytes; `None`: there is none), through [`WriteDir::replace_if`]; returns the bytes
    /// written. Only writers call it.
    ///
    /// # Errors
    /// [`StorageError::ConcurrentCommit`] when the manifest in `dir` is not `expected`;
    /// [`StorageError::Io`] naming the file that failed.
    pub(crate) fn commit(&self, dir: &dyn WriteDir, expected: Option<&[u8]>) -> Result<Vec<u8>> {
        let text = serde_json::to_vec_pretty(self).map_err(|e| StorageError::InvalidManifest {
            path: dir.path().join(MANIFEST_FILE),
            reason: e.to_string(),
        })?;
        dir.replace_if(MANIFEST_FILE, expected, &text)?;
        Ok(text)
    }

    /// Every file the manifest commits, with its committed length and checksum, shard by
    /// shard in the kind's file order (what a reader tells its directory:
    /// [`StorageDir::expect_files`]).
    pub(crate) fn expected_files(&self) -> Vec<ExpectedFile> {
        let mut out = Vec::with_capacity(self.shards.len() * self.kind.files().len());
        for s in &self.shards {
            for (i, ext) in self.kind.files().iter().enumerate() {
                let entry = if i == 0 {
                    Some(FileEntry { bytes: s.bytes, checksum: s.checksum })
                } else {
                    s.files.get(*ext).copied()
                };
                if let Some(FileEntry { bytes, checksum }) = entry {
                    out.push(ExpectedFile {
                        name: s.file_name(ext),
                        shard: s.id,
                        committed: bytes,
                        checksum,
                    });
                }
            }
        }
        out
    }

    /// Shard file path of a flat shard (one without [`ShardEntry::path`]):
    /// `dir/shard-{id:05}.{ext}`; [`ShardEntry::file_name`] gives any shard's.
    pub fn shard_path(dir: &Path, id: u64, ext: &str) -> PathBuf {
        dir.join(shard_file_name(id, ext))
    }

    /// The manifest format version: [`FORMAT_VERSION`] when a shard has a path,
    /// [`FORMAT_VERSION_FLAT`] otherwise.
    pub fn format_version(&self) -> u64 {
        self.format_version
    }

    /// The storage kind.
    pub fn kind(&self) -> StorageKind {
        self.kind
    }

    /// The element dtype: `Some` for stream kinds (validated on load), `None` for document
    /// storages.
    pub fn dtype(&self) -> Option<&Dtype> {
        self.element_dtype.as_ref()
    }

    /// The dtype as written: numpy's descr (`null` for document storages).
    pub fn dtype_descr(&self) -> &Value {
        &self.dtype
    }

    /// The format the storage was written with.
    pub fn format(&self) -> &FormatSpec {
        &self.format
    }

    /// The checksum algorithm of every `checksum` field (always `"crc32c"`).
    pub fn checksum_algorithm(&self) -> &str {
        &self.checksum_algorithm
    }

    /// The shards, in increasing id order.
    pub fn shards(&self) -> &[ShardEntry] {
        &self.shards
    }

    /// The user metadata (a free-form JSON object).
    pub fn metadata(&self) -> &Map<String, Value> {
        &self.metadata
    }

    /// The user metadata, for writers to change before their next commit.
    pub(crate) fn metadata_mut(&mut self) -> &mut Map<String, Value> {
        &mut self.metadata
    }

    /// Adds `entry`, or replaces the shard with its id (an entry with a path raises the
    /// format version to [`FORMAT_VERSION`]).
    pub(crate) fn upsert(&mut self, entry: ShardEntry) {
        if entry.path.is_some() {
            self.format_version = FORMAT_VERSION;
        }
        match self.shards.binary_search_by_key(&entry.id, |s| s.id) {
            Ok(i) => self.shards[i] = entry,
            Err(i) => self.shards.insert(i, entry),
        }
    }

    /// The shard with id `id`.
    pub fn shard(&self, id: u64) -> Option<&ShardEntry> {
        self.shards.binary_search_by_key(&id, |s| s.id).ok().map(|i| &self.shards[i])
    }

    /// A stable 64-bit fingerprint of the committed contents (kind, dtype, format and every
    /// shard's counts, sizes and checksums; user metadata excluded). Equal fingerprints mean
    /// the same committed data with overwhelming probability. xxh3-64 of the canonical JSON.
    pub fn fingerprint(&self) -> u64 {
        xxhash_rust::xxh3::xxh3_64(self.canonical_json().as_bytes())
    }

    /// The text [`Manifest::fingerprint`] hashes: the JSON object of `kind`, `dtype`, `format`
    /// and `shards`, every object's keys sorted, no white space. Written straight into one
    /// string (about 100 bytes per shard), never as a `serde_json::Value` tree (about 600
    /// bytes per shard), with the same bytes `serde_json::json!` of those fields printed.
    fn canonical_json(&self) -> String {
        use std::fmt::Write as _;
        // `Value`s print with sorted keys (serde_json's default map); the small fields go
        // through one.
        let value = |v: &dyn erased::Ser| v.to_value().to_string();
        let mut out = String::with_capacity(64 + 96 * self.shards.len());
        let _ = write!(
            out,
            "{{\"dtype\":{},\"format\":{},\"kind\":{},\"shards\":[",
            self.dtype,
            value(&self.format),
            value(&self.kind)
        );
        for (i, s) in self.shards.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            // ShardEntry's fields, sorted: bytes, checksum, documents, elements, files, id
            // (absent optional fields are skipped, as its `Serialize` does).
            let _ = write!(out, "{{\"bytes\":{},\"checksum\":{}", s.bytes, s.checksum);
            if let Some(d) = s.documents {
                let _ = write!(out, ",\"documents\":{d}");
            }
            if let Some(e) = s.elements {
                let _ = write!(out, ",\"elements\":{e}");
            }
            if !s.files.is_empty() {
                // A BTreeMap of FileEntry {bytes, checksum}: already sorted.
                let _ = write!(out, ",\"files\":{}", value(&s.files));
            }
            let _ = write!(out, ",\"id\":{}}}", s.id);
        }
        out.push_str("]}");
        out
    }
}

/// Serialising a small field through a `Value` (sorted keys) without naming its type.
mod erased {
    /// A value that serialises to a `serde_json::Value`.
    pub(super) trait Ser {
        fn to_value(&self) -> serde_json::Value;
    }

    impl<T: serde::Serialize> Ser for T {
        fn to_value(&self) -> serde_json::Value {
            serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
        }
    }
}

/// A flat shard's files without their extension: `shard-{id:05}`.
pub(crate) fn shard_file_stem(id: u64) -> String {
    format!("shard-{id:05}")
}

/// A shard file's name: `shard-{id:05}.{ext}`.
pub(crate) fn shard_file_name(id: u64, ext: &str) -> String {
    let mut name = String::with_capacity(12 + ext.len());
    push_shard_file_name(&mut name, id, ext);
    name
}

/// Appends [`shard_file_name`]`(id, ext)` to `out`.
pub(crate) fn push_shard_file_name(out: &mut String, id: u64, ext: &str) {
    use std::fmt::Write;
    // Writing to a `String` cannot fail.
    let _ = write!(out, "shard-{id:05}.{ext}");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fingerprint as it was first computed: a `Value` of the four fields, printed.
    fn fingerprint_through_value(m: &Manifest) -> (String, u64) {
        let canon = serde_json::json!({
            "kind": m.kind,
            "dtype": m.dtype,
            "format": m.format,
            "shards": m.shards,
        })
        .to_string();
        let h = xxhash_rust::xxh3::xxh3_64(canon.as_bytes());
        (canon, h)
    }

    #[test]
    fn the_canonical_text_is_the_one_a_value_tree_prints() {
        let format = |params| FormatSpec { name: "tokens\"\\é".into(), params };
        let mut stream = Manifest::new(
            StorageKind::Stream,
            Some(&Dtype::from_descr(&Value::String("<u2".into())).unwrap()),
            format(serde_json::json!({"z": 1, "a": [1, {"y": null, "b": "x"}]})),
        )
        .unwrap();
        let mut docs = Manifest::new(StorageKind::Document, None, format(Value::Null)).unwrap();
        let mut meta = Manifest::new(
            StorageKind::StreamWithMeta,
            Some(&Dtype::from_descr(&Value::String("<u4".into())).unwrap()),
            format(serde_json::json!({"vocab": 50257})),
        )
        .unwrap();
        for id in [0u64, 7, u64::MAX] {
            let entry = |elements, documents, files: &[(&str, u64)]| ShardEntry {
                id,
                elements,
                documents,
                bytes: id.wrapping_mul(3),
                checksum: (id as u32).wrapping_mul(0x9e37_79b9),
                files: files
                    .iter()
                    .map(|&(k, b)| (k.to_string(), FileEntry { bytes: b, checksum: 5 }))
                    .collect(),
                path: None,
            };
            stream.shards.push(entry(Some(id / 2), None, &[]));
            docs.shards.push(entry(None, Some(id), &[("index", 16)]));
            meta.shards.push(entry(Some(id), None, &[("metaidx", 8), ("meta", u64::MAX)]));
        }
        let empty = Manifest::new(StorageKind::Document, None, format(Value::Null)).unwrap();
        for m in [&stream, &docs, &meta, &empty] {
            let (text, hash) = fingerprint_through_value(m);
            assert_eq!(m.canonical_json(), text);
            assert_eq!(m.fingerprint(), hash);
        }
    }
}
