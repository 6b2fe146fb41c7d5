//! Issue 21, item 3: golden orders, draws and fingerprints, as literals.
//!
//! A saved `State` records only the configuration, the source's length and fingerprint and
//! the next batch number: what it resumes onto is recomputed from the permutation, the
//! sampler, the per-record RNG and the fingerprints. Each value below was produced by the
//! build that introduced this file (state version 1). A change that makes any of these
//! tests fail changes what old states resume onto, and therefore requires bumping
//! `STATE_VERSION` (the rule is documented beside it) and recording new values here.

use guideloom_formats::TokenFormat;
use guideloom_loader::{DataSource, Loader, Permutation, RangeSource, RecordRng, StreamWindows};
use guideloom_storage::StreamReader;
use rand::RngCore;

use crate::acceptance::token_storage;

/// `Permutation::new(n, seed, epoch)` at positions `0..` (the whole order up to 20
/// positions), including the small-domain sign rule (n = 5) and two epochs of one seed.
#[test]
fn permutation_orders_are_pinned() {
    let cases: [(u64, u64, u64, &[u64]); 7] = [
        (10, 42, 0, &[0, 5, 3, 1, 7, 6, 9, 4, 8, 2]),
        (10, 42, 1, &[8, 9, 3, 6, 7, 0, 1, 4, 5, 2]),
        (10, 43, 0, &[8, 1, 9, 0, 5, 6, 3, 7, 4, 2]),
        (5, 0, 0, &[0, 1, 3, 4, 2]),
        (5, 0, 1, &[1, 0, 4, 2, 3]),
        (17, 7, 0, &[6, 3, 0, 9, 14, 12, 7, 16, 2, 15, 1, 10, 11, 8, 5, 4, 13]),
        (
            1_000,
            7,
            3,
            &[
                414, 636, 566, 997, 976, 35, 735, 747, 102, 881, 613, 251, 219, 188, 113, 497, 445, 159, 904,
                360,
            ],
        ),
    ];
    let mut checked = 0;
    for (n, seed, epoch, want) in cases {
        let p = Permutation::new(n, seed, epoch);
        let got: Vec<u64> = (0..want.len() as u64).map(|i| p.apply(i).expect("in range")).collect();
        assert_eq!(got, want, "n={n} seed={seed} epoch={epoch}");
        checked += want.len();
    }
    assert_eq!(checked, 77);
}

/// A large domain (n = 1,000,003, a 20-bit half width) at its first, middle and last
/// positions, for two (seed, epoch) pairs.
#[test]
fn large_permutation_positions_are_pinned() {
    let positions = [0u64, 1, 2, 500_000, 999_999, 1_000_002];
    let cases: [(u64, u64, [u64; 6]); 2] = [
        (0, 0, [782_292, 432_879, 106_119, 184_973, 1_918, 40_860]),
        (12_345, 1, [187_471, 888_777, 376_880, 833_867, 401_711, 5_834]),
    ];
    for (seed, epoch, want) in cases {
        let p = Permutation::new(1_000_003, seed, epoch);
        let got = positions.map(|i| p.apply(i).expect("in range"));
        assert_eq!(got, want, "seed={seed} epoch={epoch}");
        for (i, v) in positions.into_iter().zip(want) {
            assert_eq!(p.inverse(v), Some(i));
        }
    }
}

/// The first three `u64` draws of the per-record RNG for two seeds, and for another epoch
/// and another position of the first seed.
#[test]
fn record_rng_first_draws_are_pinned() {
    let cases: [((u64, u64, u64), [u64; 3]); 4] = [
        ((5, 0, 0), [5_750_025_023_606_904_602, 9_194_341_048_231_579_620, 15_844_708_890_028_084_655]),
        ((6, 0, 0), [542_225_783_757_926_320, 12_194_970_486_712_842_512, 4_479_975_404_877_727_221]),
        ((5, 1, 0), [7_364_556_896_149_694_010, 15_912_986_097_292_765_993, 6_373_928_049_261_658_189]),
        ((5, 0, 7), [9_315_834_518_190_637_154, 5_947_426_350_217_433_967, 1_707_975_635_881_891_979]),
    ];
    for ((seed, epoch, position), want) in cases {
        let mut r = RecordRng::new(seed, epoch, position);
        assert_eq!([r.next_u64(), r.next_u64(), r.next_u64()], want, "({seed}, {epoch}, {position})");
    }
}

/// Fingerprints recorded in states: range sources, a small stream storage's manifest (tokens
/// 0..40 in shards of 10, 15 and 15 u16 tokens), and windows of 8 over it.
#[test]
fn fingerprints_are_pinned() {
    let range = |start, stop, step| RangeSource::new(start, stop, step).expect("range").fingerprint();
    assert_eq!(range(0, 1_000, 1), 17_740_113_445_733_716_506);
    assert_eq!(range(0, 10, 1), 18_314_392_600_656_676_199);
    assert_eq!(range(-5, 100, 3), 330_447_842_070_892_829);
    let dir = token_storage();
    let reader = StreamReader::open(dir.path(), TokenFormat::<u16>::new()).expect("open");
    assert_eq!(reader.fingerprint(), 17_745_333_578_130_600_335);
    assert_eq!(reader.manifest().fingerprint(), 17_745_333_578_130_600_335);
    let windows = StreamWindows::open(dir.path(), TokenFormat::<u16>::new(), 8).expect("open");
    assert_eq!(windows.fingerprint(), 7_298_011_508_088_956_509);
}

/// What a loader yields for a fixed configuration: 10 records, shuffle 2024, batches of 4,
/// two epochs; and the two ranks of world size 2 with batches of 3 (the last global batch
/// padded with records of the epoch's start).
#[test]
fn loader_batches_are_pinned() {
    let range = || RangeSource::new(0, 10, 1).expect("range");
    let loader =
        Loader::builder(range()).shuffle(2024).batch_size(4).epochs(2).workers(0).build().expect("valid");
    let got: Vec<Vec<i64>> = loader.iter().map(|b| b.expect("ok").data).collect();
    assert_eq!(
        got,
        [vec![5, 6, 9, 8], vec![0, 7, 2, 3], vec![4, 1], vec![3, 7, 4, 5], vec![0, 2, 9, 8], vec![1, 6]]
    );
    let ranks: Vec<Vec<(Vec<i64>, Vec<bool>)>> = (0..2)
        .map(|rank| {
            let loader = Loader::builder(range())
                .shuffle(2024)
                .batch_size(3)
                .shard(rank, 2)
                .workers(0)
                .build()
                .expect("valid");
            loader.iter().map(|b| b.expect("ok")).map(|b| (b.data, b.padding)).collect()
        })
        .collect();
    let f = false;
    assert_eq!(ranks[0], [(vec![5, 6, 9], vec![f, f, f]), (vec![2, 3, 4], vec![f, f, f])]);
    assert_eq!(ranks[1], [(vec![8, 0, 7], vec![f, f, f]), (vec![1, 5, 6], vec![f, true, true])]);
}
