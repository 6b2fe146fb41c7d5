//! The one safe way storage files are named and opened on the local file system: plain
//! relative names only ([`resolve`]), never through a symbolic link or into a FIFO
//! ([`open_regular`]), lengths of regular files only ([`regular_len`]), and exact positional
//! reads ([`read_exact_at`]).
//!
//! A leaf module: it depends on nothing of the crate but [`crate::StorageError`], so the
//! directory seam ([`crate::dir`]), the I/O backends ([`crate::io`]), the writer lock and the
//! remote cache all open files through it without depending on each other.

use std::fs::File;
use std::path::{Component, Path, PathBuf};

use crate::{Result, StorageError};

/// The last component of `path` as text.
pub(crate) fn file_name(path: &Path) -> Result<&str> {
    path.file_name().and_then(|n| n.to_str()).ok_or_else(|| {
        StorageError::io(
            path,
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "the path does not end in a UTF-8 file name",
            ),
        )
    })
}

/// The name of the file at `path` relative to the storage directory `dir` (what
/// [`crate::StorageDir`] methods take): `path` with `dir` stripped, which keeps the directories
/// of a shard committed from a part (`_parts/job/000000-0/shard-00000.stream`); the last
/// component when `path` is not below `dir`.
///
/// # Errors
/// [`StorageError::Io`] when the name is not UTF-8.
pub(crate) fn name_in<'a>(dir: &Path, path: &'a Path) -> Result<&'a str> {
    match path.strip_prefix(dir) {
        Ok(rel) if !rel.as_os_str().is_empty() => rel.to_str().ok_or_else(|| {
            StorageError::io(
                path,
                std::io::Error::new(std::io::ErrorKind::InvalidInput, "the path is not UTF-8"),
            )
        }),
        _ => file_name(path),
    }
}

/// Checks that no directory between the storage directory `dir` and the file `name` (a plain
/// relative name, [`resolve`]) is a symbolic link or anything but a directory, so that a name
/// with directories (a shard committed from a part) is never followed out of the storage.
/// `checked` holds the directories (relative names) already found good and gets the new ones;
/// a directory that does not exist ends the walk (the file is then missing, reported by its
/// reader).
///
/// # Errors
/// [`StorageError::UnsafeFile`] naming the directory that is a link or not a directory;
/// [`StorageError::Io`] when one cannot be examined.
pub(crate) fn check_no_links(
    dir: &Path,
    name: &str,
    checked: &mut std::collections::HashSet<String>,
) -> Result<()> {
    let mut end = 0;
    while let Some(slash) = name[end..].find('/') {
        end += slash;
        let prefix = &name[..end];
        end += 1;
        if checked.contains(prefix) {
            continue;
        }
        let path = dir.join(prefix);
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.file_type().is_dir() => {
                checked.insert(prefix.to_string());
            }
            Ok(m) if m.file_type().is_symlink() => {
                return Err(StorageError::UnsafeFile {
                    path,
                    reason: "a directory of a shard path is a symbolic link (links are never followed out of the storage)".into(),
                })
            }
            Ok(m) => return Err(StorageError::not_regular(&path, m.file_type())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(StorageError::io(&path, e)),
        }
    }
    Ok(())
}

/// `dir/name` when `name` names a file inside `dir`: a non-empty relative path of plain
/// components (no `..`, no root, no NUL or backslash). Every file a [`crate::LocalDir`] reads or
/// writes is named through here, so no name (from a manifest, an index, a caller) leaves the
/// storage.
///
/// # Errors
/// [`StorageError::UnsafeFile`] naming the file otherwise.
pub(crate) fn resolve(dir: &Path, name: &str) -> Result<PathBuf> {
    if !plain_name(name) {
        return Err(StorageError::UnsafeFile {
            path: dir.join(name),
            reason: "the name leaves the storage directory (only plain relative names are used)".into(),
        });
    }
    Ok(dir.join(name))
}

/// Whether `name` is a non-empty relative path of plain components (no `..`, no root, no NUL
/// or backslash): the names [`resolve`] accepts.
pub(crate) fn plain_name(name: &str) -> bool {
    !name.is_empty()
        && !name.contains(['\0', '\\'])
        && Path::new(name).components().all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
}

