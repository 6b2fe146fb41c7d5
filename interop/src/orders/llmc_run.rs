//! An llm.c run continued as a loader: llm.c's batches (sequential or shuffled) as loader
//! records, and the state that continues llm.c at a position. The CLI's `batches --order llmc`
//! and the Python binding's `Loader.llmc` both build it here.

use guideloom_formats::IntTokenFormat;
use guideloom_loader::{Loader, Spans, State};
use guideloom_storage::{ReadOptions, StorageError, StreamReader};

use crate::dataset::ForeignDataset;
use crate::error::{open_error, InteropError, Result};
use crate::orders::llmc::{
    llmc_resume_state, llmc_shuffled_resume_state, llmc_shuffled_windows, llmc_windows,
};

/// The most windows a shuffled llm.c run lists (16 bytes each): 2^27.
pub const LLMC_MAX_SHUFFLED_WINDOWS: u64 = 1 << 27;

/// How an [`LlmcRun`] reads llm.c's batches: `B` (`batch`), `T` (`seq`), this process of
/// `processes`, epochs, shuffling (llm.c's `should_shuffle`) and worker threads.
///
/// Defaults ([`LlmcRunOptions::new`]): process 0 of 1, 1 epoch, no shuffling, 0 workers, no
/// readahead.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LlmcRunOptions {
    /// llm.c's `B`: rows per batch.
    pub batch: u64,
    /// llm.c's `T`: tokens per row (a batch reads `B * T + 1` tokens).
    pub seq: u64,
    /// This process (`0..processes`).
    pub rank: u64,
    /// llm.c's `num_processes`.
    pub processes: u64,
    /// Epochs over the shards.
    pub epochs: u64,
    /// llm.c's `should_shuffle` (every process and epoch its own order).
    pub shuffle: bool,
    /// Loader worker threads.
    pub workers: usize,
    /// Batches each worker reads ahead (`None`: the loader's default), for remote datasets.
    pub readahead: Option<u64>,
}

impl LlmcRunOptions {
    /// The options for batches of `batch` rows of `seq` tokens, the rest at their defaults.
    pub fn new(batch: u64, seq: u64) -> Self {
        LlmcRunOptions {
            batch,
            seq,
            rank: 0,
            processes: 1,
            epochs: 1,
            shuffle: false,
            workers: 0,
            readahead: None,
        }
    }

    /// Process `rank` of `processes`.
    pub fn shard(mut self, rank: u64, processes: u64) -> Self {
        (self.rank, self.processes) = (rank, processes);
        self
    }

    /// `epochs` epochs over the shards.
    pub fn epochs(mut self, epochs: u64) -> Self {
        self.epochs = epochs;
        self
    }

    /// llm.c's `should_shuffle`.
    pub fn shuffle(mut self, on: bool) -> Self {
        self.shuffle = on;
        self
    }

    /// `workers` loader threads.
    pub fn workers(mut self, workers: usize) -> Self {
        self.workers = workers;
        self
    }

    /// Read `batches` batches ahead per worker.
    pub fn readahead(mut self, batches: u64) -> Self {
        self.readahead = Some(batches);
        self
    }
}

/// An llm.c run ready to iterate: one loader record per llm.c batch (a span of `B * T + 1`
/// tokens: inputs the first `B * T`, targets shifted by one), in llm.c's order for this
/// process.
///
/// Sequential, the loader deals the windows of [`llmc_windows`] with `shard(rank, processes)`
/// and `epochs` epochs (llm.c wraps to the first shard). Shuffled, every process and epoch has
/// its own order: the loader holds this process's windows of every epoch
/// ([`llmc_shuffled_windows`]) as one loader epoch of one rank, and
/// [`LlmcRun::per_epoch`] batches make one llm.c epoch.
#[derive(Debug)]
pub struct LlmcRun {
    /// The loader, `batch_size` 1 (a record is a whole llm.c batch).
    pub loader: Loader<Spans<StreamReader<IntTokenFormat>>>,
    /// Shuffled: every process has its own order, one loader epoch for all llm.c epochs.
    pub shuffle: bool,
    /// Shuffled, the batches of one llm.c epoch (`u64::MAX` when sequential).
    pub per_epoch: u64,
    options: LlmcRunOptions,
}

