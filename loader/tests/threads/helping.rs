//! Issue 20, item 1: the consumer produces a queued batch itself while it would wait for a
//! worker, only for sources and collations that declare their calls bounded
//! ([`DataSource::reads_bounded`], [`Collate::bounded`]) and no `map`; batches stay the same, in
//! order, for every worker count and backend, and a state taken from a helped iterator resumes
//! exactly. (Issue 8's guarantee, that a `get` blocking for ever never holds the consumer, is
//! pinned unchanged by `lifecycle::issue8_drop_returns_within_a_second_while_a_get_blocks_forever`.)

use std::sync::{Arc, Mutex};
use std::time::Duration;

use guideloom_formats::TokenFormat;
use guideloom_loader::{DataSource, Loader, LoaderError, TokenWindows};
use guideloom_storage::{PreadBackend, ReadOptions, StreamWriter};

use crate::common::serial;

/// Records `0..len` (record `i` is `i * 3`), each `get` taking 1 ms and noting whether it ran
/// on a loader worker thread (`guideloom-w*`) or elsewhere (the consumer).
struct Slow {
    len: u64,
    bounded: bool,
    /// Records read outside a worker thread.
    on_consumer: Arc<Mutex<Vec<u64>>>,
}

impl DataSource for Slow {
    type Item = u64;
    fn len(&self) -> u64 {
        self.len
    }
    fn get(&self, index: u64) -> Result<u64, LoaderError> {
        if index >= self.len {
            return Err(LoaderError::IndexOutOfRange { index, len: self.len });
        }
        std::thread::sleep(Duration::from_millis(1));
        let on_worker = std::thread::current().name().is_some_and(|n| n.starts_with("guideloom-w"));
        if !on_worker {
            self.on_consumer.lock().unwrap().push(index);
        }
        Ok(index * 3)
    }
    fn reads_bounded(&self) -> bool {
        self.bounded
    }
}

/// Every batch of a 2-epoch shuffled loader over [`Slow`] as `(number, indices, data)`, and
/// the records read on the consumer thread; with `mapped`, an identity `map` is added.
#[allow(clippy::type_complexity)]
fn run_slow(workers: usize, bounded: bool, mapped: bool) -> (Vec<(u64, Vec<u64>, Vec<u64>)>, Vec<u64>) {
    let on_consumer = Arc::new(Mutex::new(Vec::new()));
    let source = Slow { len: 90, bounded, on_consumer: Arc::clone(&on_consumer) };
    let b = Loader::builder(source).shuffle(11).epochs(2).batch_size(4).workers(workers).prefetch(4);
    let batches = if mapped {
        let loader = b.map(|x, _ctx| x).build().unwrap();
        loader.iter().map(|r| r.map(|b| (b.number, b.indices, b.data))).collect::<Result<Vec<_>, _>>()
    } else {
        let loader = b.build().unwrap();
        loader.iter().map(|r| r.map(|b| (b.number, b.indices, b.data))).collect::<Result<Vec<_>, _>>()
    }
    .unwrap();
    let seen = on_consumer.lock().unwrap().clone();
    (batches, seen)
}

/// A bounded source with 1, 2 and 4 workers: the consumer reads some records itself, and the
/// batches are those of the inline loader (0 workers), numbered in order; an unbounded source,
/// or a bounded one with a `map`, is never read on the consumer thread.
#[test]
fn consumer_helps_only_bounded_sources_and_batches_stay_the_same() {
    let _g = serial();
    let (reference, inline) = run_slow(0, true, false);
    assert_eq!(reference.len(), 46); // 2 epochs of 23 batches (22 of 4, one of 2)
    assert_eq!(inline.len(), 180, "0 workers: every record is read on the consumer thread");
    assert!(reference.iter().enumerate().all(|(i, b)| b.0 == i as u64));
    assert!(reference.iter().all(|b| b.2 == b.1.iter().map(|i| i * 3).collect::<Vec<_>>()));
    for workers in [1, 2, 4] {
        let (batches, helped) = run_slow(workers, true, false);
        assert_eq!(batches, reference, "bounded, {workers} workers");
        assert!(!helped.is_empty(), "bounded, {workers} workers: the consumer never produced a batch");
        let (batches, helped) = run_slow(workers, false, false);
        assert_eq!(batches, reference, "unbounded, {workers} workers");
        assert_eq!(helped, Vec::<u64>::new(), "unbounded, {workers} workers");
        let (batches, helped) = run_slow(workers, true, true);
        assert_eq!(batches, reference, "bounded with a map, {workers} workers");
        assert_eq!(helped, Vec::<u64>::new(), "bounded with a map, {workers} workers");
    }
}

