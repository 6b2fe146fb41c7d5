//! The stage (issue 16, "stream stage" there): hole compaction and rebatching
//! ([`Rebatched`]) and the streaming packers ([`StagePacked`]), with exact values, and their
//! laws: identical output for 0, 1, 3 and 8 workers, exact resume after every batch from a
//! state under 1 KiB, and (streaming packers) the rows of the planned packer over the same
//! epoch order.

use guideloom_loader::pack::{Overflow, PackConfig, PackPlan, PackStrategy, PackedRow, Piece};
use guideloom_loader::stage::{Rebatched, StageBatch, StagePacked, StageState};
use guideloom_loader::transforms::Filter;
use guideloom_loader::{DataSource, Loader, LoaderError, RangeSource, VecSource};

const I: u32 = u32::MAX;

type Keep = fn(&Vec<u32>) -> bool;
type Docs = Filter<VecSource<Vec<u32>>, Keep>;

/// Document `i` is `i + 1` repeated `lengths[i]` times.
fn docs(lengths: &[u64], keep: Keep) -> Docs {
    let v = lengths.iter().enumerate().map(|(i, &n)| vec![i as u32 + 1; n as usize]).collect();
    Filter::new(VecSource::new(v), keep, 1)
}

#[allow(clippy::ptr_arg)] // the predicate of a Filter over Vec<u32> records
fn all(_: &Vec<u32>) -> bool {
    true
}

/// Drops documents 4, 9, 14, ... (token value a multiple of 5).
#[allow(clippy::ptr_arg)]
fn no_fives(d: &Vec<u32>) -> bool {
    d.first().is_none_or(|t| t % 5 != 0)
}

/// Knobs of the upstream loader of a test pipeline.
#[derive(Clone, Copy)]
struct Up {
    shuffle: Option<u64>,
    epochs: u64,
    batch: u64,
    rank: u64,
    world: u64,
}

const PLAIN: Up = Up { shuffle: None, epochs: 1, batch: 2, rank: 0, world: 1 };

fn loader(d: Docs, up: Up, workers: usize) -> Loader<Docs> {
    let mut b =
        Loader::builder(d).batch_size(up.batch).epochs(up.epochs).shard(up.rank, up.world).workers(workers);
    if let Some(seed) = up.shuffle {
        b = b.shuffle(seed);
    }
    b.build().expect("loader")
}

fn stage(
    lengths: &[u64],
    keep: Keep,
    up: Up,
    cfg: PackConfig,
    rows: u64,
    workers: usize,
) -> StagePacked<Docs, Vec<u32>, u32> {
    StagePacked::new(loader(docs(lengths, keep), up, workers), cfg, rows, 0, I).expect("stage")
}

fn run(s: &StagePacked<Docs, Vec<u32>, u32>) -> Vec<StageBatch<PackedRow<u32>>> {
    s.iter().collect::<Result<_, _>>().expect("batches")
}

fn tokens(batches: &[StageBatch<PackedRow<u32>>]) -> Vec<Vec<u32>> {
    batches.iter().flat_map(|b| b.data.iter().map(|r| r.tokens.clone())).collect()
}