/// The length of the regular file at `path` (not following a final symbolic link);
/// `Ok(None)` when nothing is there.
///
/// # Errors
/// [`StorageError::UnsafeFile`] when something other than a regular file is there (a link,
/// a FIFO, a directory); [`StorageError::Io`] when it cannot be examined.
pub(crate) fn regular_len(path: &Path) -> Result<Option<u64>> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_file() => Ok(Some(m.len())),
        Ok(m) => Err(StorageError::not_regular(path, m.file_type())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(StorageError::io(path, e)),
    }
}

/// How [`open_regular`] opens a file.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Access {
    /// Read only; `direct` adds `O_DIRECT` (Linux).
    Read {
        /// Open with `O_DIRECT`.
        direct: bool,
    },
    /// Read and write, never truncating; `create` creates a missing file.
    Write {
        /// Create the file when it is missing.
        create: bool,
    },
}

/// Opens the file at `path` the one way every storage file is opened: without following a
/// final symbolic link (`O_NOFOLLOW`), without blocking on a FIFO (`O_NONBLOCK` until the
/// type is checked), and only when the opened file is a regular file (and, for writing, has
/// no other hard link, so a write cannot reach a file outside the storage). `Ok(None)` when
/// the file does not exist (and is not to be created).
///
/// # Errors
/// [`StorageError::UnsafeFile`] naming the file when it is a link, FIFO, directory, device or
/// socket, or a hard-linked file opened for writing; [`StorageError::Io`] when it cannot be
/// opened.
pub(crate) fn open_regular(path: &Path, access: Access) -> Result<Option<File>> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    use std::os::unix::io::AsRawFd;
    let mut o = std::fs::OpenOptions::new();
    let mut flags = libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC;
    match access {
        Access::Read { direct } => {
            o.read(true);
            if direct {
                #[cfg(target_os = "linux")]
                {
                    flags |= libc::O_DIRECT;
                }
                #[cfg(not(target_os = "linux"))]
                return Err(StorageError::io(
                    path,
                    std::io::Error::new(std::io::ErrorKind::Unsupported, "O_DIRECT is Linux-only here"),
                ));
            }
        }
        Access::Write { create } => {
            o.read(true).write(true).create(create).truncate(false);
        }
    }
    o.custom_flags(flags);
    let file = match o.open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(StorageError::UnsafeFile {
                path: path.to_path_buf(),
                reason: "it is a symbolic link (links are never followed)".into(),
            })
        }
        // A FIFO without a reader (write) or a socket.
        Err(e) if e.raw_os_error() == Some(libc::ENXIO) => {
            return Err(StorageError::UnsafeFile {
                path: path.to_path_buf(),
                reason: "it is a FIFO, socket or device, not a regular file".into(),
            })
        }
        Err(e) => return Err(StorageError::io(path, e)),
    };
    let meta = file.metadata().map_err(|e| StorageError::io(path, e))?;
    if !meta.file_type().is_file() {
        return Err(StorageError::not_regular(path, meta.file_type()));
    }
    if matches!(access, Access::Write { .. }) && meta.nlink() > 1 {
        return Err(StorageError::UnsafeFile {
            path: path.to_path_buf(),
            reason: format!("it has {} hard links; writing would change the other names too", meta.nlink()),
        });
    }
    // Regular files never block; clear O_NONBLOCK anyway, since io_uring would otherwise
    // answer a read that needs the disk with EAGAIN instead of waiting for it.
    let fd = file.as_raw_fd();
    // SAFETY: `fd` is a descriptor `file` owns and keeps open for both calls; F_GETFL and
    // F_SETFL take and return plain integers and touch no memory.
    let cleared = unsafe {
        let fl = libc::fcntl(fd, libc::F_GETFL);
        fl >= 0 && libc::fcntl(fd, libc::F_SETFL, fl & !libc::O_NONBLOCK) == 0
    };
    if !cleared {
        return Err(StorageError::io(path, std::io::Error::last_os_error()));
    }
    Ok(Some(file))
}

/// [`open_regular`], with a missing file an [`StorageError::Io`] error of kind
/// [`std::io::ErrorKind::NotFound`].
pub(crate) fn open_existing(path: &Path, access: Access) -> Result<File> {
    open_regular(path, access)?
        .ok_or_else(|| StorageError::io(path, std::io::Error::from(std::io::ErrorKind::NotFound)))
}

