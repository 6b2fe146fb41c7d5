//! Issue 8, items 4-7: loader lifecycles (threads, descriptors, memory), worker failures in a
//! child process, the descriptor budget with `RLIMIT_NOFILE` lowered, empty and tiny inputs.
//!
//! Tests that count threads or descriptors hold `SERIAL` (every test of this binary that
//! starts threads or opens files does), so the counts see only their own loader. Child
//! processes are this test binary re-invoked on [`child_role`] with `GUIDELOOM_LOADER_CHILD`
//! set; the parent waits for them with a generous timeout and kills them past it.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use guideloom_formats::{RawBytesFormat, TokenFormat};
use guideloom_loader::{DataSource, Documents, Loader, LoaderError, StreamWindows, VecSource};
use guideloom_storage::{DocumentWriter, StreamWriter};

use crate::common::{serial, worker_threads, worker_threads_down_to};

/// Open descriptors of this process.
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").expect("these tests need /proc/self/fd").count()
}

/// Open descriptors of this process: io_uring rings, and all others. A ring belongs to a
/// thread (closed when it exits), so the ring of an earlier test's thread that is still
/// exiting may be open when a test starts and gone when it ends.
fn fds_and_rings() -> (usize, usize) {
    let dir = std::fs::read_dir("/proc/self/fd").expect("these tests need /proc/self/fd");
    let (mut other, mut rings) = (0, 0);
    for e in dir.filter_map(Result::ok) {
        match std::fs::read_link(e.path()) {
            Ok(t) if t.to_string_lossy().contains("io_uring") => rings += 1,
            _ => other += 1,
        }
    }
    (other, rings)
}

/// Resident set size in KiB.
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("these tests need /proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/self/status")
}

/// A temporary directory, in memory where possible (the descriptor-budget storage has 5,000
/// shard files).
fn scratch_dir() -> tempfile::TempDir {
    tempfile::tempdir_in("/dev/shm").or_else(|_| tempfile::tempdir()).unwrap()
}

/// Writes a u16 token stream whose element `i` is `i % 65536`, `per_shard` tokens in each of
/// `shards` shards, committing every 250 shards (a writer keeps one descriptor per shard it
/// appended to until it commits and drops).
fn write_tokens(dir: &Path, shards: u64, per_shard: u64) {
    let mut next = 0u64;
    for first in (0..shards).step_by(250) {
        let mut w = StreamWriter::open(dir, TokenFormat::<u16>::new()).unwrap();
        for s in first..(first + 250).min(shards) {
            let tokens: Vec<u32> = (next..next + per_shard).map(|t| (t % 65_536) as u32).collect();
            w.append(s, &tokens).unwrap();
            next += per_shard;
        }
        w.finish().unwrap();
    }
}

