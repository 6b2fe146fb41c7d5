//! Elastic resume (issue 17, items 1-6): a state of one topology restores onto another with
//! the same global batch (or a compatible one), losing and repeating nothing.

use std::collections::{BTreeMap, BTreeSet};

use guideloom_loader::rand::Rng;
use guideloom_loader::{Batch, Loader, LoaderError, RangeSource, RecordRng, ResumeOptions, State};
use proptest::prelude::*;

/// A record as the tests see it: (record, position, padding, repeat, per-record draw).
type Rec = (i64, u64, bool, bool, u64);
/// The batches of every rank of one run.
type Run = Vec<Vec<Batch<Vec<(i64, u64)>>>>;

fn records(b: &Batch<Vec<(i64, u64)>>) -> Vec<Rec> {
    (0..b.len()).map(|i| (b.data[i].0, b.positions[i], b.padding[i], b.repeat[i], b.data[i].1)).collect()
}

/// Rank `rank` of `world` over `0..n` with global batch `g`; each record carries one draw of its
/// per-record RNG.
#[allow(clippy::too_many_arguments)] // one knob per loader setting
fn loader(
    n: i64,
    g: u64,
    rank: u64,
    world: u64,
    drop: bool,
    shuffle: Option<u64>,
    epochs: u64,
    workers: usize,
) -> Loader<RangeSource, (i64, u64)> {
    let mut b = Loader::builder(RangeSource::new(0, n, 1).expect("range"))
        .global_batch(g)
        .shard(rank, world)
        .drop_remainder(drop)
        .epochs(epochs)
        .workers(workers)
        .map(|x, ctx| (x, ctx.rng().random::<u64>()));
    if let Some(seed) = shuffle {
        b = b.shuffle(seed);
    }
    b.build().expect("valid")
}

/// One run of `world` ranks from `state` (or the start) for `steps` steps (or to the end): the
/// batches of every rank, and the state every rank writes afterwards (asserted identical).
#[allow(clippy::too_many_arguments)] // one knob per loader setting
fn run(
    n: i64,
    g: u64,
    world: u64,
    drop: bool,
    shuffle: Option<u64>,
    epochs: u64,
    from: Option<&State>,
    steps: Option<usize>,
) -> (Run, State) {
    let mut per_rank = Vec::new();
    let mut states = BTreeSet::new();
    for rank in 0..world {
        let l = loader(n, g, rank, world, drop, shuffle, epochs, (rank % 3) as usize);
        let mut it = match from {
            Some(s) => l.iter_from(s).expect("the state fits"),
            None => l.iter(),
        };
        let mut got = Vec::new();
        while steps.is_none_or(|k| got.len() < k) {
            match it.next() {
                Some(b) => got.push(b.expect("ok")),
                None => break,
            }
        }
        states.insert(it.state().to_json());
        per_rank.push(got);
    }
    assert_eq!(states.len(), 1, "every rank writes the same state: {states:?}");
    let state = State::from_json(states.first().expect("one")).expect("parse");
    (per_rank, state)
}

/// Per global step (epoch, number): the sorted records of all ranks.
fn steps_of(runs: &[&Run]) -> BTreeMap<(u64, u64), Vec<Rec>> {
    let mut out: BTreeMap<(u64, u64), Vec<Rec>> = BTreeMap::new();
    for run in runs {
        for rank in run.iter() {
            for b in rank {
                out.entry((b.epoch, b.number)).or_default().extend(records(b));
            }
        }
    }
    for v in out.values_mut() {
        v.sort_unstable();
    }
    out
}

fn data(b: &Batch<Vec<(i64, u64)>>) -> Vec<i64> {
    b.data.iter().map(|r| r.0).collect()
}

