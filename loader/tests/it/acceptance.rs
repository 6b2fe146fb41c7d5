//! Acceptance tests of issue 5 (items 1-5 and 7; item 6 is in `failure.rs`).

use std::collections::BTreeSet;

use guideloom_formats::{RawBytesFormat, TokenFormat};
use guideloom_loader::{
    Batch, DataSource, DocumentLoader, Documents, Loader, LoaderError, Permutation, RangeSource, RecordRng,
    StackTokens, State, StreamWindows, VecSource,
};
use guideloom_storage::{DocumentWriter, StreamWriter};
use rand::Rng;

fn collect<T>(it: impl Iterator<Item = Result<Batch<T>, LoaderError>>) -> Vec<Batch<T>> {
    it.collect::<Result<_, _>>().expect("no batch fails")
}

// ---------------------------------------------------------------- 1. permutation law

/// Every listed `n` gives a bijection of `[0, n)` for two seeds and two epochs, and `inverse`
/// undoes `apply`.
#[test]
fn permutation_is_a_bijection_for_listed_sizes() {
    for n in [1u64, 2, 3, (1 << 16) + 1, (1 << 18) + 1, 1_000_003] {
        for (seed, epoch) in [(0, 0), (12_345, 1)] {
            let p = Permutation::new(n, seed, epoch);
            let mut seen = vec![false; n as usize];
            for i in 0..n {
                let v = p.apply(i).expect("in range");
                assert!(!seen[v as usize], "n={n}: {v} hit twice");
                seen[v as usize] = true;
                if i % 997 == 0 {
                    assert_eq!(p.inverse(v), Some(i));
                }
            }
            assert_eq!(p.apply(n), None);
        }
    }
}

fn order(n: u64, seed: u64, epoch: u64) -> Vec<u64> {
    let p = Permutation::new(n, seed, epoch);
    (0..n).map(|i| p.apply(i).expect("in range")).collect()
}

/// First `k` positions of the order of `(seed, epoch)` over `[0, n)`.
fn head(n: u64, seed: u64, epoch: u64, k: u64) -> Vec<u64> {
    let p = Permutation::new(n, seed, epoch);
    (0..k.min(n)).map(|i| p.apply(i).expect("in range")).collect()
}

/// For n >= 3 consecutive epochs give different orders, and (seed s, epoch 1) differs from
/// (seed s + 1, epoch 0), for seeds 0..20 and every listed size from 3 up (orders longer than
/// 4,096 are compared on their first 4,096 positions, which already differ).
#[test]
fn epochs_differ_and_seeds_do_not_alias() {
    for n in [3u64, 4, 5, 8, 16, 17, 100, (1 << 16) + 1, (1 << 18) + 1, 1_000_003] {
        for s in 0..20 {
            assert_ne!(head(n, s, 0, 4_096), head(n, s, 1, 4_096), "n={n} seed={s}: epochs 0 and 1 equal");
            assert_ne!(head(n, s, 1, 4_096), head(n, s + 1, 0, 4_096), "n={n} seed={s}: aliasing");
        }
    }
}

/// Chi-square test of independence-from-uniform of `position -> value` for n = 8 over 4,000
/// seeds (epoch 0): 64 cells of expected count 500, 49 degrees of freedom. p > 0.01 iff the
/// statistic is below 74.919 (the 0.99 quantile of chi-square with 49 degrees of freedom).
#[test]
fn permutation_positions_pass_chi_square_for_n8() {
    const SEEDS: u64 = 4_000;
    let mut counts = [[0u64; 8]; 8];
    for seed in 0..SEEDS {
        for (pos, v) in order(8, seed, 0).into_iter().enumerate() {
            counts[pos][v as usize] += 1;
        }
    }
    let expected = SEEDS as f64 / 8.0;
    let chi2: f64 = counts.iter().flatten().map(|&o| (o as f64 - expected).powi(2) / expected).sum();
    assert!(chi2 < 74.919, "chi-square {chi2:.2} >= 74.919 (p <= 0.01)");
    // Every value lands at exactly one position per seed (a bijection per seed): each column
    // sums to the number of seeds. (Each row does by construction: one value per position.)
    for v in 0..8 {
        assert_eq!(counts.iter().map(|r| r[v]).sum::<u64>(), SEEDS, "value {v}");
    }
}

