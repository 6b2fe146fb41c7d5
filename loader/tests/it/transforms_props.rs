//! Property tests of issue 16's laws: mixtures never read past a source and read each record
//! at most once per source epoch; without replacement every record exactly once; the
//! proportional schedule's counts are exact; packing keeps every token exactly once (split),
//! never overfills a row and respects the segment limit; window shuffle is a bijection.

use std::collections::BTreeSet;

use guideloom_loader::mix::{MixConfig, MixSchedule, MixStop};
use guideloom_loader::pack::{Overflow, PackConfig, PackPlan, PackStrategy};
use guideloom_loader::transforms::WindowShuffle;
use guideloom_loader::{DataSource, RangeSource};
use proptest::prelude::*;

fn schedule(greedy: bool) -> MixSchedule {
    if greedy {
        MixSchedule::Greedy
    } else {
        MixSchedule::Proportional
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// First-exhausted: every (source, record) at most once, never past a source's end, and
    /// the proportional length is floor(min n_i W / w_i).
    #[test]
    fn first_exhausted_reads_each_record_at_most_once(
        sizes in prop::collection::vec(0u64..40, 1..5),
        ratios in prop::collection::vec(1u64..9, 5),
        greedy: bool,
    ) {
        let w = &ratios[..sizes.len()];
        let plan = MixConfig::from_ratios(w).unwrap().schedule(schedule(greedy)).plan(&sizes).unwrap();
        let mut seen = BTreeSet::new();
        for p in 0..plan.len() {
            let s = plan.locate(p).unwrap();
            prop_assert!(s.record < sizes[s.source as usize]);
            prop_assert!(seen.insert((s.source, s.record)));
        }
        prop_assert!(plan.locate(plan.len()).is_none());
        if !greedy {
            let cfg = MixConfig::from_ratios(w).unwrap();
            let total: u64 = cfg.ratios().iter().sum();
            let want = sizes.iter().zip(cfg.ratios()).map(|(&n, &r)| n * total / r).min().unwrap();
            prop_assert_eq!(plan.len(), want);
        }
    }

    /// All exhausted: every record of every source exactly once, whatever the weights.
    #[test]
    fn all_exhausted_reads_every_record_once(
        sizes in prop::collection::vec(0u64..30, 1..5),
        ratios in prop::collection::vec(1u64..9, 5),
        greedy: bool,
        seed in prop::option::of(0u64..1000),
    ) {
        let mut cfg = MixConfig::from_ratios(&ratios[..sizes.len()]).unwrap()
            .schedule(schedule(greedy)).stop(MixStop::AllExhausted);
        if let Some(s) = seed {
            cfg = cfg.shuffle_sources(s);
        }
        let plan = cfg.plan(&sizes).unwrap();
        prop_assert_eq!(plan.len(), sizes.iter().sum::<u64>());
        let got: BTreeSet<(u32, u64)> = (0..plan.len()).map(|p| {
            let s = plan.locate(p).unwrap();
            (s.source, s.record)
        }).collect();
        let want: BTreeSet<(u32, u64)> =
            sizes.iter().enumerate().flat_map(|(i, &n)| (0..n).map(move |r| (i as u32, r))).collect();
        prop_assert_eq!(got, want);
    }

    /// Budget: every prefix of the proportional schedule gives source 0 exactly
    /// ceil(k w_0 / W) records, and the greedy one stays within two records of k w_i / W,
    /// never a whole record ahead of it (the bound `MixSchedule::Greedy` documents).
    #[test]
    fn counts_track_the_weights(ratios in prop::collection::vec(1u64..20, 2..5), greedy: bool) {
        let k = ratios.len();
        let plan = MixConfig::from_ratios(&ratios).unwrap().schedule(schedule(greedy))
            .stop(MixStop::Budget(300)).plan(&vec![1_000; k]).unwrap();
        let cfg = MixConfig::from_ratios(&ratios).unwrap();
        let (w, total) = (cfg.ratios(), cfg.ratios().iter().sum::<u64>());
        let mut counts = vec![0u64; k];
        for p in 0..300u64 {
            counts[plan.locate(p).unwrap().source as usize] += 1;
            let n = p + 1;
            if greedy {
                for i in 0..k {
                    let exact = (n * w[i]) as f64 / total as f64;
                    prop_assert!((counts[i] as f64 - exact).abs() < 2.0, "source {} at {}", i, n);
                    // Ahead: count_i - n w_i / W < 1, exactly in integers.
                    prop_assert!(counts[i] * total < n * w[i] + total, "source {} ahead at {}", i, n);
                }
            } else {
                prop_assert_eq!(counts[0], (n * w[0]).div_ceil(total));
            }
        }
    }

    /// Packing with Split keeps every token exactly once; no row holds more than L tokens or
    /// more than max_segments pieces.
    #[test]
    fn packing_keeps_every_token_once(
        lengths in prop::collection::vec(0u64..30, 0..40),
        l in 1u64..17,
        strategy in 0u8..4,
        bins in 1u64..4,
        max_seg in prop::option::of(1u64..5),
    ) {
        let strategy = match strategy {
            0 => PackStrategy::ConcatSplit,
            1 => PackStrategy::FirstFit { bins },
            2 => PackStrategy::BestFit { bins },
            _ => PackStrategy::BestFitDecreasing,
        };
        let mut cfg = PackConfig::new(l, strategy).overflow(Overflow::Split);
        if let Some(m) = max_seg {
            cfg = cfg.max_segments(m);
        }
        let plan = PackPlan::new(&lengths, cfg).unwrap();
        let mut covered: Vec<Vec<bool>> = lengths.iter().map(|&n| vec![false; n as usize]).collect();
        for r in 0..plan.rows() {
            let row = plan.row(r).unwrap();
            prop_assert!(!row.is_empty());
            prop_assert!(row.iter().map(|p| p.len).sum::<u64>() <= l);
            if let Some(m) = max_seg {
                prop_assert!(row.len() as u64 <= m);
            }
            for p in row {
                for t in p.start..p.start + p.len {
                    prop_assert!(!covered[p.doc as usize][t as usize], "token twice");
                    covered[p.doc as usize][t as usize] = true;
                }
            }
        }
        prop_assert!(covered.iter().all(|d| d.iter().all(|&c| c)), "a token is lost");
        prop_assert_eq!(plan.dropped_tokens(), 0);
    }

    /// Window shuffle: each epoch a bijection that keeps every window's records in it.
    #[test]
    fn window_shuffle_is_a_windowed_bijection(n in 1i64..200, window in 1u64..20, seed: u64, epoch in 0u64..3) {
        let ws = WindowShuffle::new(RangeSource::new(0, n, 1).unwrap(), window, seed, 3).unwrap();
        let order: Vec<i64> = (0..n as u64).map(|p| ws.get(epoch * n as u64 + p).unwrap()).collect();
        for (p, &x) in order.iter().enumerate() {
            prop_assert_eq!(p as u64 / window, x as u64 / window);
        }
        let mut sorted = order.clone();
        sorted.sort_unstable();
        prop_assert_eq!(sorted, (0..n).collect::<Vec<_>>());
    }
}
