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

/// Survivors `pack.rs:294-299` (`PackPlan::padding_share`, 10 mutants): the share of padding
/// over all rows' tokens, counted by hand: 4 documents of 2 in 2 rows of 5 leave 2 of 10
/// tokens padding (0.2); one token in a row of 4, 3 of 4 (0.75); full rows, 0; no rows, 0.
#[test]
fn issue33_mutants_pack_padding_share_is_padding_over_all_row_tokens() {
    use guideloom_loader::pack::{PackConfig, PackPlan, PackStrategy};
    let share = |lengths: &[u64], config| PackPlan::new(lengths, config).unwrap().padding_share();
    assert_eq!(share(&[2, 2, 2, 2], PackConfig::new(5, PackStrategy::BestFitDecreasing)), 0.2);
    assert_eq!(share(&[1], PackConfig::new(4, PackStrategy::ConcatSplit)), 0.75);
    assert_eq!(share(&[5, 5], PackConfig::new(5, PackStrategy::FirstFit { bins: 1 })), 0.0);
    assert_eq!(share(&[], PackConfig::new(5, PackStrategy::FirstFit { bins: 1 })), 0.0);
    assert_eq!(share(&[0, 0], PackConfig::new(5, PackStrategy::ConcatSplit)), 0.0, "empty documents: no row");
}

/// Survivors `pack.rs:309` (`PackPlan::fingerprint` -> 0, 1): the fingerprint tells apart
/// every setting and the lengths, so a loader state taken over one packing is refused by
/// another of the same row count (first fit and best fit of `[3, 4, 2, 1]` into 2 bins of 6
/// both make 2 rows, different ones).
#[test]
fn issue33_mutants_pack_a_state_of_one_packing_is_refused_by_another() {
    use guideloom_loader::pack::{Overflow, PackConfig, PackPlan, PackStrategy, Packed};
    use guideloom_loader::VecSource;
    let base = PackConfig::new(6, PackStrategy::FirstFit { bins: 2 });
    let variants = [
        (vec![3u64, 4, 2, 1], base),
        (vec![3, 4, 2, 2], base),
        (vec![3, 4, 2, 1], PackConfig::new(7, PackStrategy::FirstFit { bins: 2 })),
        (vec![3, 4, 2, 1], PackConfig::new(6, PackStrategy::FirstFit { bins: 3 })),
        (vec![3, 4, 2, 1], PackConfig::new(6, PackStrategy::BestFit { bins: 2 })),
        (vec![3, 4, 2, 1], PackConfig::new(6, PackStrategy::ConcatSplit)),
        (vec![3, 4, 2, 1], PackConfig::new(6, PackStrategy::BestFitDecreasing)),
        (vec![3, 4, 2, 1], base.max_segments(2)),
        (vec![3, 4, 2, 1], base.overflow(Overflow::Split)),
    ];
    let prints: Vec<u64> =
        variants.iter().map(|(l, c)| PackPlan::new(l, *c).unwrap().fingerprint()).collect();
    for (i, a) in prints.iter().enumerate() {
        for (j, b) in prints.iter().enumerate().skip(i + 1) {
            assert_ne!(a, b, "variants {i} and {j} share a fingerprint");
        }
    }
    assert_eq!(PackPlan::new(&[3, 4, 2, 1], base).unwrap().fingerprint(), prints[0], "a pure function");
    let docs = || VecSource::new(vec![vec![1u32; 3], vec![2; 4], vec![3; 2], vec![4; 1]]);
    let packed = |strategy| Packed::scan(docs(), PackConfig::new(6, strategy), 0, u32::MAX).unwrap();
    let (ff, bf) = (packed(PackStrategy::FirstFit { bins: 2 }), packed(PackStrategy::BestFit { bins: 2 }));
    assert_eq!((ff.len(), bf.len()), (2, 2));
    assert_ne!(ff.get(0).unwrap().tokens, bf.get(0).unwrap().tokens);
    let first = Loader::builder(ff).batch_size(1).build().unwrap();
    let second = Loader::builder(bf).batch_size(1).build().unwrap();
    let mut it = first.iter();
    it.next().unwrap().unwrap();
    let e = second.iter_from(&it.state()).unwrap_err();
    assert!(matches!(e, LoaderError::StateMismatch { field: "source.fingerprint", .. }), "{e:?}");
}

/// Survivors `pack.rs:435` (`Packed::lengths` -> empty, `[0]`, `[1]`): the lengths scanned,
/// in position order.
#[test]
fn issue33_mutants_pack_packed_lengths_are_the_documents_token_counts() {
    use guideloom_loader::pack::{PackConfig, PackStrategy, Packed};
    use guideloom_loader::VecSource;
    let docs = VecSource::new(vec![vec![5u32, 6, 0], vec![7], vec![], vec![8, 9]]);
    let packed = Packed::scan(docs, PackConfig::new(4, PackStrategy::ConcatSplit), 0, u32::MAX).unwrap();
    assert_eq!(packed.lengths(), [3, 1, 0, 2]);
    assert_eq!(packed.inner().len(), 4);
}

