//! `_Loader.megatron` and `_Loader.llmc`: the runs of the interop crate (`MegatronRun`,
//! `LlmcRun`, the same ones the CLI's `batches --order megatron|llmc` builds), their batches
//! converted to numpy arrays.

use numpy::ndarray::Array2;
use numpy::IntoPyArray;
use pyo3::prelude::*;

use crate::batches::{Built, IntoPython, Out, Running};
use crate::fork::read_options;
use crate::rust_api::{
    ForeignDataset, ForeignFormat, ForeignOptions, GptConfig, IntTokenFormat, InteropError, LlmcRun,
    LlmcRunOptions, LoaderError, LoaderIter, MegatronRun, MegatronRunOptions, MegatronSample,
    MegatronSamples, MegatronSplit, ResumeOptions, Slice, Spans, State, StreamReader, VecCollate,
};

/// Batches of object stores read this many batches ahead per worker (the CLI's value).
const REMOTE_READAHEAD: u64 = 16;

fn is_remote(location: &str) -> bool {
    crate::rust_api::StorageLocation::parse(location).is_remote()
}

fn resume_options(round_down: bool) -> ResumeOptions {
    if round_down {
        ResumeOptions::round_down()
    } else {
        ResumeOptions::default()
    }
}

/// The options of `guideloom.Loader.megatron` (a dict with one item per field).
#[derive(Clone, FromPyObject)]
#[pyo3(from_item_all)]
pub(crate) struct MegatronOptions {
    seq_length: u64,
    micro_batch_size: u64,
    split: String,
    which: String,
    train_samples: Option<u64>,
    seed: u64,
    consumed_samples: u64,
    rank: u64,
    world_size: u64,
    epochs: u64,
    workers: usize,
}

/// The run of `guideloom.Loader.megatron`.
pub(crate) fn megatron(
    datasets: &[(Option<f64>, String)],
    o: &MegatronOptions,
) -> Result<Box<dyn Built>, InteropError> {
    let foreign = ForeignOptions::new().format(ForeignFormat::Megatron);
    let opened: Vec<(Option<f64>, ForeignDataset)> = datasets
        .iter()
        .map(|(w, p)| Ok((*w, ForeignDataset::open_url(p, &foreign)?)))
        .collect::<Result<_, InteropError>>()?;
    let which = match o.which.as_str() {
        "train" => MegatronSplit::Train,
        "valid" => MegatronSplit::Valid,
        "test" => MegatronSplit::Test,
        other => {
            return Err(InteropError::InvalidConfig {
                field: "which",
                detail: format!("{other:?} is none of \"train\", \"valid\", \"test\""),
            })
        }
    };
    let mut config = GptConfig::new(o.seq_length, o.seed).split(o.split.clone()).which(which);
    config.num_samples = o.train_samples;
    let mut run = MegatronRunOptions::new(o.micro_batch_size)
        .shard(o.rank, o.world_size)
        .epochs(o.epochs)
        .workers(o.workers)
        .consumed_samples(o.consumed_samples);
    if datasets.iter().any(|(_, p)| is_remote(p)) {
        run = run.readahead(REMOTE_READAHEAD);
    }
    Ok(Box::new(MegatronRun::open(&opened, &config, &run, read_options())?))
}

/// Megatron samples as one `[batch, seq_length + 1]` int64 array.
struct SampleRows(Vec<MegatronSample>);

impl IntoPython for SampleRows {
    fn into_python(self: Box<Self>, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let rows = self.0.len();
        let cols = self.0.first().map_or(0, |s| s.tokens.len());
        let flat: Vec<i64> = self.0.into_iter().flat_map(|s| s.tokens).collect();
        let a = Array2::from_shape_vec((rows, cols), flat)
            .map_err(|e| crate::errors::raise("LoaderError", format!("ragged Megatron samples: {e}")))?;
        Ok(a.into_pyarray(py).into_any().unbind())
    }
}

/// A running Megatron run: record indices shifted to Megatron's sample numbers.
struct MegatronIter {
    it: LoaderIter<Slice<MegatronSamples>, MegatronSample, VecCollate>,
    offset: u64,
    blend: bool,
}

impl Running for MegatronIter {
    fn next_batch(&mut self) -> Option<Result<Out, LoaderError>> {
        let (offset, blend) = (self.offset, self.blend);
        self.it.next().map(|r| {
            r.map(|b| Out {
                sources: blend.then(|| b.data.iter().map(|s| u32::from(s.dataset)).collect()),
                indices: b.indices.iter().map(|i| i + offset).collect(),
                data: Box::new(SampleRows(b.data)),
                padding: b.padding,
                number: b.number,
                epoch: b.epoch,
            })
        })
    }
    fn state(&self) -> State {
        self.it.state()
    }
}

