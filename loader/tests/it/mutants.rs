//! Issue 33, item 5: tests written for the survivors of the mutation runs (docs/TESTING.md
//! lists each survivor with its verdict). The `elastic` scope (loader/src/state.rs,
//! loader/src/indexed/iter.rs): the iterator's count of what is left (`remaining`,
//! `size_hint`), its `Debug`, and a failing record ending the iteration with its error, never
//! silently. The sequential re-deal (loader/src/sequential/deal.rs, state.rs): two shards are
//! shuffled too. The `mix` scope (loader/src/mix.rs): refused weights name themselves,
//! `by_tokens`' exact and rounded ratios, the 62-bit bound, a greedy phase ending on a
//! checkpoint, and the plan's accessors and end (test names hold `mix`, so the scope's
//! mutation filter runs them).

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

/// The detail of a refused mixture configuration (panics on anything else).
fn mix_refusal(result: Result<guideloom_loader::mix::MixConfig, LoaderError>) -> String {
    match result {
        Err(LoaderError::InvalidConfig { field: "weights", detail }) => detail,
        other => panic!("expected InvalidConfig(weights), got {other:?}"),
    }
}

/// Survivor `mix.rs:107` (`decimal`'s `!finite || <= 0` -> `&&`): 0, NaN, inf and -1 were
/// still refused with the `&&`, but later and for another reason (a zero weight, or "more
/// digits than 38"); the refusal names the weight as Rust prints it. The boundary's other side:
/// the smallest positive subnormal is a weight (alone, 1; beside 1, a ratio of 10^324 that
/// is refused as too extreme).
#[test]
fn issue33_mutants_mix_a_weight_not_finite_and_positive_is_refused_as_such() {
    use guideloom_loader::mix::MixConfig;
    for (w, text) in [
        (0.0, "0"),
        (-0.0, "-0"),
        (f64::NAN, "NaN"),
        (f64::INFINITY, "inf"),
        (f64::NEG_INFINITY, "-inf"),
        (-1.0, "-1"),
    ] {
        assert_eq!(
            mix_refusal(MixConfig::new(&[1.0, w])),
            format!("weight {text} is not a finite number above 0"),
            "weight {w}"
        );
    }
    assert_eq!(MixConfig::new(&[1.0, 1e-3]).unwrap().ratios(), [1000, 1]);
    let subnormal = f64::from_bits(1);
    assert_eq!(MixConfig::new(&[subnormal]).unwrap().ratios(), [1]);
    assert_eq!(mix_refusal(MixConfig::new(&[1.0, subnormal])), "the weights' ratios are too extreme");
}

/// Survivors `mix.rs:193`, `199`, `201` and `202` (`by_tokens`' reduction, common denominator
/// and rounded fallback). The values are worked out with exact fractions (Python's
/// `fractions.Fraction`) and, for the rounded path, IEEE doubles: 0.7/4 : 0.3/10 = 35 : 6;
/// 2 : 1 of the tokens from records of 3 and 2 tokens is 4 : 3 of the records; weights
/// 1 : 3 : 1 over records of 2^30 tokens stay 1 : 3 : 1 (with `q * gcd` the common multiple
/// overflows and the rounded path gives 366,503,875,925 : 2^40 : 366,503,875,925); and
/// 1/3 : 1,000,000,007 / (10^19 + 1), whose exact sum needs 65 bits, rounded to 40 bits of
/// the larger: 2^40 : 330, reduced 549,755,813,888 : 165.
#[test]
fn issue33_mutants_mix_by_tokens_ratios_are_exact_or_rounded_to_40_bits() {
    use guideloom_loader::mix::MixConfig;
    assert_eq!(MixConfig::by_tokens(&[0.7, 0.3], &[100, 60], &[400, 600]).unwrap().ratios(), [35, 6]);
    assert_eq!(
        MixConfig::by_tokens(&[1.0, 3.0, 1.0], &[1, 1, 1], &[1 << 30; 3]).unwrap().ratios(),
        [1, 3, 1]
    );
    // Records of different lengths: 2 : 1 of the tokens from records of 3 and 2 tokens.
    assert_eq!(MixConfig::by_tokens(&[2.0, 1.0], &[10, 10], &[30, 20]).unwrap().ratios(), [4, 3]);
    assert_eq!(
        MixConfig::by_tokens(&[1.0, 1.0], &[1, 1_000_000_007], &[3, 10_000_000_000_000_000_001])
            .unwrap()
            .ratios(),
        [549_755_813_888, 165]
    );
}

