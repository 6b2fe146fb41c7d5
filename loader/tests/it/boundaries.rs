//! Issue 33 item 1: the loader's rules with a threshold, a rounding, a tie-break or an order,
//! each checked on both sides of its boundary and exactly on it. Every expected value is a
//! hand computation written out beside it (the rule's own documentation is the source).

use guideloom_loader::mix::{MixConfig, MixSchedule, MixStop};
use guideloom_loader::pack::{Overflow, PackConfig, PackPlan, PackStrategy, Piece};
use guideloom_loader::transforms::WindowShuffle;
use guideloom_loader::{DataSource, LoaderError, RangeSource};

fn sources(config: MixConfig, sizes: &[u64]) -> Vec<u32> {
    let plan = config.plan(sizes).expect("valid mix");
    (0..plan.len()).map(|p| plan.locate(p).expect("in range").source).collect()
}

fn greedy(ratios: &[u64], budget: u64) -> Vec<u32> {
    let c = MixConfig::from_ratios(ratios)
        .expect("ratios")
        .schedule(MixSchedule::Greedy)
        .stop(MixStop::Budget(budget));
    sources(c, &vec![100; ratios.len()])
}

fn proportional(ratios: &[u64], budget: u64) -> Vec<u32> {
    let c = MixConfig::from_ratios(ratios).expect("ratios").stop(MixStop::Budget(budget));
    sources(c, &vec![100; ratios.len()])
}

/// The greedy schedule picks the largest error `w_i * max(k, 1) / W - count_i`, ties to the
/// lowest source. Weights 1 : 2 (W = 3), by hand:
/// k=0: errors 1/3, 2/3 -> 1; k=1: 1/3, -1/3 -> 0; k=2: -1/3, 1/3 -> 1;
/// k=3: 0, 0 (a tie, exactly on the boundary) -> 0; k=4: -2/3, 2/3 -> 1; k=5: -1/3, 1/3 -> 1;
/// k=6: 0, 0 (tie) -> 0. Equal weights tie at every step where the counts are equal.
#[test]
fn issue33_greedy_ties_go_to_the_lowest_source() {
    assert_eq!(greedy(&[1, 2], 7), [1, 0, 1, 0, 1, 1, 0]);
    assert_eq!(greedy(&[1, 1], 6), [0, 1, 0, 1, 0, 1]);
    assert_eq!(greedy(&[1, 1, 1], 6), [0, 1, 2, 0, 1, 2]);
    // Just off the tie: 2 : 1 is the mirror of 1 : 2 with the ties now also favouring source 0.
    // k=0: 2/3, 1/3 -> 0; k=1: -1/3, 1/3 -> 1; k=2: 1/3, -1/3 -> 0; k=3: 0, 0 -> 0;
    // k=4: -1/3, 1/3 -> 1; k=5: 1/3, -1/3 -> 0.
    assert_eq!(greedy(&[2, 1], 6), [0, 1, 0, 0, 1, 0]);
}

/// The proportional schedule gives position `r` to source 0 when
/// `ceil((r + 1) w0 / W) > ceil(r w0 / W)`. Weights 1 : 2 (W = 3), by hand: r=0: 1 > 0 -> 0;
/// r=1: ceil(2/3) = 1, ceil(1/3) = 1 -> 1; r=2: ceil(3/3) = 1 (exactly an integer), 1 -> 1;
/// r=3: ceil(4/3) = 2 > 1 -> 0; r=4, 5 -> 1, 1. Weights 1 : 1: r=0 -> 0; r=1: ceil(1) = 1,
/// ceil(1/2) = 1 -> 1; r=2: 2 > 1 -> 0. Three sources 1 : 1 : 1: source 0 takes r = 0, 3; the
/// others are dealt among 1 and 2 with weights 1 : 1 (-> 1, 2, 1, 2). Weights 2 : 1: r=0:
/// ceil(2/3) = 1 > 0 -> 0; r=1: ceil(4/3) = 2 > 1 -> 0; r=2: ceil(6/3) = 2 (exact), 2 -> 1;
/// r=3: 3 > 2 -> 0; r=4: 4 > 3 -> 0; r=5: ceil(12/3) = 4 (exact), 4 -> 1.
#[test]
fn issue33_proportional_rounds_up_at_exact_multiples() {
    assert_eq!(proportional(&[1, 2], 6), [0, 1, 1, 0, 1, 1]);
    assert_eq!(proportional(&[1, 1], 4), [0, 1, 0, 1]);
    assert_eq!(proportional(&[1, 1, 1], 6), [0, 1, 2, 0, 1, 2]);
    assert_eq!(proportional(&[2, 1], 6), [0, 0, 1, 0, 0, 1]);
}

