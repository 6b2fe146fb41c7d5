//! `_TokenWindows`: the loader crate's token windows over a native stream storage or a foreign
//! layout, read in Rust into one `[n, seq_len]` numpy array over Rust-owned memory.

use std::path::PathBuf;
use std::sync::Arc;

use numpy::IntoPyArray;
use pyo3::prelude::*;

use crate::errors::{py_err, raise};
use crate::fork::read_options;
use crate::rust_api::token_windows;
use crate::rust_api::{
    Collate, DataSource, Dtype, Element, ForeignDataset, ForeignFormat, ForeignOptions, LoaderError,
    Manifest, Primitive, ReadOptions, RemoteOptions, StorageDir, StorageLocation, StreamReader, TokenBatch,
    TokenElement, TokenFormat, TokenWindows,
};

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyTokenWindows>()?;
    Ok(())
}

/// Token windows of one element type, chosen by the stored ids.
pub(crate) enum AnyWindows {
    U8(Arc<TokenWindows<u8>>),
    U16(Arc<TokenWindows<u16>>),
    U32(Arc<TokenWindows<u32>>),
    U64(Arc<TokenWindows<u64>>),
    I8(Arc<TokenWindows<i8>>),
    I16(Arc<TokenWindows<i16>>),
    I32(Arc<TokenWindows<i32>>),
    I64(Arc<TokenWindows<i64>>),
}

/// Runs `$body` with `$w` bound to the typed windows of `$any`.
macro_rules! each_windows {
    ($any:expr, $w:ident => $body:expr) => {
        match $any {
            $crate::sources::AnyWindows::U8($w) => $body,
            $crate::sources::AnyWindows::U16($w) => $body,
            $crate::sources::AnyWindows::U32($w) => $body,
            $crate::sources::AnyWindows::U64($w) => $body,
            $crate::sources::AnyWindows::I8($w) => $body,
            $crate::sources::AnyWindows::I16($w) => $body,
            $crate::sources::AnyWindows::I32($w) => $body,
            $crate::sources::AnyWindows::I64($w) => $body,
        }
    };
}
pub(crate) use each_windows;

/// A token batch as a `[rows, seq_len]` numpy array owning the batch's buffer (no copy).
pub(crate) fn batch_to_numpy<E: Element + numpy::Element>(
    py: Python<'_>,
    b: TokenBatch<E>,
) -> PyResult<Py<PyAny>> {
    let [rows, cols] = b.shape();
    // One array object over the Vec (moved, not copied), already `[rows, cols]`.
    let a = numpy::ndarray::Array2::from_shape_vec((rows, cols), b.into_vec())
        .map_err(|e| crate::errors::raise("LoaderError", format!("a batch of the wrong size: {e}")))?;
    Ok(a.into_pyarray(py).into_any().unbind())
}

fn foreign_windows(data: &ForeignDataset, seq_len: u64, stride: u64) -> Result<AnyWindows, LoaderError> {
    let o = read_options();
    Ok(match data.dtype() {
        Primitive::U8 => AnyWindows::U8(Arc::new(token_windows(data, seq_len, stride, o)?)),
        Primitive::U16 => AnyWindows::U16(Arc::new(token_windows(data, seq_len, stride, o)?)),
        Primitive::U32 => AnyWindows::U32(Arc::new(token_windows(data, seq_len, stride, o)?)),
        Primitive::I8 => AnyWindows::I8(Arc::new(token_windows(data, seq_len, stride, o)?)),
        Primitive::I16 => AnyWindows::I16(Arc::new(token_windows(data, seq_len, stride, o)?)),
        Primitive::I32 => AnyWindows::I32(Arc::new(token_windows(data, seq_len, stride, o)?)),
        Primitive::I64 => AnyWindows::I64(Arc::new(token_windows(data, seq_len, stride, o)?)),
        _ => AnyWindows::U64(Arc::new(token_windows(data, seq_len, stride, o)?)),
    })
}

/// Windows over a native storage at an object-store URL (`s3://`, `gs://`, `az://`, `http(s)://`;
/// the store's options from the environment, as the CLI reads them).
fn remote_windows(location: &StorageLocation, seq_len: u64, stride: u64) -> PyResult<AnyWindows> {
    let remote = RemoteOptions::from_env().map_err(py_err)?;
    let dir = location.open_with(&remote).map_err(py_err)?;
    let m = Manifest::load_from(dir.as_ref()).map_err(py_err)?;
    let o = read_options();
    fn open<E: TokenElement + numpy::Element>(
        dir: Arc<dyn StorageDir>,
        o: ReadOptions,
        seq_len: u64,
        stride: u64,
    ) -> PyResult<Arc<TokenWindows<E>>> {
        let reader = StreamReader::open_in(dir, TokenFormat::<E>::new(), o).map_err(py_err)?;
        Ok(Arc::new(TokenWindows::new(reader, seq_len, stride).map_err(py_err)?))
    }
    Ok(match m.dtype() {
        Some(Dtype::Primitive(Primitive::U8)) => AnyWindows::U8(open(dir, o, seq_len, stride)?),
        Some(Dtype::Primitive(Primitive::U16)) => AnyWindows::U16(open(dir, o, seq_len, stride)?),
        Some(Dtype::Primitive(Primitive::U64)) => AnyWindows::U64(open(dir, o, seq_len, stride)?),
        _ => AnyWindows::U32(open(dir, o, seq_len, stride)?),
    })
}

