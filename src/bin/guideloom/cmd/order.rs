//! `guideloom batches --order megatron|llmc`: samples in Megatron-Core's or llm.c's order,
//! one JSON object per batch, through the shared printing loop (`--save-state`, `--resume`),
//! continuing a Megatron run at `--consumed-samples` or an llm.c run at its position or
//! checkpoint.

use std::fmt::Write as _;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use guideloom::interop::{
    llmc_resume_state, llmc_shuffled_resume_state, llmc_shuffled_windows, llmc_windows,
    megatron_resume_source, megatron_split_ranges, ForeignDataset, ForeignFormat, ForeignOptions, GptConfig,
    LlmcCheckpoint, MegatronSamples, MegatronSplit,
};
use guideloom::loader::{DataSource, Loader, Spans, State};
use guideloom::storage::ReadOptions;
use serde_json::json;

use crate::cli::{BatchesArgs, InspectArgs, OrderKind};
use crate::cmd::backend::read_options;
use crate::cmd::batches::read_state;
use crate::cmd::context;
use crate::cmd::print::print_batches;
use crate::cmd::windows::write_list;
use crate::CliResult;

/// Runs `batches --order ...`.
pub(crate) fn batches(a: &BatchesArgs) -> CliResult {
    match a.order.order {
        Some(OrderKind::Megatron) => megatron(a),
        Some(OrderKind::Llmc) => llmc(a),
        None => Err("--order is missing".into()),
    }
}

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
type Weighted = (Option<f64>, ForeignDataset);

