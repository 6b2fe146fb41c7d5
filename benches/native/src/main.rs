//! Benchmark programs for `benches/run.sh` (one binary, subcommands; every result is one JSON
//! line on stdout).
//!
//! - `mkdata SRC_STORAGE u16|u32 BYTES SHARDS OUT_STORAGE [OUT_BIN]`: repeats the token stream
//!   of an ingested storage to BYTES bytes and writes it as a guideloom stream storage with
//!   SHARDS shards and (optionally) as a raw little-endian `.bin` numpy can memmap.
//! - `raw BIN u16|u32 SEQ BATCH THREADS MAX_BATCHES(0 = epoch) SEED mmap|mmap-lazy|pread|direct`: the raw
//!   limit: shuffled non-overlapping windows copied into one batch buffer per thread (memcpy out
//!   of an mmap, or one pread per window, or O_DIRECT pread of the aligned span + copy), thread t
//!   of T reading batches t, t + T, ... (no lock, no shared counter, the reader chosen once), the
//!   batch summed in the buffer it was copied into. benches/raw_limit.c is its check in C.
//! - `lib DIR u16|u32 SEQ BATCH WORKERS MAX_BATCHES(0 = epoch) SEED`: guideloom through the
//!   library's token-window fast path: `TokenWindows` + `Loader` (shuffle, `windows.collate()`:
//!   one read per batch into the `[B, L]` buffer); backend from `GUIDELOOM_IO`.
//!   `lib-generic ...`: the generic path, `StreamWindows` (a `Vec` per window) + `StackTokens`.
//! - `lib-mapped DIR u16|u32 SEQ BATCH WORKERS MAX_BATCHES SEED`: zero-copy batches
//!   (`TokenWindows::mapped_collate`: views into the mapped shards), summed in place.
//! - `cpu-map RECORDS ROUNDS BATCH WORKERS SEED`: scaling with a CPU-heavy `map` (a fixed
//!   integer-hash chain per record), over record indices (no I/O).
//! - `resume DIR u16|u32 SEQ BATCH POSITION`: checkpoint size at batch POSITION and the time of
//!   `iter_from(state)` + first batch in a fresh loader (no replay), checked against
//!   `Loader::batch(POSITION)`.
//!
//! Every reader sums all token ids it delivers (`checksum`); over one epoch the sum is the sum of
//! the first `windows * SEQ` tokens whatever the order.
use std::fs::File;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use guideloom_formats::{TokenElement, TokenFormat};
use guideloom_loader::{Loader, StackTokens, State, StreamWindows, TokenWindows};
use guideloom_storage::StreamWriter;
use serde_json::json;

fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let n = |i: usize| -> u64 { a[i].parse().unwrap_or_else(|_| panic!("argument {i} `{}` is not a number", a[i])) };
    match (a.first().map(String::as_str), a.get(2).map(String::as_str)) {
        (Some("mkdata"), Some("u16")) => mkdata::<u16>(&a[1], n(3), n(4), &a[5], a.get(6)),
        (Some("mkdata"), Some("u32")) => mkdata::<u32>(&a[1], n(3), n(4), &a[5], a.get(6)),
        (Some("raw"), Some("u16")) => raw::<u16>(&a[1], n(3), n(4), n(5), n(6), n(7), &a[8]),
        (Some("raw"), Some("u32")) => raw::<u32>(&a[1], n(3), n(4), n(5), n(6), n(7), &a[8]),
        (Some("cpu-map"), _) => cpu_map(n(1), n(2), n(3), n(4), n(5)),
        (Some("lib-mapped"), Some("u16")) => lib_mapped::<u16>(&a[1], n(3), n(4), n(5), n(6), n(7)),
        (Some("lib-mapped"), Some("u32")) => lib_mapped::<u32>(&a[1], n(3), n(4), n(5), n(6), n(7)),
        (Some(c @ ("lib" | "lib-generic")), Some("u16")) => lib::<u16>(c == "lib", &a[1], n(3), n(4), n(5), n(6), n(7)),
        (Some(c @ ("lib" | "lib-generic")), Some("u32")) => lib::<u32>(c == "lib", &a[1], n(3), n(4), n(5), n(6), n(7)),
        (Some("resume"), Some("u16")) => resume::<u16>(&a[1], n(3), n(4), n(5)),
        (Some("resume"), Some("u32")) => resume::<u32>(&a[1], n(3), n(4), n(5)),
        _ => {
            eprintln!("usage: see the doc comment of benches/native/src/main.rs");
            std::process::exit(2);
        }
    }
}

