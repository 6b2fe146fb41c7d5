//! What a remote directory shares with its background fetches ([`Inner`]) and the fetches
//! themselves: one request of each kind (`HEAD`, ranged `GET`, whole `GET`, each with the
//! directory's retries), the lengths asked in the background when a reader says what to
//! expect, and the block runs (coalesced, bounded in flight, readahead deferred while it has
//! no room) that fill the block map from the local cache or the store.

use std::ops::Range;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;
use object_store::path::Path as ObjPath;
use object_store::{GetOptions, ObjectStore, UpdateVersion};

use super::blocks::{BlockSize, Blocks, Fetched, Run, Slot, MAX_DEFERRED};
use super::cache::DiskCache;
use super::checks::Checks;
use super::retry::{classify, Attempt, Failure, Retrier};
use super::sizes::{Sizes, LIST_OVER};
use super::stats::{add, Counters};
use super::RemoteOptions;
use crate::dir::ExpectedFile;
use crate::Result;

/// The most bytes a body's buffer is sized for before any arrives (a server's declared
/// length beyond it grows the buffer only as bytes come).
const MAX_PREALLOC: u64 = 64 << 20;

/// What the background fetches share with the directory.
pub(super) struct Inner {
    pub(super) store: Arc<dyn ObjectStore>,
    pub(super) prefix: ObjPath,
    pub(super) url: String,
    pub(super) opts: RemoteOptions,
    pub(super) bs: BlockSize,
    pub(super) sizes: Sizes,
    checks: Mutex<Checks>,
    blocks: Mutex<Blocks>,
    /// Notified when blocks become ready or fail.
    pub(super) arrived: Condvar,
    /// Requests in flight at once ([`RemoteOptions::max_in_flight`]).
    permits: tokio::sync::Semaphore,
    pub(super) cache: Option<DiskCache>,
    pub(super) stats: Counters,
    retrier: Retrier,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inner").field("url", &self.url).finish_non_exhaustive()
    }
}

/// A whole object as a `GET` answers it.
pub(super) enum Whole {
    /// Unchanged since the entity tag asked with (`If-None-Match`).
    NotModified,
    /// Its bytes (at most the bound asked plus one), the version that holds them, and whether
    /// they are all of the object's (`false`: cut at the bound).
    Body { bytes: Bytes, version: UpdateVersion, whole: bool },
}

impl Inner {
    /// The directory of `url` (`prefix` in `store`), read with `opts`, cached in `cache`.
    pub(super) fn new(
        store: Arc<dyn ObjectStore>,
        prefix: ObjPath,
        url: String,
        opts: RemoteOptions,
        cache: Option<DiskCache>,
    ) -> Self {
        Inner {
            store,
            prefix,
            url,
            bs: BlockSize::new(opts.block_size),
            permits: tokio::sync::Semaphore::new(opts.max_in_flight.max(1)),
            retrier: Retrier::new(opts.retry.clone()),
            opts,
            sizes: Sizes::default(),
            checks: Mutex::default(),
            blocks: Mutex::default(),
            arrived: Condvar::new(),
            cache,
            stats: Counters::default(),
        }
    }

