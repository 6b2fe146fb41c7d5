//! OAMap array sources on disk: an `.npz` file, a directory of `<name>.npy` files, or a
//! partitioned dataset in OAMap 0.12's numpy-file database layout.
//!
//! Reads report [`OamapError::Io`] with the path and the operating system's error (a missing
//! array file is [`OamapError::MissingArray`]); writes are atomic per file: a temporary file
//! is written and fsynced, renamed over the target, and the directory fsynced, as the
//! storage manifest's commit does.
//!
//! Files inside a dataset (array files, `dataset.json`, the directories holding them) are
//! never reached through a symbolic link: each file is opened with `O_NOFOLLOW` and
//! non-blocking, then checked to be a regular file before a byte is read (a FIFO would
//! otherwise block for ever); each directory below the dataset's own is checked not to be a
//! link; a temporary file is created exclusively, never opened through a planted link.
//! Anything else is [`OamapError::UnsafeFile`] naming the file. A file named by the caller
//! (an `.npz` path, a JSON file given on the command line) may itself be a link, but must
//! still be a regular file. Whole-file reads are bounded ([`MAX_FILE_BYTES`]).

use std::fs::File;
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;

use crate::{
    from_data_dataset, parse_npy, write_npy, Array, ArraySource, Dataset, DatasetDescription, OamapError,
};
#[cfg(feature = "npz")]
use crate::{open_npz, NpzSource};

/// Opens an OAMap `.npz` file whose schema is stored in it (member `object`), as a lazy
/// [`Reader`](crate::Reader): members are decompressed on first use. Feature `npz`.
///
/// # Errors
/// [`OamapError::Io`] naming the file when it cannot be read; the errors of
/// [`open_npz`].
#[cfg(feature = "npz")]
pub fn open_npz_file(path: &Path) -> Result<crate::Reader, OamapError> {
    open_npz(read_regular_file(path)?)
}

/// The largest file this module reads whole (4 GiB): an array file, an `.npz`, a JSON file.
pub const MAX_FILE_BYTES: u64 = 1 << 32;

/// Reads a whole file named by the caller: a symbolic link is followed, but the file must be
/// a regular file (a FIFO, a device or a directory is refused before it is read, so nothing
/// blocks) of at most [`MAX_FILE_BYTES`].
///
/// # Errors
/// [`OamapError::Io`] naming the file when it cannot be opened or read (a directory gives
/// `IsADirectory`); [`OamapError::UnsafeFile`] for a FIFO or device;
/// [`OamapError::TooLarge`] past the size bound.
pub fn read_regular_file(path: &Path) -> Result<Vec<u8>, OamapError> {
    read_checked(path, true)
}

/// Opens `path` for reading without blocking (and, unless `follow`, without following a
/// final symbolic link), checks it is a regular file within the size bound, and reads it.
fn read_checked(path: &Path, follow: bool) -> Result<Vec<u8>, OamapError> {
    use std::io::Read;
    let mut opts = std::fs::OpenOptions::new();
    opts.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        let nofollow = if follow { 0 } else { libc::O_NOFOLLOW };
        opts.custom_flags(libc::O_NONBLOCK | nofollow);
    }
    #[cfg(not(unix))]
    if !follow && std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(OamapError::UnsafeFile { path: path.into(), reason: "a symbolic link".into() });
    }
    let mut f = match opts.open(path) {
        Ok(f) => f,
        #[cfg(unix)]
        Err(e) if !follow && e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(OamapError::UnsafeFile { path: path.into(), reason: "a symbolic link".into() })
        }
        Err(e) => return Err(OamapError::io(path, e)),
    };
    let meta = f.metadata().map_err(|e| OamapError::io(path, e))?;
    if meta.is_dir() {
        return Err(OamapError::io(path, std::io::Error::from(ErrorKind::IsADirectory)));
    }
    if !meta.is_file() {
        return Err(OamapError::UnsafeFile { path: path.into(), reason: "a FIFO, socket or device".into() });
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(OamapError::TooLarge {
            what: format!("file {} (bytes)", path.display()),
            limit: MAX_FILE_BYTES,
            found: meta.len(),
        });
    }
    let mut out = Vec::new();
    // Bounded even if the file grows while it is read.
    (&mut f).take(MAX_FILE_BYTES).read_to_end(&mut out).map_err(|e| OamapError::io(path, e))?;
    Ok(out)
}