/// Fills `dst` from `offset`, retrying short reads and `EINTR`; end of file before `dst` is
/// full is [`StorageError::ShortRead`].
pub(crate) fn read_exact_at(file: &File, dst: &mut [u8], offset: u64, path: &Path) -> Result<()> {
    use std::os::unix::fs::FileExt;
    let mut done = 0usize;
    while done < dst.len() {
        match file.read_at(&mut dst[done..], offset + done as u64) {
            Ok(0) => {
                return Err(StorageError::ShortRead {
                    path: path.to_path_buf(),
                    offset,
                    expected: dst.len() as u64,
                    got: done as u64,
                })
            }
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(StorageError::io(path, e)),
        }
    }
    Ok(())
}

/// A name no other process can guess: 128 bits from the standard library's randomly keyed
/// hasher (seeded from the operating system), mixed with the process id, the time and a
/// counter.
#[cfg_attr(not(feature = "remote"), allow(dead_code))]
fn unpredictable_suffix() -> String {
    use std::hash::BuildHasher as _;
    use std::sync::atomic::{AtomicU64, Ordering};
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let seed = (std::process::id(), t, n);
    let a = std::collections::hash_map::RandomState::new().hash_one(seed);
    let b = std::collections::hash_map::RandomState::new().hash_one((seed, a));
    format!("{a:016x}{b:016x}")
}

/// Creates a new regular file in `dir` named `.tmp.<unpredictable>` (readable and writable by
/// its owner only), the one way the crate creates a temporary file outside a storage's
/// writer: `O_CREAT | O_EXCL | O_NOFOLLOW`, so nothing planted under any name (a link, even
/// a dangling one, a FIFO, a file) is followed, opened or truncated, and a name planted in
/// advance cannot be guessed. Returns the file and its path.
///
/// # Errors
/// [`StorageError::Io`] when the file cannot be created.
#[cfg_attr(not(feature = "remote"), allow(dead_code))]
pub(crate) fn create_temp(dir: &Path) -> Result<(File, PathBuf)> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut last = None;
    for _ in 0..8 {
        let path = dir.join(format!(".tmp.{}", unpredictable_suffix()));
        let mut o = std::fs::OpenOptions::new();
        o.read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC);
        match o.open(&path) {
            Ok(f) => return Ok((f, path)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(StorageError::io(&path, e)),
        }
    }
    Err(StorageError::io(
        dir,
        last.unwrap_or_else(|| std::io::Error::from(std::io::ErrorKind::AlreadyExists)),
    ))
}

