//! The `Sequential` plan of `batches` and `bench`: JSON Lines or text files read in order by
//! the sequential loader (each file a shard, documents tokenized as they are read and packed
//! into windows of `--seq-len` tokens), with exact and elastic resume.

use std::path::{Path, PathBuf};

use std::sync::Arc;

use guideloom::ingest::{
    collect_files, JsonlField, JsonlReader, JsonlShards, TextReader, TextShards, Tokenizer, Vocabulary,
};
use guideloom::interop::{
    ForeignOptions, TfRecordReader, TfRecordShards, WebDatasetReader, WebDatasetSampleReader,
    WebDatasetShards,
};
use guideloom::loader::sequential::{
    SequentialIter, SequentialLoader, SequentialSource, SequentialState, ShardInfo, ShardPos, ShardReader,
};
use guideloom::loader::{LoaderError, VecCollate};

use crate::cli::SequentialArgs;
use crate::error::CliResult;
use crate::open::print::StateJson;
use crate::open::state_file::read_state;
use crate::open::windows::LoaderArgs;

/// The files of `--jsonl`, `--text`, `--tfrecord` or `--webdataset`.
#[derive(Debug)]
pub(crate) enum Files {
    /// JSON Lines.
    Jsonl(JsonlShards),
    /// Plain text.
    Text(TextShards),
    /// TFRecord files.
    TfRecord(TfRecordShards),
    /// WebDataset shards, ids from a token field.
    WebDataset(WebDatasetShards),
    /// WebDataset shards, a text field tokenized.
    WebDatasetText(WebDatasetShards, Arc<Vocabulary>, String),
}

/// The reader of one file of [`Files`].
#[derive(Debug)]
pub(crate) enum FileReader {
    /// A JSON Lines file.
    Jsonl(JsonlReader),
    /// A text file.
    Text(TextReader),
    /// A TFRecord file.
    TfRecord(TfRecordReader, u64),
    /// A WebDataset shard, ids from a token field.
    WebDataset(WebDatasetReader, u64),
    /// A WebDataset shard, a text field tokenized.
    WebDatasetText(WebDatasetSampleReader, Arc<Vocabulary>, String, u64),
}

/// A record's `i64` ids as the `u32` ids the sequential commands read.
fn narrow(ids: Vec<i64>, shard: u64, record: u64) -> Result<Vec<u32>, LoaderError> {
    ids.into_iter()
        .map(|t| {
            u32::try_from(t)
                .map_err(|_| LoaderError::shard(shard, record, format!("id {t} does not fit u32")))
        })
        .collect()
}

impl ShardReader for FileReader {
    type Item = Vec<u32>;
    fn next_record(&mut self) -> Result<Option<Vec<u32>>, LoaderError> {
        let record = self.pos().record;
        match self {
            FileReader::Jsonl(r) => r.next_record(),
            FileReader::Text(r) => r.next_record(),
            FileReader::TfRecord(r, shard) => r.next_record()?.map(|d| narrow(d, *shard, record)).transpose(),
            FileReader::WebDataset(r, shard) => {
                r.next_record()?.map(|d| narrow(d, *shard, record)).transpose()
            }
            FileReader::WebDatasetText(r, vocab, field, shard) => {
                let Some(sample) = r.next_sample()? else { return Ok(None) };
                let Some(bytes) = sample.fields.get(field.as_str()) else {
                    return Err(LoaderError::shard(
                        *shard,
                        record,
                        format!("sample {}: no field {field}", sample.key),
                    ));
                };
                let text = std::str::from_utf8(bytes).map_err(|e| {
                    LoaderError::shard(
                        *shard,
                        record,
                        format!("sample {} field {field}: not UTF-8 ({e})", sample.key),
                    )
                })?;
                Ok(Some(vocab.encode_ordinary(text)))
            }
        }
    }
    fn pos(&self) -> ShardPos {
        match self {
            FileReader::Jsonl(r) => r.pos(),
            FileReader::Text(r) => r.pos(),
            FileReader::TfRecord(r, _) => r.pos(),
            FileReader::WebDataset(r, _) => r.pos(),
            FileReader::WebDatasetText(r, ..) => r.pos(),
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
            Files::TfRecord(s) => s.shards(),
            Files::WebDataset(s) | Files::WebDatasetText(s, ..) => s.shards(),
        }
    }
    fn open(&self, shard: u64, at: ShardPos) -> Result<FileReader, LoaderError> {
        Ok(match self {
            Files::Jsonl(s) => FileReader::Jsonl(s.open(shard, at)?),
            Files::Text(s) => FileReader::Text(s.open(shard, at)?),
            Files::TfRecord(s) => FileReader::TfRecord(s.open(shard, at)?, shard),
            Files::WebDataset(s) => FileReader::WebDataset(s.open(shard, at)?, shard),
            Files::WebDatasetText(s, vocab, field) => {
                FileReader::WebDatasetText(s.open_samples(shard, at)?, vocab.clone(), field.clone(), shard)
            }
        })
    }
    fn fingerprint(&self) -> u64 {
        match self {
            Files::Jsonl(s) => s.fingerprint(),
            Files::Text(s) => s.fingerprint(),
            Files::TfRecord(s) => s.fingerprint(),
            Files::WebDataset(s) => s.fingerprint(),
            // The tokenizer is part of what the records are.
            Files::WebDatasetText(s, vocab, _) => {
                s.fingerprint() ^ u64::from(vocab.tokenizer().eos_id()).rotate_left(32)
            }
        }
    }
}

