//! Sequential sources over the files `ingest` reads: JSON Lines and plain text, read in
//! order by a [`SequentialLoader`](guideloom_loader::sequential::SequentialLoader) without building a
//! storage first, and tokenized on the fly.
//!
//! They live here, not in `guideloom-loader`, because they parse with the code `ingest`
//! uses (the JSON Lines field rule of [`ingest_jsonl`](crate::ingest_jsonl), the document
//! split of [`split_text`](crate::split_text)) and tokenize with its embedded vocabularies
//! (`tiktoken-rs`), which the loader crate does not depend on. A shard is a file; a record is
//! a document as `Vec<u32>` token ids; a position is the byte offset of the next document's
//! first line. Documents are read and tokenized ahead in chunks of about
//! [`READ_AHEAD_BYTES`], in parallel (rayon), on the loader's reading thread.
//!
//! Both sources are one generic, [`FileShards`] (and its reader [`FileReader`]), over how a
//! file is cut into documents: [`JsonlCutter`] or [`TextCutter`]; [`JsonlShards`],
//! [`TextShards`], [`JsonlReader`] and [`TextReader`] name them.
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

use crate::input::read_line_bounded;
use crate::jsonl::jsonl_tokens;
use crate::spill::Spill;
use crate::write::write_spill;
use crate::{
    Document, IngestError, IngestReport, JsonlField, Split, Tokenizer, Vocabulary, WriteOptions,
    MAX_DOCUMENT_BYTES,
};

