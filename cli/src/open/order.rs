//! The `Order` plan of `batches` (`--order megatron|llmc`): samples in Megatron-Core's or
//! llm.c's order, continuing a Megatron run at `--consumed-samples` or an llm.c run at its
//! position or checkpoint; and the Megatron configuration `inspect --order megatron` reports.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use guideloom::formats::IntTokenFormat;
use guideloom::interop::{
    llmc_resume_state, llmc_shuffled_resume_state, llmc_shuffled_windows, llmc_windows,
    megatron_resume_source, ForeignDataset, ForeignFormat, ForeignOptions, GptConfig, LlmcCheckpoint,
    MegatronSamples, MegatronSplit,
};
use guideloom::loader::transforms::Slice;
use guideloom::loader::{DataSource, Loader, Spans, State};
use guideloom::storage::{ReadOptions, StreamReader};

use crate::cli::BatchesArgs;
use crate::error::{context, CliResult};
use crate::open::backend::read_options;
use crate::open::foreign::{adopt_legacy_fingerprint, resume_state};
use crate::open::state_file::read_state;

/// Megatron's `--data-path` (`get_blend_from_list`): one prefix, weight/prefix pairs, or
/// several prefixes without weights (an odd count, or pairs whose first words are not all
/// numbers); the weights are `None` in that last case (and for one prefix).
fn data_path(text: &str) -> CliResult<Vec<(Option<f64>, PathBuf)>> {
    let words: Vec<&str> = text.split_whitespace().collect();
    if words.is_empty() {
        return Err("--data-path is empty".into());
    }
    let prefixes = || Ok(words.iter().map(|w| (None, PathBuf::from(w))).collect());
    if words.len() % 2 == 1 {
        return prefixes();
    }
    let weights: Vec<Option<f64>> = words.iter().step_by(2).map(|w| w.parse().ok()).collect();
    match (weights.iter().all(Option::is_some), weights.iter().all(Option::is_none)) {
        (true, _) => {
            Ok(weights.into_iter().zip(words.iter().skip(1).step_by(2).map(PathBuf::from)).collect())
        }
        (_, true) => prefixes(),
        _ => Err(format!("--data-path {text:?}: either every prefix has a weight or none has").into()),
    }
}

/// A dataset of `--data-path` and its weight (`None`: prefixes without weights).
pub(crate) type Weighted = (Option<f64>, ForeignDataset);

/// The samples of `datasets` under `config`: a weighted blend, or Megatron's blend of
/// prefixes without weights.
pub(crate) fn megatron_source(
    datasets: &[Weighted],
    config: &GptConfig,
    options: ReadOptions,
) -> CliResult<MegatronSamples> {
    if datasets.iter().all(|(w, _)| w.is_some()) {
        let refs: Vec<(f64, &ForeignDataset)> = datasets.iter().map(|(w, d)| (w.unwrap_or(1.0), d)).collect();
        Ok(MegatronSamples::open(&refs, config, options)?)
    } else {
        let refs: Vec<&ForeignDataset> = datasets.iter().map(|(_, d)| d).collect();
        Ok(MegatronSamples::open_unweighted(&refs, config, options)?)
    }
}

/// The datasets of `--data-path` and the `GPTDataset` configuration of the flags.
pub(crate) fn megatron_config(
    text: &str,
    split: &str,
    which: &str,
    train_samples: Option<u64>,
    seq_length: u64,
    seed: u64,
) -> CliResult<(Vec<Weighted>, GptConfig)> {
    let paths = data_path(text)?;
    let options = ForeignOptions::new().format(ForeignFormat::Megatron);
    let datasets: Vec<Weighted> = paths
        .iter()
        .map(|(w, p)| Ok((*w, crate::open::foreign::open_with(p, &options)?)))
        .collect::<CliResult<_>>()?;
    let which = match which {
        "valid" => MegatronSplit::Valid,
        "test" => MegatronSplit::Test,
        _ => MegatronSplit::Train,
    };
    let mut config = GptConfig::new(seq_length, seed).split(split).which(which);
    config.num_samples = train_samples;
    Ok((datasets, config))
}

/// `batches --order megatron` ready to print: the loader over Megatron's samples from
/// `--consumed-samples` on, the state it starts from, the sample number of its first
/// sample's offset, and whether it blends several prefixes.
pub(crate) struct MegatronRun {
    /// The loader over the samples, whole global batches from the consumed ones on.
    pub(crate) loader: Loader<Slice<MegatronSamples>>,
    /// `--resume`'s state, or the step `--consumed-samples` starts at.
    pub(crate) state: State,
    /// Sample numbers of the loader's source start here (consumed mod the global batch).
    pub(crate) offset: u64,
    /// `--data-path` names more than one prefix (lines then say each sample's source).
    pub(crate) blend: bool,
}

