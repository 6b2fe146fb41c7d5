//! [`commit_parts`]: the one atomic commit of a job's parts.

use std::path::Path;

use guideloom_formats::Dtype;
use serde_json::{Map, Value};

use super::receipt::Receipt;
use crate::dir::{LengthFault, LocalDir, WriteDir};
use crate::io::ShardFile;
use crate::manifest::{Manifest, ShardEntry, StorageKind, MANIFEST_FILE};
use crate::{Result, StorageError};

/// What [`commit_parts`] does with a storage already committed at the root.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum CommitMode {
    /// Append the parts' shards after the storage's (which must agree on kind, dtype and
    /// format); a root without a storage gets a new one.
    Append,
    /// Replace the storage's shards (and metadata) by the parts' (its old files stay until
    /// they are removed; a later writer of the root may overwrite them).
    Overwrite,
    /// Refuse a root that already holds a storage (the default, as Spark's `"error"`).
    #[default]
    ErrorIfExists,
}

impl std::str::FromStr for CommitMode {
    type Err = String;

    /// `"append"`, `"overwrite"`, or `"error"` (also `"errorifexists"`).
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "append" => Ok(CommitMode::Append),
            "overwrite" => Ok(CommitMode::Overwrite),
            "error" | "errorifexists" => Ok(CommitMode::ErrorIfExists),
            other => Err(format!("unknown commit mode {other:?} (append, overwrite or error)")),
        }
    }
}

/// What [`commit_parts`] committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitReport {
    /// Partitions committed (one receipt each).
    pub partitions: u64,
    /// Shards added to the manifest.
    pub shards: u64,
    /// Id of the first shard added (the storage's shard count before, for a storage of
    /// consecutive ids).
    pub first_shard: u64,
    /// `(partition, attempt)` of the receipts left out: duplicates of a partition whose lower
    /// attempt was kept.
    pub skipped: Vec<(u64, u64)>,
    /// The committed manifest's fingerprint ([`Manifest::fingerprint`]).
    pub fingerprint: u64,
}

/// Commits the parts of `receipts` into the local storage `root` in one atomic step (see
/// [`commit_parts_in`]; metadata: the storage's own when appending, none otherwise).
///
/// # Errors
/// As [`commit_parts_in`].
pub fn commit_parts(root: impl AsRef<Path>, receipts: &[Receipt], mode: CommitMode) -> Result<CommitReport> {
    commit_parts_in(&LocalDir::new(root.as_ref()), receipts, mode, None)
}

/// Commits the parts of `receipts` into the storage of `dir`: checks each receipt
/// ([`Receipt::check`]; all of one job), that they agree on kind, dtype and format (and
/// agree with the storage when appending), keeps one receipt per partition (the lowest
/// attempt), checks that every file they name exists with its committed length (and, locally,
/// that no directory on the way is a link), appends their shards after the storage's in
/// increasing partition order (then each part's shard order) with new consecutive ids, each
/// naming its files by its path, sets the keys of `metadata` (when given) in the user
/// metadata, and replaces the manifest with [`WriteDir::replace_if`] against the one read
/// under the storage's writer lock. No data byte is read or copied.
///
/// # Errors
/// [`StorageError::InvalidReceipt`], [`StorageError::InvalidJob`];
/// [`StorageError::PartMismatch`] naming the partition, the field and both values;
/// [`StorageError::PartFileMissing`], [`StorageError::PartFileShort`] naming the file;
/// [`StorageError::StorageExists`] ([`CommitMode::ErrorIfExists`] onto a storage);
/// [`StorageError::NoParts`] (no receipt and no storage); [`StorageError::UnsafeFile`] (a link
/// on a part's path); [`StorageError::Locked`] while a writer has the root open;
/// [`StorageError::ConcurrentCommit`] when another commit replaced the manifest meanwhile
/// (nothing is committed); manifest errors of the storage; I/O errors.
pub fn commit_parts_in(
    dir: &dyn WriteDir,
    receipts: &[Receipt],
    mode: CommitMode,
    metadata: Option<&Map<String, Value>>,
) -> Result<CommitReport> {
    for r in receipts {
        r.check()?;
    }
    if let Some(other) = receipts.iter().find(|r| r.job != receipts[0].job) {
        return Err(StorageError::InvalidReceipt {
            partition: other.partition,
            reason: format!(
                "its job {:?} is not the job {:?} of the other receipts",
                other.job, receipts[0].job
            ),
        });
    }
    // One receipt per partition: the lowest attempt.
    let mut order: Vec<&Receipt> = receipts.iter().collect();
    order.sort_by_key(|r| (r.partition, r.attempt));
    let mut kept: Vec<&Receipt> = Vec::with_capacity(order.len());
    let mut skipped = Vec::new();
    for r in order {
        match kept.last() {
            Some(k) if k.partition == r.partition => skipped.push((r.partition, r.attempt)),
            _ => kept.push(r),
        }
    }
    for r in &kept[1.min(kept.len())..] {
        agree(r, &kept[0].kind, &kept[0].dtype, &kept[0].format, Some(kept[0].partition))?;
    }
    check_files(dir, &kept)?;

    dir.create_dir()?;
    let _lock = dir.lock()?;
    let base = Manifest::read_text(dir)?;
    let manifest_path = dir.path().join(MANIFEST_FILE);
    let existing = base.as_deref().map(|t| Manifest::from_text(t, &manifest_path)).transpose()?;
    let mut manifest = match (mode, existing) {
        (CommitMode::ErrorIfExists, Some(_)) => {
            return Err(StorageError::StorageExists { path: manifest_path })
        }
        (CommitMode::Append, Some(m)) => {
            if let Some(r) = kept.first() {
                agree(r, &m.kind(), m.dtype_descr(), m.format(), None)?;
            }
            m
        }
        (_, existing) => match (kept.first(), existing) {
            (Some(r), _) => {
                let dtype = match r.kind {
                    StorageKind::Document => None,
                    _ => Some(Dtype::from_descr(&r.dtype).map_err(|e| StorageError::InvalidReceipt {
                        partition: r.partition,
                        reason: format!("dtype {}: {e}", r.dtype),
                    })?),
                };
                Manifest::new(r.kind, dtype.as_ref(), r.format.clone())?
            }
            (None, Some(m)) => Manifest::new(m.kind(), m.dtype(), m.format().clone())?,
            (None, None) => return Err(StorageError::NoParts { path: dir.path().to_path_buf() }),
        },
    };
    let first_shard = match manifest.shards().last() {
        Some(s) => s.id.checked_add(1).ok_or_else(|| StorageError::InvalidManifest {
            path: manifest_path.clone(),
            reason: "the last shard id is u64::MAX: no shard can follow it".into(),
        })?,
        None => 0,
    };
    let mut next = first_shard;
    let mut added = 0u64;
    for r in &kept {
        for s in &r.shards {
            let id = next;
            next = next.checked_add(1).ok_or_else(|| StorageError::InvalidReceipt {
                partition: r.partition,
                reason: "shard ids overflow u64".into(),
            })?;
            manifest.upsert(ShardEntry { id, ..s.clone() });
            added += 1;
        }
    }
    if let Some(meta) = metadata {
        for (k, v) in meta {
            manifest.metadata_mut().insert(k.clone(), v.clone());
        }
    }
    manifest.commit(dir, base.as_deref())?;
    Ok(CommitReport {
        partitions: kept.len() as u64,
        shards: added,
        first_shard,
        skipped,
        fingerprint: manifest.fingerprint(),
    })
}

