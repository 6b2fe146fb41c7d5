//! Parts of a job and their one commit (`guideloom.parts`): `_PartWriter` writes one part of a
//! token stream storage (element bytes appended with the GIL released), `commit_parts`,
//! `abort_parts` and `gc_parts` call guideloom-storage's `parts` module. Every root is a local
//! path or an object-store URL (`s3://`, `gs://`, `az://`: parts written straight to the store,
//! the store's options from the environment, as the CLI reads them).

use std::sync::Mutex;

use numpy::PyReadonlyArray1;
use pyo3::prelude::*;
use serde_json::json;

use crate::errors::{py_err, raise};
use crate::formats::{Spec, StreamBytes};
use crate::rust_api::{
    CommitMode, Dtype, PartWriter, PartsRoot, Receipt, RemoteOptions, StorageLocation, StreamKind,
};

/// `root`, a local path or an object-store URL (the store's options from the environment).
fn parts_root(root: &str) -> PyResult<PartsRoot> {
    PartsRoot::open(StorageLocation::parse(root), RemoteOptions::from_env).map_err(py_err)
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyPartWriter>()?;
    m.add_function(wrap_pyfunction!(commit_parts_py, m)?)?;
    m.add_function(wrap_pyfunction!(abort_parts_py, m)?)?;
    m.add_function(wrap_pyfunction!(gc_parts_py, m)?)?;
    m.add_function(wrap_pyfunction!(check_receipt, m)?)?;
    Ok(())
}

type TokenPart = PartWriter<StreamKind<StreamBytes>>;

/// The writer of one part of a token stream storage (format `tokens`, the dtype given): the
/// manifest a `guideloom ingest` storage records.
#[pyclass(module = "guideloom._guideloom", name = "_PartWriter")]
struct PyPartWriter {
    inner: Mutex<Option<TokenPart>>,
    itemsize: u64,
}

#[pymethods]
impl PyPartWriter {
    #[new]
    fn new(
        py: Python<'_>,
        root: String,
        job: String,
        partition: u64,
        attempt: u64,
        descr: &str,
    ) -> PyResult<Self> {
        let value = serde_json::from_str(descr)
            .map_err(|e| raise("ConfigError", format!("dtype descr is not valid JSON: {e}")))?;
        let dtype = Dtype::from_descr(&value).map_err(py_err)?;
        let itemsize = dtype.itemsize();
        let format = StreamBytes { spec: Spec { name: "tokens".into(), params: json!({}) }, dtype };
        let w = match StorageLocation::parse(&root) {
            StorageLocation::Remote(url) => {
                let options = RemoteOptions::from_env().map_err(py_err)?;
                py.detach(|| PartWriter::open_remote(&url, &job, partition, attempt, format, options))
            }
            StorageLocation::Local(path) => {
                py.detach(|| PartWriter::open(&path, &job, partition, attempt, format))
            }
        }
        .map_err(py_err)?;
        Ok(PyPartWriter { inner: Mutex::new(Some(w)), itemsize })
    }

    /// Appends element bytes (a whole number of elements, already in the part's dtype) to the
    /// part's shard, with the GIL released; returns the part's element count so far.
    fn append(&self, py: Python<'_>, data: PyReadonlyArray1<'_, u8>) -> PyResult<u64> {
        let bytes = data.as_slice().map_err(|e| raise("FormatError", e.to_string()))?;
        if !(bytes.len() as u64).is_multiple_of(self.itemsize) {
            return Err(raise(
                "FormatError",
                format!("{} bytes are not whole {}-byte elements", bytes.len(), self.itemsize),
            ));
        }
        let mut guard = self
            .inner
            .lock()
            .map_err(|_| raise("StorageError", "the part writer was poisoned by a panic"))?;
        let w = guard.as_mut().ok_or_else(|| raise("StorageClosedError", "the part writer is closed"))?;
        py.detach(|| w.append(0, bytes)).map_err(py_err)?;
        Ok(w.shard_len(0))
    }

    /// Commits the part and returns its receipt as JSON text (the writer is then closed).
    fn finish(&self, py: Python<'_>) -> PyResult<String> {
        let w = self
            .inner
            .lock()
            .map_err(|_| raise("StorageError", "the part writer was poisoned by a panic"))?
            .take()
            .ok_or_else(|| raise("StorageClosedError", "the part writer is closed"))?;
        let receipt = py.detach(|| w.finish()).map_err(py_err)?;
        Ok(receipt.to_json())
    }

    /// Drops the writer without committing (the part's directory stays until `abort` or `gc`).
    fn close(&self) {
        if let Ok(mut g) = self.inner.lock() {
            g.take();
        }
    }
}

/// Checks a receipt's JSON text; returns it normalised.
#[pyfunction]
fn check_receipt(text: &str) -> PyResult<String> {
    Ok(Receipt::from_json(text).map_err(py_err)?.to_json())
}

/// Commits receipts (JSON texts) into `root`; returns `(partitions, shards, fingerprint)`.
#[pyfunction]
#[pyo3(name = "commit_parts")]
fn commit_parts_py(
    py: Python<'_>,
    root: String,
    receipts: Vec<String>,
    mode: &str,
) -> PyResult<(u64, u64, u64)> {
    let mode: CommitMode = mode.parse().map_err(|e: String| raise("ConfigError", e))?;
    let receipts =
        receipts.iter().map(|t| Receipt::from_json(t)).collect::<Result<Vec<_>, _>>().map_err(py_err)?;
    let root = parts_root(&root)?;
    let report = py.detach(|| root.commit(&receipts, mode, None)).map_err(py_err)?;
    Ok((report.partitions, report.shards, report.fingerprint))
}

/// Removes the uncommitted parts of `job` under `root`; returns what was removed.
#[pyfunction]
#[pyo3(name = "abort_parts")]
fn abort_parts_py(py: Python<'_>, root: String, job: String) -> PyResult<Vec<String>> {
    let root = parts_root(&root)?;
    py.detach(|| root.abort(&job)).map_err(py_err)
}

/// The part directories under `root` no manifest references (deleted when `apply`).
#[pyfunction]
#[pyo3(name = "gc_parts")]
fn gc_parts_py(py: Python<'_>, root: String, apply: bool) -> PyResult<Vec<String>> {
    let root = parts_root(&root)?;
    py.detach(|| root.gc(apply)).map_err(py_err)
}
