//! Acceptance tests of issue 16, index stage (items 1-5, 11 and 12): mixing, filter, slice,
//! repeat, concat and window shuffle. Golden values from the peers' notes (Megatron's blending
//! re-run by hand, Hugging Face `interleave_datasets` 5.2.0, Grain's `mix`).

use std::collections::BTreeSet;
use std::fmt::Debug;

use guideloom_loader::mix::{Mix, MixConfig, MixSchedule, MixStop, Sourced};
use guideloom_loader::transforms::{Concat, Filter, Repeat, Slice, WindowShuffle};
use guideloom_loader::{Batch, DataSource, Loader, LoaderError, RangeSource, VecSource};

fn slots(config: MixConfig, sizes: &[u64]) -> Vec<(u32, u64)> {
    let plan = config.plan(sizes).expect("valid mix");
    (0..plan.len()).map(|p| plan.locate(p).map(|s| (s.source, s.draw)).expect("in range")).collect()
}

fn vec_source(range: std::ops::Range<i64>) -> VecSource<i64> {
    VecSource::new(range.collect())
}

fn items<T: Clone + Send + Sync>(mix: &Mix<VecSource<T>>) -> Vec<T> {
    (0..mix.len()).map(|p| mix.get(p).expect("in range").item).collect()
}

// ---------------------------------------------------------------- 1. proportional, first-exhausted

#[test]
fn acceptance1_proportional_one_to_one_first_exhausted() {
    let a = VecSource::new(vec!["a0", "a1", "a2", "a3", "a4"]);
    let b = VecSource::new(vec!["b0", "b1", "b2"]);
    let mix = Mix::new(vec![a, b], MixConfig::new(&[1.0, 1.0]).unwrap()).unwrap();
    assert_eq!(items(&mix), ["a0", "b0", "a1", "b1", "a2", "b2"]);
    assert_eq!(
        mix.get_many(&[5, 0]).unwrap(),
        [Sourced { source: 1, record: 2, item: "b2" }, Sourced { source: 0, record: 0, item: "a0" }]
    );
    assert!(matches!(mix.get(6), Err(LoaderError::IndexOutOfRange { index: 6, len: 6 })));
}

// ---------------------------------------------------------------- 2. greedy (Megatron)

#[test]
fn acceptance2_greedy_matches_megatron() {
    let greedy = |w: &[f64], sizes: &[u64]| {
        slots(MixConfig::new(w).unwrap().schedule(MixSchedule::Greedy).stop(MixStop::Budget(10)), sizes)
    };
    let s = greedy(&[0.5, 0.3, 0.2], &[100, 100, 100]);
    assert_eq!(s.iter().map(|x| x.0).collect::<Vec<_>>(), [0, 1, 2, 0, 1, 0, 2, 0, 1, 0]);
    assert_eq!(s.iter().map(|x| x.1).collect::<Vec<_>>(), [0, 0, 0, 1, 1, 2, 1, 3, 2, 4]);
    let s = greedy(&[0.7, 0.3], &[100, 100]);
    assert_eq!(s.iter().map(|x| x.0).collect::<Vec<_>>(), [0, 1, 0, 0, 1, 0, 0, 1, 0, 0]);
    assert_eq!(s.iter().map(|x| x.1).collect::<Vec<_>>(), [0, 0, 1, 2, 1, 3, 4, 2, 5, 6]);
    // The notes' other golden rows: [0.5, 0.5] over 6 positions.
    let s = greedy(&[0.5, 0.5], &[3, 3]);
    assert_eq!(s[..6], [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2)]);
}