/// Checks that receipt `r` has `kind`, `dtype` and `format` (those of partition `against`, or
/// of the storage for `None`).
fn agree(
    r: &Receipt,
    kind: &StorageKind,
    dtype: &Value,
    format: &crate::FormatSpec,
    against: Option<u64>,
) -> Result<()> {
    let mismatch = |field, expected: String, found: String| StorageError::PartMismatch {
        partition: r.partition,
        field,
        expected,
        found,
        against,
    };
    if r.kind != *kind {
        return Err(mismatch("kind", kind.to_string(), r.kind.to_string()));
    }
    let same_dtype = match (Dtype::from_descr(dtype), Dtype::from_descr(&r.dtype)) {
        (Ok(a), Ok(b)) => a == b,
        _ => *dtype == r.dtype,
    };
    if !same_dtype {
        return Err(mismatch("dtype", dtype.to_string(), r.dtype.to_string()));
    }
    if r.format != *format {
        let text = |f: &crate::FormatSpec| serde_json::to_string(f).unwrap_or_default();
        return Err(mismatch("format", text(format), text(&r.format)));
    }
    Ok(())
}

/// Checks that every file of every kept receipt exists with its committed length (one
/// [`crate::StorageDir::check_lengths`] call) and, in a local directory, that no directory
/// on a part's path is a link.
fn check_files(dir: &dyn WriteDir, kept: &[&Receipt]) -> Result<()> {
    let mut files = Vec::new();
    let mut owner = Vec::new();
    let mut checked = std::collections::HashSet::new();
    for r in kept {
        for s in &r.shards {
            for (i, ext) in r.kind.files().iter().enumerate() {
                let committed = if i == 0 { s.bytes } else { s.files.get(*ext).map_or(0, |f| f.bytes) };
                if i > 0 && !s.files.contains_key(*ext) {
                    return Err(StorageError::InvalidReceipt {
                        partition: r.partition,
                        reason: format!("shard {} lacks its {ext:?} file entry", s.id),
                    });
                }
                let name = s.file_name(ext);
                if let Some(local) = dir.local_dir() {
                    crate::fsutil::check_no_links(local, &name, &mut checked)?;
                }
                files.push(ShardFile { path: dir.path().join(&name), shard: s.id, committed });
                owner.push(r.partition);
            }
        }
    }
    match dir.check_lengths(&files)? {
        None => Ok(()),
        Some(LengthFault { index, found }) => {
            let (path, partition) = (files[index].path.clone(), owner[index]);
            Err(match found {
                None => StorageError::PartFileMissing { partition, path },
                Some(found) => {
                    StorageError::PartFileShort { partition, path, expected: files[index].committed, found }
                }
            })
        }
    }
}
