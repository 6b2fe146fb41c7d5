//! [`gc`] and [`abort`]: the part directories no manifest references.

use std::collections::HashSet;
use std::path::Path;

use super::receipt::{check_job, PARTS_DIR};
use crate::dir::{LocalDir, StorageDir};
use crate::manifest::Manifest;
use crate::{Result, StorageError};

/// The part directories (`_parts/<job>/<part>`, relative to the root) the committed manifest
/// of the storage in `dir` references; empty when there is no storage.
fn referenced(dir: &dyn StorageDir) -> Result<HashSet<String>> {
    let Some(text) = Manifest::read_text(dir)? else { return Ok(HashSet::new()) };
    let m = Manifest::from_text(&text, &dir.path().join(crate::manifest::MANIFEST_FILE))?;
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
fn remove(root: &Path, rel: &str, is_dir: bool) -> Result<()> {
    let path = root.join(rel);
    let r = if is_dir { std::fs::remove_dir_all(&path) } else { std::fs::remove_file(&path) };
    r.map_err(|e| StorageError::io(&path, e))
}

/// One entry of `_parts/`: a job's name, and the entries of its directory as
/// `(name, is a directory)` (`None`: the entry is not a directory).
type JobEntry = (String, Option<Vec<(String, bool)>>);

/// The orphans among the entries of `_parts/` (sorted by name), restricted to `job` when
/// given, as `(path relative to the root, is a directory)`: every part directory (and
/// anything else in a job directory) `refs` does not name, and a job directory as a whole
/// when nothing in it is referenced. One rule for local and remote storages.
fn orphans(jobs: Vec<JobEntry>, job: Option<&str>, refs: &HashSet<String>) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    for (name, parts) in jobs {
        if job.is_some_and(|j| j != name) {
            continue;
        }
        let job_rel = format!("{PARTS_DIR}/{name}");
        let Some(parts) = parts else {
            out.push((job_rel, false));
            continue;
        };
        let mut kept_any = false;
        let mut lost = Vec::new();
        for (part, is_dir) in parts {
            let rel = format!("{job_rel}/{part}");
            if is_dir && refs.contains(&rel) {
                kept_any = true;
            } else {
                lost.push((rel, is_dir));
            }
        }
        if kept_any {
            out.extend(lost);
        } else {
            out.push((job_rel, true));
        }
    }
    out
}

/// Orphans under `_parts/` of `root` ([`orphans`]), removed when `apply`.
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
    let refs = referenced(&LocalDir::new(root))?;
    let mut jobs = Vec::new();
    for (name, t) in entries(&parts)? {
        let inside = if t.is_dir() && job.is_none_or(|j| j == name) {
            Some(entries(&parts.join(&name))?.into_iter().map(|(n, t)| (n, t.is_dir())).collect())
        } else if t.is_dir() {
            Some(Vec::new())
        } else {
            None
        };
        jobs.push((name, inside));
    }
    let out = orphans(jobs, job, &refs);
    if apply {
        for (rel, is_dir) in &out {
            remove(root, rel, *is_dir)?;
        }
    }
    Ok(out.into_iter().map(|(rel, _)| rel).collect())
}

/// Orphans under `_parts/` of the remote storage `dir` ([`orphans`], from one listing of
/// every object under `_parts/`: a name with more parts below a job is a part directory),
/// their objects deleted when `apply`.
#[cfg(feature = "remote")]
fn sweep_remote(dir: &crate::RemoteDir, job: Option<&str>, apply: bool) -> Result<Vec<String>> {
    use std::collections::BTreeMap;
    let refs = referenced(dir)?;
    let objects = dir.list_tree(PARTS_DIR)?;
    // job -> (a file of that name, its entries: name -> is a directory)
    let mut tree: BTreeMap<String, (bool, BTreeMap<String, bool>)> = BTreeMap::new();
    for (name, _) in &objects {
        let Some(rest) = name.strip_prefix(PARTS_DIR).and_then(|r| r.strip_prefix('/')) else { continue };
        match rest.split_once('/') {
            None => tree.entry(rest.to_string()).or_default().0 = true,
            Some((j, below)) => {
                let (part, deeper) = match below.split_once('/') {
                    Some((p, _)) => (p, true),
                    None => (below, false),
                };
                let e = tree.entry(j.to_string()).or_default().1.entry(part.to_string()).or_insert(deeper);
                *e |= deeper;
            }
        }
    }
    let mut jobs: Vec<JobEntry> = Vec::new();
    for (name, (file, inside)) in tree {
        if file {
            jobs.push((name.clone(), None));
        }
        if !inside.is_empty() {
            jobs.push((name, Some(inside.into_iter().collect())));
        }
    }
    let out = orphans(jobs, job, &refs);
    if apply {
        for (rel, is_dir) in &out {
            // `objects` is sorted by name: an entry's objects are one run of it.
            let key = if *is_dir { format!("{rel}/") } else { rel.clone() };
            let first = objects.partition_point(|(n, _)| n.as_str() < key.as_str());
            let run =
                objects[first..]
                    .iter()
                    .take_while(|(n, _)| if *is_dir { n.starts_with(&key) } else { *n == key });
            for (name, _) in run {
                dir.delete(name)?;
            }
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

/// [`gc`] on the remote storage `dir` (an object store): what under `URL/_parts/` its
/// committed manifest does not reference, listed as [`gc`] lists it (a job whose parts are
/// all orphans as a whole), the objects deleted when `apply`. Run it only when no job is
/// writing parts.
///
/// # Errors
/// Manifest errors of the storage; [`StorageError::Remote`] when the listing or a delete
/// fails after its retries.
#[cfg(feature = "remote")]
pub fn gc_remote(dir: &crate::RemoteDir, apply: bool) -> Result<Vec<String>> {
    sweep_remote(dir, None, apply)
}

/// [`abort`] on the remote storage `dir`: deletes the objects of job `job`'s parts that its
/// committed manifest does not reference; returns what was removed, as [`gc`] lists it.
///
/// # Errors
/// [`StorageError::InvalidJob`]; as [`gc_remote`].
#[cfg(feature = "remote")]
pub fn abort_remote(dir: &crate::RemoteDir, job: &str) -> Result<Vec<String>> {
    check_job(job)?;
    sweep_remote(dir, Some(job), true)
}
