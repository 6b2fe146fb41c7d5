//! The burn contract of `guideloom-burn` (acceptance B1-B6 of issue 15), checked against
//! burn 0.22.1 itself: its `DataLoader` trait, `split_dataloader`, the `flex` backend and
//! burn-train's single-device Learner.

use std::error::Error as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use burn::data::dataloader::split::split_dataloader;
use burn::data::dataloader::DataLoader;
use burn::tensor::{DType, Device};
use guideloom_burn::{GuideloomDataLoader, SplitPolicy, TokenBatcher, TokenTensors};
use guideloom_formats::TokenFormat;
use guideloom_loader::{Batch, DataSource, LoaderError, Permutation, RangeSource, TokenWindows, VecSource};
use guideloom_storage::{ReadOptions, StreamWriter};

/// What a batch held: source indices, positions in the epoch's order, padding flags.
type Seen = (Vec<u64>, Vec<u64>, Vec<bool>);

fn seen(batch: Batch<Vec<i64>>, _device: &Device) -> Result<Seen, LoaderError> {
    Ok((batch.indices, batch.positions, batch.padding))
}

fn range_loader(n: i64, batch: u64) -> guideloom_burn::GuideloomDataLoaderBuilder<RangeSource> {
    GuideloomDataLoader::builder(RangeSource::new(0, n, 1).unwrap()).batch_size(batch).device(Device::flex())
}

/// Drains one epoch: per batch (indices, positions, padding, progress processed/total).
fn epoch(loader: &dyn DataLoader<Seen>) -> Vec<(Seen, (usize, usize))> {
    let mut it = loader.iter();
    let mut out = Vec::new();
    while let Some(b) = it.next() {
        let p = it.progress();
        out.push((b.unwrap(), (p.items_processed, p.items_total)));
    }
    out
}

fn order(n: u64, seed: u64, e: u64) -> Vec<u64> {
    let p = Permutation::new(n, seed, e);
    (0..n).map(|i| p.apply(i).unwrap()).collect()
}

/// B1: 10 records, batch 4: batches of 4, 4, 2; progress 4/10, 8/10, 10/10; a fourth `next()`
/// is `None`.
#[test]
fn b1_contract_counts_records_and_completes_on_the_last_batch() {
    for workers in [0, 2] {
        let loader = range_loader(10, 4).workers(workers).build(seen).unwrap();
        assert_eq!(loader.num_items(), 10);
        let mut it = loader.iter();
        let mut sizes = Vec::new();
        let mut progress = Vec::new();
        for _ in 0..3 {
            let (indices, _, _) = it.next().unwrap().unwrap();
            sizes.push(indices.len());
            let p = it.progress();
            progress.push((p.items_processed, p.items_total, p.is_completed()));
        }
        assert_eq!(sizes, [4, 4, 2]);
        assert_eq!(progress, [(4, 10, false), (8, 10, false), (10, 10, true)]);
        assert!(it.next().is_none());
        assert!(it.next().is_none());
    }
}