/// Item 1: n = 100, G = 24, world 8 (B = 3) for 2 steps, then world 6 (B = 4).
#[test]
fn issue17_item1_eight_to_six_ranks_without_shuffle() {
    for drop in [true, false] {
        let (eight, state) = run(100, 24, 8, drop, None, 1, None, Some(2));
        assert_eq!((state.next_batch, state.global_batch), (2, 24));
        assert_eq!(data(&eight[0][0]), [0, 1, 2]);
        assert_eq!(data(&eight[7][0]), [21, 22, 23]);
        assert_eq!(data(&eight[0][1]), [24, 25, 26]);
        let (six, end) = run(100, 24, 6, drop, None, 1, Some(&state), None);
        assert_eq!(data(&six[0][0]), [48, 49, 50, 51]);
        assert_eq!(six[0][0].number, 2);
        assert_eq!(data(&six[5][0]), [68, 69, 70, 71]);
        assert_eq!(data(&six[0][1]), [72, 73, 74, 75]);
        assert_eq!(data(&six[5][1]), [92, 93, 94, 95]);
        if drop {
            assert_eq!(loader(100, 24, 0, 6, true, None, 1, 0).len(), 4);
            assert_eq!(loader(100, 24, 0, 8, true, None, 1, 0).len(), 4);
            assert!(six.iter().all(|r| r.len() == 2), "steps 2 and 3 only");
            assert_eq!(end.next_batch, 4);
        } else {
            assert!(six.iter().all(|r| r.len() == 3), "steps 2, 3 and 4");
            let step4: Vec<(Vec<i64>, Vec<bool>)> =
                six.iter().map(|r| (data(&r[2]), r[2].padding.clone())).collect();
            assert_eq!(step4[0], (vec![96, 97, 98, 99], vec![false; 4]));
            for (rank, (records, padding)) in step4.iter().enumerate().skip(1) {
                let first = 4 * (rank as i64 - 1);
                assert_eq!(records, &(first..first + 4).collect::<Vec<_>>(), "rank {rank}");
                assert_eq!(padding, &vec![true; 4], "rank {rank}");
            }
            // The real records of epoch 0 over all ranks and both topologies: 0..99, once each.
            let mut real: Vec<i64> = eight
                .iter()
                .chain(&six)
                .flatten()
                .flat_map(|b| records(b).into_iter().filter(|r| !r.2).map(|r| r.0))
                .collect();
            real.sort_unstable();
            assert_eq!(real, (0..100).collect::<Vec<_>>());
            // The uninterrupted world-8 run has the same real records in step 4.
            let (whole, _) = run(100, 24, 8, false, None, 1, None, None);
            let real_step4 = |run: &Run| -> BTreeSet<i64> {
                run.iter().flat_map(|r| records(&r[r.len() - 1])).filter(|r| !r.2).map(|r| r.0).collect()
            };
            assert_eq!(real_step4(&whole), (96..100).collect());
            assert_eq!(real_step4(&six), (96..100).collect());
            assert_eq!(data(&whole[1][4]), [99, 0, 1]);
            assert_eq!(whole[1][4].padding, [false, true, true]);
        }
    }
}

/// Item 2: the same with shuffle (seed 7): steps 2 and 3 hold the same record sets (and
/// draws) as the uninterrupted world-8 run; epoch 1 is identical.
#[test]
fn issue17_item2_eight_to_six_ranks_with_shuffle_keep_step_sets() {
    let seed = Some(7);
    let (whole, _) = run(100, 24, 8, false, seed, 2, None, None);
    let (eight, state) = run(100, 24, 8, false, seed, 2, None, Some(2));
    let (six, _) = run(100, 24, 6, false, seed, 2, Some(&state), None);
    let reference = steps_of(&[&whole]);
    let resumed = steps_of(&[&eight, &six]);
    assert_eq!(reference.len(), 10);
    assert_eq!(resumed, reference);
    // Record = perm(seed 7, epoch 0)(position): rank 0 of world 6 starts at position 48.
    let p = guideloom_loader::Permutation::new(100, 7, 0);
    let expected: Vec<i64> = (48..52).map(|pos| p.apply(pos).expect("in range") as i64).collect();
    assert_eq!(data(&six[0][0]), expected);
    // Epoch 1 after the switch equals a world-6 run of epoch 1, rank by rank.
    let (fresh_six, _) = run(100, 24, 6, false, seed, 2, None, None);
    for rank in 0..6 {
        let resumed_epoch1: Vec<_> = six[rank].iter().filter(|b| b.epoch == 1).collect();
        let fresh_epoch1: Vec<_> = fresh_six[rank].iter().filter(|b| b.epoch == 1).collect();
        assert_eq!(resumed_epoch1.len(), 5);
        assert_eq!(resumed_epoch1, fresh_epoch1, "rank {rank}");
    }
}