use sealed::{Cursor, Cut};

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
/// Lines longer than [`MAX_DOCUMENT_BYTES`] are an error (line number 0: the reader
/// resumes at byte offsets, not line numbers).
fn read_line(r: &mut BufReader<File>, buf: &mut Vec<u8>, path: &Path) -> Result<Option<u64>, IngestError> {
    let n = read_line_bounded(r, buf, path, 0, MAX_DOCUMENT_BYTES)?;
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
        return Err(IngestError::PositionPastEnd { path: path.to_path_buf(), offset, len });
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

/// How a [`FileShards`] cuts its files into documents and tokenizes them: [`JsonlCutter`]
/// (JSON Lines) or [`TextCutter`] (plain text). Sealed: this crate implements it.
pub trait Cutter: Cut + Clone + std::fmt::Debug + Send + Sync + 'static {}

mod sealed {
    use super::*;

    /// One file being read: its path, the reader at `at`, and whether the file is done.
    #[derive(Debug)]
    pub struct Cursor {
        pub(super) path: PathBuf,
        pub(super) file: BufReader<File>,
        /// The position of the next unread line (its record: the documents before it).
        pub(super) at: ShardPos,
        pub(super) done: bool,
    }

    impl Cursor {
        /// `path` opened at `at`.
        pub(super) fn open(path: &Path, at: ShardPos) -> Result<Cursor, IngestError> {
            Ok(Cursor { path: path.to_path_buf(), file: open_at(path, at.offset)?, at, done: false })
        }
    }

    /// What a [`Cutter`](super::Cutter) does.
    pub trait Cut {
        /// The next document of the file: its position and text; `None` at the end; an error
        /// with the position it is reported at (an error ends the file: its size does not
        /// matter).
        #[allow(clippy::result_large_err)]
        fn next_doc(&self, c: &mut Cursor) -> Result<Option<(ShardPos, String)>, (ShardPos, IngestError)>;
        /// The token ids of the document at `pos` of `path`.
        fn tokens(&self, path: &Path, pos: ShardPos, text: &str) -> Result<Vec<u32>, IngestError>;
        /// The documents of the file (one pass, without tokenizing).
        fn count(&self, c: Cursor) -> Result<u64, IngestError>;
    }
}

/// Files as a [`SequentialSource`]: shard `i` is file `i`, its records the documents `C`
/// cuts and tokenizes ([`JsonlShards`], [`TextShards`]).
#[derive(Debug, Clone)]
pub struct FileShards<C> {
    files: Arc<Vec<PathBuf>>,
    cutter: C,
    hints: Option<Vec<u64>>,
    fingerprint: u64,
}

/// The reader of one file of a [`FileShards`] ([`JsonlReader`], [`TextReader`]).
#[derive(Debug)]
pub struct FileReader<C> {
    shard: u64,
    cursor: Cursor,
    cutter: C,
    ahead: Ahead,
}

/// JSON Lines files as a [`SequentialSource`]: shard `i` is file `i`; each non-empty line is
/// one record, its token ids taken from a field (a list of ids) or tokenized from a text field
/// (as [`ingest_jsonl`](super::ingest_jsonl) does: same field rule, same vocabulary, so the
/// records are the documents `ingest jsonl` writes). Blank lines are skipped and not counted.
///
/// ```
/// use guideloom_ingest::{JsonlField, JsonlShards};
/// use guideloom_loader::sequential::{SequentialLoader, SequentialSource};
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
pub type JsonlShards = FileShards<JsonlCutter>;

/// The reader of one file of a [`JsonlShards`].
pub type JsonlReader = FileReader<JsonlCutter>;

/// Plain UTF-8 text files as a [`SequentialSource`]: shard `i` is file `i`; records are its
/// documents as [`split_text`](super::split_text) cuts them (the whole file, blank-line
/// separated blocks, or non-blank lines), tokenized with `encode_ordinary` and optionally
/// followed by the end-of-text id: the documents `ingest text` writes with the same options.
pub type TextShards = FileShards<TextCutter>;

/// The reader of one file of a [`TextShards`].
pub type TextReader = FileReader<TextCutter>;

impl<C: Cutter> FileShards<C> {
    /// `files` read with `cutter`; `options` (the cutter's settings as text) and the files'
    /// lengths make the fingerprint.
    fn new(files: Vec<PathBuf>, cutter: C, options: &str) -> Result<Self, IngestError> {
        if files.is_empty() {
            return Err(IngestError::NoInput(files));
        }
        let fingerprint = corpus_fingerprint(options, &files)?;
        Ok(FileShards { files: Arc::new(files), cutter, hints: None, fingerprint })
    }

    /// Counts each file's records (documents; one pass, without tokenizing, and for JSON Lines
    /// without parsing: its non-empty lines) and gives them as length hints: shards are then
    /// dealt by length and every rank can take the same number of steps
    /// ([`SequentialEnd::Drop`](guideloom_loader::sequential::SequentialEnd)).
    ///
    /// # Errors
    /// [`IngestError::Read`] when a file cannot be read; for text, [`IngestError::NotUtf8`].
    pub fn count_lengths(mut self) -> Result<Self, IngestError> {
        let mut hints = Vec::with_capacity(self.files.len());
        for path in self.files.iter() {
            hints.push(self.cutter.count(Cursor::open(path, ShardPos::START)?)?);
        }
        self.hints = Some(hints);
        Ok(self)
    }

    /// The files.
    pub fn files(&self) -> &[PathBuf] {
        &self.files
    }
}

impl<C: Cutter> FileReader<C> {
    /// Reads and tokenizes the next chunk of documents (an unreadable document ends the chunk
    /// with its error).
    fn fill(&mut self) {
        let mut pending: Vec<(ShardPos, String)> = Vec::new();
        let mut failed = None;
        let mut bytes = 0usize;
        while bytes < READ_AHEAD_BYTES {
            match self.cutter.next_doc(&mut self.cursor) {
                Ok(Some((pos, text))) => {
                    bytes += text.len();
                    pending.push((pos, text));
                }
                Ok(None) => break,
                Err((pos, e)) => {
                    failed = Some((pos, shard_error(self.shard, pos.record)(e)));
                    break;
                }
            }
        }
        let (cutter, path) = (&self.cutter, &self.cursor.path);
        let tokens: Vec<Result<Vec<u32>, IngestError>> =
            pending.par_iter().map(|(pos, text)| cutter.tokens(path, *pos, text)).collect();
        for ((pos, _), tokens) in pending.into_iter().zip(tokens) {
            self.ahead.docs.push_back((pos, tokens.map_err(shard_error(self.shard, pos.record))));
        }
        if let Some((pos, e)) = failed {
            self.ahead.docs.push_back((pos, Err(e)));
        }
        self.ahead.end = self.cursor.at;
    }
}

impl<C: Cutter> ShardReader for FileReader<C> {
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

impl<C: Cutter> SequentialSource for FileShards<C> {
    type Item = Vec<u32>;
    type Reader = FileReader<C>;
    fn shards(&self) -> Vec<ShardInfo> {
        (0..self.files.len())
            .map(|i| ShardInfo { len_hint: self.hints.as_ref().and_then(|h| h.get(i).copied()) })
            .collect()
    }
    fn open(&self, shard: u64, at: ShardPos) -> Result<FileReader<C>, LoaderError> {
        let path = usize::try_from(shard)
            .ok()
            .and_then(|i| self.files.get(i))
            .ok_or(LoaderError::IndexOutOfRange { index: shard, len: self.files.len() as u64 })?;
        let cursor = Cursor::open(path, at).map_err(shard_error(shard, at.record))?;
        Ok(FileReader {
            shard,
            cursor,
            cutter: self.cutter.clone(),
            ahead: Ahead { docs: VecDeque::new(), end: at },
        })
    }
    fn fingerprint(&self) -> u64 {
        self.fingerprint
    }
}

/// The JSON Lines rule of a [`JsonlShards`]: each non-empty line one document, its ids taken
/// from a field or tokenized from a text field ([`JsonlField`]).
#[derive(Debug, Clone)]
pub struct JsonlCutter {
    field: JsonlField,
    vocab: Option<Arc<Vocabulary>>,
}

impl Cutter for JsonlCutter {}

impl Cut for JsonlCutter {
    fn next_doc(&self, c: &mut Cursor) -> Result<Option<(ShardPos, String)>, (ShardPos, IngestError)> {
        let mut buf = Vec::new();
        loop {
            let start = c.at;
            let Some(n) = read_line(&mut c.file, &mut buf, &c.path).map_err(|e| (start, e))? else {
                return Ok(None);
            };
            c.at.offset += n;
            if buf.trim_ascii().is_empty() {
                continue;
            }
            return match line_text(&buf) {
                Ok(text) => {
                    c.at.record += 1;
                    Ok(Some((start, text.to_string())))
                }
                Err(i) => Err((
                    start,
                    IngestError::NotUtf8 { path: c.path.clone(), offset: start.offset + i as u64 },
                )),
            };
        }
    }

    fn tokens(&self, path: &Path, pos: ShardPos, text: &str) -> Result<Vec<u32>, IngestError> {
        jsonl_tokens(text, &self.field, self.vocab.as_deref()).map_err(|reason| IngestError::BadJsonlRecord {
            path: path.to_path_buf(),
            offset: pos.offset,
            reason,
        })
    }

    fn count(&self, mut c: Cursor) -> Result<u64, IngestError> {
        let mut buf = Vec::new();
        let mut n = 0u64;
        while read_line(&mut c.file, &mut buf, &c.path)?.is_some() {
            n += u64::from(!buf.trim_ascii().is_empty());
        }
        Ok(n)
    }
}

impl JsonlShards {
    /// The files, in this order, read with `field` (a text field loads its tokenizer's
    /// embedded vocabulary).
    ///
    /// # Errors
    /// [`IngestError::Read`] when a file cannot be read; [`IngestError::NoInput`] for no file;
    /// [`IngestError::Tokenizer`] when the vocabulary fails to load.
    pub fn open(files: Vec<PathBuf>, field: JsonlField) -> Result<Self, IngestError> {
        let (options, vocab) = match &field {
            JsonlField::Tokens(f) => (format!("jsonl tokens {f}"), None),
            JsonlField::Text(f, t) => (format!("jsonl text {f} {}", t.name()), Some(Arc::new(t.load()?))),
        };
        FileShards::new(files, JsonlCutter { field, vocab }, &options)
    }
}

/// The text rule of a [`TextShards`]: documents as [`split_text`](crate::split_text) cuts
/// them, tokenized with `encode_ordinary`, each followed by the end-of-text id when asked.
#[derive(Debug, Clone)]
pub struct TextCutter {
    split: Split,
    vocab: Arc<Vocabulary>,
    eos: Option<u32>,
}

impl Cutter for TextCutter {}

impl Cut for TextCutter {
    fn next_doc(&self, c: &mut Cursor) -> Result<Option<(ShardPos, String)>, (ShardPos, IngestError)> {
        let at = c.at;
        text_next_doc(self.split, c).map_err(|e| (at, e))
    }

    fn tokens(&self, _path: &Path, _pos: ShardPos, text: &str) -> Result<Vec<u32>, IngestError> {
        let mut t = self.vocab.encode_ordinary(text);
        t.extend(self.eos);
        Ok(t)
    }

    fn count(&self, mut c: Cursor) -> Result<u64, IngestError> {
        let mut n = 0u64;
        while text_next_doc(self.split, &mut c)?.is_some() {
            n += 1;
        }
        Ok(n)
    }
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
        let options = format!("text {} {} {eos}", split.name(), tokenizer.name());
        let cutter =
            TextCutter { split, vocab: Arc::new(tokenizer.load()?), eos: eos.then(|| tokenizer.eos_id()) };
        FileShards::new(files, cutter, &options)
    }
}

/// The next document of a text file cut by `split`, from the cursor on, as
/// [`split_text`](crate::split_text) cuts them: its position and text.
fn text_next_doc(split: Split, c: &mut Cursor) -> Result<Option<(ShardPos, String)>, IngestError> {
    if c.done {
        return Ok(None);
    }
    let mut buf = Vec::new();
    if split == Split::File {
        let start = c.at;
        let read = |source| IngestError::Read { path: c.path.clone(), source };
        std::io::Read::read_to_end(&mut c.file, &mut buf).map_err(read)?;
        c.done = true;
        if start.record > 0 {
            return Ok(None);
        }
        let text = String::from_utf8(buf).map_err(|e| IngestError::NotUtf8 {
            path: c.path.clone(),
            offset: start.offset + e.utf8_error().valid_up_to() as u64,
        })?;
        c.at = ShardPos { record: 1, offset: start.offset + text.len() as u64 };
        return Ok(Some((start, text)));
    }
    let mut block: Option<(ShardPos, String)> = None;
    loop {
        let line_at = c.at.offset;
        let Some(n) = read_line(&mut c.file, &mut buf, &c.path)? else {
            c.done = true;
            break;
        };
        let text = line_text(&buf)
            .map_err(|i| IngestError::NotUtf8 { path: c.path.clone(), offset: line_at + i as u64 })?;
        let blank = text.trim().is_empty();
        match (split, blank, &mut block) {
            (_, true, None) => c.at.offset += n,
            // A blank line ends the block (and belongs to no document).
            (_, true, Some(_)) => {
                c.at.offset += n;
                break;
            }
            (Split::Line, false, _) => {
                c.at.offset += n;
                block = Some((ShardPos { record: c.at.record, offset: line_at }, text.to_string()));
                break;
            }
            (_, false, None) => {
                c.at.offset += n;
                block = Some((ShardPos { record: c.at.record, offset: line_at }, text.to_string()));
            }
            (_, false, Some((_, b))) => {
                c.at.offset += n;
                b.push('\n');
                b.push_str(text);
            }
        }
    }
    if block.is_some() {
        c.at.record += 1;
    }
    Ok(block)
}

/// Writes every record of `source` (shards in order, records in order: documents of token
/// ids) to a token storage in `out`, as the ingest functions do (bounded memory through the
/// spill file, `write` choosing shards, element type, kind and append); `meta` (a JSON
/// object) goes to the manifest's user metadata. Documents are named `file:record` in
/// reports when `names` gives the shard's file, `shard S record K` otherwise.
///
/// This is the reverse path of the sequential sources: the storage it writes from
/// [`JsonlShards`] equals the one [`ingest_jsonl`](crate::ingest_jsonl) writes from the same
/// files with the same field, so the indexed loader over it reads the tokens the sequential
/// loader reads.
///
/// # Errors
/// The source's read errors ([`IngestError::Sequential`]), and those of
/// [`write_documents`](crate::write_documents).
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
    write_spill(out, spill, input_bytes, meta, write)
}
