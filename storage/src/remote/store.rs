//! [`RemoteDir`]: a storage in an object store behind the [`StorageDir`] / [`WriteDir`] seam.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::future::Future;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use object_store::path::Path as ObjPath;
use object_store::{GetOptions, ObjectStore, ObjectStoreScheme, PutPayload, RetryConfig};

use super::cache::DiskCache;
use super::RemoteOptions;
use crate::dir::{file_name, resolve, DirEntry, EntryKind, StorageDir, WriteDir, WriteFile};
use crate::io::{FileSet, ReadRequest};
use crate::{Result, StorageError};

/// Counters of a [`RemoteDir`] since it was opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RemoteStats {
    /// Requests sent (every attempt of every request).
    pub requests: u64,
    /// Attempts that failed and were retried.
    pub retries: u64,
    /// Body bytes received from the store.
    pub bytes_fetched: u64,
    /// Bytes of blocks served from the local cache instead of the store.
    pub bytes_from_cache: u64,
    /// Bytes handed to readers (`read_at`, `read_requests`).
    pub bytes_delivered: u64,
    /// Bytes requested by readahead ([`StorageDir::prefetch`]).
    pub bytes_prefetched: u64,
}

#[derive(Debug, Default)]
struct Counters {
    requests: AtomicU64,
    retries: AtomicU64,
    bytes_fetched: AtomicU64,
    bytes_from_cache: AtomicU64,
    bytes_delivered: AtomicU64,
    bytes_prefetched: AtomicU64,
}

/// Why one request failed for good (turned into [`StorageError::Remote`]).
#[derive(Debug, Clone)]
struct Failure {
    op: &'static str,
    url: String,
    range: Option<Range<u64>>,
    attempts: u32,
    cause: String,
}

impl Failure {
    fn error(&self) -> StorageError {
        StorageError::Remote {
            op: self.op,
            url: self.url.clone(),
            range: self.range.clone(),
            attempts: self.attempts,
            cause: self.cause.clone(),
        }
    }
}

/// One attempt's outcome when it failed.
enum Attempt {
    /// Worth another attempt (timeout, 5xx, reset, truncated body).
    Retry(String),
    /// Another attempt would fail the same way (not found, denied, unsupported).
    Fatal(String),
}

/// The error of `e` and its sources, as one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = c.source();
    }
    s
}

fn classify(e: &object_store::Error) -> Attempt {
    use object_store::Error as E;
    match e {
        E::NotFound { .. } => Attempt::Fatal("the object does not exist".into()),
        E::InvalidPath { .. }
        | E::NotSupported { .. }
        | E::NotImplemented
        | E::PermissionDenied { .. }
        | E::Unauthenticated { .. }
        | E::UnknownConfigurationKey { .. }
        | E::Precondition { .. }
        | E::AlreadyExists { .. } => Attempt::Fatal(chain(e)),
        _ => Attempt::Retry(chain(e)),
    }
}

type BlockKey = (Arc<str>, u64);

enum Slot {
    Pending,
    Ready { bytes: Bytes, tick: u64 },
    Failed(Failure),
}

#[derive(Default)]
struct Blocks {
    map: HashMap<BlockKey, Slot>,
    lru: BTreeMap<u64, BlockKey>,
    tick: u64,
    ready_bytes: u64,
    readahead_bytes: u64,
    /// Readahead runs hinted while the readahead in flight was at its bound, in hint order:
    /// started as the fetches in flight end (a hint is never dropped for want of room, only
    /// when more than [`MAX_DEFERRED`] wait).
    deferred: std::collections::VecDeque<(Arc<str>, u64, Range<u64>)>,
}

/// Why blocks are fetched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Run {
    /// A read waits for them.
    Demand,
    /// Readahead, as hinted.
    Ahead,
    /// Readahead that waited for room and now fits.
    Deferred,
}

/// The most readahead runs waiting for room at once; older ones are dropped first (their
/// blocks are fetched when read).
const MAX_DEFERRED: usize = 4096;

impl Blocks {
    fn touch(&mut self, key: &BlockKey) {
        self.tick += 1;
        let t = self.tick;
        if let Some(Slot::Ready { tick, .. }) = self.map.get_mut(key) {
            self.lru.remove(tick);
            *tick = t;
            self.lru.insert(t, key.clone());
        }
    }

    fn set_ready(&mut self, key: BlockKey, bytes: Bytes) {
        if matches!(self.map.get(&key), Some(Slot::Ready { .. })) {
            return;
        }
        self.tick += 1;
        self.ready_bytes += bytes.len() as u64;
        self.lru.insert(self.tick, key.clone());
        self.map.insert(key, Slot::Ready { bytes, tick: self.tick });
    }

    fn evict_to(&mut self, limit: u64) {
        while self.ready_bytes > limit {
            let Some((_, key)) = self.lru.pop_first() else { break };
            if let Some(Slot::Ready { bytes, .. }) = self.map.remove(&key) {
                self.ready_bytes -= bytes.len() as u64;
            }
        }
    }
}

/// Files a manifest names above which their lengths come from one `LIST` of the prefix
/// rather than one `HEAD` each.
const LIST_OVER: usize = 64;

/// Object lengths: known ones, and those whose `HEAD` is in flight.
#[derive(Default)]
struct Sizes {
    known: HashMap<String, u64>,
    pending: std::collections::HashSet<String>,
}

/// What the last manifest read commits of one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Expect {
    shard: u64,
    committed: u64,
    checksum: u32,
}

/// Where the check of one file against the manifest's checksum stands.
#[derive(Default)]
struct FileCheck {
    /// The whole-shard check of the cache ran (at the file's first fetch).
    cache_checked: bool,
    /// Per block: the crc32c of its bytes below the committed length, and whether they came
    /// from the local cache.
    crcs: BTreeMap<u64, (u32, bool)>,
    /// The committed bytes matched the manifest.
    verified: bool,
    /// The store's own bytes did not: the crc32c they have.
    mismatch: Option<u32>,
}

/// The manifest's checksums and the checks of the files they cover.
#[derive(Default)]
struct Checks {
    expect: HashMap<String, Expect>,
    files: HashMap<String, FileCheck>,
}