    pub(super) fn lock_blocks(&self) -> MutexGuard<'_, Blocks> {
        self.blocks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn lock_checks(&self) -> MutexGuard<'_, Checks> {
        self.checks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The object of file `name` (a plain name, checked by the caller); a name with `/` (a
    /// file in a sub-directory, as an MDS index may name) is that many path parts.
    pub(super) fn object(&self, name: &str) -> ObjPath {
        name.split('/')
            .filter(|p| !p.is_empty() && *p != ".")
            .fold(self.prefix.clone(), |p, part| p.child(part))
    }

    /// The URL of file `name`.
    pub(super) fn object_url(&self, name: &str) -> String {
        format!("{}/{name}", self.url)
    }

    /// Runs `attempt` with the directory's retries (see [`Retrier::run`]); the request is
    /// named `op` on file `name`.
    pub(super) async fn retry<T, F, Fut>(
        &self,
        op: &'static str,
        name: &str,
        range: Option<Range<u64>>,
        attempt: F,
    ) -> std::result::Result<T, Failure>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = std::result::Result<T, Attempt>>,
    {
        self.retrier.run(&self.stats, op, &self.object_url(name), range, attempt).await
    }

    /// The length of object `name` (`None`: it does not exist), by one `HEAD`, retried.
    pub(super) async fn head(&self, name: &str) -> std::result::Result<Option<u64>, Failure> {
        let path = self.object(name);
        self.retry("head", name, None, || {
            let path = path.clone();
            async move {
                match self.store.head(&path).await {
                    Ok(m) => Ok(Some(m.size)),
                    Err(object_store::Error::NotFound { .. }) => Ok(None),
                    Err(e) => Err(classify(&e)),
                }
            }
        })
        .await
    }

    /// Bytes `range` of `name`, exactly `range.end - range.start` of them. The length the
    /// server declares is checked before the body is read, and the body is read at most one
    /// byte past what was asked (an endless or overlong body is cut there, never read whole).
    async fn get_range(&self, name: &str, range: Range<u64>) -> std::result::Result<Bytes, Failure> {
        let path = self.object(name);
        let want = range.end - range.start;
        self.retry("get", name, Some(range.clone()), || {
            let (path, range) = (path.clone(), range.clone());
            async move {
                let opts = GetOptions { range: Some(range.clone().into()), ..GetOptions::default() };
                let r = self.store.get_opts(&path, opts).await.map_err(|e| classify(&e))?;
                let declared = r.range.end.saturating_sub(r.range.start);
                if r.range.start != range.start || declared != want {
                    return Err(Attempt::Retry(format!(
                        "the server declared bytes {}..{}, {}..{} were asked for",
                        r.range.start, r.range.end, range.start, range.end
                    )));
                }
                let b = self.body_within(r, want).await?;
                if b.len() as u64 != want {
                    return Err(Attempt::Retry(format!(
                        "the body held {}{} bytes, {want} were asked for",
                        if b.len() as u64 > want { "more than " } else { "" },
                        b.len().min(usize::try_from(want).unwrap_or(usize::MAX))
                    )));
                }
                Ok(b)
            }
        })
        .await
    }

    /// The body of `r`, read chunk by chunk and cut after `limit + 1` bytes (a longer body is
    /// dropped unread past there: the caller sees it is too long). The buffer is sized from
    /// the server's declared length only up to that bound.
    async fn body_within(
        &self,
        r: object_store::GetResult,
        limit: u64,
    ) -> std::result::Result<Bytes, Attempt> {
        use futures::StreamExt as _;
        let cut = limit.saturating_add(1);
        let declared = r.range.end.saturating_sub(r.range.start);
        let cap = usize::try_from(declared.min(cut).min(MAX_PREALLOC)).unwrap_or(0);
        let mut out = bytes::BytesMut::with_capacity(cap);
        let mut body = r.into_stream();
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| classify(&e))?;
            add(&self.stats.bytes_fetched, chunk.len() as u64);
            let room = usize::try_from(cut - out.len() as u64).unwrap_or(usize::MAX);
            if chunk.len() >= room {
                out.extend_from_slice(&chunk[..room]);
                break;
            }
            out.extend_from_slice(&chunk);
        }
        Ok(out.freeze())
    }

    /// The whole object `name` by one `GET`, retried (a body shorter than the object is
    /// retried); `None` when it does not exist. With `if_none_match` (an entity tag) an
    /// unchanged object is [`Whole::NotModified`], without a body. At most `max_len + 1` bytes
    /// of the body are read (the rest is dropped unread, as [`crate::StorageDir::read_file`]
    /// cuts a file): the object's declared length is checked against that bound before the
    /// body is read.
    pub(super) async fn get_whole(
        &self,
        name: &str,
        if_none_match: Option<String>,
        max_len: u64,
    ) -> std::result::Result<Option<Whole>, Failure> {
        let path = self.object(name);
        self.retry("get", name, None, || {
            let path = path.clone();
            let if_none_match = if_none_match.clone();
            async move {
                let opts = GetOptions { if_none_match, ..GetOptions::default() };
                match self.store.get_opts(&path, opts).await {
                    Ok(r) => {
                        let version =
                            UpdateVersion { e_tag: r.meta.e_tag.clone(), version: r.meta.version.clone() };
                        let size = r.meta.size;
                        let whole = size <= max_len;
                        let bytes = self.body_within(r, max_len).await?;
                        let expect = size.min(max_len.saturating_add(1));
                        if bytes.len() as u64 != expect {
                            return Err(Attempt::Retry(format!(
                                "the body held {} bytes, the object {size}",
                                bytes.len()
                            )));
                        }
                        Ok(Some(Whole::Body { bytes, version, whole }))
                    }
                    Err(object_store::Error::NotModified { .. }) => Ok(Some(Whole::NotModified)),
                    Err(object_store::Error::NotFound { .. }) => Ok(None),
                    Err(e) => Err(classify(&e)),
                }
            }
        })
        .await
    }

    /// Takes what a reader expects ([`crate::StorageDir::expect_files`]): the checksums the
    /// files are checked against, and their lengths, asked in the background
    /// ([`Inner::ask_sizes`]). [`crate::StorageDir::file_len`] waits for them instead of
    /// asking one file after another.
    pub(super) fn expect(self: &Arc<Self>, rt: &tokio::runtime::Handle, files: &[ExpectedFile]) {
        let names = self.sizes.begin(files.iter().map(|f| f.name.as_str()));
        self.lock_checks().expect(files);
        self.spawn_sizes(rt, names);
    }

    /// Starts asking the lengths of those of `names` neither known nor asked already, in the
    /// background: by concurrent `HEAD`s or, for more than [`LIST_OVER`] files, by one paged
    /// `LIST` of the prefix (recursive when a name lies in a sub-directory, as the files of a
    /// storage committed from parts do), with a `HEAD` for each file the listing lacks.
    pub(super) fn ask_sizes<'a>(
        self: &Arc<Self>,
        rt: &tokio::runtime::Handle,
        names: impl Iterator<Item = &'a str>,
    ) {
        let names = self.sizes.begin(names);
        self.spawn_sizes(rt, names);
    }

    /// The background requests for the lengths of the pending `names`.
    fn spawn_sizes(self: &Arc<Self>, rt: &tokio::runtime::Handle, names: Vec<String>) {
        if names.len() > LIST_OVER {
            // Many files: their sizes from one paged `LIST` of the prefix (a storage of
            // 50,000 shards took 84 s of `HEAD`s to open); a file the listing did not return
            // is asked by its own `HEAD`, so a missing or short object is reported as before.
            rt.spawn(Arc::clone(self).list_sizes(names));
        } else {
            self.spawn_heads(rt, names);
        }
    }

    /// Every object under `under` (a directory name relative to the prefix; `""`: the whole
    /// prefix), at any depth, as `(name relative to the prefix, length)`: one paged `LIST`
    /// without a delimiter, retried.
    pub(super) async fn list_tree(&self, under: &str) -> std::result::Result<Vec<(String, u64)>, Failure> {
        use futures::TryStreamExt;
        let at = if under.is_empty() { self.prefix.clone() } else { self.object(under) };
        let base = self.prefix.as_ref().to_string();
        self.retry("list", under, None, || {
            let at = at.clone();
            let base = base.as_str();
            async move {
                let objects: Vec<object_store::ObjectMeta> =
                    self.store.list(Some(&at)).try_collect().await.map_err(|e| classify(&e))?;
                Ok(objects
                    .into_iter()
                    .filter_map(|o| {
                        let full = o.location.as_ref();
                        let rel = if base.is_empty() {
                            Some(full)
                        } else {
                            full.strip_prefix(base)?.strip_prefix('/')
                        };
                        rel.map(|r| (r.to_string(), o.size))
                    })
                    .collect())
            }
        })
        .await
    }

    /// The lengths of the pending `names` from one `LIST` of the prefix, then a `HEAD` for
    /// each it did not return (each of them when the listing fails).
    async fn list_sizes(self: Arc<Self>, names: Vec<String>) {
        let mut guard = ListGuard { inner: Arc::clone(&self), names };
        let nested = guard.names.iter().any(|n| n.contains('/'));
        let listed = {
            let _permit = self.permits.acquire().await;
            if nested {
                self.list_tree("").await
            } else {
                self.retry("list", "", None, || async {
                    let listed =
                        self.store.list_with_delimiter(Some(&self.prefix)).await.map_err(|e| classify(&e))?;
                    Ok(listed
                        .objects
                        .iter()
                        .filter_map(|o| Some((o.location.filename()?.to_string(), o.size)))
                        .collect::<Vec<_>>())
                })
                .await
            }
        };
        let rest = match listed {
            Ok(listed) => {
                let found = self.sizes.listed(&guard.names, listed.iter().map(|(n, len)| (n.as_str(), *len)));
                std::mem::take(&mut guard.names).into_iter().filter(|n| !found.contains(n)).collect()
            }
            // A failed listing: every size by its `HEAD`, as for a few files.
            Err(f) => {
                log::debug!("{}; asking the object sizes one by one", f.error());
                std::mem::take(&mut guard.names)
            }
        };
        self.spawn_heads(&tokio::runtime::Handle::current(), rest);
    }

    /// One background `HEAD` per name of `names` (already pending), at most `max_in_flight`
    /// at once; each records the length it finds and ends the name's pending state.
    fn spawn_heads(self: &Arc<Self>, rt: &tokio::runtime::Handle, names: Vec<String>) {
        for name in names {
            let inner = Arc::clone(self);
            rt.spawn(async move {
                let guard = HeadGuard { inner: Arc::clone(&inner), name };
                // At most `max_in_flight` requests at once, as for block fetches: a storage
                // of 50,000 shards must not open 50,000 connections (EMFILE, or SlowDown).
                let _permit = inner.permits.acquire().await;
                if let Ok(Some(n)) = inner.head(&guard.name).await {
                    inner.sizes.found(&guard.name, n);
                }
            });
        }
    }

    /// Starts fetches of the blocks `ids` (ascending) of `name` (`size` bytes) that are neither
    /// in memory nor in flight, as runs of blocks at most [`RemoteOptions::coalesce_gap`]
    /// apart. Readahead takes at most [`RemoteOptions::max_readahead_bytes`] in flight, and
    /// never more than half the memory for blocks (blocks fetched ahead must still be there
    /// when their batch comes); a run that does not fit, or comes while older ones wait,
    /// waits in [`Blocks::deferred`] until the fetches in flight end.
    pub(super) fn start_runs(
        self: &Arc<Self>,
        b: &mut Blocks,
        rt: &tokio::runtime::Handle,
        name: &Arc<str>,
        size: u64,
        ids: impl Iterator<Item = u64>,
        how: Run,
    ) {
        let ahead = how != Run::Demand;
        let gap = self.opts.coalesce_gap / self.bs.0;
        let limit = self.readahead_limit();
        let mut runs: Vec<Range<u64>> = Vec::new();
        for id in ids
            .filter(|&id| !matches!(b.map.get(&(name.clone(), id)), Some(Slot::Pending | Slot::Ready { .. })))
        {
            match runs.last_mut() {
                Some(r) if id - r.end <= gap => r.end = id + 1,
                _ => runs.push(id..id + 1),
            }
        }
        for run in runs {
            let bytes = self.bs.run_bytes(&run, size);
            if ahead {
                if bytes > limit {
                    continue;
                }
                let behind = how == Run::Ahead && !b.deferred.is_empty();
                if b.readahead_bytes.saturating_add(bytes) > limit || behind {
                    if b.deferred.len() >= MAX_DEFERRED {
                        b.deferred.pop_front();
                    }
                    b.deferred.push_back((name.clone(), size, run));
                    continue;
                }
                b.readahead_bytes += bytes;
                add(&self.stats.bytes_prefetched, bytes);
            }
            for id in run.clone() {
                b.map.insert((name.clone(), id), Slot::Pending);
            }
            rt.spawn(Arc::clone(self).fetch_run(name.clone(), size, run, ahead.then_some(bytes)));
        }
    }

    /// The most readahead bytes in flight at once.
    fn readahead_limit(&self) -> u64 {
        self.opts.max_readahead_bytes.min(self.opts.memory_bytes / 2)
    }

    /// Starts the deferred readahead runs that fit now, oldest first (blocks read or fetched
    /// since they were hinted are left out).
    fn start_deferred(self: &Arc<Self>, b: &mut Blocks, rt: &tokio::runtime::Handle) {
        let limit = self.readahead_limit();
        while let Some((name, size, run)) = b.deferred.front().cloned() {
            if b.readahead_bytes.saturating_add(self.bs.run_bytes(&run, size)) > limit {
                break;
            }
            b.deferred.pop_front();
            self.start_runs(b, rt, &name, size, run, Run::Deferred);
        }
    }

    /// Fetches blocks `run` of `name` (`size` bytes): from the local cache where it has them,
    /// the rest with one ranged request; then marks them ready (or failed) and wakes readers.
    async fn fetch_run(self: Arc<Self>, name: Arc<str>, size: u64, run: Range<u64>, ahead: Option<u64>) {
        let mut guard =
            RunGuard { inner: Arc::clone(&self), name: name.clone(), run: run.clone(), ahead, armed: true };
        let bs = self.bs;
        if let Some(c) = &self.cache {
            self.lock_checks().check_cached(&name, bs, c, || self.sizes.known(&name), &self.url);
        }
        let mut ready: Vec<Fetched> = Vec::new();
        let mut todo: Vec<u64> = Vec::new();
        for id in run.clone() {
            let r = bs.range(id, size);
            match self.cache.as_ref().and_then(|c| self.cached_block(c, &name, id, r.end - r.start)) {
                Some((b, crc)) => {
                    add(&self.stats.bytes_from_cache, b.len() as u64);
                    // Ready at once: a reader waiting for this block does not wait for the
                    // rest of the run.
                    self.settle(&name, vec![Fetched { id, bytes: Bytes::from(b), crc, from_cache: true }]);
                }
                None => todo.push(id),
            }
        }
        let mut failure = None;
        if let (Some(&first), Some(&last)) = (todo.first(), todo.last()) {
            let range = bs.range(first, size).start..bs.range(last, size).end;
            let permit = self.permits.acquire().await;
            let fetched = self.get_range(&name, range.clone()).await;
            drop(permit);
            match fetched {
                Ok(all) => {
                    for id in first..=last {
                        let r = bs.range(id, size);
                        let piece =
                            all.slice((r.start - range.start) as usize..(r.end - range.start) as usize);
                        let crc = crc32c::crc32c(&piece);
                        if let Some(c) = &self.cache {
                            c.put(&name, id, &piece, crc);
                        }
                        ready.push(Fetched { id, bytes: piece, crc, from_cache: false });
                    }
                }
                Err(f) => failure = Some(f),
            }
        }
        self.settle(&name, ready);
        let mut b = self.lock_blocks();
        if let Some(f) = failure {
            b.fail_pending(&name, run, &f);
        }
        if let Some(n) = ahead {
            b.readahead_bytes -= n;
            self.start_deferred(&mut b, &tokio::runtime::Handle::current());
        }
        b.evict_to(self.opts.memory_bytes);
        guard.armed = false;
        drop(b);
        self.arrived.notify_all();
    }

    /// Block `id` (`len` bytes) of `name` from the local cache, when its crc32c is the one
    /// the checks trust for it ([`Checks::trusted_crc`]: the store's bytes fetched by this
    /// process, or a cached file checked whole against its manifest). Any other copy is not
    /// served (a copy that differs from the trusted one is removed): the cache's own checksum
    /// beside a block can be edited with it.
    fn cached_block(&self, cache: &DiskCache, name: &str, id: u64, len: u64) -> Option<(Vec<u8>, u32)> {
        let want = self.lock_checks().trusted_crc(name, id)?;
        let (bytes, crc) = cache.get(name, id, len)?;
        if crc != want {
            log::warn!(
                "the cached block {id} of {}/{name} has crc32c {crc:#010x}, the store's {want:#010x}: fetching it again",
                self.url
            );
            cache.remove(name, id);
            return None;
        }
        Some((bytes, crc))
    }

    /// Marks the blocks `ready` of `name` ready after recording them for the checks, drops
    /// the cached ones that failed them (a reader waiting for one finds it absent and asks the
    /// store), and wakes readers.
    fn settle(&self, name: &Arc<str>, ready: Vec<Fetched>) {
        if ready.is_empty() {
            return;
        }
        let dropped: Vec<u64> = {
            let mut checks = self.lock_checks();
            ready
                .iter()
                .flat_map(|f| checks.record(name, f, self.bs, self.cache.as_ref(), &self.url))
                .collect()
        };
        let mut b = self.lock_blocks();
        for f in ready {
            b.set_ready((name.clone(), f.id), f.bytes);
        }
        for id in dropped {
            b.drop_ready(&(name.clone(), id));
        }
        b.evict_to(self.opts.memory_bytes);
        drop(b);
        self.arrived.notify_all();
    }

    /// The error of file `name` (at `path`) when its store's bytes failed their check.
    ///
    /// # Errors
    /// [`crate::StorageError::ChecksumMismatch`].
    pub(super) fn check_error(&self, name: &str, path: PathBuf) -> Result<()> {
        self.lock_checks().error(name, path)
    }

    /// Drops what is known about `name` (its length, its blocks in memory, its check).
    pub(super) fn forget(&self, name: &str) {
        self.sizes.forget(name);
        self.lock_checks().forget(name);
        self.lock_blocks().drop_file(name);
    }
}