/// Greedy lookups past a checkpoint (every 4096 positions) agree with a plain sequential run.
#[test]
fn greedy_lookup_agrees_with_a_sequential_run_across_checkpoints() {
    let w = [3u64, 5, 11];
    let plan = MixConfig::from_ratios(&w)
        .unwrap()
        .schedule(MixSchedule::Greedy)
        .stop(MixStop::Budget(10_000))
        .plan(&[1_000_000; 3])
        .unwrap();
    let mut counts = [0u64; 3];
    for k in 0..10_000u64 {
        let x = u128::from(k.max(1));
        let mut best = 0;
        for i in 1..3 {
            // err_i = w_i x / 19 - c_i, compared exactly: w_i x - 19 c_i
            let lhs = i128::try_from(u128::from(w[i]) * x).unwrap() - 19 * i128::from(counts[i]);
            let rhs = i128::try_from(u128::from(w[best]) * x).unwrap() - 19 * i128::from(counts[best]);
            if lhs > rhs {
                best = i;
            }
        }
        let slot = plan.locate(k).unwrap();
        assert_eq!((slot.source as usize, slot.draw), (best, counts[best]), "position {k}");
        counts[best] += 1;
    }
}

// ---------------------------------------------------------------- 3. exact weights

/// Megatron's greedy rule keeps two sources within one record of their shares, but not three:
/// weights 3:35:4 after 47 positions give counts [4, 38, 5], and source 1 trails its share
/// 47 * 35 / 42 = 39 1/6 by 7/6 records (found by the `counts_track_the_weights` property).
#[test]
fn greedy_mix_trails_a_share_by_more_than_one_record_with_three_sources() {
    let plan = MixConfig::from_ratios(&[3, 35, 4])
        .unwrap()
        .schedule(MixSchedule::Greedy)
        .stop(MixStop::Budget(47))
        .plan(&[100, 100, 100])
        .unwrap();
    let mut counts = [0u64; 3];
    for p in 0..47 {
        counts[plan.locate(p).unwrap().source as usize] += 1;
    }
    assert_eq!(counts, [4, 38, 5]);
    // Trailing by 7/6: 47 * 35 - 38 * 42 = 49 = 7/6 * 42.
    assert_eq!(47 * 35 - 38 * 42, 49);
    // Two sources: |count_0 - n w_0 / W| < 1 at every prefix (both errors are below 1 and sum to 0).
    for w in [[1u64, 40], [3, 7], [29, 71], [1, 1]] {
        let plan =
            MixConfig::from_ratios(&w).unwrap().schedule(MixSchedule::Greedy).plan(&[500, 500]).unwrap();
        let mut c0 = 0u64;
        for p in 0..plan.len() {
            c0 += u64::from(plan.locate(p).unwrap().source == 0);
            let (n, total) = (p + 1, w[0] + w[1]);
            assert!((c0 * total).abs_diff(n * w[0]) < total, "{w:?} at {n}");
        }
    }
}

#[test]
fn acceptance3_weights_are_exact_in_both_schedules() {
    for schedule in [MixSchedule::Greedy, MixSchedule::Proportional] {
        let s = slots(
            MixConfig::new(&[0.29, 0.71]).unwrap().schedule(schedule).stop(MixStop::Budget(10_000)),
            &[1_000_000, 1_000_000],
        );
        let zeros = s.iter().filter(|x| x.0 == 0).count();
        assert_eq!((zeros, s.len() - zeros), (2_900, 7_100), "{schedule:?}");
    }
    assert_eq!(MixConfig::new(&[0.29, 0.71]).unwrap().ratios(), [29, 71]);
    assert_eq!(MixConfig::new(&[0.5, 0.3, 0.2]).unwrap().ratios(), [5, 3, 2]);
}

// ---------------------------------------------------------------- 4. without replacement

#[test]
fn acceptance4_all_exhausted_without_replacement() {
    for schedule in [MixSchedule::Proportional, MixSchedule::Greedy] {
        let cfg = |n| MixConfig::new(&vec![1.0; n]).unwrap().schedule(schedule).stop(MixStop::AllExhausted);
        let mix = Mix::new(vec![vec_source(0..3), vec_source(10..14), vec_source(20..23)], cfg(3)).unwrap();
        let want = [0, 10, 20, 1, 11, 21, 2, 12, 22, 13];
        assert_eq!(items(&mix), want, "{schedule:?}");
        for at in 0..=3 {
            let mut sources = vec![vec_source(0..3), vec_source(10..14), vec_source(20..23)];
            sources.insert(at, vec_source(0..0));
            let mix = Mix::new(sources, cfg(4)).unwrap();
            assert_eq!(items(&mix), want, "{schedule:?}, empty source at {at}");
        }
    }
}

