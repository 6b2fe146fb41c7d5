//! Sequential sources over the files `ingest` reads: JSON Lines and plain text, read in
//! order by a [`SequentialLoader`](guideloom_loader::sequential::SequentialLoader) without building a
//! storage first, and tokenized on the fly.
//!
//! They live here, not in `guideloom-loader`, because they parse with the code `ingest`
//! uses (the JSON Lines field rule of [`ingest_jsonl`](super::ingest_jsonl), the document
//! split of [`split_text`](super::split_text)) and tokenize with its embedded vocabularies
//! (`tiktoken-rs`), which the loader crate does not depend on. A shard is a file; a record is
//! a document as `Vec<u32>` token ids; a position is the byte offset of the next document's
//! first line. Documents are read and tokenized ahead in chunks of about
//! [`READ_AHEAD_BYTES`], in parallel (rayon), on the loader's reading thread.
//!
//! The reverse path, [`ingest_sequential`], writes any such source to an indexed storage.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufReader, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use guideloom_loader::sequential::{SequentialSource, ShardInfo, ShardPos, ShardReader};
use guideloom_loader::LoaderError;
use rayon::prelude::*;
use serde_json::Value;

use super::spill::Spill;
use super::{
    jsonl_tokens, Document, IngestError, IngestReport, JsonlField, Split, Tokenizer, Vocabulary, WriteOptions,
};

/// Bytes of documents a shard reader reads and tokenizes ahead (at least one document).
pub const READ_AHEAD_BYTES: usize = 1 << 20;

/// A fingerprint of a corpus: the kind, the options and each file's byte length, in order.
fn corpus_fingerprint(options: &str, files: &[PathBuf]) -> Result<u64, IngestError> {
    let mut bytes = options.as_bytes().to_vec();
    for f in files {
        let len = std::fs::metadata(f).map_err(|source| IngestError::Read { path: f.clone(), source })?.len();
        bytes.extend_from_slice(&len.to_le_bytes());
    }
    Ok(xxhash_rust::xxh3::xxh3_64(&bytes))
}

/// Wraps an ingest error of `shard` at `record` as the loader's error.
fn shard_error(shard: u64, record: u64) -> impl FnOnce(IngestError) -> LoaderError {
    move |e| LoaderError::shard(shard, record, e)
}

/// Reads line `buf` (with its terminator) at byte `offset` of `path`; `Ok(None)` at the end.
/// Lines longer than [`super::MAX_DOCUMENT_BYTES`] are an error (line number 0: the reader
/// resumes at byte offsets, not line numbers).
fn read_line(r: &mut BufReader<File>, buf: &mut Vec<u8>, path: &Path) -> Result<Option<u64>, IngestError> {
    let n = super::read_line_bounded(r, buf, path, 0, super::MAX_DOCUMENT_BYTES)?;
    Ok((n > 0).then_some(n as u64))
}

/// The line without its terminator (`\n` or `\r\n`), as `str::lines` cuts it; `Err(i)`: not
/// UTF-8 from byte `i` on.
fn line_text(buf: &[u8]) -> Result<&str, usize> {
    let mut line = buf;
    if let Some(l) = line.strip_suffix(b"\n") {
        line = l.strip_suffix(b"\r").unwrap_or(l);
    }
    std::str::from_utf8(line).map_err(|e| e.valid_up_to())
}

/// Opens `path` at byte `offset` (checked against its length).
fn open_at(path: &Path, offset: u64) -> Result<BufReader<File>, IngestError> {
    let read = |source| IngestError::Read { path: path.to_path_buf(), source };
    let mut file = File::open(path).map_err(read)?;
    let len = file.metadata().map_err(read)?.len();
    if offset > len {
        return Err(IngestError::InvalidArgument(format!(
            "{} holds {len} bytes; a position at byte {offset} is past its end",
            path.display()
        )));
    }
    file.seek(SeekFrom::Start(offset)).map_err(read)?;
    Ok(BufReader::with_capacity(1 << 16, file))
}

/// Documents read ahead, each with its position (or the error in its place, after which
/// nothing is read), then the position after the last.
#[derive(Debug, Default)]
struct Ahead {
    docs: VecDeque<(ShardPos, Result<Vec<u32>, LoaderError>)>,
    end: ShardPos,
}

impl Ahead {
    fn pos(&self) -> ShardPos {
        self.docs.front().map_or(self.end, |d| d.0)
    }