/// The samples of `datasets` under `config`: a weighted blend, or Megatron's blend of
/// prefixes without weights.
fn megatron_source(
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
fn megatron_config(
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
        .map(|(w, p)| Ok((*w, crate::cmd::foreign::open_with(p, &options)?)))
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

/// Runs `inspect --order megatron`: one JSON object with the blend's and every component's
/// index sizes, epochs and split.
pub(crate) fn inspect(a: &InspectArgs) -> CliResult {
    let o = &a.order;
    let dir = a.dir.to_str().ok_or("DIR is not UTF-8")?;
    let text = o.data_path.as_deref().unwrap_or(dir);
    let seq_length = o.seq_length.ok_or("--order megatron needs --seq-length")?;
    let (datasets, config) = megatron_config(
        text,
        &o.megatron_split,
        &o.megatron_split_name,
        o.train_samples,
        seq_length,
        o.seed,
    )?;
    let source = megatron_source(&datasets, &config, ReadOptions::default())?;
    let mut components = Vec::new();
    for (i, (w, d)) in datasets.iter().enumerate() {
        let ix = source.index(i).ok_or("missing component")?;
        let sequences = d.megatron().map_or(0, |m| m.sequence_count());
        let ranges = megatron_split_ranges(&config.split, sequences)?;
        let position = match config.which {
            MegatronSplit::Train => 0,
            MegatronSplit::Valid => 1,
            _ => 2,
        };
        let range = ranges[position].clone();
        components.push(json!({
            "path": d.path().display().to_string(),
            "weight": w,
            "sequences": sequences,
            "range": range.map(|r| [r.start, r.end]),
            "epochs": ix.epochs(),
            "separate_final_epoch": ix.separate_final_epoch(),
            "document_index": ix.document_index().len(),
            "sample_index": ix.sample_index().len(),
            "shuffle_index": ix.shuffle_index().len(),
            "samples": ix.len(),
        }));
    }
    let mut v = json!({
        "order": "megatron",
        "split": config.split,
        "which": config.which.name(),
        "seq_length": config.seq_length,
        "seed": config.seed,
        "samples": DataSource::len(&source),
        "components": components,
    });
    if let Some(b) = source.blend() {
        v["blend"] =
            json!({"size": b.len(), "weights": b.weights(), "component_samples": b.component_samples()});
    }
    outln!("{v}");
    Ok(())
}

fn megatron(a: &BatchesArgs) -> CliResult {
    let o = &a.order;
    let text = o.data_path.as_deref().ok_or("--order megatron needs --data-path")?;
    let (datasets, config) = megatron_config(
        text,
        &o.megatron_split,
        &o.megatron_split_name,
        o.train_samples,
        a.window.seq_len,
        a.window.seed,
    )?;
    let source = megatron_source(&datasets, &config, read_options(a.window.backend)?)?;
    // Megatron's sampler deals whole global batches from consumed_samples on: the source
    // starts at consumed mod G, the run at step consumed div G.
    let global =
        a.window.batch_size.checked_mul(a.world_size).ok_or("--batch-size x --world-size overflows")?;
    let (source, next_batch) = megatron_resume_source(source, o.consumed_samples, global)?;
    let offset = o.consumed_samples % global;
    let mut builder = Loader::builder(source)
        .batch_size(a.window.batch_size)
        .shard(a.rank, a.world_size)
        .epochs(a.epochs)
        // Megatron's MegatronPretrainingSampler drops the incomplete last global batch.
        .drop_remainder(true)
        .workers(a.window.workers);
    if datasets.iter().any(|(_, d)| crate::cmd::location::is_remote(d.path())) {
        builder = builder.readahead(crate::cmd::location::REMOTE_READAHEAD);
    }
    let loader = builder.build()?;
    let state = match &a.resume {
        Some(p) => {
            let mut state = read_state(p)?;
            // A state saved before issue 18 holds the fingerprint of the same samples over
            // the prefixes fingerprinted with their paths.
            let legacy = || -> CliResult<u64> {
                let old: Vec<Weighted> =
                    datasets.iter().map(|(w, d)| (*w, d.with_legacy_fingerprint())).collect();
                let source = megatron_source(&old, &config, read_options(a.window.backend)?)?;
                Ok(megatron_resume_source(source, o.consumed_samples, global)?.0.fingerprint())
            };
            let current = loader.source().fingerprint();
            crate::cmd::foreign::adopt_legacy_fingerprint(&mut state, current, legacy)?;
            state
        }
        None => State { next_batch, ..loader.initial_state() },
    };
    let blend = datasets.len() > 1;
    let mut it = loader.iter_from(&state)?;
    print_batches(
        &mut it,
        a.max_batches,
        a.save_state.as_deref(),
        |line, batch| {
            let _ = write!(line, "{{\"batch\":{},\"epoch\":{},\"samples\":", batch.number, batch.epoch);
            write_list(line, batch.indices.iter().map(|i| i + offset));
            if !a.no_tokens {
                line.push_str(",\"tokens\":[");
                for (j, s) in batch.data.iter().enumerate() {
                    if j > 0 {
                        line.push(',');
                    }
                    write_list(line, s.tokens.iter());
                }
                line.push(']');
            }
            if blend {
                line.push_str(",\"sources\":");
                write_list(line, batch.data.iter().map(|s| s.dataset));
            }
            line.push('}');
        },
        |_| {},
    )
}

/// The loader state that continues llm.c's run: `--resume` (a guideloom state), an llm.c
/// checkpoint (`--llmc-state`) or position (`--llmc-shard-idx`/`--llmc-sample-idx`), or the
/// start.
fn llmc_state(a: &BatchesArgs, data: &ForeignDataset, initial: &State, epochs: u64) -> CliResult<State> {
    let o = &a.order;
    let w = &a.window;
    let shape = (w.batch_size, w.seq_len, a.world_size);
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
        if (c.processes, c.rank) != (a.world_size, a.rank) {
            return Err(format!(
                "{}: written by rank {} of {} processes; this is --rank {} of --world-size {}",
                p.display(),
                c.rank,
                c.processes,
                a.rank,
                a.world_size
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
        llmc_shuffled_resume_state(initial, data, shape, a.rank, (epoch, shard, sample))?
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

fn llmc(a: &BatchesArgs) -> CliResult {
    let w = &a.window;
    let mut options = crate::cmd::foreign::options(&w.foreign);
    options.format = Some(ForeignFormat::Llmc);
    let data = crate::cmd::foreign::open_with(&w.dir, &options)?;
    let format = guideloom::formats::IntTokenFormat::new(data.dtype())?;
    let reader = data.reader(format, read_options(w.backend)?)?;
    let shuffle = a.order.llmc_shuffle;
    // Shuffled, every process has its own order and every epoch another: the windows of
    // --rank for all --epochs, one loader epoch, one loader rank.
    let (windows, rank, world, epochs) = if shuffle {
        let per_epoch = data.files().iter().map(|f| f.elements.saturating_sub(1)).sum::<u64>()
            / w.batch_size.saturating_mul(w.seq_len).saturating_mul(a.world_size).max(1);
        if per_epoch.saturating_mul(a.epochs) > MAX_SHUFFLED_WINDOWS {
            return Err(format!(
                "--llmc-shuffle lists every epoch's windows: {} epochs of about {per_epoch} are more than \
                 {MAX_SHUFFLED_WINDOWS}; ask for fewer --epochs",
                a.epochs
            )
            .into());
        }
        let windows =
            llmc_shuffled_windows(&data, (w.batch_size, w.seq_len, a.world_size), a.rank, a.epochs)?;
        (windows, 0, 1, 1)
    } else {
        (llmc_windows(&data, w.batch_size, w.seq_len, a.world_size)?, a.rank, a.world_size, a.epochs)
    };
    let per_epoch = if shuffle { (windows.len() as u64 / a.epochs.max(1)).max(1) } else { u64::MAX };
    let mut builder = Loader::builder(Spans::new(reader, windows)?)
        .batch_size(1)
        .shard(rank, world)
        .epochs(epochs)
        .workers(w.workers);
    if crate::cmd::location::is_remote(&w.dir) {
        builder = builder.readahead(crate::cmd::location::REMOTE_READAHEAD);
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
        crate::cmd::foreign::adopt_legacy_fingerprint(&mut state, current, legacy)?;
    }
    let mut it = loader.iter_from(&state)?;
    print_batches(
        &mut it,
        a.max_batches,
        a.save_state.as_deref(),
        |line, batch| {
            let epoch = if shuffle { batch.number / per_epoch } else { batch.epoch };
            let _ = write!(line, "{{\"batch\":{},\"epoch\":{epoch},\"windows\":", batch.number);
            write_list(line, batch.indices.iter());
            if !a.no_tokens {
                line.push_str(",\"tokens\":");
                write_list(line, batch.data.iter().flatten());
            }
            line.push('}');
        },
        |_| {},
    )
}
