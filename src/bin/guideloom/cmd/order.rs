//! `guideloom batches --order megatron|llmc`: samples in Megatron-Core's or llm.c's order,
//! one JSON object per batch.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;

use guideloom::loader::{
    llmc_windows, megatron_resume_state, megatron_split_ranges, DataSource, GptConfig, Loader,
    MegatronSamples, MegatronSplit, Spans,
};
use guideloom::storage::foreign::{ForeignDataset, ForeignFormat, ForeignOptions};
use guideloom::storage::ReadOptions;
use serde_json::json;

use crate::cli::{BatchesArgs, InspectArgs, OrderKind};
use crate::cmd::backend::read_options;
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

/// Megatron's `--data-path`: one prefix, or weight/prefix pairs.
fn data_path(text: &str) -> CliResult<Vec<(f64, PathBuf)>> {
    let words: Vec<&str> = text.split_whitespace().collect();
    match words.len() {
        0 => Err("--data-path is empty".into()),
        1 => Ok(vec![(1.0, PathBuf::from(words[0]))]),
        n if n % 2 == 1 => {
            Err(format!("--data-path {text:?}: weights and prefixes must come in pairs").into())
        }
        _ => words
            .chunks(2)
            .map(|p| {
                let w: f64 = p[0].parse().map_err(|_| format!("--data-path: {:?} is not a weight", p[0]))?;
                Ok((w, PathBuf::from(p[1])))
            })
            .collect(),
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
) -> CliResult<(Vec<(f64, ForeignDataset)>, GptConfig)> {
    let paths = data_path(text)?;
    let options = ForeignOptions::new().format(ForeignFormat::Megatron);
    let datasets: Vec<(f64, ForeignDataset)> =
        paths.iter().map(|(w, p)| Ok((*w, ForeignDataset::open(p, &options)?))).collect::<CliResult<_>>()?;
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
    let refs: Vec<(f64, &ForeignDataset)> = datasets.iter().map(|(w, d)| (*w, d)).collect();
    let source = MegatronSamples::open(&refs, &config, ReadOptions::default())?;
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
    let refs: Vec<(f64, &ForeignDataset)> = datasets.iter().map(|(w, d)| (*w, d)).collect();
    let source = MegatronSamples::open(&refs, &config, read_options(a.window.backend)?)?;
    let loader = Loader::builder(source)
        .batch_size(a.window.batch_size)
        .shard(a.rank, a.world_size)
        .epochs(a.epochs)
        // Megatron's MegatronPretrainingSampler drops the incomplete last global batch.
        .drop_remainder(true)
        .workers(a.window.workers)
        .build()?;
    let state = megatron_resume_state(&loader.initial_state(), o.consumed_samples)?;
    let blend = refs.len() > 1;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut line = String::new();
    for (i, batch) in loader.iter_from(&state)?.enumerate() {
        if a.max_batches.is_some_and(|k| i as u64 >= k) {
            break;
        }
        let batch = batch?;
        line.clear();
        let _ = write!(line, "{{\"batch\":{},\"epoch\":{},\"samples\":", batch.number, batch.epoch);
        write_list(&mut line, batch.indices.iter());
        if !a.no_tokens {
            line.push_str(",\"tokens\":[");
            for (j, s) in batch.data.iter().enumerate() {
                if j > 0 {
                    line.push(',');
                }
                write_list(&mut line, s.tokens.iter());
            }
            line.push(']');
        }
        if blend {
            line.push_str(",\"sources\":");
            write_list(&mut line, batch.data.iter().map(|s| s.dataset));
        }
        line.push('}');
        writeln!(out, "{line}")?;
    }
    out.flush()?;
    Ok(())
}

fn llmc(a: &BatchesArgs) -> CliResult {
    let w = &a.window;
    let mut options = crate::cmd::foreign::options(&w.foreign);
    options.format = Some(ForeignFormat::Llmc);
    let data = ForeignDataset::open(&w.dir, &options)?;
    let format = guideloom::formats::IntTokenFormat::new(data.dtype())?;
    let reader = data.reader(format, read_options(w.backend)?)?;
    let windows = llmc_windows(&data, w.batch_size, w.seq_len, a.world_size)?;
    let loader = Loader::builder(Spans::new(reader, windows)?)
        .batch_size(1)
        .shard(a.rank, a.world_size)
        .epochs(a.epochs)
        .workers(w.workers)
        .build()?;
    if loader.source().is_empty() {
        eprintln!("note: no batch: the shards hold fewer than B x T x processes + 1 tokens each");
    }
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut line = String::new();
    for (i, batch) in loader.iter().enumerate() {
        if a.max_batches.is_some_and(|k| i as u64 >= k) {
            break;
        }
        let batch = batch?;
        line.clear();
        let _ = write!(line, "{{\"batch\":{},\"epoch\":{},\"windows\":", batch.number, batch.epoch);
        write_list(&mut line, batch.indices.iter());
        if !a.no_tokens {
            line.push_str(",\"tokens\":");
            write_list(&mut line, batch.data.iter().flatten());
        }
        line.push('}');
        writeln!(out, "{line}")?;
    }
    out.flush()?;
    Ok(())
}