/// The committed element counts of a stream storage's shards, in shard order.
fn shard_elements(dir: &Path) -> Vec<(std::path::PathBuf, u64)> {
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).expect("manifest")).expect("json");
    m["shards"]
        .as_array()
        .expect("shards")
        .iter()
        .map(|s| {
            let id = s["id"].as_u64().expect("id");
            (dir.join(format!("shard-{id:05}.stream")), s["elements"].as_u64().expect("elements"))
        })
        .collect()
}

trait Tok:
    TokenElement + bytemuck::Pod + Copy + Into<u64> + Default + Send + Sync + PartialEq + std::fmt::Debug + 'static
{
    const SIZE: usize;
}
impl Tok for u16 {
    const SIZE: usize = 2;
}
impl Tok for u32 {
    const SIZE: usize = 4;
}

fn mkdata<T: Tok>(src: &str, bytes: u64, shards: u64, out: &str, bin: Option<&String>) {
    // The source stream, all shards concatenated (raw little-endian elements).
    let mut stream: Vec<u8> = Vec::new();
    for (p, el) in shard_elements(Path::new(src)) {
        let b = std::fs::read(&p).expect("shard");
        stream.extend_from_slice(&b[..el as usize * T::SIZE]);
    }
    assert!(!stream.is_empty(), "empty source storage");
    let ids: Vec<u32> = stream
        .chunks_exact(T::SIZE)
        .map(|c| if T::SIZE == 2 { u16::from_le_bytes([c[0], c[1]]) as u32 } else { u32::from_le_bytes([c[0], c[1], c[2], c[3]]) })
        .collect();
    let total = bytes / T::SIZE as u64;
    let _ = std::fs::remove_dir_all(out);
    let mut w = StreamWriter::open(out, TokenFormat::<T>::new()).expect("writer");
    let mut binw = bin.map(|p| std::io::BufWriter::with_capacity(8 << 20, File::create(p).expect("bin")));
    let per_shard = total.div_ceil(shards);
    let (mut pos, mut written, mut sum) = (0usize, 0u64, 0u64);
    while written < total {
        let shard = written / per_shard;
        let n = ((ids.len() - pos) as u64).min(total - written).min((shard + 1) * per_shard - written) as usize;
        let chunk = &ids[pos..pos + n];
        w.append(shard, chunk).expect("append");
        if let Some(bw) = binw.as_mut() {
            use std::io::Write;
            bw.write_all(&stream[pos * T::SIZE..(pos + n) * T::SIZE]).expect("write bin");
        }
        sum += chunk.iter().map(|&t| t as u64).sum::<u64>();
        written += n as u64;
        pos = (pos + n) % ids.len();
    }
    w.commit().expect("commit");
    if let Some(mut bw) = binw {
        use std::io::Write;
        bw.flush().expect("flush");
    }
    println!("{}", json!({"tokens": total, "source_tokens": ids.len(), "shards": shards, "sum": sum.to_string()}));
}

fn splitmix(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The sum of `xs` modulo 2^64: `guideloom_formats::sum_ids`, the function `guideloom bench`
/// sums with, so the raw limit and every guideloom reader here sum with equal code compiled for
/// the same target (benches/run.sh builds this program and the CLI with `-C target-cpu=native`).
fn sum_tokens<T: Tok>(xs: &[T]) -> u64 {
    guideloom_formats::sum_ids(xs)
}

/// The same ids, read as little-endian `T`s from bytes of any alignment (zero-copy views).
fn sum_le_bytes<T: Tok>(bytes: &[u8]) -> u64 {
    match bytemuck::try_cast_slice::<u8, T>(bytes) {
        Ok(xs) => sum_tokens(xs),
        Err(_) => {
            let n = bytes.len() / T::SIZE;
            let mut v = vec![T::default(); n];
            bytemuck::cast_slice_mut::<T, u8>(&mut v).copy_from_slice(&bytes[..n * T::SIZE]);
            sum_tokens(&v)
        }
    }
}

/// A page-aligned buffer of `len` bytes (O_DIRECT reads need one).
struct Aligned(*mut u8, usize);
impl Aligned {
    fn new(len: usize) -> Self {
        let layout = std::alloc::Layout::from_size_align(len.max(4096), 4096).expect("layout");
        // SAFETY: non-zero size.
        Aligned(unsafe { std::alloc::alloc_zeroed(layout) }, len.max(4096))
    }
    fn slice(&mut self) -> &mut [u8] {
        // SAFETY: allocated with len bytes above, exclusively owned.
        unsafe { std::slice::from_raw_parts_mut(self.0, self.1) }
    }
}
impl Drop for Aligned {
    fn drop(&mut self) {
        // SAFETY: same layout as allocated.
        unsafe { std::alloc::dealloc(self.0, std::alloc::Layout::from_size_align(self.1, 4096).unwrap()) }
    }
}

/// How the raw limit copies one window into its batch buffer; chosen once, before the threads
/// start (each reader is its own monomorphized loop: no per-window dispatch).
trait Copier: Sync {
    fn copy(&self, dst: &mut [u8], off: usize, scratch: &mut Aligned);
}

/// memcpy out of a map (populated up front or faulted on first touch).
struct MapCopy<'a>(&'a [u8]);
impl Copier for MapCopy<'_> {
    #[inline(always)]
    fn copy(&self, dst: &mut [u8], off: usize, _: &mut Aligned) {
        dst.copy_from_slice(&self.0[off..off + dst.len()]);
    }
}