/// First exhausted: `floor(min_i n_i W / w_i)` positions. Weights 1 : 1, by hand: sizes 3, 3
/// -> min(6, 6) = 6; 4, 3 -> min(8, 6) = 6; 2, 3 -> 4. Weights 1 : 2: sizes 2, 4 -> min(6, 6)
/// = 6 (both end exactly together); 2, 5 -> min(6, 7.5) = 6; 2, 3 -> min(6, 4.5) = 4.
#[test]
fn issue33_first_exhausted_length_at_and_next_to_the_scarcest_source() {
    let len = |ratios: &[u64], sizes: &[u64]| {
        MixConfig::from_ratios(ratios).expect("ratios").plan(sizes).expect("plan").len()
    };
    assert_eq!(len(&[1, 1], &[3, 3]), 6);
    assert_eq!(len(&[1, 1], &[4, 3]), 6);
    assert_eq!(len(&[1, 1], &[2, 3]), 4);
    assert_eq!(len(&[1, 2], &[2, 4]), 6);
    assert_eq!(len(&[1, 2], &[2, 5]), 6);
    assert_eq!(len(&[1, 2], &[2, 3]), 4);
    // Every record of the first-exhausted mixture of sizes 2, 4 is read once: 0 1 1 0 1 1.
    let c = MixConfig::from_ratios(&[1, 2]).expect("ratios");
    assert_eq!(sources(c, &[2, 4]), [0, 1, 1, 0, 1, 1]);
}

/// Stratified groups: `group` apportioned by the largest remainder, ties to the lower source.
/// By hand: weights 1 : 1 : 1, group 3 -> 1 each (no remainder); group 4: floors 1, 1, 1,
/// remainders 4 mod 3 = 1 for all (a three-way tie) -> the lowest source: 2, 1, 1; group 5:
/// 2, 2, 1. Weights 1 : 2 (W = 3), group 4: floors 1, 2, remainders 4 mod 3 = 1 and 8 mod 3 = 2
/// -> source 1: 1, 3; group 5: floors 1, 3, remainders 2, 1 -> source 0: 2, 3.
#[test]
fn issue33_stratified_apportionment_ties_to_the_lower_source() {
    let counts = |ratios: &[u64], group: u64| -> Vec<u64> {
        let c = MixConfig::from_ratios(ratios).expect("ratios").stratified(group);
        c.plan(&vec![60; ratios.len()]).expect("plan").group_counts().to_vec()
    };
    assert_eq!(counts(&[1, 1, 1], 3), [1, 1, 1]);
    assert_eq!(counts(&[1, 1, 1], 4), [2, 1, 1]);
    assert_eq!(counts(&[1, 1, 1], 5), [2, 2, 1]);
    assert_eq!(counts(&[1, 2], 4), [1, 3]);
    assert_eq!(counts(&[1, 2], 5), [2, 3]);
    // A group too small for a source: weights 1 : 1 : 1, group 2 gives source 2 no record.
    let c = MixConfig::from_ratios(&[1, 1, 1]).expect("ratios").stratified(2);
    match c.plan(&[60; 3]) {
        Err(LoaderError::InvalidConfig { field: "stratified", detail }) => {
            assert_eq!(detail, "a group of 2 gives source 2 no record; raise the group or its weight");
        }
        other => panic!("{other:?}"),
    }
}

fn pieces(plan: &PackPlan) -> Vec<Vec<(u64, u64, u64)>> {
    (0..plan.rows())
        .map(|r| plan.row(r).expect("row").iter().map(|p: &Piece| (p.doc, p.start, p.len)).collect())
        .collect()
}

