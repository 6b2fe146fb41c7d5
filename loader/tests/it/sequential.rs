//! Sequential sources (issue 17, items 7-10): dealing, interleave, worker invariance, exact
//! and elastic resume, epochs.

use std::collections::BTreeMap;
use std::sync::Arc;

use guideloom_loader::rand::Rng;
use guideloom_loader::sequential::{
    shard_order, Dropped, SequentialBatch, SequentialEnd, SequentialLoader, SequentialState, StopQuery,
    VecShards,
};
use guideloom_loader::{LoaderError, RecordId, RecordRng};
use proptest::prelude::*;

/// A record `s.k` (record k of shard s) as the tests see it.
type SK = (u64, u64);

/// Shards of the given lengths; record k of shard s is `(s, k)` (also used by `mutants.rs`).
pub(crate) fn shards(lengths: &[u64]) -> VecShards<SK> {
    VecShards::new(
        lengths.iter().enumerate().map(|(s, &n)| (0..n).map(|k| (s as u64, k)).collect()).collect(),
    )
}

fn show(records: &[SK]) -> String {
    records.iter().map(|(s, k)| format!("{s}.{k}")).collect::<Vec<_>>().join(", ")
}

/// Options of the S1 configuration and its variants.
#[derive(Clone, Debug)]
struct Opts {
    lengths: Vec<u64>,
    known: bool,
    world: u64,
    cycle: u64,
    window: u64,
    batch: u64,
    end: SequentialEnd,
    shuffle: Option<u64>,
    epochs: u64,
    workers: usize,
    prefetch: usize,
}

impl Opts {
    fn s1() -> Self {
        Opts {
            lengths: vec![5, 3, 4, 2],
            known: true,
            world: 2,
            cycle: 2,
            window: 1,
            batch: 1,
            end: SequentialEnd::Exhaust,
            shuffle: None,
            epochs: 1,
            workers: 0,
            prefetch: 1,
        }
    }

    fn loader(&self, rank: u64) -> SequentialLoader<VecShards<SK>> {
        self.loader_world(rank, self.world)
    }

    fn loader_world(&self, rank: u64, world: u64) -> SequentialLoader<VecShards<SK>> {
        let source = if self.known { shards(&self.lengths) } else { shards(&self.lengths).without_lengths() };
        let mut b = SequentialLoader::builder(source)
            .shard(rank, world)
            .cycle(self.cycle)
            .window_shuffle(self.window)
            .batch_size(self.batch)
            .end(self.end.clone())
            .epochs(self.epochs)
            .workers(self.workers)
            .prefetch(self.prefetch);
        if let Some(seed) = self.shuffle {
            b = b.shuffle(seed);
        }
        b.build().expect("valid")
    }
}

fn all<T>(it: impl Iterator<Item = Result<SequentialBatch<T>, LoaderError>>) -> Vec<SequentialBatch<T>> {
    it.collect::<Result<_, _>>().expect("no batch fails")
}

/// The records of `batches`, padding left out.
fn real(batches: &[SequentialBatch<Vec<SK>>]) -> Vec<SK> {
    batches.iter().flat_map(|b| b.data.iter().zip(&b.padding).filter(|(_, &p)| !p).map(|(r, _)| *r)).collect()
}

/// The records `Dropped::Records` reports name.
fn dropped_records(dropped: &[Dropped]) -> Vec<SK> {
    dropped
        .iter()
        .flat_map(|d| match d {
            Dropped::Records { shard, start, end, .. } => {
                (*start..*end).map(|k| (*shard, k)).collect::<Vec<_>>()
            }
            other => panic!("unexpected report {other:?}"),
        })
        .collect()
}