/// Survivor `pack.rs:510` (the kept end of a document: `!= ConcatSplit && == Truncate` ->
/// `||`): a document split across rows keeps its targets across the cut (the target of the
/// last token of a piece is the first token of the next piece), and concat-split ignores the
/// overflow policy (it splits by design); only a truncated document's last kept token loses
/// its target. Document `[1, 2, 3, 4, 5, 6]`, rows of 4, `I` the ignore id.
#[test]
fn issue33_mutants_pack_a_split_document_keeps_its_targets_across_rows() {
    use guideloom_loader::pack::{Overflow, PackConfig, PackStrategy, Packed};
    use guideloom_loader::VecSource;
    const I: u32 = u32::MAX;
    let rows = |config: PackConfig| {
        let packed =
            Packed::scan(VecSource::new(vec![vec![1u32, 2, 3, 4, 5, 6]]), config, 0, I).expect("packs");
        (0..packed.len())
            .map(|r| {
                let row = packed.get(r).unwrap();
                (row.tokens, row.targets, row.loss_mask)
            })
            .collect::<Vec<_>>()
    };
    let across = vec![
        (vec![1, 2, 3, 4], vec![2, 3, 4, 5], vec![1, 1, 1, 1]),
        (vec![5, 6, 0, 0], vec![6, I, I, I], vec![1, 0, 0, 0]),
    ];
    for strategy in [PackStrategy::FirstFit { bins: 1 }, PackStrategy::BestFitDecreasing] {
        assert_eq!(rows(PackConfig::new(4, strategy).overflow(Overflow::Split)), across, "{strategy:?}");
    }
    for overflow in [Overflow::Error, Overflow::Truncate, Overflow::Split] {
        assert_eq!(
            rows(PackConfig::new(4, PackStrategy::ConcatSplit).overflow(overflow)),
            across,
            "{overflow:?}"
        );
    }
    assert_eq!(
        rows(PackConfig::new(4, PackStrategy::FirstFit { bins: 1 }).overflow(Overflow::Truncate)),
        [(vec![1, 2, 3, 4], vec![2, 3, 4, I], vec![1, 1, 1, 0])]
    );
}

/// Documents of `lengths[i]` tokens (document `i` is `i + 1` repeated), as the optional
/// records a stage takes; record `bad` fails to read.
struct PackDocs {
    lengths: Vec<u64>,
    bad: Option<u64>,
}

impl DataSource for PackDocs {
    type Item = Option<Vec<u32>>;
    fn len(&self) -> u64 {
        self.lengths.len() as u64
    }
    fn get(&self, index: u64) -> Result<Option<Vec<u32>>, LoaderError> {
        if Some(index) == self.bad {
            return Err(LoaderError::source(index, format!("document {index} is damaged")));
        }
        let n = *self
            .lengths
            .get(index as usize)
            .ok_or(LoaderError::IndexOutOfRange { index, len: self.len() })?;
        Ok(Some(vec![index as u32 + 1; n as usize]))
    }
}

fn pack_stage(
    lengths: &[u64],
    bad: Option<u64>,
    epochs: u64,
    config: guideloom_loader::pack::PackConfig,
    rows: u64,
) -> guideloom_loader::stage::StagePacked<PackDocs, Vec<u32>, u32> {
    let docs = PackDocs { lengths: lengths.to_vec(), bad };
    let loader = Loader::builder(docs).batch_size(1).epochs(epochs).workers(0).build().unwrap();
    guideloom_loader::stage::StagePacked::new(loader, config, rows, 0, u32::MAX).unwrap()
}

/// Survivors `stage/pack.rs:76` and `282` (`Debug` of the streaming packer and of its
/// iterator -> nothing written): the exact text.
#[test]
fn issue33_mutants_pack_the_streaming_packers_debug_names_its_settings() {
    use guideloom_loader::pack::{Overflow, PackConfig, PackStrategy};
    let config = PackConfig::new(6, PackStrategy::FirstFit { bins: 2 }).overflow(Overflow::Truncate);
    let stage = pack_stage(&[13], None, 1, config, 2);
    assert_eq!(
        format!("{stage:?}"),
        "StagePacked { stage: Stage { batch_size: 2, drop_remainder: false, .. }, config: PackConfig { \
         seq_len: 6, strategy: FirstFit { bins: 2 }, overflow: Truncate, max_segments: None }, .. }"
    );
    let mut it = stage.iter();
    assert_eq!(
        format!("{it:?}"),
        "StagePackedIter { cursor: StageCursor { next_batch: 0, done: false, .. }, dropped_tokens: 0 }"
    );
    it.next().unwrap().unwrap();
    assert_eq!(
        format!("{it:?}"),
        "StagePackedIter { cursor: StageCursor { next_batch: 1, done: false, .. }, dropped_tokens: 7 }"
    );
}