// ---------------------------------------------------------------- 2. worker invariance

fn vec_loader(
    n: u32,
    batch: u64,
    workers: usize,
    prefetch: usize,
    shuffle: bool,
) -> Loader<VecSource<u32>, (u32, u8)> {
    let b = Loader::builder(VecSource::new((0..n).collect()))
        .batch_size(batch)
        .drop_remainder(false)
        .epochs(2)
        .workers(workers)
        .prefetch(prefetch)
        .map(|x, ctx| (x, ctx.rng().random::<u8>()));
    let b = if shuffle { b.shuffle(99) } else { b };
    b.build().expect("valid config")
}

/// 442 records, batch 256 and 32: workers 0/1/2/3/7 x prefetch 1/4 give identical batch
/// sequences (records, RNG draws, indices, epochs, numbers); ceil(442/B) batches per epoch, the
/// last holding 442 mod B records; unshuffled, batch k of epoch e holds records
/// [k*B, min((k+1)*B, 442)).
#[test]
fn worker_count_and_prefetch_do_not_change_batches() {
    for (batch, per_epoch, last) in [(256u64, 2usize, 186usize), (32, 14, 26)] {
        for shuffle in [false, true] {
            let reference = collect(vec_loader(442, batch, 0, 1, shuffle).iter());
            assert_eq!(reference.len(), 2 * per_epoch);
            for (k, b) in reference.iter().enumerate() {
                let in_epoch = k % per_epoch;
                let expected_len = if in_epoch == per_epoch - 1 { last } else { batch as usize };
                assert_eq!(b.data.len(), expected_len);
                assert_eq!((b.number, b.epoch), (k as u64, (k / per_epoch) as u64));
                assert!(b.padding.iter().all(|&p| !p));
                if !shuffle {
                    let first = in_epoch as u32 * batch as u32;
                    let ids: Vec<u32> = b.data.iter().map(|r| r.0).collect();
                    assert_eq!(ids, (first..first + expected_len as u32).collect::<Vec<_>>());
                }
            }
            for workers in [1, 2, 3, 7] {
                for prefetch in [1, 4] {
                    let got = collect(vec_loader(442, batch, workers, prefetch, shuffle).iter());
                    assert_eq!(got, reference, "B={batch} workers={workers} prefetch={prefetch}");
                }
            }
        }
    }
}

/// 34 records, batch 16: batch sizes [16, 16, 2] for every worker count.
#[test]
fn thirty_four_records_give_16_16_2() {
    for workers in [0, 1, 2, 3, 7] {
        let loader = Loader::builder(RangeSource::new(0, 34, 1).expect("range"))
            .batch_size(16)
            .workers(workers)
            .build()
            .expect("valid");
        assert_eq!(loader.len(), 3);
        let sizes: Vec<usize> = collect(loader.iter()).iter().map(|b| b.data.len()).collect();
        assert_eq!(sizes, [16, 16, 2], "workers={workers}");
    }
}

// ---------------------------------------------------------------- 3. resume

fn resume_loader(workers: usize) -> Loader<RangeSource> {
    Loader::builder(RangeSource::new(0, 1_000, 1).expect("range"))
        .shuffle(2024)
        .batch_size(8)
        .epochs(3)
        .workers(workers)
        .build()
        .expect("valid")
}

/// 1,000 records, shuffle, batch 8, 3 epochs, 4 workers: for every k in 0..=375 the state after
/// k batches, restored into loaders with 1 and 7 workers, yields exactly the uninterrupted
/// run's batches k.. (including k = 0, epoch ends 125 and 250, and the end 375).
#[test]
fn resume_after_every_batch_matches_uninterrupted_run() {
    let full = collect(resume_loader(4).iter());
    assert_eq!(full.len(), 375);
    let mut states = Vec::with_capacity(376);
    let mut it = resume_loader(4).iter();
    states.push(it.state());
    while let Some(b) = it.next() {
        b.expect("ok");
        states.push(it.state());
    }
    for workers in [1, 7] {
        let loader = resume_loader(workers);
        for (k, state) in states.iter().enumerate() {
            assert_eq!(state.next_batch, k as u64);
            let json = state.to_json();
            let restored = State::from_json(&json).expect("parse");
            let rest = collect(loader.iter_from(&restored).expect("state fits"));
            assert_eq!(rest[..], full[k..], "k={k} workers={workers}");
        }
    }
}

