//! `guideloom bench`: the throughput of a loader configuration, for each [`Plan`] but
//! `Order`: windows of a storage, files read in order, a mixture or packing.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use guideloom::formats::{DocumentTokensFormat, IntTokenFormat, TokenElement, TokenFormat};
use guideloom::interop::ForeignDataset;
use guideloom::loader::pack::PackedRow;
use guideloom::loader::{
    Collate, DataSource, Loader, LoaderError, LoaderIter, MetaWindows, ResumeOptions, State, TokenWindows,
};
use guideloom::storage::{ReadOptions, StreamReader, StreamWithMetaReader};
use serde_json::{json, Value};

use crate::cli::{BenchArgs, Plan};
use crate::error::{context, CliResult};
use crate::open::backend::read_options;
use crate::open::foreign::adopt_legacy_fingerprint;
use crate::open::mixpack;
use crate::open::sequential::{counted, inputs, Sequential};
use crate::open::state_file::read_state;
use crate::open::windows::{open_token_storage, LoaderArgs, TokenStorageFn, WindowRecord};

/// One batch as the measurement counts it: windows (or rows), tokens, and the sum of the
/// token ids (or the real, non-padding tokens).
type Counts = (u64, u64, u64);

/// What a measured run counted: batches, the three [`Counts`] summed over them (the third
/// wrapping), its time and the time to its first batch.
#[derive(Debug, Clone, Copy)]
struct Measured {
    batches: u64,
    sums: [u64; 3],
    seconds: f64,
    first_batch_seconds: f64,
}

