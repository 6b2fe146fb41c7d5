//! The Rust writers and readers of the three storage kinds, over the pass-through formats of
//! [`crate::formats`]. The Python classes `StreamStorage`, `DocumentStorage` and
//! `StreamWithMetaStorage` run the user's format around them.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use numpy::{IntoPyArray, PyArray1, PyReadonlyArray1};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use serde_json::Value;

use crate::errors::{py_err, raise};
use crate::fork::read_options;
use crate::formats::{DocumentBytes, MetaBytes, MetaRecord, Segments, Spec, StreamBytes};
use crate::rust_api::{
    DocumentReader, DocumentWriter, Dtype, Manifest, StreamReader, StreamWithMetaReader,
    StreamWithMetaWriter, StreamWriter, Window, Writer, WriterKind,
};

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyStreamWriter>()?;
    m.add_class::<PyStreamReader>()?;
    m.add_class::<PyDocumentWriter>()?;
    m.add_class::<PyDocumentReader>()?;
    m.add_class::<PyMetaWriter>()?;
    m.add_class::<PyMetaReader>()?;
    m.add_function(wrap_pyfunction!(manifest_format, m)?)?;
    Ok(())
}

fn json(text: &str, what: &str) -> PyResult<Value> {
    serde_json::from_str(text).map_err(|e| raise("ConfigError", format!("{what} is not valid JSON: {e}")))
}

fn spec(name: String, params: &str) -> PyResult<Spec> {
    Ok(Spec { name, params: json(params, "format params")? })
}

fn dtype(descr: &str) -> PyResult<Dtype> {
    Dtype::from_descr(&json(descr, "dtype descr")?).map_err(py_err)
}

/// The dtype given, or the one the manifest in `path` records.
fn dtype_or_manifest(path: &Path, descr: Option<&str>) -> PyResult<Dtype> {
    match descr {
        Some(d) => dtype(d),
        None => {
            let m = Manifest::load(path).map_err(py_err)?;
            m.dtype()
                .cloned()
                .ok_or_else(|| raise("StorageMismatchError", format!("{} records no dtype", path.display())))
        }
    }
}

/// Refuses to create a storage where one is already committed (mode `"w"`).
fn check_new(path: &Path, create: bool) -> PyResult<()> {
    if create && path.join("manifest.json").exists() {
        return Err(raise(
            "StorageExistsError",
            format!("{} already holds a storage: open it with mode=\"a\" to append", path.display()),
        ));
    }
    Ok(())
}

/// `(kind, dtype descr JSON or None, format name, format params JSON)` of the manifest in `path`.
#[pyfunction]
fn manifest_format(path: PathBuf) -> PyResult<(String, Option<String>, String, String)> {
    let m = Manifest::load(&path).map_err(py_err)?;
    let descr = m.dtype().map(|d| d.to_descr().to_string());
    Ok((m.kind().to_string(), descr, m.format().name.clone(), m.format().params.to_string()))
}

fn windows(spans: &[(u64, u64)]) -> Vec<Window> {
    spans.iter().map(|&(o, l)| Window::new(o, l)).collect()
}

fn segments_py<'py>(py: Python<'py>, s: Segments) -> (Bound<'py, PyArray1<i64>>, Bound<'py, PyArray1<i64>>) {
    let lengths: Vec<i64> = s.lengths.iter().map(|&l| l as i64).collect();
    let shards: Vec<i64> = s.shards.iter().map(|&l| l as i64).collect();
    (lengths.into_pyarray(py), shards.into_pyarray(py))
}

/// Takes the writer out of its slot, or fails when it is closed.
fn with_writer<W, T>(slot: &Mutex<Option<W>>, f: impl FnOnce(&mut W) -> PyResult<T>) -> PyResult<T> {
    let mut guard = slot.lock().map_err(|_| raise("StorageError", "the writer was poisoned by a panic"))?;
    match guard.as_mut() {
        Some(w) => f(w),
        None => Err(raise("StorageClosedError", "the writer is closed")),
    }
}

/// Opens (`create`: creates) the writer of a storage, in its slot.
fn open_writer<K: WriterKind>(
    path: &Path,
    create: bool,
    format: K::Format,
) -> PyResult<Mutex<Option<Writer<K>>>> {
    check_new(path, create)?;
    Ok(Mutex::new(Some(Writer::open(path, format).map_err(py_err)?)))
}