/// What the background fetches share with the directory.
struct Inner {
    store: Arc<dyn ObjectStore>,
    prefix: ObjPath,
    url: String,
    opts: RemoteOptions,
    sizes: Mutex<Sizes>,
    /// Notified when a `HEAD` started by a manifest read ends.
    sized: Condvar,
    checks: Mutex<Checks>,
    blocks: Mutex<Blocks>,
    arrived: Condvar,
    permits: tokio::sync::Semaphore,
    cache: Option<DiskCache>,
    stats: Counters,
    jitter: AtomicU64,
}

/// A storage in an object store, addressed by URL: `s3://bucket/prefix` (S3 and S3-compatible
/// endpoints), `gs://bucket/prefix`, `az://container/prefix`, `http(s)://host/path` (read
/// only: HTTP `GET` with `Range` and `HEAD`).
///
/// Reads go by fixed-size blocks ([`RemoteOptions::block_size`]): a read asks for the blocks
/// its bytes lie in; missing blocks at most [`RemoteOptions::coalesce_gap`] apart are fetched
/// by one ranged `GET`, at most [`RemoteOptions::max_in_flight`] at once, each with
/// [`super::RetryPolicy`]'s retries and a check that the body holds exactly the bytes asked
/// for. Fetched blocks stay in memory ([`RemoteOptions::memory_bytes`], least recently used
/// out) and, with a [`super::CacheOptions`], in a local cache directory that survives
/// restarts. [`StorageDir::prefetch`] starts fetches in the background (readahead), bounded
/// by [`RemoteOptions::max_readahead_bytes`]; a read finds those blocks in memory or waits
/// for their fetch. Object lengths are asked once (`HEAD`) and kept: the storage contract
/// says committed bytes never change; reading the manifest starts the `HEAD`s of every file it
/// names at once.
///
/// Checksums: every cached block carries its own crc32c, checked when it is read. Beyond that,
/// the committed bytes of each file the last manifest read names are checked against the
/// manifest's crc32c (the blocks' crc32c values combined, no byte read twice): before the
/// first cached block of a file is served when the cache holds all of them (a mismatch
/// removes them, and they are fetched again), and as blocks arrive otherwise. When the
/// store's own bytes do not match, every read of the file fails with
/// [`StorageError::ChecksumMismatch`] naming the shard and the object's URL.
///
/// The directory owns a tokio runtime (two worker threads) that runs the `object_store`
/// client; the [`StorageDir`] calls block the calling thread on it. Dropping the directory
/// shuts the runtime down without waiting: requests in flight are dropped.
///
/// As a [`WriteDir`] it writes a file as one object on [`WriteFile::sync`] (a `PUT` of its
/// whole content) and renames by copy and delete; a writer's commit therefore puts the shard
/// objects first and the manifest last, and a reader never sees a manifest naming bytes that
/// are not there. Object stores have no lock here: one writer per URL at a time is the
/// caller's duty.
pub struct RemoteDir {
    inner: Arc<Inner>,
    label: PathBuf,
    rt: Option<tokio::runtime::Runtime>,
}