    /// The next document, or its error; `None` when nothing is buffered.
    fn pop(&mut self) -> Option<Result<Vec<u32>, LoaderError>> {
        self.docs.pop_front().map(|d| d.1)
    }
}

/// JSON Lines files as a [`SequentialSource`]: shard `i` is file `i`; each non-empty line is
/// one record, its token ids taken from a field (a list of ids) or tokenized from a text field
/// (as [`ingest_jsonl`](super::ingest_jsonl) does: same field rule, same vocabulary, so the
/// records are the documents `ingest jsonl` writes). Blank lines are skipped and not counted.
///
/// ```
/// use guideloom::ingest::{JsonlField, JsonlShards};
/// use guideloom::loader::sequential::{SequentialLoader, SequentialSource};
/// let dir = tempfile::tempdir()?;
/// let (a, b) = (dir.path().join("a.jsonl"), dir.path().join("b.jsonl"));
/// std::fs::write(&a, "{\"ids\": [1, 2, 3]}\n\n{\"ids\": [4]}\n")?;
/// std::fs::write(&b, "{\"ids\": [5, 6]}\n")?;
/// let source = JsonlShards::open(vec![a, b], JsonlField::Tokens("ids".into()))?.count_lengths()?;
/// assert_eq!(source.shards().iter().map(|s| s.len_hint).collect::<Vec<_>>(), [Some(2), Some(1)]);
/// let loader = SequentialLoader::builder(source).cycle(2).batch_size(2).workers(0).build()?;
/// let batches: Vec<Vec<Vec<u32>>> = loader.iter().map(|b| b.map(|b| b.data)).collect::<Result<_, _>>()?;
/// assert_eq!(batches, [vec![vec![1, 2, 3], vec![5, 6]], vec![vec![4]]]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct JsonlShards {
    files: Arc<Vec<PathBuf>>,
    field: JsonlField,
    vocab: Option<Arc<Vocabulary>>,
    hints: Option<Vec<u64>>,
    fingerprint: u64,
}

impl JsonlShards {
    /// The files, in this order, read with `field` (a text field loads its tokenizer's
    /// embedded vocabulary).
    ///
    /// # Errors
    /// [`IngestError::Read`] when a file cannot be read; [`IngestError::NoInput`] for no file;
    /// [`IngestError::Tokenizer`] when the vocabulary fails to load.
    pub fn open(files: Vec<PathBuf>, field: JsonlField) -> Result<Self, IngestError> {
        if files.is_empty() {
            return Err(IngestError::NoInput(files));
        }
        let (options, vocab) = match &field {
            JsonlField::Tokens(f) => (format!("jsonl tokens {f}"), None),
            JsonlField::Text(f, t) => (format!("jsonl text {f} {}", t.name()), Some(Arc::new(t.load()?))),
        };
        let fingerprint = corpus_fingerprint(&options, &files)?;
        Ok(JsonlShards { files: Arc::new(files), field, vocab, hints: None, fingerprint })
    }

    /// Counts each file's records (non-empty lines; one pass, no parsing) and gives them as
    /// length hints: shards are then dealt by length and every rank can take the same number
    /// of steps ([`SequentialEnd::Drop`](guideloom_loader::sequential::SequentialEnd)).
    ///
    /// # Errors
    /// [`IngestError::Read`] when a file cannot be read.
    pub fn count_lengths(mut self) -> Result<Self, IngestError> {
        let mut hints = Vec::with_capacity(self.files.len());
        for path in self.files.iter() {
            let mut r = open_at(path, 0)?;
            let mut buf = Vec::new();
            let mut n = 0u64;
            while read_line(&mut r, &mut buf, path)?.is_some() {
                n += u64::from(!buf.trim_ascii().is_empty());
            }
            hints.push(n);
        }
        self.hints = Some(hints);
        Ok(self)
    }

    /// The files.
    pub fn files(&self) -> &[PathBuf] {
        &self.files
    }
}

/// The reader of one file of a [`JsonlShards`].
#[derive(Debug)]
pub struct JsonlReader {
    shard: u64,
    path: PathBuf,
    file: BufReader<File>,
    field: JsonlField,
    vocab: Option<Arc<Vocabulary>>,
    ahead: Ahead,
}