/// Survivor `stage/pack.rs:189` (`state.token > 0` -> `>= 0`): a resume at a record boundary
/// reads nothing before the first batch is asked for, so a damaged record after the state
/// fails that batch, not the resume. Rows of 3 from documents of 3: the state after row 0 is
/// at document 1 with no token of it packed.
#[test]
fn issue33_mutants_pack_a_resume_at_a_record_boundary_reads_nothing_until_asked() {
    use guideloom_loader::pack::{PackConfig, PackStrategy};
    let config = PackConfig::new(3, PackStrategy::ConcatSplit);
    let whole = pack_stage(&[3, 3, 3], None, 1, config, 1);
    let mut it = whole.iter();
    assert_eq!(it.next().unwrap().unwrap().data[0].tokens, [1, 1, 1]);
    let state = it.state();
    assert_eq!((state.offset, state.token, state.rows), (0, 0, 0));
    let damaged = pack_stage(&[3, 3, 3], Some(1), 1, config, 1);
    let mut resumed = damaged.iter_from(&state).expect("the resume reads no record");
    let e = resumed.next().unwrap().unwrap_err();
    assert_eq!(e.record_index(), Some(1), "{e:?}");
    // Mid-record (a token offset), the record is read on resume: the same state over
    // documents of 4 tokens is at token 3 of document 0.
    let mid = pack_stage(&[4, 4], None, 1, config, 1);
    let mut it = mid.iter();
    it.next().unwrap().unwrap();
    let state = it.state();
    assert_eq!((state.token, state.rows), (3, 0));
    let rest: Vec<Vec<u32>> =
        mid.iter_from(&state).unwrap().flat_map(|b| b.unwrap().data.into_iter().map(|r| r.tokens)).collect();
    assert_eq!(rest, [vec![1, 2, 2], vec![2, 2, 0]]);
}

/// Survivor `stage/pack.rs:199` (`rows of the group < state.rows` -> `<=`): a state may say
/// every row of its group was delivered (at most the group's rows, as the refusal says);
/// the resume then goes on with the next group; one row more is refused. First fit into 2
/// bins of 6 over `[3, 4, 2, 1, 5]`: group 1 is the rows `[1,1,1,3,3,4]` and `[2,2,2,2,0,0]`,
/// group 2 `[5,5,5,5,5,0]`.
#[test]
fn issue33_mutants_pack_a_state_may_count_every_row_of_its_group() {
    use guideloom_loader::pack::{PackConfig, PackStrategy};
    let stage =
        pack_stage(&[3, 4, 2, 1, 5], None, 1, PackConfig::new(6, PackStrategy::FirstFit { bins: 2 }), 1);
    let all: Vec<Vec<u32>> = stage.iter().map(|b| b.unwrap().data[0].tokens.clone()).collect();
    assert_eq!(all, [vec![1, 1, 1, 3, 3, 4], vec![2, 2, 2, 2, 0, 0], vec![5, 5, 5, 5, 5, 0]]);
    let mut it = stage.iter();
    it.next().unwrap().unwrap();
    let mut state = it.state();
    assert_eq!((state.offset, state.token, state.rows), (0, 0, 1));
    let rest = |s: &guideloom_loader::stage::StageState| -> Vec<Vec<u32>> {
        stage.iter_from(s).unwrap().map(|b| b.unwrap().data[0].tokens.clone()).collect()
    };
    assert_eq!(rest(&state), all[1..]);
    state.rows = 2;
    assert_eq!(rest(&state), all[2..], "the whole group delivered: the next group follows");
    state.rows = 3;
    let e = stage.iter_from(&state).map(|_| ()).unwrap_err();
    assert!(matches!(e, LoaderError::StateMismatch { field: "rows", .. }), "{e:?}");
    assert_eq!(
        e.to_string(),
        "state mismatch: rows: the loader has at most 2 (rows of the group), the state has 3"
    );
}

/// Survivor `stage/pack.rs:383` (concat-split's row end `epoch changed || full || max
/// segments` -> `(epoch changed || full) && max segments`): a concat-split row never runs
/// into the next epoch, with or without a segment limit. Documents of 3 and 4 tokens, rows
/// of 5, two epochs (unshuffled): each epoch is `[1,1,1,2,2]`, `[2,2,0,0,0]`.
#[test]
fn issue33_mutants_pack_a_concat_split_row_ends_with_its_epoch() {
    use guideloom_loader::pack::{PackConfig, PackStrategy};
    for config in [
        PackConfig::new(5, PackStrategy::ConcatSplit),
        PackConfig::new(5, PackStrategy::ConcatSplit).max_segments(4),
    ] {
        let batches: Vec<(u64, Vec<u32>)> = pack_stage(&[3, 4], None, 2, config, 1)
            .iter()
            .map(|b| {
                let b = b.unwrap();
                (b.epoch, b.data[0].tokens.clone())
            })
            .collect();
        let epoch = [vec![1, 1, 1, 2, 2], vec![2, 2, 0, 0, 0]];
        assert_eq!(
            batches,
            [(0, epoch[0].clone()), (0, epoch[1].clone()), (1, epoch[0].clone()), (1, epoch[1].clone())],
            "{config:?}"
        );
    }
}

