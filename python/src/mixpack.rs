//! `_TokenRecords`, `_Mixture` and `_Packed`: token records of any dataset (windows or
//! documents, `u32` ids; the interop crate's `open_token_records`), their weighted mixture (the
//! loader crate's `Mix`) and the packing of documents into rows (`Packed`, `Mix::pack`), as
//! sources of `_Loader`. The batches' conversion to numpy lives here.

use std::sync::Arc;

use numpy::ndarray::Array2;
use numpy::IntoPyArray;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::batches::IntoPython;
use crate::errors::{py_err, raise};
use crate::fork::read_options;
use crate::rust_api::{
    open_token_records, Collate, DataSource, LoaderError, Mix, MixConfig, MixSchedule, MixStop, OpenOptions,
    Overflow, PackConfig, PackStrategy, Packed, PackedRow, RecordUnit, Sourced, U32Records,
};

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyTokenRecords>()?;
    m.add_class::<PyMixture>()?;
    m.add_class::<PyPacked>()?;
    Ok(())
}

/// The padding id targets take where no next token of the same document exists (`-100` in
/// Python, as torch's `cross_entropy` ignores it).
const IGNORE: u32 = u32::MAX;

/// Token records of one dataset: windows of `seq_len` tokens, or its documents.
#[pyclass(module = "guideloom._guideloom", name = "_TokenRecords", frozen)]
pub(crate) struct PyTokenRecords {
    records: U32Records,
    tokens: u64,
    lengths: Option<Vec<u64>>,
    seq_len: Option<u64>,
}

#[pymethods]
impl PyTokenRecords {
    /// Windows (`seq_len` given; `stride` default `seq_len`) or documents (`seq_len` `None`) of
    /// the dataset at `location`.
    #[new]
    #[pyo3(signature = (location, seq_len=None, stride=None, format=None, dtype=None, column=None))]
    fn new(
        py: Python<'_>,
        location: String,
        seq_len: Option<u64>,
        stride: Option<u64>,
        format: Option<&str>,
        dtype: Option<&str>,
        column: Option<String>,
    ) -> PyResult<Self> {
        let foreign = crate::sources::foreign_options(format, dtype, column)?;
        let unit = match seq_len {
            Some(l) => RecordUnit::Windows { seq_len: l, stride: stride.unwrap_or(l) },
            None => RecordUnit::Documents,
        };
        let options = OpenOptions::default().read(read_options()).foreign(foreign);
        let r = py.detach(|| open_token_records(&location, unit, &options)).map_err(py_err)?;
        let (tokens, lengths) = (r.tokens(), r.lengths().map(<[u64]>::to_vec));
        Ok(PyTokenRecords { records: r.into_source(), tokens, lengths, seq_len })
    }

    fn __len__(&self) -> usize {
        self.records.len() as usize
    }

    /// Tokens in the dataset.
    #[getter]
    fn tokens(&self) -> u64 {
        self.tokens
    }

    /// Whether the records are documents (else windows).
    #[getter]
    fn documents(&self) -> bool {
        self.lengths.is_some()
    }

    /// The source's fingerprint (what a loader state records).
    fn fingerprint(&self) -> u64 {
        self.records.fingerprint()
    }

    /// Records `indices` as `uint32` arrays (one Rust read call).
    fn read(&self, py: Python<'_>, indices: Vec<u64>) -> PyResult<Vec<Py<PyAny>>> {
        let got = py.detach(|| self.records.get_many(&indices)).map_err(py_err)?;
        Ok(got.into_iter().map(|v| v.into_pyarray(py).into_any().unbind()).collect())
    }
}

/// The options of `guideloom.Mixture` (a dict with one item per field).
#[derive(Clone, FromPyObject)]
#[pyo3(from_item_all)]
pub(crate) struct MixOptions {
    schedule: String,
    stop: String,
    stop_count: Option<u64>,
    unit: String,
    shuffle_seed: Option<u64>,
}

/// A weighted mixture of token records.
#[pyclass(module = "guideloom._guideloom", name = "_Mixture", frozen)]
pub(crate) struct PyMixture {
    pub(crate) mix: Arc<Mix<U32Records>>,
    sources: Vec<U32Records>,
    config: MixConfig,
    /// Per source, its documents' lengths (documents only).
    lengths: Option<Vec<Vec<u64>>>,
}

