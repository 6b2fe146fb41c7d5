//! `guideloom batches` and `guideloom bench`: a loader over token windows of a storage.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use guideloom::formats::{DocumentTokensFormat, Dtype, Primitive, TokenElement, TokenFormat};
use guideloom::loader::{DataSource, Loader, LoaderBuilder, State, StreamWindows, TokenWindows};
use guideloom::storage::{Manifest, ReadOptions, StorageKind, StreamReader, StreamWithMetaReader};
use serde_json::json;

use crate::{BackendArg, CliResult};

/// The loader configuration shared by `batches` and `bench`.
#[derive(Debug, Clone)]
pub struct LoaderArgs {
    pub dir: PathBuf,
    pub seq_len: u64,
    pub stride: Option<u64>,
    pub batch_size: u64,
    pub shuffle: bool,
    pub seed: u64,
    /// `None`: unbounded.
    pub epochs: Option<u64>,
    pub workers: usize,
    pub prefetch: Option<usize>,
    pub rank: u64,
    pub world_size: u64,
    pub drop_remainder: bool,
    pub backend: BackendArg,
}

/// One window's content as printed: tokens, plus per-token document ordinals for
/// stream-with-meta storages.
pub trait WindowRecord: Send + 'static {
    fn write_tokens(&self, out: &mut String);
    fn write_documents(&self, out: &mut String) -> bool;
    fn token_count(&self) -> u64;
    /// The sum of the token ids (`guideloom bench`'s order-independent checksum).
    fn token_sum(&self) -> u64;
}

fn write_list<T: std::fmt::Display>(out: &mut String, items: impl IntoIterator<Item = T>) {
    out.push('[');
    for (i, t) in items.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{t}");
    }
    out.push(']');
}

impl<E: TokenElement> WindowRecord for Vec<E> {
    fn write_tokens(&self, out: &mut String) {
        write_list(out, self.iter().map(|&t| Into::<u64>::into(t)));
    }
    fn write_documents(&self, _out: &mut String) -> bool {
        false
    }
    fn token_count(&self) -> u64 {
        self.len() as u64
    }
    fn token_sum(&self) -> u64 {
        self.iter().map(|&t| Into::<u64>::into(t)).sum()
    }
}

impl<E: TokenElement> WindowRecord for guideloom::formats::DocumentTokens<E> {
    fn write_tokens(&self, out: &mut String) {
        write_list(out, self.tokens.iter().map(|&t| Into::<u64>::into(t)));
    }
    fn write_documents(&self, out: &mut String) -> bool {
        write_list(out, self.document.iter());
        true
    }
    fn token_count(&self) -> u64 {
        self.tokens.len() as u64
    }
    fn token_sum(&self) -> u64 {
        self.tokens.token_sum()
    }
}

/// Read options for `--backend`.
pub fn read_options(backend: BackendArg) -> CliResult<ReadOptions> {
    crate::backend_options(backend)
}

/// Calls `f` with a token-window data source of the storage in `args.dir`, typed by its kind
/// and dtype.
pub fn with_source<R>(args: &LoaderArgs, f: impl SourceFn<R>) -> CliResult<R> {
    let m = Manifest::load(&args.dir)?;
    let opts = read_options(args.backend)?;
    let stride = args.stride.unwrap_or(args.seq_len);
    match (m.kind(), m.dtype()) {
        (StorageKind::Stream, Some(Dtype::Primitive(Primitive::U16))) => {
            let r = StreamReader::open_with(&args.dir, TokenFormat::<u16>::new(), opts)?;
            f.call(StreamWindows::with_stride(r, args.seq_len, stride)?)
        }
        (StorageKind::Stream, Some(Dtype::Primitive(Primitive::U32))) => {
            let r = StreamReader::open_with(&args.dir, TokenFormat::<u32>::new(), opts)?;
            f.call(StreamWindows::with_stride(r, args.seq_len, stride)?)
        }
        (StorageKind::StreamWithMeta, Some(Dtype::Primitive(Primitive::U16))) => {
            let r = StreamWithMetaReader::open_with(&args.dir, DocumentTokensFormat::<u16>::new(), opts)?;
            f.call(guideloom::loader::MetaWindows::with_stride(r, args.seq_len, stride)?)
        }
        (StorageKind::StreamWithMeta, Some(Dtype::Primitive(Primitive::U32))) => {
            let r = StreamWithMetaReader::open_with(&args.dir, DocumentTokensFormat::<u32>::new(), opts)?;
            f.call(guideloom::loader::MetaWindows::with_stride(r, args.seq_len, stride)?)
        }
        (kind, dtype) => Err(format!(
            "{} holds a {kind} storage of dtype {}; batches and bench read u16 or u32 token streams",
            args.dir.display(),
            dtype.map_or_else(|| "none".to_string(), Dtype::to_string)
        )
        .into()),
    }
}

