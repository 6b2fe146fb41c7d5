//! Telling a dataset's layout from its files: [`detect`] and [`detect_at`], where a magic number
//! or an index file makes it unambiguous.

use std::collections::BTreeMap;
use std::path::Path;

use guideloom_storage::{EntryKind, RemoteOptions, StorageDir, StorageLocation};
use serde::de::IgnoredAny;

use crate::error::{ForeignError, InteropError, Result};
use crate::files::{self, Fs, Place};
use crate::format::ForeignFormat;
use crate::layouts::{megatron, npy, raw, record_detect};

/// Tells the layout of `path` where a magic number or an index file makes it unambiguous.
///
/// # Errors
/// [`InteropError::Dataset`] with [`ForeignError::UnknownFormat`] otherwise (raw files need
/// the format and a dtype), [`ForeignError::NoFiles`] when nothing is there;
/// [`InteropError::Storage`] (`StorageError::UnsafeFile`) for a FIFO, socket, device or
/// link that a directory listing or a glob matches.
pub fn detect(path: &Path) -> Result<ForeignFormat> {
    detect_place(&Place::Local(path.to_path_buf()))
}

/// [`detect`] of a local path or an object-store URL (see [`crate::ForeignDataset::open_at`]).
///
/// # Errors
/// As [`detect`]; [`InteropError::Storage`] (`StorageError::Remote`) when the store cannot be
/// opened or listed.
pub fn detect_at(location: &StorageLocation, remote: &RemoteOptions) -> Result<ForeignFormat> {
    match location {
        StorageLocation::Local(p) => detect(p),
        StorageLocation::Remote(url) => {
            detect_place(&Place::Remote { url: url.clone(), options: remote.clone() })
        }
    }
}

pub(crate) fn detect_place(place: &Place) -> Result<ForeignFormat> {
    let path = place.label();
    let unknown = |reason: String| InteropError::Dataset {
        format: None,
        path: path.clone(),
        error: Box::new(ForeignError::UnknownFormat { reason }),
    };
    if let Some((dir, entries)) = place.as_dir()? {
        if entries.iter().any(|e| e.name == "index.json" && e.kind != EntryKind::Dir) {
            let fs = Fs::new(ForeignFormat::Mds, dir.clone());
            let text = fs.read_whole("index.json", files::MAX_INDEX_BYTES)?;
            let keys = match index_keys(&text) {
                Ok(keys) => keys,
                Err(e) if e.is_data() => BTreeMap::new(),
                Err(e) => return Err(unknown(format!("index.json is not JSON ({e})"))),
            };
            if keys.contains_key("chunks") && keys.contains_key("config") {
                return Ok(ForeignFormat::Litdata);
            }
            if keys.contains_key("shards") {
                return Ok(ForeignFormat::Mds);
            }
            return Err(unknown("index.json is neither MDS (shards) nor litdata (chunks, config)".into()));
        }
        if entries
            .iter()
            .any(|e| (e.name == "state.json" || e.name == "dataset_dict.json") && e.kind != EntryKind::Dir)
        {
            return Ok(ForeignFormat::HfArrow);
        }
        if let Some(format) = table_files(dir.as_ref(), &entries)? {
            return Ok(format);
        }
        let npys = files::with_ext(dir.as_ref(), &entries, "npy")?;
        if !npys.is_empty() && npys.iter().all(|f| files::starts_with(dir.as_ref(), f, npy::MAGIC)) {
            return Ok(ForeignFormat::Npy);
        }
        for ext in ["array_record", "tar", "tfrecord", "gz"] {
            if let Some(first) = files::with_ext(dir.as_ref(), &entries, ext)?.first() {
                if let Some(f) = record_detect::detect(dir.as_ref(), first) {
                    return Ok(f);
                }
            }
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
        if let Some(format) = table_file(dir.as_ref(), first) {
            return Ok(format);
        }
        if raw::has_llmc_header(dir.as_ref(), first) {
            return Ok(ForeignFormat::Llmc);
        }
        if let Some(f) = record_detect::detect(dir.as_ref(), first) {
            return Ok(f);
        }
        return Err(unknown(
            "no magic number of a known layout: raw tokens (nanogpt, olmo, legacy llm.c) need the format and a dtype"
                .into(),
        ));
    }
    Err(InteropError::Dataset {
        format: None,
        path: path.clone(),
        error: Box::new(ForeignError::NoFiles { pattern: path.display().to_string() }),
    })
}

/// The magic of Parquet files (at both ends).
const PARQUET_MAGIC: &[u8] = b"PAR1";

/// The first bytes of an Arrow IPC stream (the continuation marker of its schema message).
const ARROW_STREAM_MAGIC: &[u8] = &[0xFF, 0xFF, 0xFF, 0xFF];

/// Parquet when file `name` starts with `PAR1`; Hugging Face Arrow when it is a `.arrow`
/// file starting as an IPC stream does.
fn table_file(dir: &dyn StorageDir, name: &str) -> Option<ForeignFormat> {
    if files::starts_with(dir, name, PARQUET_MAGIC) {
        return Some(ForeignFormat::Parquet);
    }
    (name.ends_with(".arrow") && files::starts_with(dir, name, ARROW_STREAM_MAGIC))
        .then_some(ForeignFormat::HfArrow)
}

/// The layout of a directory of `*.parquet` or `*.arrow` files (the first file's magic).
fn table_files(
    dir: &dyn StorageDir,
    entries: &[guideloom_storage::DirEntry],
) -> Result<Option<ForeignFormat>> {
    for ext in ["parquet", "arrow"] {
        if let Some(first) = files::with_ext(dir, entries, ext)?.first() {
            if let Some(format) = table_file(dir, first) {
                return Ok(Some(format));
            }
        }
    }
    Ok(None)
}

/// The top-level keys of an `index.json` (their values are skipped, not built): an error of
/// category data when the text is JSON but not an object.
fn index_keys(text: &[u8]) -> serde_json::Result<BTreeMap<String, IgnoredAny>> {
    serde_json::from_slice(text)
}
