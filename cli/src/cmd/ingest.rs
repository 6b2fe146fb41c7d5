//! `guideloom ingest text` and `guideloom ingest jsonl`.

use std::path::{Path, PathBuf};

use guideloom::ingest::{
    self, DtypeChoice, IngestError, IngestOptions, IngestReport, JsonlField, Target, WriteOptions,
};
use guideloom::storage::parts::{self, CommitMode};
use guideloom::storage::{LocalDir, Manifest};
use serde_json::Value;

use crate::cli::{IngestCommand, IngestJsonlArgs, IngestTextArgs, IngestWriteArgs};
use crate::error::{context, CliResult};

/// Runs `guideloom ingest`; reports what was written on stderr.
pub(crate) fn run(command: IngestCommand) -> CliResult {
    match command {
        IngestCommand::Text(a) => text(a),
        IngestCommand::Jsonl(a) => jsonl(a),
    }
}

/// Refuses input files given as object-store URLs (ingest reads local files).
fn local_inputs(paths: &[std::path::PathBuf]) -> CliResult {
    for p in paths {
        crate::open::location::local_only(
            p,
            "an input",
            "download the input files first (--out may be a URL)",
        )?;
    }
    Ok(())
}

fn text(a: IngestTextArgs) -> CliResult {
    local_inputs(&a.paths)?;
    let opts = IngestOptions {
        tokenizer: a.tokenizer.into(),
        split: a.split.into(),
        eos: a.eos,
        shards: a.write.shards,
        dtype: a.write.dtype.into(),
        doc_meta: a.write.doc_meta,
        append: a.write.append,
        progress: true,
        max_document_bytes: a.write.max_document_bytes,
    };
    let one = |dir: &Path, inputs: &[PathBuf], dtype: DtypeChoice, shards: u64| {
        let o = IngestOptions { dtype, shards, progress: false, ..opts.clone() };
        ingest::ingest_text(dir, inputs, &o).map_err(with_flags)
    };
    if let Some(done) = through_parts(&a.out, &a.paths, &a.write, &one)? {
        print_report(&a.out, &done);
        return Ok(());
    }
    let remote = crate::open::location::ingest_remote(&a.out, opts.append, |local| {
        ingest::ingest_text(local, &a.paths, &opts).map_err(with_flags)
    })?;
    let r = match remote {
        Some(r) => r,
        None => ingest::ingest_text(&a.out, &a.paths, &opts).map_err(with_flags)?,
    };
    print_report(&a.out, &r);
    Ok(())
}

fn jsonl(a: IngestJsonlArgs) -> CliResult {
    local_inputs(&a.files)?;
    let field = match (a.tokens_field, a.text_field) {
        (Some(f), _) => JsonlField::Tokens(f),
        (None, Some(f)) => JsonlField::Text(f, a.tokenizer.into()),
        (None, None) => return Err("one of --tokens-field or --text-field is required".into()),
    };
    let write = WriteOptions {
        shards: a.write.shards,
        dtype: a.write.dtype.into(),
        target: if a.write.doc_meta { Target::DocMeta } else { Target::Stream },
        append: a.write.append,
        progress: true,
        max_document_bytes: a.write.max_document_bytes,
    };
    let one = |dir: &Path, inputs: &[PathBuf], dtype: DtypeChoice, shards: u64| {
        let w = WriteOptions { dtype, shards, progress: false, ..write };
        ingest::ingest_jsonl(dir, inputs, &field, &w).map_err(with_flags)
    };
    if let Some(done) = through_parts(&a.out, &a.files, &a.write, &one)? {
        print_report(&a.out, &done);
        return Ok(());
    }
    let remote = crate::open::location::ingest_remote(&a.out, write.append, |local| {
        ingest::ingest_jsonl(local, &a.files, &field, &write).map_err(with_flags)
    })?;
    let r = match remote {
        Some(r) => r,
        None => ingest::ingest_jsonl(&a.out, &a.files, &field, &write).map_err(with_flags)?,
    };
    print_report(&a.out, &r);
    Ok(())
}

/// One ingest of `inputs` into a directory with a dtype and a shard count.
type IngestOne<'a> = dyn Fn(&Path, &[PathBuf], DtypeChoice, u64) -> CliResult<IngestReport> + Sync + 'a;

/// `--part` (one part written, its receipt printed) and `--workers N` (N parts in parallel,
/// one commit); `Ok(None)` when neither is asked for.
fn through_parts(
    out: &Path,
    inputs: &[PathBuf],
    w: &IngestWriteArgs,
    one: &IngestOne<'_>,
) -> CliResult<Option<IngestReport>> {
    if w.part.is_none() && w.workers <= 1 {
        return Ok(None);
    }
    crate::open::location::local_only(
        out,
        "--out",
        "--part and --workers write local storages; upload the result",
    )?;
    if let Some((job, partition, attempt)) = &w.part {
        let dir = parts::part_dir(out, job, *partition, *attempt)?;
        let report = one(&dir, inputs, w.dtype.into(), w.shards)?;
        let receipt = parts::receipt_of(out, job, *partition, *attempt)?.to_json();
        match &w.receipt {
            Some(file) => std::fs::write(file, receipt + "\n")
                .map_err(|e| context(format!("writing the receipt {}", file.display()), e))?,
            None => outln!("{receipt}"),
        }
        return Ok(Some(report));
    }
    parallel(out, inputs, w, one).map(Some)
}