impl Built for MegatronRun {
    fn start(&self, state: Option<&State>, round_down: bool) -> Result<Box<dyn Running>, LoaderError> {
        let it = self.loader.iter_from_with(state.unwrap_or(&self.state), resume_options(round_down))?;
        Ok(Box::new(MegatronIter { it, offset: self.offset, blend: self.blend }))
    }
    fn initial_state(&self) -> State {
        self.state
    }
    fn len(&self) -> u64 {
        self.loader.len()
    }
}

/// The options of `guideloom.Loader.llmc` (a dict with one item per field).
#[derive(Clone, FromPyObject)]
#[pyo3(from_item_all)]
pub(crate) struct LlmcOptions {
    batch: u64,
    seq: u64,
    rank: u64,
    processes: u64,
    epochs: u64,
    shuffle: bool,
    workers: usize,
    /// llm.c's position `(epoch, current_shard_idx, current_sample_idx)` to continue at.
    position: Option<(u64, u64, u64)>,
}

/// The run of `guideloom.Loader.llmc`, and the state it starts from.
struct Llmc {
    run: LlmcRun,
    start: State,
    batch: u64,
    seq: u64,
}

/// The run of `guideloom.Loader.llmc`.
pub(crate) fn llmc(path: &str, o: &LlmcOptions) -> Result<Box<dyn Built>, InteropError> {
    let data = ForeignDataset::open_url(path, &ForeignOptions::new().format(ForeignFormat::Llmc))?;
    let mut options = LlmcRunOptions::new(o.batch, o.seq)
        .shard(o.rank, o.processes)
        .epochs(o.epochs)
        .shuffle(o.shuffle)
        .workers(o.workers);
    if is_remote(path) {
        options = options.readahead(REMOTE_READAHEAD);
    }
    let run = LlmcRun::open(&data, &options, read_options())?;
    let start = match o.position {
        Some(p) => run.position_state(&data, p)?,
        None => run.loader.initial_state(),
    };
    Ok(Box::new(Llmc { run, start, batch: o.batch, seq: o.seq }))
}

/// One llm.c batch: its `B * T + 1` tokens (int64), 1-D.
struct Span(Vec<i64>);

impl IntoPython for Span {
    fn into_python(self: Box<Self>, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(self.0.into_pyarray(py).into_any().unbind())
    }
}

/// A running llm.c run: one llm.c batch per loader batch, numbered in llm.c's epochs.
struct LlmcIter {
    it: LoaderIter<Spans<StreamReader<IntTokenFormat>>, Vec<i64>, VecCollate>,
    shuffle: bool,
    per_epoch: u64,
    expect: usize,
}

impl Running for LlmcIter {
    fn next_batch(&mut self) -> Option<Result<Out, LoaderError>> {
        let (shuffle, per_epoch, expect) = (self.shuffle, self.per_epoch, self.expect);
        self.it.next().map(|r| {
            r.and_then(|b| {
                let tokens = b.data.into_iter().next().unwrap_or_default();
                if tokens.len() != expect {
                    return Err(LoaderError::Source {
                        index: b.indices.first().copied().unwrap_or(0),
                        source: format!(
                            "an llm.c batch of {} tokens, expected B x T + 1 = {expect}",
                            tokens.len()
                        )
                        .into(),
                    });
                }
                Ok(Out {
                    data: Box::new(Span(tokens)),
                    indices: b.indices,
                    padding: b.padding,
                    epoch: if shuffle { b.number / per_epoch } else { b.epoch },
                    number: b.number,
                    sources: None,
                })
            })
        })
    }
    fn state(&self) -> State {
        self.it.state()
    }
}

impl Built for Llmc {
    fn start(&self, state: Option<&State>, round_down: bool) -> Result<Box<dyn Running>, LoaderError> {
        let it = self.run.loader.iter_from_with(state.unwrap_or(&self.start), resume_options(round_down))?;
        let expect =
            usize::try_from(self.batch.saturating_mul(self.seq).saturating_add(1)).unwrap_or(usize::MAX);
        Ok(Box::new(LlmcIter { it, shuffle: self.run.shuffle, per_epoch: self.run.per_epoch, expect }))
    }
    fn initial_state(&self) -> State {
        self.start
    }
    fn len(&self) -> u64 {
        self.run.loader.len()
    }
}