/// A function generic over the window source type (a closure cannot be generic).
pub trait SourceFn<R> {
    fn call<S>(self, source: S) -> CliResult<R>
    where
        S: DataSource + 'static,
        S::Item: WindowRecord;
}

/// Builds the loader of `args` over `source`.
pub fn build<S>(args: &LoaderArgs, source: S) -> CliResult<Loader<S>>
where
    S: DataSource + 'static,
    S::Item: 'static,
{
    Ok(builder(args, source).build()?)
}

/// The loader builder of `args` over `source`.
pub fn builder<S>(args: &LoaderArgs, source: S) -> LoaderBuilder<S>
where
    S: DataSource + 'static,
    S::Item: 'static,
{
    let mut b = Loader::builder(source)
        .seed(args.seed)
        .batch_size(args.batch_size)
        .drop_remainder(args.drop_remainder)
        .shard(args.rank, args.world_size)
        .workers(args.workers);
    b = match args.epochs {
        Some(e) => b.epochs(e),
        None => b.unbounded(),
    };
    if args.shuffle {
        b = b.shuffle(args.seed);
    }
    if let Some(p) = args.prefetch {
        b = b.prefetch(p);
    }
    b
}

/// `guideloom batches`.
pub struct Batches {
    pub args: LoaderArgs,
    pub max_batches: Option<u64>,
    pub save_state: Option<PathBuf>,
    pub resume: Option<PathBuf>,
    pub no_tokens: bool,
}

impl SourceFn<()> for &Batches {
    fn call<S>(self, source: S) -> CliResult<()>
    where
        S: DataSource + 'static,
        S::Item: WindowRecord,
    {
        let loader = build(&self.args, source)?;
        if loader.is_empty() {
            eprintln!(
                "note: no batch: {} holds {} windows of {} tokens (batch size {}, world size {})",
                self.args.dir.display(),
                DataSource::len(loader.source()),
                self.args.seq_len,
                self.args.batch_size,
                self.args.world_size
            );
        }
        let mut it = match &self.resume {
            Some(p) => loader.iter_from(&read_state(p)?)?,
            None => loader.iter(),
        };
        let stdout = std::io::stdout();
        let mut out = std::io::BufWriter::new(stdout.lock());
        let mut printed = 0u64;
        let mut line = String::new();
        // The state after the last batch known to have reached stdout: with --save-state each
        // line is flushed, so a closed pipe saves the state of what the reader received.
        let mut delivered = it.state();
        let mut written: std::io::Result<()> = Ok(());
        while self.max_batches.is_none_or(|k| printed < k) {
            let Some(batch) = it.next() else { break };
            let batch = batch?;
            line.clear();
            let _ = write!(line, "{{\"batch\":{},\"epoch\":{},\"windows\":", batch.number, batch.epoch);
            write_list(&mut line, batch.indices.iter());
            if !self.no_tokens {
                line.push_str(",\"tokens\":[");
                for (i, r) in batch.data.iter().enumerate() {
                    if i > 0 {
                        line.push(',');
                    }
                    r.write_tokens(&mut line);
                }
                line.push(']');
            }
            if batch.padding.iter().any(|&p| p) {
                line.push_str(",\"padding\":");
                write_list(&mut line, batch.padding.iter());
            }
            let mut docs = String::new();
            let has_docs = batch.data.iter().enumerate().all(|(i, r)| {
                if i > 0 {
                    docs.push(',');
                }
                r.write_documents(&mut docs)
            });
            if has_docs && !batch.data.is_empty() {
                let _ = write!(line, ",\"documents\":[{docs}]");
            }
            line.push('}');
            written = writeln!(out, "{line}").and_then(|()| match self.save_state {
                Some(_) => out.flush(),
                None => Ok(()),
            });
            if written.is_err() {
                break;
            }
            printed += 1;
            delivered = it.state();
        }
        if written.is_ok() {
            written = out.flush();
        }
        if let Some(p) = &self.save_state {
            std::fs::write(p, delivered.to_json())
                .map_err(|e| format!("cannot write state file {}: {e}", p.display()))?;
        }
        Ok(written?)
    }
}

/// Reads a state file written by `--save-state`.
pub fn read_state(p: &Path) -> CliResult<State> {
    let text =
        std::fs::read_to_string(p).map_err(|e| format!("cannot read state file {}: {e}", p.display()))?;
    State::from_json(&text).map_err(|e| format!("state file {}: {e}", p.display()).into())
}

/// `guideloom bench`.
pub struct Bench {
    pub args: LoaderArgs,
    pub seconds: Option<f64>,
    pub max_batches: Option<u64>,
    pub json: bool,
}