/// Save after 30 batches, resume, take 10, save, resume, finish: equals the uninterrupted run;
/// the second state records 40 (absolute) batches; save(restore(s)) == s; the JSON is < 1 KiB
/// and independent of workers/prefetch.
#[test]
fn chained_resume_counts_absolute_batches() {
    let full = collect(resume_loader(4).iter());
    let mut got = Vec::new();
    let mut it = resume_loader(4).iter();
    got.extend((&mut it).take(30).map(|b| b.expect("ok")));
    let s1 = it.state();
    drop(it);
    assert_eq!(s1.next_batch, 30);

    let loader = resume_loader(2);
    let mut it = loader.iter_from(&s1).expect("fits");
    assert_eq!(it.state(), s1, "save(restore(s)) == s");
    got.extend((&mut it).take(10).map(|b| b.expect("ok")));
    let s2 = it.state();
    drop(it);
    assert_eq!(s2.next_batch, 40);

    got.extend(collect(resume_loader(7).iter_from(&s2).expect("fits")));
    assert_eq!(got, full);

    let json = s2.to_json();
    assert!(json.len() < 1024, "{} bytes", json.len());
    let fp = resume_loader(0).source().fingerprint().to_string();
    assert_eq!(
        json,
        r#"{"version":2,"next_batch":40,"global_batch":8,"config":{"seed":2024,"shuffle":true,"epochs":3,"drop_remainder":false},"source":{"records":1000,"fingerprint":FP},"transforms_fingerprint":0}"#
            .replace("FP", &fp)
    );
    assert_eq!(resume_loader(0).iter_from(&s2).expect("fits").state().to_json(), json);
    // The version-1 layout of the same checkpoint still loads, resumes to the same batches on
    // its own topology, and is written back as version 1.
    let v1 = r#"{"version":1,"next_batch":40,"config":{"seed":2024,"shuffle":true,"epochs":3,"batch_size":8,"drop_remainder":false,"rank":0,"world_size":1},"source":{"records":1000,"fingerprint":FP}}"#
        .replace("FP", &fp);
    let old = State::from_json(&v1).expect("a version-1 state parses");
    assert_eq!((old.version, old.next_batch, old.global_batch), (1, 40, 8));
    assert_eq!(old.to_json(), v1);
    assert_eq!(collect(resume_loader(3).iter_from(&old).expect("fits")), full[40..]);
}

/// Restoring into another configuration or source names the field; a state past the end and an
/// unknown version are refused. (A version-2 state does not pin the batch size, only the
/// global batch; a version-1 state still pins its topology.)
#[test]
fn mismatched_state_is_refused_with_the_field() {
    let v2 = resume_loader(0).iter().state();
    let state = State::from_json(&v2.to_json().replace(
        r#""global_batch":8,"config":{"seed":2024,"shuffle":true,"epochs":3,"drop_remainder":false}"#,
        r#""config":{"seed":2024,"shuffle":true,"epochs":3,"batch_size":8,"drop_remainder":false,"rank":0,"world_size":1}"#,
    ))
    .expect("the version-1 layout");
    assert_eq!(state.version, 2, "the layout, not the number, says version 1");
    let state = State { version: 1, ..state };
    let field = |loader: Loader<RangeSource>, state: &State| match loader.iter_from(state) {
        Err(LoaderError::StateMismatch { field, expected, found }) => (field, expected, found),
        other => panic!("unexpected {:?}", other.map(|it| it.state())),
    };
    let other_batch = Loader::builder(RangeSource::new(0, 1_000, 1).expect("range"))
        .shuffle(2024)
        .batch_size(16)
        .epochs(3)
        .build()
        .expect("valid");
    assert_eq!(field(other_batch, &state), ("batch_size", "16".into(), "8".into()));
    let other_data = Loader::builder(RangeSource::new(0, 1_000, 2).expect("range"))
        .shuffle(2024)
        .batch_size(8)
        .epochs(3)
        .build()
        .expect("valid");
    assert_eq!(field(other_data, &state), ("source.records", "500".into(), "1000".into()));
    let mut s = state;
    s.config.seed = 1;
    assert_eq!(field(resume_loader(0), &s), ("seed", "2024".into(), "1".into()));
    let mut s = state;
    s.source.fingerprint ^= 1;
    assert_eq!(field(resume_loader(0), &s).0, "source.fingerprint");
    let mut s = state;
    s.next_batch = 376;
    assert!(matches!(
        resume_loader(0).iter_from(&s),
        Err(LoaderError::StatePastEnd { next_batch: 376, total: 375 })
    ));
    let mut s = v2;
    s.version = 3;
    assert!(matches!(
        resume_loader(0).iter_from(&s),
        Err(LoaderError::StateVersion { expected: 2, found: 3 })
    ));
    let mut s = v2;
    s.transforms_fingerprint = 9;
    assert_eq!(field(resume_loader(0), &s), ("transforms_fingerprint", "0".into(), "9".into()));
}

