//! The local cache of a remote storage: one file per fetched block, bounded in bytes, least
//! recently used first out, safe for several processes sharing the directory.
//!
//! Layout: `DIR/<xxh3-64 of the storage URL, hex>/` holds `url.txt` (the URL, for people),
//! `<file>.<block>.blk` (the block's bytes followed by their crc32c, little-endian u32) and
//! `<file>.etag` (a whole file read at once, as a manifest is: its entity tag, a newline, its
//! bytes; the manifest's copy is `manifest.json.etag`). Every file is written to a new
//! temporary file of an unpredictable name (`.tmp.<128 random bits>`, created exclusively,
//! no link followed: [`crate::fsutil::replace_file`]) and renamed into place, so a reader (of
//! this or another process)
//! sees a whole file or none; a block whose length or checksum does not match is removed and
//! fetched again. A hit sets the file's modification time, which is the recency eviction
//! sorts by. The directory does not know which files are manifests: it keeps any whole file
//! it was asked to read that takes at most a quarter of the bound, and asks the store again
//! with its entity tag each time (`If-None-Match`), so an unchanged one costs no body bytes.
//!
//! The bound: before a file is written, the bytes of the directory's files (temporary files
//! included) plus the new one must fit `max_bytes`; otherwise the least recently used block
//! and whole-file copies are removed until they do. Another process's writes are seen at the next scan, so
//! with several writers the bound holds up to the blocks written between two scans. The first
//! scan happens at the first write, not at open: a run served wholly from the cache never lists
//! the directory.
//!
//! A file whose every block is cached is checked against the checksum its reader expects
//! ([`crate::StorageDir::expect_files`]) before any of its bytes is served
//! ([`DiskCache::trailer`]: the per-block checksums are combined, no block is read), so a
//! block altered together with its own checksum is still caught.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::SystemTime;

use crate::fsutil;
use crate::remote::CacheOptions;
use crate::{Result, StorageError};

/// The cache directory of one storage.
#[derive(Debug)]
pub(super) struct DiskCache {
    dir: PathBuf,
    max_bytes: u64,
    /// Bytes of the directory's files as last scanned plus those written since; `None` until
    /// the first write scans the directory.
    used: Mutex<Option<u64>>,
}

/// The file naming the storage a cache directory is for (for people).
const LABEL: &str = "url.txt";

impl DiskCache {
    /// The cache of the storage at `url` under `options.dir` (created when missing).
    pub(super) fn open(options: &CacheOptions, url: &str) -> Result<Self> {
        let dir = options.dir.join(format!("{:016x}", xxhash_rust::xxh3::xxh3_64(url.as_bytes())));
        fsutil::private_dir(&options.dir, false)?;
        fsutil::private_dir(&dir, true)?;
        if !matches!(fsutil::regular_len(&dir.join(LABEL)), Ok(Some(_))) {
            fsutil::replace_file(&dir, LABEL, format!("{url}\n").as_bytes())?;
        }
        Ok(DiskCache { dir, max_bytes: options.max_bytes, used: Mutex::new(None) })
    }

    fn lock_used(&self) -> std::sync::MutexGuard<'_, Option<u64>> {
        self.used.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The directory this storage's blocks are in.
    pub(super) fn dir(&self) -> &Path {
        &self.dir
    }

    fn block_name(name: &str, block: u64) -> String {
        format!("{name}.{block}.blk")
    }

    fn whole_name(name: &str) -> String {
        format!("{name}.etag")
    }

    fn block_path(&self, name: &str, block: u64) -> PathBuf {
        self.dir.join(Self::block_name(name, block))
    }

    fn whole_path(&self, name: &str) -> PathBuf {
        self.dir.join(Self::whole_name(name))
    }

    /// The bytes of the directory's files, and its block and whole-file copies as (mtime,
    /// bytes, path).
    fn scan(&self) -> (u64, Vec<(SystemTime, u64, PathBuf)>) {
        let mut total = 0u64;
        let mut blocks = Vec::new();
        let Ok(rd) = std::fs::read_dir(&self.dir) else { return (0, blocks) };
        for e in rd.flatten() {
            let Ok(m) = e.metadata() else { continue };
            if !m.is_file() {
                continue;
            }
            total = total.saturating_add(m.len());
            if e.file_name().to_str().is_some_and(|n| n.ends_with(".blk") || n.ends_with(".etag")) {
                blocks.push((m.modified().unwrap_or(SystemTime::UNIX_EPOCH), m.len(), e.path()));
            }
        }
        (total, blocks)
    }