/// `--workers N`: the input files in up to N contiguous groups of about equal bytes, each
/// ingested as a part on its own thread, then one commit in group order; the parts of the job
/// that the commit does not reference are removed. With `--dtype auto`, parts that chose `u16`
/// while another needed `u32` are written again as `u32` (as one ingest chooses for all).
fn parallel(
    out: &Path,
    inputs: &[PathBuf],
    w: &IngestWriteArgs,
    one: &IngestOne<'_>,
) -> CliResult<IngestReport> {
    if out.join(guideloom::storage::MANIFEST_FILE).exists() {
        return Err(with_flags(IngestError::Exists { path: out.to_path_buf() }));
    }
    let files = ingest::collect_files(inputs)?;
    let groups = split_by_bytes(&files, w.workers as usize);
    let per_part = w.shards.div_ceil(groups.len() as u64).max(1);
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let job = format!("ingest-{}-{nanos}", std::process::id());
    let run_all = |dtype: DtypeChoice, which: &[usize], attempt: u64| -> Vec<CliResult<IngestReport>> {
        std::thread::scope(|scope| {
            let handles: Vec<_> = which
                .iter()
                .map(|&i| {
                    let (job, group) = (&job, &groups[i]);
                    scope.spawn(move || {
                        let dir = parts::part_dir(out, job, i as u64, attempt)?;
                        one(&dir, group, dtype, per_part)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).collect()
        })
    };
    let result = (|| -> CliResult<IngestReport> {
        let all: Vec<usize> = (0..groups.len()).collect();
        let mut reports = run_all(w.dtype.into(), &all, 0).into_iter().collect::<CliResult<Vec<_>>>()?;
        let mut attempts = vec![0u64; groups.len()];
        if reports.iter().any(|r| r.dtype == "u32") {
            let redo: Vec<usize> = (0..groups.len()).filter(|&i| reports[i].dtype != "u32").collect();
            for (i, r) in redo.iter().zip(run_all(DtypeChoice::U32, &redo, 1)) {
                reports[*i] = r?;
                attempts[*i] = 1;
            }
        }
        let receipts = (0..groups.len())
            .map(|i| parts::receipt_of(out, &job, i as u64, attempts[i]))
            .collect::<Result<Vec<_>, _>>()?;
        let documents: u64 = reports.iter().map(|r| r.documents).sum();
        let first = parts::part_dir(out, &job, 0, attempts[0])?;
        let mut meta = Manifest::load(&first)?.metadata().clone();
        meta.insert("documents".into(), Value::from(documents));
        let c =
            parts::commit_parts_in(&LocalDir::new(out), &receipts, CommitMode::ErrorIfExists, Some(&meta))?;
        Ok(IngestReport {
            documents,
            tokens: reports.iter().map(|r| r.tokens).sum(),
            input_bytes: reports.iter().map(|r| r.input_bytes).sum(),
            dtype: reports[0].dtype,
            shards: c.shards,
        })
    })();
    // Failed or replaced attempts (all of the job when it failed) are removed.
    let cleaned = parts::abort(out, &job);
    let report = result?;
    cleaned?;
    Ok(report)
}

/// `files` cut into at most `n` contiguous, non-empty groups of about equal bytes.
fn split_by_bytes(files: &[PathBuf], n: usize) -> Vec<Vec<PathBuf>> {
    let n = n.clamp(1, files.len().max(1));
    let sizes: Vec<u64> = files.iter().map(|f| std::fs::metadata(f).map_or(0, |m| m.len())).collect();
    let total: u64 = sizes.iter().sum();
    let mut groups: Vec<Vec<PathBuf>> = vec![Vec::new()];
    let mut acc = 0u64;
    for (i, (f, &size)) in files.iter().zip(&sizes).enumerate() {
        let left = files.len() - i;
        let open = n - groups.len();
        // A new group when this one has its share, or when every file left must start one.
        let share = total.saturating_mul(groups.len() as u64) / n as u64;
        if !groups.last().is_some_and(Vec::is_empty) && open > 0 && (acc + size / 2 >= share || left <= open)
        {
            groups.push(Vec::new());
        }
        if let Some(g) = groups.last_mut() {
            g.push(f.clone());
        }
        acc += size;
    }
    groups
}

/// The CLI's wording of the ingest errors a flag fixes: it names the flags (`--append`,
/// `--out`, `--dtype`), where the library names its option fields.
fn with_flags(e: IngestError) -> Box<dyn std::error::Error + Send + Sync> {
    match e {
        IngestError::Exists { path } => format!(
            "{} already holds a guideloom storage; pass --append to add documents to it, or choose another --out",
            path.display()
        )
        .into(),
        IngestError::TokenTooLarge { id, document, source_name, dtype } => {
            format!("token id {id} in document {document} ({source_name}) does not fit --dtype {dtype}").into()
        }
        e => e.into(),
    }
}

fn print_report(out: &Path, r: &IngestReport) {
    eprintln!(
        "wrote {}: {} documents, {} tokens ({}), {} shards, from {} input bytes",
        out.display(),
        r.documents,
        r.tokens,
        r.dtype,
        r.shards,
        r.input_bytes
    );
}
