//! `guideloom.oamap`'s compiled part: OAMap schemas bound to array sources (a Python mapping, an
//! `.npz` file, a directory of `.npy` files) and the lazy proxies over the Rust reader
//! (`guideloom-oamap`).
//!
//! - `_Schema`: a parsed schema (`from_json`, `to_json`, `array_names`), `bind(source)` gives
//!   the root value (a `_ListProxy` for a list schema);
//! - `_ListProxy` / `_RecordProxy`: views into one partition (a `Reader`): a list is a range of
//!   its content node's indices, a record a node and an index; tuples come back as Python
//!   tuples, strings as `str`/`bytes`, null as `None`;
//! - the arrays a Python source returns go through `numpy.asarray`, are checked (one
//!   dimension, a dtype OAMap stores, at most `max_bytes` over the partition) and copied into
//!   the reader's arrays once; the reader checks every structural value (starts, stops, masks,
//!   tags, offsets, positions) and every index before use. A Python exception a source raises
//!   (other than `KeyError`, a missing array) comes back as itself, chained to the OAMap error
//!   naming the array.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use numpy::IntoPyArray;
use pyo3::exceptions::{PyAttributeError, PyIndexError, PyKeyError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyComplex, PyList, PySlice, PyTuple};

use crate::errors::{py_err, raise};
use crate::rust_api::{
    from_oamap_data, oamap_fs, oamap_parse_json, Column, DatasetDescription, NodeId, NodeKind, OamArray,
    OamArraySource, OamDtype, OamReader, OamSchema, OamValue, OamapError, PartitionArrays,
    DEFAULT_MAX_NPZ_TOTAL,
};

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PySchema>()?;
    m.add_class::<PyListProxy>()?;
    m.add_class::<PyRecordProxy>()?;
    m.add_class::<PyListIter>()?;
    m.add_function(wrap_pyfunction!(oamap_open_npz, m)?)?;
    m.add_function(wrap_pyfunction!(oamap_from_data, m)?)?;
    Ok(())
}

/// Where a partition's arrays come from.
enum Origin {
    /// A Python mapping (`__getitem__` by array name).
    Python(Py<PyAny>),
    /// A Rust source (an `.npz` file, a directory of `.npy` files).
    Rust(Arc<dyn OamArraySource>),
}

/// An array source over a Python mapping or a Rust source that keeps, for every array it
/// handed to the reader, the numpy array (the one a Python source returned, or a copy of a
/// Rust array made on request), for `to_awkward` and for `array(name)`.
struct Fetched {
    origin: Origin,
    /// The most bytes the arrays of a Python source may hold together.
    max_bytes: u64,
    state: Mutex<FetchState>,
}

#[derive(Default)]
struct FetchState {
    /// numpy arrays by name.
    numpy: BTreeMap<String, Py<PyAny>>,
    /// Bytes taken from the Python source so far.
    bytes: u64,
    /// The last Python exception a source raised, with the array asked for.
    raised: Option<(String, PyErr)>,
}

