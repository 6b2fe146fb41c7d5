//! The `Order` plan of `batches` (`--order megatron|llmc`): samples in Megatron-Core's or
//! llm.c's order, continuing a Megatron run at `--consumed-samples` or an llm.c run at its
//! position or checkpoint; and the Megatron configuration `inspect --order megatron` reports.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use guideloom::formats::IntTokenFormat;
use guideloom::interop::{
    megatron_resume_source, megatron_samples, ForeignDataset, ForeignFormat, ForeignOptions, GptConfig,
    InteropError, LlmcCheckpoint, LlmcRun, LlmcRunOptions, MegatronRun, MegatronRunOptions, MegatronSamples,
    MegatronSplit,
};
use guideloom::loader::{DataSource, Spans, State};
use guideloom::storage::ReadOptions;

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
    Ok(megatron_samples(datasets, config, options)?)
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

/// The run of `batches --order megatron`, and the state it starts from (`--resume`'s, or the
/// step `--consumed-samples` starts at).
///
/// # Errors
/// `--data-path` missing or malformed, a prefix that cannot be opened, a batch size or world
/// size that overflows, or a `--resume` state that cannot be read.
pub(crate) fn megatron(a: &BatchesArgs) -> CliResult<(MegatronRun, State)> {
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
    if a.read.window.batch_size.checked_mul(a.read.world_size).is_none() {
        return Err("--batch-size x --world-size overflows".into());
    }
    let mut run = MegatronRunOptions::new(a.read.window.batch_size)
        .shard(a.read.rank, a.read.world_size)
        .epochs(a.epochs)
        .workers(a.read.window.workers)
        .consumed_samples(o.consumed_samples);
    if datasets.iter().any(|(_, d)| crate::open::location::is_remote(d.path())) {
        run = run.readahead(crate::open::location::REMOTE_READAHEAD);
    }
    let megatron = MegatronRun::open(&datasets, &config, &run, read_options(a.read.window.backend)?)?;
    let state = match &a.resume {
        Some(p) => {
            // A state saved before issue 18 holds the fingerprint of the same samples over
            // the prefixes fingerprinted with their paths.
            let legacy = || -> CliResult<u64> {
                let old: Vec<Weighted> =
                    datasets.iter().map(|(w, d)| (*w, d.with_legacy_fingerprint())).collect();
                let source = megatron_source(&old, &config, read_options(a.read.window.backend)?)?;
                let global = a.read.window.batch_size * a.read.world_size;
                Ok(megatron_resume_source(source, o.consumed_samples, global)?.0.fingerprint())
            };
            resume_state(p, megatron.fingerprint(), legacy)?
        }
        None => megatron.state,
    };
    Ok((megatron, state))
}

/// The loader state that continues llm.c's run: `--resume` (a guideloom state), an llm.c
/// checkpoint (`--llmc-state`) or position (`--llmc-shard-idx`/`--llmc-sample-idx`), or the
/// start.
fn llmc_state(a: &BatchesArgs, data: &ForeignDataset, run: &LlmcRun) -> CliResult<State> {
    let (o, w, rank, world, epochs) = (&a.order, &a.read.window, a.read.rank, a.read.world_size, a.epochs);
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
        return Ok(run.loader.initial_state());
    };
    Ok(run.position_state(data, (epoch, shard, sample))?)
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

/// The run of `batches --order llmc` and the state it starts from.
///
/// # Errors
/// The shards cannot be opened, more windows than `LLMC_MAX_SHUFFLED_WINDOWS` to list, or a
/// state or checkpoint that does not fit the run.
pub(crate) fn llmc(a: &BatchesArgs) -> CliResult<(LlmcRun, State)> {
    let (w, rank, world) = (&a.read.window, a.read.rank, a.read.world_size);
    let mut options = crate::open::foreign::options(&w.foreign);
    options.format = Some(ForeignFormat::Llmc);
    let data = crate::open::foreign::open_with(&w.dir, &options)?;
    let mut run = LlmcRunOptions::new(w.batch_size, w.seq_len)
        .shard(rank, world)
        .epochs(a.epochs)
        .shuffle(a.order.llmc_shuffle)
        .workers(w.workers);
    if crate::open::location::is_remote(&w.dir) {
        run = run.readahead(crate::open::location::REMOTE_READAHEAD);
    }
    let llmc = LlmcRun::open(&data, &run, read_options(w.backend)?).map_err(|e| match e {
        // Name the flag that fixes it.
        InteropError::InvalidConfig { field: "epochs", detail } => {
            let e: Box<dyn std::error::Error + Send + Sync> =
                format!("--llmc-shuffle: {}", detail.replace("fewer epochs", "fewer --epochs")).into();
            e
        }
        e => Box::new(e),
    })?;
    if llmc.loader.source().is_empty() {
        eprintln!("note: no batch: the shards hold fewer than B x T x processes + 1 tokens each");
    }
    let mut state = llmc_state(a, &data, &llmc)?;
    if a.resume.is_some() {
        // A state saved before issue 18 holds the fingerprint of the same spans over the
        // shards fingerprinted with their path.
        let legacy = || -> CliResult<u64> {
            let format = IntTokenFormat::new(data.dtype())?;
            let reader = data.with_legacy_fingerprint().reader(format, read_options(w.backend)?)?;
            Ok(Spans::new(reader, llmc.loader.source().spans().to_vec())?.fingerprint())
        };
        let current = llmc.loader.source().fingerprint();
        adopt_legacy_fingerprint(&mut state, current, legacy)?;
    }
    Ok((llmc, state))
}
