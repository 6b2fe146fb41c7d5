//! `guideloom bench`: the throughput of a loader configuration.

use std::time::{Duration, Instant};

use guideloom::formats::{DocumentTokensFormat, IntTokenFormat, TokenElement, TokenFormat};
use guideloom::interop::ForeignDataset;
use guideloom::loader::{
    Collate, DataSource, Loader, LoaderError, LoaderIter, MetaWindows, ResumeOptions, State, TokenWindows,
};
use guideloom::storage::ReadOptions;
use guideloom::storage::{StreamReader, StreamWithMetaReader};
use serde_json::{json, Value};

use crate::cli::BenchArgs;
use crate::cmd::backend::read_options;
use crate::cmd::windows::{open_token_storage, LoaderArgs, TokenStorageFn, WindowRecord};
use crate::CliResult;

/// `guideloom bench` with its checked options.
struct Bench {
    args: LoaderArgs,
    seconds: Option<f64>,
    max_batches: Option<u64>,
    /// When the measurement starts: before the storage is opened, so the time to the first
    /// batch includes opening it and starting the workers.
    start: Instant,
    /// `--resume`: the state to start from.
    resume: Option<State>,
    /// `--round-down`.
    round_down: bool,
}

/// Throughput figures of one bench run.
#[derive(Debug, Clone, Copy)]
struct Throughput {
    batches: u64,
    windows: u64,
    tokens: u64,
    bytes: u64,
    seconds: f64,
    first_batch_seconds: f64,
    /// Sum of all token ids delivered (over one epoch: independent of order, workers, backend).
    checksum: u64,
}

/// One batch as the measurement counts it: windows, tokens, sum of the token ids.
type BatchCounts = (u64, u64, u64);

/// Runs `guideloom bench`: one epoch (or `--seconds`, or `--max-batches`), reported as one
/// line of text or one JSON object (`--json`).
pub(crate) fn run(a: BenchArgs) -> CliResult {
    crate::cmd::location::local_files(
        [("--resume", a.resume.as_deref()), ("--lengths-out", a.lengths_out.as_deref())]
            .into_iter()
            .chain(a.sequential.resume_ranks.iter().map(|p| ("--resume-ranks", Some(p.as_path())))),
    )?;
    if let Some(t) = a.seconds {
        if !(t.is_finite() && t > 0.0 && t <= 1e6) {
            return Err(format!("--seconds must be a positive number of seconds up to 1e6, got {t}").into());
        }
    }
    if a.max_batches == Some(0) {
        return Err("--max-batches must be at least 1".into());
    }
    let resume = match &a.resume {
        Some(p) if !a.sequential.on() => {
            let text = super::state_file::read(p)?;
            Some(State::from_json(&text).map_err(|e| format!("state file {}: {e}", p.display()))?)
        }
        _ => None,
    };
    // Timed runs repeat epochs until the time is up.
    let epochs = if a.max_batches.is_none() && a.seconds.is_some() { None } else { Some(1) };
    if a.sequential.on() {
        return bench_sequential(&a, epochs);
    }
    if a.mix_pack.on() {
        return crate::cmd::mixpack::bench(&a, epochs);
    }
    let b = Bench {
        args: LoaderArgs {
            window: a.window,
            // Timed runs repeat epochs until the time is up.
            epochs,
            rank: a.rank,
            world_size: a.world_size,
            drop_remainder: false,
            global_batch: a.elastic.global_batch,
        },
        seconds: a.seconds,
        max_batches: a.max_batches,
        start: Instant::now(),
        resume,
        round_down: a.elastic.round_down,
    };
    let t = open_token_storage(&b.args.window, &b)?;
    if t.batches == 0 {
        return Err(format!(
            "no batch to measure: {} holds no window of {} tokens for this configuration",
            b.args.window.dir.display(),
            b.args.window.seq_len
        )
        .into());
    }
    let backend = read_options(b.args.window.backend)?.backend.name();
    if a.json {
        outln!("{}", t.to_json(b.report_fields(backend)));
    } else {
        outln!("{}", t.to_text(backend, b.args.window.workers));
    }
    Ok(())
}

