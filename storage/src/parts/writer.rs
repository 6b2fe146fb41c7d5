//! [`PartWriter`]: the writer of one part of a job.

use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};

use super::receipt::{part_dir, part_dir_name, Receipt, RECEIPT_VERSION};
use crate::core::{Writer, WriterKind};
use crate::manifest::{Manifest, MANIFEST_FILE};
use crate::{Result, StorageError};

/// Writes one part of a job: the normal [`Writer`] of kind `K` on the part's directory
/// (`root/_parts/<job>/<partition:06>-<attempt>/`, [`super::part_dir`]), reached through
/// `Deref`/`DerefMut` (`append`, `commit`, `set_metadata`), and [`PartWriter::finish`], which
/// commits the part and returns its [`Receipt`]. The part is invisible in the storage until
/// [`super::commit_parts`] publishes it.
///
/// ```
/// use guideloom_formats::TokenFormat;
/// use guideloom_storage::kind::Stream;
/// use guideloom_storage::parts::{commit_parts, CommitMode, PartWriter};
/// use guideloom_storage::{StreamReader, Window};
/// let root = tempfile::tempdir()?;
/// let mut receipts = Vec::new();
/// for (partition, tokens) in [(1u64, vec![3u32, 4]), (0, vec![1, 2])] {
///     let mut w: PartWriter<Stream<TokenFormat<u16>>> =
///         PartWriter::open(root.path(), "job", partition, 0, TokenFormat::new())?;
///     w.append(0, &tokens)?;
///     receipts.push(w.finish()?);
/// }
/// commit_parts(root.path(), &receipts, CommitMode::ErrorIfExists)?;
/// let r = StreamReader::open(root.path(), TokenFormat::<u16>::new())?;
/// assert_eq!(r.read(Window::new(0, 4))?, vec![1, 2, 3, 4]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct PartWriter<K: WriterKind> {
    writer: Writer<K>,
    root: PathBuf,
    job: String,
    partition: u64,
    attempt: u64,
}

impl<K: WriterKind> std::fmt::Debug for PartWriter<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PartWriter")
            .field("root", &self.root)
            .field("job", &self.job)
            .field("partition", &self.partition)
            .field("attempt", &self.attempt)
            .finish()
    }
}

impl<K: WriterKind> PartWriter<K> {
    /// Creates the part `partition`, attempt `attempt`, of job `job` under the storage
    /// directory `root` (which need not hold a storage yet), for writing with `format`.
    ///
    /// # Errors
    /// [`StorageError::InvalidJob`]; [`StorageError::StorageExists`] when that attempt was
    /// already written (a committed part manifest is there); the errors of [`Writer::open`].
    pub fn open(
        root: impl AsRef<Path>,
        job: &str,
        partition: u64,
        attempt: u64,
        format: K::Format,
    ) -> Result<Self> {
        let root = root.as_ref().to_path_buf();
        let dir = part_dir(&root, job, partition, attempt)?;
        // The directories between the root and the part are plain directories, never links.
        let mut checked = std::collections::HashSet::new();
        crate::fsutil::check_no_links(
            &root,
            &format!("{}/{MANIFEST_FILE}", part_dir_name(job, partition, attempt)),
            &mut checked,
        )?;
        let writer = Writer::open(&dir, format)?;
        if writer.core.has_committed() {
            return Err(StorageError::StorageExists { path: dir.join(MANIFEST_FILE) });
        }
        Ok(PartWriter { writer, root, job: job.to_string(), partition, attempt })
    }