/// Item 3: the 8 states written by ranks 0-7 at one step are byte-identical; rank 3's restores
/// each of 6 new ranks to item 1's output.
#[test]
fn issue17_item3_states_of_all_ranks_are_identical_and_any_restores_any_rank() {
    let mut states = Vec::new();
    for rank in 0..8 {
        let l = loader(100, 24, rank, 8, true, None, 1, 1);
        let mut it = l.iter();
        it.next().expect("step 0").expect("ok");
        it.next().expect("step 1").expect("ok");
        states.push(it.state().to_json());
    }
    assert!(states.iter().all(|s| *s == states[0]), "{states:?}");
    assert!(states[3].contains(r#""next_batch":2,"global_batch":24"#), "{}", states[3]);
    let rank3 = State::from_json(&states[3]).expect("parse");
    let expected = [
        [48, 49, 50, 51],
        [52, 53, 54, 55],
        [56, 57, 58, 59],
        [60, 61, 62, 63],
        [64, 65, 66, 67],
        [68, 69, 70, 71],
    ];
    for (rank, first) in expected.iter().enumerate() {
        let l = loader(100, 24, rank as u64, 6, true, None, 1, 2);
        let got: Vec<Vec<i64>> = l.iter_from(&rank3).expect("fits").map(|b| data(&b.expect("ok"))).collect();
        let second: Vec<i64> = first.iter().map(|x| x + 24).collect();
        assert_eq!(got, [first.to_vec(), second], "rank {rank}");
    }
}

/// Item 4: a checkpoint exactly at the end of an epoch resumes at epoch 1, step 0, for any world
/// size (and for another global batch, rescaled).
#[test]
fn issue17_item4_checkpoint_at_the_epoch_end_resumes_at_epoch_one_step_zero() {
    for drop in [true, false] {
        let (_, state) = run(100, 24, 8, drop, Some(3), 2, None, Some(if drop { 4 } else { 5 }));
        assert_eq!(state.next_batch, if drop { 4 } else { 5 });
        for world in [1u64, 2, 3, 4, 6, 8, 12, 24] {
            for rank in [0, world - 1] {
                let l = loader(100, 24, rank, world, drop, Some(3), 2, 0);
                let b = l.iter_from(&state).expect("fits").next().expect("epoch 1").expect("ok");
                let b_per_rank = 24 / world;
                assert_eq!((b.epoch, b.number), (1, l.len()), "world {world}");
                assert_eq!(b.positions[0], rank * b_per_rank, "world {world} rank {rank}");
            }
        }
        // Global batch 12 over 4 ranks: the epoch end is a multiple of every global batch.
        let l = loader(100, 12, 2, 4, drop, Some(3), 2, 0);
        let b = l.iter_from(&state).expect("fits").next().expect("epoch 1").expect("ok");
        assert_eq!((b.epoch, b.number, b.positions[0]), (1, l.len(), 6));
    }
}

/// Item 5: 8 -> 6 -> 8 within one epoch equals the uninterrupted run's step sets and per-record
/// RNG draws.
#[test]
fn issue17_item5_eight_six_eight_equals_the_uninterrupted_run() {
    let seed = Some(7);
    let (whole, _) = run(100, 24, 8, false, seed, 2, None, None);
    let (a, s1) = run(100, 24, 8, false, seed, 2, None, Some(1));
    let (b, s2) = run(100, 24, 6, false, seed, 2, Some(&s1), Some(2));
    assert_eq!(s2.next_batch, 3);
    let (c, _) = run(100, 24, 8, false, seed, 2, Some(&s2), None);
    let reference = steps_of(&[&whole]);
    assert_eq!(steps_of(&[&a, &b, &c]), reference);
    for ((epoch, _), recs) in &reference {
        for &(_, position, _, _, draw) in recs {
            assert_eq!(
                RecordRng::new(7, *epoch, position).random::<u64>(),
                draw,
                "epoch {epoch} position {position}"
            );
        }
    }
}

/// Item 6: world size 5 with G = 24 is an `InvalidConfig` naming 24 and 5.
#[test]
fn issue17_item6_world_size_that_does_not_divide_the_global_batch_is_refused() {
    let e = Loader::builder(RangeSource::new(0, 100, 1).expect("range"))
        .global_batch(24)
        .shard(0, 5)
        .build()
        .expect_err("5 does not divide 24");
    match &e {
        LoaderError::InvalidConfig { field, detail } => {
            assert_eq!(*field, "world_size");
            assert_eq!(detail, "the world size 5 does not divide the global batch 24");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(
        e.to_string(),
        "invalid configuration: world_size: the world size 5 does not divide the global batch 24"
    );
    let e = Loader::builder(RangeSource::new(0, 100, 1).expect("range"))
        .global_batch(24)
        .batch_size(3)
        .shard(0, 6)
        .build()
        .expect_err("3 * 6 is not 24");
    assert!(matches!(e, LoaderError::InvalidConfig { field: "batch_size", .. }), "{e:?}");
}

/// Another global batch: accepted when it divides the consumed positions (the step is
/// rescaled), refused otherwise, or rounded down with the replayed positions flagged.
#[test]
fn issue17_another_global_batch_is_rescaled_refused_or_rounded_down() {
    let (_, state) = run(100, 24, 8, false, None, 1, None, Some(2)); // 48 positions consumed
    let l16 = loader(100, 16, 0, 4, false, None, 1, 0);
    let b = l16.iter_from(&state).expect("48 is 3 x 16").next().expect("step").expect("ok");
    assert_eq!((b.number, data(&b)), (3, vec![48, 49, 50, 51]));
    let zero = State { global_batch: 0, ..state };
    assert!(matches!(l16.iter_from(&zero), Err(LoaderError::StateMismatch { field: "global_batch", .. })));
    let l36 = loader(100, 36, 0, 3, false, None, 1, 0);
    assert!(matches!(
        l36.iter_from(&state),
        Err(LoaderError::ElasticResume { consumed: 48, global_batch: 36 })
    ));
    assert_eq!(
        l36.iter_from(&state).map(|_| ()).unwrap_err().to_string(),
        "cannot resume with the global batch 36: the state's epoch consumed 48 positions, not a multiple of it"
    );
    // Round down: step 1 of G = 36 (positions 36..72) again; 36..48 are flagged repeats.
    let mut seen = Vec::new();
    for rank in 0..3 {
        let l = loader(100, 36, rank, 3, false, None, 1, 1);
        let got: Vec<_> = l
            .iter_from_with(&state, ResumeOptions::round_down())
            .expect("rounds down")
            .map(|b| b.expect("ok"))
            .collect();
        assert_eq!(got[0].number, 1);
        seen.extend(got.iter().flat_map(records));
    }
    let repeats: BTreeSet<i64> = seen.iter().filter(|r| r.3).map(|r| r.0).collect();
    assert_eq!(repeats, (36..48).collect());
    let mut fresh: Vec<i64> = seen.iter().filter(|r| !r.2 && !r.3).map(|r| r.0).collect();
    fresh.sort_unstable();
    assert_eq!(fresh, (48..100).collect::<Vec<_>>());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]

    /// Resume law across world sizes: any state of any topology of global batch G, restored on
    /// any other world size dividing G (any number of times), yields the uninterrupted run's
    /// step sets and draws; the real records of each epoch are delivered once each.
    #[test]
    fn resume_equals_the_uninterrupted_run_across_world_sizes(
        n in 1i64..90, g_pick in 0usize..4, worlds in proptest::collection::vec(0usize..4, 1..4),
        cuts in proptest::collection::vec(0usize..6, 3), drop: bool, shuffle: bool, seed: u64,
    ) {
        let g = [1u64, 4, 6, 12][g_pick];
        let divisors: Vec<u64> = (1..=g).filter(|w| g.is_multiple_of(*w)).collect();
        let seed = shuffle.then_some(seed);
        let (whole, _) = run(n, g, 1, drop, seed, 2, None, None);
        let mut parts = Vec::new();
        let mut state = None;
        for (i, w) in worlds.iter().enumerate() {
            let world = divisors[w % divisors.len()];
            let steps = (i + 1 < worlds.len()).then(|| cuts[i]);
            let (batches, s) = run(n, g, world, drop, seed, 2, state.as_ref(), steps);
            parts.push(batches);
            state = Some(s);
        }
        let refs: Vec<&Run> = parts.iter().collect();
        // Padding slots depend on the world size (W = 1 has a short last batch instead).
        let real = |m: BTreeMap<(u64, u64), Vec<Rec>>| -> BTreeMap<(u64, u64), Vec<Rec>> {
            m.into_iter().map(|(k, v)| (k, v.into_iter().filter(|r| !r.2).collect())).collect()
        };
        let resumed = real(steps_of(&refs));
        let reference = real(steps_of(&[&whole]));
        prop_assert_eq!(&resumed, &reference);
        for epoch in 0..2 {
            let mut real: Vec<i64> = resumed
                .iter()
                .filter(|((e, _), _)| *e == epoch)
                .flat_map(|(_, v)| v.iter().filter(|r| !r.2).map(|r| r.0))
                .collect();
            real.sort_unstable();
            let expected: Vec<i64> = if drop { real.clone() } else { (0..n).collect() };
            prop_assert_eq!(&real, &expected);
            let distinct: BTreeSet<i64> = real.iter().copied().collect();
            prop_assert_eq!(distinct.len(), real.len());
        }
    }

    /// Another global batch: after a rescale or a round-down, every real position of the
    /// interrupted epoch is delivered once, apart from the flagged repeats, which are exactly
    /// the consumed positions of the incomplete new step.
    #[test]
    fn another_global_batch_loses_nothing(
        n in 1i64..90, g1 in 1u64..13, g2 in 1u64..13, k in 0usize..8, shuffle: bool, seed: u64,
    ) {
        let seed = shuffle.then_some(seed);
        let (first, state) = run(n, g1, 1, false, seed, 1, None, Some(k));
        let consumed = state.next_batch % loader(n, g1, 0, 1, false, seed, 1, 0).len().max(1) * g1;
        let l = loader(n, g2, 0, 1, false, seed, 1, 0);
        let it = l.iter_from_with(&state, ResumeOptions::round_down()).expect("rounding down always fits");
        let exact = l.iter_from(&state).is_ok();
        prop_assert_eq!(exact, consumed.is_multiple_of(g2));
        let second: Vec<_> = it.map(|b| b.expect("ok")).collect();
        let mut positions: Vec<u64> = first[0].iter().chain(&second).flat_map(|b| {
            records(b).into_iter().filter(|r| !r.2 && !r.3).map(|r| r.1)
        }).collect();
        positions.sort_unstable();
        prop_assert_eq!(positions, (0..n as u64).collect::<Vec<_>>());
        let repeats: Vec<u64> = second.iter().flat_map(records).filter(|r| r.3).map(|r| r.1).collect();
        let start = consumed / g2 * g2;
        prop_assert_eq!(repeats, (start..consumed).collect::<Vec<_>>());
    }
}
