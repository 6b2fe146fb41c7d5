//! The write phase of an ingest: documents in input order -> shards of a token storage.

use std::path::Path;

use guideloom_formats::{DocumentTokensFormat, TokenDocument, TokenElement, TokenFormat};
use guideloom_storage::{StorageError, StreamWithMetaWriter, StreamWriter};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::{json, Value};

use crate::spill::{CorpusStats, Spill};
use crate::{Document, DtypeChoice, IngestError, IngestReport, Target, WriteOptions};

/// Calls its argument on every document of a corpus, in input order.
pub(crate) type Visit<'a> =
    &'a mut dyn FnMut(&mut dyn FnMut(&Document) -> Result<(), IngestError>) -> Result<(), IngestError>;

/// Cuts a corpus into `shards` contiguous runs of documents balanced by token count, one
/// document at a time: a new shard starts at document `i` (not the first) once the tokens
/// before it reach `total * k / shards`, `k` being the number of shards started so far.
#[derive(Debug)]
pub(crate) struct ShardPlanner {
    shards: u64,
    total: u64,
    started: u64,
    last_start: u64,
    tokens_before: u64,
}

impl ShardPlanner {
    /// A plan for `shards` (at least 1) shards over `total` tokens.
    pub(crate) fn new(shards: u64, total: u64) -> Self {
        ShardPlanner { shards: shards.max(1), total, started: 1, last_start: 0, tokens_before: 0 }
    }

    /// Whether document `i` (of `tokens` tokens; called for `i = 0, 1, ...`) starts a new shard.
    pub(crate) fn starts_shard(&mut self, i: u64, tokens: u64) -> bool {
        let k = self.started;
        let threshold = u128::from(self.total) * u128::from(k) / u128::from(self.shards);
        let new = k < self.shards && u128::from(self.tokens_before) >= threshold && i > self.last_start;
        if new {
            self.started += 1;
            self.last_start = i;
        }
        self.tokens_before += tokens;
        new
    }

    /// The number of shards of the plan.
    pub(crate) fn shards(&self) -> u64 {
        self.shards
    }
}

/// A writer the documents go to: a token stream, or a stream with one metadata run per
/// document.
trait DocumentSink {
    /// Appends document `doc` (with its ordinal) to `shard`, or only creates the shard for
    /// `None`; returns the tokens appended.
    fn put(&mut self, shard: u64, doc: Option<(u64, &Document)>) -> Result<u64, StorageError>;
    /// Sets a key of the manifest's user metadata.
    fn set_metadata(&mut self, key: String, value: Value);
    /// Commits the storage.
    fn commit(&mut self) -> Result<(), StorageError>;
}

impl<E: TokenElement> DocumentSink for StreamWriter<TokenFormat<E, u32>> {
    fn put(&mut self, shard: u64, doc: Option<(u64, &Document)>) -> Result<u64, StorageError> {
        self.append(shard, doc.map_or(&[][..], |(_, d)| &d.tokens))
    }
    fn set_metadata(&mut self, key: String, value: Value) {
        StreamWriter::set_metadata(self, key, value);
    }
    fn commit(&mut self) -> Result<(), StorageError> {
        StreamWriter::commit(self)
    }
}

impl<E: TokenElement> DocumentSink for StreamWithMetaWriter<DocumentTokensFormat<E, u32>> {
    fn put(&mut self, shard: u64, doc: Option<(u64, &Document)>) -> Result<u64, StorageError> {
        match doc {
            None => self.append(shard, &[]),
            Some((ordinal, d)) => {
                let doc =
                    TokenDocument { ordinal, tokens: d.tokens.clone(), data: d.source.as_bytes().to_vec() };
                self.append(shard, std::slice::from_ref(&doc))
            }
        }
    }
    fn set_metadata(&mut self, key: String, value: Value) {
        StreamWithMetaWriter::set_metadata(self, key, value);
    }
    fn commit(&mut self) -> Result<(), StorageError> {
        StreamWithMetaWriter::commit(self)
    }
}

/// Where new shards and ordinals start: after an existing storage's last shard and document.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Placement {
    first_shard: u64,
    first_ordinal: u64,
}

/// Metadata keys compared first on append, so a mismatch names the root cause (another
/// tokenizer also has another end-of-text id).
const APPEND_KEYS_FIRST: [&str; 6] = ["source", "tokens_field", "text_field", "tokenizer", "split", "eos"];