/// The loader over [`Files`]: packed windows of `u32` ids, collated as a `Vec` of them.
pub(crate) type FilesLoader = SequentialLoader<Files>;
/// Its iterator.
pub(crate) type FilesIter = SequentialIter<Files, Vec<u32>, VecCollate>;

/// A sequential command's configuration: the loader's, over the files of `--jsonl` or
/// `--text`.
#[derive(Debug)]
pub(crate) struct Sequential<'a>(pub(crate) LoaderArgs<'a>);

impl Sequential<'_> {
    /// The files and how to read them.
    fn seq(&self) -> &SequentialArgs {
        &self.0.read.sequential
    }

    /// Refuses the storage options that do not apply to files read in order.
    pub(crate) fn refuse_storage_options(&self) -> CliResult {
        let (w, elastic) = (self.0.window(), &self.0.read.elastic);
        let refused = [
            (w.dir != Path::new("-"), "a storage directory"),
            (w.stride.is_some(), "--stride (packed windows follow each other)"),
            (self.0.drop_remainder, "--drop-remainder (each rank reads its files to the end)"),
            (elastic.global_batch.is_some(), "--global-batch (use --batch-size per rank)"),
            (elastic.round_down, "--round-down (use --resume-ranks)"),
        ];
        match refused.iter().find(|(given, _)| *given) {
            Some((_, what)) => Err(format!("{what} does not apply to --sequential").into()),
            None => Ok(()),
        }
    }

    /// The files of `--jsonl` (as given), `--text` (directories walked, paths sorted),
    /// `--tfrecord` or `--webdataset` (a file, glob or directory, sorted).
    fn files(&self) -> CliResult<Files> {
        let s = self.seq();
        if let Some(location) = &s.tfrecord {
            let mut o = ForeignOptions::new();
            o.column = s.tokens_field.clone();
            let shards = TfRecordShards::open(location, &o)?;
            return Ok(Files::TfRecord(if s.count_lengths { shards.count_lengths()? } else { shards }));
        }
        if let Some(location) = &s.webdataset {
            let mut o = ForeignOptions::new();
            o.column = s.tokens_field.clone();
            let shards = WebDatasetShards::open(location, &o)?;
            let shards = if s.count_lengths { shards.count_lengths()? } else { shards };
            return Ok(match s.tokens_field.as_deref() {
                Some(f) if f == "txt" || f.ends_with(".txt") => {
                    let vocab = Tokenizer::from(s.tokenizer).load()?;
                    Files::WebDatasetText(shards, Arc::new(vocab), f.to_string())
                }
                _ => Files::WebDataset(shards),
            });
        }
        if s.tokens_field.is_some() && s.jsonl.is_empty() {
            return Err("--tokens-field needs --jsonl, --tfrecord or --webdataset".into());
        }
        for p in s.jsonl.iter().chain(&s.text) {
            crate::open::location::local_only(
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
        let (w, seq) = (self.0.window(), self.seq());
        let b = SequentialLoader::builder(self.files()?)
            .pack(w.seq_len)
            .batch_size(w.batch_size)
            .cycle(seq.cycle)
            .window_shuffle(seq.window_shuffle);
        Ok(self.0.apply(b).build()?)
    }

    /// The iterator: from the start, from this rank's state (`resume`), or from the states of
    /// all ranks of an earlier run (`--resume-ranks`, elastic).
    pub(crate) fn start(&self, loader: &FilesLoader, resume: Option<&Path>) -> CliResult<FilesIter> {
        let ranks = &self.seq().resume_ranks;
        if !ranks.is_empty() {
            let states = ranks.iter().map(|p| read_state(p)).collect::<CliResult<Vec<SequentialState>>>()?;
            return Ok(loader.iter_from_ranks(&states)?);
        }
        match resume {
            Some(p) => Ok(loader.iter_from(&read_state::<SequentialState>(p)?)?),
            None => Ok(loader.iter()),
        }
    }
}

impl StateJson for FilesIter {
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

/// The files a sequential command reads (for reports; a `--tfrecord` or `--webdataset`
/// location as given).
pub(crate) fn inputs(seq: &SequentialArgs) -> Vec<PathBuf> {
    if let Some(l) = seq.tfrecord.as_ref().or(seq.webdataset.as_ref()) {
        return vec![PathBuf::from(l)];
    }
    if seq.jsonl.is_empty() {
        seq.text.clone()
    } else {
        seq.jsonl.clone()
    }
}
