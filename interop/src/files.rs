//! File access for the foreign layouts: where a dataset is ([`Place`]: a local path or an
//! object-store URL), sizes, bounded reads, listings and globs, and names from indexes
//! checked to stay inside the dataset's directory.

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use guideloom_storage::{
    DirEntry, EntryKind, LocalDir, RemoteOptions, StorageDir, StorageError, StorageLocation,
};

use crate::error::{ForeignError, InteropError, Result};
use crate::format::ForeignFormat;

/// The most bytes an index file (`index.json`, a `.csv.gz` once inflated) may hold.
pub(crate) const MAX_INDEX_BYTES: u64 = 1 << 30;

/// What a dataset's path names: a local path, or an object-store URL (`s3://bucket/data/x`,
/// no trailing `/`) with the options its store is opened with.
#[derive(Debug, Clone)]
pub(crate) enum Place {
    /// A path on this machine.
    Local(PathBuf),
    /// An object-store URL.
    Remote {
        /// The URL.
        url: String,
        /// How the store is read.
        options: RemoteOptions,
    },
}

impl Place {
    /// The place a storage location names, a URL read with `remote`.
    pub(crate) fn at(location: &StorageLocation, remote: &RemoteOptions) -> Place {
        match location {
            StorageLocation::Local(p) => Place::Local(p.clone()),
            StorageLocation::Remote(url) => Place::Remote { url: url.clone(), options: remote.clone() },
        }
    }

    /// The place `location` names ([`StorageLocation::parse`]), a URL read with the store's
    /// options from the environment.
    ///
    /// # Errors
    /// [`RemoteOptions::from_env`]'s.
    pub(crate) fn parse(location: &str) -> Result<Place> {
        let at = StorageLocation::parse(location);
        let remote = if at.is_remote() { RemoteOptions::from_env()? } else { RemoteOptions::default() };
        Ok(Place::at(&at, &remote))
    }

    /// The place as errors and [`crate::ForeignDataset::path`] name it.
    pub(crate) fn label(&self) -> PathBuf {
        match self {
            Place::Local(p) => p.clone(),
            Place::Remote { url, .. } => PathBuf::from(url),
        }
    }

    /// The directory holding this place and its last component (`None` when there is none:
    /// a bucket's root, or a path ending in `..`). A local path without a parent has `.`.
    pub(crate) fn split(&self) -> (Place, Option<String>) {
        match self {
            Place::Local(p) => {
                let parent = match p.parent() {
                    Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
                    _ => PathBuf::from("."),
                };
                (Place::Local(parent), p.file_name().and_then(|n| n.to_str()).map(str::to_string))
            }
            Place::Remote { url, options } => {
                let body = url.find("://").map_or(0, |i| i + 3);
                match url[body..].rfind('/') {
                    Some(i) if i + 1 < url.len() - body => (
                        Place::Remote { url: url[..body + i].to_string(), options: options.clone() },
                        Some(url[body + i + 1..].to_string()),
                    ),
                    _ => (self.clone(), None),
                }
            }
        }
    }

    /// The directory at this place (a local directory is not checked; a remote one is opened
    /// without a request).
    ///
    /// # Errors
    /// [`StorageError::Remote`] (op `open`) when the store cannot be set up.
    pub(crate) fn dir(&self) -> Result<Arc<dyn StorageDir>> {
        match self {
            Place::Local(p) => Ok(Arc::new(LocalDir::new(p))),
            Place::Remote { url, options } => Ok(StorageLocation::Remote(url.clone()).open_with(options)?),
        }
    }

    /// The directory at this place and its entries when it is a directory (locally: a
    /// directory, links followed as the user named it; remotely: a prefix with anything under
    /// it); `None` otherwise.
    ///
    /// # Errors
    /// As [`StorageDir::list`].
    pub(crate) fn as_dir(&self) -> Result<Option<Listed>> {
        match self {
            Place::Local(p) if !p.is_dir() => Ok(None),
            Place::Local(_) => {
                let dir = self.dir()?;
                let entries = dir.list()?;
                Ok(Some((dir, entries)))
            }
            // A glob is never a directory (and `?` would read as a URL's query).
            Place::Remote { url, .. } if url.rsplit('/').next().is_some_and(|n| n.contains(['*', '?'])) => {
                Ok(None)
            }
            Place::Remote { url, .. } => {
                let dir = self.dir()?;
                let entries = match dir.list() {
                    Ok(e) => e,
                    // A plain web server cannot list: its URLs name files (or, with the
                    // format named, the directory of an index).
                    Err(_) if url.starts_with("http") => return Ok(None),
                    Err(e) => return Err(e.into()),
                };
                Ok((!entries.is_empty()).then_some((dir, entries)))
            }
        }
    }
}

/// A directory and its entries.
pub(crate) type Listed = (Arc<dyn StorageDir>, Vec<DirEntry>);

/// The files of one dataset: its directory and the layout errors name.
#[derive(Debug, Clone)]
pub(crate) struct Fs {
    pub(crate) format: ForeignFormat,
    pub(crate) root: PathBuf,
    pub(crate) dir: Arc<dyn StorageDir>,
}

