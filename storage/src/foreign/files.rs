//! File access for the foreign layouts: sizes, bounded reads, globs, and names from indexes
//! checked to stay inside the dataset's directory.

use std::io::Read;
use std::path::{Component, Path, PathBuf};

use crate::dir::{LocalDir, StorageDir};
use crate::{Result, StorageError};

use super::{ForeignError, ForeignFormat};

/// The most bytes an index file (`index.json`, a `.csv.gz` once inflated) may hold.
pub(crate) const MAX_INDEX_BYTES: u64 = 1 << 30;

/// The files of one dataset: its root directory and the layout errors name.
#[derive(Debug, Clone)]
pub(crate) struct Fs {
    pub(crate) format: ForeignFormat,
    pub(crate) root: PathBuf,
    dir: LocalDir,
}

impl Fs {
    pub(crate) fn new(format: ForeignFormat, root: PathBuf) -> Self {
        Fs { format, dir: LocalDir::new(&root), root }
    }

    /// The error `error` about file `name` (relative to the root).
    pub(crate) fn err(&self, name: &str, error: ForeignError) -> StorageError {
        StorageError::Foreign {
            format: Some(self.format),
            path: self.root.join(name),
            error: Box::new(error),
        }
    }

    /// The size of `name`; an error naming it when it is missing.
    pub(crate) fn len(&self, name: &str) -> Result<u64> {
        self.dir.file_len(name)?.ok_or_else(|| {
            StorageError::io(self.root.join(name), std::io::Error::from(std::io::ErrorKind::NotFound))
        })
    }

    /// The size of `name`, `None` when it does not exist.
    pub(crate) fn len_opt(&self, name: &str) -> Result<Option<u64>> {
        self.dir.file_len(name)
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
    /// path, no `..`, no backslash, and, where it exists, no link leading out.
    pub(crate) fn safe_name(&self, name: &str) -> Result<()> {
        let unsafe_path = || self.err(name, ForeignError::UnsafeShardPath { path: name.to_string() });
        if name.is_empty() || name.contains('\\') || name.contains('\0') {
            return Err(unsafe_path());
        }
        if !Path::new(name).components().all(|c| matches!(c, Component::Normal(_) | Component::CurDir)) {
            return Err(unsafe_path());
        }
        let full = self.root.join(name);
        if let (Ok(real), Ok(root)) = (full.canonicalize(), self.root.canonicalize()) {
            if !real.starts_with(root) {
                return Err(unsafe_path());
            }
        }
        Ok(())
    }
}

/// Whether the file at `path` starts with `magic`.
/// Opened as every storage file is ([`crate::dir::open_regular`]): a link, FIFO or
/// directory is not a match.
pub(crate) fn starts_with(path: &Path, magic: &[u8]) -> bool {
    let mut head = vec![0u8; magic.len()];
    matches!(crate::dir::open_regular(path, crate::dir::Access::Read { direct: false }), Ok(Some(f))
        if (&f).read_exact(&mut head).is_ok() && head == magic)
}

/// The regular files of `dir` whose names end in `.ext`, sorted byte-wise.
pub(crate) fn list_dir(format: ForeignFormat, dir: &Path, ext: &str) -> Result<Vec<String>> {
    let mut names = Vec::new();
    let suffix = format!(".{ext}");
    for entry in std::fs::read_dir(dir).map_err(|e| StorageError::io(dir, e))? {
        let entry = entry.map_err(|e| StorageError::io(dir, e))?;
        let Some(name) = entry.file_name().to_str().map(str::to_string) else { continue };
        let is_file = entry.file_type().is_ok_and(|t| t.is_file());
        if is_file && name.ends_with(&suffix) {
            names.push(name);
        }
    }
    names.sort_unstable_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    let _ = format;
    Ok(names)
}

/// What `path` names: a file (itself), a directory (its files ending in one of `exts`), or a
/// glob whose last component has `*`/`?` (the matching files). Returns the directory and the
/// file names in it, sorted byte-wise (llm.c's `glob` order in the C locale).
///
/// # Errors
/// [`ForeignError::NoFiles`] when nothing matches.
pub(crate) fn expand(format: ForeignFormat, path: &Path, exts: &[&str]) -> Result<(PathBuf, Vec<String>)> {
    let no_files = || StorageError::Foreign {
        format: Some(format),
        path: path.to_path_buf(),
        error: Box::new(ForeignError::NoFiles { pattern: path.display().to_string() }),
    };
    if path.is_dir() {
        let mut names = Vec::new();
        for ext in exts {
            names.extend(list_dir(format, path, ext)?);
        }
        names.sort_unstable_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
        names.dedup();
        if names.is_empty() {
            return Err(no_files());
        }
        return Ok((path.to_path_buf(), names));
    }
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let pattern = path.file_name().and_then(|n| n.to_str()).ok_or_else(no_files)?;
    if !pattern.contains(['*', '?']) {
        // A file the user names directly may be a link (their choice): it is resolved here,
        // once; files found by listing are taken only when they are regular files themselves.
        if !path.is_file() {
            return Err(no_files());
        }
        let real = path.canonicalize().map_err(|e| StorageError::io(path, e))?;
        return match (real.parent(), real.file_name().and_then(|n| n.to_str())) {
            (Some(dir), Some(name)) => Ok((dir.to_path_buf(), vec![name.to_string()])),
            _ => Err(no_files()),
        };
    }
    let mut names = Vec::new();
    for entry in std::fs::read_dir(&parent).map_err(|e| StorageError::io(&parent, e))? {
        let entry = entry.map_err(|e| StorageError::io(&parent, e))?;
        if let Some(name) = entry.file_name().to_str() {
            if entry.file_type().is_ok_and(|t| t.is_file()) && wildcard(pattern.as_bytes(), name.as_bytes()) {
                names.push(name.to_string());
            }
        }
    }
    names.sort_unstable_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    if names.is_empty() {
        return Err(no_files());
    }
    Ok((parent, names))
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
