//! `batches --sequential` and `bench --sequential`: JSON Lines or text files read in order by
//! the sequential loader (each file a shard, documents tokenized as they are read and packed
//! into windows of `--seq-len` tokens), with exact and elastic resume.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use guideloom::ingest::{collect_files, JsonlField, JsonlReader, JsonlShards, TextReader, TextShards};
use guideloom::loader::sequential::{
    Dropped, SequentialBatch, SequentialIter, SequentialLoader, SequentialSource, SequentialState, ShardInfo,
    ShardPos, ShardReader,
};
use guideloom::loader::{LoaderError, VecCollate};

use crate::cli::{BatchesArgs, ElasticArgs, SequentialArgs, WindowArgs};
use crate::cmd::windows::write_list;
use crate::CliResult;

/// The files of `--jsonl` or `--text`.
#[derive(Debug)]
pub(crate) enum Files {
    /// JSON Lines.
    Jsonl(JsonlShards),
    /// Plain text.
    Text(TextShards),
}

/// The reader of one file of [`Files`].
#[derive(Debug)]
pub(crate) enum FileReader {
    /// A JSON Lines file.
    Jsonl(JsonlReader),
    /// A text file.
    Text(TextReader),
}

impl ShardReader for FileReader {
    type Item = Vec<u32>;
    fn next_record(&mut self) -> Result<Option<Vec<u32>>, LoaderError> {
        match self {
            FileReader::Jsonl(r) => r.next_record(),
            FileReader::Text(r) => r.next_record(),
        }
    }
    fn pos(&self) -> ShardPos {
        match self {
            FileReader::Jsonl(r) => r.pos(),
            FileReader::Text(r) => r.pos(),
        }
    }
}

impl SequentialSource for Files {
    type Item = Vec<u32>;
    type Reader = FileReader;
    fn shards(&self) -> Vec<ShardInfo> {
        match self {
            Files::Jsonl(s) => s.shards(),
            Files::Text(s) => s.shards(),
        }
    }
    fn open(&self, shard: u64, at: ShardPos) -> Result<FileReader, LoaderError> {
        Ok(match self {
            Files::Jsonl(s) => FileReader::Jsonl(s.open(shard, at)?),
            Files::Text(s) => FileReader::Text(s.open(shard, at)?),
        })
    }
    fn fingerprint(&self) -> u64 {
        match self {
            Files::Jsonl(s) => s.fingerprint(),
            Files::Text(s) => s.fingerprint(),
        }
    }
}

/// The loader over [`Files`]: packed windows of `u32` ids, collated as a `Vec` of them.
pub(crate) type FilesLoader = SequentialLoader<Files>;
/// Its iterator.
pub(crate) type FilesIter = SequentialIter<Files, Vec<u32>, VecCollate>;

/// A sequential command's configuration.
#[derive(Debug)]
pub(crate) struct Sequential<'a> {
    /// Windows, batch size, shuffle, seed, workers.
    pub(crate) window: &'a WindowArgs,
    /// The files and how to read them.
    pub(crate) seq: &'a SequentialArgs,
    /// Epochs; `None`: unbounded.
    pub(crate) epochs: Option<u64>,
    /// This process's data-parallel rank.
    pub(crate) rank: u64,
    /// Number of data-parallel ranks.
    pub(crate) world_size: u64,
}

impl Sequential<'_> {
    /// Refuses the storage options that do not apply to files read in order.
    pub(crate) fn refuse_storage_options(&self, elastic: &ElasticArgs, drop_remainder: bool) -> CliResult {
        let w = self.window;
        let refused = [
            (w.dir != Path::new("-"), "a storage directory"),
            (w.stride.is_some(), "--stride (packed windows follow each other)"),
            (drop_remainder, "--drop-remainder (each rank reads its files to the end)"),
            (elastic.global_batch.is_some(), "--global-batch (use --batch-size per rank)"),
            (elastic.round_down, "--round-down (use --resume-ranks)"),
        ];
        match refused.iter().find(|(given, _)| *given) {
            Some((_, what)) => Err(format!("{what} does not apply to --sequential").into()),
            None => Ok(()),
        }
    }

    /// The files of `--jsonl` (as given) or `--text` (directories walked, paths sorted).
    fn files(&self) -> CliResult<Files> {
        let s = self.seq;
        for p in s.jsonl.iter().chain(&s.text) {
            crate::cmd::location::local_only(
                p,
                "a --sequential input",
                "download the files first, or ingest them into a storage (`ingest --out URL`) and read that",
            )?;
        }
        if !s.jsonl.is_empty() {
            let field = match (&s.tokens_field, &s.text_field) {
                (Some(f), None) => JsonlField::Tokens(f.clone()),
                (None, Some(f)) => JsonlField::Text(f.clone(), s.tokenizer.into()),
                _ => return Err("--jsonl needs --tokens-field or --text-field".into()),
            };
            let shards = JsonlShards::open(s.jsonl.clone(), field)?;
            return Ok(Files::Jsonl(if s.count_lengths { shards.count_lengths()? } else { shards }));
        }
        let files = collect_files(&s.text)?;
        let shards = TextShards::open(files, s.split.into(), s.tokenizer.into(), s.eos)?;
        Ok(Files::Text(if s.count_lengths { shards.count_lengths()? } else { shards }))
    }

    /// The loader: files dealt to ranks, `--cycle` open at once, windows of `--seq-len`.
    pub(crate) fn loader(&self) -> CliResult<FilesLoader> {
        let w = self.window;
        let mut b = SequentialLoader::builder(self.files()?)
            .pack(w.seq_len)
            .batch_size(w.batch_size)
            .seed(w.seed)
            .cycle(self.seq.cycle)
            .window_shuffle(self.seq.window_shuffle)
            .shard(self.rank, self.world_size)
            .workers(w.workers);
        b = match self.epochs {
            Some(e) => b.epochs(e),
            None => b.unbounded(),
        };
        if w.shuffle {
            b = b.shuffle(w.seed);
        }
        if let Some(p) = w.prefetch {
            b = b.prefetch(p);
        }
        Ok(b.build()?)
    }

    /// The iterator: from the start, from this rank's state (`resume`), or from the states of
    /// all ranks of an earlier run (`--resume-ranks`, elastic).
    pub(crate) fn start(&self, loader: &FilesLoader, resume: Option<&Path>) -> CliResult<FilesIter> {
        if !self.seq.resume_ranks.is_empty() {
            let states =
                self.seq.resume_ranks.iter().map(|p| read_state(p)).collect::<CliResult<Vec<_>>>()?;
            return Ok(loader.iter_from_ranks(&states)?);
        }
        match resume {
            Some(p) => Ok(loader.iter_from(&read_state(p)?)?),
            None => Ok(loader.iter()),
        }
    }
}