/// Throughput figures of one bench run.
#[derive(Debug, Clone, Copy)]
pub struct Throughput {
    pub batches: u64,
    pub windows: u64,
    pub tokens: u64,
    pub bytes: u64,
    pub seconds: f64,
    pub first_batch_seconds: f64,
    /// Sum of all token ids delivered (over one epoch: independent of order, workers, backend).
    pub checksum: u64,
}

impl Throughput {
    pub fn to_json(self, extra: serde_json::Value) -> serde_json::Value {
        let mut v = json!({
            "batches": self.batches,
            "windows": self.windows,
            "tokens": self.tokens,
            "bytes": self.bytes,
            "seconds": self.seconds,
            "windows_per_s": self.windows as f64 / self.seconds,
            "tokens_per_s": self.tokens as f64 / self.seconds,
            "bytes_per_s": self.bytes as f64 / self.seconds,
            "first_batch_s": self.first_batch_seconds,
            "checksum": self.checksum.to_string(),
        });
        if let (Some(o), serde_json::Value::Object(e)) = (v.as_object_mut(), extra) {
            o.extend(e);
        }
        v
    }
}

impl Bench {
    /// Runs the configured loader and measures it. Plain token streams go through the
    /// token-window fast path ([`TokenWindows`]: one read straight into each `[B, L]` batch);
    /// stream-with-meta storages through their format's unpack.
    pub fn run(&self) -> CliResult<Throughput> {
        let mut args = self.args.clone();
        if self.max_batches.is_none() && self.seconds.is_some() {
            // Timed runs repeat epochs until the time is up.
            args.epochs = None;
        }
        let m = Manifest::load(&args.dir)?;
        let stride = args.stride.unwrap_or(args.seq_len);
        let start = Instant::now();
        match (m.kind(), m.dtype()) {
            (StorageKind::Stream, Some(Dtype::Primitive(Primitive::U16))) => {
                self.fast::<u16>(&args, stride, start)
            }
            (StorageKind::Stream, Some(Dtype::Primitive(Primitive::U32))) => {
                self.fast::<u32>(&args, stride, start)
            }
            _ => with_source(&args, self),
        }
    }

    fn fast<E: TokenElement>(&self, args: &LoaderArgs, stride: u64, start: Instant) -> CliResult<Throughput> {
        let windows =
            TokenWindows::<E>::open_with(&args.dir, args.seq_len, stride, read_options(args.backend)?)?;
        let collate = windows.collate();
        let loader = builder(args, windows).collate(collate).build()?;
        let batches = loader.iter().map(|b| {
            b.map(|b| {
                let sum = b.data.data().iter().map(|&t| Into::<u64>::into(t)).sum::<u64>();
                (b.data.shape()[0] as u64, b.data.data().len() as u64, sum)
            })
        });
        self.measure(start, batches, std::mem::size_of::<E>() as u64)
    }

    fn measure(
        &self,
        start: Instant,
        batches: impl Iterator<Item = Result<(u64, u64, u64), guideloom::loader::LoaderError>>,
        token_bytes: u64,
    ) -> CliResult<Throughput> {
        let mut first = None;
        let (mut n, mut windows, mut tokens, mut checksum) = (0u64, 0u64, 0u64, 0u64);
        let deadline = self.seconds.map(std::time::Duration::from_secs_f64);
        for b in batches {
            let (w, t, sum) = b?;
            first.get_or_insert_with(|| start.elapsed().as_secs_f64());
            n += 1;
            windows += w;
            tokens += t;
            checksum = checksum.wrapping_add(sum);
            if self.max_batches.is_some_and(|k| n >= k) || deadline.is_some_and(|d| start.elapsed() >= d) {
                break;
            }
        }
        let seconds = start.elapsed().as_secs_f64();
        Ok(Throughput {
            batches: n,
            windows,
            tokens,
            bytes: tokens * token_bytes,
            seconds,
            first_batch_seconds: first.unwrap_or(seconds),
            checksum,
        })
    }
}

impl SourceFn<Throughput> for &Bench {
    fn call<S>(self, source: S) -> CliResult<Throughput>
    where
        S: DataSource + 'static,
        S::Item: WindowRecord,
    {
        let start = Instant::now();
        let token_bytes =
            Manifest::load(&self.args.dir).ok().and_then(|m| m.dtype().map(Dtype::itemsize)).unwrap_or(0);
        let mut args = self.args.clone();
        if self.max_batches.is_none() && self.seconds.is_some() {
            args.epochs = None;
        }
        let loader = build(&args, source)?;
        let batches = loader.iter().map(|b| {
            b.map(|b| {
                let sum = b.data.iter().map(WindowRecord::token_sum).sum::<u64>();
                (b.data.len() as u64, b.data.iter().map(WindowRecord::token_count).sum::<u64>(), sum)
            })
        });
        self.measure(start, batches, token_bytes)
    }
}