/// Consumes `batches` until they end, `max_batches` or `seconds` (timed from `start`).
fn measure(
    batches: impl Iterator<Item = Result<Counts, LoaderError>>,
    start: Instant,
    max_batches: Option<u64>,
    seconds: Option<f64>,
) -> CliResult<Measured> {
    let mut first = None;
    let (mut n, mut sums) = (0u64, [0u64; 3]);
    let deadline = seconds.map(Duration::from_secs_f64);
    for b in batches {
        let (a, b, c) = b?;
        first.get_or_insert_with(|| start.elapsed().as_secs_f64());
        n += 1;
        sums = [sums[0] + a, sums[1] + b, sums[2].wrapping_add(c)];
        if max_batches.is_some_and(|k| n >= k) || deadline.is_some_and(|d| start.elapsed() >= d) {
            break;
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    Ok(Measured { batches: n, sums, seconds, first_batch_seconds: first.unwrap_or(seconds) })
}

/// Runs `guideloom bench`: one epoch (or `--seconds`, or `--max-batches`), reported as one
/// line of text or one JSON object (`--json`).
pub(crate) fn run(a: BenchArgs) -> CliResult {
    crate::open::location::local_files(
        [("--resume", a.resume.as_deref()), ("--lengths-out", a.lengths_out.as_deref())]
            .into_iter()
            .chain(a.read.sequential.resume_ranks.iter().map(|p| ("--resume-ranks", Some(p.as_path())))),
    )?;
    if let Some(t) = a.seconds {
        if !(t.is_finite() && t > 0.0 && t <= 1e6) {
            return Err(format!("--seconds must be a positive number of seconds up to 1e6, got {t}").into());
        }
    }
    if a.max_batches == Some(0) {
        return Err("--max-batches must be at least 1".into());
    }
    let plan = a.plan();
    let resume: Option<State> = match &a.resume {
        Some(p) if plan != Plan::Sequential => Some(read_state(p)?),
        _ => None,
    };
    // Timed runs repeat epochs until the time is up.
    let epochs = if a.max_batches.is_none() && a.seconds.is_some() { None } else { Some(1) };
    let args = LoaderArgs { read: &a.read, epochs, drop_remainder: false };
    match plan {
        Plan::Windows => windows(&a, args, resume),
        Plan::Sequential => sequential(&a, args),
        Plan::MixPack => mix_pack(&a, args),
        Plan::Order(_) => Err("bench reads no --order".into()),
    }
}

// --- Windows -------------------------------------------------------------------------------

/// `bench` over the windows of one storage or foreign dataset.
fn windows(a: &BenchArgs, args: LoaderArgs<'_>, resume: Option<State>) -> CliResult {
    let b = Bench {
        args,
        seconds: a.seconds,
        max_batches: a.max_batches,
        start: Instant::now(),
        resume,
        round_down: a.read.elastic.round_down,
    };
    let w = args.window();
    let t = open_token_storage(w, &b)?;
    if t.batches == 0 {
        return Err(format!(
            "no batch to measure: {} holds no window of {} tokens for this configuration",
            w.dir.display(),
            w.seq_len
        )
        .into());
    }
    let backend = read_options(w.backend)?.backend.name();
    if a.json {
        outln!("{}", t.to_json(b.report_fields(backend)));
    } else {
        outln!("{}", t.to_text(backend, w.workers));
    }
    Ok(())
}

/// `guideloom bench` over windows, with its checked options.
struct Bench<'a> {
    args: LoaderArgs<'a>,
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

/// Plain token streams go through the token-window fast path ([`TokenWindows`]: one read
/// straight into each `[B, L]` batch); stream-with-meta storages through their format's
/// unpack.
impl TokenStorageFn for &Bench<'_> {
    type Output = Throughput;
    fn stream<E: TokenElement>(self, reader: StreamReader<TokenFormat<E>>) -> CliResult<Throughput> {
        let windows = TokenWindows::new(reader, self.args.window().seq_len, self.args.stride())?;
        let collate = windows.collate();
        let loader = self.args.builder(windows).collate(collate).build()?;
        let batches = self.iter(&loader)?.map(|b| {
            b.map(|b| {
                let sum = guideloom::formats::sum_ids(b.data.data());
                (b.data.shape()[0] as u64, b.data.data().len() as u64, sum)
            })
        });
        self.measure(batches, std::mem::size_of::<E>() as u64)
    }

    fn meta<E: TokenElement>(
        self,
        reader: StreamWithMetaReader<DocumentTokensFormat<E>>,
    ) -> CliResult<Throughput> {
        let windows = MetaWindows::with_stride(reader, self.args.window().seq_len, self.args.stride())?;
        self.measure_records(windows, std::mem::size_of::<E>() as u64)
    }

    fn foreign(self, data: &ForeignDataset, options: ReadOptions) -> CliResult<Throughput> {
        let seq_len = self.args.window().seq_len;
        // A state saved before issue 18 holds the fingerprint of the same windows over the
        // dataset fingerprinted with its path.
        let legacy = || -> CliResult<u64> {
            let reader =
                data.with_legacy_fingerprint().reader(IntTokenFormat::new(data.dtype())?, options.clone())?;
            Ok(TokenWindows::<i64>::from_int_reader(reader, seq_len, self.args.stride())?.fingerprint())
        };
        self.foreign_windows(data.reader(IntTokenFormat::new(data.dtype())?, options.clone())?, legacy)
    }
}

impl Bench<'_> {
    /// A dataset in another project's layout: the same token-window fast path, as `i64` ids;
    /// `legacy`, the fingerprint a state saved before issue 18 holds for it
    /// ([`adopt_legacy_fingerprint`]).
    fn foreign_windows(
        &self,
        reader: StreamReader<IntTokenFormat>,
        legacy: impl FnOnce() -> CliResult<u64>,
    ) -> CliResult<Throughput> {
        let token_bytes = reader.format().primitive().size();
        let windows =
            TokenWindows::<i64>::from_int_reader(reader, self.args.window().seq_len, self.args.stride())?;
        let collate = windows.collate();
        let loader = self.args.builder(windows).collate(collate).build()?;
        let mut resume = self.resume;
        if let Some(state) = &mut resume {
            let current = loader.source().fingerprint();
            adopt_legacy_fingerprint(state, current, legacy)?;
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
        batches: impl Iterator<Item = Result<Counts, LoaderError>>,
        token_bytes: u64,
    ) -> CliResult<Throughput> {
        let m = measure(batches, self.start, self.max_batches, self.seconds)?;
        let [windows, tokens, checksum] = m.sums;
        Ok(Throughput {
            batches: m.batches,
            windows,
            tokens,
            bytes: tokens * token_bytes,
            seconds: m.seconds,
            first_batch_seconds: m.first_batch_seconds,
            checksum,
        })
    }

    /// The configuration fields of the JSON report.
    fn report_fields(&self, backend: &str) -> Value {
        let w = self.args.window();
        json!({
            "backend": backend,
            "workers": w.workers,
            "seq_len": w.seq_len,
            "stride": self.args.stride(),
            "seed": w.seed(),
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

// --- Sequential ----------------------------------------------------------------------------

/// `guideloom bench --sequential`: the throughput of reading `--jsonl` or `--text` files in
/// order, tokenizing and packing them (one epoch, `--seconds` or `--max-batches`).
fn sequential(a: &BenchArgs, args: LoaderArgs<'_>) -> CliResult {
    let s = Sequential(args);
    s.refuse_storage_options()?;
    let b = Bench {
        args,
        seconds: a.seconds,
        max_batches: a.max_batches,
        start: Instant::now(),
        resume: None,
        round_down: false,
    };
    let loader = s.loader()?;
    let it = s.start(&loader, a.resume.as_deref())?;
    let t = b.measure(counted(it), 4)?;
    let w = args.window();
    if t.batches == 0 {
        let files = inputs(&a.read.sequential);
        return Err(format!("no batch to measure: {files:?} hold no window of {} tokens", w.seq_len).into());
    }
    let mut fields = b.report_fields("sequential");
    if let Value::Object(o) = &mut fields {
        o.insert("sequential".into(), json!(true));
        o.insert("cycle".into(), json!(a.read.sequential.cycle));
    }
    if a.json {
        outln!("{}", t.to_json(fields));
    } else {
        outln!("{}", t.to_text("sequential", w.workers));
    }
    Ok(())
}

// --- MixPack -------------------------------------------------------------------------------

/// Runs `bench --mix ... / --pack ...`: one epoch (or `--seconds`, or `--max-batches`) of the
/// pipeline `batches` runs with the same options, timed from before the storages are opened
/// (so planned packing counts its scan and plan), reported as a line of text or one JSON
/// object with rows/s and the share of padding.
fn mix_pack(a: &BenchArgs, args: LoaderArgs<'_>) -> CliResult {
    let (w, mp) = (args.window(), &a.read.mix_pack);
    if a.resume.is_some() {
        return Err("bench --mix/--pack starts from the first batch (no --resume)".into());
    }
    if let Some(path) = &a.lengths_out {
        let (records, _) = mixpack::records(w, mp)?;
        let mut text = String::new();
        for i in 0..records.len() {
            let _ = writeln!(text, "{}", records.get(i)?.tokens.len());
        }
        std::fs::write(path, text).map_err(|e| context(format!("--lengths-out {}", path.display()), e))?;
    }
    let start = Instant::now();
    let row_counts = |rows: &[PackedRow<u32>]| {
        let real = rows.iter().map(|r| r.segment_ids.iter().filter(|&&s| s != 0).count() as u64).sum();
        (rows.len() as u64, rows.iter().map(|r| r.tokens.len() as u64).sum(), real)
    };
    let measure = |batches: &mut dyn Iterator<Item = Result<Counts, LoaderError>>| -> CliResult<Value> {
        let m = measure(batches, start, a.max_batches, a.seconds)?;
        let ([rows, tokens, real], seconds) = (m.sums, m.seconds);
        Ok(json!({
            "batches": m.batches,
            "rows": rows,
            "tokens": tokens,
            "real_tokens": real,
            "padding_share": if tokens == 0 { 0.0 } else { (tokens - real) as f64 / tokens as f64 },
            "seconds": seconds,
            "rows_per_s": rows as f64 / seconds,
            "tokens_per_s": tokens as f64 / seconds,
            "first_batch_s": m.first_batch_seconds,
        }))
    };
    let (mut report, name) = match mixpack::pack_config(w, mp) {
        None => {
            let (records, _) = mixpack::records(w, mp)?;
            let loader = args.builder(records).build()?;
            let mut it = loader.iter().map(|b| {
                b.map(|b| {
                    let t: u64 = b.data.iter().map(|r| r.tokens.len() as u64).sum();
                    (b.data.len() as u64, t, t)
                })
            });
            (measure(&mut it)?, "records".to_string())
        }
        Some((config, true)) => {
            let (records, _) = mixpack::records(w, mp)?;
            let stage = mixpack::stream_stage(&args, records, config, mp.pad_id)?;
            let mut it = stage.iter().map(|b| b.map(|b| row_counts(&b.data)));
            (measure(&mut it)?, format!("stream {:?}", config.strategy))
        }
        Some((config, false)) => {
            let (packed, _) = mixpack::planned(w, mp, config)?;
            let loader = args.builder(packed).build()?;
            let mut it = loader.iter().map(|b| b.map(|b| row_counts(&b.data)));
            (measure(&mut it)?, format!("planned {:?}", config.strategy))
        }
    };
    if let Value::Object(o) = &mut report {
        o.insert("pipeline".into(), json!(name));
        o.insert("sources".into(), json!(mp.mix.len().max(1)));
        o.insert("workers".into(), json!(w.workers));
        o.insert("seq_len".into(), json!(w.seq_len));
        o.insert("batch_size".into(), json!(w.batch_size));
        o.insert("seed".into(), json!(w.seed()));
    }
    if a.json {
        outln!("{report}");
    } else {
        let f = |k: &str| report[k].as_f64().unwrap_or(0.0);
        outln!(
            "{name}: {} batches, {} rows, {} tokens ({:.2} % padding) in {:.3} s: {:.0} rows/s, {:.1} M tokens/s; first batch after {:.2} ms ({} workers)",
            report["batches"],
            report["rows"],
            report["tokens"],
            f("padding_share") * 100.0,
            f("seconds"),
            f("rows_per_s"),
            f("tokens_per_s") / 1e6,
            f("first_batch_s") * 1e3,
            w.workers
        );
    }
    Ok(())
}