/// One pread per window.
struct PreadCopy<'a>(&'a File);
impl Copier for PreadCopy<'_> {
    #[inline(always)]
    fn copy(&self, dst: &mut [u8], off: usize, _: &mut Aligned) {
        self.0.read_exact_at(dst, off as u64).expect("pread");
    }
}

/// O_DIRECT pread of the window's aligned span, then a copy.
struct DirectCopy<'a>(&'a File);
impl Copier for DirectCopy<'_> {
    fn copy(&self, dst: &mut [u8], off: usize, scratch: &mut Aligned) {
        let a = off & !4095;
        let e = (off + dst.len() + 4095) & !4095;
        let sb = &mut scratch.slice()[..e - a];
        let mut got = 0;
        while got < sb.len() {
            let r = self.0.read_at(&mut sb[got..], (a + got) as u64).expect("pread O_DIRECT");
            if r == 0 {
                break;
            }
            got += r;
        }
        dst.copy_from_slice(&sb[off - a..off - a + dst.len()]);
    }
}

/// The shape of one raw-limit run.
#[derive(Clone, Copy)]
struct RawRun {
    t0: Instant,
    len: u64,
    seq: u64,
    batch: u64,
    threads: u64,
    max_batches: u64,
    seed: u64,
}

fn raw<T: Tok>(path: &str, seq: u64, batch: u64, threads: u64, max_batches: u64, seed: u64, method: &str) {
    let t0 = Instant::now();
    let file = if method == "direct" {
        std::fs::OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(path).expect("open O_DIRECT")
    } else {
        File::open(path).expect("open")
    };
    // SAFETY: the data file is not modified while mapped.
    // `mmap` pre-faults the whole mapping (MAP_POPULATE, counted in the first-batch time);
    // `mmap-lazy` faults pages on first touch (the cold-cache case).
    let map = match method {
        "mmap" => Some(unsafe { memmap2::MmapOptions::new().populate().map(&file) }.expect("mmap")),
        "mmap-lazy" => Some(unsafe { memmap2::Mmap::map(&file) }.expect("mmap")),
        "pread" | "direct" => None,
        other => panic!("unknown raw method `{other}` (mmap, mmap-lazy, pread, direct)"),
    };
    let run = RawRun { t0, len: file.metadata().expect("stat").len(), seq, batch, threads, max_batches, seed };
    let (total, n, w, checksum, first_s) = match &map {
        Some(m) => raw_run::<T, _>(&MapCopy(m), run),
        None if method == "pread" => raw_run::<T, _>(&PreadCopy(&file), run),
        None => raw_run::<T, _>(&DirectCopy(&file), run),
    };
    let seconds = t0.elapsed().as_secs_f64();
    println!(
        "{}",
        json!({"batches": total, "windows": w, "tokens": w * seq, "seconds": seconds,
               "first_batch_s": first_s.min(seconds), "checksum": checksum.to_string(),
               "epoch_windows": n, "method": method, "threads": threads.max(1)})
    );
}