impl Fs {
    pub(crate) fn new(format: ForeignFormat, dir: Arc<dyn StorageDir>) -> Self {
        Fs { format, root: dir.path().to_path_buf(), dir }
    }

    /// The error `error` about file `name` (relative to the root).
    pub(crate) fn err(&self, name: &str, error: ForeignError) -> InteropError {
        InteropError::Dataset {
            format: Some(self.format),
            path: self.root.join(name),
            error: Box::new(error),
        }
    }

    /// The size of `name`; an error naming it when it is missing.
    pub(crate) fn len(&self, name: &str) -> Result<u64> {
        self.dir.file_len(name)?.ok_or_else(|| {
            InteropError::Storage(StorageError::Io {
                path: self.root.join(name),
                source: std::io::Error::from(std::io::ErrorKind::NotFound),
            })
        })
    }

    /// The size of `name`, `None` when it does not exist.
    #[cfg(any(feature = "mds", feature = "olmo"))]
    pub(crate) fn len_opt(&self, name: &str) -> Result<Option<u64>> {
        Ok(self.dir.file_len(name)?)
    }

    /// `len` bytes of `name` at `offset`; the caller has checked them against the file's
    /// size (a file that shrank since gives [`StorageError::ShortRead`]).
    pub(crate) fn read(&self, name: &str, offset: u64, len: u64) -> Result<Vec<u8>> {
        let n = usize::try_from(len).map_err(|_| StorageError::BatchTooLarge { bytes: len })?;
        let mut out = vec![0u8; n];
        self.dir.read_at(name, offset, &mut out)?;
        Ok(out)
    }

    /// The whole of `name`, refused past `max` bytes.
    pub(crate) fn read_whole(&self, name: &str, max: u64) -> Result<Vec<u8>> {
        let len = self.len(name)?;
        if len > max {
            return Err(self.err(
                name,
                ForeignError::InvalidIndex { reason: format!("{len} bytes, more than the {max}-byte limit") },
            ));
        }
        self.read(name, 0, len)
    }

    /// Checks that `name` (from an index) is a relative path below the root: no absolute
    /// path, no `..`, no backslash, and, in a local directory where it exists, no link
    /// leading out (an object store has no links).
    pub(crate) fn safe_name(&self, name: &str) -> Result<()> {
        let unsafe_path = || self.err(name, ForeignError::UnsafeShardPath { path: name.to_string() });
        if name.is_empty() || name.contains('\\') || name.contains('\0') {
            return Err(unsafe_path());
        }
        if !Path::new(name).components().all(|c| matches!(c, Component::Normal(_) | Component::CurDir)) {
            return Err(unsafe_path());
        }
        if let Some(root) = self.dir.local_dir() {
            let full = root.join(name);
            if let (Ok(real), Ok(root)) = (full.canonicalize(), root.canonicalize()) {
                if !real.starts_with(root) {
                    return Err(unsafe_path());
                }
            }
        }
        Ok(())
    }
}

/// What the layouts' unit tests share: their files in a local directory.
#[cfg(test)]
impl Fs {
    /// The local directory `dir` as the files of `format`.
    pub(crate) fn local(format: ForeignFormat, dir: &Path) -> Self {
        Fs::new(format, Arc::new(LocalDir::new(dir)))
    }
}

/// Little-endian bytes of u16 elements (the layouts' unit tests).
#[cfg(test)]
pub(crate) fn u16_bytes(elements: &[u16]) -> Vec<u8> {
    elements.iter().flat_map(|e| e.to_le_bytes()).collect()
}

/// Whether file `name` of `dir` is a regular file that starts with `magic` (a link, FIFO,
/// directory or a shorter file is not a match; nothing is read past the magic).
pub(crate) fn starts_with(dir: &dyn StorageDir, name: &str, magic: &[u8]) -> bool {
    let mut head = vec![0u8; magic.len()];
    matches!(dir.file_len(name), Ok(Some(n)) if n >= magic.len() as u64)
        && dir.read_at(name, 0, &mut head).is_ok()
        && head == magic
}

/// The names among `entries` (of the directory `dir`) that `keep` selects, sorted byte-wise.
/// Directories are passed over; anything else that is not a regular file (a link, a FIFO, a
/// socket, a device) and that `keep` selects is an error: a dataset is made of regular
/// files, and a listing never follows a link or opens a FIFO.
///
/// # Errors
/// [`StorageError::UnsafeFile`] naming the first such entry.
fn select(dir: &dyn StorageDir, entries: Vec<DirEntry>, keep: impl Fn(&str) -> bool) -> Result<Vec<String>> {
    let mut names = Vec::new();
    for e in entries {
        if !keep(&e.name) {
            continue;
        }
        match e.kind {
            EntryKind::File => names.push(e.name),
            EntryKind::Dir => {}
            other => {
                let what = match other {
                    EntryKind::Other(what) => what,
                    _ => "of another kind",
                };
                return Err(InteropError::Storage(StorageError::UnsafeFile {
                    path: dir.path().join(&e.name),
                    reason: format!(
                        "it is {what}, not a regular file; a dataset's directory or glob may match regular files only (name the file itself, or replace it with a copy)"
                    ),
                }));
            }
        }
    }
    names.sort_unstable_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    names.dedup();
    Ok(names)
}