impl JsonlReader {
    /// Reads and tokenizes the next chunk of documents (an unreadable line ends the chunk
    /// with its error).
    fn fill(&mut self) {
        let mut pending: Vec<(ShardPos, String)> = Vec::new();
        let mut failed = None;
        let mut bytes = 0usize;
        let mut buf = Vec::new();
        let mut at = self.ahead.end;
        while bytes < READ_AHEAD_BYTES {
            let start = at;
            let n = match read_line(&mut self.file, &mut buf, &self.path) {
                Ok(Some(n)) => n,
                Ok(None) => break,
                Err(e) => {
                    failed = Some((start, shard_error(self.shard, start.record)(e)));
                    break;
                }
            };
            at.offset += n;
            if buf.trim_ascii().is_empty() {
                continue;
            }
            match line_text(&buf) {
                Ok(text) => {
                    bytes += text.len();
                    pending.push((start, text.to_string()));
                    at.record += 1;
                }
                Err(i) => {
                    let e = IngestError::NotUtf8 { path: self.path.clone(), offset: start.offset + i as u64 };
                    failed = Some((start, shard_error(self.shard, start.record)(e)));
                    break;
                }
            }
        }
        let vocab = self.vocab.as_deref();
        let parsed: Vec<Result<Vec<u32>, String>> =
            pending.par_iter().map(|(_, text)| jsonl_tokens(text, &self.field, vocab)).collect();
        for ((pos, _), tokens) in pending.into_iter().zip(parsed) {
            let tokens = tokens.map_err(|reason| {
                shard_error(self.shard, pos.record)(IngestError::BadJsonlRecord {
                    path: self.path.clone(),
                    offset: pos.offset,
                    reason,
                })
            });
            self.ahead.docs.push_back((pos, tokens));
        }
        if let Some((pos, e)) = failed {
            self.ahead.docs.push_back((pos, Err(e)));
        }
        self.ahead.end = at;
    }
}

impl ShardReader for JsonlReader {
    type Item = Vec<u32>;
    fn next_record(&mut self) -> Result<Option<Vec<u32>>, LoaderError> {
        if self.ahead.docs.is_empty() {
            self.fill();
        }
        self.ahead.pop().transpose()
    }
    fn pos(&self) -> ShardPos {
        self.ahead.pos()
    }
}

impl SequentialSource for JsonlShards {
    type Item = Vec<u32>;
    type Reader = JsonlReader;
    fn shards(&self) -> Vec<ShardInfo> {
        shard_infos(self.files.len(), self.hints.as_deref())
    }
    fn open(&self, shard: u64, at: ShardPos) -> Result<JsonlReader, LoaderError> {
        let path = shard_path(&self.files, shard)?;
        let file = open_at(path, at.offset).map_err(shard_error(shard, at.record))?;
        Ok(JsonlReader {
            shard,
            path: path.clone(),
            file,
            field: self.field.clone(),
            vocab: self.vocab.clone(),
            ahead: Ahead { docs: VecDeque::new(), end: at },
        })
    }
    fn fingerprint(&self) -> u64 {
        self.fingerprint
    }
}

/// Plain UTF-8 text files as a [`SequentialSource`]: shard `i` is file `i`; records are its
/// documents as [`split_text`](super::split_text) cuts them (the whole file, blank-line
/// separated blocks, or non-blank lines), tokenized with `encode_ordinary` and optionally
/// followed by the end-of-text id: the documents `ingest text` writes with the same options.
#[derive(Debug, Clone)]
pub struct TextShards {
    files: Arc<Vec<PathBuf>>,
    split: Split,
    vocab: Arc<Vocabulary>,
    eos: Option<u32>,
    hints: Option<Vec<u64>>,
    fingerprint: u64,
}

impl TextShards {
    /// The files, in this order, cut by `split` and tokenized with `tokenizer`, each document
    /// followed by the end-of-text id when `eos`.
    ///
    /// # Errors
    /// [`IngestError::Read`], [`IngestError::NoInput`], [`IngestError::Tokenizer`].
    pub fn open(
        files: Vec<PathBuf>,
        split: Split,
        tokenizer: Tokenizer,
        eos: bool,
    ) -> Result<Self, IngestError> {
        if files.is_empty() {
            return Err(IngestError::NoInput(files));
        }
        let options = format!("text {} {} {eos}", split.name(), tokenizer.name());
        let fingerprint = corpus_fingerprint(&options, &files)?;
        Ok(TextShards {
            files: Arc::new(files),
            split,
            vocab: Arc::new(tokenizer.load()?),
            eos: eos.then(|| tokenizer.eos_id()),
            hints: None,
            fingerprint,
        })
    }

