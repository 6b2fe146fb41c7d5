//! `guideloom inspect`: a storage's manifest, counts and dtype; `--verify` checks checksums.

use std::path::Path;

use guideloom::interop::{megatron_split_ranges, ForeignDataset, ForeignFormat, MegatronSplit};
use guideloom::loader::DataSource;
use guideloom::storage::{self, Manifest, ReadOptions, ShardEntry, StorageKind};
use serde_json::{json, Value};

use crate::cli::InspectArgs;
use crate::error::CliResult;
use crate::open::order::{megatron_config, megatron_source};

/// Runs `guideloom inspect`: prints the summary (text, or one JSON object with `--json`);
/// with `--verify` recomputes every checksum and fails naming the first bad shard.
pub(crate) fn run(a: InspectArgs) -> CliResult {
    if a.order.order.is_some() {
        return inspect_order(&a);
    }
    if let Some(data) = crate::open::foreign::open(&a.dir, &a.foreign)? {
        return inspect_foreign(&a, &data);
    }
    let remote = crate::open::location::remote(&a.dir)?;
    if remote.is_none() {
        check_dir(&a.dir)?;
    }
    let dir = remote.unwrap_or_else(|| std::sync::Arc::new(storage::LocalDir::new(&a.dir)));
    let m = Manifest::load_from(dir.as_ref())?;
    let mut s = summary(&a.dir, &m)?;
    let verified = if a.verify { Some(storage::verify_in(dir.as_ref())) } else { None };
    if a.json {
        if let Some(v) = &verified {
            s["verified"] = json!(v.is_ok());
        }
        outln!("{s}");
    } else {
        print_text(&a.dir, &m, &s)?;
    }
    match verified {
        Some(Ok(r)) => {
            eprintln!(
                "verified {} shards, {} files, {} bytes: all checksums match",
                r.shards, r.files, r.bytes
            );
            Ok(())
        }
        Some(Err(e)) => Err(Box::new(e)),
        None => Ok(()),
    }
}

/// Fails unless `dir` is a directory, saying whether it is missing or something else.
fn check_dir(dir: &Path) -> CliResult {
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(m) if m.is_file() => {
            Err(crate::open::foreign::not_a_storage_file(dir, "inspect reads it in place").into())
        }
        Ok(_) => Err(format!("{} is not a directory", dir.display()).into()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Err(format!("{} does not exist", dir.display()).into())
        }
        Err(e) => Err(format!("cannot read {}: {e}", dir.display()).into()),
    }
}

/// The summary `inspect --json` prints: path, kind, dtype, format, totals (elements,
/// documents, bytes over all shard files), per-shard entries, metadata and fingerprint.
fn summary(dir: &Path, m: &Manifest) -> CliResult<Value> {
    let elements = checked_sum(dir, m.shards().iter().filter_map(|s| s.elements))?;
    let documents: Option<u64> = match m.kind() {
        StorageKind::Document => Some(checked_sum(dir, m.shards().iter().filter_map(|s| s.documents))?),
        _ => m.metadata().get("documents").and_then(Value::as_u64),
    };
    let files =
        m.shards().iter().flat_map(|s| std::iter::once(s.bytes).chain(s.files.values().map(|f| f.bytes)));
    let bytes = checked_sum(dir, files)?;
    Ok(json!({
        "path": dir.display().to_string(),
        "kind": m.kind().as_str(),
        "dtype": m.dtype_descr(),
        "format": m.format(),
        "elements": elements,
        "documents": documents,
        "bytes": bytes,
        "shards": m.shards().iter().map(shard_json).collect::<Vec<_>>(),
        "metadata": m.metadata(),
        "fingerprint": format!("{:016x}", m.fingerprint()),
    }))
}

/// The sum of `values`; an error naming `dir` on overflow.
fn checked_sum(dir: &Path, values: impl Iterator<Item = u64>) -> CliResult<u64> {
    let mut total = 0u64;
    for v in values {
        total = total
            .checked_add(v)
            .ok_or_else(|| format!("{}: the manifest's counts or sizes overflow u64", dir.display()))?;
    }
    Ok(total)
}