/// The regular files among `entries` (of `dir`) whose names end in `.ext`, sorted byte-wise
/// (see [`select`] for what is refused).
pub(crate) fn with_ext(dir: &dyn StorageDir, entries: &[DirEntry], ext: &str) -> Result<Vec<String>> {
    let suffix = format!(".{ext}");
    select(dir, entries.to_vec(), |n| n.ends_with(&suffix))
}

/// What `place` names: a file (itself), a directory (its files ending in one of `exts`), or a
/// glob whose last component has `*`/`?` (the matching files). Returns the directory and the
/// file names in it, sorted byte-wise (llm.c's `glob` order in the C locale). A local file
/// named directly may be a link (the user's choice): it is resolved here, once; files found
/// by listing must be regular files themselves.
///
/// # Errors
/// [`ForeignError::NoFiles`] when nothing matches; [`StorageError::UnsafeFile`] when the
/// named file, or one the listing matches, is not a regular file (a FIFO, a socket, a
/// device; a link found by listing).
pub(crate) fn expand(
    format: ForeignFormat,
    place: &Place,
    exts: &[&str],
) -> Result<(Arc<dyn StorageDir>, Vec<String>)> {
    let label = place.label();
    let no_files = || InteropError::Dataset {
        format: Some(format),
        path: label.clone(),
        error: Box::new(ForeignError::NoFiles { pattern: label.display().to_string() }),
    };
    if let Some((dir, entries)) = place.as_dir()? {
        let names = select(dir.as_ref(), entries, |n| exts.iter().any(|e| n.ends_with(&format!(".{e}"))))?;
        if names.is_empty() {
            return Err(no_files());
        }
        return Ok((dir, names));
    }
    let (parent, pattern) = place.split();
    let pattern = pattern.ok_or_else(no_files)?;
    if !pattern.contains(['*', '?']) {
        return match place {
            Place::Local(path) => {
                match std::fs::metadata(path) {
                    Ok(m) if m.is_file() => {}
                    Ok(m) if !m.is_dir() => return Err(StorageError::not_regular(path, m.file_type()).into()),
                    _ => return Err(no_files()),
                }
                let real = path
                    .canonicalize()
                    .map_err(|source| StorageError::Io { path: path.to_path_buf(), source })?;
                match (real.parent(), real.file_name().and_then(|n| n.to_str())) {
                    (Some(dir), Some(name)) => {
                        Ok((Arc::new(LocalDir::new(dir)) as Arc<dyn StorageDir>, vec![name.to_string()]))
                    }
                    _ => Err(no_files()),
                }
            }
            Place::Remote { .. } => {
                let dir = parent.dir()?;
                match dir.file_len(&pattern)? {
                    Some(_) => Ok((dir, vec![pattern])),
                    None => Err(no_files()),
                }
            }
        };
    }
    let dir = parent.dir()?;
    let entries = dir.list()?;
    let names = select(dir.as_ref(), entries, |n| wildcard(pattern.as_bytes(), n.as_bytes()))?;
    if names.is_empty() {
        return Err(no_files());
    }
    Ok((dir, names))
}

/// Shell-style match of `name` against `pattern` (`*` any run, `?` one byte).
fn wildcard(pattern: &[u8], name: &[u8]) -> bool {
    let (mut p, mut n) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        if p < pattern.len() && (pattern[p] == b'?' || pattern[p] == name[n]) {
            p += 1;
            n += 1;
        } else if p < pattern.len() && pattern[p] == b'*' {
            star = Some((p, n));
            p += 1;
        } else if let Some((sp, sn)) = star {
            p = sp + 1;
            n = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// Reads little-endian integers out of a byte slice whose length the caller checked.
pub(crate) fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// A little-endian i32 at `at`.
pub(crate) fn i32_at(b: &[u8], at: usize) -> i32 {
    i32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// A little-endian u64 at `at`.
pub(crate) fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

/// A little-endian i64 at `at`.
pub(crate) fn i64_at(b: &[u8], at: usize) -> i64 {
    u64_at(b, at) as i64
}

/// `bytes` shown as an escaped byte string (for magic numbers in messages).
pub(crate) fn escaped(bytes: &[u8]) -> String {
    bytes.iter().flat_map(|&b| std::ascii::escape_default(b)).map(char::from).collect()
}

#[cfg(test)]
mod tests {
    use super::wildcard;

    #[test]
    fn wildcards_match_like_a_shell() {
        assert!(wildcard(b"fineweb_train_*.bin", b"fineweb_train_000001.bin"));
        assert!(!wildcard(b"fineweb_train_*.bin", b"fineweb_val_000000.bin"));
        assert!(wildcard(b"*", b""));
        assert!(wildcard(b"a?c*", b"abcdef"));
        assert!(!wildcard(b"a?c", b"ac"));
        assert!(wildcard(b"*.npy", b"x.y.npy"));
    }
}
