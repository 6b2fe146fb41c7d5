//! The read seam of [`RemoteDir`]: [`StorageDir`] over blocks fetched from the store (or the
//! local cache) and waited for.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Range;
use std::path::Path;
use std::sync::{Arc, PoisonError};

use bytes::Bytes;

use super::blocks::{Run, Slot};
use super::fetch::Whole;
use super::retry::classify;
use super::stats::add;
use super::store::RemoteDir;
use crate::dir::{DirEntry, EntryKind, ExpectedFile, LengthFault, StorageDir};
use crate::fsutil::name_in;
use crate::io::{FileSet, ReadRequest, ShardFile};
use crate::{Result, StorageError};

impl RemoteDir {
    /// The length of `name`, or a `NotFound` [`StorageError::Io`] naming its URL.
    fn size_of(&self, name: &str) -> Result<u64> {
        self.file_len(name)?.ok_or_else(|| self.not_found(name))
    }

    /// Starts fetches for the missing blocks `ids` of `name` (readahead when `ahead`).
    fn request(&self, name: &Arc<str>, size: u64, ids: &BTreeSet<u64>, ahead: bool) {
        let mut b = self.inner.lock_blocks();
        let how = if ahead { Run::Ahead } else { Run::Demand };
        self.inner.start_runs(&mut b, self.rt().handle(), name, size, ids.iter().copied(), how);
    }

    /// The blocks `ids` of `name`, fetching the missing ones and waiting for those in flight.
    fn blocks(&self, name: &str, size: u64, ids: &BTreeSet<u64>) -> Result<HashMap<u64, Bytes>> {
        let name: Arc<str> = Arc::from(name);
        let mut got: HashMap<u64, Bytes> = HashMap::with_capacity(ids.len());
        self.request(&name, size, ids, false);
        let inner = &self.inner;
        let mut b = inner.lock_blocks();
        loop {
            let mut absent = BTreeSet::new();
            let mut pending = false;
            for &id in ids {
                if got.contains_key(&id) {
                    continue;
                }
                let key = (name.clone(), id);
                match b.map.get(&key) {
                    Some(Slot::Ready { bytes, .. }) => {
                        got.insert(id, bytes.clone());
                        b.touch(&key);
                    }
                    Some(Slot::Pending) => pending = true,
                    Some(Slot::Failed(f)) => return Err(f.error()),
                    None => {
                        absent.insert(id);
                    }
                }
            }
            if !absent.is_empty() {
                // Evicted before this reader took it, or a failed fetch was cleared: ask again.
                drop(b);
                self.request(&name, size, &absent, false);
                b = inner.lock_blocks();
                continue;
            }
            if !pending {
                drop(b);
                inner.check_error(&name, self.label.join(&*name))?;
                return Ok(got);
            }
            b = inner.arrived.wait(b).unwrap_or_else(PoisonError::into_inner);
        }
    }
}

impl StorageDir for RemoteDir {
    /// The URL, as a path (`s3://bucket/prefix`): messages name files as `URL/name`.
    fn path(&self) -> &Path {
        &self.label
    }

    /// One `HEAD` per file, kept for the directory's life (committed bytes never change).
    /// When a reader said what to expect ([`StorageDir::expect_files`]), the lengths of
    /// those files are being asked already: this waits for the file's, and asks again itself
    /// when that found nothing or failed (so a missing object or a failed request is reported
    /// here, as without the early `HEAD`).
    fn file_len(&self, name: &str) -> Result<Option<u64>> {
        self.check_name(name)?;
        let inner = &self.inner;
        if let Some(n) = inner.sizes.wait(name) {
            return Ok(Some(n));
        }
        let size = self.rt().block_on(inner.head(name)).map_err(|f| f.error())?;
        if let Some(n) = size {
            inner.sizes.insert(name, n);
        }
        Ok(size)
    }

    /// The lengths of all of `files` asked at once (concurrent `HEAD`s, or one paged `LIST`
    /// for more than 64 files: a commit of 10,000 parts checks 10,000 files), then each
    /// compared with its committed length in order.
    fn check_lengths(&self, files: &[ShardFile]) -> Result<Option<LengthFault>> {
        let names = files.iter().map(|f| name_in(&self.label, &f.path)).collect::<Result<Vec<_>>>()?;
        for n in &names {
            self.check_name(n)?;
        }
        self.inner.ask_sizes(self.rt().handle(), names.iter().copied());
        for (index, (f, name)) in files.iter().zip(&names).enumerate() {
            match self.file_len(name)? {
                Some(len) if len >= f.committed => {}
                found => return Ok(Some(LengthFault { index, found })),
            }
        }
        Ok(None)
    }

    /// Takes the files' checksums for the checks of the bytes fetched, and starts asking their
    /// lengths in the background (one `HEAD` each, at most `max_in_flight` at once; one
    /// `LIST` of the prefix for more than 64 files).
    fn expect_files(&self, files: &[ExpectedFile]) {
        self.inner.expect(self.rt().handle(), files);
    }