/// Survivor `stage/pack.rs:388` (concat-split takes a piece of a record while `token < len`
/// -> `<=`): an empty document adds no piece and no segment to a row, as in the planned
/// packer. Documents of 2, 0 and 2 tokens into rows of 4: one row, two segments.
#[test]
fn issue33_mutants_pack_an_empty_document_adds_no_segment() {
    use guideloom_loader::pack::{PackConfig, PackPlan, PackStrategy, Piece};
    let config = PackConfig::new(4, PackStrategy::ConcatSplit);
    let rows: Vec<_> =
        pack_stage(&[2, 0, 2], None, 1, config, 1).iter().map(|b| b.unwrap().data[0].clone()).collect();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].pieces, [Piece { doc: 0, start: 0, len: 2 }, Piece { doc: 2, start: 0, len: 2 }]);
    assert_eq!(rows[0].cu_seqlens, [0, 2, 4]);
    assert_eq!(rows[0].segment_ids, [1, 1, 2, 2]);
    let plan = PackPlan::new(&[2, 0, 2], config).unwrap();
    assert_eq!(plan.row(0).unwrap(), rows[0].pieces);
}

/// Survivor `stage/pack.rs:399` (concat-split's row is closed once full: `full || max
/// segments` -> `&&`, which reads the next record before closing it): a row is delivered
/// without reading past it, so a damaged record fails the batch that needs it, not the one
/// before. Rows of 3 from documents of 3, document 1 damaged.
#[test]
fn issue33_mutants_pack_a_full_row_is_delivered_without_reading_past_it() {
    use guideloom_loader::pack::{PackConfig, PackStrategy};
    for config in [
        PackConfig::new(3, PackStrategy::ConcatSplit),
        PackConfig::new(3, PackStrategy::ConcatSplit).max_segments(2),
    ] {
        let stage = pack_stage(&[3, 3, 3], Some(1), 1, config, 1);
        let mut it = stage.iter();
        assert_eq!(it.next().unwrap().unwrap().data[0].tokens, [1, 1, 1], "{config:?}");
        let e = it.next().unwrap().unwrap_err();
        assert_eq!(e.record_index(), Some(1), "{config:?}: {e:?}");
    }
    // One segment a row: the row closes at its segment limit, not full, without reading on.
    let stage =
        pack_stage(&[2, 3], Some(1), 1, PackConfig::new(3, PackStrategy::ConcatSplit).max_segments(1), 1);
    let mut it = stage.iter();
    assert_eq!(it.next().unwrap().unwrap().data[0].tokens, [1, 1, 0]);
    assert_eq!(it.next().unwrap().unwrap_err().record_index(), Some(1));
}

/// Survivor `stage/pack.rs:429` (`Overflow::Error` refuses a document longer than a row
/// `if token == 0` -> `!= 0`, which packed its first pieces and refused it only in the next
/// group): the group that meets the document fails, before any of its rows is delivered
/// (batches of one row, so the first batch needs only the first group's first row); a
/// document exactly a row long is packed.
#[test]
fn issue33_mutants_pack_a_document_too_long_fails_the_first_batch_that_meets_it() {
    use guideloom_loader::pack::{PackConfig, PackStrategy};
    for strategy in [PackStrategy::FirstFit { bins: 2 }, PackStrategy::BestFit { bins: 2 }] {
        let stage = pack_stage(&[2, 13], None, 1, PackConfig::new(6, strategy), 1);
        let mut it = stage.iter();
        let e = it.next().unwrap().unwrap_err();
        assert!(
            matches!(e, LoaderError::DocumentTooLong { index: 1, len: 13, seq_len: 6 }),
            "{strategy:?}: {e:?}"
        );
        let rows: Vec<Vec<u32>> = pack_stage(&[2, 6], None, 1, PackConfig::new(6, strategy), 4)
            .iter()
            .flat_map(|b| b.unwrap().data.into_iter().map(|r| r.tokens))
            .collect();
        assert_eq!(rows, [vec![1, 1, 0, 0, 0, 0], vec![2; 6]], "{strategy:?}: 6 tokens fit a row of 6");
    }
}

/// The records of a sequential run, padding included, batch by batch.
fn seq_records(
    it: impl Iterator<Item = Result<guideloom_loader::sequential::SequentialBatch<Vec<(u64, u64)>>, LoaderError>>,
) -> Vec<Vec<(u64, u64)>> {
    it.map(|b| b.unwrap().data).collect()
}