/// Issue 21, item 2: two storages with the same number of windows that differ in one token
/// have different fingerprints, so a state taken on one is refused on the other, naming
/// `source.fingerprint` with both values; a metadata-only commit keeps the fingerprint (the
/// state still resumes, onto the same batches).
#[test]
fn state_from_other_data_of_the_same_length_is_refused() {
    let write = |dir: &std::path::Path, flip: bool| {
        let mut w = StreamWriter::open(dir, TokenFormat::<u16>::new()).expect("writer");
        let mut tokens: Vec<u32> = (0..40).collect();
        if flip {
            tokens[17] = 1_000;
        }
        w.append(0, &tokens[..25]).expect("append");
        w.append(1, &tokens[25..]).expect("append");
        w.commit().expect("commit");
    };
    let (a, b) = (tempfile::tempdir().expect("temp dir"), tempfile::tempdir().expect("temp dir"));
    write(a.path(), false);
    write(b.path(), true);
    let loader = |dir: &std::path::Path| {
        Loader::builder(StreamWindows::open(dir, TokenFormat::<u16>::new(), 8).expect("open"))
            .shuffle(11)
            .batch_size(2)
            .workers(0)
            .build()
            .expect("valid")
    };
    let (la, lb) = (loader(a.path()), loader(b.path()));
    assert_eq!((la.source().len(), lb.source().len()), (5, 5));
    let (fa, fb) = (la.source().fingerprint(), lb.source().fingerprint());
    assert_ne!(fa, fb);
    let mut it = la.iter();
    it.next().expect("a batch").expect("ok");
    let state = it.state();
    drop(it);
    match lb.iter_from(&state) {
        Err(LoaderError::StateMismatch { field, expected, found }) => {
            assert_eq!((field, expected, found), ("source.fingerprint", fb.to_string(), fa.to_string()))
        }
        other => panic!("expected a fingerprint mismatch, got {:?}", other.map(|it| it.state())),
    }
    let rest = collect(la.iter_from(&state).expect("fits"));
    assert_eq!(rest.len(), 2);
    drop(la);
    let mut w = StreamWriter::open(a.path(), TokenFormat::<u16>::new()).expect("writer");
    w.set_metadata("note", serde_json::json!("metadata only"));
    w.commit().expect("commit");
    drop(w);
    let la = loader(a.path());
    assert_eq!(la.source().fingerprint(), fa);
    assert_eq!(collect(la.iter_from(&state).expect("still fits")), rest);
}

// ---------------------------------------------------------------- 4. sharding

