//! The write seam of [`RemoteDir`]: [`WriteDir`] over objects (a file put whole on sync, a
//! rename as copy and delete, the commit's replace as a conditional put), and the directory's
//! own `put` and `delete`.

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use object_store::{PutMode, PutOptions, PutPayload, UpdateVersion};

use super::fetch::{Inner, Whole};
use super::retry::{classify, classify_put, Attempt};
use super::store::RemoteDir;
use crate::dir::{BufferedFile, DirLock, WriteDir, WriteFile};
use crate::{Result, StorageError};

/// `m` locked, a poisoned lock taken as it is.
fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The bytes of one part of a multipart upload ([`RemoteDir::put_parts`]; 8 MiB: S3 takes
/// parts of at least 5 MiB but the last).
pub(crate) const UPLOAD_PART: u64 = 8 << 20;

/// Writes `bytes` as object `name` (a plain name, checked by the caller; one `PUT`, retried)
/// on the runtime `rt`, and forgets what was known of it.
fn put_object(inner: &Inner, rt: &tokio::runtime::Handle, name: &str, bytes: Bytes) -> Result<()> {
    let path = inner.object(name);
    let r = rt.block_on(inner.retry("put", name, None, || {
        let payload = PutPayload::from_bytes(bytes.clone());
        let path = path.clone();
        async move { inner.store.put(&path, payload).await.map(drop).map_err(|e| classify_put(&e)) }
    }));
    inner.forget(name);
    r.map_err(|f| f.error())
}

/// What a writer knows of the object it is about to replace: the condition of its next put.
#[derive(Debug, Clone)]
enum Version {
    /// There is none: put only if there still is none (`If-None-Match: *`).
    Absent,
    /// This version: put only if it is still the one there (`If-Match`).
    At(UpdateVersion),
    /// Not known (the store names no versions, or takes no conditional put): put without a
    /// condition (one writer at a time is the caller's duty).
    Unknown,
}

impl Version {
    /// The version of a `GET`'s or `PUT`'s answer.
    fn of(v: UpdateVersion) -> Self {
        if v.e_tag.is_some() || v.version.is_some() {
            Version::At(v)
        } else {
            Version::Unknown
        }
    }
}

/// Puts `bytes` as object `name` (at `path` in messages) on the condition `at` names, then
/// sets `at` to the version put. A retried `PUT` that finds its condition failed because its
/// own earlier attempt succeeded (the object holds `bytes`) counts as done. On a store that
/// takes no conditional put, the object is put without one (after a `HEAD` when `at` is
/// [`Version::Absent`]).
///
/// # Errors
/// [`StorageError::ConcurrentCommit`] naming `path` when the condition does not hold;
/// [`StorageError::Remote`] when a request fails after its retries.
fn put_versioned(
    inner: &Inner,
    rt: &tokio::runtime::Handle,
    path: &Path,
    name: &str,
    at: &mut Version,
    bytes: Bytes,
) -> Result<()> {
    use object_store::Error as E;
    let conflict = || StorageError::ConcurrentCommit { path: path.to_path_buf() };
    let mode = match at {
        Version::Absent => PutMode::Create,
        Version::At(v) => PutMode::Update(v.clone()),
        Version::Unknown => {
            put_object(inner, rt, name, bytes)?;
            return Ok(());
        }
    };
    let object = inner.object(name);
    let mut attempts = 0u32;
    let r = rt.block_on(inner.retry("put", name, None, || {
        attempts += 1;
        let tried = attempts;
        let (object, payload) = (object.clone(), PutPayload::from_bytes(bytes.clone()));
        let opts = PutOptions::from(mode.clone());
        async move {
            match inner.store.put_opts(&object, payload, opts).await {
                Ok(done) => Ok(Ok(Version::of(done.into()))),
                Err(E::Precondition { .. } | E::AlreadyExists { .. }) => Ok(Err(Some(tried))),
                Err(E::NotImplemented | E::NotSupported { .. }) => Ok(Err(None)),
                Err(e) => Err(classify_put(&e)),
            }
        }
    }));
    inner.forget(name);
    match r.map_err(|f| f.error())? {
        Ok(now) => *at = now,
        Err(Some(tried)) => match current(inner, rt, name, bytes.len() as u64)? {
            Some((now, v)) if tried > 1 && now == bytes => *at = Version::of(v),
            _ => return Err(conflict()),
        },
        Err(None) => {
            log::debug!(
                "{} takes no conditional put: {name} is put without one (one writer at a time)",
                inner.url
            );
            if matches!(at, Version::Absent)
                && rt.block_on(inner.head(name)).map_err(|f| f.error())?.is_some()
            {
                return Err(conflict());
            }
            put_object(inner, rt, name, bytes)?;
            *at = Version::Unknown;
        }
    }
    Ok(())
}

/// The object `name` (its first `max_len + 1` bytes at most) and the version holding it, by
/// one `GET` (not through the local cache); `None` when it does not exist.
fn current(
    inner: &Inner,
    rt: &tokio::runtime::Handle,
    name: &str,
    max_len: u64,
) -> Result<Option<(Bytes, UpdateVersion)>> {
    match rt.block_on(inner.get_whole(name, None, max_len)).map_err(|f| f.error())? {
        Some(Whole::Body { bytes, version, .. }) => Ok(Some((bytes, version))),
        // Asked without an entity tag: never "not modified".
        Some(Whole::NotModified) | None => Ok(None),
    }
}

impl RemoteDir {
    /// Every object under the directory `under` of this one (a name relative to it; `""`:
    /// all of it), at any depth, as `(name, length)` with names relative to this directory,
    /// sorted by name: one paged `LIST` without a delimiter, retried.
    ///
    /// # Errors
    /// [`StorageError::UnsafeFile`] for an `under` that is not a plain relative name;
    /// [`StorageError::Remote`] when the listing fails after its retries.
    pub fn list_tree(&self, under: &str) -> Result<Vec<(String, u64)>> {
        if !under.is_empty() {
            self.check_name(under)?;
        }
        let mut out = self.rt().block_on(self.inner.list_tree(under)).map_err(|f| f.error())?;
        out.sort();
        Ok(out)
    }

    /// Writes `bytes` as object `name` (one `PUT`, retried).
    ///
    /// # Errors
    /// [`StorageError::UnsafeFile`] for a name that is not a plain file name;
    /// [`StorageError::Remote`] when the upload fails after its retries.
    pub fn put(&self, name: &str, bytes: Vec<u8>) -> Result<()> {
        self.check_name(name)?;
        put_object(&self.inner, self.rt().handle(), name, Bytes::from(bytes))
    }

    /// Writes object `name` of `len` bytes read by `read` (`read(offset, buf)` fills `buf`
    /// with the bytes at `offset`), in parts of [`UPLOAD_PART`] bytes: one `PUT` when it fits
    /// one part, a multipart upload otherwise (one part in memory at a time; the object
    /// appears only when the upload completes). `verify` runs after the last byte is read and
    /// before the object is completed: its error aborts the upload, and nothing is put. A
    /// failed multipart upload is aborted and started again from its first byte, within the
    /// directory's retries.
    ///
    /// # Errors
    /// [`StorageError::UnsafeFile`] for a name that is not a plain file name; the errors of
    /// `read` and `verify`; [`StorageError::Remote`] when the upload fails after its retries.
    pub(crate) fn put_parts(
        &self,
        name: &str,
        len: u64,
        read: &mut dyn FnMut(u64, &mut [u8]) -> Result<()>,
        verify: &mut dyn FnMut() -> Result<()>,
    ) -> Result<()> {
        self.check_name(name)?;
        let inner = &self.inner;
        if len <= UPLOAD_PART {
            let mut buf = vec![0u8; len as usize];
            read(0, &mut buf)?;
            verify()?;
            return put_object(inner, self.rt().handle(), name, Bytes::from(buf));
        }
        let path = inner.object(name);
        let local = std::sync::Mutex::new((read, verify));
        let failed: std::sync::Mutex<Option<StorageError>> = std::sync::Mutex::new(None);
        let r = self.rt().block_on(inner.retry("put", name, None, || {
            let (path, local, failed) = (path.clone(), &local, &failed);
            async move {
                let mut up = inner.store.put_multipart(&path).await.map_err(|e| classify(&e))?;
                let outcome = async {
                    let stop = |e: StorageError| {
                        let why = e.to_string();
                        *lock(failed) = Some(e);
                        Attempt::Fatal(why)
                    };
                    let mut off = 0u64;
                    while off < len {
                        let n = (len - off).min(UPLOAD_PART);
                        let mut buf = vec![0u8; n as usize];
                        let got = (lock(local).0)(off, &mut buf);
                        got.map_err(stop)?;
                        up.put_part(PutPayload::from(Bytes::from(buf))).await.map_err(|e| classify(&e))?;
                        off += n;
                    }
                    let checked = (lock(local).1)();
                    checked.map_err(stop)?;
                    up.complete().await.map(drop).map_err(|e| classify(&e))
                }
                .await;
                if outcome.is_err() {
                    let _ = up.abort().await;
                }
                outcome
            }
        }));
        inner.forget(name);
        if let Some(e) = lock(&failed).take() {
            return Err(e);
        }
        r.map_err(|f| f.error())
    }

    /// Removes object `name` (retried; a missing object is not an error).
    ///
    /// # Errors
    /// As [`RemoteDir::put`].
    pub fn delete(&self, name: &str) -> Result<()> {
        self.check_name(name)?;
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
}

/// Writes go to objects: a file is put whole on [`WriteFile::sync`], a rename is a copy and a
/// delete, the directory needs no creating and no sync, there is no lock, and
/// [`WriteDir::replace_if`] is a conditional put.
impl WriteDir for RemoteDir {
    fn create_dir(&self) -> Result<()> {
        Ok(())
    }

    /// [`DirLock::none`]: object stores have no lock; a second writer's commit is refused by
    /// [`WriteDir::replace_if`] instead (see [`RemoteDir`]).
    fn lock(&self) -> Result<DirLock> {
        Ok(DirLock::none())
    }

    /// Reads the object's current content when it exists (a `GET`), to be changed in memory
    /// and put whole on [`WriteFile::sync`], on the condition that the object is still the
    /// version read (or, for a new one, that there is still none): a second writer's sync of
    /// an object the first has put since gets [`StorageError::ConcurrentCommit`], and never
    /// overwrites bytes another writer committed.
    fn open_write(&self, name: &str, create: bool) -> Result<Box<dyn WriteFile>> {
        self.check_name(name)?;
        // Whole: this writer changes the object in memory (the store's length bounds it).
        let (bytes, mut at) = match current(&self.inner, self.rt().handle(), name, u64::MAX)? {
            Some((b, v)) => (b.to_vec(), Version::of(v)),
            None if create => (Vec::new(), Version::Absent),
            None => return Err(self.not_found(name)),
        };
        let (inner, rt, object, path) =
            (Arc::clone(&self.inner), self.rt().handle().clone(), name.to_string(), self.label.join(name));
        let label = path.clone();
        let publish = move |bytes: &[u8]| {
            put_versioned(&inner, &rt, &label, &object, &mut at, Bytes::copy_from_slice(bytes))
        };
        Ok(Box::new(BufferedFile::new(path, bytes, publish)))
    }

    /// Copies object `from` to `to` (atomic in the store), then deletes `from`.
    fn rename(&self, from: &str, to: &str) -> Result<()> {
        self.check_name(from)?;
        self.check_name(to)?;
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

    /// A `GET` of the object (when `expected` is `Some`), compared with `expected`, then a
    /// `PUT` on the condition that the object is still that version (`If-Match` its entity
    /// tag; `If-None-Match: *` when `expected` is `None`). On a store without conditional
    /// puts the object is compared (a `HEAD` for `None`) and put unconditionally: one writer
    /// per URL is then the caller's duty.
    fn replace_if(&self, name: &str, expected: Option<&[u8]>, bytes: &[u8]) -> Result<()> {
        self.check_name(name)?;
        let (inner, rt, path) = (&self.inner, self.rt().handle(), self.label.join(name));
        let mut at = match expected {
            None => Version::Absent,
            Some(want) => match current(inner, rt, name, want.len() as u64)? {
                Some((now, version)) if now == want => Version::of(version),
                _ => return Err(StorageError::ConcurrentCommit { path }),
            },
        };
        put_versioned(inner, rt, &path, name, &mut at, Bytes::copy_from_slice(bytes))
    }
}