/// Runs [`child_role`] with `role` in a child process; returns its stdout. Fails the test when
/// the child does not exit successfully within 120 s (it is killed then).
fn run_child(role: &str, env: &[(&str, String)]) -> String {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "lifecycle::child_role", "--nocapture", "--test-threads", "1", "-q"])
        .env("GUIDELOOM_LOADER_CHILD", role)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if start.elapsed() > Duration::from_secs(120) {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("child {role} {env:?} did not exit within 120 s");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "child {role} {env:?} failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

// ------------------------------------------------------------------ child side

/// 40 records; record 17 (in batch 4 with batch size 4) fails as the child's role says.
struct Failing {
    role: &'static str,
    entered: Arc<AtomicBool>,
}

impl DataSource for Failing {
    type Item = u64;
    fn len(&self) -> u64 {
        40
    }
    fn get(&self, index: u64) -> Result<u64, LoaderError> {
        if index == 17 {
            match self.role {
                "error" => return Err(LoaderError::source(index, "bad sector")),
                "panic" => panic!("record 17 is cursed"),
                _ => {
                    // A `get` that never returns and ignores the cancellation.
                    self.entered.store(true, Ordering::SeqCst);
                    loop {
                        std::thread::park();
                    }
                }
            }
        }
        Ok(index * 10)
    }
}

fn child_failure(role: &'static str, workers: usize) {
    let entered = Arc::new(AtomicBool::new(false));
    let loader = Loader::builder(Failing { role, entered: Arc::clone(&entered) })
        .batch_size(4)
        .workers(workers)
        .build()
        .unwrap();
    let mut it = loader.iter();
    for b in 0..4u64 {
        let batch = it.next().unwrap().unwrap();
        assert_eq!(batch.data, (4 * b..4 * b + 4).map(|i| i * 10).collect::<Vec<_>>());
    }
    if role == "block" {
        // Wait (bounded) until a worker sits in the blocking `get`, then drop.
        let start = Instant::now();
        while !entered.load(Ordering::SeqCst) {
            assert!(start.elapsed() < Duration::from_secs(60), "no worker reached record 17");
            std::thread::sleep(Duration::from_millis(1));
        }
        let start = Instant::now();
        drop(it);
        let took = start.elapsed();
        // The issue's bound: drop returns within 1 s while a worker is blocked forever.
        assert!(took < Duration::from_secs(1), "drop took {took:?}");
        // The blocked worker is detached, every other one joined.
        assert_eq!(worker_threads(), 1);
        println!("DROPPED");
        return;
    }
    let err = it.next().unwrap().unwrap_err();
    assert_eq!(
        (err.batch(), err.record_index(), err.is_panic()),
        (Some(4), Some(17), role == "panic"),
        "{err}"
    );
    assert!(it.next().is_none());
    drop(it);
    assert_eq!(worker_threads_down_to(0), 0);
    println!("FAILED AT 4");
}

fn child_fd_budget(dir: &Path, windows: u64) {
    let limit = libc::rlimit { rlim_cur: 256, rlim_max: 256 };
    // SAFETY: `setrlimit` reads a valid, initialized `rlimit` for this process only.
    let rc = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) };
    assert_eq!(rc, 0, "setrlimit: {}", std::io::Error::last_os_error());
    const WORKERS: usize = 4;
    let source = StreamWindows::open(dir, TokenFormat::<u16>::new(), 3).unwrap();
    assert_eq!(source.len(), windows);
    let loader = Loader::builder(source).shuffle(7).batch_size(64).workers(WORKERS).build().unwrap();
    let baseline = open_fds();
    // A sampling thread watches the count while reads are in flight (its own `read_dir` of
    // /proc/self/fd holds one descriptor).
    let stop = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let sampler = {
        let (stop, peak) = (Arc::clone(&stop), Arc::clone(&peak));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                peak.fetch_max(open_fds(), Ordering::Relaxed);
            }
        })
    };
    let mut seen = vec![false; windows as usize];
    let mut batches = 0;
    for batch in loader.iter() {
        let batch = batch.unwrap();
        for (w, tokens) in batch.indices.iter().zip(&batch.data) {
            let t = 3 * w;
            assert_eq!(*tokens, [t, t + 1, t + 2].map(|v| (v % 65_536) as u16));
            assert!(!std::mem::replace(&mut seen[*w as usize], true), "window {w} twice");
        }
        batches += 1;
    }
    stop.store(true, Ordering::Relaxed);
    sampler.join().unwrap();
    let peak = peak.load(Ordering::Relaxed);
    assert_eq!(batches, windows.div_ceil(64));
    assert!(seen.iter().all(|&s| s), "the epoch visits every window");
    // The reader's LRU (128 descriptors); per reading thread at most one more pinned, one
    // io_uring ring and one being opened before an eviction closes another; the sampler's
    // own descriptor. Well under the 256 the process may hold, so a leak or a larger cache
    // shows here rather than only as EMFILE (measured: 142 with a baseline of 6).
    let bound = baseline + 128 + 3 * WORKERS + 1;
    assert!(peak <= bound, "peak {peak} descriptors, baseline {baseline}, bound {bound}");
    println!("EPOCH {windows} MAXFDS {peak} BASELINE {baseline}");
}

/// The child side of this binary's process tests; a no-op in a normal run.
#[test]
fn child_role() {
    let Ok(role) = std::env::var("GUIDELOOM_LOADER_CHILD") else { return };
    let workers = std::env::var("GUIDELOOM_LOADER_WORKERS").map_or(1, |w| w.parse().unwrap());
    match role.as_str() {
        "error" => child_failure("error", workers),
        "panic" => child_failure("panic", workers),
        "block" => child_failure("block", workers),
        "fd-budget" => {
            let dir = std::env::var("GUIDELOOM_LOADER_DIR").unwrap();
            let windows = std::env::var("GUIDELOOM_LOADER_WINDOWS").unwrap().parse().unwrap();
            child_fd_budget(Path::new(&dir), windows)
        }
        other => panic!("unknown child role {other}"),
    }
}

// ------------------------------------------------------------------ 4. lifecycles

