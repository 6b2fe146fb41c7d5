//! [`RemoteDir`]: a storage in an object store behind the [`StorageDir`] / [`WriteDir`] seam;
//! here the type, its store client and its runtime (its seams are in `read` and `write`).

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use object_store::{ObjectStore, ObjectStoreScheme, RetryConfig};

use super::cache::DiskCache;
use super::fetch::Inner;
use super::retry::chain;
use super::{RemoteOptions, RemoteStats};
#[cfg(doc)]
use crate::dir::{StorageDir, WriteDir, WriteFile};
use crate::{Result, StorageError};

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
/// says committed bytes never change; when a reader says which files it expects
/// ([`StorageDir::expect_files`]), the `HEAD`s of all of them start at once (one `LIST` of the
/// prefix instead when there are more than 64). A whole file read at once
/// ([`StorageDir::read_file`], as a manifest is) is kept in the local cache with its entity
/// tag and asked again with it (`If-None-Match`), so an unchanged one costs no body bytes.
///
/// Checksums: every cached block carries its own crc32c, checked when it is read. Beyond that,
/// the committed bytes of each file the reader expects are checked against the crc32c it
/// expects (the blocks' crc32c values combined, no byte read twice): before the first cached
/// block of a file is served when the cache holds all of them (a mismatch removes them, and
/// they are fetched again), and as blocks arrive otherwise. When the store's own bytes do not
/// match, every read of the file fails with [`StorageError::ChecksumMismatch`] naming the
/// shard and the object's URL.
///
/// The directory owns a tokio runtime (two worker threads) that runs the `object_store`
/// client; the [`StorageDir`] calls block the calling thread on it. Dropping the directory
/// shuts the runtime down without waiting: requests in flight are dropped.
///
/// As a [`WriteDir`] it writes a file as one object on [`WriteFile::sync`] (a `PUT` of its
/// whole content) and renames by copy and delete; a writer's commit puts the shard objects
/// first and the manifest last ([`WriteDir::replace_if`]), so a reader never sees a manifest
/// naming bytes that are not there. Every `PUT` of a writer is conditional: `If-Match` the
/// version of the object it read (`If-None-Match: *` for an object that was not there). There
/// is no lock ([`crate::DirLock::none`]): two writers may open one URL, and the second to put
/// an object the first has put since (a shard both append to, or the manifest) gets
/// [`StorageError::ConcurrentCommit`]; nothing the first committed is lost or overwritten.
/// That holds where the store answers conditional `PUT`s: S3 (object_store's default
/// `aws_conditional_put=etag`; AWS S3 and moto 5 do; an S3-compatible server that ignores
/// `If-Match` gives no such guarantee), GCS and Azure. Where it refuses them (`http(s)://`,
/// S3 with `aws_conditional_put=disabled`), objects are put after a comparison without a
/// condition, and one writer per URL at a time is the caller's duty.
pub struct RemoteDir {
    pub(super) inner: Arc<Inner>,
    pub(super) label: PathBuf,
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
    /// (`s3://`), names a scheme that is not an object store, an option is unknown, the
    /// client cannot be built, or the runtime or cache directory cannot be set up.
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
        // One builder of any store: our retries, then the options, then the client.
        macro_rules! build {
            ($builder:expr) => {{
                let mut b = $builder.with_retry(retry);
                for (k, v) in &options.store_options {
                    b = b.with_config(k.parse().map_err(|e| bad_key(k, e))?, v);
                }
                Arc::new(b.build().map_err(|e| open_error(&url, chain(&e)))?)
            }};
        }
        let store: Arc<dyn ObjectStore> = {
            let _guard = rt.enter();
            match scheme {
                ObjectStoreScheme::AmazonS3 => {
                    build!(object_store::aws::AmazonS3Builder::from_env().with_url(url.as_str()))
                }
                ObjectStoreScheme::GoogleCloudStorage => {
                    build!(object_store::gcp::GoogleCloudStorageBuilder::from_env().with_url(url.as_str()))
                }
                ObjectStoreScheme::MicrosoftAzure => {
                    build!(object_store::azure::MicrosoftAzureBuilder::from_env().with_url(url.as_str()))
                }
                ObjectStoreScheme::Http => {
                    let mut b =
                        object_store::http::HttpBuilder::new().with_url(&parsed[..url::Position::BeforePath]);
                    if parsed.scheme() == "http" {
                        b = b.with_config(object_store::ClientConfigKey::AllowHttp, "true");
                    }
                    build!(b)
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
        let inner = Arc::new(Inner::new(store, prefix, url, options, cache));
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
        self.inner.stats.snapshot()
    }

    /// The runtime the store's client runs on.
    pub(super) fn rt(&self) -> &tokio::runtime::Runtime {
        // Present from `open` until `drop`.
        self.rt.as_ref().expect("the runtime lives as long as the directory")
    }

    /// Checks that `name` is a plain file name (see [`crate::check_file_name`]).
    pub(super) fn check_name(&self, name: &str) -> Result<()> {
        crate::dir::check_file_name(&self.label, name)
    }

    /// The error for file `name` not existing.
    pub(super) fn not_found(&self, name: &str) -> StorageError {
        StorageError::io(self.label.join(name), std::io::Error::from(std::io::ErrorKind::NotFound))
    }
}
