//! `guideloom import`: a dataset in another project's layout -> a native storage of the same
//! token ids (no re-tokenizing), with its documents where it records them.

use std::path::Path;

use guideloom::formats::{DocumentTokensFormat, IntTokenFormat, TokenDocument, TokenElement, TokenFormat};
use guideloom::interop::ForeignDataset;
use guideloom::storage::{
    Manifest, ReadOptions, StorageError, StreamReader, StreamWithMetaWriter, StreamWriter, Window,
};
use serde_json::json;

use crate::cli::{DtypeArg, ImportArgs};
use crate::error::{one_sentence, CliResult};

/// Tokens read per step (bounded memory whatever the dataset's size).
const CHUNK: u64 = 1 << 22;

/// Runs `guideloom import`: reads the dataset in place and writes `--out` (one native shard
/// per file of the dataset), then prints a one-line summary.
pub(crate) fn run(a: ImportArgs) -> CliResult {
    let data = crate::open::foreign::open(&a.path, &a.foreign)?.ok_or_else(|| {
        format!("{} is not a dataset of a known layout: name it with --format", a.path.display())
    })?;
    if let Some(dir) = crate::open::location::remote(&a.out)? {
        // Written locally, then uploaded (shard objects first, the manifest last).
        if dir.file_len(guideloom::storage::MANIFEST_FILE)?.is_some() {
            return Err(format!("{} already holds a storage", a.out.display()).into());
        }
    } else {
        match Manifest::load(&a.out) {
            Err(StorageError::NotAStorage { .. }) => {}
            Ok(_) => return Err(format!("{} already holds a storage", a.out.display()).into()),
            Err(e) => return Err(Box::new(e)),
        }
    }
    let small = data.dtype().size() <= 2;
    let reader = data.reader(IntTokenFormat::new(data.dtype())?, ReadOptions::default())?;
    let convert = |out: &Path| match (a.out_dtype, small) {
        (DtypeArg::U16, _) | (DtypeArg::Auto, true) => write::<u16>(&a, out, &data, &reader),
        (DtypeArg::U32, _) | (DtypeArg::Auto, false) => write::<u32>(&a, out, &data, &reader),
    };
    let written = match crate::open::location::ingest_remote(&a.out, false, convert)? {
        Some(n) => n,
        None => convert(&a.out)?,
    };
    eprintln!(
        "imported {} tokens{} from {} {} ({} files) into {}",
        written,
        data.document_count().map_or_else(String::new, |d| format!(" in {d} documents")),
        data.format(),
        data.path().display(),
        data.files().len(),
        a.out.display()
    );
    Ok(())
}

/// For every file of `data` in order: its index (the native shard it goes to) and its element
/// range of the stream.
fn file_ranges(data: &ForeignDataset) -> Vec<(u64, u64, u64)> {
    let mut start = 0u64;
    data.files()
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let r = (i as u64, start, f.elements);
            start += f.elements;
            r
        })
        .collect()
}

/// Writes the storage with `E` ids; returns the tokens written.
fn write<E: TokenElement>(
    a: &ImportArgs,
    out: &Path,
    data: &ForeignDataset,
    reader: &StreamReader<IntTokenFormat>,
) -> CliResult<u64> {
    let source = data.describe();
    let out_of_range = |e: StorageError| -> Box<dyn std::error::Error + Send + Sync> {
        format!("{}: the ids do not fit --out-dtype {} (try u32)", one_sentence(&e), E::dtype()).into()
    };
    if a.doc_meta {
        let Some(bounds) = data.documents() else {
            return Err(format!(
                "{} records no documents: import it without --doc-meta",
                data.path().display()
            )
            .into());
        };
        let mut w = StreamWithMetaWriter::open(out, DocumentTokensFormat::<E, u32>::new())?;
        let files = file_ranges(data);
        for (ordinal, pair) in bounds.windows(2).enumerate() {
            let doc = reader.read(Window::new(pair[0], pair[1] - pair[0]))?;
            let tokens = doc
                .iter()
                .map(|&t| {
                    u32::try_from(t).map_err(|_| format!("document {ordinal}: id {t} does not fit u32"))
                })
                .collect::<Result<Vec<u32>, String>>()?;
            // The shard of the file the document starts in.
            let shard = files.iter().rev().find(|f| f.1 <= pair[0] && f.2 > 0).map_or(0, |f| f.0);
            let doc = TokenDocument { ordinal: ordinal as u64, tokens, data: Vec::new() };
            w.append(shard, std::slice::from_ref(&doc)).map_err(out_of_range)?;
        }
        w.set_metadata("source", source);
        w.set_metadata("documents", json!(bounds.len() - 1));
        w.finish()?;
    } else {
        let mut w = StreamWriter::open(out, TokenFormat::<E, i64>::new())?;
        for (shard, start, n) in file_ranges(data) {
            let mut done = 0u64;
            while done < n {
                let len = (n - done).min(CHUNK);
                w.append(shard, &reader.read(Window::new(start + done, len))?).map_err(out_of_range)?;
                done += len;
            }
        }
        w.set_metadata("source", source);
        if let Some(d) = data.document_count() {
            w.set_metadata("documents", json!(d));
        }
        w.finish()?;
    }
    Ok(data.elements())
}