/// The raw limit's loop: thread `t` of `threads` reads batches `t, t + threads, ...` (no
/// shared counter, no lock), copying each batch's shuffled, non-overlapping windows into its
/// one batch buffer and summing it there. Returns (batches, epoch windows, windows read,
/// checksum, first batch seconds).
fn raw_run<T: Tok, C: Copier>(copier: &C, r: RawRun) -> (u64, u64, u64, u64, f64) {
    let (seq, batch) = (r.seq, r.batch);
    let wbytes = seq as usize * T::SIZE;
    let n = r.len / wbytes as u64;
    // Fisher-Yates over the window numbers.
    let mut perm: Vec<u64> = (0..n).collect();
    let mut s = r.seed;
    for i in (1..n as usize).rev() {
        let j = (splitmix(&mut s) % (i as u64 + 1)) as usize;
        perm.swap(i, j);
    }
    let total = if r.max_batches == 0 { n.div_ceil(batch) } else { r.max_batches };
    let threads = r.threads.max(1);
    let first_ns = AtomicU64::new(u64::MAX);
    let per: Vec<(u64, u64)> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let (perm, first_ns) = (&perm, &first_ns);
                sc.spawn(move || {
                    let mut buf = vec![T::default(); batch as usize * seq as usize];
                    let mut scratch = Aligned::new(wbytes + 8192);
                    let (mut checksum, mut windows) = (0u64, 0u64);
                    let mut b = t;
                    while b < total {
                        let lo = ((b * batch) % n) as usize;
                        let hi = (lo + batch as usize).min(n as usize);
                        let rows = hi - lo;
                        let out = bytemuck::cast_slice_mut::<T, u8>(&mut buf[..rows * seq as usize]);
                        for (dst, &w) in out.chunks_exact_mut(wbytes).zip(&perm[lo..hi]) {
                            copier.copy(dst, w as usize * wbytes, &mut scratch);
                        }
                        checksum = checksum.wrapping_add(sum_tokens(&buf[..rows * seq as usize]));
                        if windows == 0 {
                            first_ns.fetch_min(r.t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
                        }
                        windows += rows as u64;
                        b += threads;
                    }
                    (checksum, windows)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("raw thread")).collect()
    });
    let checksum = per.iter().fold(0u64, |a, p| a.wrapping_add(p.0));
    let windows = per.iter().map(|p| p.1).sum();
    (total, n, windows, checksum, first_ns.load(Ordering::Relaxed) as f64 * 1e-9)
}

fn lib<T: Tok>(fast: bool, dir: &str, seq: u64, batch: u64, workers: u64, max_batches: u64, seed: u64) {
    if fast {
        // The token-window fast path: one read of the whole batch into its [B, L] buffer.
        let t0 = Instant::now();
        let windows = TokenWindows::<T>::open(dir, seq).expect("open storage");
        let open_s = t0.elapsed().as_secs_f64();
        let collate = windows.collate();
        let loader = Loader::builder(windows)
            .shuffle(seed)
            .epochs(1)
            .batch_size(batch)
            .workers(workers as usize)
            .collate(collate)
            .build()
            .expect("loader");
        let epoch_windows = guideloom_loader::DataSource::len(loader.source());
        consume(t0, open_s, epoch_windows, seq, max_batches, loader.iter().map(|b| b.expect("batch").data));
    } else {
        // The generic path: a Vec per window (StreamWindows), stacked by StackTokens.
        let t0 = Instant::now();
        let windows = StreamWindows::open(dir, TokenFormat::<T>::new(), seq).expect("open storage");
        let open_s = t0.elapsed().as_secs_f64();
        let loader = Loader::builder(windows)
            .shuffle(seed)
            .epochs(1)
            .batch_size(batch)
            .workers(workers as usize)
            .collate(StackTokens)
            .build()
            .expect("loader");
        let epoch_windows = guideloom_loader::DataSource::len(loader.source());
        consume(t0, open_s, epoch_windows, seq, max_batches, loader.iter().map(|b| b.expect("batch").data));
    }
}

/// A fixed amount of real CPU work for record `i`: `rounds` steps of a dependent integer hash
/// chain (the same function as `benches/burn_loader cpu-map`; ~20 µs at 12,000 rounds here).
fn work(i: u64, rounds: u64) -> u64 {
    let mut h = i ^ 0x9e37_79b9_7f4a_7c15;
    for _ in 0..rounds {
        h = h.wrapping_mul(0x0100_0000_01b3) ^ (h >> 29);
    }
    h
}

/// `cpu-map RECORDS ROUNDS BATCH WORKERS SEED`: a loader over record indices whose `map` costs
/// `work(i, ROUNDS)` (shuffled, batch BATCH, WORKERS threads); the consumer sums the results.
fn cpu_map(n: u64, rounds: u64, batch: u64, workers: u64, seed: u64) {
    let t0 = Instant::now();
    let loader = Loader::builder(guideloom_loader::RangeSource::new(0, n as i64, 1).expect("range"))
        .shuffle(seed)
        .epochs(1)
        .batch_size(batch)
        .workers(workers as usize)
        .map(move |i, _| work(i as u64, rounds))
        .build()
        .expect("loader");
    let mut first = None;
    let (mut batches, mut records, mut checksum) = (0u64, 0u64, 0u64);
    for b in loader.iter() {
        let b = b.expect("batch");
        checksum = b.data.iter().fold(checksum, |a, &x| a.wrapping_add(x));
        first.get_or_insert_with(|| t0.elapsed().as_secs_f64());
        batches += 1;
        records += b.data.len() as u64;
    }
    let seconds = t0.elapsed().as_secs_f64();
    println!(
        "{}",
        json!({"batches": batches, "windows": records, "seconds": seconds, "first_batch_s": first.unwrap_or(seconds),
               "checksum": checksum.to_string(), "epoch_windows": n})
    );
}