    /// One `LIST` with a delimiter (paged by the store): the objects directly under the
    /// prefix as files (their sizes kept, as a `HEAD` would), the next level of prefixes as
    /// directories.
    fn list(&self) -> Result<Vec<DirEntry>> {
        let inner = &self.inner;
        let listed = self.rt().block_on(inner.retry("list", "", None, || async move {
            inner.store.list_with_delimiter(Some(&inner.prefix)).await.map_err(|e| classify(&e))
        }));
        let listed = listed.map_err(|f| f.error())?;
        let mut out = Vec::new();
        for o in &listed.objects {
            if let Some(name) = o.location.filename() {
                inner.sizes.insert(name, o.size);
                out.push(DirEntry { name: name.to_string(), kind: EntryKind::File });
            }
        }
        for p in &listed.common_prefixes {
            if let Some(name) = p.filename() {
                out.push(DirEntry { name: name.to_string(), kind: EntryKind::Dir });
            }
        }
        Ok(out)
    }

    fn read_at(&self, name: &str, offset: u64, out: &mut [u8]) -> Result<()> {
        let size = self.size_of(name)?;
        let len = out.len() as u64;
        if offset.checked_add(len).is_none_or(|end| end > size) {
            return Err(StorageError::ShortRead {
                path: self.label.join(name),
                offset,
                expected: len,
                got: size.saturating_sub(offset).min(len),
            });
        }
        if len == 0 {
            return Ok(());
        }
        let bs = self.inner.bs;
        let ids = bs.ids(size, std::iter::once(offset..offset + len));
        let blocks = self.blocks(name, size, &ids)?;
        bs.copy_out(&blocks, offset, out);
        add(&self.inner.stats.bytes_delivered, len);
        Ok(())
    }

    /// One `GET` of the whole object. With a local cache, a whole file of at most a quarter
    /// of its bound is kept with its entity tag, and asked again with it (`If-None-Match`):
    /// an unchanged file (a manifest read at every open) costs no body bytes.
    fn read_file(&self, name: &str, max_len: u64) -> Result<Option<Vec<u8>>> {
        self.check_name(name)?;
        let inner = &self.inner;
        let cached = inner.cache.as_ref().and_then(|c| c.whole(name));
        let etag = cached.as_ref().map(|(etag, _)| etag.clone());
        let got = self.rt().block_on(inner.get_whole(name, etag, max_len)).map_err(|f| f.error())?;
        let mut bytes = match got {
            None => return Ok(None),
            Some(Whole::Body { bytes, version, whole }) => {
                if let (Some(c), Some(etag), true) = (&inner.cache, &version.e_tag, whole) {
                    c.put_whole(name, etag, &bytes);
                }
                bytes.to_vec()
            }
            // Not modified: only asked with a cached copy.
            Some(Whole::NotModified) => cached.map(|(_, b)| b).unwrap_or_default(),
        };
        let keep = usize::try_from(max_len.saturating_add(1)).unwrap_or(usize::MAX).min(bytes.len());
        bytes.truncate(keep);
        add(&inner.stats.bytes_delivered, bytes.len() as u64);
        Ok(Some(bytes))
    }

    /// Asks for the blocks of every request at once (coalesced per file), then copies.
    fn read_requests(&self, files: &FileSet, requests: &[ReadRequest], out: &mut [u8]) -> Result<()> {
        let total = requests.iter().fold(0u64, |a, r| a.saturating_add(r.len));
        if total != out.len() as u64 {
            return Err(StorageError::BufferLength { expected: total, found: out.len() as u64 });
        }
        let mut per_file: BTreeMap<usize, Vec<Range<u64>>> = BTreeMap::new();
        for r in requests.iter().filter(|r| r.len > 0) {
            let end = r.offset.checked_add(r.len).ok_or(StorageError::BatchTooLarge { bytes: r.len })?;
            per_file.entry(r.file).or_default().push(r.offset..end);
        }
        let bs = self.inner.bs;
        let mut blocks: HashMap<usize, HashMap<u64, Bytes>> = HashMap::new();
        let mut wanted = Vec::new();
        for (&f, ranges) in &per_file {
            let name = name_in(&self.label, &files.get(f)?.path)?;
            let size = self.size_of(name)?;
            if let Some(r) = ranges.iter().find(|r| r.end > size) {
                return Err(StorageError::ShortRead {
                    path: self.label.join(name),
                    offset: r.start,
                    expected: r.end - r.start,
                    got: size.saturating_sub(r.start).min(r.end - r.start),
                });
            }
            let ids = bs.ids(size, ranges.iter().cloned());
            self.request(&Arc::from(name), size, &ids, false);
            wanted.push((f, name, size, ids));
        }
        for (f, name, size, ids) in wanted {
            blocks.insert(f, self.blocks(name, size, &ids)?);
        }
        let mut pos = 0usize;
        for r in requests {
            let n = r.len as usize;
            if n > 0 {
                bs.copy_out(&blocks[&r.file], r.offset, &mut out[pos..pos + n]);
            }
            pos += n;
        }
        add(&self.inner.stats.bytes_delivered, total);
        Ok(())
    }

    /// Starts background fetches of the blocks `requests` lie in that are neither in memory
    /// nor in flight, within [`super::RemoteOptions::max_readahead_bytes`].
    fn prefetch(&self, files: &FileSet, requests: &[ReadRequest]) {
        let mut per_file: BTreeMap<usize, Vec<Range<u64>>> = BTreeMap::new();
        for r in requests {
            per_file.entry(r.file).or_default().push(r.offset..r.offset.saturating_add(r.len));
        }
        for (f, ranges) in per_file {
            let Ok(file) = files.get(f) else { continue };
            let Ok(name) = name_in(&self.label, &file.path) else { continue };
            let Ok(size) = self.size_of(name) else { continue };
            let ids = self.inner.bs.ids(size, ranges.into_iter());
            self.request(&Arc::from(name), size, &ids, true);
        }
    }
}
