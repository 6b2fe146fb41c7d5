//! Issue 33 item 2: elastic resume checked completely against a hand model of the global
//! order, with `drop_remainder` on and off, several epochs, states at and next to epoch ends,
//! the global batch changed together with the world size, and version-1 states of several
//! ranks.
//!
//! The model (written from the rules in [`State`]'s documentation, not from the loader's code):
//! an epoch of `n` records under the global batch `G` has `floor(n / G)` steps with
//! `drop_remainder` and `ceil(n / G)` without; step `t` covers the epoch's positions
//! `[t*G, (t+1)*G)`, of which rank `r` of `W` takes `[t*G + r*B, t*G + (r+1)*B)` (`B = G / W`);
//! positions `>= n` are padding (wrapped to `p mod n`) for `W > 1` and cut off for `W = 1`.
//! A run that delivered `t` steps of epoch `e` has consumed positions `[0, t*G)` of it; once it
//! delivered all the epoch's steps it is at epoch `e + 1`, position 0 (the dropped remainder is
//! not consumed, it is skipped). Resuming under `G'` starts at the step `floor(c / G')` that holds
//! the first unconsumed position `c`, replaying (flagged) the positions of that step before `c`.

use std::collections::BTreeSet;

use guideloom_loader::rand::Rng;
use guideloom_loader::{Loader, LoaderError, RangeSource, RecordRng, ResumeOptions, State};
use proptest::prelude::*;

/// One delivered record: (record, position, padding, repeat).
type Rec = (i64, u64, bool, bool);
/// One batch: (epoch, absolute batch number, records).
type Got = (u64, u64, Vec<Rec>);

/// The order's options shared by every segment of a run.
#[derive(Clone, Copy, Debug)]
struct Order {
    n: i64,
    drop: bool,
    shuffle: Option<u64>,
    epochs: u64,
}

impl Order {
    fn loader(&self, g: u64, rank: u64, world: u64, workers: usize) -> Loader<RangeSource, (i64, u64)> {
        let mut b = Loader::builder(RangeSource::new(0, self.n, 1).expect("range"))
            .global_batch(g)
            .shard(rank, world)
            .drop_remainder(self.drop)
            .epochs(self.epochs)
            .workers(workers)
            .map(|x, ctx| (x, ctx.rng().random::<u64>()));
        if let Some(seed) = self.shuffle {
            b = b.shuffle(seed);
        }
        b.build().expect("valid")
    }

    /// Steps per epoch under `g` (the model's rule).
    fn steps(&self, g: u64) -> u64 {
        let n = self.n as u64;
        if self.drop {
            n / g
        } else {
            n.div_ceil(g)
        }
    }

    /// The records of each epoch's order by position (the order itself is pinned by the
    /// golden tests; here it only names the records).
    fn orders(&self) -> Vec<Vec<i64>> {
        let one = self.loader(1, 0, 1, 0);
        let order = |e: u64| -> Vec<i64> {
            (0..self.n as u64).map(|p| one.sampler().order(e, p).expect("in range") as i64).collect()
        };
        (0..self.epochs).map(order).collect()
    }
}

/// Where a run stands: the epoch, and the positions of it consumed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Cursor {
    epoch: u64,
    consumed: u64,
}

/// The model's batches of every rank for a segment of `steps` steps (or to the end) under
/// global batch `g` on `world` ranks, resumed from `from`; and the cursor after it.
fn model(o: &Order, g: u64, world: u64, from: Cursor, steps: Option<usize>) -> (Vec<Vec<Got>>, Cursor) {
    let n = o.n as u64;
    let orders = o.orders();
    let per_epoch = o.steps(g);
    let b = g / world;
    let mut out = vec![Vec::new(); world as usize];
    let (mut epoch, mut t) = (from.epoch, from.consumed / g);
    let replay = (from.epoch, from.consumed);
    if t >= per_epoch {
        // The rest of the epoch is the dropped remainder under `g`.
        (epoch, t) = (epoch + 1, 0);
    }
    let mut delivered = 0;
    let mut cursor = Cursor { epoch, consumed: t * g };
    while epoch < o.epochs && steps.is_none_or(|k| delivered < k) {
        for (rank, batches) in out.iter_mut().enumerate() {
            let mut recs = Vec::new();
            for j in 0..b {
                let p = t * g + rank as u64 * b + j;
                if p >= n && world == 1 {
                    break; // one rank: a short last batch, no padding
                }
                let repeat = epoch == replay.0 && p < replay.1;
                recs.push((orders[epoch as usize][(p % n) as usize], p, p >= n, repeat));
            }
            batches.push((epoch, epoch * per_epoch + t, recs));
        }
        delivered += 1;
        t += 1;
        if t == per_epoch {
            (epoch, t) = (epoch + 1, 0);
        }
        cursor = Cursor { epoch, consumed: t * g };
    }
    (out, cursor)
}