/// Item 4: 1,000 cycles of open storage / build / iterate 3 batches / drop with 4 workers:
/// worker threads and open descriptors return to their start values, and RSS grows by less
/// than 4 MiB between cycle 50 and cycle 1,000.
#[test]
fn thousand_build_iterate_drop_cycles_leak_nothing() {
    let _g = serial();
    let tmp = scratch_dir();
    write_tokens(tmp.path(), 8, 500);
    let cycle = || {
        let source = StreamWindows::open(tmp.path(), TokenFormat::<u16>::new(), 16).unwrap();
        let loader = Loader::builder(source).shuffle(3).batch_size(8).workers(4).prefetch(4).build().unwrap();
        let mut it = loader.iter();
        let firsts: Vec<Vec<u64>> = (0..3).map(|_| it.next().unwrap().unwrap().indices).collect();
        firsts
    };
    let (threads, (fds, rings)) = (worker_threads(), fds_and_rings());
    let reference = cycle();
    assert_eq!(reference.iter().map(Vec::len).collect::<Vec<_>>(), [8, 8, 8]);
    let mut rss_at_50 = 0;
    for i in 1..1_000 {
        assert_eq!(cycle(), reference, "cycle {i}");
        if i == 50 {
            rss_at_50 = rss_kib();
        }
    }
    let growth = rss_kib().saturating_sub(rss_at_50);
    eprintln!("lifecycle: 1000 cycles, RSS growth {growth} KiB after cycle 50");
    assert_eq!(worker_threads_down_to(threads), threads, "worker threads after 1,000 cycles");
    let (fds_after, rings_after) = fds_and_rings();
    assert_eq!(fds_after, fds, "open descriptors (rings aside) after 1,000 cycles");
    assert!(rings_after <= rings, "io_uring rings after 1,000 cycles: {rings_after}, at the start {rings}");
    assert!(growth < 4 * 1024, "RSS grew by {growth} KiB");
}

// ------------------------------------------------------------------ 5. worker failures

/// Item 5: an error and a panic in a worker's `get` (record 17, batch 4), with 1 and 4
/// workers, each in a child process: batches 0-3 exact, then `Err` at batch 4 naming record
/// 17, then the end; no worker thread remains; the process exits cleanly.
#[test]
fn worker_error_and_panic_end_at_the_failing_batch_in_a_child_process() {
    let _g = serial();
    for role in ["error", "panic"] {
        for workers in [1, 4] {
            let out = run_child(role, &[("GUIDELOOM_LOADER_WORKERS", workers.to_string())]);
            assert!(out.contains("FAILED AT 4"), "{role} x{workers}: {out}");
        }
    }
}

/// Item 5, and the regression test of the bug it found: a worker `get` that blocks forever and
/// ignores the cancellation used to make dropping the iterator hang (the pool joined every
/// worker). With 1 and 4 workers, in a child process: drop returns within 1 s, the blocked
/// worker is the only thread left (detached), and the process exits cleanly.
#[test]
fn issue8_drop_returns_within_a_second_while_a_get_blocks_forever() {
    let _g = serial();
    for workers in [1, 4] {
        let out = run_child("block", &[("GUIDELOOM_LOADER_WORKERS", workers.to_string())]);
        assert!(out.contains("DROPPED"), "x{workers}: {out}");
    }
}

// ------------------------------------------------------------------ 6. descriptor budget

/// Item 6: 5,000 shards of 4 tokens, shuffled 3-token windows (most cross a shard boundary),
/// 4 workers, in a child process with `RLIMIT_NOFILE` lowered to 256: the epoch completes,
/// every window is exact and visited once, and a sampling thread never sees more descriptors
/// than the reader's LRU (`ReadOptions::max_open_files`, 128) plus three per worker (pinned,
/// ring, opening) above the baseline.
#[test]
fn five_thousand_shards_complete_an_epoch_under_256_descriptors() {
    let _g = serial();
    let tmp = scratch_dir();
    write_tokens(tmp.path(), 5_000, 4);
    let windows = (20_000 - 3) / 3 + 1;
    let out = run_child(
        "fd-budget",
        &[
            ("GUIDELOOM_LOADER_DIR", tmp.path().display().to_string()),
            ("GUIDELOOM_LOADER_WINDOWS", windows.to_string()),
        ],
    );
    assert!(out.contains(&format!("EPOCH {windows} ")), "{out}");
    eprintln!("fd budget: {}", out.lines().find(|l| l.starts_with("EPOCH")).unwrap_or(""));
}

// ------------------------------------------------------------------ 7. empty and tiny inputs

