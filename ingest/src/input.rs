//! Reading the input files: which files a list of paths names, and their text read with a
//! bound on one document.

use std::fs;
use std::io::BufRead;
use std::path::{Path, PathBuf};

use crate::{IngestError, Split};

/// Input files of `paths`: files as given, directories walked recursively; sorted by path
/// (per argument, arguments kept in order).
///
/// A path given is taken as named (a link followed, `/dev/stdin` read). Inside a walked
/// directory only regular files and real directories are taken: symbolic links are skipped
/// (never followed, so a walk visits each real directory once, cannot loop and cannot reach
/// outside the tree), and a FIFO, socket or device is an error naming it (reading it could
/// block for ever or never end).
///
/// # Errors
/// [`IngestError::Read`] when a path cannot be listed, or names a FIFO, socket or device
/// found in a walked directory; [`IngestError::NoInput`] when nothing is found.
pub fn collect_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, IngestError> {
    fn walk(p: &Path, top: bool, out: &mut Vec<PathBuf>) -> Result<(), IngestError> {
        let read = |source| IngestError::Read { path: p.to_path_buf(), source };
        let kind = if top { fs::metadata(p) } else { fs::symlink_metadata(p) }.map_err(read)?.file_type();
        if kind.is_dir() {
            let mut entries: Vec<PathBuf> = fs::read_dir(p)
                .map_err(read)?
                .map(|e| e.map(|e| e.path()))
                .collect::<Result<_, _>>()
                .map_err(read)?;
            entries.sort();
            for e in entries {
                walk(&e, false, out)?;
            }
        } else if top || kind.is_file() {
            out.push(p.to_path_buf());
        } else if !kind.is_symlink() {
            return Err(read(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not a regular file (a FIFO, socket or device inside an input directory is not read)",
            )));
        }
        Ok(())
    }
    let mut out = Vec::new();
    for p in paths {
        let mut files = Vec::new();
        walk(p, true, &mut files)?;
        files.sort();
        out.extend(files);
    }
    if out.is_empty() {
        return Err(IngestError::NoInput(paths.to_vec()));
    }
    Ok(out)
}

/// Splits `text` into documents as `split` says; returns `(source suffix, text)` pairs.
pub fn split_text(text: &str, split: Split) -> Vec<(String, String)> {
    match split {
        Split::File => vec![(String::new(), text.to_string())],
        Split::Line => text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(i, l)| (format!(":{}", i + 1), l.to_string()))
            .collect(),
        Split::BlankLine => {
            let mut out = Vec::new();
            let mut block: Vec<&str> = Vec::new();
            let mut start = 0;
            for (i, line) in text.lines().enumerate() {
                if line.trim().is_empty() {
                    if !block.is_empty() {
                        out.push((format!(":{}", start + 1), block.join("\n")));
                        block.clear();
                    }
                } else {
                    if block.is_empty() {
                        start = i;
                    }
                    block.push(line);
                }
            }
            if !block.is_empty() {
                out.push((format!(":{}", start + 1), block.join("\n")));
            }
            out
        }
    }
}

/// Reads line `line` of `path` from `r` into `buf` (cleared first), its terminator included:
/// its length in bytes, 0 at the end of the input.
///
/// # Errors
/// [`IngestError::Read`]; [`IngestError::DocumentTooLarge`] past `limit` bytes.
pub(crate) fn read_line_bounded(
    r: &mut (impl BufRead + ?Sized),
    buf: &mut Vec<u8>,
    path: &Path,
    line: u64,
    limit: u64,
) -> Result<usize, IngestError> {
    buf.clear();
    let n = std::io::Read::take(r, limit.saturating_add(1))
        .read_until(b'\n', buf)
        .map_err(|source| IngestError::Read { path: path.to_path_buf(), source })?;
    if n as u64 > limit {
        return Err(IngestError::DocumentTooLarge { path: path.to_path_buf(), line, limit });
    }
    Ok(n)
}

/// The text of the whole file `path` (one document), at most `limit` bytes of UTF-8.
///
/// # Errors
/// [`IngestError::Read`], [`IngestError::DocumentTooLarge`], [`IngestError::NotUtf8`].
pub(crate) fn read_text(path: &Path, limit: u64) -> Result<String, IngestError> {
    let read = |source| IngestError::Read { path: path.to_path_buf(), source };
    let mut bytes = Vec::new();
    fs::File::open(path)
        .and_then(|f| {
            std::io::Read::read_to_end(&mut std::io::Read::take(f, limit.saturating_add(1)), &mut bytes)
        })
        .map_err(read)?;
    if bytes.len() as u64 > limit {
        return Err(IngestError::DocumentTooLarge { path: path.to_path_buf(), line: 1, limit });
    }
    String::from_utf8(bytes).map_err(|e| IngestError::NotUtf8 {
        path: path.to_path_buf(),
        offset: e.utf8_error().valid_up_to() as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_modes() {
        let t = "a b\nc\n\n \nd\n\n";
        assert_eq!(
            split_text(t, Split::Line),
            vec![(":1".into(), "a b".into()), (":2".into(), "c".into()), (":5".into(), "d".into())]
        );
        assert_eq!(
            split_text(t, Split::BlankLine),
            vec![(":1".into(), "a b\nc".into()), (":5".into(), "d".into())]
        );
        assert_eq!(split_text(t, Split::File), vec![(String::new(), t.to_string())]);
    }
}