/// One shard of the summary: id, bytes, checksum, and the counts it records.
fn shard_json(s: &ShardEntry) -> Value {
    let mut o = json!({"id": s.id, "bytes": s.bytes, "checksum": format!("{:08x}", s.checksum)});
    if let Some(e) = s.elements {
        o["elements"] = json!(e);
    }
    if let Some(d) = s.documents {
        o["documents"] = json!(d);
    }
    o
}

/// The text layout of the summary `s` of the storage in `dir`.
fn print_text(dir: &Path, m: &Manifest, s: &Value) -> CliResult {
    outln!("storage   {}", dir.display());
    outln!("kind      {}", s["kind"].as_str().unwrap_or("?"));
    match m.dtype() {
        Some(d) => outln!("dtype     {d}"),
        None => outln!("dtype     {}", m.dtype_descr()),
    }
    outln!("format    {} {}", m.format().name, m.format().params);
    outln!("elements  {}", s["elements"]);
    if let Some(d) = s["documents"].as_u64() {
        outln!("documents {d}");
    }
    outln!("bytes     {}", s["bytes"]);
    outln!("shards    {}", m.shards().len());
    for sh in m.shards() {
        let count = match (sh.elements, sh.documents) {
            (Some(e), _) => format!("{e} elements"),
            (None, Some(d)) => format!("{d} documents"),
            _ => String::new(),
        };
        outln!("  shard {:>5}  {count:>18}  {:>14} bytes  crc32c {:08x}", sh.id, sh.bytes, sh.checksum);
    }
    if !m.metadata().is_empty() {
        outln!("metadata  {}", Value::Object(m.metadata().clone()));
    }
    Ok(())
}

/// `inspect` of a dataset in another project's layout: format, dtype, elements, documents,
/// files (and the layout's details); `--verify` checks the hashes of formats that record
/// them (MDS).
fn inspect_foreign(a: &InspectArgs, data: &ForeignDataset) -> CliResult {
    let verified = if a.verify {
        if data.format() != ForeignFormat::Mds {
            return Err(format!(
                "nothing to verify: {} datasets record no checksums ({})",
                data.format(),
                a.dir.display()
            )
            .into());
        }
        let options =
            crate::open::foreign::options(&a.foreign).format(ForeignFormat::Mds).verify_hashes(true);
        crate::open::foreign::open_with(&a.dir, &options)?;
        Some(true)
    } else {
        None
    };
    let mut s = data.describe();
    let reader =
        data.reader(guideloom::formats::IntTokenFormat::new(data.dtype())?, ReadOptions::default())?;
    s["fingerprint"] = json!(format!("{:016x}", reader.fingerprint()));
    if let Some(v) = verified {
        s["verified"] = json!(v);
    }
    if a.json {
        outln!("{s}");
    } else {
        outln!("dataset   {}", data.path().display());
        let how = match data.format() {
            ForeignFormat::Parquet => "decoded page by page",
            _ => "read in place",
        };
        outln!("format    {} ({how})", data.format());
        outln!("dtype     {}{}", data.dtype().descr(), if data.big_endian() { " (big-endian)" } else { "" });
        outln!("elements  {}", data.elements());
        if let Some(d) = data.document_count() {
            outln!("documents {d}");
        }
        if let (Some(column), Some(rows)) =
            (s.get("column").filter(|_| s.get("rows").is_some()), s.get("rows"))
        {
            let groups = s.get("row_groups").or_else(|| s.get("record_batches"));
            let what = if s.get("row_groups").is_some() { "row groups" } else { "record batches" };
            outln!(
                "column    {} ({})",
                column["name"].as_str().unwrap_or(""),
                column["type"].as_str().unwrap_or("")
            );
            outln!("rows      {rows} per file; {what} {}", groups.cloned().unwrap_or_default());
        }
        outln!("files     {}", data.files().len());
        for f in data.files() {
            outln!("  {:<40} {:>14} elements {:>14} bytes", f.path.display(), f.elements, f.bytes);
        }
    }
    if verified.is_some() {
        eprintln!("verified {} files: all hashes match", data.files().len());
    }
    Ok(())
}

/// Runs `inspect --order megatron`: one JSON object with the blend's and every component's
/// index sizes, epochs and split.
fn inspect_order(a: &InspectArgs) -> CliResult {
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