fn native_windows(path: &std::path::Path, seq_len: u64, stride: u64) -> PyResult<AnyWindows> {
    let m = Manifest::load(path).map_err(py_err)?;
    let o = read_options();
    let w = match m.dtype() {
        Some(Dtype::Primitive(Primitive::U8)) => {
            TokenWindows::open_with(path, seq_len, stride, o).map(|w| AnyWindows::U8(Arc::new(w)))
        }
        Some(Dtype::Primitive(Primitive::U16)) => {
            TokenWindows::open_with(path, seq_len, stride, o).map(|w| AnyWindows::U16(Arc::new(w)))
        }
        Some(Dtype::Primitive(Primitive::U64)) => {
            TokenWindows::open_with(path, seq_len, stride, o).map(|w| AnyWindows::U64(Arc::new(w)))
        }
        _ => TokenWindows::open_with(path, seq_len, stride, o).map(|w| AnyWindows::U32(Arc::new(w))),
    };
    w.map_err(py_err)
}

/// The foreign-layout options of Python's `format` (a layout name), `dtype` (a numpy type
/// string such as `"<u2"`) and `column` arguments.
pub(crate) fn foreign_options(
    format: Option<&str>,
    dtype: Option<&str>,
    column: Option<String>,
) -> PyResult<ForeignOptions> {
    let mut options = ForeignOptions::new();
    if let Some(f) = format {
        options.format = Some(f.parse::<ForeignFormat>().map_err(|e| raise("ConfigError", e.to_string()))?);
    }
    if let Some(d) = dtype {
        options.dtype = Some(Primitive::from_descr(d).map_err(py_err)?);
    }
    options.column = column;
    Ok(options)
}

/// Token windows over a storage: `location` a native storage directory, or a foreign layout
/// (`format` names it, or it is detected; `dtype` a numpy type string such as `"<u2"`).
#[pyclass(module = "guideloom._guideloom", name = "_TokenWindows", frozen)]
pub(crate) struct PyTokenWindows {
    pub(crate) windows: AnyWindows,
}

#[pymethods]
impl PyTokenWindows {
    #[new]
    #[pyo3(signature = (location, seq_len, stride, format=None, dtype=None, column=None))]
    fn new(
        location: PathBuf,
        seq_len: u64,
        stride: u64,
        format: Option<&str>,
        dtype: Option<&str>,
        column: Option<String>,
    ) -> PyResult<Self> {
        let at = StorageLocation::from_path(&location);
        let plain = format.is_none() && dtype.is_none() && column.is_none();
        if plain && at.is_remote() && !location.to_string_lossy().contains(['*', '?']) {
            return Ok(PyTokenWindows { windows: remote_windows(&at, seq_len, stride)? });
        }
        if plain && location.join("manifest.json").is_file() {
            return Ok(PyTokenWindows { windows: native_windows(&location, seq_len, stride)? });
        }
        let options = foreign_options(format, dtype, column)?;
        let remote = if at.is_remote() {
            RemoteOptions::from_env().map_err(py_err)?
        } else {
            RemoteOptions::default()
        };
        let data = ForeignDataset::open_at(&at, &remote, &options).map_err(py_err)?;
        Ok(PyTokenWindows { windows: foreign_windows(&data, seq_len, stride).map_err(py_err)? })
    }

    fn __len__(&self) -> usize {
        each_windows!(&self.windows, w => w.len() as usize)
    }

    #[getter]
    fn seq_len(&self) -> u64 {
        each_windows!(&self.windows, w => w.seq_len())
    }

    #[getter]
    fn stride(&self) -> u64 {
        each_windows!(&self.windows, w => w.stride())
    }

    /// Tokens in the stream.
    #[getter]
    fn elements(&self) -> u64 {
        each_windows!(&self.windows, w => w.elements())
    }

    /// numpy type string of the ids a batch holds.
    #[getter]
    fn dtype(&self) -> String {
        each_windows!(&self.windows, w => element_descr(w))
    }

    /// The source's fingerprint (what a loader state records).
    fn fingerprint(&self) -> u64 {
        each_windows!(&self.windows, w => w.fingerprint())
    }

    /// Windows `indices` as one `[len(indices), seq_len]` array (one Rust read call).
    fn read(&self, py: Python<'_>, indices: Vec<u64>) -> PyResult<Py<PyAny>> {
        if indices.is_empty() {
            return Err(raise("ConfigError", "no window index given"));
        }
        each_windows!(&self.windows, w => {
            let b = py
                .detach(|| {
                    let spans = w.get_many(&indices)?;
                    w.collate().collate(spans)
                })
                .map_err(py_err)?;
            batch_to_numpy(py, b)
        })
    }
}

fn element_descr<E: Element>(_w: &Arc<TokenWindows<E>>) -> String {
    match E::dtype() {
        Dtype::Primitive(p) => p.descr().to_string(),
        d => d.to_string(),
    }
}