/// Plain token streams go through the token-window fast path ([`TokenWindows`]: one read
/// straight into each `[B, L]` batch); stream-with-meta storages through their format's
/// unpack.
impl TokenStorageFn for &Bench {
    type Output = Throughput;
    fn stream<E: TokenElement>(self, reader: StreamReader<TokenFormat<E>>) -> CliResult<Throughput> {
        let windows = TokenWindows::new(reader, self.args.window.seq_len, self.args.stride())?;
        let collate = windows.collate();
        let loader = self.args.builder(windows).collate(collate).build()?;
        let batches = self.iter(&loader)?.map(|b| {
            b.map(|b| {
                let sum = b.data.data().iter().map(|&t| Into::<u64>::into(t)).sum::<u64>();
                (b.data.shape()[0] as u64, b.data.data().len() as u64, sum)
            })
        });
        self.measure(batches, std::mem::size_of::<E>() as u64)
    }

    fn meta<E: TokenElement>(
        self,
        reader: StreamWithMetaReader<DocumentTokensFormat<E>>,
    ) -> CliResult<Throughput> {
        let windows = MetaWindows::with_stride(reader, self.args.window.seq_len, self.args.stride())?;
        self.measure_records(windows, std::mem::size_of::<E>() as u64)
    }

    fn foreign(self, data: &ForeignDataset, options: ReadOptions) -> CliResult<Throughput> {
        let w = &self.args.window;
        // A state saved before issue 18 holds the fingerprint of the same windows over the
        // dataset fingerprinted with its path.
        let legacy = || -> CliResult<u64> {
            let reader =
                data.with_legacy_fingerprint().reader(IntTokenFormat::new(data.dtype())?, options.clone())?;
            Ok(TokenWindows::<i64>::from_int_reader(reader, w.seq_len, self.args.stride())?.fingerprint())
        };
        self.foreign_windows(data.reader(IntTokenFormat::new(data.dtype())?, options.clone())?, legacy)
    }
}

impl Bench {
    /// A dataset in another project's layout: the same token-window fast path, as `i64` ids;
    /// `legacy`, the fingerprint a state saved before issue 18 holds for it
    /// ([`crate::cmd::foreign::adopt_legacy_fingerprint`]).
    fn foreign_windows(
        &self,
        reader: StreamReader<IntTokenFormat>,
        legacy: impl FnOnce() -> CliResult<u64>,
    ) -> CliResult<Throughput> {
        let token_bytes = reader.format().primitive().size();
        let windows =
            TokenWindows::<i64>::from_int_reader(reader, self.args.window.seq_len, self.args.stride())?;
        let collate = windows.collate();
        let loader = self.args.builder(windows).collate(collate).build()?;
        let mut resume = self.resume;
        if let Some(state) = &mut resume {
            let current = loader.source().fingerprint();
            crate::cmd::foreign::adopt_legacy_fingerprint(state, current, legacy)?;
        }
        let batches = self.iter_from(&loader, resume.as_ref())?.map(|b| {
            b.map(|b| {
                let sum = b.data.data().iter().fold(0u64, |a, &t| a.wrapping_add(t as u64));
                (b.data.shape()[0] as u64, b.data.data().len() as u64, sum)
            })
        });
        self.measure(batches, token_bytes)
    }

    /// The loader's iterator: from the start, or from `--resume` (onto this rank and world
    /// size: elastic).
    fn iter<S, U, C>(&self, loader: &Loader<S, U, C>) -> Result<LoaderIter<S, U, C>, LoaderError>
    where
        S: DataSource + 'static,
        U: 'static,
        C: Collate<U> + 'static,
        C::Output: 'static,
    {
        self.iter_from(loader, self.resume.as_ref())
    }

    /// [`Bench::iter`] from `state` in place of `--resume`'s.
    fn iter_from<S, U, C>(
        &self,
        loader: &Loader<S, U, C>,
        state: Option<&State>,
    ) -> Result<LoaderIter<S, U, C>, LoaderError>
    where
        S: DataSource + 'static,
        U: 'static,
        C: Collate<U> + 'static,
        C::Output: 'static,
    {
        let options = if self.round_down { ResumeOptions::round_down() } else { ResumeOptions::default() };
        match state {
            Some(state) => loader.iter_from_with(state, options),
            None => Ok(loader.iter()),
        }
    }

