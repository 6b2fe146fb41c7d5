//! The write seam of [`RemoteDir`]: [`WriteDir`] over objects (a file put whole on sync, a
//! rename as copy and delete, the commit's replace as a conditional put), and the directory's
//! own `put` and `delete`.

use std::sync::Arc;

use bytes::Bytes;
use object_store::{PutMode, PutOptions, PutPayload};

use super::fetch::{Inner, Whole};
use super::retry::classify;
use super::store::RemoteDir;
use crate::dir::{BufferedFile, DirLock, WriteDir, WriteFile};
use crate::{Result, StorageError};

/// Writes `bytes` as object `name` (a plain name, checked by the caller; one `PUT`, retried)
/// on the runtime `rt`, and forgets what was known of it.
fn put_object(inner: &Inner, rt: &tokio::runtime::Handle, name: &str, bytes: Bytes) -> Result<()> {
    let path = inner.object(name);
    let r = rt.block_on(inner.retry("put", name, None, || {
        let payload = PutPayload::from_bytes(bytes.clone());
        let path = path.clone();
        async move { inner.store.put(&path, payload).await.map(drop).map_err(|e| classify(&e)) }
    }));
    inner.forget(name);
    r.map_err(|f| f.error())
}

/// How a conditional put ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Conditional {
    /// The object was written.
    Done,
    /// The condition did not hold (another version is there, or one is there at all); after
    /// `attempts` attempts (more than one: an earlier one may have written it).
    Failed { attempts: u32 },
    /// The store does not do conditional puts.
    Unsupported,
}

impl RemoteDir {
    /// Writes `bytes` as object `name` (one `PUT`, retried).
    ///
    /// # Errors
    /// [`StorageError::UnsafeFile`] for a name that is not a plain file name;
    /// [`StorageError::Remote`] when the upload fails after its retries.
    pub fn put(&self, name: &str, bytes: Vec<u8>) -> Result<()> {
        self.check_name(name)?;
        put_object(&self.inner, self.rt().handle(), name, Bytes::from(bytes))
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

    /// Writes `bytes` as object `name` on the condition `mode` (one `PUT`, retried).
    fn put_if(&self, name: &str, mode: &PutMode, bytes: &Bytes) -> Result<Conditional> {
        let inner = &self.inner;
        let path = inner.object(name);
        let mut attempts = 0u32;
        let r = self.rt().block_on(inner.retry("put", name, None, || {
            attempts += 1;
            let tried = attempts;
            let (path, payload) = (path.clone(), PutPayload::from_bytes(bytes.clone()));
            let opts = PutOptions::from(mode.clone());
            async move {
                use object_store::Error as E;
                match inner.store.put_opts(&path, payload, opts).await {
                    Ok(_) => Ok(Conditional::Done),
                    Err(E::Precondition { .. } | E::AlreadyExists { .. }) => {
                        Ok(Conditional::Failed { attempts: tried })
                    }
                    Err(E::NotImplemented | E::NotSupported { .. }) => Ok(Conditional::Unsupported),
                    Err(e) => Err(classify(&e)),
                }
            }
        }));
        inner.forget(name);
        r.map_err(|f| f.error())
    }

    /// The whole object `name` and the version holding it, by one `GET` (not through the
    /// local cache); `None` when it does not exist.
    fn current(&self, name: &str) -> Result<Option<(Bytes, object_store::UpdateVersion)>> {
        match self.rt().block_on(self.inner.get_whole(name, None)).map_err(|f| f.error())? {
            Some(Whole::Body { bytes, version }) => Ok(Some((bytes, version))),
            // Asked without an entity tag: never "not modified".
            Some(Whole::NotModified) | None => Ok(None),
        }
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
    /// and put whole on [`WriteFile::sync`].
    fn open_write(&self, name: &str, create: bool) -> Result<Box<dyn WriteFile>> {
        self.check_name(name)?;
        let bytes = match self.current(name)? {
            Some((b, _)) => b.to_vec(),
            None if create => Vec::new(),
            None => return Err(self.not_found(name)),
        };
        let (inner, rt, object) = (Arc::clone(&self.inner), self.rt().handle().clone(), name.to_string());
        let publish = move |bytes: &[u8]| put_object(&inner, &rt, &object, Bytes::copy_from_slice(bytes));
        Ok(Box::new(BufferedFile::new(self.label.join(name), bytes, publish)))
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
    /// tag; `If-None-Match: *` when `expected` is `None`). A retried `PUT` that finds the
    /// condition failed because its own earlier attempt succeeded (the object holds `bytes`)
    /// counts as done. On a store without conditional puts the object is compared (a `HEAD`
    /// for `None`) and put unconditionally: one writer per URL is then the caller's duty.
    fn replace_if(&self, name: &str, expected: Option<&[u8]>, bytes: &[u8]) -> Result<()> {
        self.check_name(name)?;
        let conflict = || StorageError::ConcurrentCommit { path: self.label.join(name) };
        let mode = match expected {
            None => Some(PutMode::Create),
            Some(want) => match self.current(name)? {
                Some((now, version)) if now == want => {
                    // A store that names no version cannot put on a condition.
                    (version.e_tag.is_some() || version.version.is_some()).then_some(PutMode::Update(version))
                }
                _ => return Err(conflict()),
            },
        };
        let body = Bytes::copy_from_slice(bytes);
        let outcome = match &mode {
            Some(mode) => self.put_if(name, mode, &body)?,
            None => Conditional::Unsupported,
        };
        match outcome {
            Conditional::Done => Ok(()),
            Conditional::Failed { attempts }
                if attempts > 1 && self.current(name)?.is_some_and(|(b, _)| b == body) =>
            {
                Ok(())
            }
            Conditional::Failed { .. } => Err(conflict()),
            Conditional::Unsupported => {
                log::debug!(
                    "{} takes no conditional put: replacing {name} after a comparison only (one writer at a time)",
                    self.url()
                );
                if expected.is_none()
                    && self.rt().block_on(self.inner.head(name)).map_err(|f| f.error())?.is_some()
                {
                    return Err(conflict());
                }
                put_object(&self.inner, self.rt().handle(), name, body)
            }
        }
    }
}