/// Item 7: 4 shards of lengths [5,3,4,2], world 2, no shuffle, cycle 2.
#[test]
fn issue17_item7_deal_interleave_and_drop() {
    let o = Opts::s1();
    assert_eq!(o.loader(0).deal(0), [vec![0, 3], vec![1, 2]]);
    let stream = |rank| show(&real(&all(o.loader(rank).iter())));
    assert_eq!(stream(0), "0.0, 3.0, 0.1, 3.1, 0.2, 0.3, 0.4");
    assert_eq!(stream(1), "1.0, 2.0, 1.1, 2.1, 1.2, 2.2, 2.3");
    let drop = Opts { batch: 2, end: SequentialEnd::Drop, ..Opts::s1() };
    assert_eq!(drop.loader(0).steps(0), Some(3));
    let mut reported = Vec::new();
    for rank in 0..2 {
        let mut it = drop.loader(rank).iter();
        let batches = all(&mut it);
        assert_eq!(batches.len(), 3, "rank {rank}");
        assert_eq!(batches.iter().map(|b| b.step).collect::<Vec<_>>(), [0, 1, 2]);
        reported.extend(it.take_dropped());
    }
    assert_eq!(
        reported,
        [
            Dropped::Records { epoch: 0, shard: 0, start: 4, end: 5 },
            Dropped::Records { epoch: 0, shard: 2, start: 3, end: 4 }
        ]
    );
    // Padding instead: 4 steps per rank, the last one real record and one flagged.
    let pad = Opts { batch: 2, end: SequentialEnd::Pad, ..Opts::s1() };
    let batches = all(pad.loader(0).iter());
    assert_eq!(batches.len(), 4);
    assert_eq!(show(&batches[3].data), "0.4, 0.0");
    assert_eq!(batches[3].padding, [false, true]);
}

/// Item 8: the S1 stream with 1, 2 and 4 workers is identical; resuming after every k batches
/// is exact; the state is under 256 bytes. (2 shards and 8 workers give what 1 worker gives.)
#[test]
fn issue17_item8_workers_do_not_change_the_stream_and_resume_is_exact() {
    for rank in 0..2 {
        let base = Opts { batch: 2, end: SequentialEnd::Drop, ..Opts::s1() };
        let reference = all(base.loader(rank).iter());
        for (workers, prefetch) in [(1, 1), (2, 3), (4, 8)] {
            let o = Opts { workers, prefetch, ..base.clone() };
            assert_eq!(all(o.loader(rank).iter()), reference, "rank {rank}, {workers} workers");
        }
        let mut it = base.loader(rank).iter();
        let mut states = vec![it.state()];
        for _ in 0..reference.len() {
            it.next().expect("batch").expect("ok");
            states.push(it.state());
        }
        for (k, state) in states.iter().enumerate() {
            let json = state.to_json();
            assert!(json.len() < 256, "{} bytes: {json}", json.len());
            let restored = SequentialState::from_json(&json).expect("parse");
            for workers in [0, 3] {
                let o = Opts { workers, prefetch: 2, ..base.clone() };
                let rest = all(o.loader(rank).iter_from(&restored).expect("fits"));
                assert_eq!(rest[..], reference[k..], "rank {rank}, k {k}, {workers} workers");
            }
        }
    }
    let one = Opts { lengths: vec![6, 3], world: 1, batch: 2, ..Opts::s1() };
    let many = Opts { workers: 8, prefetch: 8, ..one.clone() };
    assert_eq!(all(many.loader(0).iter()), all(one.loader(0).iter()));
    // The state after one batch of rank 0, exactly.
    let base = Opts { batch: 2, end: SequentialEnd::Drop, ..Opts::s1() };
    let mut it = base.loader(0).iter();
    it.next().expect("batch").expect("ok");
    let s = it.state();
    assert_eq!((s.epoch, s.batch, s.step, s.steps, s.next, s.turn), (0, 1, 1, Some(3), 2, 0));
    assert_eq!(
        s.open.iter().map(|c| (c.shard, c.pos.record, c.cursor)).collect::<Vec<_>>(),
        [(0, 1, 0), (3, 1, 0)]
    );
}

/// Item 9: world 2 for one step, then world 3: all 14 records are delivered or reported
/// dropped, each once.
#[test]
fn issue17_item9_two_then_three_ranks_lose_and_repeat_nothing() {
    let o = Opts { batch: 2, end: SequentialEnd::Drop, ..Opts::s1() };
    let mut delivered = Vec::new();
    let mut states = Vec::new();
    for rank in 0..2 {
        let mut it = o.loader(rank).iter();
        let b = it.next().expect("step 0").expect("ok");
        delivered.extend(b.data);
        states.push(it.state());
    }
    assert_eq!(show(&delivered), "0.0, 3.0, 1.0, 2.0");
    let mut dropped = Vec::new();
    let mut after = Vec::new();
    for rank in 0..3 {
        let mut it = o.loader_world(rank, 3).iter_from_ranks(&states).expect("elastic");
        let batches = all(&mut it);
        assert!(batches.iter().all(|b| b.step >= 1 && b.number >= 1));
        after.push(batches.len());
        delivered.extend(real(&batches));
        dropped.extend(dropped_records(&it.take_dropped()));
    }
    // Left: shard 0 records 1-4, shard 2 records 1-3, shard 1 records 1-2, shard 3 record 1;
    // re-dealt by length: {0}, {2}, {1, 3}; one more step each (batch 2).
    assert_eq!(after, [1, 1, 1]);
    assert_eq!(dropped.len(), 4);
    let mut every: Vec<SK> = delivered.iter().chain(&dropped).copied().collect();
    every.sort_unstable();
    let expected: Vec<SK> =
        [5u64, 3, 4, 2].iter().enumerate().flat_map(|(s, &n)| (0..n).map(move |k| (s as u64, k))).collect();
    assert_eq!(every, expected);
}