/// A state taken after every batch of a helped iterator (1 worker) resumes with exactly the
/// rest of the uninterrupted run.
#[test]
fn a_helped_iterator_resumes_exactly() {
    let _g = serial();
    let on_consumer = Arc::new(Mutex::new(Vec::new()));
    let source = Slow { len: 30, bounded: true, on_consumer: Arc::clone(&on_consumer) };
    let loader =
        Loader::builder(source).shuffle(5).epochs(2).batch_size(4).workers(1).prefetch(3).build().unwrap();
    let all: Vec<(u64, Vec<u64>)> = loader.iter().map(|b| b.map(|b| (b.number, b.data)).unwrap()).collect();
    assert_eq!(all.len(), 16);
    let mut it = loader.iter();
    for k in 0..all.len() {
        let state = it.state();
        let rest: Vec<(u64, Vec<u64>)> =
            loader.iter_from(&state).unwrap().map(|b| b.map(|b| (b.number, b.data)).unwrap()).collect();
        assert_eq!(rest, all[k..], "resumed before batch {k}");
        assert_eq!(it.next().unwrap().unwrap().number, k as u64);
    }
    assert!(it.next().is_none());
    assert!(!on_consumer.lock().unwrap().is_empty(), "the consumer never produced a batch");
}

/// The token-window fast path (a bounded source and collation over a local storage): the same
/// bytes for 0, 1, 2 and 4 workers, on the default backend and on pread, and a state taken mid
/// epoch resumes with the same batches.
#[test]
fn token_windows_give_the_same_batches_for_every_worker_count_and_backend() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let mut w = StreamWriter::open(dir.path(), TokenFormat::<u16>::new()).unwrap();
    let mut next = 0u32;
    for shard in 0..7u64 {
        let tokens: Vec<u32> = (next..next + 1_000 + 37 * shard as u32).map(|t| t % 65_536).collect();
        next += tokens.len() as u32;
        w.append(shard, &tokens).unwrap();
    }
    w.commit().unwrap();
    let run = |workers: usize, pread: bool, from: Option<u64>| -> Vec<(u64, Vec<u16>)> {
        let options = if pread {
            ReadOptions::default().backend(Arc::new(PreadBackend))
        } else {
            ReadOptions::default()
        };
        let windows = TokenWindows::<u16>::open_with(dir.path(), 129, 100, options).unwrap();
        assert!(windows.reads_bounded());
        let collate = windows.collate();
        let loader = Loader::builder(windows)
            .shuffle(3)
            .epochs(2)
            .batch_size(8)
            .workers(workers)
            .collate(collate)
            .build()
            .unwrap();
        let mut it = loader.iter();
        if let Some(k) = from {
            for _ in 0..k {
                it.next().unwrap().unwrap();
            }
            it = loader.iter_from(&it.state()).unwrap();
        }
        it.map(|b| b.map(|b| (b.number, b.data.data().to_vec())).unwrap()).collect()
    };
    let reference = run(0, false, None);
    // 7,000 + 37 * 21 = 7,777 tokens: 76 windows of 129 at stride 100, 10 batches an epoch.
    assert_eq!(reference.len(), 20);
    assert_eq!(reference[0].1.len(), 8 * 129);
    for workers in [1, 2, 4] {
        for pread in [false, true] {
            assert_eq!(run(workers, pread, None), reference, "{workers} workers, pread {pread}");
            assert_eq!(
                run(workers, pread, Some(7)),
                reference[7..],
                "{workers} workers, pread {pread}, resumed at 7"
            );
        }
    }
}