/// Commits the writer of `slot` with the GIL released.
fn commit<K: WriterKind>(py: Python<'_>, slot: &Mutex<Option<Writer<K>>>) -> PyResult<()>
where
    Writer<K>: Send,
{
    py.detach(|| with_writer(slot, |w| w.commit().map_err(py_err)))
}

/// Drops the writer of `slot` (what it appended since its last commit is discarded).
fn close<T>(slot: &Mutex<Option<T>>) {
    if let Ok(mut g) = slot.lock() {
        g.take();
    }
}

/// The Rust stream writer: `append(element bytes, shard)`, `commit()`, `close()`.
#[pyclass(module = "guideloom._guideloom", name = "_StreamWriter")]
struct PyStreamWriter {
    inner: Mutex<Option<StreamWriter<StreamBytes>>>,
}

#[pymethods]
impl PyStreamWriter {
    #[new]
    fn new(path: PathBuf, descr: &str, name: String, params: &str, create: bool) -> PyResult<Self> {
        let format = StreamBytes { spec: spec(name, params)?, dtype: dtype(descr)? };
        Ok(PyStreamWriter { inner: open_writer(&path, create, format)? })
    }

    /// Appends one record's element bytes to `shard`; returns its element count.
    fn append(&self, data: PyReadonlyArray1<'_, u8>, shard: u64) -> PyResult<u64> {
        let bytes = data.as_slice().map_err(|e| raise("FormatError", e.to_string()))?;
        with_writer(&self.inner, |w| w.append(shard, bytes).map_err(py_err))
    }

    fn commit(&self, py: Python<'_>) -> PyResult<()> {
        commit(py, &self.inner)
    }

    fn shard_len(&self, shard: u64) -> PyResult<u64> {
        with_writer(&self.inner, |w| Ok(w.shard_len(shard)))
    }

    fn close(&self) {
        close(&self.inner);
    }
}

/// The Rust stream reader: `read_many([(offset, length)])` gives the bytes of every window back to
/// back (one numpy `uint8` array over Rust-owned memory) and each window's segmentation.
#[pyclass(module = "guideloom._guideloom", name = "_StreamReader", frozen)]
struct PyStreamReader {
    inner: StreamReader<StreamBytes>,
}

#[pymethods]
impl PyStreamReader {
    #[new]
    #[pyo3(signature = (path, descr, name, params))]
    fn new(path: PathBuf, descr: Option<&str>, name: String, params: &str) -> PyResult<Self> {
        let format = StreamBytes { spec: spec(name, params)?, dtype: dtype_or_manifest(&path, descr)? };
        Ok(PyStreamReader { inner: StreamReader::open_with(&path, format, read_options()).map_err(py_err)? })
    }

    fn __len__(&self) -> usize {
        self.inner.len() as usize
    }

    /// The stored dtype as numpy descr JSON.
    fn descr(&self) -> String {
        self.inner.dtype().to_descr().to_string()
    }

    fn fingerprint(&self) -> u64 {
        self.inner.fingerprint()
    }

    #[allow(clippy::type_complexity)]
    fn read_many<'py>(
        &self,
        py: Python<'py>,
        spans: Vec<(u64, u64)>,
    ) -> PyResult<(Bound<'py, PyArray1<u8>>, Vec<(Bound<'py, PyArray1<i64>>, Bound<'py, PyArray1<i64>>)>)>
    {
        let w = windows(&spans);
        let (bytes, segs) = py
            .detach(|| {
                let plan = self.inner.plan(&w)?;
                let bytes = self.inner.fetch(&plan)?;
                let segs = self.inner.decode(&plan, &bytes)?;
                Ok::<_, crate::rust_api::StorageError>((bytes, segs))
            })
            .map_err(py_err)?;
        let segs = segs.into_iter().map(|s| segments_py(py, s)).collect();
        Ok((bytes.into_pyarray(py), segs))
    }
}

/// The Rust document writer: `append(bytes, shard)`, `commit()`, `close()`.
#[pyclass(module = "guideloom._guideloom", name = "_DocumentWriter")]
struct PyDocumentWriter {
    inner: Mutex<Option<DocumentWriter<DocumentBytes>>>,
}

#[pymethods]
impl PyDocumentWriter {
    #[new]
    fn new(path: PathBuf, name: String, params: &str, create: bool) -> PyResult<Self> {
        Ok(PyDocumentWriter {
            inner: open_writer(&path, create, DocumentBytes { spec: spec(name, params)? })?,
        })
    }

    /// Appends one encoded document to `shard`; returns its global index.
    fn append(&self, data: &[u8], shard: u64) -> PyResult<u64> {
        with_writer(&self.inner, |w| w.append(shard, data).map_err(py_err))
    }

    fn commit(&self, py: Python<'_>) -> PyResult<()> {
        commit(py, &self.inner)
    }

    fn close(&self) {
        close(&self.inner);
    }
}

/// The Rust document reader: `get_many([index])` gives `(bytes, shard)` per document.
#[pyclass(module = "guideloom._guideloom", name = "_DocumentReader", frozen)]
struct PyDocumentReader {
    inner: DocumentReader<DocumentBytes>,
}

#[pymethods]
impl PyDocumentReader {
    #[new]
    fn new(path: PathBuf, name: String, params: &str) -> PyResult<Self> {
        let r = DocumentReader::open_with(&path, DocumentBytes { spec: spec(name, params)? }, read_options())
            .map_err(py_err)?;
        Ok(PyDocumentReader { inner: r })
    }

    fn __len__(&self) -> usize {
        self.inner.len() as usize
    }

    fn fingerprint(&self) -> u64 {
        self.inner.fingerprint()
    }

    fn get_many<'py>(&self, py: Python<'py>, indices: Vec<u64>) -> PyResult<Vec<(Bound<'py, PyBytes>, u64)>> {
        let docs = py.detach(|| self.inner.get_many(&indices)).map_err(py_err)?;
        Ok(docs.into_iter().map(|(b, s)| (PyBytes::new(py, &b), s)).collect())
    }
}