/// The loader's batches of every rank for the same segment, resumed from `from` (rounding
/// down); and the state every rank writes afterwards (asserted identical). Each record's draw
/// is checked to be its (seed, epoch, position) draw.
fn actual(
    o: &Order,
    g: u64,
    world: u64,
    from: Option<&State>,
    steps: Option<usize>,
) -> (Vec<Vec<Got>>, State) {
    let mut out = Vec::new();
    let mut states = BTreeSet::new();
    let seed = o.shuffle.unwrap_or(0);
    for rank in 0..world {
        let l = o.loader(g, rank, world, (rank % 3) as usize);
        let mut it = match from {
            Some(s) => l.iter_from_with(s, ResumeOptions::round_down()).expect("rounding down always fits"),
            None => l.iter(),
        };
        let mut got = Vec::new();
        while steps.is_none_or(|k| got.len() < k) {
            let Some(batch) = it.next() else { break };
            let batch = batch.expect("ok");
            let mut recs = Vec::new();
            for i in 0..batch.len() {
                let (record, draw) = batch.data[i];
                let p = batch.positions[i];
                if !batch.padding[i] {
                    let want = RecordRng::new(seed, batch.epoch, p).random::<u64>();
                    assert_eq!(draw, want, "draw of epoch {} position {p}", batch.epoch);
                }
                recs.push((record, p, batch.padding[i], batch.repeat[i]));
            }
            got.push((batch.epoch, batch.number, recs));
        }
        states.insert(it.state().to_json());
        out.push(got);
    }
    assert_eq!(states.len(), 1, "every rank writes the same state: {states:?}");
    (out, State::from_json(states.first().expect("one")).expect("parse"))
}

/// The divisors of `g`.
fn divisors(g: u64) -> Vec<u64> {
    (1..=g).filter(|w| g.is_multiple_of(*w)).collect()
}

/// Runs `segments` (global batch, world size, steps; the last to the end) one after the other,
/// each resumed from the previous one's state, and checks every batch of every rank against
/// the model; also that a resume is accepted without rounding down exactly when the consumed
/// positions are a multiple of the new global batch.
fn check_segments(o: &Order, segments: &[(u64, u64, Option<usize>)]) -> Result<(), TestCaseError> {
    let mut cursor = Cursor { epoch: 0, consumed: 0 };
    let mut state: Option<State> = None;
    for (i, &(g, world, steps)) in segments.iter().enumerate() {
        if let Some(s) = &state {
            let exact = o.loader(g, 0, world, 0).iter_from(s);
            let fits = cursor.consumed.is_multiple_of(g);
            match exact {
                Ok(_) => prop_assert!(fits, "segment {i}: {cursor:?} under {g} was accepted"),
                Err(LoaderError::ElasticResume { consumed, global_batch }) => {
                    prop_assert!(!fits, "segment {i}: {cursor:?} under {g} was refused");
                    prop_assert_eq!((consumed, global_batch), (cursor.consumed, g));
                }
                Err(e) => return Err(TestCaseError::fail(format!("segment {i}: {e}"))),
            }
        }
        let (want, next) = model(o, g, world, cursor, steps);
        let (got, s) = actual(o, g, world, state.as_ref(), steps);
        prop_assert_eq!(&got, &want, "segment {} (G {}, W {}, {:?}) from {:?}", i, g, world, steps, cursor);
        let per_epoch = o.steps(g);
        // The state names the model's cursor: step `next_batch` of this global batch (every
        // global batch here has at least one step per epoch).
        let at = s
            .next_batch
            .checked_div(per_epoch)
            .map(|epoch| Cursor { epoch, consumed: s.next_batch % per_epoch * g });
        prop_assert_eq!(at, Some(next), "state after segment {}", i);
        cursor = next;
        state = Some(s);
    }
    Ok(())
}