/// B2: 9 records, batch 4, `split_dataloader` over 2 devices: both parts yield the same number
/// of batches under each policy.
#[test]
fn b2_split_parts_yield_equal_batch_counts() {
    let devices = [Device::flex(), Device::flex()];
    let o = order(9, 3, 0);

    let drop: Arc<dyn DataLoader<Seen>> = Arc::new(range_loader(9, 4).shuffle(3).build(seen).unwrap());
    let parts = split_dataloader(drop, &devices);
    assert_eq!(parts.iter().map(|p| p.num_items()).collect::<Vec<_>>(), [4, 4]);
    let e: Vec<_> = parts.iter().map(|p| epoch(p.as_ref())).collect();
    assert_eq!(e[0].len(), 1);
    assert_eq!(e[1].len(), 1);
    assert_eq!(e[0][0], ((o[0..4].to_vec(), vec![0, 1, 2, 3], vec![false; 4]), (4, 4)));
    // Position 8 (record o[8]) is dropped this epoch.
    assert_eq!(e[1][0], ((o[4..8].to_vec(), vec![4, 5, 6, 7], vec![false; 4]), (4, 4)));

    let pad: Arc<dyn DataLoader<Seen>> =
        Arc::new(range_loader(9, 4).shuffle(3).split_policy(SplitPolicy::Pad).build(seen).unwrap());
    let parts = split_dataloader(pad, &devices);
    assert_eq!(parts.iter().map(|p| p.num_items()).collect::<Vec<_>>(), [8, 8]);
    let e: Vec<_> = parts.iter().map(|p| epoch(p.as_ref())).collect();
    assert_eq!(e[0].len(), 2);
    assert_eq!(e[1].len(), 2);
    assert_eq!(e[0][0], ((o[0..4].to_vec(), vec![0, 1, 2, 3], vec![false; 4]), (4, 8)));
    assert_eq!(e[0][1], ((o[0..4].to_vec(), vec![4, 5, 6, 7], vec![true; 4]), (8, 8)));
    assert_eq!(e[1][0], ((o[4..8].to_vec(), vec![4, 5, 6, 7], vec![false; 4]), (4, 8)));
    let tail = vec![o[8], o[4], o[5], o[6]];
    assert_eq!(e[1][1], ((tail, vec![8, 9, 10, 11], vec![false, true, true, true]), (8, 8)));

    // The second epoch of each part is epoch 1 of the order.
    let o1 = order(9, 3, 1);
    assert_eq!(epoch(parts[0].as_ref())[0].0 .0, o1[0..4]);
}

/// Three parts of 3, 3 and 5 records in batches of 2 (ceil: 2, 2, 3 batches): equal counts
/// under both policies, where flooring each part separately would give 1, 1, 2.
#[test]
fn b2_split_three_uneven_parts() {
    let devices = [Device::flex(), Device::flex(), Device::flex()];
    for (policy, batches, items) in [(SplitPolicy::Drop, 2, [3, 3, 4]), (SplitPolicy::Pad, 3, [6, 6, 6])] {
        let loader: Arc<dyn DataLoader<Seen>> =
            Arc::new(range_loader(11, 2).split_policy(policy).build(seen).unwrap());
        let parts = split_dataloader(loader, &devices);
        assert_eq!(parts.iter().map(|p| p.num_items()).collect::<Vec<_>>(), items, "{policy:?}");
        for p in &parts {
            let e = epoch(p.as_ref());
            assert_eq!(e.len(), batches, "{policy:?}");
            assert_eq!(e.last().unwrap().1 .0, e.last().unwrap().1 .1, "progress completes");
        }
    }
}

/// B3: `iter()` twice gives epoch 0 then epoch 1 of guideloom's keyed order; built with start
/// epoch 1, the first `iter()` gives epoch 1.
#[test]
fn b3_each_iter_is_the_next_epoch_of_the_keyed_order() {
    let indices = |loader: &dyn DataLoader<Seen>| -> Vec<u64> {
        epoch(loader).into_iter().flat_map(|((i, _, _), _)| i).collect()
    };
    let loader = range_loader(10, 4).shuffle(11).build(seen).unwrap();
    assert_eq!(indices(&loader), order(10, 11, 0));
    assert_eq!(indices(&loader), order(10, 11, 1));
    assert_eq!(loader.next_epoch(), 2);
    assert_ne!(order(10, 11, 0), order(10, 11, 1));

    let from1 = range_loader(10, 4).shuffle(11).start_epoch(1).build(seen).unwrap();
    assert_eq!(indices(&from1), order(10, 11, 1));
    // to_device keeps the order (and shares the cursor: the handle continues at epoch 2).
    let moved = from1.to_device(&Device::flex());
    assert_eq!(indices(moved.as_ref()), order(10, 11, 2));
}