/// The run of `batches --order megatron`.
///
/// # Errors
/// `--data-path` missing or malformed, a prefix that cannot be opened, a batch size or world
/// size that overflows, or a `--resume` state that cannot be read.
pub(crate) fn megatron(a: &BatchesArgs) -> CliResult<MegatronRun> {
    let o = &a.order;
    let text = o.data_path.as_deref().ok_or("--order megatron needs --data-path")?;
    let (datasets, config) = megatron_config(
        text,
        &o.megatron_split,
        &o.megatron_split_name,
        o.train_samples,
        a.read.window.seq_len,
        a.read.window.seed.unwrap_or(GptConfig::DEFAULT_SEED),
    )?;
    let source = megatron_source(&datasets, &config, read_options(a.read.window.backend)?)?;
    // Megatron's sampler deals whole global batches from consumed_samples on: the source
    // starts at consumed mod G, the run at step consumed div G.
    let global = a
        .read
        .window
        .batch_size
        .checked_mul(a.read.world_size)
        .ok_or("--batch-size x --world-size overflows")?;
    let (source, next_batch) = megatron_resume_source(source, o.consumed_samples, global)?;
    let offset = o.consumed_samples % global;
    let mut builder = Loader::builder(source)
        .batch_size(a.read.window.batch_size)
        .shard(a.read.rank, a.read.world_size)
        .epochs(a.epochs)
        // Megatron's MegatronPretrainingSampler drops the incomplete last global batch.
        .drop_remainder(true)
        .workers(a.read.window.workers);
    if datasets.iter().any(|(_, d)| crate::open::location::is_remote(d.path())) {
        builder = builder.readahead(crate::open::location::REMOTE_READAHEAD);
    }
    let loader = builder.build()?;
    let state = match &a.resume {
        Some(p) => {
            // A state saved before issue 18 holds the fingerprint of the same samples over
            // the prefixes fingerprinted with their paths.
            let legacy = || -> CliResult<u64> {
                let old: Vec<Weighted> =
                    datasets.iter().map(|(w, d)| (*w, d.with_legacy_fingerprint())).collect();
                let source = megatron_source(&old, &config, read_options(a.read.window.backend)?)?;
                Ok(megatron_resume_source(source, o.consumed_samples, global)?.0.fingerprint())
            };
            resume_state(p, loader.source().fingerprint(), legacy)?
        }
        None => State { next_batch, ..loader.initial_state() },
    };
    Ok(MegatronRun { loader, state, offset, blend: datasets.len() > 1 })
}

/// The loader state that continues llm.c's run: `--resume` (a guideloom state), an llm.c
/// checkpoint (`--llmc-state`) or position (`--llmc-shard-idx`/`--llmc-sample-idx`), or the
/// start.
fn llmc_state(a: &BatchesArgs, data: &ForeignDataset, initial: &State, epochs: u64) -> CliResult<State> {
    let (o, w, rank, world) = (&a.order, &a.read.window, a.read.rank, a.read.world_size);
    let shape = (w.batch_size, w.seq_len, world);
    if let Some(p) = &a.resume {
        return read_state(p);
    }
    if o.llmc_epoch != 0 && (!o.llmc_shuffle || o.llmc_shard_idx.is_none()) {
        return Err("--llmc-epoch goes with --llmc-shuffle and --llmc-shard-idx (a sequential run's \
                    position has no epoch; a checkpoint names its own)"
            .into());
    }
    let (epoch, shard, sample) = if let Some(p) = &o.llmc_state {
        let (c, tail) = read_llmc_checkpoint(p, data, (w.batch_size, w.seq_len))?;
        if (c.processes, c.rank) != (world, rank) {
            return Err(format!(
                "{}: written by rank {} of {} processes; this is --rank {} of --world-size {}",
                p.display(),
                c.rank,
                c.processes,
                rank,
                world
            )
            .into());
        }
        if c.shuffle != o.llmc_shuffle {
            let (was, flag) = if c.shuffle { ("shuffled", "add") } else { ("did not shuffle", "drop") };
            return Err(format!("{}: the run {was}; {flag} --llmc-shuffle", p.display()).into());
        }
        let epoch = if c.shuffle { c.epoch(&tail, data, (w.batch_size, w.seq_len), epochs)? } else { 0 };
        (epoch, c.shard, c.sample)
    } else if let (Some(shard), Some(sample)) = (o.llmc_shard_idx, o.llmc_sample_idx) {
        if o.llmc_shuffle && o.llmc_epoch >= epochs {
            return Err(format!("--llmc-epoch {} is not one of the {epochs} --epochs", o.llmc_epoch).into());
        }
        (o.llmc_epoch, shard, sample)
    } else {
        return Ok(*initial);
    };
    Ok(if o.llmc_shuffle {
        llmc_shuffled_resume_state(initial, data, shape, rank, (epoch, shard, sample))?
    } else {
        llmc_resume_state(initial, data, shape, shard, sample)?
    })
}