/// The steps to stop after: at, before and after each epoch end of `per_epoch`-step epochs
/// (up to `epochs`), then `extra`.
fn near_epoch_ends(per_epoch: u64, epochs: u64, pick: usize, extra: usize) -> usize {
    let mut ks: Vec<u64> = (0..=epochs)
        .flat_map(|e| {
            let end = e * per_epoch;
            [end.saturating_sub(1), end, end + 1]
        })
        .filter(|&k| k <= per_epoch * epochs)
        .collect();
    ks.push(extra as u64 % (per_epoch * epochs + 1));
    ks[pick % ks.len()] as usize
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Another global batch (and world size), drop on and off, three epochs, the state taken at
    /// or next to an epoch end: the resumed run is the model's, batch by batch on every rank.
    #[test]
    fn issue33_another_global_batch_at_and_next_to_epoch_ends(
        n in 12i64..60, g1 in 1u64..13, g2 in 1u64..13, w1 in 0usize..6, w2 in 0usize..6,
        drop: bool, shuffle: bool, seed: u64, pick: usize, extra: usize,
    ) {
        let o = Order { n, drop, shuffle: shuffle.then_some(seed), epochs: 3 };
        let (d1, d2) = (divisors(g1), divisors(g2));
        let k = near_epoch_ends(o.steps(g1), 3, pick, extra);
        check_segments(&o, &[(g1, d1[w1 % d1.len()], Some(k)), (g2, d2[w2 % d2.len()], None)])?;
    }

    /// The world-size property with the global batch changing too: up to four segments, each
    /// with its own global batch and world size, two epochs.
    #[test]
    fn issue33_world_size_and_global_batch_change_together(
        n in 12i64..50, segs in proptest::collection::vec((1u64..13, 0usize..6, 0usize..12), 1..5),
        drop: bool, shuffle: bool, seed: u64,
    ) {
        let o = Order { n, drop, shuffle: shuffle.then_some(seed), epochs: 2 };
        let last = segs.len() - 1;
        let segments: Vec<(u64, u64, Option<usize>)> = segs
            .iter()
            .enumerate()
            .map(|(i, &(g, w, k))| {
                let d = divisors(g);
                (g, d[w % d.len()], (i < last).then_some(k))
            })
            .collect();
        check_segments(&o, &segments)?;
    }
}

/// The issue's case: drop on, epoch 0 of 10 records under G = 4 drops records 8 and 9; a state
/// at the end of epoch 0 resumed under G = 2 starts epoch 1 at position 0 (by hand: 2 steps of
/// 4 per epoch, so `next_batch` 2 is epoch 1; G = 2 has 5 steps per epoch, so batch 5). A
/// rescale that took the epoch length without the dropped remainder (`ceil(10 / 4)` = 3 steps)
/// would resume at epoch 0 position 8 and replay the two dropped records.
#[test]
fn issue33_rescale_at_an_epoch_end_skips_the_dropped_remainder() {
    let o = Order { n: 10, drop: true, shuffle: None, epochs: 2 };
    let (_, state) = actual(&o, 4, 1, None, Some(2));
    assert_eq!((state.next_batch, state.global_batch), (2, 4));
    let got: Vec<(u64, u64, Vec<u64>)> = o
        .loader(2, 0, 1, 0)
        .iter_from(&state)
        .expect("0 consumed in epoch 1")
        .map(|b| b.expect("ok"))
        .map(|b| (b.epoch, b.number, b.positions))
        .collect();
    assert_eq!(
        got,
        [(1, 5, vec![0, 1]), (1, 6, vec![2, 3]), (1, 7, vec![4, 5]), (1, 8, vec![6, 7]), (1, 9, vec![8, 9])]
    );
    // And the other way: G = 2 at the end of epoch 0 (5 steps) onto G = 4 (2 steps per epoch).
    let (_, state) = actual(&o, 2, 2, None, Some(5));
    let got: Vec<(u64, u64)> = o
        .loader(4, 1, 2, 0)
        .iter_from(&state)
        .expect("fits")
        .map(|b| b.expect("ok"))
        .map(|b| (b.epoch, b.number))
        .collect();
    assert_eq!(got, [(1, 2), (1, 3)]);
}

