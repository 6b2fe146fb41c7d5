//! [`gc`] and [`abort`]: the part directories no manifest references.

use std::collections::HashSet;
use std::path::Path;

use super::receipt::{check_job, PARTS_DIR};
use crate::dir::LocalDir;
use crate::manifest::Manifest;
use crate::{Result, StorageError};

/// The part directories (`_parts/<job>/<part>`, relative to the root) the root's committed
/// manifest references; empty when there is no storage.
fn referenced(root: &Path) -> Result<HashSet<String>> {
    let dir = LocalDir::new(root);
    let Some(text) = Manifest::read_text(&dir)? else { return Ok(HashSet::new()) };
    let m = Manifest::from_text(&text, &root.join(crate::manifest::MANIFEST_FILE))?;
    Ok(m.shards()
        .iter()
        .filter_map(|s| s.path.as_deref())
        .filter_map(|p| p.rsplit_once('/').map(|(dir, _)| dir.to_string()))
        .collect())
}

/// The entries of the local directory `dir`, sorted by name (an absent directory has none).
fn entries(dir: &Path) -> Result<Vec<(String, std::fs::FileType)>> {
    let read = match std::fs::read_dir(dir) {
        Ok(r) => r,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(StorageError::io(dir, e)),
    };
    let mut out = Vec::new();
    for e in read {
        let e = e.map_err(|e| StorageError::io(dir, e))?;
        let t = e.file_type().map_err(|err| StorageError::io(e.path(), err))?;
        out.push((e.file_name().to_string_lossy().into_owned(), t));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// Removes the entry `rel` of `root` (a directory with all it holds, never following a link;
/// a link or file itself).
fn remove(root: &Path, rel: &str, t: std::fs::FileType) -> Result<()> {
    let path = root.join(rel);
    let r = if t.is_dir() { std::fs::remove_dir_all(&path) } else { std::fs::remove_file(&path) };
    r.map_err(|e| StorageError::io(&path, e))
}

/// Orphans under `_parts/` of `root`, restricted to `job` when given: part directories (and
/// anything else) the committed manifest does not reference, and job directories holding
/// nothing referenced. Removed when `apply`.
fn sweep(root: &Path, job: Option<&str>, apply: bool) -> Result<Vec<String>> {
    let parts = root.join(PARTS_DIR);
    match std::fs::symlink_metadata(&parts) {
        Ok(m) if m.file_type().is_dir() => {}
        Ok(m) if apply => {
            return Err(StorageError::UnsafeFile {
                path: parts,
                reason: format!(
                    "{PARTS_DIR} is {}, not a directory: not swept",
                    crate::error::kind_name(m.file_type())
                ),
            })
        }
        Ok(_) => return Ok(vec![PARTS_DIR.to_string()]),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(StorageError::io(&parts, e)),
    }
    let refs = referenced(root)?;
    let mut out = Vec::new();
    for (name, t) in entries(&parts)? {
        if job.is_some_and(|j| j != name) {
            continue;
        }
        let job_rel = format!("{PARTS_DIR}/{name}");
        if !t.is_dir() {
            out.push((job_rel, t));
            continue;
        }
        let mut kept_any = false;
        let mut orphans = Vec::new();
        for (part, pt) in entries(&root.join(&job_rel))? {
            let rel = format!("{job_rel}/{part}");
            if pt.is_dir() && refs.contains(&rel) {
                kept_any = true;
            } else {
                orphans.push((rel, pt));
            }
        }
        if kept_any {
            out.extend(orphans);
        } else {
            out.push((job_rel, t));
        }
    }
    if apply {
        for (rel, t) in &out {
            remove(root, rel, *t)?;
        }
    }
    Ok(out.into_iter().map(|(rel, _)| rel).collect())
}

/// Lists what under `root/_parts/` the committed manifest does not reference, as paths
/// relative to `root`, sorted: part directories of failed attempts, speculative duplicates
/// and crashed or aborted jobs (a job directory none of whose parts is referenced is listed
/// as a whole), and anything else found there. With `apply` they are deleted (directories
/// with their files, links never followed). Run it only when no job is writing parts: a
/// part not yet committed is not referenced.
///
/// # Errors
/// [`StorageError::UnsafeFile`] when `_parts` itself is not a directory (with `apply`);
/// manifest errors of the storage; I/O errors naming the entry.
pub fn gc(root: impl AsRef<Path>, apply: bool) -> Result<Vec<String>> {
    sweep(root.as_ref(), None, apply)
}

/// Removes the parts of job `job` under `root` that the committed manifest does not
/// reference (all of them when the job was never committed), and the job's directory when
/// nothing of it is referenced; returns what was removed, as [`gc`] lists it. What a commit
/// published stays readable.
///
/// # Errors
/// [`StorageError::InvalidJob`]; as [`gc`].
pub fn abort(root: impl AsRef<Path>, job: &str) -> Result<Vec<String>> {
    check_job(job)?;
    sweep(root.as_ref(), Some(job), true)
}