/// A mid-epoch state resumes exactly: the rest of the epoch with the progress of the whole
/// epoch, then the next epochs.
#[test]
fn mid_epoch_state_resumes_exactly() {
    let loader = range_loader(10, 4).shuffle(2).workers(2).build(seen).unwrap();
    let full: Vec<_> = epoch(&loader);
    let full1: Vec<_> = epoch(&loader);

    let first = range_loader(10, 4).shuffle(2).build(seen).unwrap();
    let mut it = first.iter();
    assert_eq!(it.next().unwrap().unwrap(), full[0].0);
    drop(it);
    let state = first.state().unwrap();
    assert_eq!(state.next_batch, 1);
    let json = state.to_json();

    let resumed = range_loader(10, 4)
        .shuffle(2)
        .resume(guideloom_loader::State::from_json(&json).unwrap())
        .build(seen)
        .unwrap();
    assert_eq!(resumed.next_epoch(), 0);
    assert_eq!(resumed.state().unwrap().next_batch, 1);
    let it = resumed.iter();
    // Claimed but nothing delivered yet: still the resumed state.
    assert_eq!(resumed.state().unwrap().next_batch, 1);
    assert_eq!(resumed.next_epoch(), 1);
    drop(it);
    let resumed = range_loader(10, 4).shuffle(2).resume(state).build(seen).unwrap();
    assert_eq!(epoch(&resumed), full[1..]);
    assert_eq!(resumed.state().unwrap().next_batch, 3);
    assert_eq!(epoch(&resumed), full1);

    // A state of another loader is refused when building, naming the field.
    let other = range_loader(10, 4).shuffle(3).resume(first.state().unwrap()).build(seen);
    assert!(matches!(other, Err(LoaderError::StateMismatch { field: "seed", .. })));
    let wider = range_loader(10, 2).shuffle(2).resume(first.state().unwrap()).build(seen);
    assert_eq!(
        wider.unwrap_err().to_string(),
        "state mismatch: global_batch: the loader has 2, the state has 4"
    );
}

/// A source that fails on record 17.
struct Fails17;
impl DataSource for Fails17 {
    type Item = i64;
    fn len(&self) -> u64 {
        24
    }
    fn get(&self, index: u64) -> Result<i64, LoaderError> {
        if index == 17 {
            return Err(LoaderError::source(17, "unreadable"));
        }
        Ok(index as i64)
    }
}

/// B5: a collate failing on record 17 gives an `Err` whose `source()` downcasts to
/// guideloom's error naming record 17 (and batch 4); the epoch then ends.
#[test]
fn b5_a_failing_record_reaches_burn_named() {
    let collate = |b: Batch<Vec<i64>>, _d: &Device| -> Result<usize, LoaderError> {
        match b.indices.iter().find(|&&i| i == 17) {
            Some(&i) => Err(LoaderError::source(i, "record 17 is malformed")),
            None => Ok(b.len()),
        }
    };
    let loader = GuideloomDataLoader::builder(VecSource::new((0..24i64).collect()))
        .batch_size(4)
        .build(collate)
        .unwrap();
    let mut it = loader.iter();
    for _ in 0..4 {
        assert_eq!(it.next().unwrap().unwrap(), 4);
    }
    let err = it.next().unwrap().unwrap_err();
    let cause = err.source().unwrap().downcast_ref::<LoaderError>().unwrap();
    assert_eq!(cause.record_index(), Some(17));
    assert_eq!(cause.batch(), Some(4));
    assert_eq!(cause.to_string(), "batch 4 (epoch 0)");
    assert!(it.next().is_none());
    drop(it);
    // The state stops before the failed batch.
    assert_eq!(loader.state().unwrap().next_batch, 4);

    // The same from a source failing on the workers, and in a part.
    let loader = GuideloomDataLoader::builder(Fails17).batch_size(4).build(seen).unwrap();
    assert_eq!(epoch_err(&loader), (Some(17), Some(4)));
    // A part of a fresh loader: positions 12..24 in 3 batches, record 17 in its batch 1.
    let fresh = GuideloomDataLoader::builder(Fails17).batch_size(4).build(seen).unwrap();
    let part = fresh.slice(12, 24);
    assert_eq!(epoch_err(part.as_ref()), (Some(17), Some(1)));
    // The next epoch of the part numbers its batches on: epoch 1, batch 3 + 1.
    assert_eq!(epoch_err(part.as_ref()), (Some(17), Some(4)));
}