impl Fetched {
    fn new(origin: Origin, max_bytes: u64) -> Self {
        Fetched { origin, max_bytes, state: Mutex::new(FetchState::default()) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FetchState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reads `name` from the Python source and checks it.
    fn fetch_python(&self, py: Python<'_>, source: &Py<PyAny>, name: &str) -> Result<OamArray, OamapError> {
        let bad = |reason: String| OamapError::Npy { name: name.to_string(), reason };
        let got = match source.bind(py).get_item(name) {
            Ok(v) => v,
            Err(e) if e.is_instance_of::<PyKeyError>(py) => {
                return Err(OamapError::MissingArray { name: name.to_string() })
            }
            Err(e) => {
                let reason = format!("the source raised {e}");
                self.lock().raised = Some((name.to_string(), e));
                return Err(bad(reason));
            }
        };
        let arr = py
            .import("numpy")
            .and_then(|np| np.getattr("asarray"))
            .and_then(|f| f.call1((&got,)))
            .map_err(|e| bad(format!("not an array ({e})")))?;
        let ndim: usize = arr.getattr("ndim").and_then(|n| n.extract()).map_err(|e| bad(e.to_string()))?;
        if ndim != 1 {
            return Err(bad(format!("{ndim} dimensions (an OAMap array has one)")));
        }
        let descr: String = arr
            .getattr("dtype")
            .and_then(|d| d.getattr("str"))
            .and_then(|s| s.extract())
            .map_err(|e| bad(e.to_string()))?;
        let dtype =
            OamDtype::parse(&descr).map_err(|_| bad(format!("dtype {descr} is not one OAMap stores")))?;
        let nbytes: u64 = arr.getattr("nbytes").and_then(|n| n.extract()).map_err(|e| bad(e.to_string()))?;
        {
            let mut st = self.lock();
            let total = st.bytes.saturating_add(nbytes);
            if total > self.max_bytes {
                return Err(OamapError::TooLarge {
                    what: format!("array {name:?} from the Python source (bytes of the partition's arrays)"),
                    found: total,
                    limit: self.max_bytes,
                });
            }
            st.bytes = total;
        }
        let raw = arr.call_method0("tobytes").map_err(|e| bad(e.to_string()))?;
        let raw = raw.cast::<PyBytes>().map_err(|e| bad(e.to_string()))?;
        let array = OamArray::from_bytes(name, dtype, raw.as_bytes())?;
        self.lock().numpy.insert(name.to_string(), arr.unbind());
        Ok(array)
    }

    /// The Python exception behind the last failed fetch, if the source raised one.
    fn take_raised(&self) -> Option<(String, PyErr)> {
        self.lock().raised.take()
    }
}

impl OamArraySource for Fetched {
    fn get(&self, name: &str) -> Result<Arc<OamArray>, OamapError> {
        match &self.origin {
            Origin::Rust(s) => s.get(name),
            Origin::Python(source) => Python::attach(|py| self.fetch_python(py, source, name)).map(Arc::new),
        }
    }
}

/// One partition: the reader, what it reads, and the fetching source under it.
struct Part {
    reader: OamReader,
    /// What the reader reads (the fetching source, or a partition wrapper over it).
    source: Arc<dyn OamArraySource>,
    fetched: Arc<Fetched>,
}

impl Part {
    fn new(schema: Arc<OamSchema>, fetched: Arc<Fetched>, source: Arc<dyn OamArraySource>) -> Arc<Self> {
        Arc::new(Part { reader: OamReader::new(schema, Arc::clone(&source)), source, fetched })
    }

    /// A Rust error as its Python exception, with a Python source's own exception as the cause.
    fn err(&self, py: Python<'_>, e: OamapError) -> PyErr {
        let out = py_err(e);
        if let Some((_, cause)) = self.fetched.take_raised() {
            out.set_cause(py, Some(cause));
        }
        out
    }

    /// The numpy array of `name` (fetching it now if it was not yet).
    fn numpy(&self, py: Python<'_>, name: &str) -> PyResult<Py<PyAny>> {
        if let Some(a) = self.fetched.lock().numpy.get(name) {
            return Ok(a.clone_ref(py));
        }
        let array = self.source.get(name).map_err(|e| self.err(py, e))?;
        if let Some(a) = self.fetched.lock().numpy.get(name) {
            return Ok(a.clone_ref(py));
        }
        let out = to_numpy(py, &array)?;
        self.fetched.lock().numpy.insert(name.to_string(), out.clone_ref(py));
        Ok(out)
    }
}

/// A Rust array as a new numpy array (a copy).
fn to_numpy(py: Python<'_>, a: &OamArray) -> PyResult<Py<PyAny>> {
    macro_rules! np {
        ($v:expr) => {
            $v.clone().into_pyarray(py).into_any().unbind()
        };
    }
    Ok(match a.data() {
        Column::Bool(v) => np!(v),
        Column::I8(v) => np!(v),
        Column::I16(v) => np!(v),
        Column::I32(v) => np!(v),
        Column::I64(v) => np!(v),
        Column::U8(v) => np!(v),
        Column::U16(v) => np!(v),
        Column::U32(v) => np!(v),
        Column::U64(v) => np!(v),
        Column::F32(v) => np!(v),
        Column::F64(v) => np!(v),
        _ => {
            // Complex and fixed-width bytes: numpy decodes the stored bytes.
            let bytes = PyBytes::new(py, &a.to_bytes());
            let np = py.import("numpy")?;
            np.getattr("frombuffer")?.call1((bytes, a.dtype().descr()))?.call_method0("copy")?.unbind()
        }
    })
}

/// The shortest decimal form of a `float32` as the `f64` Python prints the same way
/// (`293.12738`, not `293.1273803710938`).
fn f32_shortest(x: f32) -> f64 {
    if x.is_finite() {
        x.to_string().parse::<f64>().unwrap_or(f64::from(x))
    } else {
        f64::from(x)
    }
}

/// numpy's `S<n>` semantics for a value read directly from a fixed-width bytes primitive node
/// `id`: the value without its trailing NUL padding (a `ByteString` keeps every byte).
fn unpad<'a>(schema: &OamSchema, id: NodeId, v: OamValue<'a>) -> OamValue<'a> {
    match v {
        OamValue::Bytes(b) if matches!(schema.node(id).kind, NodeKind::Primitive { .. }) => {
            let n = b.iter().rposition(|&c| c != 0).map_or(0, |k| k + 1);
            OamValue::Bytes(&b[..n])
        }
        other => other,
    }
}