fn mix_config(weights: &[f64], parts: &[&PyTokenRecords], o: &MixOptions) -> Result<MixConfig, LoaderError> {
    let bad = |field: &'static str, detail: String| LoaderError::InvalidConfig { field, detail };
    let mut cfg = match o.unit.as_str() {
        "records" => MixConfig::new(weights)?,
        "tokens" => {
            let records: Vec<u64> = parts.iter().map(|p| p.records.len()).collect();
            // A window holds seq_len tokens, a document its own.
            let tokens: Vec<u64> = parts
                .iter()
                .map(|p| match (&p.lengths, p.seq_len) {
                    (Some(_), _) | (None, None) => p.tokens,
                    (None, Some(l)) => p.records.len().saturating_mul(l),
                })
                .collect();
            MixConfig::by_tokens(weights, &records, &tokens)?
        }
        other => return Err(bad("unit", format!("{other:?} is neither \"records\" nor \"tokens\""))),
    };
    cfg = cfg.schedule(match o.schedule.as_str() {
        "greedy" => MixSchedule::Greedy,
        "proportional" => MixSchedule::Proportional,
        other => {
            return Err(bad("schedule", format!("{other:?} is neither \"greedy\" nor \"proportional\"")))
        }
    });
    let count = || o.stop_count.ok_or_else(|| bad("stop", format!("{:?} needs a count", o.stop)));
    cfg = cfg.stop(match o.stop.as_str() {
        "first-exhausted" => MixStop::FirstExhausted,
        "all-exhausted" => MixStop::AllExhausted,
        "budget" => MixStop::Budget(count()?),
        "repeat" => MixStop::Repeat(count()?),
        other => {
            return Err(bad(
                "stop",
                format!(
                    "{other:?} is none of \"first-exhausted\", \"all-exhausted\", \"budget\", \"repeat\""
                ),
            ))
        }
    });
    if let Some(seed) = o.shuffle_seed {
        cfg = cfg.shuffle_sources(seed);
    }
    Ok(cfg)
}