    /// Counts each file's documents (one pass, no tokenization) and gives them as length
    /// hints (see [`JsonlShards::count_lengths`]).
    ///
    /// # Errors
    /// [`IngestError::Read`], [`IngestError::NotUtf8`].
    pub fn count_lengths(mut self) -> Result<Self, IngestError> {
        let mut hints = Vec::with_capacity(self.files.len());
        for path in self.files.iter() {
            let mut r = TextCutter::new(open_at(path, 0)?, path, self.split, ShardPos::START);
            let mut n = 0u64;
            while r.next_doc()?.is_some() {
                n += 1;
            }
            hints.push(n);
        }
        self.hints = Some(hints);
        Ok(self)
    }
}

/// Cuts a text file into documents from a position on, as [`split_text`](super::split_text).
#[derive(Debug)]
struct TextCutter {
    file: BufReader<File>,
    path: PathBuf,
    split: Split,
    /// Position of the next unread line (its record: documents before it).
    at: ShardPos,
    done: bool,
}

impl TextCutter {
    fn new(file: BufReader<File>, path: &Path, split: Split, at: ShardPos) -> Self {
        TextCutter { file, path: path.to_path_buf(), split, at, done: false }
    }

    /// The next document: its position and text.
    fn next_doc(&mut self) -> Result<Option<(ShardPos, String)>, IngestError> {
        if self.done {
            return Ok(None);
        }
        let mut buf = Vec::new();
        if self.split == Split::File {
            let start = self.at;
            let read = |source| IngestError::Read { path: self.path.clone(), source };
            std::io::Read::read_to_end(&mut self.file, &mut buf).map_err(read)?;
            self.done = true;
            if start.record > 0 {
                return Ok(None);
            }
            let text = String::from_utf8(buf).map_err(|e| IngestError::NotUtf8 {
                path: self.path.clone(),
                offset: start.offset + e.utf8_error().valid_up_to() as u64,
            })?;
            self.at = ShardPos { record: 1, offset: start.offset + text.len() as u64 };
            return Ok(Some((start, text)));
        }
        let mut block: Option<(ShardPos, String)> = None;
        loop {
            let line_at = self.at.offset;
            let Some(n) = read_line(&mut self.file, &mut buf, &self.path)? else {
                self.done = true;
                break;
            };
            let text = line_text(&buf)
                .map_err(|i| IngestError::NotUtf8 { path: self.path.clone(), offset: line_at + i as u64 })?;
            let blank = text.trim().is_empty();
            match (self.split, blank, &mut block) {
                (_, true, None) => self.at.offset += n,
                // A blank line ends the block (and belongs to no document).
                (_, true, Some(_)) => {
                    self.at.offset += n;
                    break;
                }
                (Split::Line, false, _) => {
                    self.at.offset += n;
                    block = Some((ShardPos { record: self.at.record, offset: line_at }, text.to_string()));
                    break;
                }
                (_, false, None) => {
                    self.at.offset += n;
                    block = Some((ShardPos { record: self.at.record, offset: line_at }, text.to_string()));
                }
                (_, false, Some((_, b))) => {
                    self.at.offset += n;
                    b.push('\n');
                    b.push_str(text);
                }
            }
        }
        if block.is_some() {
            self.at.record += 1;
        }
        Ok(block)
    }
}

/// The reader of one file of a [`TextShards`].
#[derive(Debug)]
pub struct TextReader {
    shard: u64,
    cutter: TextCutter,
    vocab: Arc<Vocabulary>,
    eos: Option<u32>,
    ahead: Ahead,
}

impl TextReader {
    /// Cuts and tokenizes the next chunk of documents (an unreadable document ends the chunk
    /// with its error).
    fn fill(&mut self) {
        let mut pending: Vec<(ShardPos, String)> = Vec::new();
        let mut failed = None;
        let mut bytes = 0usize;
        while bytes < READ_AHEAD_BYTES {
            let at = self.cutter.at;
            match self.cutter.next_doc() {
                Ok(Some((pos, text))) => {
                    bytes += text.len();
                    pending.push((pos, text));
                }
                Ok(None) => break,
                Err(e) => {
                    failed = Some((at, shard_error(self.shard, at.record)(e)));
                    break;
                }
            }
        }
        let (vocab, eos) = (&self.vocab, self.eos);
        let tokens: Vec<Vec<u32>> = pending
            .par_iter()
            .map(|(_, text)| {
                let mut t = vocab.encode_ordinary(text);
                t.extend(eos);
                t
            })
            .collect();
        self.ahead.docs.extend(pending.into_iter().map(|(pos, _)| pos).zip(tokens.into_iter().map(Ok)));
        if let Some((pos, e)) = failed {
            self.ahead.docs.push_back((pos, Err(e)));
        }
        self.ahead.end = self.cutter.at;
    }
}