/// A value of the reader as a Python object: scalars by value, lists and records as proxies,
/// tuples as Python tuples.
fn to_py(py: Python<'_>, part: &Arc<Part>, v: OamValue<'_>) -> PyResult<Py<PyAny>> {
    Ok(match v {
        OamValue::Null => py.None(),
        OamValue::Bool(b) => b.into_pyobject(py)?.to_owned().into_any().unbind(),
        OamValue::Int(x) => x.into_pyobject(py)?.into_any().unbind(),
        OamValue::UInt(x) => x.into_pyobject(py)?.into_any().unbind(),
        OamValue::Float32(x) => f32_shortest(x).into_pyobject(py)?.into_any().unbind(),
        OamValue::Float(x) => x.into_pyobject(py)?.into_any().unbind(),
        OamValue::Complex([re, im]) => PyComplex::from_doubles(py, re, im).into_any().unbind(),
        OamValue::Bytes(b) => PyBytes::new(py, b).into_any().unbind(),
        OamValue::Str(s) => s.into_pyobject(py)?.into_any().unbind(),
        OamValue::List(l) => {
            let (start, stop) = l.range();
            let proxy = PyListProxy {
                part: Arc::clone(part),
                content: l.content(),
                start: start as i64,
                len: (stop - start) as i64,
                step: 1,
            };
            Py::new(py, proxy)?.into_any()
        }
        OamValue::Record(r) => {
            Py::new(py, PyRecordProxy { part: Arc::clone(part), node: r.node(), index: r.index() })?
                .into_any()
        }
        OamValue::Tuple(r) => {
            let mut items = Vec::new();
            let schema = part.reader.schema();
            for k in 0..r.field_names().len() {
                let Some(f) = schema.field(r.node(), &k.to_string()) else { continue };
                let v = r.field_at(f).map_err(|e| part.err(py, e))?;
                items.push(to_py(py, part, unpad(schema, f, v))?);
            }
            PyTuple::new(py, items)?.into_any().unbind()
        }
    })
}

/// A parsed OAMap schema.
#[pyclass(module = "guideloom._guideloom", name = "_Schema", frozen)]
pub(crate) struct PySchema {
    schema: Arc<OamSchema>,
}

#[pymethods]
impl PySchema {
    /// Parses OAMap's schema JSON (or the simple form) with the naming `prefix`/`delimiter`.
    #[staticmethod]
    #[pyo3(signature = (text, prefix = "object", delimiter = "-"))]
    fn from_json(text: &str, prefix: &str, delimiter: &str) -> PyResult<Self> {
        let value = oamap_parse_json("schema", text.as_bytes()).map_err(py_err)?;
        let schema = OamSchema::from_json_named(&value, prefix, delimiter).map_err(py_err)?;
        Ok(PySchema { schema: Arc::new(schema) })
    }

    /// OAMap's schema JSON text (every array name written out with `explicit`).
    #[pyo3(signature = (explicit = false))]
    fn to_json(&self, explicit: bool) -> String {
        self.schema.to_oamap_json(explicit).to_string()
    }