#[test]
fn first_exhausted_with_hugging_face_inputs_and_budget_wraps_per_source_epoch() {
    let sources = || vec![vec_source(0..3), vec_source(10..14), vec_source(20..23)];
    let mix = Mix::new(sources(), MixConfig::new(&[1.0, 1.0, 1.0]).unwrap()).unwrap();
    assert_eq!(items(&mix), [0, 10, 20, 1, 11, 21, 2, 12, 22]);
    // A budget of 12 wraps sources 0 and 2 into their second epoch, each a new permutation.
    let cfg = MixConfig::new(&[1.0, 1.0, 1.0]).unwrap().stop(MixStop::Budget(12)).shuffle_sources(5);
    let mix = Mix::new(sources(), cfg).unwrap();
    let got = items(&mix);
    assert_eq!(got.len(), 12);
    let from = |lo: i64, hi: i64| got.iter().filter(|&&x| (lo..hi).contains(&x)).copied().collect::<Vec<_>>();
    let a = from(0, 3);
    assert_eq!(a.len(), 4);
    assert_eq!(a[..3].iter().collect::<BTreeSet<_>>().len(), 3, "no record twice in one source epoch");
    assert_eq!(from(10, 14).iter().collect::<BTreeSet<_>>().len(), 4);
    // Repeat(2): two passes of the first-exhausted mix; pass 1 reads source epoch 1.
    let cfg = MixConfig::new(&[1.0, 1.0]).unwrap().stop(MixStop::Repeat(2));
    let mix = Mix::new(vec![vec_source(0..5), vec_source(10..13)], cfg).unwrap();
    assert_eq!(items(&mix), [0, 10, 1, 11, 2, 12, 0, 10, 1, 11, 2, 12]);
    let slot = mix.plan().locate(7).unwrap();
    assert_eq!((slot.source, slot.draw, slot.record), (1, 3, 0));
    // A budget over an empty source is refused.
    let cfg = MixConfig::new(&[1.0, 1.0]).unwrap().stop(MixStop::Budget(4));
    assert!(matches!(
        Mix::new(vec![vec_source(0..2), vec_source(0..0)], cfg),
        Err(LoaderError::InvalidConfig { field: "stop", .. })
    ));
}

// ---------------------------------------------------------------- 5. stratified

#[test]
fn acceptance5_stratified_groups_hold_fixed_counts() {
    let cfg = MixConfig::new(&[0.5, 0.3, 0.2]).unwrap().stratified(10);
    let plan = cfg.plan(&[53, 40, 100]).unwrap();
    assert_eq!(plan.group_counts(), [5, 3, 2]);
    assert_eq!(plan.len(), 100, "the scarcest source (53 / 5) allows 10 groups");
    let mut seen = vec![BTreeSet::new(); 3];
    for g in 0..10 {
        let mut counts = [0; 3];
        for p in g * 10..g * 10 + 10 {
            let s = plan.locate(p).unwrap();
            counts[s.source as usize] += 1;
            assert!(seen[s.source as usize].insert(s.record), "record read twice");
        }
        assert_eq!(counts, [5, 3, 2], "group {g}");
    }
    // A group of 3 gives the 0.2 source 1 seat by largest remainder; a group of 2 gives it 0.
    assert_eq!(
        MixConfig::new(&[0.5, 0.3, 0.2]).unwrap().stratified(3).plan(&[9; 3]).unwrap().group_counts(),
        [1, 1, 1]
    );
    assert!(matches!(
        MixConfig::new(&[0.5, 0.3, 0.2]).unwrap().stratified(2).plan(&[9; 3]),
        Err(LoaderError::InvalidConfig { field: "stratified", .. })
    ));
    assert!(matches!(
        MixConfig::new(&[1.0]).unwrap().stratified(0).plan(&[9]),
        Err(LoaderError::InvalidConfig { field: "stratified", .. })
    ));
}

// ---------------------------------------------------------------- 12. window shuffle