#[test]
fn acceptance6_streaming_first_fit_and_best_fit_match_grain() {
    let ff =
        run(&stage(&[3, 4, 2, 1], all, PLAIN, PackConfig::new(6, PackStrategy::FirstFit { bins: 2 }), 2, 0));
    assert_eq!(ff.len(), 1);
    let r = &ff[0].data;
    assert_eq!(tokens(&ff), [vec![1, 1, 1, 3, 3, 4], vec![2, 2, 2, 2, 0, 0]]);
    assert_eq!((&r[0].segment_ids, &r[1].segment_ids), (&vec![1, 1, 1, 2, 2, 3], &vec![1, 1, 1, 1, 0, 0]));
    assert_eq!((&r[0].positions, &r[1].positions), (&vec![0, 1, 2, 0, 1, 0], &vec![0, 1, 2, 3, 0, 0]));
    assert_eq!(ff[0].indices, [0, 2, 3, 1]);
    let bf =
        run(&stage(&[3, 4, 2, 1], all, PLAIN, PackConfig::new(6, PackStrategy::BestFit { bins: 2 }), 2, 0));
    let r = &bf[0].data;
    assert_eq!(tokens(&bf), [vec![1, 1, 1, 4, 0, 0], vec![2, 2, 2, 2, 3, 3]]);
    assert_eq!((&r[0].segment_ids, &r[1].segment_ids), (&vec![1, 1, 1, 2, 0, 0], &vec![1, 1, 1, 1, 2, 2]));
    assert_eq!((&r[0].positions, &r[1].positions), (&vec![0, 1, 2, 0, 0, 0], &vec![0, 1, 2, 3, 0, 1]));
    // Grain's [3,6,2,5,6,4] table, rows in batches of 2: groups end where a document fits no row.
    for strategy in [PackStrategy::FirstFit { bins: 2 }, PackStrategy::BestFit { bins: 3 }] {
        let b = run(&stage(&[3, 6, 2, 5, 6, 4], all, PLAIN, PackConfig::new(6, strategy), 2, 0));
        assert_eq!(
            tokens(&b),
            [vec![1, 1, 1, 3, 3, 0], vec![2; 6], vec![4, 4, 4, 4, 4, 0], vec![5; 6], vec![6, 6, 6, 6, 0, 0]],
            "{strategy:?}"
        );
        assert_eq!(b.iter().map(|b| b.data.len()).collect::<Vec<_>>(), [2, 2, 1]);
    }
}

#[test]
fn acceptance7_streaming_concat_split_matches_grain() {
    let b = run(&stage(&[3, 6, 2, 5, 6, 4], all, PLAIN, PackConfig::new(6, PackStrategy::ConcatSplit), 2, 0));
    assert_eq!(
        tokens(&b),
        [
            vec![1, 1, 1, 2, 2, 2],
            vec![2, 2, 2, 3, 3, 4],
            vec![4, 4, 4, 4, 5, 5],
            vec![5, 5, 5, 5, 6, 6],
            vec![6, 6, 0, 0, 0, 0]
        ]
    );
    assert_eq!(b[0].data[1].segment_ids, [1, 1, 1, 2, 2, 3]);
    assert_eq!(b[0].data[1].targets, [2, 2, I, 3, I, 4]);
    assert_eq!(b[0].indices, [0, 1, 1, 2, 3]);
}

#[test]
fn acceptance9_streaming_overflow_policies() {
    let cfg = PackConfig::new(6, PackStrategy::FirstFit { bins: 2 });
    let e = stage(&[2, 13], all, PLAIN, cfg, 4, 0).iter().find_map(Result::err).expect("an error");
    assert!(matches!(e, LoaderError::DocumentTooLong { index: 1, len: 13, seq_len: 6 }), "{e:?}");
    let s = stage(&[13], all, PLAIN, cfg.overflow(Overflow::Truncate), 4, 0);
    let mut it = s.iter();
    let b = it.next().expect("a batch").expect("ok");
    assert_eq!((b.data.len(), b.data[0].tokens.clone(), it.dropped_tokens()), (1, vec![1; 6], 7));
    assert_eq!(b.data[0].targets, [1, 1, 1, 1, 1, I]);
    let b = run(&stage(&[13], all, PLAIN, cfg.overflow(Overflow::Split), 4, 0));
    let lens: Vec<u64> = b[0].data.iter().flat_map(|r| r.pieces.iter().map(|p| p.len)).collect();
    assert_eq!(lens, [6, 6, 1]);
    // Two bins: the first two pieces fill the group; the third starts the next group.
    assert_eq!(b[0].data[0].pieces, [Piece { doc: 0, start: 0, len: 6 }]);
    assert_eq!(b[0].data[2].pieces, [Piece { doc: 0, start: 12, len: 1 }]);
}

#[test]
fn streaming_packers_refuse_best_fit_decreasing_and_zero_sizes() {
    let l = || loader(docs(&[1], all), PLAIN, 0);
    let e =
        StagePacked::new(l(), PackConfig::new(6, PackStrategy::BestFitDecreasing), 2, 0u32, I).unwrap_err();
    assert!(matches!(e, LoaderError::InvalidConfig { field: "pack", .. }), "{e}");
    assert!(e.to_string().starts_with("invalid configuration: pack: best-fit-decreasing"), "{e}");
    let e = StagePacked::new(l(), PackConfig::new(6, PackStrategy::ConcatSplit), 0, 0u32, I).unwrap_err();
    assert!(matches!(e, LoaderError::InvalidConfig { field: "batch_size", .. }), "{e}");
    assert_eq!(e.to_string(), "invalid configuration: batch_size: must be at least 1");
    let e = StagePacked::new(l(), PackConfig::new(6, PackStrategy::FirstFit { bins: 0 }), 1, 0u32, I)
        .unwrap_err();
    assert!(matches!(e, LoaderError::InvalidConfig { field: "pack", .. }), "{e}");
    assert_eq!(e.to_string(), "invalid configuration: pack: 0 bins");
}

