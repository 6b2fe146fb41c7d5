//! `_Loader`: guideloom's loader over `_TokenWindows` (batches read in Rust into numpy arrays
//! owned by Rust) or over any Python object with `__len__`/`__getitem__` (records fetched under
//! the GIL by the Rust workers: the slow path). The GIL is released while Rust works and while
//! the consumer waits for a batch.

use std::sync::{Arc, Mutex};

use numpy::IntoPyArray;
use pyo3::prelude::*;

use crate::batches::{Built, Running};
use crate::errors::{py_err, raise, to_py, PyCause};
use crate::rust_api::{
    DataSource, Element, Loader, LoaderError, State, TokenWindowCollate, TokenWindows, VecCollate, WindowSpan,
};
use crate::sources::{each_windows, PyTokenWindows};

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyLoader>()?;
    Ok(())
}

/// A Python object with `__len__`/`__getitem__` (and optionally `__getitems__`) as a source.
struct PySource {
    object: Py<PyAny>,
    len: u64,
}

impl DataSource for PySource {
    type Item = Py<PyAny>;
    fn len(&self) -> u64 {
        self.len
    }
    fn get(&self, index: u64) -> Result<Py<PyAny>, LoaderError> {
        Python::attach(|py| self.object.bind(py).get_item(index).map(Bound::unbind))
            .map_err(|e| LoaderError::Source { index, source: Box::new(PyCause(e)) })
    }
    fn get_many(&self, indices: &[u64]) -> Result<Vec<Py<PyAny>>, LoaderError> {
        Python::attach(|py| {
            let o = self.object.bind(py);
            if o.hasattr("__getitems__")? {
                let items = o.call_method1("__getitems__", (indices.to_vec(),))?;
                let list: Vec<Py<PyAny>> = items.extract()?;
                return Ok(list);
            }
            indices.iter().map(|&i| o.get_item(i).map(Bound::unbind)).collect()
        })
        .map_err(|e| LoaderError::Source {
            index: indices.first().copied().unwrap_or(0),
            source: Box::new(PyCause(e)),
        })
    }
}

/// The loader options from Python: a dict with one item per field (`guideloom.Loader` makes it).
#[derive(Clone, FromPyObject)]
#[pyo3(from_item_all)]
struct Options {
    batch_size: u64,
    shuffle: bool,
    seed: u64,
    epochs: Option<u64>,
    workers: usize,
    prefetch: Option<usize>,
    rank: u64,
    world_size: u64,
    drop_remainder: bool,
    global_batch: Option<u64>,
}

fn build<S>(source: S, o: &Options) -> crate::rust_api::LoaderBuilder<S>
where
    S: DataSource + 'static,
    S::Item: 'static,
{
    // The CLI's order of settings (`guideloom batches`), so both make the same state.
    let mut b = Loader::builder(source)
        .seed(o.seed)
        .drop_remainder(o.drop_remainder)
        .shard(o.rank, o.world_size)
        .workers(o.workers);
    b = match o.epochs {
        Some(e) => b.epochs(e),
        None => b.unbounded(),
    };
    if o.shuffle {
        b = b.shuffle(o.seed);
    }
    if let Some(p) = o.prefetch {
        b = b.prefetch(p);
    }
    match o.global_batch {
        Some(g) => b.global_batch(g),
        None => b.batch_size(o.batch_size),
    }
}

fn token_loader<E: Element + numpy::Element>(
    w: &Arc<TokenWindows<E>>,
    o: &Options,
) -> Result<Box<dyn Built>, LoaderError> {
    let collate: TokenWindowCollate<E> = w.collate();
    let loader: Loader<Arc<TokenWindows<E>>, WindowSpan, TokenWindowCollate<E>> =
        build(Arc::clone(w), o).collate(collate).build()?;
    Ok(Box::new(loader))
}

/// guideloom's loader: `next()` gives `(data, indices, number, epoch, padding, sources)`.
#[pyclass(module = "guideloom._guideloom", name = "_Loader", frozen)]
pub(crate) struct PyLoader {
    built: Box<dyn Built>,
    running: Mutex<Option<Box<dyn Running>>>,
}

impl Drop for PyLoader {
    fn drop(&mut self) {
        // Joining workers that wait for the GIL (the slow path) needs the GIL released.
        let running = self.running.get_mut().ok().and_then(Option::take);
        if let Some(r) = running {
            Python::attach(|py| py.detach(move || drop(r)));
        }
    }
}

