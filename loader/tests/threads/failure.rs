//! Acceptance item 6: failures reach the consumer in order; nothing hangs; no thread remains.
//!
//! Every test here holds `SERIAL` so that the worker-thread counts (threads named
//! `guideloom-w*`, read from `/proc/self/task`) see only the test's own loader.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use guideloom_loader::{Cancellation, DataSource, Loader, LoaderError};

use crate::common::{serial, worker_threads, worker_threads_down_to};

/// An error and its causes, joined by ": " (a variant that exposes its cause through
/// `source()` does not repeat it in its own message).
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        out = format!("{out}: {c}");
        cause = c.source();
    }
    out
}

#[derive(Clone, Copy)]
enum Fault {
    Error,
    Panic,
}

/// 20 records; record 7 fails.
struct Faulty(Fault);

impl DataSource for Faulty {
    type Item = u64;
    fn len(&self) -> u64 {
        20
    }
    fn get(&self, index: u64) -> Result<u64, LoaderError> {
        if index == 7 {
            match self.0 {
                Fault::Error => return Err(LoaderError::source(index, "bad sector")),
                Fault::Panic => panic!("record 7 is cursed"),
            }
        }
        Ok(index)
    }
}

/// Record 7 of 20 fails (error, then panic) with 4 workers, batch 4: the consumer gets batch 0,
/// then `Err` for batch 1 naming record 7, then `None`; worker threads are gone after drop.
#[test]
fn failing_record_ends_the_iterator_at_its_batch() {
    let _g = serial();
    for fault in [Fault::Error, Fault::Panic] {
        let before = worker_threads();
        let loader =
            Loader::builder(Faulty(fault)).batch_size(4).workers(4).prefetch(4).build().expect("valid");
        let mut it = loader.iter();
        assert_eq!(it.next().expect("batch 0").expect("ok").data, [0, 1, 2, 3]);
        let err = it.next().expect("batch 1").expect_err("record 7 fails");
        assert_eq!((err.batch(), err.record_index()), (Some(1), Some(7)), "{err}");
        assert_eq!(err.is_panic(), matches!(fault, Fault::Panic));
        match fault {
            Fault::Error => assert_eq!(chain(&err), "batch 1 (epoch 0): record 7: bad sector"),
            Fault::Panic => {
                assert_eq!(chain(&err), "batch 1 (epoch 0): panicked on record 7: record 7 is cursed")
            }
        }
        assert!(it.next().is_none());
        assert_eq!(it.state().next_batch, 1, "the failed batch is not counted as received");
        assert_eq!(worker_threads_down_to(before), before, "the pool is joined once the error is delivered");
        drop(it);
        assert_eq!(worker_threads_down_to(before), before);
    }
}

/// The same faults inline (0 workers) and shuffled: the `Err` arrives at the place of the batch
/// that holds record 7, after all earlier batches.
#[test]
fn failure_place_is_the_same_inline_and_shuffled() {
    let _g = serial();
    for workers in [0, 3] {
        let loader = Loader::builder(Faulty(Fault::Error))
            .shuffle(11)
            .batch_size(3)
            .workers(workers)
            .build()
            .expect("valid");
        let bad = (0..loader.len())
            .find(|&k| loader.sampler().batch(k).expect("exists").indices.contains(&7))
            .expect("record 7 is in some batch");
        let results: Vec<_> = loader.iter().collect();
        assert_eq!(results.len() as u64, bad + 1);
        assert!(results[..bad as usize].iter().all(Result::is_ok));
        let err = results[bad as usize].as_ref().expect_err("fails");
        assert_eq!((err.batch(), err.record_index()), (Some(bad), Some(7)));
    }
}

