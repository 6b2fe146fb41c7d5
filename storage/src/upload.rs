//! Copying a local storage into an object store ([`RemoteDir::upload`]): shards first, the
//! manifest last and only over the one that was there. The one place the remote directory
//! meets the manifest's format, kept out of the directory's own modules.

use std::path::Path;

use crate::dir::{StorageDir, WriteDir};
use crate::fsutil::resolve;
use crate::manifest::{shard_file_name, Manifest, ShardEntry, MANIFEST_FILE};
use crate::{RemoteDir, Result, StorageError};

/// The committed length and checksum of file `i` (extension `ext`) of `shard` (`(0, 0)` for a
/// file the shard does not record).
fn file_entry(shard: &ShardEntry, i: usize, ext: &str) -> (u64, u32) {
    if i == 0 {
        (shard.bytes, shard.checksum)
    } else {
        shard.files.get(ext).map_or((0, 0), |f| (f.bytes, f.checksum))
    }
}

impl RemoteDir {
    /// Copies the local storage in `local` here, manifest last: every file of every shard its
    /// manifest commits (cut at the committed length), then `manifest.json`, put only if the
    /// manifest here is still the one read at the start ([`WriteDir::replace_if`]). A reader
    /// therefore never sees a manifest naming bytes that are not there, and a run killed
    /// half-way leaves the manifest that was here before in force. When a manifest is here
    /// already, every shard it commits must be a prefix of the new one (same bytes up to its
    /// committed length, checked by its crc32c): an appended storage may replace its earlier
    /// upload, another storage may not. Returns the bytes put.
    ///
    /// # Errors
    /// Errors of [`crate::Manifest::load`] and [`StorageError::Io`] for the local storage;
    /// [`StorageError::Remote`] (op `put`) when the manifest here commits a shard the local
    /// storage does not extend, or when an upload fails after its retries;
    /// [`StorageError::ConcurrentCommit`] when another writer replaced the manifest here
    /// during the upload (the shard objects are put, the manifest here stays theirs).
    pub fn upload(&self, local: &Path) -> Result<u64> {
        let m = Manifest::load(local)?;
        let old_text = Manifest::read_text(self)?;
        let old = old_text
            .as_deref()
            .map(|t| Manifest::from_text(t, &self.path().join(MANIFEST_FILE)))
            .transpose()?;
        let read_committed = |name: &str, committed: u64| -> Result<Vec<u8>> {
            let path = resolve(local, name)?;
            let mut bytes = std::fs::read(&path).map_err(|e| StorageError::io(&path, e))?;
            if (bytes.len() as u64) < committed {
                return Err(StorageError::ShortRead {
                    path,
                    offset: 0,
                    expected: committed,
                    got: bytes.len() as u64,
                });
            }
            bytes.truncate(committed as usize);
            Ok(bytes)
        };
        let refuse = |name: &str, why: String| StorageError::Remote {
            op: "put",
            url: format!("{}/{name}", self.url()),
            range: None,
            attempts: 0,
            cause: why,
        };
        let mut total = 0u64;
        for shard in m.shards() {
            for (i, ext) in m.kind().files().iter().enumerate() {
                let name = shard_file_name(shard.id, ext);
                let (bytes, _) = file_entry(shard, i, ext);
                let data = read_committed(&name, bytes)?;
                if let Some(prev) = old.as_ref().and_then(|o| o.shard(shard.id)) {
                    let (pb, pc) = file_entry(prev, i, ext);
                    if pb > bytes || crc32c::crc32c(&data[..pb as usize]) != pc {
                        return Err(refuse(
                            &name,
                            format!("the manifest here commits {pb} bytes of it that the local storage does not start with; upload to another prefix"),
                        ));
                    }
                }
                total += data.len() as u64;
                self.put(&name, data)?;
            }
        }
        if let Some(o) = &old {
            if let Some(s) = o.shards().iter().find(|s| m.shard(s.id).is_none()) {
                return Err(refuse(
                    MANIFEST_FILE,
                    format!("the manifest here commits shard {} that the local storage lacks", s.id),
                ));
            }
        }
        let manifest = std::fs::read(local.join(MANIFEST_FILE))
            .map_err(|e| StorageError::io(local.join(MANIFEST_FILE), e))?;
        total += manifest.len() as u64;
        self.replace_if(MANIFEST_FILE, old_text.as_deref(), &manifest)?;
        Ok(total)
    }
}