#[pymethods]
impl PyLoader {
    #[new]
    fn new(py: Python<'_>, source: &Bound<'_, PyAny>, options: Options) -> PyResult<Self> {
        let o = options;
        let built: Box<dyn Built> = if let Ok(w) = source.cast::<PyTokenWindows>() {
            let w = w.get();
            py.detach(|| each_windows!(&w.windows, w => token_loader(w, &o))).map_err(py_err)?
        } else if let Ok(m) = source.cast::<crate::mixpack::PyMixture>() {
            let mix = Arc::clone(&m.get().mix);
            let loader: Loader<_, _, crate::mixpack::MixCollate> =
                py.detach(|| build(mix, &o).collate(crate::mixpack::MixCollate).build()).map_err(py_err)?;
            Box::new(loader)
        } else if let Ok(p) = source.cast::<crate::mixpack::PyPacked>() {
            let p = p.get();
            let (rows, collate) = (Arc::clone(&p.rows), crate::mixpack::PackCollate { mixed: p.is_mixed() });
            let loader: Loader<_, _, crate::mixpack::PackCollate> =
                py.detach(|| build(rows, &o).collate(collate).build()).map_err(py_err)?;
            Box::new(loader)
        } else {
            let len = source.len()? as u64;
            let s = PySource { object: source.clone().unbind(), len };
            let loader: Loader<PySource, Py<PyAny>, VecCollate> = build(s, &o).build().map_err(py_err)?;
            Box::new(loader)
        };
        Ok(PyLoader::from_built(built))
    }

    /// Megatron-Core's samples over `datasets` (`(weight or None, path or URL)`) as Megatron's
    /// sampler deals them (see `guideloom.Loader.megatron`).
    #[staticmethod]
    fn megatron(
        py: Python<'_>,
        datasets: Vec<(Option<f64>, String)>,
        options: crate::orders::MegatronOptions,
    ) -> PyResult<Self> {
        let built = py.detach(|| crate::orders::megatron(&datasets, &options)).map_err(|e| to_py(py, &e))?;
        Ok(PyLoader::from_built(built))
    }

    /// llm.c's batches over the shards at `path` (see `guideloom.Loader.llmc`).
    #[staticmethod]
    fn llmc(py: Python<'_>, path: String, options: crate::orders::LlmcOptions) -> PyResult<Self> {
        let built = py.detach(|| crate::orders::llmc(&path, &options)).map_err(|e| to_py(py, &e))?;
        Ok(PyLoader::from_built(built))
    }

    /// Batches per epoch (of this rank).
    fn __len__(&self) -> usize {
        self.built.len() as usize
    }

    /// Starts iterating: from the beginning, or from `state` (JSON, as the CLI writes it).
    #[pyo3(signature = (state=None, round_down=false))]
    fn start(&self, py: Python<'_>, state: Option<&str>, round_down: bool) -> PyResult<()> {
        let state = state.map(State::from_json).transpose().map_err(py_err)?;
        let started = self.with_running(py, |running| {
            drop(running.take());
            self.built.start(state.as_ref(), round_down).map(|r| *running = Some(r))
        })?;
        started.map_err(|e| to_py(py, &e))
    }

    /// The next batch, or `None` at the end.
    #[allow(clippy::type_complexity)]
    fn next(
        &self,
        py: Python<'_>,
    ) -> PyResult<Option<(Py<PyAny>, Py<PyAny>, u64, u64, Option<Py<PyAny>>, Option<Py<PyAny>>)>> {
        let got = self.with_running(py, |running| running.as_mut().map(|r| r.next_batch()))?;
        match got {
            None => Err(raise("LoaderError", "the loader is not started")),
            Some(None) => Ok(None),
            Some(Some(Err(e))) => Err(to_py(py, &e)),
            Some(Some(Ok(out))) => {
                let data = out.data.into_python(py)?;
                let indices = out.indices.into_pyarray(py).into_any().unbind();
                // Padding is rare (a final global batch completed by repetition): `None` for
                // all-false, which `Batch.padding` turns into a zero array when asked.
                let padding =
                    out.padding.iter().any(|&p| p).then(|| out.padding.into_pyarray(py).into_any().unbind());
                let sources = out.sources.map(|s| s.into_pyarray(py).into_any().unbind());
                Ok(Some((data, indices, out.number, out.epoch, padding, sources)))
            }
        }
    }

    /// The state (JSON) after the last batch taken; before any, the initial state.
    fn state(&self, py: Python<'_>) -> PyResult<String> {
        let state = self.with_running(py, |running| running.as_ref().map(|r| r.state()))?;
        Ok(state.unwrap_or_else(|| self.built.initial_state()).to_json())
    }

    /// Stops the workers.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.with_running(py, |running| drop(running.take()))
    }
}

impl PyLoader {
    fn from_built(built: Box<dyn Built>) -> Self {
        PyLoader { built, running: Mutex::new(None) }
    }

    /// Runs `f` on the running iterator with the GIL released: the lock is taken without the GIL,
    /// so a thread waiting for a batch (whose workers may need the GIL) never blocks one holding it.
    fn with_running<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Option<Box<dyn Running>>) -> T + Send,
    ) -> PyResult<T> {
        py.detach(|| self.running.lock().map(|mut g| f(&mut g)).map_err(|_| ()))
            .map_err(|()| raise("LoaderError", "the loader was poisoned by a panic"))
    }
}