    /// Block `block` of file `name` when cached whole (`len` bytes) and intact, with its
    /// crc32c.
    pub(super) fn get(&self, name: &str, block: u64, len: u64) -> Option<(Vec<u8>, u32)> {
        let path = self.block_path(name, block);
        let mut bytes = read_regular(&path)?;
        let mut stored = 0;
        let ok = bytes.len() as u64 == len + 4 && {
            let split = bytes.len() - 4;
            stored = u32::from_le_bytes(bytes[split..].try_into().ok()?);
            crc32c::crc32c(&bytes[..split]) == stored
        };
        if !ok {
            // Torn by hand, damaged, or from an object that has grown: fetch it again.
            let _ = std::fs::remove_file(&path);
            return None;
        }
        bytes.truncate(bytes.len() - 4);
        touch(&path);
        Some((bytes, stored))
    }

    /// The crc32c stored with block `block` of file `name` (its last 4 bytes), when the block
    /// is cached with the length of a `len`-byte block; the block's bytes are not read (a
    /// later [`DiskCache::get`] checks them against it).
    pub(super) fn trailer(&self, name: &str, block: u64, len: u64) -> Option<u32> {
        use std::io::{Read as _, Seek as _, SeekFrom};
        let mut f = open_regular(&self.block_path(name, block))?;
        if f.metadata().ok()?.len() != len + 4 {
            return None;
        }
        f.seek(SeekFrom::Start(len)).ok()?;
        let mut crc = [0u8; 4];
        f.read_exact(&mut crc).ok()?;
        Some(u32::from_le_bytes(crc))
    }

    /// Removes block `block` of file `name` (nothing when it is not cached).
    pub(super) fn remove(&self, name: &str, block: u64) {
        let path = self.block_path(name, block);
        if let Ok(m) = std::fs::symlink_metadata(&path) {
            if std::fs::remove_file(&path).is_ok() {
                if let Some(used) = self.lock_used().as_mut() {
                    *used = used.saturating_sub(m.len());
                }
            }
        }
    }

    /// Keeps block `block` of file `name`, whose crc32c is `crc` (replacing any copy there: the
    /// store's bytes were fetched because that copy was not served); nothing when it does not fit
    /// the bound at all or cannot be written (the cache is an optimisation: a failed write is
    /// not an error).
    pub(super) fn put(&self, name: &str, block: u64, data: &[u8], crc: u32) {
        let need = data.len() as u64 + 4;
        if need > self.max_bytes {
            return;
        }
        let mut used = self.lock_used();
        if !self.make_room(&mut used, need) {
            return;
        }
        let mut bytes = Vec::with_capacity(data.len() + 4);
        bytes.extend_from_slice(data);
        bytes.extend_from_slice(&crc.to_le_bytes());
        if self.write_atomic(&Self::block_name(name, block), &bytes).is_ok() {
            if let Some(used) = used.as_mut() {
                *used = used.saturating_add(need);
            }
        }
    }

    /// Removes least recently used copies until `need` more bytes fit the bound; `false` when
    /// they cannot. `used` is the caller's locked count (scanned when still unknown),
    /// refreshed by the scan.
    fn make_room(&self, used: &mut Option<u64>, need: u64) -> bool {
        let known = *used.get_or_insert_with(|| self.scan().0);
        if known.saturating_add(need) <= self.max_bytes {
            return true;
        }
        let (mut total, mut blocks) = self.scan();
        blocks.sort();
        for (_, len, p) in blocks {
            if total.saturating_add(need) <= self.max_bytes {
                break;
            }
            if std::fs::remove_file(&p).is_ok() {
                total = total.saturating_sub(len);
            }
        }
        *used = Some(total);
        total.saturating_add(need) <= self.max_bytes
    }

    /// The whole copy of file `name` and its entity tag, when cached (the copy is marked
    /// used).
    pub(super) fn whole(&self, name: &str) -> Option<(String, Vec<u8>)> {
        let path = self.whole_path(name);
        let bytes = read_regular(&path)?;
        let nl = bytes.iter().position(|&b| b == b'\n')?;
        let etag = String::from_utf8(bytes[..nl].to_vec()).ok()?;
        let body = &bytes[nl + 1..];
        if !etag_is_md5_of(&etag, body) {
            // Edited, or not the copy its tag names: asked from the store again.
            let _ = std::fs::remove_file(&path);
            return None;
        }
        touch(&path);
        Some((etag, body.to_vec()))
    }