/// Checks that every directory from `base` down to `path`'s parent is a real directory, not
/// a symbolic link (the components below `base` only; `base` itself is the caller's).
fn check_dirs_below(base: &Path, path: &Path) -> Result<(), OamapError> {
    let Ok(rel) = path.strip_prefix(base) else { return Ok(()) };
    let mut at = base.to_path_buf();
    let parts: Vec<_> = rel.components().collect();
    for c in parts.iter().take(parts.len().saturating_sub(1)) {
        at.push(c);
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(OamapError::UnsafeFile {
                    path: at,
                    reason: "a symbolic link to a directory".into(),
                })
            }
            Ok(m) if !m.is_dir() => {
                return Err(OamapError::io(&at, std::io::Error::from(ErrorKind::NotADirectory)))
            }
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(OamapError::io(&at, e)),
        }
    }
    Ok(())
}

/// A lazy source over an `.npz` file (no schema needed). Feature `npz`.
///
/// # Errors
/// [`OamapError::Io`] naming the file when it cannot be read; [`OamapError::Archive`] when
/// it is not a zip archive.
#[cfg(feature = "npz")]
pub fn npz_file_source(path: &Path) -> Result<NpzSource, OamapError> {
    NpzSource::new(read_regular_file(path)?)
}

/// A directory of `.npy` files, one per array (`<dir>/<array name>.npy`), read on demand
/// (OAMap's `NumpyFileBackend` layout for one partition). An array file that is a symbolic
/// link, a FIFO or a device is [`OamapError::UnsafeFile`].
#[derive(Debug, Clone)]
pub struct NpyDir {
    dir: PathBuf,
}

impl NpyDir {
    /// A source reading `<dir>/<name>.npy`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        NpyDir { dir: dir.into() }
    }
}

/// The array in the `.npy` file at `path`: [`OamapError::MissingArray`] naming `name` when
/// there is no such file, [`OamapError::Io`] when it cannot be read.
fn read_npy(name: &str, path: &Path) -> Result<Arc<Array>, OamapError> {
    let bytes = match read_checked(path, false) {
        Ok(b) => b,
        Err(OamapError::Io { source, .. }) if source.kind() == ErrorKind::NotFound => {
            return Err(OamapError::MissingArray { name: name.to_string() })
        }
        Err(e) => return Err(e),
    };
    parse_npy(name, &bytes).map(Arc::new)
}

impl ArraySource for NpyDir {
    fn get(&self, name: &str) -> Result<Arc<Array>, OamapError> {
        if name.contains('/') || name.contains('\\') || name == ".." {
            return Err(OamapError::MissingArray { name: name.to_string() });
        }
        read_npy(name, &self.dir.join(format!("{name}.npy")))
    }
}

/// Whether a path component is a plain name (no `..`, `.`, empty or separator).
fn plain(c: &str) -> bool {
    !c.is_empty() && c != "." && c != ".." && !c.contains('\\')
}

/// One partition of a dataset in OAMap 0.12's numpy-file database layout
/// (`NumpyFileBackend`): array `<dataset>/PART/<array>` of partition `p` is the file
/// `<dir>/data/<dataset>/<p>/<array>.npy`, read on demand.
#[derive(Debug, Clone)]
pub struct NumpyFilePartition {
    dir: PathBuf,
    partition: usize,
}

impl NumpyFilePartition {
    /// Partition `partition` of the database at `dir`.
    pub fn new(dir: impl Into<PathBuf>, partition: usize) -> Self {
        NumpyFilePartition { dir: dir.into(), partition }
    }

    /// The file holding array `name` (`<dataset>/PART/<array>`), or `None` for a name not of
    /// that shape (or with `..`/`.`/empty components).
    pub fn path_of(&self, name: &str) -> Option<PathBuf> {
        let mut parts = name.rsplitn(3, '/');
        let array = parts.next()?;
        let _part = parts.next()?;
        let dataset = parts.next()?;
        if !plain(array) || !dataset.split('/').all(plain) {
            return None;
        }
        let mut path = self.dir.join("data");
        path.extend(dataset.split('/'));
        Some(path.join(self.partition.to_string()).join(format!("{array}.npy")))
    }
}