/// Survivors `sequential/batch.rs:27`, `32` (`SequentialBatch::len` -> 0, 1; `is_empty` ->
/// `true`, `false`): a batch counts its records, padding included. Shards `[5, 3, 4, 2]`, 2
/// ranks, batches of 2 padded at the end: rank 0 reads 7 records, 4 batches, the last one real
/// record and one padding.
#[test]
fn issue33_mutants_sequential_a_batch_counts_its_records_with_padding() {
    use guideloom_loader::sequential::{SequentialEnd, SequentialLoader};
    let loader = SequentialLoader::builder(crate::sequential::shards(&[5, 3, 4, 2]))
        .shard(0, 2)
        .cycle(2)
        .batch_size(2)
        .end(SequentialEnd::Pad)
        .workers(0)
        .build()
        .unwrap();
    let batches: Vec<_> = loader.iter().map(Result::unwrap).collect();
    assert_eq!(batches.iter().map(|b| (b.len(), b.is_empty())).collect::<Vec<_>>(), [(2, false); 4]);
    assert_eq!(batches[3].padding, [false, true]);
    // The count is of `records` (its fields are public): emptied, the batch is empty.
    let mut emptied = batches[0].clone();
    emptied.records.clear();
    assert_eq!((emptied.len(), emptied.is_empty()), (0, true));
    let three =
        SequentialLoader::builder(crate::sequential::shards(&[3])).batch_size(3).workers(0).build().unwrap();
    assert_eq!(three.iter().map(|b| b.unwrap().len()).collect::<Vec<_>>(), [3]);
}

/// Survivors `sequential/builder.rs:107`, `116`, `119` (the bounds `world_size`, `cycle`,
/// `window` `> MAX` -> `==`, `>=`, and `||` -> `&&`): each bound is accepted and one past it is
/// refused with the exact message; 0 is refused.
#[test]
fn issue33_mutants_sequential_builder_bounds_on_both_sides() {
    use guideloom_loader::sequential::SequentialLoader;
    let b = || SequentialLoader::builder(crate::sequential::shards(&[2, 2])).workers(0);
    let refusal = |r: Result<_, LoaderError>| match r.map(|_: SequentialLoader<_>| ()) {
        Err(LoaderError::InvalidConfig { field, detail }) => format!("{field}: {detail}"),
        other => panic!("expected InvalidConfig, got {other:?}"),
    };
    assert!(b().shard(0, 1 << 20).build().is_ok());
    assert_eq!(refusal(b().shard(0, (1 << 20) + 1).build()), "world_size: must be 1 to 1048576, got 1048577");
    assert_eq!(refusal(b().shard(0, 0).build()), "world_size: must be 1 to 1048576, got 0");
    assert!(b().cycle(1 << 16).build().is_ok());
    assert_eq!(refusal(b().cycle((1 << 16) + 1).build()), "cycle: must be 1 to 65536, got 65537");
    assert_eq!(refusal(b().cycle(0).build()), "cycle: must be 1 to 65536, got 0");
    assert!(b().window_shuffle(1 << 24).build().is_ok());
    assert_eq!(
        refusal(b().window_shuffle((1 << 24) + 1).build()),
        "window: must be 1 to 16777216, got 16777217"
    );
    assert_eq!(refusal(b().window_shuffle(0).build()), "window: must be 1 to 16777216, got 0");
}

/// Survivors `sequential/end.rs:65` (`SequentialEnd::tag` -> 0, 1): the end policy is part of
/// the configuration a state is checked against, so a state of one policy is refused by a
/// loader of another (and accepted by its own).
#[test]
fn issue33_mutants_sequential_a_state_of_one_end_policy_is_refused_by_another() {
    use guideloom_loader::sequential::{SequentialEnd, SequentialLoader, StopQuery};
    use std::sync::Arc;
    let ends = || {
        [
            SequentialEnd::Exhaust,
            SequentialEnd::Drop,
            SequentialEnd::Pad,
            SequentialEnd::Stop(Arc::new(|_: &StopQuery| true)),
        ]
    };
    let loader = |end| {
        SequentialLoader::builder(crate::sequential::shards(&[5, 3]))
            .batch_size(2)
            .end(end)
            .workers(0)
            .build()
            .unwrap()
    };
    for (i, a) in ends().into_iter().enumerate() {
        let mut it = loader(a).iter();
        it.next().unwrap().unwrap();
        let state = it.state();
        for (j, b) in ends().into_iter().enumerate() {
            let resumed = loader(b).iter_from(&state).map(|_| ());
            if i == j {
                assert!(resumed.is_ok(), "{i}");
            } else {
                let e = resumed.unwrap_err();
                assert!(matches!(e, LoaderError::StateMismatch { field: "config", .. }), "{i} -> {j}: {e:?}");
            }
        }
    }
}

/// Survivors `sequential/interleave.rs:34` (`window_order` -> `None`; `window > 1` -> `== 1`,
/// `< 1`; `len > 1` -> `== 1`, `< 1`): a window shuffle does shuffle. One shard of 64, windows
/// of 8: every window is a permutation of itself, some window is out of order, and two epochs
/// order the windows differently; windows of 1 keep the shard's order.
#[test]
fn issue33_mutants_sequential_a_window_shuffle_shuffles() {
    use guideloom_loader::sequential::SequentialLoader;
    let run = |window| {
        let loader = SequentialLoader::builder(crate::sequential::shards(&[64]))
            .window_shuffle(window)
            .shuffle(5)
            .epochs(2)
            .batch_size(8)
            .workers(0)
            .build()
            .unwrap();
        seq_records(loader.iter())
    };
    // Batch b (windows of 8, one per batch) in the shard's order.
    let in_order = |b: usize| -> Vec<(u64, u64)> { (0..8).map(|k| (0, (b % 8) as u64 * 8 + k)).collect() };
    let shuffled = run(8);
    assert_eq!(shuffled.len(), 16);
    for (b, batch) in shuffled.iter().enumerate() {
        let mut sorted = batch.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, in_order(b), "batch {b}");
    }
    let out_of_order = shuffled.iter().filter(|b| b.windows(2).any(|p| p[0] > p[1])).count();
    assert!(out_of_order >= 8, "only {out_of_order} of 16 windows shuffled");
    assert_ne!(shuffled[..8], shuffled[8..], "epochs 0 and 1 shuffle alike");
    for (b, batch) in run(1).iter().enumerate() {
        assert_eq!(*batch, in_order(b), "batch {b}");
    }
}