#[pymethods]
impl PyMixture {
    /// The mixture of `sources` (`(records, weight)`; weights in records or tokens, `options`).
    #[new]
    fn new(
        py: Python<'_>,
        sources: Vec<(Bound<'_, PyTokenRecords>, f64)>,
        options: MixOptions,
    ) -> PyResult<Self> {
        let parts: Vec<&PyTokenRecords> = sources.iter().map(|(r, _)| r.get()).collect();
        let weights: Vec<f64> = sources.iter().map(|(_, w)| *w).collect();
        let docs = parts.iter().filter(|p| p.lengths.is_some()).count();
        if docs != 0 && docs != parts.len() {
            return Err(raise("ConfigError", "a mixture's sources are all windows or all documents"));
        }
        let lengths =
            (docs != 0).then(|| parts.iter().map(|p| p.lengths.clone().unwrap_or_default()).collect());
        let records: Vec<U32Records> = parts.iter().map(|p| Arc::clone(&p.records)).collect();
        let (mix, config) = py
            .detach(|| {
                let config = mix_config(&weights, &parts, &options)?;
                Ok::<_, LoaderError>((Mix::new(records.clone(), config.clone())?, config))
            })
            .map_err(py_err)?;
        Ok(PyMixture { mix: Arc::new(mix), sources: records, config, lengths })
    }

    fn __len__(&self) -> usize {
        self.mix.len() as usize
    }

    /// Whether the mixed records are documents.
    #[getter]
    fn documents(&self) -> bool {
        self.lengths.is_some()
    }

    /// The source's fingerprint.
    fn fingerprint(&self) -> u64 {
        self.mix.fingerprint()
    }

    /// Positions `indices`: `(records as uint32 arrays, their sources, their indices in them)`.
    #[allow(clippy::type_complexity)]
    fn read(&self, py: Python<'_>, indices: Vec<u64>) -> PyResult<(Vec<Py<PyAny>>, Vec<u32>, Vec<u64>)> {
        let got = py.detach(|| self.mix.get_many(&indices)).map_err(py_err)?;
        let sources = got.iter().map(|s| s.source).collect();
        let records = got.iter().map(|s| s.record).collect();
        Ok((got.into_iter().map(|s| s.item.into_pyarray(py).into_any().unbind()).collect(), sources, records))
    }
}

/// The options of `guideloom.Packed` (a dict with one item per field).
#[derive(Clone, FromPyObject)]
#[pyo3(from_item_all)]
pub(crate) struct PackOptions {
    seq_len: u64,
    strategy: String,
    bins: u64,
    overflow: String,
    pad_id: u32,
}

fn pack_config(o: &PackOptions) -> Result<PackConfig, LoaderError> {
    let bad = |field: &'static str, detail: String| LoaderError::InvalidConfig { field, detail };
    let strategy = match o.strategy.as_str() {
        "concat-split" => PackStrategy::ConcatSplit,
        "first-fit" => PackStrategy::FirstFit { bins: o.bins },
        "best-fit" => PackStrategy::BestFit { bins: o.bins },
        "planned-bfd" => PackStrategy::BestFitDecreasing,
        other => {
            return Err(bad(
                "strategy",
                format!(
                    "{other:?} is none of \"concat-split\", \"first-fit\", \"best-fit\", \"planned-bfd\""
                ),
            ))
        }
    };
    let overflow = match o.overflow.as_str() {
        "error" => Overflow::Error,
        "truncate" => Overflow::Truncate,
        "split" => Overflow::Split,
        other => {
            return Err(bad("overflow", format!("{other:?} is none of \"error\", \"truncate\", \"split\"")))
        }
    };
    Ok(PackConfig::new(o.seq_len, strategy).overflow(overflow))
}

/// Documents (of one dataset or a mixture) packed into rows of `seq_len` tokens.
#[pyclass(module = "guideloom._guideloom", name = "_Packed", frozen)]
pub(crate) struct PyPacked {
    pub(crate) rows: Arc<dyn DataSource<Item = PackedRow<u32>>>,
    dropped: u64,
    /// Whether the rows carry the sources of their pieces (a mixture was packed).
    mixed: bool,
}

#[pymethods]
impl PyPacked {
    /// Packs the documents of `source` (a `_TokenRecords` of documents or a `_Mixture` of them).
    #[new]
    fn new(py: Python<'_>, source: &Bound<'_, PyAny>, options: PackOptions) -> PyResult<Self> {
        let config = pack_config(&options).map_err(py_err)?;
        let pad = options.pad_id;
        if let Ok(m) = source.cast::<PyMixture>() {
            let m = m.get();
            let Some(lengths) = &m.lengths else {
                return Err(raise("ConfigError", "Packed packs documents: this mixture mixes windows"));
            };
            let packed = py
                .detach(|| {
                    Mix::new(m.sources.clone(), m.config.clone())?
                        .pack_with_lengths(lengths, config, pad, IGNORE)
                })
                .map_err(py_err)?;
            let dropped = packed.plan().dropped_tokens();
            return Ok(PyPacked { rows: Arc::new(packed), dropped, mixed: true });
        }
        let r = source
            .cast::<PyTokenRecords>()
            .map_err(|_| raise("ConfigError", "Packed packs a TokenDocuments source or a Mixture of them"))?
            .get();
        let Some(lengths) = &r.lengths else {
            return Err(raise("ConfigError", "Packed packs documents: these records are windows"));
        };
        let packed = py
            .detach(|| Packed::with_lengths(Arc::clone(&r.records), lengths.clone(), config, pad, IGNORE))
            .map_err(py_err)?;
        let dropped = packed.plan().dropped_tokens();
        Ok(PyPacked { rows: Arc::new(packed), dropped, mixed: false })
    }

    fn __len__(&self) -> usize {
        self.rows.len() as usize
    }

    /// Tokens `overflow="truncate"` dropped.
    #[getter]
    fn dropped_tokens(&self) -> u64 {
        self.dropped
    }

    /// The source's fingerprint.
    fn fingerprint(&self) -> u64 {
        self.rows.fingerprint()
    }

