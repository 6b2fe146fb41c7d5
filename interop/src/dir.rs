//! The directory a foreign dataset's reader reads through when some of its files are held in
//! memory (decompressed MDS shards), decoded on demand ([`DecodedFile`]: Parquet token
//! columns) or named by paths below its root: [`ForeignDir`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use guideloom_storage::{FileSet, ReadRequest, Result, StorageDir, StorageError};

/// A file whose bytes are made on demand (a Parquet token column decoded page by page into
/// little-endian elements): what [`ForeignDir`] serves under its name.
pub(crate) trait DecodedFile: std::fmt::Debug + Send + Sync {
    /// Its size in bytes.
    fn len(&self) -> u64;

    /// Fills `out` with its bytes from `offset`.
    ///
    /// # Errors
    /// [`StorageError::ShortRead`] past the end; the decoder's errors
    /// ([`StorageError::Io`] naming the file, with the layout's error inside).
    fn read_at(&self, offset: u64, out: &mut [u8]) -> Result<()>;
}

/// A foreign dataset's directory with some files held in memory (decompressed MDS shards) or
/// decoded on demand: names relative to the root, in memory first, then decoded, else on
/// disk.
#[derive(Debug)]
pub(crate) struct ForeignDir {
    /// The dataset's root, which names are relative to.
    pub(crate) root: PathBuf,
    /// The files held in memory, by name.
    pub(crate) mem: BTreeMap<String, Arc<[u8]>>,
    /// The files decoded on demand, by name.
    pub(crate) decoded: BTreeMap<String, Arc<dyn DecodedFile>>,
    /// The dataset's directory, for the files not in memory.
    pub(crate) inner: Arc<dyn StorageDir>,
}

impl StorageDir for ForeignDir {
    fn path(&self) -> &Path {
        &self.root
    }

    fn file_len(&self, name: &str) -> Result<Option<u64>> {
        match (self.mem.get(name), self.decoded.get(name)) {
            (Some(b), _) => Ok(Some(b.len() as u64)),
            (None, Some(d)) => Ok(Some(d.len())),
            (None, None) => self.inner.file_len(name),
        }
    }

    fn read_at(&self, name: &str, offset: u64, out: &mut [u8]) -> Result<()> {
        let Some(bytes) = self.mem.get(name) else {
            return match self.decoded.get(name) {
                Some(d) => d.read_at(offset, out),
                None => self.inner.read_at(name, offset, out),
            };
        };
        let start = usize::try_from(offset).map_or(bytes.len(), |o| o.min(bytes.len()));
        let available = &bytes[start..];
        if available.len() < out.len() {
            return Err(StorageError::ShortRead {
                path: self.root.join(name),
                offset,
                expected: out.len() as u64,
                got: available.len() as u64,
            });
        }
        out.copy_from_slice(&available[..out.len()]);
        Ok(())
    }

    /// Names files by their path below the root (an MDS index may point into
    /// sub-directories), not by their last component.
    fn read_requests(&self, files: &FileSet, requests: &[ReadRequest], out: &mut [u8]) -> Result<()> {
        let total = requests.iter().fold(0u64, |a, r| a.saturating_add(r.len));
        if total != out.len() as u64 {
            return Err(StorageError::BufferLength { expected: total, found: out.len() as u64 });
        }
        let mut pos = 0usize;
        for r in requests {
            let file = files.get(r.file)?;
            let rel = file.path.strip_prefix(&self.root).unwrap_or(&file.path);
            let name = rel.to_str().ok_or_else(|| StorageError::Io {
                path: file.path.clone(),
                source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "not UTF-8"),
            })?;
            let n = r.len as usize;
            self.read_at(name, r.offset, &mut out[pos..pos + n])?;
            pos += n;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use guideloom_storage::{conformance, LocalDir, StorageDir};

    use super::ForeignDir;

    /// The storage seam's conformance suite over the foreign directory (issue 26): with every
    /// fixture file in memory, every one on disk behind it, and the two mixed.
    #[test]
    fn issue26_foreign_dir_passes_the_storage_dir_conformance_suite() {
        let files = conformance::fixture();
        for in_memory in [vec![true; files.len()], vec![false; files.len()], vec![true, false, true]] {
            let disk = tempfile::tempdir().unwrap();
            let mut mem = BTreeMap::new();
            for ((name, bytes), &held) in files.iter().zip(&in_memory) {
                if held {
                    mem.insert(name.to_string(), Arc::from(bytes.clone().into_boxed_slice()));
                } else {
                    std::fs::write(disk.path().join(name), bytes).unwrap();
                }
            }
            let dir = ForeignDir {
                root: disk.path().to_path_buf(),
                mem,
                decoded: BTreeMap::new(),
                inner: Arc::new(LocalDir::new(disk.path())) as Arc<dyn StorageDir>,
            };
            conformance::check_read(&dir);
        }
    }
}