    /// The naming prefix.
    #[getter]
    fn prefix(&self) -> String {
        self.schema.prefix().to_string()
    }

    /// The naming delimiter.
    #[getter]
    fn delimiter(&self) -> String {
        self.schema.delimiter().to_string()
    }

    /// The node index of the root.
    #[getter]
    fn _root(&self) -> usize {
        self.schema.root().index()
    }

    /// The node index of the root list's content (`None` when the root is not a list): the
    /// content of the top-level list proxies (`_ListProxy._range[0]`).
    #[getter]
    fn _root_content(&self) -> Option<usize> {
        self.schema.content_of_list(self.schema.root()).map(NodeId::index)
    }

    /// Every array name the schema reads, in generator order.
    fn array_names(&self) -> Vec<String> {
        self.schema.array_names()
    }

    /// The root value read through a Python mapping (`None` when the root is null).
    #[pyo3(signature = (source, max_bytes = DEFAULT_MAX_NPZ_TOTAL))]
    fn bind(&self, py: Python<'_>, source: Py<PyAny>, max_bytes: u64) -> PyResult<Py<PyAny>> {
        let fetched = Arc::new(Fetched::new(Origin::Python(source), max_bytes));
        root(py, Part::new(Arc::clone(&self.schema), Arc::clone(&fetched), fetched))
    }

    /// The root value read from a directory of `.npy` files (`<dir>/<name>.npy`).
    fn bind_npy_dir(&self, py: Python<'_>, dir: std::path::PathBuf) -> PyResult<Py<PyAny>> {
        let src: Arc<dyn OamArraySource> = Arc::new(oamap_fs::NpyDir::new(dir));
        let fetched = Arc::new(Fetched::new(Origin::Rust(src), u64::MAX));
        root(py, Part::new(Arc::clone(&self.schema), Arc::clone(&fetched), fetched))
    }

    /// The top-level lists of a partitioned dataset (OAMap 0.12's description: `{"schema",
    /// "offsets"}`), one Python mapping per partition.
    #[staticmethod]
    #[pyo3(signature = (description, prefix, sources, max_bytes = DEFAULT_MAX_NPZ_TOTAL))]
    fn bind_partitions(
        py: Python<'_>,
        description: &str,
        prefix: &str,
        sources: Vec<Py<PyAny>>,
        max_bytes: u64,
    ) -> PyResult<(Self, Vec<Py<PyAny>>)> {
        let value = oamap_parse_json("dataset description", description.as_bytes()).map_err(py_err)?;
        let desc = DatasetDescription::from_json(&value, prefix).map_err(py_err)?;
        if sources.len() != desc.num_partitions() {
            return Err(raise(
                "OamapSchemaError",
                format!("{} partition sources for {} partitions", sources.len(), desc.num_partitions()),
            ));
        }
        let mut out = Vec::new();
        for (p, s) in sources.into_iter().enumerate() {
            let fetched = Arc::new(Fetched::new(Origin::Python(s), max_bytes));
            let inner: Arc<dyn OamArraySource> = Arc::clone(&fetched) as Arc<dyn OamArraySource>;
            let arrays = PartitionArrays::new(&desc, p, inner).map_err(py_err)?;
            out.push(root(py, Part::new(Arc::clone(desc.schema()), fetched, Arc::new(arrays)))?);
        }
        Ok((PySchema { schema: Arc::clone(desc.schema()) }, out))
    }
}

/// The root value of a partition.
fn root(py: Python<'_>, part: Arc<Part>) -> PyResult<Py<PyAny>> {
    let v = part.reader.root().map_err(|e| part.err(py, e))?;
    to_py(py, &part, v)
}

/// Opens an OAMap `.npz` file whose schema is stored in it (member `object`): the schema and
/// the root value.
#[pyfunction]
#[pyo3(name = "_oamap_open_npz")]
fn oamap_open_npz(py: Python<'_>, path: std::path::PathBuf) -> PyResult<(PySchema, Py<PyAny>)> {
    let reader = oamap_fs::open_npz_file(&path).map_err(py_err)?;
    let schema = Arc::clone(reader.schema());
    drop(reader);
    // The archive is opened again as the partition's source (the reader keeps it private).
    let src: Arc<dyn OamArraySource> = Arc::new(oamap_fs::npz_file_source(&path).map_err(py_err)?);
    let fetched = Arc::new(Fetched::new(Origin::Rust(src), u64::MAX));
    let value = root(py, Part::new(Arc::clone(&schema), Arc::clone(&fetched), fetched))?;
    Ok((PySchema { schema }, value))
}

