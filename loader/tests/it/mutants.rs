//! Issue 33, item 5: tests written for the survivors of the mutation runs (docs/TESTING.md
//! lists each survivor with its verdict). The `elastic` scope (loader/src/state.rs,
//! loader/src/indexed/iter.rs): the iterator's count of what is left (`remaining`,
//! `size_hint`), its `Debug`, and a failing record ending the iteration with its error, never
//! silently. The sequential re-deal (loader/src/sequential/deal.rs, state.rs): two shards are
//! shuffled too.

use guideloom_loader::sequential::shard_order;
use guideloom_loader::{DataSource, Loader, LoaderError, RangeSource};

/// Records `i -> i`, failing at record `bad`.
struct FailsAt {
    len: u64,
    bad: u64,
}

impl DataSource for FailsAt {
    type Item = u64;
    fn len(&self) -> u64 {
        self.len
    }
    fn get(&self, index: u64) -> Result<u64, LoaderError> {
        if index == self.bad {
            return Err(LoaderError::source(index, format!("record {index} is damaged")));
        }
        Ok(index)
    }
}

/// Survivors `iter.rs:232` (`remaining` -> `None`, `Some(0)`, `Some(1)`) and the `size_hint`
/// built on it: 23 records, batches of 4 with the remainder kept, 2 epochs: 12 batches; the
/// count after each one, and none left at the end; an unbounded loader has no count.
#[test]
fn issue33_mutants_remaining_counts_the_batches_left_exactly() {
    for workers in [0, 2] {
        let loader = Loader::builder(RangeSource::new(0, 23, 1).unwrap())
            .batch_size(4)
            .epochs(2)
            .workers(workers)
            .build()
            .unwrap();
        let mut it = loader.iter();
        for left in (1..=12u64).rev() {
            assert_eq!(it.remaining(), Some(left), "workers {workers}");
            assert_eq!(it.size_hint(), (1, Some(left as usize)), "workers {workers}");
            it.next().unwrap().unwrap();
        }
        assert_eq!(it.remaining(), Some(0));
        assert_eq!(it.size_hint(), (0, Some(0)));
        assert!(it.next().is_none());
        assert_eq!(it.remaining(), Some(0));
        // Resumed at batch 5: 7 left.
        let mut it = loader.iter();
        for _ in 0..5 {
            it.next().unwrap().unwrap();
        }
        let resumed = loader.iter_from(&it.state()).unwrap();
        assert_eq!(resumed.remaining(), Some(7));
    }
    let endless =
        Loader::builder(RangeSource::new(0, 23, 1).unwrap()).batch_size(4).unbounded().build().unwrap();
    let it = endless.iter();
    assert_eq!(it.remaining(), None);
    assert_eq!(it.size_hint(), (1, None));
}

/// Survivor `iter.rs:246` (`fail` -> `None`: a failing record ended the iteration as if the
/// epoch were over): the batches before the failing one, then its error naming the record,
/// then nothing, with 0 and 2 workers.
#[test]
fn issue33_mutants_a_failing_record_ends_the_iteration_with_its_error() {
    for workers in [0, 2] {
        let loader =
            Loader::builder(FailsAt { len: 20, bad: 9 }).batch_size(4).workers(workers).build().unwrap();
        let mut it = loader.iter();
        for b in 0..2u64 {
            let batch = it.next().expect("a batch").expect("batches before the failing one");
            assert_eq!(batch.data, (4 * b..4 * b + 4).collect::<Vec<_>>(), "workers {workers}");
        }
        match it.next() {
            Some(Err(LoaderError::InBatch { batch: 2, epoch: 0, source })) => match *source {
                LoaderError::Source { index: 9, source } => {
                    assert_eq!(source.to_string(), "record 9 is damaged")
                }
                other => panic!("workers {workers}: expected record 9's error in batch 2, got {other:?}"),
            },
            other => panic!("workers {workers}: expected the error of record 9, got {other:?}"),
        }
        assert!(it.next().is_none(), "workers {workers}: nothing after the error");
        assert_eq!(it.remaining(), Some(0));
    }
}

/// Survivor `iter.rs:203` (`Debug` -> nothing written): the iterator names its position, its
/// end, whether it is done and its worker threads (2, the default).
#[test]
fn issue33_mutants_the_iterators_debug_names_its_position() {
    let loader = Loader::builder(RangeSource::new(0, 23, 1).unwrap()).batch_size(4).build().unwrap();
    let mut it = loader.iter();
    it.next().unwrap().unwrap();
    assert_eq!(format!("{it:?}"), "LoaderIter { next: 1, end: Some(6), done: false, threads: 2, .. }");
}

/// Survivors `deal.rs:27` (`shards < 2` -> `== 2`, `<= 2`: a shuffled epoch of two shards kept
/// them in order): over 16 epochs two shards come in both orders, and every order is one of
/// the two; one shard and no shard stay as they are.
#[test]
fn issue33_mutants_two_shards_are_shuffled_too() {
    for seed in [0u64, 7, 1234] {
        let orders: Vec<Vec<u64>> = (0..16).map(|e| shard_order(2, seed, true, e)).collect();
        assert!(orders.iter().all(|o| o == &[0, 1] || o == &[1, 0]), "seed {seed}: {orders:?}");
        assert!(orders.iter().any(|o| o == &[1, 0]), "seed {seed}: two shards never swapped: {orders:?}");
        assert!(orders.iter().any(|o| o == &[0, 1]), "seed {seed}: {orders:?}");
        assert_eq!(shard_order(2, seed, false, 3), [0, 1], "unshuffled");
        assert_eq!(shard_order(1, seed, true, 3), [0]);
        assert!(shard_order(0, seed, true, 3).is_empty());
    }
}

/// Survivors `packer.rs:80` (the checkpoint's guard `used < len` -> `true`, `<=`): a window
/// that ends exactly at the end of a record checkpoints at the next record with nothing to
/// skip, not at the used-up record with all its tokens to skip (which resumes to the same
/// tokens by re-reading that record). Records of 2, 3 and 4 tokens, windows of 5: the first
/// window is records 0 and 1 whole.
#[test]
fn issue33_mutants_a_window_ending_on_a_record_boundary_checkpoints_at_the_next_record() {
    use guideloom_loader::sequential::{SequentialLoader, VecShards};
    let docs: Vec<Vec<Vec<u64>>> =
        vec![(0..3u64).map(|k| (0..k + 2).map(|t| 10 * k + t).collect()).collect()];
    for workers in [0, 2] {
        let loader = SequentialLoader::builder(VecShards::new(docs.clone()).without_lengths())
            .pack(5)
            .batch_size(1)
            .workers(workers)
            .build()
            .unwrap();
        let mut it = loader.iter();
        assert_eq!(it.next().unwrap().unwrap().data, [vec![0, 1, 10, 11, 12]]);
        let s = it.state();
        assert_eq!(
            (s.open[0].pos.record, s.open[0].skip),
            (2, 0),
            "workers {workers}: at record 2, nothing to skip"
        );
        let rest: Vec<Vec<Vec<u64>>> = loader.iter_from(&s).unwrap().map(|b| b.unwrap().data).collect();
        assert_eq!(rest, Vec::<Vec<Vec<u64>>>::new(), "4 tokens left: no whole window");
    }
}