/// Item 10: with persistent workers, epoch 1's shard order equals that of a fresh loader started
/// at epoch 1 and differs from epoch 0's (6 shards).
#[test]
fn issue17_item10_epoch_one_with_persistent_workers_equals_a_fresh_start_at_epoch_one() {
    for known in [true, false] {
        let o = Opts {
            lengths: vec![4, 3, 5, 2, 6, 1],
            known,
            world: 2,
            batch: 2,
            shuffle: Some(2),
            epochs: 2,
            workers: 3,
            prefetch: 4,
            ..Opts::s1()
        };
        for rank in 0..2 {
            let run = all(o.loader(rank).iter());
            let epoch1: Vec<_> = run.iter().filter(|b| b.epoch == 1).collect();
            let fresh = all(o.loader(rank).iter_from_epoch(1));
            assert_eq!(epoch1.len(), fresh.len());
            for (a, b) in epoch1.iter().zip(&fresh) {
                assert_eq!((&a.data, &a.records, a.step, a.epoch), (&b.data, &b.records, b.step, b.epoch));
            }
            let first_shards = |e: u64| -> Vec<u64> {
                let mut seen = Vec::new();
                for b in run.iter().filter(|b| b.epoch == e) {
                    for r in &b.records {
                        if !seen.contains(&r.shard) {
                            seen.push(r.shard);
                        }
                    }
                }
                seen
            };
            assert_ne!(first_shards(0), first_shards(1), "known {known} rank {rank}");
        }
        assert_eq!(shard_order(6, 2, true, 0), [3, 2, 1, 0, 4, 5]);
        assert_eq!(shard_order(6, 2, true, 1), [0, 4, 5, 3, 2, 1]);
        let (deal0, deal1) = (o.loader(0).deal(0), o.loader(0).deal(1));
        if known {
            // Longest first: 4 (6), 2 (5), 0 (4), 1 (3), 3 (2), 5 (1); each list in the epoch's order.
            assert_eq!(
                (deal0, deal1),
                (vec![vec![3, 1, 4], vec![2, 0, 5]], vec![vec![4, 3, 1], vec![0, 5, 2]])
            );
        } else {
            assert_eq!(
                (deal0, deal1),
                (vec![vec![3, 1, 4], vec![2, 0, 5]], vec![vec![0, 5, 2], vec![4, 3, 1]])
            );
        }
    }
}

/// Window shuffle: each window of a shard is delivered as a permutation of itself; resume in
/// the middle of a window is exact; two epochs shuffle differently.
#[test]
fn window_shuffle_permutes_inside_windows_and_resumes_mid_window() {
    let o = Opts {
        lengths: vec![10, 7],
        world: 1,
        cycle: 1,
        window: 4,
        batch: 3,
        shuffle: Some(5),
        epochs: 2,
        ..Opts::s1()
    };
    let run = all(o.loader(0).iter());
    let epoch0 = real(&run.iter().filter(|b| b.epoch == 0).cloned().collect::<Vec<_>>());
    let order = shard_order(2, 5, true, 0);
    let mut at = 0;
    for &s in &order {
        let n = [10u64, 7][s as usize];
        for start in (0..n).step_by(4) {
            let end = (start + 4).min(n);
            let mut got: Vec<u64> = epoch0[at..at + (end - start) as usize]
                .iter()
                .map(|r| {
                    assert_eq!(r.0, s);
                    r.1
                })
                .collect();
            got.sort_unstable();
            assert_eq!(got, (start..end).collect::<Vec<_>>());
            at += (end - start) as usize;
        }
    }
    let epoch1 = real(&run.iter().filter(|b| b.epoch == 1).cloned().collect::<Vec<_>>());
    assert_ne!(epoch0, epoch1);
    let mut it = o.loader(0).iter();
    it.next().expect("batch").expect("ok");
    let s = it.state();
    assert_eq!(s.open[0].cursor, 3, "mid-window");
    assert_eq!(all(o.loader(0).iter_from(&s).expect("fits"))[..], run[1..]);
}