/// The arrays of `data` (JSON text) under `schema` (the Rust writer), as numpy arrays by name.
#[pyfunction]
#[pyo3(name = "_oamap_from_data")]
fn oamap_from_data(py: Python<'_>, schema: &PySchema, data: &str) -> PyResult<Vec<(String, Py<PyAny>)>> {
    let value = oamap_parse_json("data", data.as_bytes()).map_err(py_err)?;
    let arrays = from_oamap_data(&schema.schema, &value).map_err(py_err)?;
    arrays.iter().map(|(n, a)| Ok((n.clone(), to_numpy(py, a)?))).collect()
}

/// A list: content indices `start, start + step, ...` (`len` of them) of one partition.
#[pyclass(module = "guideloom._guideloom", name = "_ListProxy", frozen)]
pub(crate) struct PyListProxy {
    part: Arc<Part>,
    content: NodeId,
    start: i64,
    len: i64,
    step: i64,
}

impl PyListProxy {
    fn at(&self, py: Python<'_>, k: i64) -> PyResult<Py<PyAny>> {
        let j = self.start + k * self.step;
        let j = usize::try_from(j).map_err(|_| PyIndexError::new_err("list index out of range"))?;
        let v = self.part.reader.value(self.content, j).map_err(|e| self.part.err(py, e))?;
        to_py(py, &self.part, unpad(self.part.reader.schema(), self.content, v))
    }

    fn sub(&self, start: i64, len: i64, step: i64) -> Self {
        PyListProxy { part: Arc::clone(&self.part), content: self.content, start, len, step }
    }
}

#[pymethods]
impl PyListProxy {
    fn __len__(&self) -> usize {
        self.len as usize
    }

    fn __getitem__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        if let Ok(s) = key.cast::<PySlice>() {
            let ix = s.indices(self.len as isize)?;
            let sub = self.sub(
                self.start + ix.start as i64 * self.step,
                ix.slicelength as i64,
                self.step * ix.step as i64,
            );
            return Ok(Py::new(py, sub)?.into_any());
        }
        if let Ok(k) = key.extract::<i64>() {
            let k = if k < 0 { k + self.len } else { k };
            if k < 0 || k >= self.len {
                return Err(PyIndexError::new_err("list index out of range"));
            }
            return self.at(py, k);
        }
        if key.is_instance_of::<pyo3::types::PyString>() {
            return Err(PyTypeError::new_err(
                "list indices must be integers, slices or sequences of integers",
            ));
        }
        // A sequence of indices (a list, a numpy array): a Python list of the elements.
        let picks: Vec<i64> =
            key.try_iter().and_then(|it| it.map(|x| x?.extract::<i64>()).collect()).map_err(|_| {
                PyTypeError::new_err("list indices must be integers, slices or sequences of integers")
            })?;
        let mut out = Vec::with_capacity(picks.len());
        for k in picks {
            let k = if k < 0 { k + self.len } else { k };
            if k < 0 || k >= self.len {
                return Err(PyIndexError::new_err("list index out of range"));
            }
            out.push(self.at(py, k)?);
        }
        Ok(PyList::new(py, out)?.into_any().unbind())
    }

    fn __iter__(slf: Py<Self>) -> PyListIter {
        PyListIter { list: slf, next: Mutex::new(0) }
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let show = |ks: std::ops::Range<i64>| -> PyResult<Vec<String>> {
            ks.map(|k| Ok(self.at(py, k)?.bind(py).repr()?.to_string())).collect()
        };
        if self.len > 10 {
            let (a, b) = (show(0..5)?, show(self.len - 5..self.len)?);
            Ok(format!("[{}, ..., {}]", a.join(", "), b.join(", ")))
        } else {
            Ok(format!("[{}]", show(0..self.len)?.join(", ")))
        }
    }

    /// The names of the arrays this list's partition has loaded so far, in generator order.
    fn loaded(&self) -> Vec<String> {
        self.part.reader.loaded()
    }

    /// The numpy array `name` of this list's partition (fetched now if not yet).
    fn array(&self, py: Python<'_>, name: &str) -> PyResult<Py<PyAny>> {
        self.part.numpy(py, name)
    }

    /// As `loaded` (the name records also have).
    fn _loaded(&self) -> Vec<String> {
        self.part.reader.loaded()
    }

    /// As `array` (the name records also have).
    fn _array(&self, py: Python<'_>, name: &str) -> PyResult<Py<PyAny>> {
        self.part.numpy(py, name)
    }

    /// The schema of the partition this list belongs to.
    #[getter]
    fn _schema(&self) -> PySchema {
        PySchema { schema: Arc::clone(self.part.reader.schema()) }
    }

    /// `(content node, first content index, length, step)`: where this list lies.
    #[getter]
    fn _range(&self) -> (usize, i64, i64, i64) {
        (self.content.index(), self.start, self.len, self.step)
    }
}