impl ArraySource for NumpyFilePartition {
    fn get(&self, name: &str) -> Result<Arc<Array>, OamapError> {
        let path = self.path_of(name).ok_or_else(|| OamapError::MissingArray { name: name.to_string() })?;
        check_dirs_below(&self.dir, &path)?;
        read_npy(name, &path)
    }
}

/// The array-name prefix OAMap's `NumpyFileBackend` uses for `dataset`: `<dataset>/PART/obj`.
pub fn numpy_file_prefix(dataset: &str) -> String {
    format!("{dataset}/PART/obj")
}

/// Opens dataset `dataset` of the OAMap numpy-file database at `dir`: the description
/// `<dir>/data/<dataset>/dataset.json` and, per partition `p`, the arrays
/// `<dir>/data/<dataset>/<p>/<array>.npy` (read lazily, on first use).
///
/// # Errors
/// [`OamapError::Io`] naming the file when `dataset.json` cannot be read;
/// [`OamapError::Json`] naming it when it is not JSON; [`OamapError::Dataset`] for a bad
/// dataset name or description; schema errors.
pub fn open_numpy_file_dataset(dir: &Path, dataset: &str) -> Result<Dataset, OamapError> {
    if !dataset.split('/').all(plain) {
        return Err(OamapError::Dataset(format!("bad dataset name {dataset:?}")));
    }
    let path = dir.join("data").join(dataset).join("dataset.json");
    check_dirs_below(dir, &path)?;
    let text = read_checked(&path, false)?;
    let json: Value = crate::parse_json(&path.display().to_string(), &text)?;
    let description = DatasetDescription::from_json(&json, &numpy_file_prefix(dataset))?;
    let sources = (0..description.num_partitions())
        .map(|p| Arc::new(NumpyFilePartition::new(dir, p)) as Arc<dyn ArraySource>)
        .collect();
    Dataset::new(description, sources)
}

/// Writes `partitions` (JSON arrays of entries) as dataset `dataset` in OAMap's numpy-file
/// database layout at `dir` (what `NumpyFileDatabase(dir).fromdata(dataset, schema,
/// *partitions)` writes): `<dir>/data/<dataset>/<p>/<array>.npy` per partition without the
/// top-level starts/stops, `<dir>/data/<dataset>/dataset.json`, and the backend description
/// `<dir>/backends/_.json`. Returns the description written.
///
/// Every file is written atomically (temporary file, fsync, rename, fsync of the
/// directory), and `dataset.json` only after every array file, so a reader that finds the
/// description finds its arrays.
///
/// # Errors
/// As [`from_data_dataset`]; [`OamapError::Io`] naming the file or directory that cannot
/// be written.
pub fn write_numpy_file_dataset(
    dir: &Path,
    dataset: &str,
    schema: &Value,
    partitions: &[Value],
) -> Result<DatasetDescription, OamapError> {
    if !dataset.split('/').all(plain) {
        return Err(OamapError::Dataset(format!("bad dataset name {dataset:?}")));
    }
    let (description, arrays) = from_data_dataset(schema, &numpy_file_prefix(dataset), partitions)?;
    for (p, set) in arrays.iter().enumerate() {
        let src = NumpyFilePartition::new(dir, p);
        for (name, array) in set.iter() {
            let path = src.path_of(name).ok_or_else(|| OamapError::MissingArray { name: name.clone() })?;
            check_dirs_below(dir, &path)?;
            write_atomic(&path, &write_npy(array))?;
        }
    }
    let path = dir.join("data").join(dataset).join("dataset.json");
    check_dirs_below(dir, &path)?;
    write_atomic(&path, description.to_json().to_string().as_bytes())?;
    let backend = serde_json::json!({
        "class": "oamap.backend.numpyfile.NumpyFileBackend",
        "directory": dir.display().to_string(),
    });
    let path = dir.join("backends").join("_.json");
    check_dirs_below(dir, &path)?;
    write_atomic(&path, backend.to_string().as_bytes())?;
    Ok(description)
}

/// The directory holding `path` (`.` for a bare file name).
fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// fsyncs a directory, so that entries created or renamed in it are durable.
fn sync_dir(dir: &Path) -> Result<(), OamapError> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(|e| OamapError::io(dir, e))
}