#[test]
fn acceptance12_window_shuffle_is_a_permutation_with_fixed_windows() {
    for n in [10i64, 11, 13] {
        let epochs = 3;
        let ws = WindowShuffle::new(RangeSource::new(0, n, 1).unwrap(), 4, 7, epochs).unwrap();
        assert_eq!(ws.len(), n as u64 * epochs);
        let mut orders = Vec::new();
        for e in 0..epochs {
            let order: Vec<i64> = (0..n as u64).map(|p| ws.get(e * n as u64 + p).unwrap()).collect();
            for k in (0..n).step_by(4) {
                let mut window: Vec<i64> = order[k as usize..(k + 4).min(n) as usize].to_vec();
                window.sort();
                assert_eq!(window, (k..(k + 4).min(n)).collect::<Vec<_>>(), "n={n} epoch={e} window at {k}");
            }
            orders.push(order);
        }
        assert_ne!(orders[0], orders[1], "n={n}: epochs differ");
        assert_ne!(orders[0], (0..n).collect::<Vec<_>>(), "n={n}: shuffled");
    }
    assert!(matches!(
        WindowShuffle::new(RangeSource::new(0, 3, 1).unwrap(), 0, 1, 1),
        Err(LoaderError::InvalidConfig { field: "window", .. })
    ));
}

#[test]
fn filter_slice_repeat_concat_exact_values() {
    let r = RangeSource::new(0, 10, 1).unwrap();
    let f = Filter::new(r, |x: &i64| x % 3 == 0, 1);
    assert_eq!(f.len(), 10);
    assert_eq!(
        (0..10).map(|i| f.get(i).unwrap()).collect::<Vec<_>>(),
        [Some(0), None, None, Some(3), None, None, Some(6), None, None, Some(9)]
    );
    let s = Slice::new(r, 3, 7).unwrap();
    assert_eq!((0..s.len()).map(|i| s.get(i).unwrap()).collect::<Vec<_>>(), [3, 4, 5, 6]);
    assert!(matches!(s.get(4), Err(LoaderError::IndexOutOfRange { index: 4, len: 4 })));
    assert!(matches!(Slice::new(r, 7, 11), Err(LoaderError::InvalidConfig { field: "slice", .. })));
    assert_eq!(Slice::take(r, 20).len(), 10);
    assert_eq!(Slice::skip(r, 20).len(), 0);
    let rep = Repeat::new(Slice::new(r, 8, 10).unwrap(), 3).unwrap();
    assert_eq!((0..rep.len()).map(|i| rep.get(i).unwrap()).collect::<Vec<_>>(), [8, 9, 8, 9, 8, 9]);
    let c = Concat::new(vec![Slice::take(r, 2), Slice::new(r, 5, 5).unwrap(), Slice::skip(r, 8)]).unwrap();
    assert_eq!((0..c.len()).map(|i| c.get(i).unwrap()).collect::<Vec<_>>(), [0, 1, 8, 9]);
    assert!(matches!(c.get(4), Err(LoaderError::IndexOutOfRange { index: 4, len: 4 })));
    // Fingerprints tell configurations apart.
    assert_ne!(Slice::new(r, 3, 7).unwrap().fingerprint(), Slice::new(r, 2, 6).unwrap().fingerprint());
    assert_ne!(
        Filter::new(r, |x: &i64| x % 3 == 0, 1).fingerprint(),
        Filter::new(r, |x: &i64| x % 3 == 0, 2).fingerprint()
    );
}

// ---------------------------------------------------------------- 11. workers and resume

/// Every batch of `build(workers)` for workers 0, 1, 3, 8 equals the 0-worker run; resuming
/// from the state after every k batches gives the rest of that run; every state is under 1 KiB.
fn check_invariance<S, T>(name: &str, build: impl Fn(usize) -> Loader<S, T, guideloom_loader::VecCollate>)
where
    S: DataSource + 'static,
    T: Send + Clone + PartialEq + Debug + 'static,
{
    let reference: Vec<Batch<Vec<T>>> =
        build(0).iter().collect::<Result<_, _>>().unwrap_or_else(|e| panic!("{name}: {e}"));
    assert!(reference.len() >= 3, "{name}: at least 3 batches");
    for workers in [1usize, 3, 8] {
        let got: Vec<Batch<Vec<T>>> = build(workers).iter().collect::<Result<_, _>>().unwrap();
        assert_eq!(got, reference, "{name}: {workers} workers");
    }
    let loader = build(3);
    let mut it = loader.iter();
    for k in 0..=reference.len() {
        let state = it.state();
        let json = state.to_json();
        assert!(json.len() < 1024, "{name}: state of {} bytes", json.len());
        let rest: Vec<Batch<Vec<T>>> = build(2).iter_from(&state).unwrap().collect::<Result<_, _>>().unwrap();
        assert_eq!(rest, reference[k..], "{name}: resume after {k} batches");
        if k < reference.len() {
            it.next().unwrap().unwrap();
        }
    }
}