/// An iterator over a `_ListProxy`.
#[pyclass(module = "guideloom._guideloom", name = "_ListIter", frozen)]
pub(crate) struct PyListIter {
    list: Py<PyListProxy>,
    next: Mutex<i64>,
}

#[pymethods]
impl PyListIter {
    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        let list = self.list.get();
        let k = {
            let mut n = self.next.lock().unwrap_or_else(|p| p.into_inner());
            let k = *n;
            if k >= list.len {
                return Ok(None);
            }
            *n += 1;
            k
        };
        list.at(py, k).map(Some)
    }
}

/// A record at an index of one partition: fields as attributes, read on first touch.
#[pyclass(module = "guideloom._guideloom", name = "_RecordProxy", frozen)]
pub(crate) struct PyRecordProxy {
    part: Arc<Part>,
    node: NodeId,
    index: usize,
}

impl PyRecordProxy {
    fn type_name(&self) -> String {
        self.part.reader.schema().node(self.node).name.clone().unwrap_or_else(|| "Record".to_string())
    }
}

#[pymethods]
impl PyRecordProxy {
    fn __getattr__(&self, py: Python<'_>, name: &str) -> PyResult<Py<PyAny>> {
        let schema = self.part.reader.schema();
        let Some(f) = schema.field(self.node, name) else {
            // OAMap's message: `'Star' object has no attribute 'id'`.
            return Err(PyAttributeError::new_err(format!(
                "'{}' object has no attribute '{name}'",
                self.type_name()
            )));
        };
        let v = self.part.reader.value(f, self.index).map_err(|e| self.part.err(py, e))?;
        to_py(py, &self.part, unpad(schema, f, v))
    }

    /// The field names, sorted.
    #[getter]
    fn fields(&self) -> Vec<String> {
        match &self.part.reader.schema().node(self.node).kind {
            NodeKind::Record { fields } => fields.iter().map(|(n, _)| n.clone()).collect(),
            _ => Vec::new(),
        }
    }

    /// The record's name (`None` for an unnamed record).
    #[getter]
    fn _name(&self) -> Option<String> {
        self.part.reader.schema().node(self.node).name.clone()
    }

    /// The index the fields are read at.
    #[getter]
    fn _index(&self) -> usize {
        self.index
    }

    /// The record's schema node (an index into the schema's nodes).
    #[getter]
    fn _node(&self) -> usize {
        self.node.index()
    }

    /// The schema of the partition this record belongs to.
    #[getter]
    fn _schema(&self) -> PySchema {
        PySchema { schema: Arc::clone(self.part.reader.schema()) }
    }

    /// The names of the arrays this record's partition has loaded so far, in generator order.
    fn _loaded(&self) -> Vec<String> {
        self.part.reader.loaded()
    }

    /// The numpy array `name` of this record's partition (fetched now if not yet).
    fn _array(&self, py: Python<'_>, name: &str) -> PyResult<Py<PyAny>> {
        self.part.numpy(py, name)
    }

    fn __dir__(&self) -> Vec<String> {
        let mut out = self.fields();
        out.extend(["fields".to_string(), "_name".to_string(), "_index".to_string()]);
        out
    }

    fn __repr__(&self) -> String {
        format!("<{} at index {}>", self.type_name(), self.index)
    }
}