/// All batches of a loader over `source`, as record index lists; checks that none is empty.
fn batches<S: DataSource + 'static>(
    source: S,
    batch_size: u64,
    drop_remainder: bool,
    epochs: Option<u64>,
    workers: usize,
) -> (u64, Vec<Vec<u64>>)
where
    S::Item: 'static,
{
    let b = Loader::builder(source)
        .shuffle(5)
        .batch_size(batch_size)
        .drop_remainder(drop_remainder)
        .workers(workers);
    let b = match epochs {
        Some(e) => b.epochs(e),
        None => b.unbounded(),
    };
    let loader = b.build().unwrap();
    let mut it = loader.iter();
    let all: Vec<Vec<u64>> = it.by_ref().map(|r| r.unwrap().indices).collect();
    if all.is_empty() {
        // Counted while the iterator is alive: a loader with no batch starts no thread
        // (dropping the iterator would join any it had started).
        assert_eq!(worker_threads(), 0, "an empty loader started a thread");
    }
    drop(it);
    assert!(all.iter().all(|b| !b.is_empty()), "an empty batch");
    assert_eq!(loader.iter_from(&loader.initial_state()).unwrap().count(), all.len());
    (loader.len(), all)
}

/// Regression (issue 8): an empty source used to be refused by `build` with `InvalidConfig`;
/// now an empty storage, a storage of only empty shards, and a stream shorter than one window
/// build a loader with `len() == 0` that yields no batch, over 1 or 3 epochs and unbounded,
/// with 0, 1 or 4 workers.
#[test]
fn issue8_empty_inputs_build_and_yield_zero_batches() {
    let _g = serial();
    let empty = scratch_dir();
    StreamWriter::open(empty.path(), TokenFormat::<u16>::new()).unwrap().finish().unwrap();
    let empty_shards = scratch_dir();
    let mut w = StreamWriter::open(empty_shards.path(), TokenFormat::<u16>::new()).unwrap();
    w.append(0, &[]).unwrap();
    w.append(3, &[]).unwrap();
    w.finish().unwrap();
    let short = scratch_dir();
    let mut w = StreamWriter::open(short.path(), TokenFormat::<u16>::new()).unwrap();
    w.append(0, &[1, 2]).unwrap();
    w.append(1, &[3]).unwrap();
    w.finish().unwrap();
    let no_docs = scratch_dir();
    DocumentWriter::open(no_docs.path(), RawBytesFormat).unwrap().finish().unwrap();
    for epochs in [Some(1), Some(3), None] {
        for workers in [0, 1, 4] {
            for dir in [empty.path(), empty_shards.path(), short.path()] {
                let source = StreamWindows::open(dir, TokenFormat::<u16>::new(), 4).unwrap();
                assert_eq!(source.len(), 0);
                assert_eq!(batches(source, 2, false, epochs, workers), (0, vec![]));
            }
            let docs = Documents::open(no_docs.path(), RawBytesFormat).unwrap();
            assert_eq!(batches(docs, 2, true, epochs, workers), (0, vec![]));
            assert_eq!(batches(VecSource::new(Vec::<u8>::new()), 3, false, epochs, workers), (0, vec![]));
        }
    }
    assert_eq!(worker_threads(), 0, "an empty loader starts no thread");
}

/// Fewer records than the batch size: one short batch per epoch without drop-remainder, zero
/// batches with it (a regression: that used to be `InvalidConfig`); more workers than batches
/// gives the exact batches and ends.
#[test]
fn issue8_tiny_inputs_give_one_short_batch_or_none() {
    let _g = serial();
    let tmp = scratch_dir();
    write_tokens(tmp.path(), 2, 10); // 20 tokens: 5 windows of 4
    let open = || StreamWindows::open(tmp.path(), TokenFormat::<u16>::new(), 4).unwrap();
    for workers in [0, 1, 8] {
        let (len, all) = batches(open(), 8, false, Some(2), workers);
        assert_eq!(len, 1);
        assert_eq!(all.len(), 2);
        for b in &all {
            let mut sorted = b.clone();
            sorted.sort();
            assert_eq!(sorted, [0, 1, 2, 3, 4]);
        }
        assert_eq!(batches(open(), 8, true, Some(2), workers), (0, vec![]));
        assert_eq!(batches(open(), 8, true, None, workers), (0, vec![]));
        // More workers than batches: 5 windows in batches of 2, 2 and 1.
        let (len, all) = batches(open(), 2, false, Some(1), workers);
        assert_eq!(len, 3);
        assert_eq!(all.iter().map(Vec::len).collect::<Vec<_>>(), [2, 2, 1]);
        let mut flat: Vec<u64> = all.concat();
        flat.sort();
        assert_eq!(flat, [0, 1, 2, 3, 4]);
        let (len, all) = batches(open(), 2, true, Some(1), workers);
        assert_eq!((len, all.iter().map(Vec::len).collect::<Vec<_>>()), (2, vec![2, 2]));
    }
    assert_eq!(worker_threads_down_to(0), 0);
}
