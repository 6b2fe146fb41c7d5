//! `LoaderBuilder::readahead` (issue 18): the source is told, before batch `n` is produced,
//! the records of batches `m .. m + k` it has not been told yet (`m`: the first batch not yet
//! handed to a worker, `n` without workers), in order, once each; the batches do not change.

use std::sync::{Arc, Mutex};

use guideloom_loader::{DataSource, Loader, LoaderError};

/// Records `i -> i * 10`, remembering every prefetch hint.
pub(crate) struct Hinted {
    pub(crate) len: u64,
    pub(crate) hints: Arc<Mutex<Vec<Vec<u64>>>>,
}

impl DataSource for Hinted {
    type Item = u64;
    fn len(&self) -> u64 {
        self.len
    }
    fn get(&self, index: u64) -> Result<u64, LoaderError> {
        Ok(index * 10)
    }
    fn prefetch(&self, indices: &[u64]) {
        self.hints.lock().unwrap().push(indices.to_vec());
    }
}

/// The sampler's batches (record indices), the loader's batches and the hints it gave.
type Run = (Vec<Vec<u64>>, Vec<Vec<u64>>, Vec<Vec<u64>>);

fn run(workers: usize, readahead: u64) -> Run {
    let hints = Arc::new(Mutex::new(Vec::new()));
    let source = Hinted { len: 23, hints: Arc::clone(&hints) };
    let loader = Loader::builder(source)
        .batch_size(4)
        .shuffle(9)
        .epochs(2)
        .workers(workers)
        .readahead(readahead)
        .build()
        .unwrap();
    let plans: Vec<Vec<u64>> = (0..loader.total_batches().unwrap())
        .map(|n| loader.sampler().batch(n).unwrap().indices.clone())
        .collect();
    let batches: Vec<Vec<u64>> = loader.iter().map(|b| b.unwrap().data).collect();
    let hints = hints.lock().unwrap().clone();
    (plans, batches, hints)
}

#[test]
fn readahead_hints_every_batch_once_in_order_and_changes_no_batch() {
    let (plans, expected, none) = run(0, 0);
    assert_eq!(plans.len(), 12, "23 records, batches of 4, 2 epochs: 6 batches each");
    assert!(none.is_empty(), "no readahead, no hint");
    let want: Vec<Vec<u64>> = plans.iter().map(|p| p.iter().map(|i| i * 10).collect()).collect();
    assert_eq!(expected, want);
    for workers in [0, 1, 4] {
        for k in [1, 3, 100] {
            let (_, batches, hints) = run(workers, k);
            assert_eq!(batches, expected, "{workers} workers, readahead {k}");
            assert_eq!(
                hints, plans,
                "{workers} workers, readahead {k}: each batch's records, once, in order"
            );
        }
    }
}

#[test]
fn readahead_stays_k_batches_ahead_of_the_consumer() {
    let hints = Arc::new(Mutex::new(Vec::new()));
    let source = Hinted { len: 40, hints: Arc::clone(&hints) };
    // Without workers (with workers, the lead counts past the batches in their hands:
    // `regression::issue18_readahead_lead_counts_past_the_batches_in_workers_hands`).
    let loader = Loader::builder(source).batch_size(4).workers(0).readahead(3).build().unwrap();
    let mut it = loader.iter();
    it.next().unwrap().unwrap();
    assert_eq!(hints.lock().unwrap().len(), 3, "batches 0, 1, 2 hinted before batch 0");
    it.next().unwrap().unwrap();
    assert_eq!(hints.lock().unwrap().len(), 4, "batch 3 hinted before batch 1");
    assert_eq!(hints.lock().unwrap()[3], vec![12, 13, 14, 15]);
}