/// Replaces (or creates) the file `dir/name` with `bytes`, atomically: written to a new
/// temporary file ([`create_temp`]) and renamed over the name, which replaces whatever is
/// there (a link is replaced, never followed).
///
/// # Errors
/// [`StorageError::UnsafeFile`] when `name` is not a plain name ([`resolve`]);
/// [`StorageError::Io`] when the file cannot be written or renamed.
#[cfg_attr(not(feature = "remote"), allow(dead_code))]
pub(crate) fn replace_file(dir: &Path, name: &str, bytes: &[u8]) -> Result<()> {
    use std::io::Write as _;
    let path = resolve(dir, name)?;
    let (mut f, tmp) = create_temp(dir)?;
    let result = f.write_all(bytes).map_err(|e| StorageError::io(&tmp, e)).and_then(|()| {
        drop(f);
        std::fs::rename(&tmp, &path).map_err(|e| StorageError::io(&path, e))
    });
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// This process's effective user id, without `unsafe`: the owner of a file it creates (a new
/// file belongs to the effective user), made exclusively under an unpredictable name in the
/// system's temporary directory and removed at once.
///
/// # Errors
/// [`StorageError::Io`] when the file cannot be created or examined.
#[cfg_attr(not(feature = "remote"), allow(dead_code))]
fn effective_uid() -> Result<u32> {
    use std::os::unix::fs::MetadataExt;
    static UID: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    if let Some(&uid) = UID.get() {
        return Ok(uid);
    }
    let (file, path) = create_temp(&std::env::temp_dir())?;
    let meta = file.metadata().map_err(|e| StorageError::io(&path, e));
    let _ = std::fs::remove_file(&path);
    let uid = meta?.uid();
    Ok(*UID.get_or_init(|| uid))
}

/// Makes sure `dir` is a directory only this user can change, as a cache of files read
/// without a lock must be: created (mode `0700`) when missing; a directory of this user that
/// others can write is made private (`0700`, with a warning saying why); a link, a
/// non-directory, or a directory of another user that others can write (without the sticky
/// bit, which keeps them from replacing this user's entries) is refused. With `own` the
/// directory must also belong to this user.
///
/// # Errors
/// [`StorageError::UnsafeFile`] naming the directory and why it is refused;
/// [`StorageError::Io`] when it cannot be created, examined or changed.
#[cfg_attr(not(feature = "remote"), allow(dead_code))]
pub(crate) fn private_dir(dir: &Path, own: bool) -> Result<()> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    match std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) => return Err(StorageError::io(dir, e)),
    }
    let meta = if own { std::fs::symlink_metadata(dir) } else { std::fs::metadata(dir) }
        .map_err(|e| StorageError::io(dir, e))?;
    if !meta.file_type().is_dir() {
        return Err(StorageError::UnsafeFile {
            path: dir.to_path_buf(),
            reason: format!(
                "a cache directory must be a directory; it is {}",
                crate::error::kind_name(meta.file_type())
            ),
        });
    }
    let me = effective_uid()?;
    let mode = meta.mode();
    let others_write = mode & 0o022 != 0;
    if meta.uid() == me {
        if others_write || (own && mode & 0o077 != 0) {
            log::warn!(
                "{}: the cache directory could be written by other users (mode {:o}); made private (0700) so no one can plant files in it",
                dir.display(),
                mode & 0o7777
            );
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                .map_err(|e| StorageError::io(dir, e))?;
        }
        return Ok(());
    }
    if own {
        return Err(StorageError::UnsafeFile {
            path: dir.to_path_buf(),
            reason: format!(
                "the cache directory belongs to user {}, not to this user ({me}): its owner could plant files in it",
                meta.uid()
            ),
        });
    }
    if others_write && mode & 0o1000 == 0 {
        return Err(StorageError::UnsafeFile {
            path: dir.to_path_buf(),
            reason: format!(
                "the cache directory belongs to user {} and others can write it (mode {:o}, no sticky bit): another user could replace its entries; choose a directory of your own",
                meta.uid(),
                mode & 0o7777
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    /// The code of a source file, its tests left out.
    fn code(text: &str) -> &str {
        text.split("#[cfg(test)]").next().unwrap_or(text)
    }

    /// Issue 32 classes 1 and 4: every file the remote cache and `upload` create, replace or
    /// read goes through this module (the safe open, the exclusive temporary file, the
    /// atomic replace): neither calls a standard-library open or read of a path.
    #[test]
    fn issue32_the_cache_and_upload_open_files_only_through_fsutil() {
        let files =
            [("remote/cache.rs", include_str!("remote/cache.rs")), ("upload.rs", include_str!("upload.rs"))];
        for (name, text) in files {
            for call in [
                "File::create",
                "File::open",
                "File::options",
                "OpenOptions",
                "fs::write(",
                "fs::read(",
                "read_to_string(",
                "fs::copy(",
                ".exists()",
            ] {
                assert!(!code(text).contains(call), "{name} calls {call}: open files through fsutil");
            }
        }
        // The one exclusive create of the crate outside its writers is here.
        assert_eq!(code(include_str!("fsutil.rs")).matches("create_new(true)").count(), 1);
    }

    /// Issue 32 class 3: every body of the remote directory is read through its one bounded
    /// reader (`body_within` in `remote/fetch.rs`): no whole-body read of `object_store`
    /// (`bytes()`, `get_range`, `get`) is left anywhere in `remote/`.
    #[test]
    fn issue32_remote_bodies_are_read_only_through_the_bounded_reader() {
        for (name, text) in [
            ("remote/fetch.rs", include_str!("remote/fetch.rs")),
            ("remote/read.rs", include_str!("remote/read.rs")),
            ("remote/write.rs", include_str!("remote/write.rs")),
            ("remote/store.rs", include_str!("remote/store.rs")),
        ] {
            for call in [".bytes().await", "store.get_range(", "store.get(", "get_ranges("] {
                assert!(!code(text).contains(call), "{name} calls {call}: read bodies through body_within");
            }
        }
        assert_eq!(code(include_str!("remote/fetch.rs")).matches("into_stream()").count(), 1);
    }
}