impl ShardReader for TextReader {
    type Item = Vec<u32>;
    fn next_record(&mut self) -> Result<Option<Vec<u32>>, LoaderError> {
        if self.ahead.docs.is_empty() {
            self.fill();
        }
        self.ahead.pop().transpose()
    }
    fn pos(&self) -> ShardPos {
        self.ahead.pos()
    }
}

impl SequentialSource for TextShards {
    type Item = Vec<u32>;
    type Reader = TextReader;
    fn shards(&self) -> Vec<ShardInfo> {
        shard_infos(self.files.len(), self.hints.as_deref())
    }
    fn open(&self, shard: u64, at: ShardPos) -> Result<TextReader, LoaderError> {
        let path = shard_path(&self.files, shard)?;
        let file = open_at(path, at.offset).map_err(shard_error(shard, at.record))?;
        Ok(TextReader {
            shard,
            cutter: TextCutter::new(file, path, self.split, at),
            vocab: Arc::clone(&self.vocab),
            eos: self.eos,
            ahead: Ahead { docs: VecDeque::new(), end: at },
        })
    }
    fn fingerprint(&self) -> u64 {
        self.fingerprint
    }
}

/// Writes every record of `source` (shards in order, records in order: documents of token
/// ids) to a token storage in `out`, as the ingest functions do (bounded memory through the
/// spill file, `write` choosing shards, element type, kind and append); `meta` (a JSON
/// object) goes to the manifest's user metadata. Documents are named `file:record` in
/// reports when `names` gives the shard's file, `shard S record K` otherwise.
///
/// This is the reverse path of the sequential sources: the storage it writes from
/// [`JsonlShards`] equals the one [`ingest_jsonl`](super::ingest_jsonl) writes from the same
/// files with the same field, so the indexed loader over it reads the tokens the sequential
/// loader reads.
///
/// # Errors
/// The source's read errors ([`IngestError::Sequential`]), and those of
/// [`write_documents`](super::write_documents).
pub fn ingest_sequential<S>(
    out: &Path,
    source: &S,
    names: Option<&[PathBuf]>,
    meta: Value,
    write: &WriteOptions,
) -> Result<IngestReport, IngestError>
where
    S: SequentialSource<Item = Vec<u32>>,
{
    let mut spill = Spill::new(out)?;
    let mut input_bytes = 0u64;
    let reading = IngestError::Sequential;
    for shard in 0..source.shards().len() as u64 {
        let mut r = source.open(shard, ShardPos::START).map_err(reading)?;
        let mut k = 0u64;
        while let Some(tokens) = r.next_record().map_err(reading)? {
            let name = match names.and_then(|n| n.get(shard as usize)) {
                Some(p) => format!("{}:{k}", p.display()),
                None => format!("shard {shard} record {k}"),
            };
            spill.push(&Document { source: name, tokens })?;
            k += 1;
        }
        input_bytes += r.pos().offset;
    }
    let stats = spill.stats().clone();
    let mut spill = Some(spill);
    super::write::write_corpus(out, &stats, input_bytes, meta, write, &mut |f| match spill.take() {
        Some(s) => s.for_each(f),
        None => Ok(()),
    })
}

/// The shards of a source of `files` files, with their length hints when counted.
fn shard_infos(files: usize, hints: Option<&[u64]>) -> Vec<ShardInfo> {
    (0..files).map(|i| ShardInfo { len_hint: hints.and_then(|h| h.get(i).copied()) }).collect()
}

/// The file of shard `shard`.
fn shard_path(files: &[PathBuf], shard: u64) -> Result<&PathBuf, LoaderError> {
    usize::try_from(shard)
        .ok()
        .and_then(|i| files.get(i))
        .ok_or(LoaderError::IndexOutOfRange { index: shard, len: files.len() as u64 })
}