/// Ends a background `LIST` of lengths, however it ends: the names it still holds (not found
/// by the listing and not yet handed to their `HEAD`s) are no longer pending, and
/// [`crate::StorageDir::file_len`] callers waiting for them wake (and ask themselves).
struct ListGuard {
    inner: Arc<Inner>,
    names: Vec<String>,
}

impl Drop for ListGuard {
    fn drop(&mut self) {
        if !self.names.is_empty() {
            self.inner.sizes.end(&self.names);
        }
    }
}

/// Ends a background `HEAD`, however it ends: the file is no longer pending, and
/// [`crate::StorageDir::file_len`] callers waiting for it wake.
struct HeadGuard {
    inner: Arc<Inner>,
    name: String,
}

impl Drop for HeadGuard {
    fn drop(&mut self) {
        self.inner.sizes.end(std::slice::from_ref(&self.name));
    }
}

/// Marks the blocks of a fetch that ended without settling them (its task panicked, or the
/// runtime dropped it) as failed, so no reader waits for them for ever.
struct RunGuard {
    inner: Arc<Inner>,
    name: Arc<str>,
    run: Range<u64>,
    ahead: Option<u64>,
    armed: bool,
}

impl Drop for RunGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let bs = self.inner.bs.0;
        let failure = Failure {
            op: "get",
            url: self.inner.object_url(&self.name),
            range: Some(self.run.start * bs..self.run.end * bs),
            attempts: 0,
            cause: "the fetch ended before it finished (it panicked or the store was shut down)".into(),
        };
        let mut b = self.inner.lock_blocks();
        b.fail_pending(&self.name, self.run.clone(), &failure);
        if let Some(n) = self.ahead {
            b.readahead_bytes = b.readahead_bytes.saturating_sub(n);
        }
        drop(b);
        self.inner.arrived.notify_all();
    }
}
