//! A Megatron run continued as a loader: Megatron-Core's samples ([`MegatronSamples`]) dealt
//! as `MegatronPretrainingSampler` deals them, from `consumed_samples` on. The CLI's `batches
//! --order megatron` and the Python binding's `Loader.megatron` both build it here.

use guideloom_loader::transforms::Slice;
use guideloom_loader::{DataSource, Loader, State};
use guideloom_storage::ReadOptions;

use crate::dataset::ForeignDataset;
use crate::error::{InteropError, Result};
use crate::orders::megatron::gpt::GptConfig;
use crate::orders::megatron::samples::{megatron_resume_source, MegatronSamples};

/// How a [`MegatronRun`] deals its samples: Megatron's micro batch size, this rank of the
/// data-parallel world, epochs, worker threads and `consumed_samples`.
///
/// Defaults ([`MegatronRunOptions::new`]): rank 0 of 1, 1 epoch, 0 workers (batches read on
/// the consumer's thread), 0 consumed samples, no readahead.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct MegatronRunOptions {
    /// Megatron's `--micro-batch-size`: samples per batch of one rank.
    pub micro_batch_size: u64,
    /// This rank (`0..world_size`).
    pub rank: u64,
    /// The data-parallel world size.
    pub world_size: u64,
    /// Epochs over the samples (Megatron's `--train-samples` usually makes one enough).
    pub epochs: u64,
    /// Loader worker threads.
    pub workers: usize,
    /// Megatron's `consumed_samples` (all ranks together) at which the run continues.
    pub consumed_samples: u64,
    /// Batches each worker reads ahead (`None`: the loader's default), for remote datasets.
    pub readahead: Option<u64>,
}

impl MegatronRunOptions {
    /// The options for micro batches of `micro_batch_size` samples, the rest at their defaults.
    pub fn new(micro_batch_size: u64) -> Self {
        MegatronRunOptions {
            micro_batch_size,
            rank: 0,
            world_size: 1,
            epochs: 1,
            workers: 0,
            consumed_samples: 0,
            readahead: None,
        }
    }

    /// Rank `rank` of `world_size` data-parallel ranks.
    pub fn shard(mut self, rank: u64, world_size: u64) -> Self {
        (self.rank, self.world_size) = (rank, world_size);
        self
    }

    /// `epochs` epochs over the samples.
    pub fn epochs(mut self, epochs: u64) -> Self {
        self.epochs = epochs;
        self
    }

    /// `workers` loader threads.
    pub fn workers(mut self, workers: usize) -> Self {
        self.workers = workers;
        self
    }

    /// Continue at Megatron's `consumed_samples`.
    pub fn consumed_samples(mut self, consumed: u64) -> Self {
        self.consumed_samples = consumed;
        self
    }

    /// Read `batches` batches ahead per worker.
    pub fn readahead(mut self, batches: u64) -> Self {
        self.readahead = Some(batches);
        self
    }
}

/// A Megatron run ready to iterate: the loader over Megatron's samples, whole global batches
/// from `consumed_samples` on, and the state it starts from.
///
/// Megatron's `MegatronPretrainingSampler` hands rank `r` of `W` the samples `[g*B*W + r*B,
/// g*B*W + (r+1)*B)` of step `g` and drops an incomplete last global batch; with
/// `consumed_samples = c`, the samples start at `c mod (B*W)` (the loader's source is sliced
/// there) and the run at step `c div (B*W)` ([`MegatronRun::state`]).
#[derive(Debug)]
pub struct MegatronRun {
    /// The loader: shuffling off (the order is Megatron's), `batch_size` the micro batch size,
    /// `drop_remainder` on.
    pub loader: Loader<Slice<MegatronSamples>>,
    /// The state the run starts from (`next_batch` = `consumed_samples div (B*W)`).
    pub state: State,
    /// The sample number of the loader source's record 0 (`consumed_samples mod (B*W)`): add
    /// it to a batch's record indices for Megatron's sample numbers.
    pub offset: u64,
    /// Whether the run blends several datasets (a sample's `dataset` then names its source).
    pub blend: bool,
}

impl MegatronRun {
    /// The run over `datasets` (`(weight, dataset)`: every weight given for a weighted blend
    /// (`BlendedDataset`), none for Megatron's blend of prefixes without weights; one dataset:
    /// no blend) under `config`, read with `options`, dealt as `run` says.
    ///
    /// # Errors
    /// As [`MegatronSamples::open`]; [`InteropError::InvalidConfig`] (field `datasets`) when
    /// `datasets` is empty or mixes weighted and unweighted entries, (field `global_batch`) when
    /// `micro_batch_size x world_size` is 0 or overflows; [`InteropError::Loader`] when the
    /// loader refuses the options (rank not below world size, ...).
    pub fn open(
        datasets: &[(Option<f64>, ForeignDataset)],
        config: &GptConfig,
        run: &MegatronRunOptions,
        options: ReadOptions,
    ) -> Result<Self> {
        let source = megatron_samples(datasets, config, options)?;
        let global =
            run.micro_batch_size.checked_mul(run.world_size).ok_or_else(|| InteropError::InvalidConfig {
                field: "global_batch",
                detail: format!(
                    "micro batch size {} x world size {} overflows",
                    run.micro_batch_size, run.world_size
                ),
            })?;
        let (source, next_batch) = megatron_resume_source(source, run.consumed_samples, global)?;
        let mut builder = Loader::builder(source)
            .batch_size(run.micro_batch_size)
            .shard(run.rank, run.world_size)
            .epochs(run.epochs)
            // Megatron's MegatronPretrainingSampler drops the incomplete last global batch.
            .drop_remainder(true)
            .workers(run.workers);
        if let Some(r) = run.readahead {
            builder = builder.readahead(r);
        }
        let loader = builder.build()?;
        let state = State { next_batch, ..loader.initial_state() };
        Ok(MegatronRun { loader, state, offset: run.consumed_samples % global, blend: datasets.len() > 1 })
    }

    /// The fingerprint a state of this run carries (the samples' and the configuration's).
    pub fn fingerprint(&self) -> u64 {
        self.loader.source().fingerprint()
    }
}

/// The samples of `datasets` under `config`: a weighted blend when every weight is given,
/// Megatron's blend of prefixes without weights when none is.
///
/// # Errors
/// As [`MegatronSamples::open`]; [`InteropError::InvalidConfig`] (field `datasets`) when
/// `datasets` is empty or only some entries have a weight.
pub fn megatron_samples(
    datasets: &[(Option<f64>, ForeignDataset)],
    config: &GptConfig,
    options: ReadOptions,
) -> Result<MegatronSamples> {
    let bad = |detail: &str| InteropError::InvalidConfig { field: "datasets", detail: detail.into() };
    if datasets.is_empty() {
        return Err(bad("no dataset"));
    }
    let weighted = datasets.iter().filter(|(w, _)| w.is_some()).count();
    if weighted == datasets.len() {
        let refs: Vec<(f64, &ForeignDataset)> = datasets.iter().map(|(w, d)| (w.unwrap_or(1.0), d)).collect();
        MegatronSamples::open(&refs, config, options)
    } else if weighted == 0 {
        let refs: Vec<&ForeignDataset> = datasets.iter().map(|(_, d)| d).collect();
        MegatronSamples::open_unweighted(&refs, config, options)
    } else {
        Err(bad("either every dataset has a weight or none has"))
    }
}
