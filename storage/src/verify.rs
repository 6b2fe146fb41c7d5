//! Checksum verification of every committed byte of a storage.

use std::path::Path;

use crate::append::{check_file, checksum_file};
use crate::manifest::Manifest;
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

/// Recomputes the crc32c of every committed file of the storage in `dir` (any kind) and
/// compares it with the manifest.
///
/// # Errors
/// Manifest errors; [`StorageError::MissingShard`], [`StorageError::ShardTooShort`];
/// [`StorageError::ChecksumMismatch`] naming the first bad shard and file.
pub fn verify(dir: impl AsRef<Path>) -> Result<VerifyReport> {
    let dir = dir.as_ref();
    let m = Manifest::load(dir)?;
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
