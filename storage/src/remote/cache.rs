//! The local cache of a remote storage: one file per fetched block, bounded in bytes, least
//! recently used first out, safe for several processes sharing the directory.
//!
//! Layout: `DIR/<xxh3-64 of the storage URL, hex>/` holds `url.txt` (the URL, for people),
//! `<file>.<block>.blk` (the block's bytes followed by their crc32c, little-endian u32) and
//! `<file>.etag` (a whole file read at once, as a manifest is: its entity tag, a newline, its
//! bytes; the manifest's copy is `manifest.json.etag`). Every file is written to a temporary
//! name (`.tmp.<pid>.<n>`) and renamed into place, so a reader (of this or another process)
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

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::SystemTime;

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
    seq: AtomicU64,
}

impl DiskCache {
    /// The cache of the storage at `url` under `options.dir` (created when missing).
    pub(super) fn open(options: &CacheOptions, url: &str) -> Result<Self> {
        let dir = options.dir.join(format!("{:016x}", xxhash_rust::xxh3::xxh3_64(url.as_bytes())));
        std::fs::create_dir_all(&dir).map_err(|e| StorageError::io(&dir, e))?;
        let label = dir.join("url.txt");
        if !label.exists() {
            std::fs::write(&label, format!("{url}\n")).map_err(|e| StorageError::io(&label, e))?;
        }
        Ok(DiskCache { dir, max_bytes: options.max_bytes, used: Mutex::new(None), seq: AtomicU64::new(0) })
    }

    fn lock_used(&self) -> std::sync::MutexGuard<'_, Option<u64>> {
        self.used.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The directory this storage's blocks are in.
    pub(super) fn dir(&self) -> &Path {
        &self.dir
    }

    fn block_path(&self, name: &str, block: u64) -> PathBuf {
        self.dir.join(format!("{name}.{block}.blk"))
    }

    fn whole_path(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.etag"))
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
        if let Ok(m) = std::fs::metadata(&path) {
            if std::fs::remove_file(&path).is_ok() {
                if let Some(used) = self.lock_used().as_mut() {
                    *used = used.saturating_sub(m.len());
                }
            }
        }
    }

    /// Keeps block `block` of file `name`, whose crc32c is `crc`; nothing when it does not fit
    /// the bound at all or cannot be written (the cache is an optimisation: a failed write is
    /// not an error).
    pub(super) fn put(&self, name: &str, block: u64, data: &[u8], crc: u32) {
        let need = data.len() as u64 + 4;
        let path = self.block_path(name, block);
        if need > self.max_bytes || path.exists() {
            return;
        }
        let mut used = self.lock_used();
        if !self.make_room(&mut used, need) {
            return;
        }
        let mut bytes = Vec::with_capacity(data.len() + 4);
        bytes.extend_from_slice(data);
        bytes.extend_from_slice(&crc.to_le_bytes());
        if self.write_atomic(&path, &bytes).is_ok() {
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
        touch(&path);
        Some((etag, bytes[nl + 1..].to_vec()))
    }

    /// Keeps `bytes` as the whole copy of file `name`, whose entity tag is `etag`; nothing when
    /// it takes more than a quarter of the bound or cannot be written.
    pub(super) fn put_whole(&self, name: &str, etag: &str, bytes: &[u8]) {
        if etag.contains('\n') || bytes.len() as u64 > self.max_bytes / 4 {
            return;
        }
        let mut out = Vec::with_capacity(etag.len() + 1 + bytes.len());
        out.extend_from_slice(etag.as_bytes());
        out.push(b'\n');
        out.extend_from_slice(bytes);
        // Counted whole although it replaces an older copy: the bound errs on the safe side.
        let mut used = self.lock_used();
        if self.make_room(&mut used, out.len() as u64)
            && self.write_atomic(&self.whole_path(name), &out).is_ok()
        {
            if let Some(used) = used.as_mut() {
                *used = used.saturating_add(out.len() as u64);
            }
        }
    }

    /// Writes `bytes` to a temporary file beside `path` and renames it over `path`.
    fn write_atomic(&self, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
        let n = self.seq.fetch_add(1, Ordering::Relaxed);
        let tmp = path.with_extension(format!("tmp.{}.{n}", std::process::id()));
        let result = (|| {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(bytes)?;
            drop(f);
            std::fs::rename(&tmp, path)
        })();
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        result
    }
}

/// The cached file at `path` opened for reading when it is a regular file, as every storage
/// file is opened (no final link followed, no wait on a FIFO); `None` when it is missing or
/// cannot be opened. A link, FIFO, socket or directory planted under the cache's name is
/// removed (the name, not what a link points to), so the next `put` writes a real copy: a
/// cache is never a way to block a read or to serve bytes from elsewhere.
fn open_regular(path: &Path) -> Option<std::fs::File> {
    match crate::fsutil::open_regular(path, crate::fsutil::Access::Read { direct: false }) {
        Ok(f) => f,
        Err(StorageError::UnsafeFile { .. }) => {
            let _ = std::fs::remove_file(path).or_else(|_| std::fs::remove_dir(path));
            None
        }
        Err(_) => None,
    }
}

/// Marks the cached file at `path` used now (its modification time).
fn touch(path: &Path) {
    if let Ok(f) = std::fs::File::options().write(true).open(path) {
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