/// The stop hook: asked before each batch; refusing ends the epoch and reports the rest of the
/// stream from where the refused batch started.
#[test]
fn stop_hook_ends_the_epoch_and_reports_the_rest() {
    let asked = Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = Arc::clone(&asked);
    let hook = Arc::new(move |q: &StopQuery| {
        log.lock().expect("lock").push(*q);
        q.full && q.step < 2
    });
    // Lengths unknown: round-robin, rank 0 reads shards 0 and 2.
    let o = Opts { known: false, batch: 2, end: SequentialEnd::Stop(hook), ..Opts::s1() };
    assert_eq!(o.loader(0).deal(0), [vec![0, 2], vec![1, 3]]);
    let mut it = o.loader(0).iter();
    let batches = all(&mut it);
    assert_eq!(show(&real(&batches)), "0.0, 2.0, 0.1, 2.1");
    let q = asked.lock().expect("lock").clone();
    assert_eq!(q.len(), 3);
    assert_eq!(q[2], StopQuery { epoch: 0, step: 2, records: 2, full: true });
    let rest: Vec<(u64, u64)> = it
        .take_dropped()
        .into_iter()
        .map(|d| match d {
            Dropped::Rest { epoch: 0, from } => (from.shard, from.pos.record),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(rest, [(0, 2), (2, 2)]);
}

/// Per-record randomness: keyed by the record's identity, so a world-size change or worker
/// count leaves every record's draw unchanged.
#[test]
fn per_record_rng_follows_the_record_across_world_sizes() {
    let o = Opts { batch: 2, end: SequentialEnd::Drop, ..Opts::s1() };
    let draws = |world: u64, workers: usize| -> BTreeMap<SK, u64> {
        let mut m = BTreeMap::new();
        for rank in 0..world {
            let l = SequentialLoader::builder(shards(&o.lengths))
                .shard(rank, world)
                .cycle(2)
                .batch_size(1)
                .seed(9)
                .workers(workers)
                .map(|r, ctx| (r, ctx.rng().random::<u64>(), ctx.record_id()))
                .build()
                .expect("valid");
            for b in all(l.iter()) {
                for (r, d, id) in b.data {
                    assert_eq!(id, Some(RecordId { shard: r.0, record: r.1, offset: 0 }));
                    m.insert(r, d);
                }
            }
        }
        m
    };
    let one = draws(1, 0);
    assert_eq!(one.len(), 14);
    assert_eq!(draws(3, 2), one);
    let id = RecordId { shard: 2, record: 3, offset: 0 };
    assert_eq!(one[&(2, 3)], RecordRng::for_record(9, 0, &id).random::<u64>());
}

/// A shard shorter than its hint is an error naming it; a length-less source refuses Drop.
#[test]
fn length_hints_are_checked() {
    struct Liar;
    impl guideloom_loader::sequential::SequentialSource for Liar {
        type Item = SK;
        type Reader = guideloom_loader::sequential::VecShardReader<SK>;
        fn shards(&self) -> Vec<guideloom_loader::sequential::ShardInfo> {
            vec![guideloom_loader::sequential::ShardInfo { len_hint: Some(5) }]
        }
        fn open(
            &self,
            shard: u64,
            at: guideloom_loader::sequential::ShardPos,
        ) -> Result<Self::Reader, LoaderError> {
            shards(&[3]).open(shard, at)
        }
    }
    let l = SequentialLoader::builder(Liar).batch_size(2).workers(0).build().expect("valid");
    let r: Vec<_> = l.iter().collect();
    assert_eq!(r.len(), 2);
    let e = r[1].as_ref().expect_err("short shard");
    assert_eq!(e.to_string(), "batch 1 (epoch 0)");
    let cause = std::error::Error::source(e).expect("cause").to_string();
    assert_eq!(cause, "shard 0 ended after 3 records; its length hint is 5");
    let e = SequentialLoader::builder(shards(&[3]).without_lengths())
        .end(SequentialEnd::Drop)
        .build()
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid configuration: end: Drop needs the length of every shard; shard 0 has no length hint"
    );
}

/// Packing: windows of 4 tokens across records and shards; resume inside a record is exact; the
/// tail is reported.
#[test]
fn packing_cuts_windows_across_records_and_resumes_inside_one() {
    // Shard s, record k holds tokens 100*s + 10*k + t for t < (k + 2).
    let docs: Vec<Vec<Vec<u64>>> = (0..2u64)
        .map(|s| (0..3u64).map(|k| (0..k + 2).map(|t| 100 * s + 10 * k + t).collect()).collect())
        .collect();
    let all_tokens: Vec<u64> = docs.iter().flatten().flatten().copied().collect();
    let loader = |workers| {
        SequentialLoader::builder(VecShards::new(docs.clone()).without_lengths())
            .pack(4)
            .batch_size(2)
            .workers(workers)
            .build()
            .expect("valid")
    };
    let mut it = loader(0).iter();
    let batches = all(&mut it);
    let windows: Vec<Vec<u64>> = batches.iter().flat_map(|b| b.data.clone()).collect();
    assert_eq!(windows.len(), 4); // 18 tokens: 4 windows, 2 left
    assert_eq!(windows.concat(), all_tokens[..16]);
    assert_eq!(batches[0].records[1], RecordId { shard: 0, record: 1, offset: 2 });
    assert_eq!(
        it.take_dropped(),
        [Dropped::Tokens { epoch: 0, record: RecordId { shard: 1, record: 2, offset: 2 } }]
    );
    assert_eq!(all(loader(3).iter()), batches);
    let mut it = loader(0).iter();
    it.next().expect("batch").expect("ok");
    let s = it.state();
    // 8 tokens delivered: records 0 (2 tokens) and 1 (3) of shard 0, and 3 of record 2's 4.
    assert_eq!((s.open[0].pos.record, s.open[0].skip), (2, 3), "inside record 2 of shard 0");
    assert_eq!(all(loader(2).iter_from(&s).expect("fits"))[..], batches[1..]);
}

/// A state that does not fit the loader is a typed error naming the field, never a panic.
#[test]
fn states_that_do_not_fit_are_refused_naming_the_field() {
    let o = Opts { batch: 2, end: SequentialEnd::Drop, ..Opts::s1() };
    let mut it = o.loader(0).iter();
    it.next().expect("batch").expect("ok");
    let good = it.state();
    let field =
        |s: &SequentialState| match o.loader(0).iter_from(s).map(|it| it.collect::<Result<Vec<_>, _>>()) {
            Err(LoaderError::StateMismatch { field, .. }) => field.to_string(),
            Ok(Err(LoaderError::InBatch { source, .. })) => match *source {
                LoaderError::IndexOutOfRange { .. } => "index".into(),
                LoaderError::StateMismatch { field, .. } => field.to_string(),
                other => format!("{other:?}"),
            },
            other => format!("{other:?}"),
        };
    let with = |f: &dyn Fn(&mut SequentialState)| {
        let mut s = good.clone();
        f(&mut s);
        field(&s)
    };
    assert_eq!(with(&|s| s.config ^= 1), "config");
    assert_eq!(with(&|s| s.source ^= 1), "source");
    assert_eq!(with(&|s| s.rank = 1), "rank");
    assert_eq!(with(&|s| s.world_size = 3), "world_size");
    assert_eq!(with(&|s| s.next = 9), "next");
    assert_eq!(with(&|s| s.turn = 2), "turn");
    assert_eq!(with(&|s| s.steps = Some(9)), "steps");
    assert_eq!(with(&|s| s.open.push(s.open[0])), "open");
    assert_eq!(with(&|s| s.open[0].shard = 99), "index");
    assert_eq!(with(&|s| s.open[0].cursor = 5), "open");
    let e = o.loader(0).iter_from(&SequentialState { version: 9, ..good.clone() }).map(|_| ()).unwrap_err();
    assert!(matches!(e, LoaderError::StateVersion { expected: 1, found: 9 }), "{e:?}");
    // Elastic: one state per rank, of one epoch, each shard held once.
    let mut other = o.loader(1).iter();
    other.next().expect("batch").expect("ok");
    let pair = vec![good.clone(), other.state()];
    let elastic = |states: &[SequentialState]| match o.loader_world(0, 3).iter_from_ranks(states) {
        Err(LoaderError::StateMismatch { field, .. }) => field.to_string(),
        other => format!("{:?}", other.map(|_| ())),
    };
    assert_eq!(elastic(&pair[..1]), "world_size");
    assert_eq!(elastic(&[pair[0].clone(), pair[0].clone()]), "world_size");
    assert_eq!(elastic(&[pair[0].clone(), SequentialState { epoch: 1, ..pair[1].clone() }]), "epoch");
    let mut twice = pair.clone();
    twice[1].open[0].shard = 0;
    assert_eq!(elastic(&twice), "open");
    assert_eq!(elastic(&pair), "Ok(())");
}

// ------------------------------------------------------------------ properties

fn opts_strategy() -> impl Strategy<Value = Opts> {
    (
        proptest::collection::vec(0u64..9, 1..7),
        any::<bool>(),
        1u64..5,
        1u64..4,
        prop_oneof![Just(1u64), 2u64..5],
        1u64..4,
        0usize..3,
        proptest::option::of(any::<u64>()),
        1u64..3,
    )
        .prop_map(|(lengths, known, world, cycle, window, batch, end, shuffle, epochs)| {
            let end = match (end, known) {
                (1, true) => SequentialEnd::Drop,
                (2, true) => SequentialEnd::Pad,
                _ => SequentialEnd::Exhaust,
            };
            Opts {
                lengths,
                known,
                world,
                cycle,
                window,
                batch,
                end,
                shuffle,
                epochs,
                workers: 0,
                prefetch: 1,
            }
        })
}

/// Whether the loader of `o` can run (Pad needs records on every rank).
fn runs(o: &Opts) -> bool {
    (0..o.world).all(|r| o.loader(r).iter().collect::<Result<Vec<_>, _>>().is_ok())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Worker invariance: any worker count and prefetch give the inline stream.
    #[test]
    fn sequential_output_does_not_depend_on_workers(o in opts_strategy(), workers in 1usize..6, prefetch in 1usize..6) {
        prop_assume!(runs(&o));
        for rank in 0..o.world {
            let inline = all(o.loader(rank).iter());
            let pooled = all(Opts { workers, prefetch, ..o.clone() }.loader(rank).iter());
            prop_assert_eq!(pooled, inline);
        }
    }

    /// Exact resume: the state after any k batches restores to the uninterrupted suffix.
    #[test]
    fn sequential_resume_yields_the_remainder(o in opts_strategy(), k_pick: usize) {
        prop_assume!(runs(&o));
        for rank in 0..o.world {
            let full = all(o.loader(rank).iter());
            let k = k_pick % (full.len() + 1);
            let mut it = o.loader(rank).iter();
            for _ in 0..k {
                it.next().expect("batch").expect("ok");
            }
            let state = SequentialState::from_json(&it.state().to_json()).expect("parse");
            let rest = all(Opts { workers: 2, prefetch: 2, ..o.clone() }.loader(rank).iter_from(&state).expect("fits"));
            prop_assert_eq!(&rest[..], &full[k..]);
        }
    }

    /// Elastic resume: world W1 for k steps, then world W2: every record of epoch 0 is
    /// delivered (outside padding) or reported dropped, exactly once.
    #[test]
    fn sequential_elastic_resume_loses_and_repeats_nothing(o in opts_strategy(), w2 in 1u64..5, k_pick: usize) {
        let o = Opts { epochs: 1, ..o };
        prop_assume!(runs(&o));
        let fulls: Vec<usize> = (0..o.world).map(|r| all(o.loader(r).iter()).len()).collect();
        // Stop every rank at the same step, before its epoch ends (Exhaust ranks differ).
        let k = k_pick % (fulls.iter().copied().min().unwrap_or(0) + 1);
        let mut got: Vec<SK> = Vec::new();
        let mut states = Vec::new();
        for rank in 0..o.world {
            let mut it = o.loader(rank).iter();
            for _ in 0..k {
                let b = it.next().expect("batch").expect("ok");
                got.extend(real(std::slice::from_ref(&b)));
            }
            let dropped = it.take_dropped();
            prop_assert!(dropped.is_empty() || fulls[rank as usize] == k);
            got.extend(dropped_records(&dropped));
            states.push(it.state());
        }
        for rank in 0..w2 {
            let l = o.loader_world(rank, w2);
            let Ok(mut it) = l.iter_from_ranks(&states) else {
                prop_assert!(false, "the states of one step restore");
                return Ok(());
            };
            let Ok(batches) = (&mut it).collect::<Result<Vec<_>, _>>() else {
                // Pad on a rank that was dealt nothing: refused, as documented.
                prop_assert!(matches!(o.end, SequentialEnd::Pad));
                return Ok(());
            };
            got.extend(real(&batches));
            got.extend(dropped_records(&it.take_dropped()));
        }
        got.sort_unstable();
        let expected: Vec<SK> = o.lengths.iter().enumerate().flat_map(|(s, &n)| (0..n).map(move |k| (s as u64, k))).collect();
        prop_assert_eq!(got, expected);
    }
}

/// Token records for the packing properties: token t of record k of shard s is
/// `s * 1_000_000 + k * 1_000 + t`.
fn token_shards(lengths: &[Vec<u64>]) -> Vec<Vec<Vec<u64>>> {
    lengths
        .iter()
        .enumerate()
        .map(|(s, docs)| {
            docs.iter()
                .enumerate()
                .map(|(k, &n)| (0..n).map(|t| s as u64 * 1_000_000 + k as u64 * 1_000 + t).collect())
                .collect()
        })
        .collect()
}

fn packed(
    docs: &[Vec<Vec<u64>>],
    rank: u64,
    world: u64,
    cycle: u64,
    window: u64,
    seq_len: u64,
    workers: usize,
) -> SequentialLoader<VecShards<Vec<u64>>> {
    SequentialLoader::builder(VecShards::new(docs.to_vec()).without_lengths())
        .shard(rank, world)
        .cycle(cycle)
        .window_shuffle(window)
        .shuffle(3)
        .pack(seq_len)
        .batch_size(2)
        .workers(workers)
        .prefetch(2)
        .build()
        .expect("valid")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Packing: resume after any k batches is exact; world W1 for k steps then W2 delivers
    /// every token once, or reports it in a dropped tail.
    #[test]
    fn packed_resume_and_elastic_keep_every_token(
        lengths in proptest::collection::vec(proptest::collection::vec(0u64..7, 0..5), 1..5),
        w1 in 1u64..4, w2 in 1u64..4, cycle in 1u64..3, window in 1u64..3, seq_len in 1u64..6, k_pick: usize,
    ) {
        let docs = token_shards(&lengths);
        let total: Vec<u64> = docs.iter().flatten().flatten().copied().collect();
        let runs: Vec<_> = (0..w1).map(|r| all(packed(&docs, r, w1, cycle, window, seq_len, 0).iter())).collect();
        let k = k_pick % (runs.iter().map(Vec::len).min().unwrap_or(0) + 1);
        let mut got: Vec<u64> = Vec::new();
        let mut states = Vec::new();
        for rank in 0..w1 {
            let mut it = packed(&docs, rank, w1, cycle, window, seq_len, 0).iter();
            for _ in 0..k {
                got.extend(it.next().expect("batch").expect("ok").data.concat());
            }
            for d in it.take_dropped() {
                let Dropped::Tokens { record, .. } = d else { panic!("unexpected {d:?}") };
                got.extend(&docs[record.shard as usize][record.record as usize][record.offset as usize..]);
            }
            let state = it.state();
            let rest = all(packed(&docs, rank, w1, cycle, window, seq_len, 2).iter_from(&state).expect("fits"));
            prop_assert_eq!(&rest[..], &runs[rank as usize][k..]);
            states.push(state);
        }
        for rank in 0..w2 {
            let mut it = packed(&docs, rank, w2, cycle, window, seq_len, 1).iter_from_ranks(&states).expect("elastic");
            for b in &mut it {
                got.extend(b.expect("ok").data.concat());
            }
            for d in it.take_dropped() {
                let Dropped::Tokens { record, .. } = d else { panic!("unexpected {d:?}") };
                let doc = &docs[record.shard as usize][record.record as usize];
                got.extend(&doc[record.offset as usize..]);
            }
        }
        got.sort_unstable();
        let mut expected = total;
        expected.sort_unstable();
        prop_assert_eq!(got, expected);
    }
}