/// A map function that fails or panics names its record too.
#[test]
fn map_failures_name_the_record() {
    let _g = serial();
    let loader = Loader::builder(guideloom_loader::RangeSource::new(0, 10, 1).expect("range"))
        .batch_size(4)
        .workers(2)
        .try_map(|x, _| if x == 5 { Err("five") } else { Ok(x) })
        .build()
        .expect("valid");
    let err = loader.iter().nth(1).expect("batch 1").expect_err("fails");
    assert!(
        matches!(&err, LoaderError::InBatch { batch: 1, source, .. } if matches!(**source, LoaderError::Map { index: 5, .. }))
    );
    let loader = Loader::builder(guideloom_loader::RangeSource::new(0, 10, 1).expect("range"))
        .batch_size(4)
        .workers(0)
        .map(|x, _| if x == 9 { panic!("nine") } else { x })
        .build()
        .expect("valid");
    let err = loader.iter().nth(2).expect("batch 2").expect_err("fails");
    assert_eq!(chain(&err), "batch 2 (epoch 0): panicked on record 9: nine");
}

/// Serves record 0, then blocks in `get_many_cancellable` until the loader cancels (a source
/// that would otherwise block forever).
struct BlocksAfterOne {
    blocked: Arc<AtomicUsize>,
}

impl DataSource for BlocksAfterOne {
    type Item = u64;
    fn len(&self) -> u64 {
        100
    }
    fn get(&self, index: u64) -> Result<u64, LoaderError> {
        Ok(index)
    }
    fn get_many_cancellable(&self, indices: &[u64], cancel: &Cancellation) -> Result<Vec<u64>, LoaderError> {
        if indices.iter().any(|&i| i >= 1) {
            self.blocked.fetch_add(1, Ordering::SeqCst);
            cancel.wait();
            return Err(LoaderError::Cancelled);
        }
        self.get_many(indices)
    }
}

/// Dropping the iterator while workers are blocked in the source returns within 1 s (run in a
/// child thread, awaited with a 1 s timeout), and no worker thread remains.
#[test]
fn drop_while_workers_are_blocked_returns_promptly() {
    let _g = serial();
    let before = worker_threads();
    let blocked = Arc::new(AtomicUsize::new(0));
    let loader = Loader::builder(BlocksAfterOne { blocked: Arc::clone(&blocked) })
        .batch_size(1)
        .workers(3)
        .prefetch(3)
        .build()
        .expect("valid");
    let mut it = loader.iter();
    assert_eq!(it.next().expect("batch 0").expect("ok").data, [0]);
    // Wait (bounded) until the workers sit in the blocking read.
    for _ in 0..1_000 {
        if blocked.load(Ordering::SeqCst) >= 3 {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(blocked.load(Ordering::SeqCst), 3, "all three workers blocked");
    assert_eq!(worker_threads(), before + 3);
    let (tx, rx) = std::sync::mpsc::channel();
    let dropper = std::thread::spawn(move || {
        drop(it);
        let _ = tx.send(());
    });
    assert!(rx.recv_timeout(Duration::from_secs(1)).is_ok(), "drop did not return within 1 s");
    dropper.join().expect("dropper thread");
    assert_eq!(worker_threads_down_to(before), before);
}

/// Dropping mid-epoch (workers busy or idle, results pending in the reorder buffer) joins every
/// worker.
#[test]
fn drop_mid_epoch_joins_workers() {
    let _g = serial();
    let before = worker_threads();
    for prefetch in [1, 8] {
        let loader = Loader::builder(guideloom_loader::RangeSource::new(0, 1_000, 1).expect("range"))
            .batch_size(3)
            .workers(4)
            .prefetch(prefetch)
            .build()
            .expect("valid");
        let mut it = loader.iter();
        for _ in 0..5 {
            it.next().expect("batch").expect("ok");
        }
        // A worker names itself when it first runs: wait (bounded) until all four have.
        for _ in 0..500 {
            if worker_threads() == before + 4 {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(worker_threads(), before + 4);
        drop(it);
        assert_eq!(worker_threads_down_to(before), before);
    }
}