impl fmt::Debug for RemoteDir {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteDir")
            .field("url", &self.inner.url)
            .field("options", &self.inner.opts)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl Drop for RemoteDir {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

fn open_error(url: &str, cause: impl fmt::Display) -> StorageError {
    StorageError::Remote { op: "open", url: url.into(), range: None, attempts: 0, cause: cause.to_string() }
}

impl RemoteDir {
    /// Opens the storage at `url` (see the type's documentation for the schemes) with the
    /// store's environment variables and `options.store_options`. No request is made.
    ///
    /// # Errors
    /// [`StorageError::Remote`] (op `open`) when the URL does not parse, names no bucket
    /// (`s3://`), names a scheme that is not an object store, an option is unknown, the client cannot be built, or the runtime
    /// or cache directory cannot be set up.
    pub fn open(url: &str, options: RemoteOptions) -> Result<Self> {
        if let Some((scheme, rest)) = url.split_once("://") {
            if rest.split('/').next().is_none_or(str::is_empty) {
                return Err(open_error(
                    url,
                    format!("the URL names no bucket (container, or host): write {scheme}://BUCKET/PREFIX"),
                ));
            }
        }
        let url = url.trim_end_matches('/').to_string();
        let parsed = url::Url::parse(&url).map_err(|e| open_error(&url, e))?;
        let (scheme, prefix) = ObjectStoreScheme::parse(&parsed).map_err(|e| open_error(&url, chain(&e)))?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("guideloom-remote")
            .enable_all()
            .build()
            .map_err(|e| open_error(&url, format!("cannot start the I/O runtime: {e}")))?;
        // Retries are ours (one policy for every cause, truncated bodies included).
        let retry =
            RetryConfig { max_retries: 0, retry_timeout: options.retry.timeout, ..RetryConfig::default() };
        let bad_key =
            |k: &str, e: object_store::Error| open_error(&url, format!("option {k:?}: {}", chain(&e)));
        let store: Arc<dyn ObjectStore> = {
            let _guard = rt.enter();
            match scheme {
                ObjectStoreScheme::AmazonS3 => {
                    let mut b = object_store::aws::AmazonS3Builder::from_env()
                        .with_url(url.as_str())
                        .with_retry(retry);
                    for (k, v) in &options.store_options {
                        b = b.with_config(k.parse().map_err(|e| bad_key(k, e))?, v);
                    }
                    Arc::new(b.build().map_err(|e| open_error(&url, chain(&e)))?)
                }
                ObjectStoreScheme::GoogleCloudStorage => {
                    let mut b = object_store::gcp::GoogleCloudStorageBuilder::from_env()
                        .with_url(url.as_str())
                        .with_retry(retry);
                    for (k, v) in &options.store_options {
                        b = b.with_config(k.parse().map_err(|e| bad_key(k, e))?, v);
                    }
                    Arc::new(b.build().map_err(|e| open_error(&url, chain(&e)))?)
                }
                ObjectStoreScheme::MicrosoftAzure => {
                    let mut b = object_store::azure::MicrosoftAzureBuilder::from_env()
                        .with_url(url.as_str())
                        .with_retry(retry);
                    for (k, v) in &options.store_options {
                        b = b.with_config(k.parse().map_err(|e| bad_key(k, e))?, v);
                    }
                    Arc::new(b.build().map_err(|e| open_error(&url, chain(&e)))?)
                }
                ObjectStoreScheme::Http => {
                    let base = &parsed[..url::Position::BeforePath];
                    let mut b = object_store::http::HttpBuilder::new().with_url(base).with_retry(retry);
                    if parsed.scheme() == "http" {
                        b = b.with_config(object_store::ClientConfigKey::AllowHttp, "true");
                    }
                    for (k, v) in &options.store_options {
                        b = b.with_config(k.parse().map_err(|e| bad_key(k, e))?, v);
                    }
                    Arc::new(b.build().map_err(|e| open_error(&url, chain(&e)))?)
                }
                other => {
                    return Err(open_error(
                        &url,
                        format!("{other:?} URLs are not object stores; give a local path"),
                    ))
                }
            }
        };
        let cache = options.cache.as_ref().map(|c| DiskCache::open(c, &url)).transpose()?;
        let label = PathBuf::from(&url);
        let inner = Arc::new(Inner {
            store,
            prefix,
            url,
            permits: tokio::sync::Semaphore::new(options.max_in_flight.max(1)),
            opts: options,
            sizes: Mutex::default(),
            sized: Condvar::new(),
            checks: Mutex::default(),
            blocks: Mutex::default(),
            arrived: Condvar::new(),
            cache,
            stats: Counters::default(),
            jitter: AtomicU64::new(0),
        });
        Ok(RemoteDir { inner, label, rt: Some(rt) })
    }

    /// The storage's URL, without a trailing `/`.
    pub fn url(&self) -> &str {
        &self.inner.url
    }

    /// The options it was opened with.
    pub fn options(&self) -> &RemoteOptions {
        &self.inner.opts
    }

    /// The local cache directory of this storage, when it has one.
    pub fn cache_dir(&self) -> Option<&Path> {
        self.inner.cache.as_ref().map(DiskCache::dir)
    }

    /// The counters so far.
    pub fn stats(&self) -> RemoteStats {
        let s = &self.inner.stats;
        RemoteStats {
            requests: s.requests.load(Ordering::Relaxed),
            retries: s.retries.load(Ordering::Relaxed),
            bytes_fetched: s.bytes_fetched.load(Ordering::Relaxed),
            bytes_from_cache: s.bytes_from_cache.load(Ordering::Relaxed),
            bytes_delivered: s.bytes_delivered.load(Ordering::Relaxed),
            bytes_prefetched: s.bytes_prefetched.load(Ordering::Relaxed),
        }
    }

    fn rt(&self) -> &tokio::runtime::Runtime {
        // Present from `open` until `drop`.
        self.rt.as_ref().expect("the runtime lives as long as the directory")
    }

    /// Writes `bytes` as object `name` (one `PUT`, retried).
    ///
    /// # Errors
    /// [`StorageError::UnsafeFile`] for a name that is not a plain file name;
    /// [`StorageError::Remote`] when the upload fails after its retries.
    pub fn put(&self, name: &str, bytes: Vec<u8>) -> Result<()> {
        self.inner.put(self.rt().handle(), name, Bytes::from(bytes))
    }

    /// Copies the local storage in `local` here, manifest last: every file of every shard its
    /// manifest commits (cut at the committed length), then `manifest.json`. A reader
    /// therefore never sees a manifest naming bytes that are not there, and a run killed
    /// half-way leaves the manifest that was here before in force. When a manifest is here
    /// already, every shard it commits must be a prefix of the new one (same bytes up to its
    /// committed length, checked by its crc32c): an appended storage may replace its earlier
    /// upload, another storage may not. Returns the bytes put.
    ///
    /// # Errors
    /// Errors of [`crate::Manifest::load`] and [`StorageError::Io`] for the local storage;
    /// [`StorageError::Remote`] (op `put`) when the manifest here commits a shard the local
    /// storage does not extend, or when an upload fails after its retries.
    pub fn upload(&self, local: &Path) -> Result<u64> {
        let m = crate::Manifest::load(local)?;
        let old = match self.read_file(crate::MANIFEST_FILE, crate::MAX_MANIFEST_BYTES)? {
            Some(_) => Some(crate::Manifest::load_from(self)?),
            None => None,
        };
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
            url: self.inner.object_url(name),
            range: None,
            attempts: 0,
            cause: why,
        };
        let mut total = 0u64;
        for shard in m.shards() {
            for (i, ext) in m.kind().files().iter().enumerate() {
                let name = crate::manifest::shard_file_name(shard.id, ext);
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
                    crate::MANIFEST_FILE,
                    format!("the manifest here commits shard {} that the local storage lacks", s.id),
                ));
            }
        }
        let manifest = std::fs::read(local.join(crate::MANIFEST_FILE))
            .map_err(|e| StorageError::io(local.join(crate::MANIFEST_FILE), e))?;
        total += manifest.len() as u64;
        self.put(crate::MANIFEST_FILE, manifest)?;
        Ok(total)
    }

    /// Removes object `name` (retried; a missing object is not an error).
    ///
    /// # Errors
    /// As [`RemoteDir::put`].
    pub fn delete(&self, name: &str) -> Result<()> {
        check_name(name)?;
        let inner = &self.inner;
        let path = inner.object(name);
        let r = self.rt().block_on(inner.retry("delete", name, None, || {
            let path = path.clone();
            async move {
                match inner.store.delete(&path).await {
                    Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                    Err(e) => Err(classify(&e)),
                }
            }
        }));
        inner.forget(name);
        r.map_err(|f| f.error())
    }

    /// The blocks of file `name` (`size` bytes) that `ranges` lie in, sorted, deduplicated.
    fn block_ids(&self, size: u64, ranges: impl Iterator<Item = Range<u64>>) -> BTreeSet<u64> {
        let bs = self.inner.opts.block_size.max(1);
        let mut ids = BTreeSet::new();
        for r in ranges.filter(|r| r.end > r.start && r.start < size) {
            ids.extend(r.start / bs..=(r.end.min(size) - 1) / bs);
        }
        ids
    }

    /// The length of `name`, or a `NotFound` [`StorageError::Io`] naming its URL.
    fn size_of(&self, name: &str) -> Result<u64> {
        self.file_len(name)?.ok_or_else(|| {
            StorageError::io(self.label.join(name), std::io::Error::from(std::io::ErrorKind::NotFound))
        })
    }

    /// Copies bytes `offset..offset + out.len()` of `name` out of `blocks` (block id to bytes).
    fn copy_out(&self, blocks: &HashMap<u64, Bytes>, offset: u64, out: &mut [u8]) {
        let bs = self.inner.opts.block_size.max(1);
        let mut pos = 0usize;
        while pos < out.len() {
            let at = offset + pos as u64;
            let b = &blocks[&(at / bs)];
            // `at % bs` < the block's length: the caller checked the range against the size.
            let from = (at % bs) as usize;
            let n = (b.len() - from).min(out.len() - pos);
            out[pos..pos + n].copy_from_slice(&b[from..from + n]);
            pos += n;
        }
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

/// The committed length and checksum of file `i` (extension `ext`) of `shard`.
fn file_entry(shard: &crate::ShardEntry, i: usize, ext: &str) -> (u64, u32) {
    if i == 0 {
        (shard.bytes, shard.checksum)
    } else {
        shard.files.get(ext).map_or((0, 0), |f| (f.bytes, f.checksum))
    }
}

fn check_name(name: &str) -> Result<()> {
    resolve(Path::new(""), name).map(drop)
}

impl Inner {
    fn lock_blocks(&self) -> MutexGuard<'_, Blocks> {
        self.blocks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn lock_sizes(&self) -> MutexGuard<'_, Sizes> {
        self.sizes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn lock_checks(&self) -> MutexGuard<'_, Checks> {
        self.checks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The length of object `name` (`None`: it does not exist), by one `HEAD`, retried.
    async fn head(&self, name: &str) -> std::result::Result<Option<u64>, Failure> {
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

    /// Learns what the manifest `bytes` commits: the checksums files are checked against,
    /// and the lengths of the files it names, asked in the background by concurrent `HEAD`s
    /// or, when it names more than [`LIST_OVER`] files, by one paged `LIST` of the prefix
    /// (with a `HEAD` for each file the listing lacks). [`StorageDir::file_len`] waits for
    /// them instead of asking one file after another. A manifest that does not parse teaches nothing (its reader reports it).
    fn learn_manifest(self: &Arc<Self>, rt: &tokio::runtime::Handle, bytes: &[u8]) {
        let mem = crate::dir::MemDir::new();
        mem.insert(crate::MANIFEST_FILE, bytes.to_vec());
        let Ok(m) = crate::Manifest::load_from(&mem) else { return };
        let mut expect = HashMap::new();
        for shard in m.shards() {
            for (i, ext) in m.kind().files().iter().enumerate() {
                if i > 0 && !shard.files.contains_key(*ext) {
                    continue;
                }
                let (committed, checksum) = file_entry(shard, i, ext);
                expect.insert(
                    crate::manifest::shard_file_name(shard.id, ext),
                    Expect { shard: shard.id, committed, checksum },
                );
            }
        }
        let names: Vec<String> = {
            let mut s = self.lock_sizes();
            let names: Vec<String> = expect
                .keys()
                .filter(|n| !s.known.contains_key(*n) && !s.pending.contains(*n))
                .cloned()
                .collect();
            s.pending.extend(names.iter().cloned());
            names
        };
        {
            let mut c = self.lock_checks();
            let changed: Vec<String> =
                c.files.keys().filter(|n| c.expect.get(*n) != expect.get(*n)).cloned().collect();
            for n in changed {
                c.files.remove(&n);
            }
            c.expect = expect;
        }
        if names.len() > LIST_OVER {
            // Many files: their sizes from one paged `LIST` of the prefix (a storage of
            // 50,000 shards took 84 s of `HEAD`s to open); a file the listing did not return
            // is asked by its own `HEAD`, so a missing or short object is reported as before.
            let inner = Arc::clone(self);
            rt.spawn(async move {
                let mut guard = ListGuard { inner: Arc::clone(&inner), names };
                let listed = {
                    let _permit = inner.permits.acquire().await;
                    inner
                        .retry("list", "", None, || async {
                            inner
                                .store
                                .list_with_delimiter(Some(&inner.prefix))
                                .await
                                .map_err(|e| classify(&e))
                        })
                        .await
                };
                let rest = match listed {
                    Ok(listed) => {
                        let mut s = inner.lock_sizes();
                        let wanted: std::collections::HashSet<&str> =
                            guard.names.iter().map(String::as_str).collect();
                        let mut found = std::collections::HashSet::new();
                        for o in &listed.objects {
                            let Some(name) = o.location.filename() else { continue };
                            if wanted.contains(name) && s.pending.remove(name) {
                                s.known.insert(name.to_string(), o.size);
                                found.insert(name.to_string());
                            }
                        }
                        drop(s);
                        inner.sized.notify_all();
                        std::mem::take(&mut guard.names).into_iter().filter(|n| !found.contains(n)).collect()
                    }
                    // A failed listing: every size by its `HEAD`, as for a short manifest.
                    Err(f) => {
                        log::debug!("{}; asking the object sizes one by one", f.error());
                        std::mem::take(&mut guard.names)
                    }
                };
                let handle = tokio::runtime::Handle::current();
                inner.spawn_heads(&handle, rest);
            });
        } else {
            self.spawn_heads(rt, names);
        }
    }

    /// One background `HEAD` per name of `names` (already pending), at most `max_in_flight`
    /// at once; each records the length it finds and ends the name's pending state.
    fn spawn_heads(self: &Arc<Self>, rt: &tokio::runtime::Handle, names: Vec<String>) {
        for name in names {
            let inner = Arc::clone(self);
            rt.spawn(async move {
                let guard = HeadGuard { inner: Arc::clone(&inner), name };
                // At most `max_in_flight` requests at once, as for block fetches: a manifest
                // of 50,000 shards must not open 50,000 connections (EMFILE, or SlowDown).
                let _permit = inner.permits.acquire().await;
                if let Ok(Some(n)) = inner.head(&guard.name).await {
                    let mut s = inner.lock_sizes();
                    if s.pending.remove(&guard.name) {
                        s.known.insert(guard.name.clone(), n);
                    }
                }
            });
        }
    }

    /// Checks the cached blocks of `name` against the manifest's checksum, once, before the
    /// first of them is served: when every block of its committed bytes is cached, their
    /// stored crc32c values are combined (no block is read but one that also holds bytes past
    /// the committed length); on a mismatch every cached block of the file is removed, so
    /// that they are fetched from the store.
    fn check_cached_shard(&self, name: &str, cache: &DiskCache) {
        let mut checks = self.lock_checks();
        let Some(&e) = checks.expect.get(name) else { return };
        let state = checks.files.entry(name.to_string()).or_default();
        if state.cache_checked || state.verified {
            return;
        }
        state.cache_checked = true;
        let bs = self.opts.block_size.max(1);
        let n = e.committed.div_ceil(bs);
        let mut crc = 0u32;
        for id in 0..n {
            let start = id * bs;
            let part = (e.committed - start).min(bs);
            let block = if part == bs {
                cache.trailer(name, id, bs)
            } else {
                // The last committed block: a shorter object ends here, a longer one (bytes
                // past the commit) needs its committed part's crc from its bytes.
                cache.trailer(name, id, part).or_else(|| {
                    let size = self.lock_sizes().known.get(name).copied()?;
                    let len = (size.min(start + bs)).checked_sub(start)?;
                    let (bytes, _) = cache.get(name, id, len)?;
                    bytes.get(..part as usize).map(crc32c::crc32c)
                })
            };
            let Some(b) = block else { return };
            crc = if id == 0 { b } else { crc32c::crc32c_combine(crc, b, part as usize) };
        }
        if crc == e.checksum {
            state.verified = true;
            return;
        }
        log::warn!(
            "the cached blocks of {} have crc32c {crc:#010x}, its manifest commits {:#010x}: fetching them again",
            self.object_url(name),
            e.checksum
        );
        for id in 0..n {
            cache.remove(name, id);
        }
    }

    /// Records the crc32c `crc` of block `id` (`bytes`, starting at byte `start` of `name`)
    /// for the check against the manifest; when every committed block is recorded, checks
    /// them. Returns the blocks to drop: cached ones that failed the check (removed from the
    /// cache; they are fetched again).
    fn record_block(
        &self,
        name: &str,
        id: u64,
        start: u64,
        bytes: &[u8],
        crc: u32,
        from_cache: bool,
    ) -> Vec<u64> {
        let mut checks = self.lock_checks();
        let Some(&e) = checks.expect.get(name) else { return Vec::new() };
        let state = checks.files.entry(name.to_string()).or_default();
        if state.verified || state.mismatch.is_some() || start >= e.committed {
            return Vec::new();
        }
        let end = start + bytes.len() as u64;
        let part = if end <= e.committed {
            crc
        } else {
            crc32c::crc32c(&bytes[..(e.committed.saturating_sub(start)) as usize])
        };
        state.crcs.insert(id, (part, from_cache));
        let bs = self.opts.block_size.max(1);
        let n = e.committed.div_ceil(bs);
        if (state.crcs.len() as u64) < n || !(0..n).all(|i| state.crcs.contains_key(&i)) {
            return Vec::new();
        }
        let mut found = 0u32;
        for (&i, &(c, _)) in state.crcs.range(0..n) {
            let len = (e.committed - i * bs).min(bs);
            found = if i == 0 { c } else { crc32c::crc32c_combine(found, c, len as usize) };
        }
        if found == e.checksum {
            state.verified = true;
            state.crcs.clear();
            return Vec::new();
        }
        let cached: Vec<u64> = state.crcs.iter().filter(|(_, &(_, c))| c).map(|(&i, _)| i).collect();
        if cached.is_empty() {
            // The store's own bytes differ from what the manifest commits.
            state.mismatch = Some(found);
            state.crcs.clear();
            if let Some(c) = &self.cache {
                for i in 0..n {
                    c.remove(name, i);
                }
            }
            return Vec::new();
        }
        log::warn!(
            "the blocks of {} have crc32c {found:#010x}, its manifest commits {:#010x}: fetching the cached ones again",
            self.object_url(name),
            e.checksum
        );
        for i in &cached {
            state.crcs.remove(i);
            if let Some(c) = &self.cache {
                c.remove(name, *i);
            }
        }
        cached
    }

    /// Starts fetches of the blocks `ids` (ascending) of `name` (`size` bytes) that are neither
    /// in memory nor in flight, as runs of blocks at most [`RemoteOptions::coalesce_gap`]
    /// apart. Readahead (`ahead`) takes at most [`RemoteOptions::max_readahead_bytes`] in
    /// flight, and never more than half the memory for blocks (blocks fetched ahead must
    /// still be there when their batch comes); a run that does not fit, or comes while older
    /// ones wait, waits in [`Blocks::deferred`] until the fetches in flight end.
    fn start_runs(
        self: &Arc<Self>,
        b: &mut Blocks,
        rt: &tokio::runtime::Handle,
        name: &Arc<str>,
        size: u64,
        ids: impl Iterator<Item = u64>,
        how: Run,
    ) {
        let ahead = how != Run::Demand;
        let bs = self.opts.block_size.max(1);
        let gap = self.opts.coalesce_gap / bs;
        let limit = self.opts.max_readahead_bytes.min(self.opts.memory_bytes / 2);
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
            let bytes = (run.end * bs).min(size) - run.start * bs;
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
                self.stats.bytes_prefetched.fetch_add(bytes, Ordering::Relaxed);
            }
            for id in run.clone() {
                b.map.insert((name.clone(), id), Slot::Pending);
            }
            rt.spawn(Arc::clone(self).fetch_run(name.clone(), size, run, ahead.then_some(bytes)));
        }
    }

    /// Starts the deferred readahead runs that fit now, oldest first (blocks read or fetched
    /// since they were hinted are left out).
    fn start_deferred(self: &Arc<Self>, b: &mut Blocks, rt: &tokio::runtime::Handle) {
        let bs = self.opts.block_size.max(1);
        let limit = self.opts.max_readahead_bytes.min(self.opts.memory_bytes / 2);
        while let Some((name, size, run)) = b.deferred.front().cloned() {
            let bytes = (run.end * bs).min(size) - run.start * bs;
            if b.readahead_bytes.saturating_add(bytes) > limit {
                break;
            }
            b.deferred.pop_front();
            self.start_runs(b, rt, &name, size, run, Run::Deferred);
        }
    }

    /// The error of file `name` when its store's bytes failed the manifest's checksum.
    fn check_error(&self, name: &str, path: PathBuf) -> Result<()> {
        let checks = self.lock_checks();
        match (checks.expect.get(name), checks.files.get(name).and_then(|f| f.mismatch)) {
            (Some(e), Some(found)) => {
                Err(StorageError::ChecksumMismatch { shard: e.shard, path, expected: e.checksum, found })
            }
            _ => Ok(()),
        }
    }

    /// Writes `bytes` as object `name` (one `PUT`, retried) on the runtime `rt`.
    fn put(&self, rt: &tokio::runtime::Handle, name: &str, bytes: Bytes) -> Result<()> {
        check_name(name)?;
        let path = self.object(name);
        let r = rt.block_on(self.retry("put", name, None, || {
            let payload = PutPayload::from_bytes(bytes.clone());
            let path = path.clone();
            async move { self.store.put(&path, payload).await.map(drop).map_err(|e| classify(&e)) }
        }));
        self.forget(name);
        r.map_err(|f| f.error())
    }

    /// Drops what is known about `name` (its length, its blocks in memory, its check).
    fn forget(&self, name: &str) {
        {
            let mut s = self.lock_sizes();
            s.known.remove(name);
            s.pending.remove(name);
        }
        self.sized.notify_all();
        self.lock_checks().files.remove(name);
        let mut b = self.lock_blocks();
        let keys: Vec<BlockKey> = b.map.keys().filter(|(n, _)| &**n == name).cloned().collect();
        for k in keys {
            if let Some(Slot::Ready { bytes, tick }) = b.map.remove(&k) {
                b.lru.remove(&tick);
                b.ready_bytes -= bytes.len() as u64;
            }
        }
    }

    /// The object of file `name` (checked by [`check_name`]); a name with `/` (a file in a
    /// sub-directory, as an MDS index may name) is that many path parts.
    fn object(&self, name: &str) -> ObjPath {
        name.split('/')
            .filter(|p| !p.is_empty() && *p != ".")
            .fold(self.prefix.clone(), |p, part| p.child(part))
    }

    fn object_url(&self, name: &str) -> String {
        format!("{}/{name}", self.url)
    }

    /// A wait in `[0, bound]`, drawn from a per-directory sequence.
    fn jittered(&self, bound: Duration) -> Duration {
        let n = self.jitter.fetch_add(1, Ordering::Relaxed);
        let x = xxhash_rust::xxh3::xxh3_64(&n.to_le_bytes());
        bound.mul_f64((x >> 11) as f64 / (1u64 << 53) as f64)
    }

    /// Runs `attempt` until it succeeds, fails for good, or the retries are spent.
    async fn retry<T, F, Fut>(
        &self,
        op: &'static str,
        name: &str,
        range: Option<Range<u64>>,
        mut attempt: F,
    ) -> std::result::Result<T, Failure>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = std::result::Result<T, Attempt>>,
    {
        let policy = &self.opts.retry;
        let mut n = 0u32;
        loop {
            self.stats.requests.fetch_add(1, Ordering::Relaxed);
            let outcome = match tokio::time::timeout(policy.timeout, attempt()).await {
                Ok(r) => r,
                Err(_) => Err(Attempt::Retry(format!("no answer within {:?}", policy.timeout))),
            };
            n += 1;
            let fail =
                |cause| Failure { op, url: self.object_url(name), range: range.clone(), attempts: n, cause };
            match outcome {
                Ok(v) => return Ok(v),
                Err(Attempt::Fatal(cause)) => return Err(fail(cause)),
                Err(Attempt::Retry(cause)) if n > policy.max_retries => return Err(fail(cause)),
                Err(Attempt::Retry(cause)) => {
                    log::debug!(
                        "remote {op} {} attempt {n} failed: {cause}; retrying",
                        self.object_url(name)
                    );
                    self.stats.retries.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(self.jittered(policy.backoff_bound(n - 1))).await;
                }
            }
        }
    }

    /// Bytes `range` of `name`, exactly `range.end - range.start` of them.
    async fn get_range(&self, name: &str, range: Range<u64>) -> std::result::Result<Bytes, Failure> {
        let path = self.object(name);
        let want = range.end - range.start;
        self.retry("get", name, Some(range.clone()), || {
            let (path, range) = (path.clone(), range.clone());
            async move {
                let b = self.store.get_range(&path, range).await.map_err(|e| classify(&e))?;
                self.stats.bytes_fetched.fetch_add(b.len() as u64, Ordering::Relaxed);
                if b.len() as u64 != want {
                    return Err(Attempt::Retry(format!(
                        "the body held {} bytes, {want} were asked for",
                        b.len()
                    )));
                }
                Ok(b)
            }
        })
        .await
    }

    /// Fetches blocks `run` of `name` (`size` bytes): from the local cache where it has them,
    /// the rest with one ranged request; then marks them ready (or failed) and wakes readers.
    async fn fetch_run(self: Arc<Self>, name: Arc<str>, size: u64, run: Range<u64>, ahead: Option<u64>) {
        let mut guard =
            RunGuard { inner: Arc::clone(&self), name: name.clone(), run: run.clone(), ahead, armed: true };
        let bs = self.opts.block_size.max(1);
        let block_range = |id: u64| id * bs..((id + 1) * bs).min(size);
        if let Some(c) = &self.cache {
            self.check_cached_shard(&name, c);
        }
        // (block, bytes, crc32c, from the cache)
        let mut ready: Vec<(u64, Bytes, u32, bool)> = Vec::new();
        let mut todo: Vec<u64> = Vec::new();
        for id in run.clone() {
            let r = block_range(id);
            match self.cache.as_ref().and_then(|c| c.get(&name, id, r.end - r.start)) {
                Some((b, crc)) => {
                    self.stats.bytes_from_cache.fetch_add(b.len() as u64, Ordering::Relaxed);
                    // Ready at once: a reader waiting for this block does not wait for the
                    // rest of the run.
                    self.settle(&name, vec![(id, Bytes::from(b), crc, true)], block_range);
                }
                None => todo.push(id),
            }
        }
        let mut failure = None;
        if let (Some(&first), Some(&last)) = (todo.first(), todo.last()) {
            let range = block_range(first).start..block_range(last).end;
            let permit = self.permits.acquire().await;
            let fetched = self.get_range(&name, range.clone()).await;
            drop(permit);
            match fetched {
                Ok(all) => {
                    for id in first..=last {
                        let r = block_range(id);
                        let piece =
                            all.slice((r.start - range.start) as usize..(r.end - range.start) as usize);
                        let crc = crc32c::crc32c(&piece);
                        if let Some(c) = &self.cache {
                            c.put(&name, id, &piece, crc);
                        }
                        ready.push((id, piece, crc, false));
                    }
                }
                Err(f) => failure = Some(f),
            }
        }
        self.settle(&name, ready, block_range);
        let mut b = self.lock_blocks();
        if let Some(f) = failure {
            for id in run {
                let key = (name.clone(), id);
                if matches!(b.map.get(&key), Some(Slot::Pending)) {
                    b.map.insert(key, Slot::Failed(f.clone()));
                }
            }
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
}

impl Inner {
    /// Marks the blocks `ready` (block, bytes, crc32c, whether from the cache) of `name`
    /// ready after recording them for the check against the manifest, drops the cached ones
    /// that failed it (a reader waiting for one finds it absent and asks the store), and wakes
    /// readers. `block_range` gives a block's byte range.
    fn settle(
        &self,
        name: &Arc<str>,
        ready: Vec<(u64, Bytes, u32, bool)>,
        block_range: impl Fn(u64) -> Range<u64>,
    ) {
        if ready.is_empty() {
            return;
        }
        let mut dropped = Vec::new();
        for (id, bytes, crc, from_cache) in &ready {
            dropped.extend(self.record_block(name, *id, block_range(*id).start, bytes, *crc, *from_cache));
        }
        let mut b = self.lock_blocks();
        for (id, bytes, _, _) in ready {
            b.set_ready((name.clone(), id), bytes);
        }
        for id in dropped {
            let key = (name.clone(), id);
            if let Some(Slot::Ready { bytes, tick }) = b.map.remove(&key) {
                b.lru.remove(&tick);
                b.ready_bytes -= bytes.len() as u64;
            }
        }
        b.evict_to(self.opts.memory_bytes);
        drop(b);
        self.arrived.notify_all();
    }
}

/// Ends the background `LIST` started by a manifest read, however it ends: the names it
/// still holds (not found by the listing and not yet handed to their `HEAD`s) are no longer
/// pending, and [`StorageDir::file_len`] callers waiting for them wake (and ask themselves).
struct ListGuard {
    inner: Arc<Inner>,
    names: Vec<String>,
}

impl Drop for ListGuard {
    fn drop(&mut self) {
        if self.names.is_empty() {
            return;
        }
        let mut s = self.inner.lock_sizes();
        for n in &self.names {
            s.pending.remove(n);
        }
        drop(s);
        self.inner.sized.notify_all();
    }
}

/// Ends a background `HEAD` started by a manifest read, however it ends: the file is no
/// longer pending, and [`StorageDir::file_len`] callers waiting for it wake.
struct HeadGuard {
    inner: Arc<Inner>,
    name: String,
}

impl Drop for HeadGuard {
    fn drop(&mut self) {
        self.inner.lock_sizes().pending.remove(&self.name);
        self.inner.sized.notify_all();
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
        let bs = self.inner.opts.block_size.max(1);
        let failure = Failure {
            op: "get",
            url: self.inner.object_url(&self.name),
            range: Some(self.run.start * bs..self.run.end * bs),
            attempts: 0,
            cause: "the fetch ended before it finished (it panicked or the store was shut down)".into(),
        };
        let mut b = self.inner.lock_blocks();
        for id in self.run.clone() {
            let key = (self.name.clone(), id);
            if matches!(b.map.get(&key), Some(Slot::Pending)) {
                b.map.insert(key, Slot::Failed(failure.clone()));
            }
        }
        if let Some(n) = self.ahead {
            b.readahead_bytes = b.readahead_bytes.saturating_sub(n);
        }
        drop(b);
        self.inner.arrived.notify_all();
    }
}

impl StorageDir for RemoteDir {
    /// The URL, as a path (`s3://bucket/prefix`): messages name files as `URL/name`.
    fn path(&self) -> &Path {
        &self.label
    }

    /// One `HEAD` per file, kept for the directory's life (committed bytes never change).
    /// Reading the manifest starts the `HEAD`s of every file it names at once; this waits for
    /// the file's, and asks again itself when that one found nothing or failed (so a missing
    /// object or a failed request is reported here, as without the early `HEAD`).
    fn file_len(&self, name: &str) -> Result<Option<u64>> {
        check_name(name)?;
        let inner = &self.inner;
        {
            let mut s = inner.lock_sizes();
            loop {
                if let Some(&n) = s.known.get(name) {
                    return Ok(Some(n));
                }
                if !s.pending.contains(name) {
                    break;
                }
                s = inner.sized.wait(s).unwrap_or_else(PoisonError::into_inner);
            }
        }
        let size = self.rt().block_on(inner.head(name)).map_err(|f| f.error())?;
        if let Some(n) = size {
            inner.lock_sizes().known.insert(name.to_string(), n);
        }
        Ok(size)
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
        let mut sizes = inner.lock_sizes();
        for o in &listed.objects {
            if let Some(name) = o.location.filename() {
                sizes.known.insert(name.to_string(), o.size);
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
        let ids = self.block_ids(size, std::iter::once(offset..offset + len));
        let blocks = self.blocks(name, size, &ids)?;
        self.copy_out(&blocks, offset, out);
        self.inner.stats.bytes_delivered.fetch_add(len, Ordering::Relaxed);
        Ok(())
    }

    /// One `GET` of the whole object. With a local cache the manifest is fetched only when
    /// its entity tag changed (`If-None-Match`: an unchanged manifest costs no body bytes).
    fn read_file(&self, name: &str, max_len: u64) -> Result<Option<Vec<u8>>> {
        check_name(name)?;
        let inner = &self.inner;
        let path = inner.object(name);
        let cached = if name == crate::MANIFEST_FILE {
            inner.cache.as_ref().and_then(DiskCache::manifest)
        } else {
            None
        };
        let got = self.rt().block_on(inner.retry("get", name, None, || {
            let path = path.clone();
            let if_none_match = cached.as_ref().map(|(etag, _)| etag.clone());
            async move {
                let opts = GetOptions { if_none_match, ..GetOptions::default() };
                match inner.store.get_opts(&path, opts).await {
                    Ok(r) => {
                        let etag = r.meta.e_tag.clone();
                        let size = r.meta.size;
                        let b = r.bytes().await.map_err(|e| classify(&e))?;
                        inner.stats.bytes_fetched.fetch_add(b.len() as u64, Ordering::Relaxed);
                        if b.len() as u64 != size {
                            return Err(Attempt::Retry(format!(
                                "the body held {} bytes, the object {size}",
                                b.len()
                            )));
                        }
                        Ok(Some((Some(b), etag)))
                    }
                    Err(object_store::Error::NotModified { .. }) => Ok(Some((None, None))),
                    Err(object_store::Error::NotFound { .. }) => Ok(None),
                    Err(e) => Err(classify(&e)),
                }
            }
        }));
        let Some((body, etag)) = got.map_err(|f| f.error())? else { return Ok(None) };
        let bytes = match body {
            Some(b) => {
                if let (Some(c), Some(etag), true) = (&inner.cache, etag, name == crate::MANIFEST_FILE) {
                    c.put_manifest(&etag, &b);
                }
                b.to_vec()
            }
            // Not modified: only asked with a cached copy.
            None => cached.map(|(_, b)| b).unwrap_or_default(),
        };
        if name == crate::MANIFEST_FILE {
            inner.learn_manifest(self.rt().handle(), &bytes);
        }
        let keep = usize::try_from(max_len.saturating_add(1)).unwrap_or(usize::MAX).min(bytes.len());
        let mut bytes = bytes;
        bytes.truncate(keep);
        self.inner.stats.bytes_delivered.fetch_add(bytes.len() as u64, Ordering::Relaxed);
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
        let mut blocks: HashMap<usize, (u64, HashMap<u64, Bytes>)> = HashMap::new();
        let mut wanted = Vec::new();
        for (&f, ranges) in &per_file {
            let name = file_name(&files.get(f)?.path)?;
            let size = self.size_of(name)?;
            if let Some(r) = ranges.iter().find(|r| r.end > size) {
                return Err(StorageError::ShortRead {
                    path: self.label.join(name),
                    offset: r.start,
                    expected: r.end - r.start,
                    got: size.saturating_sub(r.start).min(r.end - r.start),
                });
            }
            let ids = self.block_ids(size, ranges.iter().cloned());
            self.request(&Arc::from(name), size, &ids, false);
            wanted.push((f, name, size, ids));
        }
        for (f, name, size, ids) in wanted {
            blocks.insert(f, (size, self.blocks(name, size, &ids)?));
        }
        let mut pos = 0usize;
        for r in requests {
            let n = r.len as usize;
            if n > 0 {
                self.copy_out(&blocks[&r.file].1, r.offset, &mut out[pos..pos + n]);
            }
            pos += n;
        }
        self.inner.stats.bytes_delivered.fetch_add(total, Ordering::Relaxed);
        Ok(())
    }

    /// Starts background fetches of the blocks `requests` lie in that are neither in memory
    /// nor in flight, within [`RemoteOptions::max_readahead_bytes`].
    fn prefetch(&self, files: &FileSet, requests: &[ReadRequest]) {
        let mut per_file: BTreeMap<usize, Vec<Range<u64>>> = BTreeMap::new();
        for r in requests {
            per_file.entry(r.file).or_default().push(r.offset..r.offset.saturating_add(r.len));
        }
        for (f, ranges) in per_file {
            let Ok(file) = files.get(f) else { continue };
            let Ok(name) = file_name(&file.path) else { continue };
            let Ok(size) = self.size_of(name) else { continue };
            let ids = self.block_ids(size, ranges.into_iter());
            self.request(&Arc::from(name), size, &ids, true);
        }
    }
}

/// A file of a [`RemoteDir`] opened for writing: its content in memory, put on `sync`.
#[derive(Debug)]
struct RemoteFile {
    inner: Arc<Inner>,
    rt: tokio::runtime::Handle,
    name: String,
    bytes: Vec<u8>,
    dirty: bool,
}

impl fmt::Debug for Inner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Inner").field("url", &self.url).finish_non_exhaustive()
    }
}

impl WriteFile for RemoteFile {
    fn len(&self) -> Result<u64> {
        Ok(self.bytes.len() as u64)
    }

    fn set_len(&mut self, len: u64) -> Result<()> {
        let len = usize::try_from(len).map_err(|_| StorageError::BatchTooLarge { bytes: len })?;
        self.bytes.resize(len, 0);
        self.dirty = true;
        Ok(())
    }

    fn write_all_at(&mut self, bytes: &[u8], offset: u64) -> Result<()> {
        let end = offset.saturating_add(bytes.len() as u64);
        let end = usize::try_from(end).map_err(|_| StorageError::BatchTooLarge { bytes: end })?;
        if self.bytes.len() < end {
            self.bytes.resize(end, 0);
        }
        self.bytes[end - bytes.len()..end].copy_from_slice(bytes);
        self.dirty = true;
        Ok(())
    }

    /// Puts the whole content as the object (nothing when unchanged since the last sync).
    fn sync(&mut self) -> Result<()> {
        if self.dirty {
            self.inner.put(&self.rt, &self.name, Bytes::from(self.bytes.clone()))?;
            self.dirty = false;
        }
        Ok(())
    }
}

/// The writer "lock" of a remote directory: object stores offer none here.
#[derive(Debug)]
struct NoLock;

/// Writes go to objects: a file is put whole on [`WriteFile::sync`], a rename is a copy and a
/// delete, the directory needs no creating and no sync, and there is no lock (one writer per
/// URL is the caller's duty).
impl WriteDir for RemoteDir {
    fn create_dir(&self) -> Result<()> {
        Ok(())
    }

    fn lock(&self) -> Result<Box<dyn fmt::Debug + Send + Sync>> {
        Ok(Box::new(NoLock))
    }

    /// Reads the object's current content when it exists (a `GET`), to be changed in memory.
    fn open_write(&self, name: &str, create: bool) -> Result<Box<dyn WriteFile>> {
        check_name(name)?;
        let bytes = match self.read_file(name, u64::MAX - 1)? {
            Some(b) => b,
            None if create => Vec::new(),
            None => {
                return Err(StorageError::io(
                    self.label.join(name),
                    std::io::Error::from(std::io::ErrorKind::NotFound),
                ))
            }
        };
        Ok(Box::new(RemoteFile {
            inner: Arc::clone(&self.inner),
            rt: self.rt().handle().clone(),
            name: name.to_string(),
            bytes,
            dirty: false,
        }))
    }

    /// Copies object `from` to `to` (atomic in the store), then deletes `from`.
    fn rename(&self, from: &str, to: &str) -> Result<()> {
        check_name(from)?;
        check_name(to)?;
        let inner = &self.inner;
        let (src, dst) = (inner.object(from), inner.object(to));
        let r = self.rt().block_on(inner.retry("copy", to, None, || {
            let (src, dst) = (src.clone(), dst.clone());
            async move { inner.store.copy(&src, &dst).await.map_err(|e| classify(&e)) }
        }));
        inner.forget(to);
        r.map_err(|f| f.error())?;
        self.delete(from)
    }

    fn sync_dir(&self) -> Result<()> {
        Ok(())
    }
}