/// Overflow policies at the row length `L = 4`: a document of 3 and of 4 tokens fits (4
/// exactly fills a row); 5 overflows. By hand: `Error` names document 1 (5 > 4); `Truncate`
/// keeps 4 and counts 1 dropped; `Split` cuts 5 into 4 + 1 and 8 into 4 + 4 (exactly two
/// rows' worth, no empty third piece), 9 into 4 + 4 + 1.
#[test]
fn issue33_overflow_policies_at_and_next_to_the_row_length() {
    let cfg = |o: Overflow| PackConfig::new(4, PackStrategy::FirstFit { bins: 1 }).overflow(o);
    let plan = PackPlan::new(&[3, 4], cfg(Overflow::Error)).expect("both fit");
    assert_eq!(pieces(&plan), [vec![(0, 0, 3)], vec![(1, 0, 4)]]);
    assert_eq!(plan.dropped_tokens(), 0);
    match PackPlan::new(&[4, 5], cfg(Overflow::Error)) {
        Err(LoaderError::DocumentTooLong { index, len, seq_len }) => {
            assert_eq!((index, len, seq_len), (1, 5, 4))
        }
        other => panic!("{other:?}"),
    }
    let t = PackPlan::new(&[4, 5], cfg(Overflow::Truncate)).expect("truncates");
    assert_eq!((pieces(&t), t.dropped_tokens()), (vec![vec![(0, 0, 4)], vec![(1, 0, 4)]], 1));
    let t = PackPlan::new(&[3, 4], cfg(Overflow::Truncate)).expect("fits");
    assert_eq!(t.dropped_tokens(), 0);
    let s = PackPlan::new(&[5, 8, 9], cfg(Overflow::Split)).expect("splits");
    assert_eq!(
        pieces(&s),
        [
            vec![(0, 0, 4)],
            vec![(0, 4, 1)],
            vec![(1, 0, 4)],
            vec![(1, 4, 4)],
            vec![(2, 0, 4)],
            vec![(2, 4, 4)],
            vec![(2, 8, 1)]
        ]
    );
}

/// A row takes a document while `used + len <= L` (exactly full is allowed) and while it has
/// fewer than `max_segments` segments. By hand, `L = 5`, first fit with 1 bin: 3 + 2 = 5 fills
/// one row; 3 + 3 = 6 does not (two rows). Best fit with 2 bins over 3, 2, 1, 1 (`L` = 4): 3 ->
/// row 0; 2 does not fit row 0 (3 + 2 = 5 > 4), so row 1; 1 -> the fullest row it fits, row 0
/// (3 used) -> 4; 1 -> row 1 (2 used; row 0 is full) -> 3. A tie in fullness goes to the lower
/// row (below).
#[test]
fn issue33_rows_fill_exactly_and_best_fit_ties_go_to_the_lower_row() {
    let ff = |lengths: &[u64], l: u64| {
        pieces(&PackPlan::new(lengths, PackConfig::new(l, PackStrategy::FirstFit { bins: 1 })).expect("plan"))
    };
    assert_eq!(ff(&[3, 2], 5), [vec![(0, 0, 3), (1, 0, 2)]]);
    assert_eq!(ff(&[3, 3], 5), [vec![(0, 0, 3)], vec![(1, 0, 3)]]);
    let bf = |lengths: &[u64], l: u64, bins: u64| {
        pieces(&PackPlan::new(lengths, PackConfig::new(l, PackStrategy::BestFit { bins })).expect("plan"))
    };
    assert_eq!(bf(&[3, 2, 1, 1], 4, 2), [vec![(0, 0, 3), (2, 0, 1)], vec![(1, 0, 2), (3, 0, 1)]]);
    // Tie: docs 2, 2 open rows 0 and 1 with 2 used each (2 + 2 = 4 > 3); doc 1 fits both
    // equally full rows -> row 0.
    assert_eq!(bf(&[2, 2, 1], 3, 2), [vec![(0, 0, 2), (2, 0, 1)], vec![(1, 0, 2)]]);
    // First fit with 2 bins takes the first row that fits, not the fullest: 1, 3, 1 (L = 4):
    // 1 -> row 0; 3 -> row 0 (1 + 3 = 4); 1 -> row 1.
    let ff2 =
        PackPlan::new(&[1, 3, 1], PackConfig::new(4, PackStrategy::FirstFit { bins: 2 })).expect("plan");
    assert_eq!(pieces(&ff2), [vec![(0, 0, 1), (1, 0, 3)], vec![(2, 0, 1)]]);
    // The segment limit: at most 2 segments per row; 1, 1, 1 (L = 4) -> rows [0, 1], [2].
    let seg =
        PackPlan::new(&[1, 1, 1], PackConfig::new(4, PackStrategy::FirstFit { bins: 1 }).max_segments(2))
            .expect("plan");
    assert_eq!(pieces(&seg), [vec![(0, 0, 1), (1, 0, 1)], vec![(2, 0, 1)]]);
}

