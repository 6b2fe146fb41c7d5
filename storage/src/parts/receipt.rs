//! [`Receipt`]: what a part writer returns and [`super::commit_parts`] takes, and the names
//! of part directories.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::manifest::{check_shard_path, shards_shape_fault, FormatSpec, ShardEntry, StorageKind};
use crate::{Result, StorageError};

/// The directory of a storage that holds the parts of its jobs.
pub const PARTS_DIR: &str = "_parts";

/// The receipt format version this build writes and reads.
pub const RECEIPT_VERSION: u64 = 1;

/// The longest job name accepted, in bytes.
const MAX_JOB_BYTES: usize = 128;

/// Checks that `job` is a safe path component: 1 to 128 bytes of ASCII letters, digits, `.`,
/// `_` and `-`, not starting with `.` (so neither `.` nor `..`, nor a hidden name).
///
/// ```
/// use guideloom_storage::parts::check_job;
/// assert!(check_job("spark-20261202_0001.a").is_ok());
/// for bad in ["", ".", "..", ".hidden", "a/b", "a b", "é"] {
///     assert!(check_job(bad).is_err(), "{bad:?}");
/// }
/// ```
///
/// # Errors
/// [`StorageError::InvalidJob`] naming the job and why.
pub fn check_job(job: &str) -> Result<()> {
    let bad = |reason: &str| StorageError::InvalidJob { job: job.to_string(), reason: reason.into() };
    if job.is_empty() || job.len() > MAX_JOB_BYTES {
        return Err(bad("a job name has 1 to 128 bytes"));
    }
    if job.starts_with('.') {
        return Err(bad("a job name does not start with '.'"));
    }
    if !job.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')) {
        return Err(bad("a job name holds only ASCII letters, digits, '.', '_' and '-'"));
    }
    Ok(())
}

/// The name of a part's directory relative to the storage root:
/// `_parts/<job>/<partition:06>-<attempt>` (the job is not checked here).
pub fn part_dir_name(job: &str, partition: u64, attempt: u64) -> String {
    format!("{PARTS_DIR}/{job}/{partition:06}-{attempt}")
}

/// The directory of a part: `root/_parts/<job>/<partition:06>-<attempt>`.
///
/// # Errors
/// [`StorageError::InvalidJob`] when `job` is not a safe path component ([`check_job`]).
pub fn part_dir(root: &Path, job: &str, partition: u64, attempt: u64) -> Result<PathBuf> {
    check_job(job)?;
    Ok(root.join(part_dir_name(job, partition, attempt)))
}

/// What a written part is, for [`super::commit_parts`]: its job, partition and attempt, the
/// kind, dtype and format it was written with, and its shard entries (each with
/// [`ShardEntry::path`] set to the shard's files relative to the storage root, without the
/// extension; ids are the part's own). Serialised as JSON ([`Receipt::to_json`], about 200
/// bytes plus 100 a shard), versioned by `receipt_version`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Receipt {
    /// [`RECEIPT_VERSION`].
    pub receipt_version: u64,
    /// The job (a safe path component, [`check_job`]).
    pub job: String,
    /// The partition: the parts' shards are committed in increasing partition order.
    pub partition: u64,
    /// The attempt (of two receipts of one partition, the lower attempt is kept).
    pub attempt: u64,
    /// The storage kind.
    pub kind: StorageKind,
    /// The element dtype's numpy descr (`null` for document storages).
    #[serde(default)]
    pub dtype: Value,
    /// The format.
    pub format: FormatSpec,
    /// The part's shards, in increasing (part) id order.
    pub shards: Vec<ShardEntry>,
}

impl Receipt {
    /// The receipt as JSON text.
    pub fn to_json(&self) -> String {
        // A receipt holds only strings, numbers, maps and JSON values: serialising cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// A receipt from JSON text, checked ([`Receipt::check`]).
    ///
    /// # Errors
    /// [`StorageError::InvalidReceipt`] for bad JSON, another version or a bad entry;
    /// [`StorageError::InvalidJob`].
    pub fn from_json(text: &str) -> Result<Self> {
        let r: Receipt = serde_json::from_str(text)
            .map_err(|e| StorageError::InvalidReceipt { partition: u64::MAX, reason: e.to_string() })?;
        r.check()?;
        Ok(r)
    }

    /// The part's directory relative to the root ([`part_dir_name`]).
    pub fn dir_name(&self) -> String {
        part_dir_name(&self.job, self.partition, self.attempt)
    }

    /// Checks the receipt: its version, its job name, and each shard: increasing ids, the
    /// count field of its kind, only the kind's file keys, and a path ([`check_shard_path`])
    /// directly inside the part's own directory ([`Receipt::dir_name`]), so a receipt cannot
    /// name a file outside its part.
    ///
    /// # Errors
    /// [`StorageError::InvalidReceipt`] naming the partition and the reason;
    /// [`StorageError::InvalidJob`].
    pub fn check(&self) -> Result<()> {
        let bad = |reason: String| StorageError::InvalidReceipt { partition: self.partition, reason };
        if self.receipt_version != RECEIPT_VERSION {
            return Err(bad(format!(
                "receipt_version {} (this build reads {RECEIPT_VERSION})",
                self.receipt_version
            )));
        }
        check_job(&self.job)?;
        let dir = self.dir_name();
        if let Some(reason) = shards_shape_fault(self.kind, &self.shards) {
            return Err(bad(reason));
        }
        for s in &self.shards {
            let Some(path) = &s.path else {
                return Err(bad(format!("shard {} has no path", s.id)));
            };
            check_shard_path(path).map_err(|reason| bad(format!("shard {}: {reason}", s.id)))?;
            let inside = path
                .strip_prefix(dir.as_str())
                .and_then(|rest| rest.strip_prefix('/'))
                .is_some_and(|leaf| !leaf.is_empty() && !leaf.contains('/'));
            if !inside {
                return Err(bad(format!(
                    "shard {} path {path:?} is not a file of the part directory {dir:?}",
                    s.id
                )));
            }
        }
        Ok(())
    }
}