    /// Rows `indices` as one batch: a dict of `[len(indices), seq_len]` arrays (see `Packed`).
    fn read(&self, py: Python<'_>, indices: Vec<u64>) -> PyResult<Py<PyAny>> {
        if indices.is_empty() {
            return Err(raise("ConfigError", "no row index given"));
        }
        let rows = py.detach(|| self.rows.get_many(&indices)).map_err(py_err)?;
        Box::new(PackedRows { rows, mixed: self.mixed }).into_python(py)
    }
}

/// Mixed records of one batch: `[B, L]` when they are windows of one length, a list of arrays
/// otherwise (documents), and their sources.
pub(crate) struct MixRows(Vec<Sourced<Vec<u32>>>);

impl IntoPython for MixRows {
    fn into_python(self: Box<Self>, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let width = self.0.first().map_or(0, |s| s.item.len());
        if self.0.iter().all(|s| s.item.len() == width) {
            let rows = self.0.len();
            let flat: Vec<u32> = self.0.into_iter().flat_map(|s| s.item).collect();
            let a = Array2::from_shape_vec((rows, width), flat)
                .map_err(|e| raise("LoaderError", format!("a batch of the wrong size: {e}")))?;
            return Ok(a.into_pyarray(py).into_any().unbind());
        }
        let items: Vec<Py<PyAny>> =
            self.0.into_iter().map(|s| s.item.into_pyarray(py).into_any().unbind()).collect();
        Ok(PyList::new(py, items)?.into_any().unbind())
    }
    fn sources(&self) -> Option<Vec<u32>> {
        Some(self.0.iter().map(|s| s.source).collect())
    }
}

/// Collates mixed records into [`MixRows`].
#[derive(Clone, Copy)]
pub(crate) struct MixCollate;

impl Collate<Sourced<Vec<u32>>> for MixCollate {
    type Output = MixRows;
    fn collate(&self, records: Vec<Sourced<Vec<u32>>>) -> Result<MixRows, LoaderError> {
        Ok(MixRows(records))
    }
}

/// Packed rows of one batch.
pub(crate) struct PackedRows {
    rows: Vec<PackedRow<u32>>,
    mixed: bool,
}

impl IntoPython for PackedRows {
    fn into_python(self: Box<Self>, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let b = self.rows.len();
        let l = self.rows.first().map_or(0, |r| r.tokens.len());
        let grid = |f: &dyn Fn(&PackedRow<u32>) -> Vec<i64>| -> PyResult<Py<PyAny>> {
            let flat: Vec<i64> = self.rows.iter().flat_map(f).collect();
            let a = Array2::from_shape_vec((b, l), flat)
                .map_err(|e| raise("LoaderError", format!("ragged packed rows: {e}")))?;
            Ok(a.into_pyarray(py).into_any().unbind())
        };
        let d = PyDict::new(py);
        d.set_item("tokens", grid(&|r| r.tokens.iter().map(|&t| i64::from(t)).collect())?)?;
        d.set_item(
            "targets",
            grid(&|r| r.targets.iter().map(|&t| if t == IGNORE { -100 } else { i64::from(t) }).collect())?,
        )?;
        d.set_item("segment_ids", grid(&|r| r.segment_ids.iter().map(|&t| i64::from(t)).collect())?)?;
        d.set_item("positions", grid(&|r| r.positions.iter().map(|&t| i64::from(t)).collect())?)?;
        d.set_item("loss_mask", grid(&|r| r.loss_mask.iter().map(|&t| i64::from(t)).collect())?)?;
        if self.mixed {
            // Per token, the mixture source of its piece's document; -1 on padding.
            d.set_item(
                "sources",
                grid(&|r| {
                    let mut out = vec![-1i64; r.tokens.len()];
                    let mut at = 0usize;
                    for (p, &s) in r.pieces.iter().zip(&r.sources) {
                        let n = usize::try_from(p.len).unwrap_or(usize::MAX);
                        for slot in out.iter_mut().skip(at).take(n) {
                            *slot = i64::from(s);
                        }
                        at = at.saturating_add(n);
                    }
                    out
                })?,
            )?;
        }
        Ok(d.into_any().unbind())
    }
}

/// Collates packed rows into [`PackedRows`].
#[derive(Clone, Copy)]
pub(crate) struct PackCollate {
    pub(crate) mixed: bool,
}

impl Collate<PackedRow<u32>> for PackCollate {
    type Output = PackedRows;
    fn collate(&self, rows: Vec<PackedRow<u32>>) -> Result<PackedRows, LoaderError> {
        Ok(PackedRows { rows, mixed: self.mixed })
    }
}

impl PyPacked {
    pub(crate) fn is_mixed(&self) -> bool {
        self.mixed
    }
}