/// Window shuffle's windows, with `n` a multiple of the window (8, 12: no partial window),
/// one more (9, 13: a last window of one record, which must stay in place) and one fewer
/// (11: a last window of 3). By hand, window 4: window `w` holds exactly the records
/// `[4w, min(4w + 4, n))`.
#[test]
fn issue33_window_shuffle_last_window_at_and_next_to_a_multiple() {
    for n in [8i64, 9, 11, 12, 13] {
        let ws = WindowShuffle::new(RangeSource::new(0, n, 1).expect("range"), 4, 7, 2).expect("valid");
        for epoch in 0..2u64 {
            let order: Vec<i64> =
                (0..n as u64).map(|p| ws.get(epoch * n as u64 + p).expect("in range")).collect();
            for start in (0..n).step_by(4) {
                let end = (start + 4).min(n);
                let mut w = order[start as usize..end as usize].to_vec();
                w.sort_unstable();
                assert_eq!(w, (start..end).collect::<Vec<_>>(), "n {n} epoch {epoch} window at {start}");
            }
            if n % 4 == 1 {
                assert_eq!(order[n as usize - 1], n - 1, "n {n}: a one-record last window");
            }
        }
        assert!(matches!(ws.get(2 * n as u64), Err(LoaderError::IndexOutOfRange { .. })));
    }
}

/// The sequential loader's window shuffle at a shard's end: shards of 8 (a multiple of the
/// window 4), 9 (a last window of one record, which stays in place) and 7 (a last window of 3),
/// with and without length hints (without, the last window is cut where the reader ends). By
/// hand: window `w` of shard `s` holds exactly records `[4w, min(4w + 4, len_s))`, and both
/// ways give the same stream.
#[test]
fn issue33_sequential_window_shuffle_last_window_at_and_next_to_a_multiple() {
    use guideloom_loader::sequential::{shard_order, SequentialLoader, VecShards};
    let lengths = [8u64, 9, 7];
    let stream = |known: bool| -> Vec<(u64, u64)> {
        let shards = VecShards::new(
            lengths.iter().enumerate().map(|(s, &n)| (0..n).map(|k| (s as u64, k)).collect()).collect(),
        );
        let source = if known { shards } else { shards.without_lengths() };
        let l = SequentialLoader::builder(source)
            .cycle(1)
            .window_shuffle(4)
            .batch_size(1)
            .shuffle(5)
            .workers(0)
            .build()
            .expect("valid");
        l.iter().flat_map(|b| b.expect("ok").data).collect()
    };
    let known = stream(true);
    assert_eq!(known, stream(false));
    let mut at = 0;
    for s in shard_order(3, 5, true, 0) {
        let n = lengths[s as usize];
        for start in (0..n).step_by(4) {
            let end = (start + 4).min(n);
            let mut w: Vec<u64> = known[at..at + (end - start) as usize]
                .iter()
                .map(|&(shard, k)| {
                    assert_eq!(shard, s);
                    k
                })
                .collect();
            if end - start == 1 {
                assert_eq!(w, [start], "shard {s}: a one-record last window");
            }
            w.sort_unstable();
            assert_eq!(w, (start..end).collect::<Vec<_>>(), "shard {s} window at {start}");
            at += (end - start) as usize;
        }
    }
    assert_eq!(at, 24);
}
