//! Checksum verification of every committed byte of a storage.

use std::path::Path;

use crate::core::{check_file, ReaderIndex};
use crate::dir::{LocalDir, StorageDir};
use crate::document::DocumentIndex;
use crate::manifest::{Manifest, StorageKind};
use crate::stream::StreamIndex;
use crate::stream_meta::StreamWithMetaIndex;
use crate::{Result, StorageError};

/// Bytes checksummed per read.
const BLOCK: u64 = 1 << 20;

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

/// Checks the storage in the local directory `dir` (any kind) as a reader's open does
/// (dtype, counts against byte sizes, document and run indexes), then recomputes the crc32c
/// of every committed file and compares it with the manifest.
///
/// # Errors
/// Manifest errors ([`StorageError::InvalidManifest`] for an unreadable dtype or counts that
/// disagree with sizes); [`StorageError::MissingShard`], [`StorageError::ShardTooShort`],
/// [`StorageError::CorruptIndex`]; [`StorageError::ChecksumMismatch`] naming the first bad
/// shard and file.
pub fn verify(dir: impl AsRef<Path>) -> Result<VerifyReport> {
    verify_in(&LocalDir::new(dir.as_ref()))
}

/// [`verify`] through any [`StorageDir`].
///
/// # Errors
/// As [`verify`].
pub fn verify_in(dir: &dyn StorageDir) -> Result<VerifyReport> {
    let m = Manifest::load_from(dir)?;
    dir.expect_files(&m.expected_files());
    // The checks a reader's open makes, for any kind, without a format.
    match m.kind() {
        StorageKind::Stream => drop(StreamIndex::open(dir, &m)?),
        StorageKind::StreamWithMeta => drop(StreamWithMetaIndex::open(dir, &m)?),
        StorageKind::Document => drop(DocumentIndex::open(dir, &m)?),
    }
    let mut report = VerifyReport::default();
    for s in m.shards() {
        let main = (m.kind().data_extension(), s.bytes, s.checksum);
        let aux = s.files.iter().map(|(ext, f)| (ext.as_str(), f.bytes, f.checksum));
        for (ext, bytes, expected) in std::iter::once(main).chain(aux) {
            let name = s.file_name(ext);
            let path = check_file(dir, s.id, &name, bytes)?.path;
            let found = checksum(dir, &name, bytes)?;
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

/// crc32c of the first `len` bytes of file `name`, read in blocks of [`BLOCK`] bytes.
fn checksum(dir: &dyn StorageDir, name: &str, len: u64) -> Result<u32> {
    let mut buf = vec![0u8; BLOCK.min(len) as usize];
    let mut crc = 0u32;
    let mut off = 0u64;
    while off < len {
        let n = (len - off).min(BLOCK) as usize;
        dir.read_at(name, off, &mut buf[..n])?;
        crc = crc32c::crc32c_append(crc, &buf[..n]);
        off += n as u64;
    }
    Ok(crc)
}