/// Checks the output directory before anything is read or written: creates it; refuses an
/// existing storage unless `write.append`, a storage written with other metadata, and a
/// directory that holds other files than a storage's; returns where new shards and document
/// ordinals start, and the existing storage's dtype descr.
pub(crate) fn check_output(
    out: &Path,
    meta: &Value,
    write: &WriteOptions,
) -> Result<(Placement, Option<Value>), IngestError> {
    if write.shards == 0 {
        return Err(IngestError::ZeroShards { path: out.to_path_buf() });
    }
    std::fs::create_dir_all(out).map_err(|source| IngestError::Output { path: out.to_path_buf(), source })?;
    let m = match guideloom_storage::Manifest::load(out) {
        Ok(m) => m,
        Err(StorageError::NotAStorage { .. }) => {
            refuse_foreign_files(out)?;
            return Ok((Placement { first_shard: 0, first_ordinal: 0 }, None));
        }
        Err(e) => return Err(e.into()),
    };
    if !write.append {
        return Err(IngestError::Exists { path: out.to_path_buf() });
    }
    if let Value::Object(new) = meta {
        let first = APPEND_KEYS_FIRST.iter().filter_map(|k| new.get_key_value(*k));
        let rest = new.iter().filter(|(k, _)| !APPEND_KEYS_FIRST.contains(&k.as_str()));
        for (k, v) in first.chain(rest) {
            let old = m.metadata().get(k);
            if old != Some(v) {
                return Err(IngestError::AppendMismatch {
                    path: out.to_path_buf(),
                    field: k.clone(),
                    existing: old.map_or_else(|| "none".to_string(), Value::to_string),
                    new: v.to_string(),
                });
            }
        }
    }
    let next = match m.shards().last() {
        None => 0,
        Some(s) => s.id.checked_add(1).ok_or(IngestError::ShardIdOverflow {
            path: out.to_path_buf(),
            last: s.id,
            shards: write.shards,
        })?,
    };
    let documents = m.metadata().get("documents").and_then(Value::as_u64).unwrap_or(0);
    Ok((Placement { first_shard: next, first_ordinal: documents }, Some(m.dtype_descr().clone())))
}

/// Refuses a directory without a manifest that holds files a storage does not (an
/// interrupted first ingest leaves shard files and the writer lock, which are fine).
fn refuse_foreign_files(out: &Path) -> Result<(), IngestError> {
    let read_error = |source| IngestError::Output { path: out.to_path_buf(), source };
    for entry in std::fs::read_dir(out).map_err(read_error)? {
        let name = entry.map_err(read_error)?.file_name();
        let name = name.to_string_lossy();
        let ours = name == ".writer.lock" || name == "manifest.json.tmp" || name.starts_with("shard-");
        if !ours {
            return Err(IngestError::NotAStorageDirectory {
                path: out.to_path_buf(),
                file: name.into_owned(),
            });
        }
    }
    Ok(())
}

/// Writes a corpus whose statistics are known ahead (see [`write_documents`]).
pub(crate) fn write_corpus(
    out: &Path,
    stats: &CorpusStats,
    input_bytes: u64,
    mut meta: Value,
    write: &WriteOptions,
    visit: Visit<'_>,
) -> Result<IngestReport, IngestError> {
    let (place, existing_dtype) = check_output(out, &meta, write)?;
    let too_large = || match &stats.over_u16 {
        Some((document, id, source)) => Err(IngestError::TokenTooLarge {
            id: u64::from(*id),
            document: *document,
            source_name: source.clone(),
            dtype: "u16",
        }),
        None => Ok(true),
    };
    let use_u16 = match write.dtype {
        DtypeChoice::U16 => too_large()?,
        DtypeChoice::U32 => false,
        DtypeChoice::Auto => match existing_dtype.as_ref().and_then(Value::as_str) {
            Some("<u2") => too_large()?,
            Some(_) => false,
            None => stats.over_u16.is_none(),
        },
    };
    // The existing count comes from the storage's metadata: a user number, checked.
    let documents = place.first_ordinal.checked_add(stats.documents).ok_or_else(|| {
        IngestError::DocumentCountOverflow {
            path: out.to_path_buf(),
            existing: place.first_ordinal,
            new: stats.documents,
        }
    })?;
    if let Value::Object(m) = &mut meta {
        m.insert("documents".into(), json!(documents));
    }
    let plan = ShardPlanner::new(write.shards, stats.tokens);
    let shards = plan.shards();
    if place.first_shard.checked_add(shards - 1).is_none() {
        // `first_shard` is at least 1 here (0 + shards - 1 cannot overflow).
        return Err(IngestError::ShardIdOverflow {
            path: out.to_path_buf(),
            last: place.first_shard - 1,
            shards,
        });
    }
    let pb = progress_bar(write.progress, stats.documents);
    pb.set_message("writing documents");
    let fill = Fill { plan, place, meta, pb: &pb };
    let tokens = match (write.target, use_u16) {
        (Target::Stream, true) => {
            fill.run(StreamWriter::open(out, TokenFormat::<u16, u32>::new())?, visit)?
        }
        (Target::Stream, false) => {
            fill.run(StreamWriter::open(out, TokenFormat::<u32, u32>::new())?, visit)?
        }
        (Target::DocMeta, true) => {
            fill.run(StreamWithMetaWriter::open(out, DocumentTokensFormat::<u16, u32>::new())?, visit)?
        }
        (Target::DocMeta, false) => {
            fill.run(StreamWithMetaWriter::open(out, DocumentTokensFormat::<u32, u32>::new())?, visit)?
        }
    };
    pb.finish_and_clear();
    Ok(IngestReport {
        documents: stats.documents,
        tokens,
        input_bytes,
        dtype: if use_u16 { "u16" } else { "u32" },
        shards,
    })
}