    /// Keeps `bytes` as the whole copy of file `name`, whose entity tag is `etag`; nothing when
    /// it takes more than a quarter of the bound or cannot be written.
    pub(super) fn put_whole(&self, name: &str, etag: &str, bytes: &[u8]) {
        if etag.contains('\n') || bytes.len() as u64 > self.max_bytes / 4 || !etag_is_md5_of(etag, bytes) {
            return;
        }
        let mut out = Vec::with_capacity(etag.len() + 1 + bytes.len());
        out.extend_from_slice(etag.as_bytes());
        out.push(b'\n');
        out.extend_from_slice(bytes);
        // Counted whole although it replaces an older copy: the bound errs on the safe side.
        let mut used = self.lock_used();
        if self.make_room(&mut used, out.len() as u64)
            && self.write_atomic(&Self::whole_name(name), &out).is_ok()
        {
            if let Some(used) = used.as_mut() {
                *used = used.saturating_add(out.len() as u64);
            }
        }
    }

    /// Replaces the cache's file `name` with `bytes` through the storage's one safe way
    /// ([`fsutil::replace_file`]: a new temporary file of an unpredictable name, created
    /// without following any link, renamed over the name).
    fn write_atomic(&self, name: &str, bytes: &[u8]) -> Result<()> {
        fsutil::replace_file(&self.dir, name, bytes)
    }
}

/// The cached file at `path` opened for reading when it is a regular file, as every storage
/// file is opened (no final link followed, no wait on a FIFO); `None` when it is missing or
/// cannot be opened. A link, FIFO, socket or directory planted under the cache's name is
/// removed (the name, not what a link points to), so the next `put` writes a real copy: a
/// cache is never a way to block a read or to serve bytes from elsewhere.
fn open_regular(path: &Path) -> Option<std::fs::File> {
    match fsutil::open_regular(path, fsutil::Access::Read { direct: false }) {
        Ok(f) => f,
        Err(StorageError::UnsafeFile { .. }) => {
            let _ = std::fs::remove_file(path).or_else(|_| std::fs::remove_dir(path));
            None
        }
        Err(_) => None,
    }
}

/// Whether the entity tag `etag` is the MD5 digest of `bytes` (32 hex digits, quoted or not,
/// as S3 and S3-compatible stores tag an object put whole): the store's own statement of the
/// content, which an edit of the cache cannot forge. A tag of any other form (a multipart
/// upload's `<md5>-<parts>`, GCS, Azure, most HTTP servers) proves nothing about the bytes, so
/// whole files with such tags are never kept.
pub(super) fn etag_is_md5_of(etag: &str, bytes: &[u8]) -> bool {
    use md5::Digest as _;
    let tag = etag.trim_matches('"');
    if tag.len() != 32 || !tag.bytes().all(|b| b.is_ascii_hexdigit()) {
        return false;
    }
    let digest = md5::Md5::digest(bytes);
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    tag.eq_ignore_ascii_case(&hex)
}

/// Marks the cached file at `path` used now (its modification time).
fn touch(path: &Path) {
    if let Some(f) = open_regular(path) {
        let _ = f.set_modified(SystemTime::now());
    }
}