/// Zero-copy batches: `TokenWindows::mapped_collate` hands each batch out as views into the
/// mapped shards; the consumer sums the ids in place (no copy into a batch buffer).
fn lib_mapped<T: Tok>(dir: &str, seq: u64, batch: u64, workers: u64, max_batches: u64, seed: u64) {
    let t0 = Instant::now();
    let windows = TokenWindows::<T>::open(dir, seq).expect("open storage");
    let open_s = t0.elapsed().as_secs_f64();
    // SAFETY: the benchmark's data sets are written once before the runs; nothing truncates or
    // rewrites them while this program maps them.
    let collate = windows.mapped_collate(unsafe { guideloom_storage::MmapBackend::new() });
    let loader = Loader::builder(windows)
        .shuffle(seed)
        .epochs(1)
        .batch_size(batch)
        .workers(workers as usize)
        .collate(collate)
        .build()
        .expect("loader");
    let epoch_windows = guideloom_loader::DataSource::len(loader.source());
    let mut first = None;
    let (mut n, mut wins, mut checksum) = (0u64, 0u64, 0u64);
    for b in loader.iter() {
        let b = b.expect("batch");
        for part in b.data.parts() {
            checksum = checksum.wrapping_add(sum_le_bytes::<T>(part));
        }
        first.get_or_insert_with(|| t0.elapsed().as_secs_f64());
        n += 1;
        wins += b.data.len() as u64;
        if max_batches > 0 && n >= max_batches {
            break;
        }
    }
    let seconds = t0.elapsed().as_secs_f64();
    println!(
        "{}",
        json!({"batches": n, "windows": wins, "tokens": wins * seq, "seconds": seconds, "open_s": open_s,
               "first_batch_s": first.unwrap_or(seconds), "checksum": checksum.to_string(), "epoch_windows": epoch_windows,
               "backend": "mmap (zero-copy views)"})
    );
}

fn consume<T: Tok>(
    t0: Instant,
    open_s: f64,
    epoch_windows: u64,
    seq: u64,
    max_batches: u64,
    batches: impl Iterator<Item = guideloom_loader::TokenBatch<T>>,
) {
    let mut first = None;
    let (mut n, mut wins, mut checksum) = (0u64, 0u64, 0u64);
    for b in batches {
        checksum = checksum.wrapping_add(sum_tokens(b.data()));
        first.get_or_insert_with(|| t0.elapsed().as_secs_f64());
        n += 1;
        wins += b.shape()[0] as u64;
        if max_batches > 0 && n >= max_batches {
            break;
        }
    }
    let seconds = t0.elapsed().as_secs_f64();
    println!(
        "{}",
        json!({"batches": n, "windows": wins, "tokens": wins * seq, "seconds": seconds, "open_s": open_s,
               "first_batch_s": first.unwrap_or(seconds), "checksum": checksum.to_string(), "epoch_windows": epoch_windows,
               "backend": std::env::var("GUIDELOOM_IO").unwrap_or_else(|_| "auto".into())})
    );
}

fn resume<T: Tok>(dir: &str, seq: u64, batch: u64, position: u64) {
    let build = || {
        let windows = StreamWindows::open(dir, TokenFormat::<T>::new(), seq).expect("open storage");
        Loader::builder(windows).shuffle(1).unbounded().batch_size(batch).collate(StackTokens).build().expect("loader")
    };
    // The checkpoint a training loop would have written at batch POSITION (the state is a pure
    // function of the position, so it is made directly instead of iterating POSITION batches).
    let mut v: serde_json::Value = serde_json::from_str(&build().initial_state().to_json()).expect("state json");
    v["next_batch"] = json!(position);
    let text = v.to_string();
    let t0 = Instant::now();
    let state = State::from_json(&text).expect("state");
    let loader = build();
    let mut it = loader.iter_from(&state).expect("iter_from");
    let b = it.next().expect("batch").expect("read");
    let resume_s = t0.elapsed().as_secs_f64();
    let expect = loader.batch(position).expect("in range").expect("read");
    assert_eq!(b.data.data(), expect.data.data(), "resumed batch differs from batch {position}");
    println!("{}", json!({"position": position, "state_bytes": text.len(), "resume_s": resume_s}));
}