/// Survivors `mix.rs:224` (ratios not reduced by their gcd) and `226` (the 62-bit bound on
/// the sum: `>` -> `==`, `>=`, `<<`): ratios are reduced; a sum of `2^62 - 1` is the largest
/// accepted, `2^62` is refused.
#[test]
fn issue33_mutants_mix_ratios_are_reduced_and_their_sum_is_below_2_pow_62() {
    use guideloom_loader::mix::MixConfig;
    assert_eq!(MixConfig::from_ratios(&[4, 6]).unwrap().ratios(), [2, 3]);
    assert_eq!(MixConfig::from_ratios(&[7, 7, 14]).unwrap().ratios(), [1, 1, 2]);
    assert_eq!(MixConfig::from_ratios(&[(1 << 62) - 2, 1]).unwrap().ratios(), [(1 << 62) - 2, 1]);
    assert_eq!(
        mix_refusal(MixConfig::from_ratios(&[(1 << 62) - 1, 1])),
        "the weights' exact ratios need more than 62 bits"
    );
    // Reduced first: 2^62 and 2^62 are 1 : 1.
    assert_eq!(MixConfig::from_ratios(&[1 << 62, 1 << 62]).unwrap().ratios(), [1, 1]);
    assert_eq!(
        mix_refusal(MixConfig::from_ratios(&[u64::MAX, 1])),
        "the weights' exact ratios need more than 62 bits"
    );
}

/// Survivors `mix.rs:403` (the last record's count `+= 1` -> `*= 1`) and `409` (the final
/// greedy checkpoint's guard, 4 mutants): an all-exhausted greedy mixture 1 : 1 of 3,000 and
/// 2,048 records alternates 0, 1, 0, 1, ... until source 1's last record at position 4,095, so
/// its first phase ends exactly on a checkpoint (4,096); source 0's last 952 records follow.
/// Every record of both sources is read exactly once, in order within its source.
#[test]
fn issue33_mutants_mix_a_greedy_phase_ending_on_a_checkpoint_reads_every_record_once() {
    use guideloom_loader::mix::{MixConfig, MixSchedule, MixStop};
    let plan = MixConfig::from_ratios(&[1, 1])
        .unwrap()
        .schedule(MixSchedule::Greedy)
        .stop(MixStop::AllExhausted)
        .plan(&[3000, 2048])
        .unwrap();
    assert_eq!(plan.len(), 5048);
    let mut next = [0u64; 2];
    for p in 0..5048u64 {
        let slot = plan.locate(p).unwrap();
        let want = if p < 4096 { p % 2 } else { 0 };
        assert_eq!(u64::from(slot.source), want, "position {p}");
        let s = slot.source as usize;
        assert_eq!((slot.record, slot.draw), (next[s], next[s]), "position {p}");
        next[s] += 1;
    }
    assert_eq!(next, [3000, 2048]);
    assert_eq!(plan.locate(5048), None);
}

/// Survivors `mix.rs:602` (`MixPlan::is_empty` -> `true`, `false`, `!`), `607`
/// (`MixPlan::sizes` -> empty, `[0]`, `[1]`), `665` (`MixPlan::locate`'s bound check) and `785`
/// (`Mix::sources` -> empty): a plan over an empty source is empty and locates nothing; past
/// the end of a plan (one pass or three) nothing is located, and `Mix::get` says so.
#[test]
fn issue33_mutants_mix_plan_accessors_and_positions_past_the_end() {
    use guideloom_loader::mix::{Mix, MixConfig, MixStop};
    use guideloom_loader::VecSource;
    let empty = MixConfig::from_ratios(&[1, 1]).unwrap().plan(&[0, 5]).unwrap();
    assert!(empty.is_empty());
    assert_eq!(empty.len(), 0);
    assert_eq!(empty.sizes(), [0, 5]);
    for p in [0, 1, u64::MAX] {
        assert_eq!(empty.locate(p), None, "position {p} of an empty plan");
    }
    for (stop, len) in [(MixStop::FirstExhausted, 6), (MixStop::Repeat(3), 18), (MixStop::AllExhausted, 10)] {
        let plan = MixConfig::from_ratios(&[1, 2]).unwrap().stop(stop).plan(&[2, 8]).unwrap();
        assert!(!plan.is_empty());
        assert_eq!(plan.len(), len, "{stop:?}");
        assert_eq!(plan.sizes(), [2, 8]);
        assert!(plan.locate(len - 1).is_some(), "{stop:?}");
        for p in [len, len + 1, 2 * len, u64::MAX] {
            assert_eq!(plan.locate(p), None, "{stop:?}: position {p}");
        }
    }
    let a = VecSource::new(vec![10u32, 11]);
    let b = VecSource::new(vec![20u32, 21, 22, 23]);
    let mix = Mix::new(vec![a, b], MixConfig::from_ratios(&[1, 2]).unwrap()).unwrap();
    let sizes: Vec<u64> = mix.sources().iter().map(DataSource::len).collect();
    assert_eq!(sizes, [2, 4]);
    assert_eq!(mix.sources()[1].get(3).unwrap(), 23);
    assert_eq!(mix.len(), 6);
    assert!(matches!(mix.get(6), Err(LoaderError::IndexOutOfRange { index: 6, len: 6 })));
}
