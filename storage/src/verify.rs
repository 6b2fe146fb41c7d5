//! Checksum verification of every committed byte of a storage.

use std::path::Path;

use guideloom_formats::Dtype;

use crate::append::{check_file, checksum_file};
use crate::document::load_index;
use crate::manifest::{Manifest, StorageKind, MANIFEST_FILE};
use crate::stream::{stream_files, StreamLayout};
use crate::stream_meta::{load_runs, META, METAIDX};
use crate::{Result, StorageError};

/// What [`verify`] checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VerifyReport {
    /// Shards verified.
    pub shards: u64,
    /// Files verified (data files plus index/metadata files).
    pub files: u64,
    /// Committed bytes read and checksummed (a total over all files).
    pub bytes: u64,
}

/// Checks the storage in `dir` (any kind) as a reader's open does (dtype, counts against
/// byte sizes, document and run indexes), then recomputes the crc32c of every committed file
/// and compares it with the manifest.
///
/// # Errors
/// Manifest errors ([`StorageError::InvalidManifest`] for an unreadable dtype or counts that
/// disagree with sizes); [`StorageError::MissingShard`], [`StorageError::ShardTooShort`],
/// [`StorageError::CorruptIndex`]; [`StorageError::ChecksumMismatch`] naming the first bad
/// shard and file.
pub fn verify(dir: impl AsRef<Path>) -> Result<VerifyReport> {
    let dir = dir.as_ref();
    let m = Manifest::load(dir)?;
    check_structure(dir, &m)?;
    let mut report = VerifyReport::default();
    for s in &m.shards {
        let main = (m.kind.data_extension(), s.bytes, s.checksum);
        let aux = s.files.iter().map(|(ext, f)| (ext.as_str(), f.bytes, f.checksum));
        for (ext, bytes, expected) in std::iter::once(main).chain(aux) {
            let path = Manifest::shard_path(dir, s.id, ext);
            check_file(&path, s.id, bytes)?;
            let found = checksum_file(&path, s.id, bytes)?;
            if found != expected {
                return Err(StorageError::ChecksumMismatch { shard: s.id, path, expected, found });
            }
            report.files += 1;
            report.bytes += bytes;
        }
        report.shards += 1;
    }
    Ok(report)
}

/// The structural checks a reader's open makes, for any kind, without a format.
fn check_structure(dir: &Path, m: &Manifest) -> Result<()> {
    let invalid = |reason: String| StorageError::InvalidManifest { path: dir.join(MANIFEST_FILE), reason };
    match m.kind {
        StorageKind::Stream | StorageKind::StreamWithMeta => {
            let dtype = Dtype::from_descr(&m.dtype).map_err(|e| invalid(e.to_string()))?;
            stream_files(dir, m, dtype.itemsize(), m.kind)?;
            StreamLayout::new(&m.shards)?;
            if m.kind == StorageKind::StreamWithMeta {
                for s in &m.shards {
                    let entry = |ext: &str| {
                        s.files
                            .get(ext)
                            .copied()
                            .ok_or_else(|| invalid(format!("shard {} lacks its {ext:?} file entry", s.id)))
                    };
                    let (meta, index) = (entry(META)?, entry(METAIDX)?);
                    load_runs(dir, s, meta.bytes, index.bytes)?;
                }
            }
        }
        StorageKind::Document => {
            for s in &m.shards {
                load_index(dir, s, s.documents.unwrap_or(0))?;
            }
        }
    }
    Ok(())
}