/// Lengths 1..=14 from a fixed LCG.
fn lengths(n: usize, seed: u64) -> Vec<u64> {
    let mut x = seed;
    (0..n)
        .map(|_| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            1 + (x >> 33) % 14
        })
        .collect()
}

/// The streaming packer packs each epoch's order as the planned packer would that order,
/// and every epoch anew.
#[test]
fn streaming_rows_are_the_planned_rows_of_each_epochs_order() {
    let lens = lengths(60, 3);
    let up = Up { shuffle: Some(11), epochs: 2, batch: 7, rank: 0, world: 1 };
    for strategy in
        [PackStrategy::FirstFit { bins: 3 }, PackStrategy::BestFit { bins: 4 }, PackStrategy::ConcatSplit]
    {
        let cfg = PackConfig::new(16, strategy).max_segments(3);
        let s = stage(&lens, all, up, cfg, 5, 2);
        let got = run(&s);
        let sampler = s.loader().sampler();
        let mut per_epoch = Vec::new();
        for epoch in 0..2 {
            let order: Vec<u64> = (0..sampler.batches_per_epoch())
                .flat_map(|b| sampler.batch(epoch * sampler.batches_per_epoch() + b).unwrap().indices)
                .collect();
            let ordered: Vec<u64> = order.iter().map(|&i| lens[i as usize]).collect();
            let plan = PackPlan::new(&ordered, cfg).unwrap();
            let want: Vec<Vec<Piece>> = (0..plan.rows())
                .map(|r| {
                    plan.row(r).unwrap().iter().map(|p| Piece { doc: order[p.doc as usize], ..*p }).collect()
                })
                .collect();
            let rows: Vec<Vec<Piece>> = got
                .iter()
                .filter(|b| b.epoch == epoch)
                .flat_map(|b| b.data.iter().map(|r| r.pieces.clone()))
                .collect();
            assert_eq!(rows, want, "{strategy:?} epoch {epoch}");
            // Every document's tokens exactly once per epoch.
            let mut seen: Vec<(u64, u64)> = rows.iter().flatten().map(|p| (p.doc, p.len)).collect();
            seen.sort_unstable();
            let mut merged: Vec<(u64, u64)> = Vec::new();
            for (d, l) in seen {
                match merged.last_mut() {
                    Some(m) if m.0 == d => m.1 += l,
                    _ => merged.push((d, l)),
                }
            }
            assert_eq!(merged, lens.iter().enumerate().map(|(d, &l)| (d as u64, l)).collect::<Vec<_>>());
            per_epoch.push(rows);
        }
        assert_ne!(per_epoch[0], per_epoch[1], "{strategy:?}: each epoch is packed anew");
    }
}

/// Worker invariance and exact resume of a packed pipeline.
fn packed_laws(lens: &[u64], keep: Keep, up: Up, cfg: PackConfig, rows: u64, drop: bool) {
    let make = |w| stage(lens, keep, up, cfg, rows, w).drop_remainder(drop);
    let full = run(&make(0));
    assert!(full.len() >= 3, "a test pipeline with a few batches");
    for w in [1, 3, 8] {
        assert_eq!(run(&make(w)), full, "{w} workers");
    }
    let s = make(2);
    for k in 0..=full.len() {
        let mut it = s.iter();
        for _ in 0..k {
            it.next().expect("batch").expect("ok");
        }
        let json = it.state().to_json();
        assert!(json.len() < 1024, "{} bytes: {json}", json.len());
        let state = StageState::from_json(&json).unwrap();
        let rest: Vec<_> = s.iter_from(&state).unwrap().collect::<Result<_, _>>().unwrap();
        assert_eq!(rest, full[k..], "resume after {k} batches, {cfg:?}");
    }
}