    /// Creates the part `partition`, attempt `attempt`, of job `job` of the storage at the
    /// object-store URL `root` (`s3://BUCKET/PREFIX`, `gs://`, `az://`; see
    /// [`crate::RemoteDir`]), written straight to the store under
    /// `ROOT/_parts/<job>/<partition:06>-<attempt>/`: a task on any machine writes its part
    /// with no local copy, and [`super::commit_parts_in`] on a [`crate::RemoteDir`] of `root`
    /// publishes the parts. A shard file is held in memory and put whole when the part is
    /// committed ([`PartWriter::finish`]); the part's manifest is put last, on the condition
    /// that there is none yet (an object store has no writer lock: of two writers of one
    /// attempt, one commits and the other gets [`StorageError::ConcurrentCommit`]).
    ///
    /// # Errors
    /// [`StorageError::InvalidJob`]; [`StorageError::StorageExists`] when that attempt was
    /// already committed; [`StorageError::Remote`] when the URL cannot be opened or a request
    /// fails after its retries; the errors of [`Writer::open_in`].
    #[cfg(feature = "remote")]
    pub fn open_remote(
        root: &str,
        job: &str,
        partition: u64,
        attempt: u64,
        format: K::Format,
        options: crate::RemoteOptions,
    ) -> Result<Self> {
        super::receipt::check_job(job)?;
        let root = root.trim_end_matches('/');
        let url = format!("{root}/{}", part_dir_name(job, partition, attempt));
        let dir = std::sync::Arc::new(crate::RemoteDir::open(&url, options)?);
        let writer = Writer::open_in(dir, format)?;
        if writer.core.has_committed() {
            return Err(StorageError::StorageExists { path: writer.dir().join(MANIFEST_FILE) });
        }
        Ok(PartWriter { writer, root: PathBuf::from(root), job: job.to_string(), partition, attempt })
    }

    /// The part's directory.
    pub fn part_dir(&self) -> &Path {
        self.writer.dir()
    }

    /// The storage root the part belongs to (its URL, as a path, for a remote part).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Commits the part and returns its receipt: the part's shard entries, each with its
    /// path relative to the root.
    ///
    /// # Errors
    /// As [`Writer::commit`].
    pub fn finish(mut self) -> Result<Receipt> {
        self.writer.commit()?;
        Ok(receipt_from(self.writer.core.manifest(), self.job, self.partition, self.attempt))
    }
}

/// The receipt of a part whose manifest is `m`.
fn receipt_from(m: &Manifest, job: String, partition: u64, attempt: u64) -> Receipt {
    let dir = part_dir_name(&job, partition, attempt);
    let shards = m
        .shards()
        .iter()
        .map(|s| {
            let mut s = s.clone();
            s.path = Some(format!("{dir}/{}", crate::manifest::shard_file_stem(s.id)));
            s
        })
        .collect();
    Receipt {
        receipt_version: RECEIPT_VERSION,
        job,
        partition,
        attempt,
        kind: m.kind(),
        dtype: m.dtype_descr().clone(),
        format: m.format().clone(),
        shards,
    }
}

/// The receipt of a part already committed in its directory by any writer of this crate
/// (`root/_parts/<job>/<partition:06>-<attempt>/`, for example by `guideloom ingest --part`):
/// what [`PartWriter::finish`] returns for it.
///
/// # Errors
/// [`StorageError::InvalidJob`]; [`StorageError::InvalidReceipt`] when the part's shards name
/// their files by paths of their own (a part is flat); manifest errors of the part
/// ([`StorageError::NotAStorage`] when it was never committed).
pub fn receipt_of(root: impl AsRef<Path>, job: &str, partition: u64, attempt: u64) -> Result<Receipt> {
    let dir = part_dir(root.as_ref(), job, partition, attempt)?;
    let m = Manifest::load(&dir)?;
    if m.shards().iter().any(|s| s.path.is_some()) {
        return Err(StorageError::InvalidReceipt {
            partition,
            reason: format!("the part {} has shards with paths of their own", dir.display()),
        });
    }
    Ok(receipt_from(&m, job.to_string(), partition, attempt))
}

impl<K: WriterKind> Deref for PartWriter<K> {
    type Target = Writer<K>;

    fn deref(&self) -> &Writer<K> {
        &self.writer
    }
}

impl<K: WriterKind> DerefMut for PartWriter<K> {
    fn deref_mut(&mut self) -> &mut Writer<K> {
        &mut self.writer
    }
}