/// The (record, batch) named by the first error of an epoch.
fn epoch_err(loader: &dyn DataLoader<Seen>) -> (Option<u64>, Option<u64>) {
    let mut it = loader.iter();
    loop {
        if let Err(e) = it.next().expect("an error before the end") {
            let cause = e.source().unwrap().downcast_ref::<LoaderError>().unwrap();
            return (cause.record_index(), cause.batch());
        }
    }
}

fn token_storage<E: guideloom_formats::TokenElement>(dir: &std::path::Path, tokens: &[u32]) {
    let mut w = StreamWriter::open(dir, TokenFormat::<E>::new()).unwrap();
    w.append(0, tokens).unwrap();
    w.commit().unwrap();
}

/// B6: a u32 token storage gives `Tensor<2, Int>` with dtype U32 on flex; a u16 storage read
/// as u32 (widened by the loader) gives U32 with equal values; read as u16, U16.
#[test]
fn b6_token_tensors_keep_the_storage_dtype() {
    let tokens: Vec<u32> = (0..40).map(|t| t * 1000).collect();
    let dir = tempfile::tempdir().unwrap();
    token_storage::<u32>(dir.path(), &tokens);
    // L = 4: windows of 5 tokens every 4.
    let windows = TokenWindows::<u32>::open_with(dir.path(), 5, 4, ReadOptions::default()).unwrap();
    let collate = windows.collate();
    let loader = GuideloomDataLoader::builder(windows)
        .batch_size(3)
        .collate(collate)
        .device(Device::flex())
        .build(TokenBatcher)
        .unwrap();
    assert_eq!(loader.num_items(), 9);
    let t: TokenTensors = loader.iter().next().unwrap().unwrap();
    assert_eq!(t.inputs.dtype(), DType::U32);
    assert_eq!(t.targets.dtype(), DType::U32);
    assert_eq!(t.inputs.dims(), [3, 4]);
    assert_eq!(
        t.inputs.to_data().try_to_vec::<u32>().unwrap(),
        [0, 1000, 2000, 3000, 4000, 5000, 6000, 7000, 8000, 9000, 10000, 11000]
    );
    assert_eq!(
        t.targets.to_data().try_to_vec::<u32>().unwrap(),
        [1000, 2000, 3000, 4000, 5000, 6000, 7000, 8000, 9000, 10000, 11000, 12000]
    );
    assert_eq!(t.padding, [false; 3]);

    let small = tempfile::tempdir().unwrap();
    token_storage::<u16>(small.path(), &tokens);
    let wide = TokenWindows::<u32>::open_with(small.path(), 5, 4, ReadOptions::default()).unwrap();
    let c = wide.collate();
    let loader = GuideloomDataLoader::builder(wide).batch_size(3).collate(c).build(TokenBatcher).unwrap();
    let w: TokenTensors = loader.iter().next().unwrap().unwrap();
    assert_eq!(w.inputs.dtype(), DType::U32);
    assert_eq!(
        w.inputs.to_data().try_to_vec::<u32>().unwrap(),
        t.inputs.to_data().try_to_vec::<u32>().unwrap()
    );

    let narrow = TokenWindows::<u16>::open_with(small.path(), 5, 4, ReadOptions::default()).unwrap();
    let c = narrow.collate();
    let loader = GuideloomDataLoader::builder(narrow).batch_size(3).collate(c).build(TokenBatcher).unwrap();
    let n: TokenTensors = loader.iter().next().unwrap().unwrap();
    assert_eq!(n.targets.dtype(), DType::U16);
    assert_eq!(n.targets.to_data().try_to_vec::<u16>().unwrap()[..3], [1000, 2000, 3000]);
}