impl LlmcRun {
    /// The run over `data` (an llm.c dataset, [`crate::ForeignFormat::Llmc`]) as `run` says,
    /// read with `options`.
    ///
    /// # Errors
    /// [`InteropError::InvalidConfig`] as [`llmc_windows`] does, (field `epochs`) when a shuffled
    /// run would list more than [`LLMC_MAX_SHUFFLED_WINDOWS`] windows; [`InteropError::Dataset`]
    /// when the reader cannot be made; [`InteropError::Loader`] when the loader refuses the
    /// options.
    pub fn open(data: &ForeignDataset, run: &LlmcRunOptions, options: ReadOptions) -> Result<Self> {
        let format = IntTokenFormat::new(data.dtype())
            .map_err(|source| open_error(data.path())(StorageError::Format { shard: 0, source }))?;
        let reader = data.reader(format, options).map_err(open_error(data.path()))?;
        let (windows, rank, world, epochs) = if run.shuffle {
            let per_epoch = data.files().iter().map(|f| f.elements.saturating_sub(1)).sum::<u64>()
                / run.batch.saturating_mul(run.seq).saturating_mul(run.processes).max(1);
            if per_epoch.saturating_mul(run.epochs) > LLMC_MAX_SHUFFLED_WINDOWS {
                return Err(InteropError::InvalidConfig {
                    field: "epochs",
                    detail: format!(
                        "a shuffled llm.c run lists every epoch's windows: {} epochs of about {per_epoch} are \
                         more than {LLMC_MAX_SHUFFLED_WINDOWS}; ask for fewer epochs",
                        run.epochs
                    ),
                });
            }
            let windows =
                llmc_shuffled_windows(data, (run.batch, run.seq, run.processes), run.rank, run.epochs)?;
            (windows, 0, 1, 1)
        } else {
            (llmc_windows(data, run.batch, run.seq, run.processes)?, run.rank, run.processes, run.epochs)
        };
        let per_epoch =
            if run.shuffle { (windows.len() as u64 / run.epochs.max(1)).max(1) } else { u64::MAX };
        let mut builder = Loader::builder(Spans::new(reader, windows)?)
            .batch_size(1)
            .shard(rank, world)
            .epochs(epochs)
            .workers(run.workers);
        if let Some(r) = run.readahead {
            builder = builder.readahead(r);
        }
        let loader = builder.build()?;
        Ok(LlmcRun { loader, shuffle: run.shuffle, per_epoch, options: run.clone() })
    }

    /// The llm.c epoch of loader batch `number` (`epoch`: the loader's epoch, used when
    /// sequential).
    pub fn llmc_epoch(&self, number: u64, epoch: u64) -> u64 {
        if self.shuffle {
            number / self.per_epoch
        } else {
            epoch
        }
    }

    /// The state that continues llm.c at `(epoch, shard, sample)` (llm.c's
    /// `current_shard_idx` and `current_sample_idx`; `epoch` counts only when shuffled).
    ///
    /// # Errors
    /// [`InteropError::InvalidConfig`] (field `llmc`) when the position is not one llm.c
    /// reaches in this run (see [`llmc_resume_state`], [`llmc_shuffled_resume_state`]), or
    /// (field `epoch`) a sequential run given an epoch or a shuffled one an epoch past its last.
    pub fn position_state(
        &self,
        data: &ForeignDataset,
        (epoch, shard, sample): (u64, u64, u64),
    ) -> Result<State> {
        let o = &self.options;
        let shape = (o.batch, o.seq, o.processes);
        let initial = self.loader.initial_state();
        if o.shuffle {
            if epoch >= o.epochs {
                return Err(InteropError::InvalidConfig {
                    field: "epoch",
                    detail: format!("epoch {epoch} is not one of the run's {} epochs", o.epochs),
                });
            }
            llmc_shuffled_resume_state(&initial, data, shape, o.rank, (epoch, shard, sample))
        } else {
            if epoch != 0 {
                return Err(InteropError::InvalidConfig {
                    field: "epoch",
                    detail: "a sequential llm.c run's position has no epoch".into(),
                });
            }
            llmc_resume_state(&initial, data, shape, shard, sample)
        }
    }
}