/// Survivor `sequential/interleave.rs:58` (the undelivered records' runs: `last.1 == r` ->
/// `false`): consecutive dropped records are reported as one run. One shard of 5, batches of
/// 3, the remainder dropped: records 3 and 4 in one report.
#[test]
fn issue33_mutants_sequential_dropped_records_are_reported_in_runs() {
    use guideloom_loader::sequential::{Dropped, SequentialEnd, SequentialLoader};
    /// Shard lengths, the batches delivered (records `(shard, k)`), the one drop report.
    type Case = (&'static [u64], Vec<Vec<(u64, u64)>>, Dropped);
    let cases: [Case; 2] = [
        (
            &[5, 2],
            vec![vec![(0, 0), (0, 1), (0, 2)], vec![(0, 3), (0, 4), (1, 0)]],
            Dropped::Records { epoch: 0, shard: 1, start: 1, end: 2 },
        ),
        (&[5], vec![vec![(0, 0), (0, 1), (0, 2)]], Dropped::Records { epoch: 0, shard: 0, start: 3, end: 5 }),
    ];
    for (lengths, batches, dropped) in cases {
        let loader = SequentialLoader::builder(crate::sequential::shards(lengths))
            .batch_size(3)
            .end(SequentialEnd::Drop)
            .workers(0)
            .build()
            .unwrap();
        let mut it = loader.iter();
        assert_eq!(seq_records(&mut it), batches, "{lengths:?}");
        assert_eq!(it.take_dropped(), [dropped], "{lengths:?}");
    }
}

/// Survivors `sequential/interleave.rs:299` (a finished shard's slot taken by the next shard
/// of the list: the guard -> `false`, `<` -> `>`): with 2 shards open, the next shard takes
/// the finished one's slot and turn (Grain's interleave), it does not join at the end. One
/// rank, shards `[1, 3, 2]` in order, cycle 2: 0.0, 1.0, then shard 2 in shard 0's slot:
/// 2.0, 1.1, 2.1, 1.2.
#[test]
fn issue33_mutants_sequential_the_next_shard_takes_the_finished_ones_slot() {
    use guideloom_loader::sequential::SequentialLoader;
    for known in [true, false] {
        let source = if known {
            crate::sequential::shards(&[1, 3, 2])
        } else {
            crate::sequential::shards(&[1, 3, 2]).without_lengths()
        };
        let loader = SequentialLoader::builder(source).cycle(2).batch_size(1).workers(0).build().unwrap();
        assert_eq!(loader.deal(0), [vec![0, 1, 2]], "known {known}");
        let stream: Vec<(u64, u64)> = seq_records(loader.iter()).into_iter().flatten().collect();
        assert_eq!(stream, [(0, 0), (1, 0), (2, 0), (1, 1), (2, 1), (1, 2)], "known {known}");
    }
}

/// Survivor `sequential/loader.rs:201` (`states.is_empty() || ...` -> `&&`, which let an
/// empty list through to `states[0]`: a panic): no state is refused, naming the world size.
#[test]
fn issue33_mutants_sequential_an_elastic_resume_from_no_state_is_refused() {
    use guideloom_loader::sequential::SequentialLoader;
    let loader = SequentialLoader::builder(crate::sequential::shards(&[2, 2])).workers(0).build().unwrap();
    let e = loader.iter_from_ranks(&[]).map(|_| ()).unwrap_err();
    assert!(matches!(e, LoaderError::StateMismatch { field: "world_size", .. }), "{e:?}");
    assert_eq!(
        e.to_string(),
        "state mismatch: world_size: the loader has one state per rank 0..world_size of one world, the state has 0 states of ranks {}"
    );
}

/// Survivor `sequential/producer.rs:122` (an unbounded loader stops only after an epoch that
/// delivered nothing: `step == 0` -> `!= 0`): an unbounded loader over shards of unknown
/// length goes on epoch after epoch; over shards without a record it ends.
#[test]
fn issue33_mutants_sequential_an_unbounded_loader_stops_only_on_empty_data() {
    use guideloom_loader::sequential::SequentialLoader;
    let loader = SequentialLoader::builder(crate::sequential::shards(&[2, 1]).without_lengths())
        .unbounded()
        .batch_size(2)
        .workers(0)
        .build()
        .unwrap();
    let epochs: Vec<u64> = loader.iter().take(6).map(|b| b.unwrap().epoch).collect();
    assert_eq!(epochs, [0, 0, 1, 1, 2, 2]);
    let empty = SequentialLoader::builder(crate::sequential::shards(&[0, 0]).without_lengths())
        .unbounded()
        .workers(0)
        .build()
        .unwrap();
    assert_eq!(empty.iter().count(), 0);
}

/// Survivor `sequential/producer.rs:135` (records left at an epoch's end are reported as
/// dropped only under `SequentialEnd::Drop`: `Drop && !padding` -> `||`): a stop hook's early
/// end reports the rest of the stream (`Dropped::Rest`), not dropped records, with shard
/// lengths known too. Shards `[5, 3, 4, 2]`, rank 0 of 2 reads shards 0 and 3; the hook
/// refuses step 2.
#[test]
fn issue33_mutants_sequential_a_stopped_epoch_reports_its_rest_not_dropped_records() {
    use guideloom_loader::sequential::{Dropped, SequentialEnd, SequentialLoader, StopQuery};
    use std::sync::Arc;
    for known in [true, false] {
        let source = if known {
            crate::sequential::shards(&[5, 3, 4, 2])
        } else {
            crate::sequential::shards(&[5, 3, 4, 2]).without_lengths()
        };
        let loader = SequentialLoader::builder(source)
            .shard(0, 2)
            .cycle(2)
            .batch_size(2)
            .end(SequentialEnd::Stop(Arc::new(|q: &StopQuery| q.full && q.step < 2)))
            .workers(0)
            .build()
            .unwrap();
        let mut it = loader.iter();
        let records: Vec<(u64, u64)> = seq_records(&mut it).into_iter().flatten().collect();
        let rest: Vec<(u64, u64)> = it
            .take_dropped()
            .into_iter()
            .map(|d| match d {
                Dropped::Rest { epoch: 0, from } => (from.shard, from.pos.record),
                other => panic!("known {known}: unexpected {other:?}"),
            })
            .collect();
        if known {
            assert_eq!(records, [(0, 0), (3, 0), (0, 1), (3, 1)]);
            assert_eq!(rest, [(0, 2), (3, 2)]);
        } else {
            assert_eq!(records, [(0, 0), (2, 0), (0, 1), (2, 1)]);
            assert_eq!(rest, [(0, 2), (2, 2)]);
        }
    }
}

/// Survivors `sequential/builder.rs:35`, `iter.rs:45`, `loader.rs:75` (the `Debug` of the
/// sequential builder's kind, of the loader and of its iterator -> nothing written): the
/// exact text.
#[test]
fn issue33_mutants_sequential_debug_names_the_settings() {
    use guideloom_loader::sequential::SequentialLoader;
    let builder =
        SequentialLoader::builder(crate::sequential::shards(&[2, 1])).cycle(2).window_shuffle(4).workers(0);
    let text = format!("{builder:?}");
    assert!(
        text.contains("kind: Sequential { cycle: 2, window: 4, end: Exhaust, pack: None, .. }"),
        "{text}"
    );
    let loader = builder.build().unwrap();
    assert_eq!(
        format!("{loader:?}"),
        "SequentialLoader { options: LoaderOptions { seed: 0, shuffle: false, epochs: Some(1), rank: 0, \
         world_size: 1, batch_size: 32, batch_size_set: false, workers: 0, prefetch: None, transforms: 0 }, \
         end: Exhaust, shards: 2, workers: 0, prefetch: 1, .. }"
    );
    let mut it = loader.iter();
    it.next().unwrap().unwrap();
    let text = format!("{it:?}");
    assert!(
        text.starts_with(
            "SequentialIter { state: SequentialState { version: 1, epoch: 0, batch: 1, step: 1,"
        ),
        "{text}"
    );
    assert!(text.ends_with(" }, queued: 0, done: false, .. }"), "{text}");
}

/// Shards whose readers count the records read.
struct CountedShards {
    inner: guideloom_loader::sequential::VecShards<(u64, u64)>,
    reads: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

struct CountedReader {
    inner: guideloom_loader::sequential::VecShardReader<(u64, u64)>,
    reads: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl guideloom_loader::sequential::ShardReader for CountedReader {
    type Item = (u64, u64);
    fn next_record(&mut self) -> Result<Option<(u64, u64)>, LoaderError> {
        let r = self.inner.next_record()?;
        if r.is_some() {
            self.reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        Ok(r)
    }
    fn pos(&self) -> guideloom_loader::sequential::ShardPos {
        self.inner.pos()
    }
}

impl guideloom_loader::sequential::SequentialSource for CountedShards {
    type Item = (u64, u64);
    type Reader = CountedReader;
    fn shards(&self) -> Vec<guideloom_loader::sequential::ShardInfo> {
        self.inner.shards()
    }
    fn open(
        &self,
        shard: u64,
        at: guideloom_loader::sequential::ShardPos,
    ) -> Result<CountedReader, LoaderError> {
        Ok(CountedReader { inner: self.inner.open(shard, at)?, reads: std::sync::Arc::clone(&self.reads) })
    }
}

/// Survivor `sequential/iter.rs:114` (the read-ahead `queue < prefetch` -> `<=`): a
/// sequential loader reads `prefetch` batches ahead of the one delivered, not one more.
/// Batches of one record from one shard of 10: after the first batch, 1 + prefetch records
/// are read with worker threads, 1 without.
#[test]
fn issue33_mutants_sequential_prefetch_reads_that_many_batches_ahead() {
    use guideloom_loader::sequential::SequentialLoader;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    for (workers, prefetch, after_one) in [(0, 1, 1), (1, 1, 2), (1, 2, 3), (2, 4, 5)] {
        let reads = Arc::new(AtomicU64::new(0));
        let source = CountedShards { inner: crate::sequential::shards(&[10]), reads: Arc::clone(&reads) };
        let loader = SequentialLoader::builder(source)
            .batch_size(1)
            .workers(workers)
            .prefetch(prefetch)
            .build()
            .unwrap();
        let mut it = loader.iter();
        assert_eq!(it.next().unwrap().unwrap().data, [(0, 0)]);
        assert_eq!(reads.load(Ordering::SeqCst), after_one, "{workers} workers, prefetch {prefetch}");
        assert_eq!(it.count(), 9);
        assert_eq!(reads.load(Ordering::SeqCst), 10);
    }
}

/// Survivors `sequential/source.rs:93` (the default `SequentialSource::fingerprint` -> 1),
/// `101`, `107` (`Arc<T>` as a source: `shards` -> empty or one default shard, `fingerprint`
/// -> 0, 1) and `189` (`VecShards::fingerprint` -> 0, 1): a source without its own
/// fingerprint has 0, as documented; `VecShards` has the one it was given and a state of one
/// is refused over another; an `Arc` of a source is that source.
#[test]
fn issue33_mutants_sequential_source_fingerprints_and_arc_sources() {
    use guideloom_loader::sequential::{SequentialLoader, SequentialSource, ShardInfo};
    use std::sync::atomic::AtomicU64;
    use std::sync::Arc;
    let counted =
        CountedShards { inner: crate::sequential::shards(&[3]), reads: Arc::new(AtomicU64::new(0)) };
    assert_eq!(counted.fingerprint(), 0, "the trait's default");
    assert_eq!(crate::sequential::shards(&[3]).fingerprint(), 0);
    assert_eq!(crate::sequential::shards(&[3]).with_fingerprint(7).fingerprint(), 7);
    let arc = Arc::new(crate::sequential::shards(&[3, 1]).with_fingerprint(7));
    assert_eq!(arc.fingerprint(), 7);
    assert_eq!(arc.shards(), [ShardInfo { len_hint: Some(3) }, ShardInfo { len_hint: Some(1) }]);
    let over_arc = SequentialLoader::builder(Arc::clone(&arc)).batch_size(2).workers(0).build().unwrap();
    let over_vec = SequentialLoader::builder(crate::sequential::shards(&[3, 1]).with_fingerprint(7))
        .batch_size(2)
        .workers(0)
        .build()
        .unwrap();
    assert_eq!(seq_records(over_arc.iter()), seq_records(over_vec.iter()));
    let mut it = over_arc.iter();
    it.next().unwrap().unwrap();
    let state = it.state();
    assert!(over_vec.iter_from(&state).is_ok());
    let other = SequentialLoader::builder(crate::sequential::shards(&[3, 1]).with_fingerprint(8))
        .batch_size(2)
        .workers(0)
        .build()
        .unwrap();
    let e = other.iter_from(&state).map(|_| ()).unwrap_err();
    assert!(matches!(e, LoaderError::StateMismatch { field: "source", .. }), "{e:?}");
}

/// Survivor `sequential/source.rs:179` (`VecShards::open` refuses a position whose record
/// and offset differ `||` one past the shard's end -> `&&`): each alone is refused, naming
/// the shard and record; the shard's end itself is a position (it reads nothing).
#[test]
fn issue33_mutants_sequential_vec_shards_open_only_their_positions() {
    use guideloom_loader::sequential::{SequentialSource, ShardPos, ShardReader};
    let s = crate::sequential::shards(&[3]);
    for (record, offset) in [(1, 2), (4, 4), (5, 4)] {
        let e = s.open(0, ShardPos { record, offset }).map(|_| ()).unwrap_err();
        assert!(
            matches!(e, LoaderError::Shard { shard: 0, record: r, .. } if r == record),
            "{record}/{offset}: {e:?}"
        );
    }
    let mut end = s.open(0, ShardPos { record: 3, offset: 3 }).unwrap();
    assert_eq!(end.next_record().unwrap(), None);
    let mut mid = s.open(0, ShardPos { record: 2, offset: 2 }).unwrap();
    assert_eq!(mid.next_record().unwrap(), Some((0, 2)));
    assert!(matches!(s.open(1, ShardPos::START), Err(LoaderError::IndexOutOfRange { index: 1, len: 1 })));
}
