//! `guideloom ingest text` and `guideloom ingest jsonl`.

use std::path::Path;

use guideloom::ingest::{self, IngestError, IngestOptions, IngestReport, JsonlField, Target, WriteOptions};

use crate::cli::{IngestCommand, IngestJsonlArgs, IngestTextArgs};
use crate::error::CliResult;

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