#[test]
fn acceptance11_index_pipelines_are_worker_invariant_and_resumable() {
    let sources = || vec![vec_source(0..30), vec_source(100..120), vec_source(200..250)];
    for schedule in [MixSchedule::Proportional, MixSchedule::Greedy] {
        for stop in [MixStop::FirstExhausted, MixStop::Budget(70), MixStop::AllExhausted, MixStop::Repeat(2)]
        {
            let cfg =
                MixConfig::new(&[0.5, 0.3, 0.2]).unwrap().schedule(schedule).stop(stop).shuffle_sources(3);
            check_invariance(&format!("mix {schedule:?} {stop:?}"), |w| {
                Loader::builder(Mix::new(sources(), cfg.clone()).unwrap())
                    .shuffle(11)
                    .epochs(2)
                    .batch_size(7)
                    .workers(w)
                    .map(|x, _| (x.source, x.item))
                    .build()
                    .unwrap()
            });
        }
    }
    let cfg = MixConfig::new(&[0.5, 0.3, 0.2]).unwrap().stratified(10);
    check_invariance("stratified", |w| {
        Loader::builder(Mix::new(sources(), cfg.clone()).unwrap())
            .batch_size(10)
            .workers(w)
            .map(|x, _| (x.source, x.item))
            .build()
            .unwrap()
    });
    let r = || RangeSource::new(0, 40, 1).unwrap();
    check_invariance("filter", |w| {
        Loader::builder(Filter::new(r(), |x: &i64| x % 4 != 1, 7))
            .shuffle(2)
            .batch_size(6)
            .workers(w)
            .build()
            .unwrap()
    });
    check_invariance("slice+repeat", |w| {
        Loader::builder(Repeat::new(Slice::new(r(), 5, 25).unwrap(), 2).unwrap())
            .shuffle(2)
            .batch_size(6)
            .workers(w)
            .build()
            .unwrap()
    });
    check_invariance("concat", |w| {
        Loader::builder(Concat::new(vec![Slice::take(r(), 9), Slice::skip(r(), 30)]).unwrap())
            .shuffle(4)
            .epochs(3)
            .batch_size(4)
            .workers(w)
            .build()
            .unwrap()
    });
    check_invariance("window shuffle", |w| {
        Loader::builder(WindowShuffle::new(r(), 4, 8, 2).unwrap()).batch_size(5).workers(w).build().unwrap()
    });
}

/// A state saved over one mixture is refused by a loader over another mixture of the same
/// length (the mixture's fingerprint is in the state).
#[test]
fn state_of_one_mixture_is_refused_by_another_of_the_same_length() {
    let build = |cfg: MixConfig| {
        Loader::builder(Mix::new(vec![vec_source(0..10), vec_source(0..10)], cfg).unwrap())
            .batch_size(2)
            .build()
            .unwrap()
    };
    let a = build(MixConfig::new(&[1.0, 1.0]).unwrap());
    let b = build(MixConfig::new(&[1.0, 1.0]).unwrap().shuffle_sources(1));
    assert_eq!(a.len(), b.len());
    let mut it = a.iter();
    it.next().unwrap().unwrap();
    let state = it.state();
    assert!(a.iter_from(&state).is_ok());
    let Err(e) = b.iter_from(&state) else { panic!("a state of the unshuffled mix is refused") };
    assert!(matches!(&e, LoaderError::StateMismatch { field: "source.fingerprint", .. }), "{e:?}");
}