/// burn's `Dataset` over a guideloom source, in burn's own `DataLoaderBuilder`.
#[test]
fn source_dataset_feeds_burns_own_builder() {
    use burn::data::dataloader::batcher::Batcher;
    use burn::data::dataloader::DataLoaderBuilder;
    #[derive(Clone)]
    struct Sum;
    impl Batcher<i64, i64> for Sum {
        fn batch(&self, items: Vec<i64>, _device: &Device) -> i64 {
            items.iter().sum()
        }
    }
    let data = guideloom_burn::SourceDataset::new(RangeSource::new(0, 10, 1).unwrap());
    let loader = DataLoaderBuilder::new(Sum).batch_size(4).build(data);
    let sums: Vec<i64> = loader.iter().map(Result::unwrap).collect();
    assert_eq!(sums, [6, 22, 17]);
    // And a burn Batcher behind guideloom's loader.
    let ours = range_loader(10, 4).build(guideloom_burn::FromBatcher(Sum)).unwrap();
    let sums: Vec<i64> = ours.iter().map(Result::unwrap).collect();
    assert_eq!(sums, [6, 22, 17]);
}

mod learner {
    //! B4: burn-train's single-device Learner with 2 batches per epoch and gradient
    //! accumulation 3 steps the optimizer exactly once per epoch.

    use super::*;
    use burn::module::{Module, Param};
    use burn::optim::lr_scheduler::{LrScheduler, LrSchedulerRecord};
    use burn::tensor::{Distribution, Tensor};
    use burn::train::logger::InMemoryMetricLogger;
    use burn::train::{InferenceStep, Learner, RegressionOutput, SupervisedTraining, TrainOutput, TrainStep};

    #[derive(Module, Debug)]
    pub(crate) struct Toy {
        weight: Param<Tensor<2>>,
    }

    #[derive(Clone, Debug)]
    pub(crate) struct Target(Tensor<2>);

    impl Toy {
        fn loss(&self, item: &Target) -> RegressionOutput {
            let output = self.weight.val();
            let loss = output.clone().sub(item.0.clone()).powi_scalar(2).mean();
            RegressionOutput::new(loss, output, item.0.clone())
        }
    }

    impl TrainStep for Toy {
        type Input = Target;
        type Output = RegressionOutput;
        fn step(&self, item: Target) -> TrainOutput<RegressionOutput> {
            let out = self.loss(&item);
            TrainOutput::new(self, out.loss.backward(), out)
        }
    }

    impl InferenceStep for Toy {
        type Input = Target;
        type Output = RegressionOutput;
        fn step(&self, item: Target) -> RegressionOutput {
            self.loss(&item)
        }
    }

    /// Counts optimizer steps: the Learner steps the scheduler right before each one.
    #[derive(Clone)]
    struct CountingLr(Arc<AtomicUsize>);
    impl LrScheduler for CountingLr {
        fn step(&mut self) -> f64 {
            self.0.fetch_add(1, Ordering::SeqCst);
            0.1
        }
        fn to_record(&self) -> LrSchedulerRecord {
            LrSchedulerRecord::new()
        }
        fn load_record(&mut self, _record: LrSchedulerRecord) {}
    }