/// One write pass: the shard plan, where it starts, the metadata to commit.
struct Fill<'a> {
    plan: ShardPlanner,
    place: Placement,
    meta: Value,
    pb: &'a ProgressBar,
}

impl Fill<'_> {
    /// Appends every document shard by shard (every shard is created, even one that receives
    /// no document), sets the metadata and commits; returns the tokens written.
    fn run(mut self, mut w: impl DocumentSink, visit: Visit<'_>) -> Result<u64, IngestError> {
        if let Value::Object(m) = std::mem::take(&mut self.meta) {
            for (k, v) in m {
                w.set_metadata(k, v);
            }
        }
        let mut shard = self.place.first_shard;
        w.put(shard, None)?;
        let (mut i, mut total) = (0u64, 0u64);
        visit(&mut |d: &Document| {
            if self.plan.starts_shard(i, d.tokens.len() as u64) {
                shard += 1;
                w.put(shard, None)?;
            }
            total += w.put(shard, Some((self.place.first_ordinal + i, d)))?;
            i += 1;
            self.pb.inc(1);
            Ok(())
        })?;
        let last = self.place.first_shard + self.plan.shards() - 1;
        while shard < last {
            shard += 1;
            w.put(shard, None)?;
        }
        w.commit()?;
        Ok(total)
    }
}

/// A progress bar of `total` units on stderr, hidden unless `enabled` (and hidden anyway when
/// stderr is not a terminal).
pub(crate) fn progress_bar(enabled: bool, total: u64) -> ProgressBar {
    let target = if enabled { ProgressDrawTarget::stderr() } else { ProgressDrawTarget::hidden() };
    let pb = ProgressBar::with_draw_target(Some(total), target);
    if let Ok(style) = ProgressStyle::with_template(
        "{spinner} {msg} [{bar:30}] {bytes}/{total_bytes} ({bytes_per_sec}, {eta})",
    ) {
        pb.set_style(style.progress_chars("=> "));
    }
    pb
}

/// Writes what a spill holds (see [`write_corpus`]).
pub(crate) fn write_spill(
    out: &Path,
    spill: Spill,
    input_bytes: u64,
    meta: Value,
    write: &WriteOptions,
) -> Result<IngestReport, IngestError> {
    let stats = spill.stats().clone();
    let mut spill = Some(spill);
    write_corpus(out, &stats, input_bytes, meta, write, &mut |f| match spill.take() {
        Some(s) => s.for_each(f),
        None => Ok(()),
    })
}

/// Index of the first document of each shard: contiguous runs balanced by token count (the
/// cut [`write_documents`] and the ingest functions make).
pub fn shard_starts(docs: &[Document], shards: u64) -> Vec<usize> {
    let total: u64 = docs.iter().map(|d| d.tokens.len() as u64).sum();
    let mut plan = ShardPlanner::new(shards, total);
    let mut starts = vec![0usize];
    for (i, d) in docs.iter().enumerate() {
        if plan.starts_shard(i as u64, d.tokens.len() as u64) {
            starts.push(i);
        }
    }
    starts.resize(plan.shards() as usize, docs.len());
    starts
}

/// Writes documents held in memory as a token storage (see [`ingest_text`](crate::ingest_text)). `meta` (a JSON
/// object) goes to the manifest's user metadata, with `documents` set to the storage's
/// document count.
///
/// An existing storage at `out` is refused unless `write.append`; appending requires the
/// same metadata values (tokenizer, split, end-of-text rule ...) and the same kind, writes new
/// shards after the last existing one, continues document ordinals, and keeps the existing
/// element type (`auto` picks it).
///
/// # Errors
/// [`IngestError::Exists`], [`IngestError::AppendMismatch`],
/// [`IngestError::TokenTooLarge`], [`IngestError::ZeroShards`],
/// [`IngestError::ShardIdOverflow`], [`IngestError::DocumentCountOverflow`], storage errors.
pub fn write_documents(
    out: &Path,
    docs: &[Document],
    input_bytes: u64,
    meta: Value,
    write: &WriteOptions,
) -> Result<IngestReport, IngestError> {
    let stats = CorpusStats::of(docs);
    write_corpus(out, &stats, input_bytes, meta, write, &mut |f| docs.iter().try_for_each(f))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_are_contiguous_and_balanced() {
        let docs: Vec<Document> =
            (0..10).map(|i| Document { source: i.to_string(), tokens: vec![0; 10] }).collect();
        assert_eq!(shard_starts(&docs, 1), vec![0]);
        assert_eq!(shard_starts(&docs, 2), vec![0, 5]);
        assert_eq!(shard_starts(&docs, 3), vec![0, 4, 7]);
        assert_eq!(shard_starts(&docs[..1], 3), vec![0, 1, 1]);
        assert_eq!(shard_starts(&[], 2), vec![0, 0]);
    }
}