/// 1,000 records sorted by label (10 labels x 100), world 4, seed 3, batch 10: the ranks'
/// record streams are disjoint and cover all records; each rank's first 40 records hold at
/// least 8 labels; every rank yields 25 batches.
#[test]
fn ranks_partition_one_global_shuffle() {
    let mut all = BTreeSet::new();
    for rank in 0..4 {
        let loader = Loader::builder(RangeSource::new(0, 1_000, 1).expect("range"))
            .shuffle(3)
            .shard(rank, 4)
            .batch_size(10)
            .workers(2)
            .build()
            .expect("valid");
        let batches = collect(loader.iter());
        assert_eq!(batches.len(), 25);
        let records: Vec<i64> = batches.iter().flat_map(|b| b.data.clone()).collect();
        assert_eq!(records.len(), 250);
        let labels: BTreeSet<i64> = records[..40].iter().map(|r| r / 100).collect();
        assert!(labels.len() >= 8, "rank {rank}: labels {labels:?}");
        for r in records {
            assert!(all.insert(r), "record {r} on two ranks");
        }
    }
    assert_eq!(all, (0..1_000).collect());
}

/// 5 records, batch 2, world 2, drop-remainder off: rank 0 gets [0,1] [4,0*], rank 1 gets
/// [2,3] [1*,2*] (* = padding); no batch is empty. With drop-remainder on, 1 batch each.
#[test]
fn five_records_two_ranks_pad_the_last_global_batch() {
    let run = |rank, drop| {
        let loader = Loader::builder(RangeSource::new(0, 5, 1).expect("range"))
            .shard(rank, 2)
            .batch_size(2)
            .drop_remainder(drop)
            .workers(1)
            .build()
            .expect("valid");
        collect(loader.iter()).into_iter().map(|b| (b.data, b.padding)).collect::<Vec<_>>()
    };
    assert_eq!(run(0, false), [(vec![0, 1], vec![false, false]), (vec![4, 0], vec![false, true])]);
    assert_eq!(run(1, false), [(vec![2, 3], vec![false, false]), (vec![1, 2], vec![true, true])]);
    assert_eq!(run(0, true), [(vec![0, 1], vec![false, false])]);
    assert_eq!(run(1, true), [(vec![2, 3], vec![false, false])]);
}

// ---------------------------------------------------------------- 5. randomness

/// A map drawing one u64 per record: 8 records x 2 epochs give 16 distinct draws, identical
/// across reruns and across 1 and 4 workers, equal to `RecordRng::new(seed, epoch, position)`
/// at the epoch and position the sampler gives that step (checked against
/// `Sampler::step`, not against what the context reports); the first record's draw is the
/// pinned value of `golden::record_rng_first_draws_are_pinned`, and seed 6 gives other draws
/// for every record.
#[test]
fn per_record_rng_depends_on_seed_epoch_position_only() {
    let loader = |seed, workers| {
        Loader::builder(RangeSource::new(0, 8, 1).expect("range"))
            .shuffle(seed)
            .epochs(2)
            .batch_size(3)
            .workers(workers)
            .map(|x, ctx| (x, ctx.epoch(), ctx.position(), ctx.rng().random::<u64>()))
            .build()
            .expect("valid")
    };
    let draws = |seed, workers| {
        collect(loader(seed, workers).iter()).into_iter().flat_map(|b| b.data).collect::<Vec<_>>()
    };
    let one = draws(5, 1);
    assert_eq!(one.len(), 16);
    assert_eq!(one.iter().map(|d| d.3).collect::<BTreeSet<_>>().len(), 16);
    assert_eq!(draws(5, 1), one);
    assert_eq!(draws(5, 4), one);
    let sampler = loader(5, 0);
    for (j, &(x, epoch, position, value)) in one.iter().enumerate() {
        let step = sampler.sampler().step(j as u64).expect("16 steps");
        assert_eq!((step.epoch, step.position, step.index as i64), (epoch, position, x), "step {j}");
        assert_eq!(RecordRng::new(5, step.epoch, step.position).random::<u64>(), value, "step {j}");
    }
    assert_eq!((one[0].1, one[0].2), (0, 0));
    assert_eq!(one[0].3, 5_750_025_023_606_904_602);
    let six = draws(6, 1);
    assert_eq!(six.len(), 16);
    for (a, b) in one.iter().zip(&six) {
        assert_ne!(a.3, b.3, "seed 5 and seed 6 draw the same at ({}, {})", a.1, a.2);
    }
}

// ---------------------------------------------------------------- 7. storage sources