#[test]
fn acceptance11_streaming_packers_are_worker_invariant_and_resume_exactly() {
    let lens = lengths(45, 9);
    let shuffled = Up { shuffle: Some(5), epochs: 2, batch: 4, rank: 0, world: 1 };
    let rank1 = Up { shuffle: Some(5), epochs: 2, batch: 4, rank: 1, world: 2 };
    for strategy in
        [PackStrategy::FirstFit { bins: 3 }, PackStrategy::BestFit { bins: 3 }, PackStrategy::ConcatSplit]
    {
        for overflow in [Overflow::Split, Overflow::Truncate] {
            let cfg = PackConfig::new(8, strategy).overflow(overflow);
            packed_laws(&lens, all, shuffled, cfg, 3, false);
            packed_laws(&lens, no_fives, rank1, cfg, 2, true);
        }
    }
    packed_laws(
        &lens,
        no_fives,
        PLAIN,
        PackConfig::new(16, PackStrategy::BestFit { bins: 2 }).max_segments(2),
        1,
        false,
    );
}

#[test]
fn packed_state_is_the_group_start_and_rows_delivered() {
    // Grain's state example: [3,6,2,5,6,4], 2 bins, one row per batch: after 1 row the
    // in-flight group (documents 0, 1, 2) starts at document 0 with 1 row delivered; after 2
    // rows the next group starts at document 3 (upstream batch 1, slot 1), which fit no row.
    let s =
        stage(&[3, 6, 2, 5, 6, 4], all, PLAIN, PackConfig::new(6, PackStrategy::FirstFit { bins: 2 }), 1, 0);
    let mut it = s.iter();
    it.next().unwrap().unwrap();
    let st = it.state();
    assert_eq!((st.upstream.next_batch, st.offset, st.token, st.rows, st.next_batch), (0, 0, 0, 1, 1));
    it.next().unwrap().unwrap();
    let st = it.state();
    assert_eq!((st.upstream.next_batch, st.offset, st.token, st.rows, st.next_batch), (1, 1, 0, 0, 2));
    // Concat-split: a row that ends inside a document resumes at a token offset in it.
    let s = stage(&[3, 6, 2, 5, 6, 4], all, PLAIN, PackConfig::new(6, PackStrategy::ConcatSplit), 1, 0);
    let mut it = s.iter();
    it.next().unwrap().unwrap();
    let st = it.state();
    assert_eq!((st.upstream.next_batch, st.offset, st.token, st.rows), (0, 1, 3, 0));
}

#[test]
fn stream_states_of_another_stage_are_refused() {
    let s = stage(&[3, 6, 2], all, PLAIN, PackConfig::new(6, PackStrategy::FirstFit { bins: 2 }), 1, 0);
    let other = stage(&[3, 6, 2], all, PLAIN, PackConfig::new(6, PackStrategy::FirstFit { bins: 2 }), 2, 0);
    let mut it = s.iter();
    it.next().unwrap().unwrap();
    let e = other.iter_from(&it.state()).unwrap_err();
    assert!(matches!(e, LoaderError::StateMismatch { field: "stream.fingerprint", .. }), "{e:?}");
    let mut st = it.state();
    st.version = 9;
    assert!(matches!(s.iter_from(&st), Err(LoaderError::StateVersion { expected: 1, found: 9 })));
    // A slot past the end of its upstream batch (batches of 2 here) names `offset`.
    let mut st = it.state();
    st.offset = 3;
    let e = s.iter_from(&st).unwrap_err();
    assert!(matches!(e, LoaderError::StateMismatch { field: "offset", .. }), "{e:?}");
    let mut st = it.state();
    st.rows = 7;
    let e = s.iter_from(&st).unwrap_err();
    assert!(matches!(e, LoaderError::StateMismatch { field: "rows", .. }), "{e:?}");
}

type Odd = Filter<RangeSource, fn(&i64) -> bool>;

fn rebatched(keep: fn(&i64) -> bool, up: Up, out: u64, workers: usize) -> Rebatched<Odd, i64> {
    rebatched_n(10, keep, up, out, workers)
}