/// A version-1 state (`config` with `batch_size`, `rank`, `world_size`) written by a rank
/// of `world` ranks of 8 records each.
fn v1_json(next_batch: u64, rank: u64, world: u64, drop: bool, fingerprint: u64) -> String {
    format!(
        r#"{{"version":1,"next_batch":{next_batch},"config":{{"seed":2024,"shuffle":true,"epochs":3,"batch_size":8,"drop_remainder":{drop},"rank":{rank},"world_size":{world}}},"source":{{"records":100,"fingerprint":{fingerprint}}}}}"#
    )
}

/// Version-1 states of world size 2 and 4 (per-rank batch 8): they load with the global batch
/// `8 * W` (16, 32; not the per-rank 8) and resume every rank exactly onto the uninterrupted
/// run's rest, at and next to the epoch ends, drop on and off (by hand: 100 records make
/// 6 / 7 steps of 16 and 3 / 4 steps of 32 per epoch, with / without drop).
#[test]
fn issue33_version1_states_of_several_ranks_resume_exactly() {
    for world in [2u64, 4] {
        for drop in [false, true] {
            let rank_loader = |rank: u64| {
                Loader::builder(RangeSource::new(0, 100, 1).expect("range"))
                    .batch_size(8)
                    .shard(rank, world)
                    .drop_remainder(drop)
                    .shuffle(2024)
                    .epochs(3)
                    .workers(1)
                    .build()
                    .expect("valid")
            };
            let per_epoch = match (world, drop) {
                (2, false) => 7,
                (2, true) => 6,
                (4, false) => 4,
                _ => 3,
            };
            assert_eq!(rank_loader(0).len(), per_epoch, "world {world} drop {drop}");
            let fingerprint = rank_loader(0).initial_state().source.fingerprint;
            for rank in 0..world {
                let l = rank_loader(rank);
                let whole: Vec<_> = l.iter().map(|b| b.expect("ok")).collect();
                assert_eq!(whole.len() as u64, 3 * per_epoch);
                for k in [
                    0,
                    1,
                    per_epoch - 1,
                    per_epoch,
                    per_epoch + 1,
                    2 * per_epoch,
                    3 * per_epoch - 1,
                    3 * per_epoch,
                ] {
                    let state = State::from_json(&v1_json(k, rank, world, drop, fingerprint)).expect("v1");
                    assert_eq!((state.version, state.global_batch), (1, 8 * world), "world {world}");
                    let topology = state.topology.expect("a version-1 state keeps its topology");
                    assert_eq!((topology.rank, topology.world_size, topology.batch_size), (rank, world, 8));
                    let rest: Vec<_> =
                        l.iter_from(&state).expect("same topology").map(|b| b.expect("ok")).collect();
                    assert_eq!(rest, whole[k as usize..], "world {world} drop {drop} rank {rank} k {k}");
                    // Written again as version 1, unchanged.
                    assert_eq!(state.to_json(), v1_json(k, rank, world, drop, fingerprint));
                }
            }
            // Another topology is refused naming the field (version 1 keeps its topology).
            let state = State::from_json(&v1_json(1, 0, world, drop, fingerprint)).expect("v1");
            let other = Loader::builder(RangeSource::new(0, 100, 1).expect("range"))
                .batch_size(8 * world / 2)
                .shard(0, 2)
                .drop_remainder(drop)
                .shuffle(2024)
                .epochs(3)
                .build()
                .expect("valid");
            if world != 2 {
                assert!(matches!(
                    other.iter_from(&state).map(|_| ()),
                    Err(LoaderError::StateMismatch { field: "batch_size", .. })
                ));
            }
        }
    }
}