/// Creates `dir` and its missing ancestors, fsyncing the parent of each one created.
fn create_dirs(dir: &Path) -> Result<(), OamapError> {
    if dir.is_dir() {
        return Ok(());
    }
    let parent = parent_of(dir);
    if parent != dir {
        create_dirs(parent)?;
    }
    match std::fs::create_dir(dir) {
        Ok(()) => sync_dir(parent),
        Err(e) if e.kind() == ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        Err(e) => Err(OamapError::io(dir, e)),
    }
}

/// Writes `bytes` to `path` atomically: `<path>.tmp` is created exclusively (a leftover one,
/// or a link planted under that name, is removed first, never written through), written and
/// fsynced, then renamed over `path` (which replaces a link there rather than writing to its
/// target), then the directory is fsynced. Missing directories are created.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), OamapError> {
    let dir = parent_of(path);
    create_dirs(dir)?;
    let mut tmp_name = path.file_name().unwrap_or_default().to_os_string();
    tmp_name.push(".tmp");
    let tmp = dir.join(tmp_name);
    match std::fs::remove_file(&tmp) {
        Err(e) if e.kind() != ErrorKind::NotFound => return Err(OamapError::io(&tmp, e)),
        _ => {}
    }
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.custom_flags(libc::O_NOFOLLOW).mode(0o644);
    }
    let mut f = opts.open(&tmp).map_err(|e| OamapError::io(&tmp, e))?;
    f.write_all(bytes).map_err(|e| OamapError::io(&tmp, e))?;
    f.sync_all().map_err(|e| OamapError::io(&tmp, e))?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(|e| OamapError::io(path, e))?;
    sync_dir(dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{from_data, Reader, Schema};

    #[test]
    fn npy_dir_and_npz_file_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let schema = Schema::from_json(&serde_json::json!(
            {"type": "list", "content": {"type": "list", "content": {"type": "primitive", "dtype": "int64"}}}))
        .unwrap();
        let data = serde_json::json!([[1, 2], [], [3]]);
        let arrays = from_data(&schema, &data).unwrap();
        for (name, a) in arrays.iter() {
            std::fs::write(dir.path().join(format!("{name}.npy")), write_npy(a)).unwrap();
        }
        let reader = Reader::new(Arc::new(schema.clone()), Arc::new(NpyDir::new(dir.path())));
        assert_eq!(reader.root_json().unwrap(), data);
        let e = NpyDir::new(dir.path()).get("object-X").unwrap_err();
        assert!(matches!(e, OamapError::MissingArray { name } if name == "object-X"));

        // A file that cannot be read (a directory) keeps the operating system's error.
        std::fs::create_dir(dir.path().join("object-Q.npy")).unwrap();
        match NpyDir::new(dir.path()).get("object-Q").unwrap_err() {
            OamapError::Io { path, source } => {
                assert_eq!(path, dir.path().join("object-Q.npy"));
                assert_eq!(source.kind(), std::io::ErrorKind::IsADirectory);
            }
            other => panic!("{other}"),
        }

        #[cfg(feature = "npz")]
        {
            let npz = dir.path().join("a.npz");
            let bytes = crate::write_npz_with_schema(&schema, &arrays).unwrap();
            std::fs::write(&npz, bytes).unwrap();
            assert_eq!(open_npz_file(&npz).unwrap().root_json().unwrap(), data);
            assert_eq!(npz_file_source(&npz).unwrap().names().len(), 6);
            match open_npz_file(&dir.path().join("missing.npz")).unwrap_err() {
                OamapError::Io { path, source } => {
                    assert_eq!(path, dir.path().join("missing.npz"));
                    assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
                }
                other => panic!("{other}"),
            }
        }
    }

    #[test]
    fn numpy_file_dataset_layout_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let schema = serde_json::json!({"type": "list", "content": {"type": "record", "fields": {
            "x": {"type": "primitive", "dtype": "int32"},
            "y": {"type": "list", "content": {"type": "primitive", "dtype": "float64"}}}}});
        let parts = [
            serde_json::json!([{"x": 1, "y": [1.1]}, {"x": 2, "y": []}, {"x": 3, "y": [3.3, 3.3]}]),
            serde_json::json!([{"x": 4, "y": [4.4]}, {"x": 5, "y": []}]),
        ];
        let desc = write_numpy_file_dataset(dir.path(), "one", &schema, &parts).unwrap();
        let stored: Value =
            serde_json::from_slice(&std::fs::read(dir.path().join("data/one/dataset.json")).unwrap())
                .unwrap();
        assert_eq!(stored, desc.to_json());
        assert_eq!(stored["offsets"], serde_json::json!([0, 3, 5]));
        assert_eq!(stored["schema"]["starts"], "one/PART/obj-B");
        assert_eq!(stored["schema"]["content"]["fields"][0][1]["data"], "one/PART/obj-L-Fx-Di4");
        // Exactly OAMap's files: no top-level starts/stops stored.
        let mut files: Vec<String> = std::fs::read_dir(dir.path().join("data/one/1"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        files.sort();
        assert_eq!(files, ["obj-L-Fx-Di4.npy", "obj-L-Fy-B.npy", "obj-L-Fy-E.npy", "obj-L-Fy-L-Df8.npy"]);
        let x1 =
            parse_npy("x", &std::fs::read(dir.path().join("data/one/1/obj-L-Fx-Di4.npy")).unwrap()).unwrap();
        assert_eq!(x1.to_json(), serde_json::json!([4, 5]));
        assert!(dir.path().join("backends/_.json").exists());

        let ds = open_numpy_file_dataset(dir.path(), "one").unwrap();
        assert_eq!(ds.num_partitions(), 2);
        assert_eq!(ds.partition_json(0).unwrap(), parts[0]);
        assert_eq!(ds.partition_json(1).unwrap(), parts[1]);
        assert_eq!(ds.get_json(3).unwrap(), serde_json::json!({"x": 4, "y": [4.4]}));
        assert_eq!(ds.locate(3).unwrap(), (1, 0));
        // Lazy: only the arrays read so far are loaded.
        let fresh = open_numpy_file_dataset(dir.path(), "one").unwrap();
        let _ = fresh.partition(1).unwrap().root().unwrap();
        assert_eq!(fresh.partition(1).unwrap().loaded(), ["one/PART/obj-B", "one/PART/obj-E"]);

        // Damage: a missing partition file names the partition and the array.
        std::fs::remove_file(dir.path().join("data/one/1/obj-L-Fy-L-Df8.npy")).unwrap();
        let ds = open_numpy_file_dataset(dir.path(), "one").unwrap();
        match ds.get_json(3).unwrap_err() {
            OamapError::InPartition { partition: 1, source } => {
                assert!(
                    matches!(*source, OamapError::MissingArray { ref name } if name == "one/PART/obj-L-Fy-L-Df8")
                )
            }
            other => panic!("{other}"),
        }
        // Atomic writes leave no temporary file behind.
        for sub in ["data/one", "data/one/0", "data/one/1", "backends"] {
            let tmp: Vec<_> = std::fs::read_dir(dir.path().join(sub))
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .filter(|n| n.ends_with(".tmp"))
                .collect();
            assert!(tmp.is_empty(), "{sub}: {tmp:?}");
        }
        match open_numpy_file_dataset(dir.path(), "two").unwrap_err() {
            OamapError::Io { path, source } => {
                assert_eq!(path, dir.path().join("data/two/dataset.json"));
                assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
            }
            other => panic!("{other}"),
        }
        std::fs::create_dir_all(dir.path().join("data/three")).unwrap();
        std::fs::write(dir.path().join("data/three/dataset.json"), "{not json").unwrap();
        let e = open_numpy_file_dataset(dir.path(), "three").unwrap_err();
        assert!(matches!(&e, OamapError::Json { name, .. } if name.ends_with("dataset.json")), "{e}");
        assert!(std::error::Error::source(&e).is_some());
        // A file where a directory must go: the I/O error names it.
        let blocked = dir.path().join("blocked");
        std::fs::write(&blocked, b"").unwrap();
        match write_numpy_file_dataset(&blocked, "one", &schema, &parts).unwrap_err() {
            OamapError::Io { path, .. } => assert!(path.starts_with(&blocked), "{}", path.display()),
            other => panic!("{other}"),
        }
        let e = open_numpy_file_dataset(dir.path(), "../one").unwrap_err();
        assert!(
            matches!(&e, OamapError::Dataset(reason) if reason == "bad dataset name \"../one\""),
            "{e:?}"
        );
        assert!(NumpyFilePartition::new(dir.path(), 0).path_of("../x/y").is_none());
        assert!(NumpyFilePartition::new(dir.path(), 0).path_of("noslash").is_none());
    }
}