/// Reads a sequential state file written by `--save-state`.
fn read_state(p: &Path) -> CliResult<SequentialState> {
    let text = super::state_file::read(p)?;
    SequentialState::from_json(&text)
        .map_err(|e| format!("state file {}: {e} (is it a --sequential state?)", p.display()).into())
}

/// A report of records not delivered, as one JSON object.
fn dropped_json(d: &Dropped) -> String {
    match d {
        Dropped::Records { epoch, shard, start, end } => {
            format!(r#"{{"epoch":{epoch},"shard":{shard},"records":[{start},{end}]}}"#)
        }
        Dropped::Tokens { epoch, record } => format!(
            r#"{{"epoch":{epoch},"shard":{},"record":{},"from_token":{}}}"#,
            record.shard, record.record, record.offset
        ),
        Dropped::Rest { epoch, from } => format!(
            r#"{{"epoch":{epoch},"shard":{},"from_record":{},"window_cursor":{},"from_token":{}}}"#,
            from.shard, from.pos.record, from.cursor, from.skip
        ),
        other => format!("{other:?}"),
    }
}

/// Prints the reports of `it` on stderr, one `dropped {...}` line each.
fn report_dropped(it: &mut FilesIter) {
    for d in it.take_dropped() {
        eprintln!("dropped {}", dropped_json(&d));
    }
}

/// One batch as a JSON object: `{"batch", "epoch", "step", "windows": [[shard, record,
/// token], ...], "tokens"?}`.
fn write_line(line: &mut String, batch: &SequentialBatch<Vec<Vec<u32>>>, tokens: bool) {
    let _ = write!(
        line,
        r#"{{"batch":{},"epoch":{},"step":{},"windows":["#,
        batch.number, batch.epoch, batch.step
    );
    for (i, r) in batch.records.iter().enumerate() {
        if i > 0 {
            line.push(',');
        }
        let _ = write!(line, "[{},{},{}]", r.shard, r.record, r.offset);
    }
    line.push(']');
    if tokens {
        line.push_str(r#","tokens":["#);
        for (i, w) in batch.data.iter().enumerate() {
            if i > 0 {
                line.push(',');
            }
            write_list(line, w.iter());
        }
        line.push(']');
    }
    line.push('}');
}

/// `guideloom batches --sequential`: prints the batches; with `--save-state` writes the state
/// after the last batch that reached stdout; reports of records not delivered go to stderr.
pub(crate) fn batches(a: &BatchesArgs) -> CliResult {
    let s = Sequential {
        window: &a.window,
        seq: &a.sequential,
        epochs: Some(a.epochs),
        rank: a.rank,
        world_size: a.world_size,
    };
    s.refuse_storage_options(&a.elastic, a.drop_remainder)?;
    let loader = s.loader()?;
    let mut it = s.start(&loader, a.resume.as_deref())?;
    super::print::print_batches(
        &mut it,
        a.max_batches,
        a.save_state.as_deref(),
        |line, batch| write_line(line, batch, !a.no_tokens),
        report_dropped,
    )
}

impl super::print::StateJson for FilesIter {
    fn state_json(&self) -> String {
        self.state().to_json()
    }
}

/// The batches of a sequential bench run, counted as `bench` counts them: windows, tokens,
/// sum of the ids.
pub(crate) fn counted(it: FilesIter) -> impl Iterator<Item = Result<(u64, u64, u64), LoaderError>> {
    it.map(|b| {
        b.map(|b| {
            let tokens = b.data.iter().map(|w| w.len() as u64).sum::<u64>();
            let sum = b.data.iter().flatten().map(|&t| u64::from(t)).sum::<u64>();
            (b.data.len() as u64, tokens, sum)
        })
    })
}

/// The files a sequential command reads (for reports).
pub(crate) fn inputs(seq: &SequentialArgs) -> &[PathBuf] {
    if seq.jsonl.is_empty() {
        &seq.text
    } else {
        &seq.jsonl
    }
}