/// The Rust stream-with-meta writer: `append(element bytes, keys, payloads, shard)`.
#[pyclass(module = "guideloom._guideloom", name = "_MetaWriter")]
struct PyMetaWriter {
    inner: Mutex<Option<StreamWithMetaWriter<MetaBytes>>>,
}

#[pymethods]
impl PyMetaWriter {
    #[new]
    fn new(path: PathBuf, descr: &str, name: String, params: &str, create: bool) -> PyResult<Self> {
        let format = MetaBytes { spec: spec(name, params)?, dtype: dtype(descr)? };
        Ok(PyMetaWriter { inner: open_writer(&path, create, format)? })
    }

    /// Appends one record: its element bytes, per element its run key (interned within the
    /// record) and the payload of each run's first pair (`None` elsewhere).
    fn append(
        &self,
        data: PyReadonlyArray1<'_, u8>,
        keys: Vec<u64>,
        payloads: Vec<Option<Vec<u8>>>,
        shard: u64,
    ) -> PyResult<u64> {
        if keys.len() != payloads.len() {
            return Err(raise("FormatError", format!("{} keys but {} payloads", keys.len(), payloads.len())));
        }
        let stream = data.as_slice().map_err(|e| raise("FormatError", e.to_string()))?.to_vec();
        let record = MetaRecord { stream, keys, payloads };
        with_writer(&self.inner, |w| w.append(shard, &record).map_err(py_err))
    }

    fn commit(&self, py: Python<'_>) -> PyResult<()> {
        commit(py, &self.inner)
    }

    fn close(&self) {
        close(&self.inner);
    }
}

/// One stream-with-meta window for Python: element bytes, segment lengths and shards, payload
/// shards, per-element payload indices, payloads.
type MetaWindowPy<'py> = (
    Bound<'py, PyArray1<u8>>,
    Bound<'py, PyArray1<i64>>,
    Bound<'py, PyArray1<i64>>,
    Bound<'py, PyArray1<i64>>,
    Bound<'py, PyArray1<i32>>,
    Vec<Bound<'py, PyBytes>>,
);

/// The Rust stream-with-meta reader.
#[pyclass(module = "guideloom._guideloom", name = "_MetaReader", frozen)]
struct PyMetaReader {
    inner: StreamWithMetaReader<MetaBytes>,
}

#[pymethods]
impl PyMetaReader {
    #[new]
    #[pyo3(signature = (path, descr, name, params))]
    fn new(path: PathBuf, descr: Option<&str>, name: String, params: &str) -> PyResult<Self> {
        let format = MetaBytes { spec: spec(name, params)?, dtype: dtype_or_manifest(&path, descr)? };
        Ok(PyMetaReader {
            inner: StreamWithMetaReader::open_with(&path, format, read_options()).map_err(py_err)?,
        })
    }

    fn __len__(&self) -> usize {
        self.inner.len() as usize
    }

    fn descr(&self) -> String {
        self.inner.dtype().to_descr().to_string()
    }

    fn fingerprint(&self) -> u64 {
        self.inner.fingerprint()
    }

    fn read_many<'py>(&self, py: Python<'py>, spans: Vec<(u64, u64)>) -> PyResult<Vec<MetaWindowPy<'py>>> {
        let w = windows(&spans);
        let reads = py.detach(|| self.inner.read_many(&w)).map_err(py_err)?;
        Ok(reads
            .into_iter()
            .map(|r| {
                let (lengths, shards) = segments_py(py, r.segments);
                let dshard: Vec<i64> = r.document_shard.iter().map(|&s| s as i64).collect();
                let dindex: Vec<i32> = r.document_index.iter().map(|&i| i as i32).collect();
                let data = r.document_data.iter().map(|d| PyBytes::new(py, d)).collect();
                (
                    r.stream.into_pyarray(py),
                    lengths,
                    shards,
                    dshard.into_pyarray(py),
                    dindex.into_pyarray(py),
                    data,
                )
            })
            .collect())
    }
}