/// The bytes of the cached file at `path` (see [`open_regular`]).
fn read_regular(path: &Path) -> Option<Vec<u8>> {
    use std::io::Read as _;
    let mut bytes = Vec::new();
    open_regular(path)?.read_to_end(&mut bytes).ok()?;
    Some(bytes)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    use super::*;

    fn cache(root: &Path) -> DiskCache {
        DiskCache::open(&CacheOptions::new(root, 1 << 20), "s3://bucket/data").unwrap()
    }

    /// Issue 32 class 1: the cache's temporary files had predictable names
    /// (`<file>.<block>.tmp.<pid>.<n>`) and were created by following links, so links
    /// planted under those names made a `put` overwrite a file outside the cache; a dangling
    /// link planted as `url.txt` created a file outside it.
    #[test]
    fn issue32_links_planted_in_the_cache_never_reach_a_file_outside_it() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("cache");
        let victim = tmp.path().join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let sub = root.join(format!("{:016x}", xxhash_rust::xxh3::xxh3_64(b"s3://bucket/data")));
        std::fs::create_dir_all(&sub).unwrap();
        // A dangling link for the label: following it would create `created` outside.
        let created = tmp.path().join("created");
        std::os::unix::fs::symlink(&created, sub.join(LABEL)).unwrap();
        // Links under every temporary name the old code would use for the first writes.
        let pid = std::process::id();
        for n in 0..64 {
            for stem in ["shard-00000.stream.0", "shard-00000.stream.1", "manifest.json"] {
                let _ = std::os::unix::fs::symlink(&victim, sub.join(format!("{stem}.tmp.{pid}.{n}")));
            }
        }
        let c = cache(&root);
        assert!(!created.exists(), "the label's dangling link was followed");
        assert_eq!(std::fs::read_to_string(sub.join(LABEL)).unwrap(), "s3://bucket/data\n");
        c.put("shard-00000.stream", 0, b"remote bytes", crc32c::crc32c(b"remote bytes"));
        c.put("shard-00000.stream", 1, b"more bytes", crc32c::crc32c(b"more bytes"));
        c.put_whole("manifest.json", "\"99914b932bd37a50b983c5e7c90ae93b\"", b"{}");
        assert_eq!(c.whole("manifest.json").unwrap().1, b"{}");
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious", "a planted link was followed");
        assert_eq!(c.get("shard-00000.stream", 0, 12).unwrap().0, b"remote bytes");
        // A link planted under a block's own name is replaced, not written through.
        std::fs::remove_file(sub.join("shard-00000.stream.2.blk")).ok();
        std::os::unix::fs::symlink(&victim, sub.join("shard-00000.stream.2.blk")).unwrap();
        c.put("shard-00000.stream", 2, b"third", crc32c::crc32c(b"third"));
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert!(std::fs::symlink_metadata(sub.join("shard-00000.stream.2.blk")).unwrap().is_file());
        // Every file the cache made is private to its owner.
        for e in std::fs::read_dir(&sub).unwrap().flatten() {
            let m = e.metadata().unwrap();
            if m.is_file() {
                assert_eq!(m.mode() & 0o077, 0, "{:?} is readable by others", e.path());
            }
        }
    }

    /// Issue 32 class 1: a cache directory other users can write is made private, saying
    /// why; one of another user is refused.
    #[test]
    fn issue32_a_cache_directory_others_can_write_is_made_private_or_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("shared");
        std::fs::create_dir(&root).unwrap();
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o777)).unwrap();
        let c = cache(&root);
        assert_eq!(std::fs::metadata(&root).unwrap().mode() & 0o777, 0o700);
        assert_eq!(std::fs::metadata(c.dir()).unwrap().mode() & 0o777, 0o700);
        // The storage's sub-directory opened wider later is made private again.
        std::fs::set_permissions(c.dir(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let c = cache(&root);
        assert_eq!(std::fs::metadata(c.dir()).unwrap().mode() & 0o777, 0o700);
        // A sub-directory that is a link is refused.
        let elsewhere = tmp.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        let sub = c.dir().to_path_buf();
        std::fs::remove_dir_all(&sub).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &sub).unwrap();
        let e = DiskCache::open(&CacheOptions::new(&root, 1 << 20), "s3://bucket/data").unwrap_err();
        assert!(matches!(&e, StorageError::UnsafeFile { path, .. } if *path == sub), "{e}");
        assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0, "nothing written through the link");
        std::fs::remove_file(&sub).unwrap();
        // Directories of another user: refused when it is the storage's own, or when others can
        // write it without the sticky bit (only when this test may change owners).
        std::fs::create_dir(&sub).unwrap();
        if std::os::unix::fs::chown(&sub, Some(65534), None).is_ok() {
            let e = DiskCache::open(&CacheOptions::new(&root, 1 << 20), "s3://bucket/data").unwrap_err();
            assert!(
                matches!(&e, StorageError::UnsafeFile { path, reason }
                    if *path == sub && reason.starts_with("the cache directory belongs to user 65534, not to this user")),
                "{e}"
            );
            std::fs::remove_dir(&sub).unwrap();
            std::os::unix::fs::chown(&root, Some(65534), None).unwrap();
            std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o777)).unwrap();
            let e = DiskCache::open(&CacheOptions::new(&root, 1 << 20), "s3://bucket/data").unwrap_err();
            assert!(
                matches!(&e, StorageError::UnsafeFile { path, reason }
                    if *path == root && reason.contains("and others can write it (mode 777, no sticky bit)")),
                "{e}"
            );
            std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o1777)).unwrap();
            cache(&root);
        } else {
            guideloom_testkit::skipped(
                "the other-user cache directory checks",
                "this test may not change owners (chown needs root)",
            );
        }
    }
}