fn rebatched_n(n: i64, keep: fn(&i64) -> bool, up: Up, out: u64, workers: usize) -> Rebatched<Odd, i64> {
    let src = Filter::new(RangeSource::new(0, n, 1).unwrap(), keep, 2);
    let mut b =
        Loader::builder(src).batch_size(up.batch).epochs(up.epochs).shard(up.rank, up.world).workers(workers);
    if let Some(seed) = up.shuffle {
        b = b.shuffle(seed);
    }
    Rebatched::new(b.build().unwrap(), out).unwrap()
}

fn not3(x: &i64) -> bool {
    x % 3 != 0
}

fn data(r: &Rebatched<Odd, i64>) -> Vec<(u64, u64, Vec<i64>)> {
    r.iter().map(|b| b.map(|b| (b.number, b.epoch, b.data))).collect::<Result<_, _>>().unwrap()
}

#[test]
fn compaction_drops_holes_and_refills_batches() {
    let up = Up { shuffle: None, epochs: 2, batch: 4, rank: 0, world: 1 };
    // Kept: 1 2 4 5 7 8; batches of 4 never span an epoch.
    let r = rebatched(not3, up, 4, 0);
    assert_eq!(
        data(&r),
        [(0, 0, vec![1, 2, 4, 5]), (1, 0, vec![7, 8]), (2, 1, vec![1, 2, 4, 5]), (3, 1, vec![7, 8])]
    );
    assert_eq!(
        data(&rebatched(not3, up, 4, 0).drop_remainder(true)),
        [(0, 0, vec![1, 2, 4, 5]), (1, 1, vec![1, 2, 4, 5])]
    );
    // Rank 1 of 2, upstream batches of 2: its positions are 2 3 | 6 7 | (10, 11 padding):
    // kept 2 | 7; the sampler's padding records are dropped.
    let up = Up { shuffle: None, epochs: 1, batch: 2, rank: 1, world: 2 };
    assert_eq!(data(&rebatched(not3, up, 3, 0)), [(0, 0, vec![2, 7])]);
    let up = Up { shuffle: None, epochs: 1, batch: 2, rank: 0, world: 2 };
    assert_eq!(data(&rebatched(not3, up, 3, 0)), [(0, 0, vec![1, 4, 5]), (1, 0, vec![8])]);
}

#[test]
fn compaction_is_worker_invariant_and_resumes_exactly() {
    let keep: fn(&i64) -> bool = |x| x % 4 != 1;
    for up in [
        Up { shuffle: Some(3), epochs: 3, batch: 3, rank: 0, world: 1 },
        Up { shuffle: Some(3), epochs: 3, batch: 2, rank: 1, world: 2 },
    ] {
        for (out, drop) in [(2, false), (4, true), (3, false)] {
            let make = |w| rebatched_n(37, keep, up, out, w).drop_remainder(drop);
            let full: Vec<_> = make(0).iter().collect::<Result<_, _>>().unwrap();
            assert!(full.len() >= 6, "{}", full.len());
            for w in [1, 3, 8] {
                let got: Vec<_> = make(w).iter().collect::<Result<_, _>>().unwrap();
                assert_eq!(got, full, "{w} workers");
            }
            let s = make(2);
            for k in 0..=full.len() {
                let mut it = s.iter();
                for _ in 0..k {
                    it.next().unwrap().unwrap();
                }
                let json = it.state().to_json();
                assert!(json.len() < 1024);
                let rest: Vec<_> = s
                    .iter_from(&StageState::from_json(&json).unwrap())
                    .unwrap()
                    .collect::<Result<_, _>>()
                    .unwrap();
                assert_eq!(rest, full[k..], "resume after {k}");
            }
        }
    }
}

#[test]
fn compaction_keeps_the_loaders_order_without_holes() {
    let up = Up { shuffle: Some(8), epochs: 2, batch: 3, rank: 0, world: 1 };
    let r = rebatched(not3, up, 5, 0);
    let sampler = r.loader().sampler();
    for epoch in 0..2u64 {
        let order: Vec<i64> = (0..sampler.batches_per_epoch())
            .flat_map(|b| sampler.batch(epoch * sampler.batches_per_epoch() + b).unwrap().indices)
            .map(|i| i as i64)
            .filter(|x| x % 3 != 0)
            .collect();
        let got: Vec<i64> = data(&r).into_iter().filter(|b| b.1 == epoch).flat_map(|b| b.2).collect();
        assert_eq!(got, order);
        assert_eq!(order.len(), 6);
    }
    assert_eq!(r.loader().source().len(), 10);
}