    #[test]
    fn b4_accumulation_3_over_2_batches_steps_once_per_epoch() {
        let device = Device::flex().autodiff();
        let target = |b: Batch<Vec<i64>>, d: &Device| {
            let mean = b.data.iter().sum::<i64>() as f32 / b.len() as f32;
            Ok::<_, LoaderError>(Target(Tensor::full([1, 2], mean, d)))
        };
        // 4 records in batches of 2: 2 batches per epoch.
        let train = GuideloomDataLoader::builder(RangeSource::new(0, 4, 1).unwrap())
            .shuffle(1)
            .batch_size(2)
            .build(target)
            .unwrap();
        let valid = GuideloomDataLoader::builder(RangeSource::new(0, 2, 1).unwrap())
            .batch_size(2)
            .build(target)
            .unwrap();
        let steps = Arc::new(AtomicUsize::new(0));
        let model =
            Toy { weight: Param::from_tensor(Tensor::random([1, 2], Distribution::Default, &device)) };
        let learner =
            Learner::new(model, burn::optim::SgdConfig::new().init(), CountingLr(Arc::clone(&steps)));
        let dir = tempfile::tempdir().unwrap();
        let _ = SupervisedTraining::new(dir.path(), Arc::new(train.clone()), Arc::new(valid))
            .num_epochs(3)
            .grads_accumulation(3)
            .with_metric_logger(InMemoryMetricLogger::new())
            .with_application_logger(None)
            .launch(learner);
        assert_eq!(steps.load(Ordering::SeqCst), 3, "one optimizer step per epoch, 3 epochs");
        // The Learner's copy shares the cursor: three epochs were delivered.
        assert_eq!(train.next_epoch(), 3);
        assert_eq!(train.state().unwrap().next_batch, 6);
    }

    /// Trains `epochs` epochs (resuming from burn's checkpoint `from` with the loader's start
    /// epoch `from`); returns the record indices of every training batch, in order.
    fn run_learner(dir: &std::path::Path, from: Option<usize>, epochs: usize) -> Vec<Vec<u64>> {
        let device = Device::flex().autodiff();
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        let target = move |b: Batch<Vec<i64>>, d: &Device| {
            log.lock().unwrap().push(b.indices.clone());
            Ok::<_, LoaderError>(Target(Tensor::full([1, 2], b.data[0] as f32, d)))
        };
        let train = GuideloomDataLoader::builder(RangeSource::new(0, 6, 1).unwrap())
            .shuffle(9)
            .batch_size(2)
            .start_epoch(from.unwrap_or(0) as u64)
            .build(target)
            .unwrap();
        let valid = GuideloomDataLoader::builder(RangeSource::new(0, 2, 1).unwrap())
            .batch_size(2)
            .build(|_b: Batch<Vec<i64>>, d: &Device| Ok::<_, LoaderError>(Target(Tensor::zeros([1, 2], d))))
            .unwrap();
        let model = Toy { weight: Param::from_tensor(Tensor::zeros([1, 2], &device)) };
        let learner = Learner::new(
            model,
            burn::optim::SgdConfig::new().init(),
            CountingLr(Arc::new(AtomicUsize::new(0))),
        );
        let mut training = SupervisedTraining::new(dir, Arc::new(train), Arc::new(valid))
            .num_epochs(epochs)
            .with_default_checkpointers()
            .with_metric_logger(InMemoryMetricLogger::new())
            .with_application_logger(None);
        if let Some(k) = from {
            training = training.checkpoint(k);
        }
        let _ = training.launch(learner);
        let seen = seen.lock().unwrap().clone();
        seen
    }

    /// burn-train resumes at epoch granularity: from its checkpoint of (1-based) epoch 2 it
    /// runs epoch 3, and a loader built with start epoch 2 gives it guideloom's epoch 2,
    /// the batches the uninterrupted run saw in its third epoch.
    #[test]
    fn learner_resume_from_checkpoint_continues_the_order() {
        let dir = tempfile::tempdir().unwrap();
        let full = run_learner(dir.path(), None, 3);
        assert_eq!(full.len(), 9, "3 epochs of 3 batches");
        let resumed = run_learner(dir.path(), Some(2), 3);
        assert_eq!(resumed, full[6..]);
        let o = order(6, 9, 2);
        assert_eq!(resumed.concat(), o);
    }
}
