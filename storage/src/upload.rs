//! Copying a local storage into an object store ([`RemoteDir::upload`]): shards first, the
//! manifest last and only over the one that was there. The one place the remote directory
//! meets the manifest's format, kept out of the directory's own modules.
//!
//! Local files are read as the readers read them: opened through the storage's one safe open
//! ([`crate::fsutil::open_regular`]: a link, FIFO or device is refused, not followed or read
//! without end), at most their committed length, every file checked against the crc32c its
//! manifest commits before the first byte is put (a damaged shard is an error, and nothing is
//! uploaded), and streamed in parts ([`crate::remote::UPLOAD_PART`] bytes, a multipart
//! upload) instead of read whole into memory.

use std::fs::File;
use std::path::{Path, PathBuf};

use crate::dir::{LocalDir, StorageDir, WriteDir};
use crate::fsutil::{open_existing, read_exact_at, resolve, Access};
use crate::manifest::{Manifest, ShardEntry, MANIFEST_FILE};
use crate::remote::UPLOAD_PART;
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

/// One shard file to upload: its name, where it is, its committed length and crc32c, and
/// the shard it belongs to.
struct Staged {
    name: String,
    path: PathBuf,
    file: File,
    bytes: u64,
    checksum: u32,
    shard: u64,
}

impl Staged {
    /// The crc32c of the file's first `len` bytes, read in parts (at most one part in memory).
    fn crc_of(&self, len: u64) -> Result<u32> {
        let mut crc = 0u32;
        let mut buf = vec![0u8; usize::try_from(len.min(UPLOAD_PART)).unwrap_or(0)];
        let mut off = 0u64;
        while off < len {
            let n = (len - off).min(UPLOAD_PART) as usize;
            read_exact_at(&self.file, &mut buf[..n], off, &self.path)?;
            crc = crc32c::crc32c_append(crc, &buf[..n]);
            off += n as u64;
        }
        Ok(crc)
    }

    /// The error for bytes whose crc32c is `found`.
    fn mismatch(&self, found: u32) -> StorageError {
        StorageError::ChecksumMismatch {
            shard: self.shard,
            path: self.path.clone(),
            expected: self.checksum,
            found,
        }
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
    /// upload, another storage may not. Every local file is opened as a reader opens it (a
    /// link, FIFO or device is refused) and checked against its committed crc32c before
    /// anything is put, then streamed in parts of 8 MiB (a multipart upload for a larger
    /// file), checked again as it goes. Returns the bytes put.
    ///
    /// # Errors
    /// Errors of [`crate::Manifest::load`] and [`StorageError::Io`] for the local storage;
    /// [`StorageError::UnsafeFile`] for a shard file that is a link, FIFO, device or
    /// directory; [`StorageError::ShortRead`] for one shorter than committed;
    /// [`StorageError::ChecksumMismatch`] for one whose committed bytes differ from its
    /// manifest's checksum (nothing is put then);
    /// [`StorageError::Remote`] (op `put`) when the manifest here commits a shard the local
    /// storage does not extend, or when an upload fails after its retries;
    /// [`StorageError::ConcurrentCommit`] when another writer replaced the manifest here
    /// during the upload (the shard objects are put, the manifest here stays theirs).
    pub fn upload(&self, local: &Path) -> Result<u64> {
        let local_dir = LocalDir::new(local);
        let Some(text) = Manifest::read_text(&local_dir)? else {
            return Err(StorageError::NotAStorage { dir: local.to_path_buf() });
        };
        let m = Manifest::from_text(&text, &local.join(MANIFEST_FILE))?;
        m.check_links(&local_dir)?;
        let old_text = Manifest::read_text(self)?;
        let old = old_text
            .as_deref()
            .map(|t| Manifest::from_text(t, &self.path().join(MANIFEST_FILE)))
            .transpose()?;
        let refuse = |name: &str, why: String| StorageError::Remote {
            op: "put",
            url: format!("{}/{name}", self.url()),
            range: None,
            attempts: 0,
            cause: why,
        };
        // Every file opened and checked before the first byte is put.
        let mut staged = Vec::new();
        for shard in m.shards() {
            for (i, ext) in m.kind().files().iter().enumerate() {
                let name = shard.file_name(ext);
                let (bytes, checksum) = file_entry(shard, i, ext);
                let path = resolve(local, &name)?;
                let file = open_existing(&path, Access::Read { direct: false })?;
                let len = file.metadata().map_err(|e| StorageError::io(&path, e))?.len();
                if len < bytes {
                    return Err(StorageError::ShortRead { path, offset: 0, expected: bytes, got: len });
                }
                let s = Staged { name, path, file, bytes, checksum, shard: shard.id };
                let found = s.crc_of(bytes)?;
                if found != checksum {
                    return Err(s.mismatch(found));
                }
                if let Some(prev) = old.as_ref().and_then(|o| o.shard(shard.id)) {
                    let (pb, pc) = file_entry(prev, i, ext);
                    if pb > bytes || s.crc_of(pb)? != pc {
                        return Err(refuse(
                            &s.name,
                            format!("the manifest here commits {pb} bytes of it that the local storage does not start with; upload to another prefix"),
                        ));
                    }
                }
                staged.push(s);
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
        let mut total = 0u64;
        for s in &staged {
            // Checked again as it is streamed: a file changed since its check is not put.
            let crc = std::cell::Cell::new(0u32);
            let mut read = |off: u64, buf: &mut [u8]| {
                read_exact_at(&s.file, buf, off, &s.path)?;
                // A retried upload starts again from offset 0.
                let before = if off == 0 { 0 } else { crc.get() };
                crc.set(crc32c::crc32c_append(before, buf));
                Ok(())
            };
            let mut verify = || if crc.get() == s.checksum { Ok(()) } else { Err(s.mismatch(crc.get())) };
            self.put_parts(&s.name, s.bytes, &mut read, &mut verify)?;
            total += s.bytes;
        }
        total += text.len() as u64;
        self.replace_if(MANIFEST_FILE, old_text.as_deref(), &text)?;
        Ok(total)
    }
}