/// The header of llm.c's checkpoint at `path` and its last bytes (as many as its shuffle
/// tail can take over `data`), without reading the optimizer state between them.
fn read_llmc_checkpoint(
    path: &Path,
    data: &ForeignDataset,
    (batch, seq): (u64, u64),
) -> CliResult<(LlmcCheckpoint, Vec<u8>)> {
    let what = || format!("llm.c checkpoint {}", path.display());
    let mut f = std::fs::File::open(path).map_err(|e| context(what(), e))?;
    let len = f.metadata().map_err(|e| context(what(), e))?.len();
    let mut header = vec![0u8; LlmcCheckpoint::HEADER_BYTES.min(len as usize)];
    f.read_exact(&mut header).map_err(|e| context(what(), e))?;
    let c = LlmcCheckpoint::parse_header(&header).map_err(|e| context(what(), e))?;
    let mut tail = Vec::new();
    if c.shuffle {
        let want = c.tail_bytes(data, (batch, seq))?.min(len - LlmcCheckpoint::HEADER_BYTES as u64);
        f.seek(SeekFrom::Start(len - want)).map_err(|e| context(what(), e))?;
        f.take(want).read_to_end(&mut tail).map_err(|e| context(what(), e))?;
    }
    Ok((c, tail))
}

/// The most windows `--llmc-shuffle` lists (16 bytes each).
const MAX_SHUFFLED_WINDOWS: u64 = 1 << 27;

/// `batches --order llmc` ready to print: the loader over llm.c's batches, the state it
/// starts from, and how its batch numbers map to llm.c's epochs.
pub(crate) struct LlmcRun {
    /// The loader: one llm.c batch (a span of B x T + 1 tokens) per loader batch.
    pub(crate) loader: Loader<Spans<StreamReader<IntTokenFormat>>>,
    /// `--resume`'s state, the position of an llm.c run or checkpoint, or the start.
    pub(crate) state: State,
    /// `--llmc-shuffle`: every process has its own order, one loader epoch for all epochs.
    pub(crate) shuffle: bool,
    /// With `shuffle`, batches per llm.c epoch (`u64::MAX` otherwise).
    pub(crate) per_epoch: u64,
}

/// The run of `batches --order llmc`.
///
/// # Errors
/// The shards cannot be opened, more windows than [`MAX_SHUFFLED_WINDOWS`] to list, or a
/// state or checkpoint that does not fit the run.
pub(crate) fn llmc(a: &BatchesArgs) -> CliResult<LlmcRun> {
    let (w, rank, world) = (&a.read.window, a.read.rank, a.read.world_size);
    let mut options = crate::open::foreign::options(&w.foreign);
    options.format = Some(ForeignFormat::Llmc);
    let data = crate::open::foreign::open_with(&w.dir, &options)?;
    let format = guideloom::formats::IntTokenFormat::new(data.dtype())?;
    let reader = data.reader(format, read_options(w.backend)?)?;
    let shuffle = a.order.llmc_shuffle;
    // Shuffled, every process has its own order and every epoch another: the windows of
    // --rank for all --epochs, one loader epoch, one loader rank.
    let (windows, rank, world, epochs) = if shuffle {
        let per_epoch = data.files().iter().map(|f| f.elements.saturating_sub(1)).sum::<u64>()
            / w.batch_size.saturating_mul(w.seq_len).saturating_mul(world).max(1);
        if per_epoch.saturating_mul(a.epochs) > MAX_SHUFFLED_WINDOWS {
            return Err(format!(
                "--llmc-shuffle lists every epoch's windows: {} epochs of about {per_epoch} are more than \
                 {MAX_SHUFFLED_WINDOWS}; ask for fewer --epochs",
                a.epochs
            )
            .into());
        }
        let windows = llmc_shuffled_windows(&data, (w.batch_size, w.seq_len, world), rank, a.epochs)?;
        (windows, 0, 1, 1)
    } else {
        (llmc_windows(&data, w.batch_size, w.seq_len, world)?, rank, world, a.epochs)
    };
    let per_epoch = if shuffle { (windows.len() as u64 / a.epochs.max(1)).max(1) } else { u64::MAX };
    let mut builder = Loader::builder(Spans::new(reader, windows)?)
        .batch_size(1)
        .shard(rank, world)
        .epochs(epochs)
        .workers(w.workers);
    if crate::open::location::is_remote(&w.dir) {
        builder = builder.readahead(crate::open::location::REMOTE_READAHEAD);
    }
    let loader = builder.build()?;
    if loader.source().is_empty() {
        eprintln!("note: no batch: the shards hold fewer than B x T x processes + 1 tokens each");
    }
    let mut state = llmc_state(a, &data, &loader.initial_state(), a.epochs)?;
    if a.resume.is_some() {
        // A state saved before issue 18 holds the fingerprint of the same spans over the
        // shards fingerprinted with their path.
        let legacy = || -> CliResult<u64> {
            let reader = data.with_legacy_fingerprint().reader(format, read_options(w.backend)?)?;
            Ok(Spans::new(reader, loader.source().spans().to_vec())?.fingerprint())
        };
        let current = loader.source().fingerprint();
        adopt_legacy_fingerprint(&mut state, current, legacy)?;
    }
    Ok(LlmcRun { loader, state, shuffle, per_epoch })
}
