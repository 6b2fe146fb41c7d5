//! `manifest.json`: the file that makes a storage self-describing and commits what was
//! written.
//!
//! A writer commits by writing the whole manifest to `manifest.json.tmp`, fsyncing it,
//! renaming it over `manifest.json` and fsyncing the directory, so a reader sees either the
//! old or the new manifest, never a mix. Readers trust only the byte and element counts the
//! manifest records.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::{Result, StorageError};

/// The manifest format version this build reads and writes.
pub const FORMAT_VERSION: u64 = 1;

/// The largest `manifest.json` a reader accepts, in bytes (256 MiB: about a million shards).
pub const MAX_MANIFEST_BYTES: u64 = 256 << 20;

/// The manifest's file name inside a storage directory.
pub const MANIFEST_FILE: &str = "manifest.json";

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

    /// Extension of a shard's main data file (`stream`, `docs`).
    pub fn data_extension(self) -> &'static str {
        match self {
            StorageKind::Stream | StorageKind::StreamWithMeta => "stream",
            StorageKind::Document => "docs",
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
}

/// The parsed `manifest.json` of a storage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Manifest format version ([`FORMAT_VERSION`]).
    pub format_version: u64,
    /// Storage kind.
    pub kind: StorageKind,
    /// Element dtype as numpy's descr (`null` for document storages).
    #[serde(default)]
    pub dtype: Value,
    /// The format the storage was written with.
    pub format: FormatSpec,
    /// Checksum algorithm of every `checksum` field (always `"crc32c"`).
    pub checksum_algorithm: String,
    /// Shards in increasing id order.
    pub shards: Vec<ShardEntry>,
    /// User metadata (free-form JSON object).
    #[serde(default)]
    pub metadata: Map<String, Value>,
}

impl Manifest {
    /// An empty manifest of `kind`.
    pub fn new(kind: StorageKind, dtype: Value, format: FormatSpec) -> Self {
        Manifest {
            format_version: FORMAT_VERSION,
            kind,
            dtype,
            format,
            checksum_algorithm: "crc32c".into(),
            shards: Vec::new(),
            metadata: Map::new(),
        }
    }

    /// Reads and validates `dir/manifest.json`: version, checksum algorithm, unique
    /// increasing shard ids, and per-kind counts consistent with byte sizes (see
    /// [`Manifest::validate`]).
    ///
    /// # Errors
    /// [`StorageError::NotAStorage`] when there is no manifest,
    /// [`StorageError::InvalidManifest`] for bad JSON or shape,
    /// [`StorageError::UnsupportedVersion`] for another version.
    pub fn load(dir: &Path) -> Result<Self> {
        let path = dir.join(MANIFEST_FILE);
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(StorageError::NotAStorage { dir: dir.to_path_buf() })
            }
            Err(e) => return Err(StorageError::io(&path, e)),
        };
        // A manifest is a few hundred bytes per shard; never read an unbounded file (a
        // damaged or hostile manifest, a link to a device) into memory.
        let mut text = Vec::new();
        std::io::Read::read_to_end(&mut std::io::Read::take(file, MAX_MANIFEST_BYTES + 1), &mut text)
            .map_err(|e| StorageError::io(&path, e))?;
        if text.len() as u64 > MAX_MANIFEST_BYTES {
            return Err(StorageError::InvalidManifest {
                path,
                reason: format!("larger than the {MAX_MANIFEST_BYTES}-byte limit of a manifest"),
            });
        }
        let value: Value = serde_json::from_slice(&text)
            .map_err(|e| StorageError::InvalidManifest { path: path.clone(), reason: e.to_string() })?;
        let version = value.get("format_version").and_then(Value::as_u64);
        match version {
            Some(FORMAT_VERSION) => {}
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
        let manifest: Manifest = serde_json::from_value(value)
            .map_err(|e| StorageError::InvalidManifest { path: path.clone(), reason: e.to_string() })?;
        manifest.validate(&path)?;
        Ok(manifest)
    }

    /// Checks internal consistency: checksum algorithm, strictly increasing shard ids, and for
    /// each shard the count field of its kind present.
    ///
    /// # Errors
    /// [`StorageError::InvalidManifest`] naming the first inconsistency.
    pub fn validate(&self, path: &Path) -> Result<()> {
        let bad = |reason: String| StorageError::InvalidManifest { path: path.to_path_buf(), reason };
        if self.checksum_algorithm != "crc32c" {
            return Err(bad(format!("unknown checksum_algorithm {:?}", self.checksum_algorithm)));
        }
        for w in self.shards.windows(2) {
            if w[0].id >= w[1].id {
                return Err(bad(format!("shard ids must increase: {} then {}", w[0].id, w[1].id)));
            }
        }
        for s in &self.shards {
            let ok = match self.kind {
                StorageKind::Stream | StorageKind::StreamWithMeta => s.elements.is_some(),
                StorageKind::Document => s.documents.is_some(),
            };
            if !ok {
                return Err(bad(format!("shard {} lacks its element or document count", s.id)));
            }
        }
        Ok(())
    }

    /// Writes the manifest atomically into `dir`: temp file, fsync, rename, fsync directory.
    ///
    /// # Errors
    /// [`StorageError::Io`] naming the file that failed.
    pub fn commit(&self, dir: &Path) -> Result<()> {
        let tmp = dir.join(format!("{MANIFEST_FILE}.tmp"));
        let path = dir.join(MANIFEST_FILE);
        let text = serde_json::to_vec_pretty(self)
            .map_err(|e| StorageError::InvalidManifest { path: path.clone(), reason: e.to_string() })?;
        let mut f = File::create(&tmp).map_err(|e| StorageError::io(&tmp, e))?;
        f.write_all(&text).map_err(|e| StorageError::io(&tmp, e))?;
        f.sync_all().map_err(|e| StorageError::io(&tmp, e))?;
        drop(f);
        fs::rename(&tmp, &path).map_err(|e| StorageError::io(&path, e))?;
        sync_dir(dir)
    }

    /// Shard data-file path: `dir/shard-{id:05}.{ext}`.
    pub fn shard_path(dir: &Path, id: u64, ext: &str) -> PathBuf {
        dir.join(format!("shard-{id:05}.{ext}"))
    }

    /// The shard with id `id`.
    pub fn shard(&self, id: u64) -> Option<&ShardEntry> {
        self.shards.binary_search_by_key(&id, |s| s.id).ok().map(|i| &self.shards[i])
    }

    /// A stable 64-bit fingerprint of the committed contents (kind, dtype, format and every
    /// shard's counts, sizes and checksums; user metadata excluded). Equal fingerprints mean
    /// the same committed data with overwhelming probability. xxh3-64 of the canonical JSON.
    pub fn fingerprint(&self) -> u64 {
        let canon = serde_json::json!({
            "kind": self.kind,
            "dtype": self.dtype,
            "format": self.format,
            "shards": self.shards,
        });
        xxhash_rust::xxh3::xxh3_64(canon.to_string().as_bytes())
    }
}

/// fsyncs a directory so a rename inside it is durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    let d = File::open(dir).map_err(|e| StorageError::io(dir, e))?;
    d.sync_all().map_err(|e| StorageError::io(dir, e))
}