    /// Measures a loader over `source` with the default collation (a `Vec` of records).
    fn measure_records<S>(&self, source: S, token_bytes: u64) -> CliResult<Throughput>
    where
        S: DataSource + 'static,
        S::Item: WindowRecord,
    {
        let loader = self.args.builder(source).build()?;
        let batches = self.iter(&loader)?.map(|b| {
            b.map(|b| {
                let sum = b.data.iter().map(WindowRecord::token_sum).sum::<u64>();
                (b.data.len() as u64, b.data.iter().map(WindowRecord::token_count).sum::<u64>(), sum)
            })
        });
        self.measure(batches, token_bytes)
    }

    /// Consumes `batches` until they end, `--max-batches` or `--seconds`.
    fn measure(
        &self,
        batches: impl Iterator<Item = Result<BatchCounts, LoaderError>>,
        token_bytes: u64,
    ) -> CliResult<Throughput> {
        let start = self.start;
        let mut first = None;
        let (mut n, mut windows, mut tokens, mut checksum) = (0u64, 0u64, 0u64, 0u64);
        let deadline = self.seconds.map(Duration::from_secs_f64);
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

    /// The configuration fields of the JSON report.
    fn report_fields(&self, backend: &str) -> Value {
        let w = &self.args.window;
        json!({
            "backend": backend,
            "workers": w.workers,
            "seq_len": w.seq_len,
            "stride": self.args.stride(),
            "seed": w.seed,
            "batch_size": w.batch_size,
        })
    }
}

impl Throughput {
    /// The JSON report: these figures and rates, plus the fields of `extra` (an object).
    fn to_json(self, extra: Value) -> Value {
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
        if let (Some(o), Value::Object(e)) = (v.as_object_mut(), extra) {
            o.extend(e);
        }
        v
    }

    /// The one-line text report.
    fn to_text(self, backend: &str, workers: usize) -> String {
        format!(
            "{} batches, {} windows, {} tokens in {:.3} s: {:.0} windows/s, {:.1} M tokens/s, {:.1} MB/s; first batch after {:.2} ms ({backend}, {workers} workers)",
            self.batches,
            self.windows,
            self.tokens,
            self.seconds,
            self.windows as f64 / self.seconds,
            self.tokens as f64 / self.seconds / 1e6,
            self.bytes as f64 / self.seconds / 1e6,
            self.first_batch_seconds * 1e3,
        )
    }
}

/// `guideloom bench --sequential`: the throughput of reading `--jsonl` or `--text` files in
/// order, tokenizing and packing them (one epoch, `--seconds` or `--max-batches`).
fn bench_sequential(a: &BenchArgs, epochs: Option<u64>) -> CliResult {
    let s = crate::cmd::sequential::Sequential {
        window: &a.window,
        seq: &a.sequential,
        epochs,
        rank: a.rank,
        world_size: a.world_size,
    };
    s.refuse_storage_options(&a.elastic, false)?;
    let b = Bench {
        args: LoaderArgs {
            window: a.window.clone(),
            epochs,
            rank: a.rank,
            world_size: a.world_size,
            drop_remainder: false,
            global_batch: None,
        },
        seconds: a.seconds,
        max_batches: a.max_batches,
        start: Instant::now(),
        resume: None,
        round_down: false,
    };
    let loader = s.loader()?;
    let it = s.start(&loader, a.resume.as_deref())?;
    let t = b.measure(crate::cmd::sequential::counted(it), 4)?;
    if t.batches == 0 {
        let files = crate::cmd::sequential::inputs(&a.sequential);
        return Err(
            format!("no batch to measure: {files:?} hold no window of {} tokens", a.window.seq_len).into()
        );
    }
    let mut fields = b.report_fields("sequential");
    if let Value::Object(o) = &mut fields {
        o.insert("sequential".into(), json!(true));
        o.insert("cycle".into(), json!(a.sequential.cycle));
    }
    if a.json {
        outln!("{}", t.to_json(fields));
    } else {
        outln!("{}", t.to_text("sequential", a.window.workers));
    }
    Ok(())
}
