//! OAMap array sources on disk: an `.npz` file, or a directory of `<name>.npy` files.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use guideloom_formats::oamap::{open_npz, parse_npy, Array, ArraySource, NpzSource, OamapError, Reader};

/// Opens an OAMap `.npz` file whose schema is stored in it (member `object`), as a lazy
/// [`Reader`]: members are decompressed on first use.
///
/// # Errors
/// [`OamapError::Npy`] naming the file when it cannot be read; the errors of
/// [`guideloom_formats::oamap::open_npz`].
pub fn open_npz_file(path: &Path) -> Result<Reader, OamapError> {
    let bytes = std::fs::read(path)
        .map_err(|e| OamapError::Npy { name: path.display().to_string(), reason: e.to_string() })?;
    open_npz(bytes)
}

/// A lazy source over an `.npz` file (no schema needed).
///
/// # Errors
/// As [`open_npz_file`].
pub fn npz_file_source(path: &Path) -> Result<NpzSource, OamapError> {
    let bytes = std::fs::read(path)
        .map_err(|e| OamapError::Npy { name: path.display().to_string(), reason: e.to_string() })?;
    NpzSource::new(bytes)
}

/// A directory of `.npy` files, one per array (`<dir>/<array name>.npy`), read on demand
/// (OAMap's `NumpyFileBackend` layout for one partition).
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

impl ArraySource for NpyDir {
    fn get(&self, name: &str) -> Result<Arc<Array>, OamapError> {
        if name.contains('/') || name.contains('\\') || name == ".." {
            return Err(OamapError::MissingArray { name: name.to_string() });
        }
        let path = self.dir.join(format!("{name}.npy"));
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(OamapError::MissingArray { name: name.to_string() })
            }
            Err(e) => {
                return Err(OamapError::Npy { name: path.display().to_string(), reason: e.to_string() })
            }
        };
        parse_npy(name, &bytes).map(Arc::new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use guideloom_formats::oamap::{fromdata, write_npy, Schema};

    #[test]
    fn npy_dir_and_npz_file_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let schema = Schema::from_json(&serde_json::json!(
            {"type": "list", "content": {"type": "list", "content": {"type": "primitive", "dtype": "int64"}}}))
        .unwrap();
        let data = serde_json::json!([[1, 2], [], [3]]);
        let arrays = fromdata(&schema, &data).unwrap();
        for (name, a) in arrays.iter() {
            std::fs::write(dir.path().join(format!("{name}.npy")), write_npy(a)).unwrap();
        }
        let reader = Reader::new(Arc::new(schema.clone()), Arc::new(NpyDir::new(dir.path())));
        assert_eq!(reader.root_json().unwrap(), data);
        let e = NpyDir::new(dir.path()).get("object-X").unwrap_err();
        assert!(matches!(e, OamapError::MissingArray { name } if name == "object-X"));

        let npz = dir.path().join("a.npz");
        let bytes = guideloom_formats::oamap::oam_fromdata_npz(
            &serde_json::json!({"type": "list", "content": {"type": "list", "content": {"type": "primitive", "dtype": "int64"}}}),
            &data,
        )
        .unwrap();
        std::fs::write(&npz, bytes).unwrap();
        assert_eq!(open_npz_file(&npz).unwrap().root_json().unwrap(), data);
        assert_eq!(npz_file_source(&npz).unwrap().names().len(), 6);
        assert!(open_npz_file(&dir.path().join("missing.npz")).is_err());
    }
}
