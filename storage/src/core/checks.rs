//! The checks every reader's open makes: the manifest's kind and dtype against the format,
//! the shard files' committed lengths, and the loading of a shard's index file.

use std::path::Path;

use guideloom_formats::Dtype;

use crate::dir::{LengthFault, StorageDir};
use crate::io::ShardFile;
use crate::manifest::{Manifest, ShardEntry, StorageKind, MANIFEST_FILE};
use crate::{Result, StorageError};

/// Checks that `m` is of `kind` and, for stream kinds, records the dtype `dtype`.
///
/// # Errors
/// [`StorageError::KindMismatch`], [`StorageError::DtypeMismatch`],
/// [`StorageError::FormatDtype`] when `dtype`'s descr does not parse back.
pub(crate) fn check_kind_dtype(
    m: &Manifest,
    dir: &Path,
    kind: StorageKind,
    dtype: Option<&Dtype>,
) -> Result<()> {
    let path = dir.join(MANIFEST_FILE);
    if m.kind() != kind {
        return Err(StorageError::KindMismatch {
            path,
            expected: kind.to_string(),
            found: m.kind().to_string(),
        });
    }
    if let (Some(found), Some(dtype)) = (m.dtype(), dtype) {
        // Compare what the manifest would record for the format's dtype.
        let expected =
            Dtype::from_descr(&dtype.to_descr()).map_err(|source| StorageError::FormatDtype { source })?;
        if *found != expected {
            return Err(StorageError::DtypeMismatch {
                path,
                expected: expected.to_string(),
                found: found.to_string(),
            });
        }
    }
    Ok(())
}

/// Checks that file `name` of `dir` exists and holds at least `committed` bytes.
///
/// # Errors
/// [`StorageError::MissingShard`], [`StorageError::ShardTooShort`], [`StorageError::Io`].
pub(crate) fn check_file(dir: &dyn StorageDir, shard: u64, name: &str, committed: u64) -> Result<ShardFile> {
    let path = dir.path().join(name);
    match dir.file_len(name)? {
        None => Err(StorageError::MissingShard { shard, path }),
        Some(actual) if actual < committed => {
            Err(StorageError::ShardTooShort { shard, path, expected: committed, actual })
        }
        Some(_) => Ok(ShardFile { path, shard, committed }),
    }
}

/// Checks the `ext` files of `shards` (their main data files: committed length
/// [`ShardEntry::bytes`]) as [`check_file`] does one by one, in order, all through one
/// [`StorageDir::check_lengths`] call, and returns them as [`ShardFile`]s.
///
/// # Errors
/// As [`check_file`], for the first file (in order) that fails.
pub(crate) fn check_shard_files(
    dir: &dyn StorageDir,
    shards: &[ShardEntry],
    ext: &str,
) -> Result<Vec<ShardFile>> {
    let base = dir.path();
    let mut name = String::new();
    let files: Vec<ShardFile> = shards
        .iter()
        .map(|s| {
            name.clear();
            s.push_file_name(&mut name, ext);
            ShardFile { path: base.join(&name), shard: s.id, committed: s.bytes }
        })
        .collect();
    match dir.check_lengths(&files)? {
        None => Ok(files),
        Some(LengthFault { index, found }) => {
            let ShardFile { path, shard, committed: expected } = files[index].clone();
            Err(match found {
                None => StorageError::MissingShard { shard, path },
                Some(actual) => StorageError::ShardTooShort { shard, path, expected, actual },
            })
        }
    }
}

/// An index file of a shard (`.index`, `.metaidx`) being loaded: checked, read, and named in
/// [`StorageError::CorruptIndex`].
pub(crate) struct IndexFile<'a> {
    dir: &'a dyn StorageDir,
    shard: u64,
    name: String,
}

impl<'a> IndexFile<'a> {
    /// The `ext` file of the shard `shard` in `dir`.
    pub(crate) fn new(dir: &'a dyn StorageDir, shard: &ShardEntry, ext: &str) -> Self {
        IndexFile { dir, shard: shard.id, name: shard.file_name(ext) }
    }

    /// Checks that the file holds at least `committed` bytes (see [`check_file`]).
    pub(crate) fn check(&self, committed: u64) -> Result<()> {
        check_file(self.dir, self.shard, &self.name, committed).map(drop)
    }

    /// Fills `out` from byte `offset` of the file.
    pub(crate) fn read_at(&self, offset: u64, out: &mut [u8]) -> Result<()> {
        self.dir.read_at(&self.name, offset, out)
    }

    /// The error for damage found at `entry`.
    pub(crate) fn corrupt(&self, entry: u64, reason: String) -> StorageError {
        StorageError::CorruptIndex {
            shard: self.shard,
            path: self.dir.path().join(&self.name),
            entry,
            reason,
        }
    }
}