/// Tokens 0..40 in three shards of 10, 15 and 15 tokens.
pub(crate) fn token_storage() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut w = StreamWriter::open(dir.path(), TokenFormat::<u16>::new()).expect("writer");
    w.append(0, &(0..10u32).collect::<Vec<_>>()).expect("append");
    w.append(1, &(10..25u32).collect::<Vec<_>>()).expect("append");
    w.append(2, &(25..40u32).collect::<Vec<_>>()).expect("append");
    w.commit().expect("commit");
    dir
}

/// Windows of 8 over 40 tokens: 5 windows; window 1 ([8, 16)) crosses the shard 0/1 boundary
/// and holds 8..16 in order; batches of 2 collate to [2, 8] buffers (and [1, 8] last); stride 3
/// gives floor((40-8)/3)+1 = 11 windows; seq_len 41 gives none.
#[test]
fn windows_cross_shards_and_collate_to_one_buffer() {
    let dir = token_storage();
    let windows = StreamWindows::open(dir.path(), TokenFormat::<u16>::new(), 8).expect("open");
    assert_eq!(windows.len(), 5);
    assert_eq!(windows.get(1).expect("read"), (8..16).collect::<Vec<u16>>());
    assert_eq!(windows.get(3).expect("read"), (24..32).collect::<Vec<u16>>());
    assert!(matches!(windows.get(5), Err(LoaderError::IndexOutOfRange { index: 5, len: 5 })));

    for workers in [0, 2] {
        let loader =
            Loader::builder(StreamWindows::open(dir.path(), TokenFormat::<u16>::new(), 8).expect("open"))
                .batch_size(2)
                .collate(StackTokens)
                .workers(workers)
                .build()
                .expect("valid");
        let batches = collect(loader.iter());
        let shapes: Vec<[usize; 2]> = batches.iter().map(|b| b.data.shape()).collect();
        assert_eq!(shapes, [[2, 8], [2, 8], [1, 8]]);
        assert_eq!(batches[0].data.data(), (0..16).collect::<Vec<u16>>());
        assert_eq!(batches[1].data.data(), (16..32).collect::<Vec<u16>>());
        assert_eq!(batches[2].data.data(), (32..40).collect::<Vec<u16>>());
    }

    let reader = guideloom_storage::StreamReader::open(dir.path(), TokenFormat::<u16>::new()).expect("open");
    let strided = StreamWindows::with_stride(reader, 8, 3).expect("valid");
    assert_eq!(strided.len(), 11);
    assert_eq!(strided.get(10).expect("read"), (30..38).collect::<Vec<u16>>());
    let none = StreamWindows::open(dir.path(), TokenFormat::<u16>::new(), 41).expect("open");
    assert_eq!(none.len(), 0);
    assert_ne!(strided.fingerprint(), windows.fingerprint());
}

/// Documents of a document storage, shuffled, arrive whole and each exactly once.
#[test]
fn documents_are_records() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut w = DocumentWriter::open(dir.path(), RawBytesFormat).expect("writer");
    for i in 0..7u8 {
        w.append(u64::from(i % 2), &vec![i; usize::from(i) + 1]).expect("append");
    }
    w.commit().expect("commit");
    let docs = Documents::open(dir.path(), RawBytesFormat).expect("open");
    assert_eq!(docs.len(), 7);
    let loader: DocumentLoader<RawBytesFormat> =
        Loader::builder(docs).shuffle(1).batch_size(3).workers(2).build().expect("valid");
    let mut got: Vec<Vec<u8>> = collect(loader.iter()).into_iter().flat_map(|b| b.data).collect();
    got.sort();
    // The documents written: document i is i + 1 bytes of value i.
    let want: Vec<Vec<u8>> = (0..7u8).map(|i| vec![i; usize::from(i) + 1]).collect();
    assert_eq!(got, want);
    // Index order is shard order: shard 0 holds documents 0, 2, 4, 6; shard 1 holds 1, 3, 5.
    let by_index: Vec<Vec<u8>> = (0..7).map(|i| loader.source().get(i).expect("read")).collect();
    let order = [0u8, 2, 4, 6, 1, 3, 5];
    assert_eq!(by_index, order.map(|i| vec![i; usize::from(i) + 1]));
    assert!(matches!(loader.source().get(7), Err(LoaderError::IndexOutOfRange { index: 7, len: 7 })));
}
