//! Property tests: permutation, sharding, resume and worker-invariance laws.

use std::collections::BTreeMap;

use guideloom_loader::{Batch, Loader, LoaderError, Permutation, RangeSource, Sampler, SamplerConfig};
use proptest::prelude::*;
use rand::Rng;

fn collect<T>(it: impl Iterator<Item = Result<Batch<T>, LoaderError>>) -> Vec<Batch<T>> {
    it.collect::<Result<_, _>>().expect("no batch fails")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Every epoch's order is a bijection of [0, n) and `inverse` undoes it.
    #[test]
    fn permutation_is_a_bijection(n in 1u64..3_000, seed: u64, epoch in 0u64..1_000) {
        let p = Permutation::new(n, seed, epoch);
        let mut image: Vec<u64> = (0..n).map(|i| p.apply(i).expect("in range")).collect();
        for (i, &v) in image.iter().enumerate() {
            prop_assert_eq!(p.inverse(v), Some(i as u64));
        }
        image.sort_unstable();
        prop_assert_eq!(image, (0..n).collect::<Vec<_>>());
        prop_assert_eq!(p.apply(n), None);
    }

    /// Consecutive epochs differ, and (s, e + 1) differs from (s + 1, e), for n >= 3 (forced
    /// by sign for n <= 16; for larger n a repeat has probability < 1/17!).
    #[test]
    fn epochs_and_seeds_give_new_orders(n in 3u64..400, seed in 0u64..u64::MAX, epoch in 0u64..1_000) {
        let order = |s, e| {
            let p = Permutation::new(n, s, e);
            (0..n).map(|i| p.apply(i).expect("in range")).collect::<Vec<_>>()
        };
        prop_assert_ne!(order(seed, epoch), order(seed, epoch + 1));
        prop_assert_ne!(order(seed, epoch + 1), order(seed + 1, epoch));
    }

    /// Sharding: over all ranks, each epoch visits every record exactly once outside padding
    /// (drop-remainder off) or at most once (on); every rank has the same number of batches, no
    /// batch is empty, and batches hold B records except the last of an epoch when W = 1.
    #[test]
    fn ranks_partition_each_epoch(
        n in 1u64..300, b in 1u64..20, w in 1u64..5, drop: bool, shuffle: bool, seed: u64,
    ) {
        let cfg = |rank| SamplerConfig {
            seed, shuffle, epochs: Some(2), batch_size: b, drop_remainder: drop, rank, world_size: w,
        };
        // Every generated configuration is valid (fewer records than one global batch with
        // drop-remainder gives no batch, not an error).
        let first = Sampler::new(n, cfg(0)).expect("valid config");
        let per_epoch = first.batches_per_epoch();
        let mut seen: BTreeMap<(u64, u64), u32> = BTreeMap::new();
        for rank in 0..w {
            let s = Sampler::new(n, cfg(rank)).expect("same validity for every rank");
            prop_assert_eq!(s.batches_per_epoch(), per_epoch);
            for k in 0..2 * per_epoch {
                let plan = s.batch(k).expect("exists");
                prop_assert_eq!(plan.epoch, k / per_epoch);
                prop_assert!(!plan.indices.is_empty());
                let last = k % per_epoch == per_epoch - 1;
                if !(w == 1 && !drop && last) {
                    prop_assert_eq!(plan.indices.len() as u64, b);
                }
                for (&i, &pad) in plan.indices.iter().zip(&plan.padding) {
                    if !pad {
                        *seen.entry((plan.epoch, i)).or_default() += 1;
                    }
                }
            }
            prop_assert!(s.batch(2 * per_epoch).is_none());
        }
        prop_assert!(seen.values().all(|&c| c == 1));
        if !drop {
            prop_assert_eq!(seen.len() as u64, 2 * n);
        } else {
            prop_assert_eq!(seen.len() as u64, 2 * per_epoch * b * w);
        }
    }
}

#[allow(clippy::too_many_arguments)] // one knob per sampler and pool setting
fn loader(
    n: i64,
    b: u64,
    w: u64,
    rank: u64,
    drop: bool,
    epochs: u64,
    seed: u64,
    workers: usize,
    prefetch: usize,
) -> Result<Loader<RangeSource, (i64, u32)>, LoaderError> {
    Loader::builder(RangeSource::new(0, n, 1)?)
        .shuffle(seed)
        .epochs(epochs)
        .shard(rank, w)
        .batch_size(b)
        .drop_remainder(drop)
        .workers(workers)
        .prefetch(prefetch)
        .map(|x, ctx| (x, ctx.rng().random::<u32>()))
        .build()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Resume law: the state after any k batches, restored with any worker count and prefetch,
    /// yields exactly the uninterrupted run's batches k..; save(restore(s)) == s.
    #[test]
    fn resume_yields_the_remainder(
        n in 1i64..120, b in 1u64..9, w in 1u64..4, rank_pick: u64, drop: bool, epochs in 1u64..4,
        seed: u64, k_pick: u64, workers in 0usize..4, prefetch in 1usize..5,
    ) {
        let rank = rank_pick % w;
        // Every generated configuration is valid: a refusal is a bug, not a skip.
        let reference = loader(n, b, w, rank, drop, epochs, seed, 0, 1).expect("valid config");
        let full = collect(reference.iter());
        prop_assert_eq!(full.len() as u64, reference.total_batches().expect("finite"));
        prop_assert_eq!(full.len() as u64, reference.len() * epochs);
        let k = k_pick % (full.len() as u64 + 1);
        let mut it = reference.iter();
        for _ in 0..k {
            it.next().expect("batch").expect("ok");
        }
        let state = it.state();
        prop_assert_eq!(state.next_batch, k);
        let other = loader(n, b, w, rank, drop, epochs, seed, workers, prefetch).expect("valid");
        let resumed = other.iter_from(&state).expect("fits");
        prop_assert_eq!(resumed.state(), state);
        let rest = collect(resumed);
        prop_assert_eq!(&rest[..], &full[k as usize..]);
    }

    /// Worker invariance: any worker count and prefetch give the inline run's batches, and
    /// `Loader::batch(k)` equals the k-th batch.
    #[test]
    fn workers_do_not_change_output(
        n in 1i64..150, b in 1u64..12, drop: bool, seed: u64, workers in 1usize..6, prefetch in 1usize..6,
    ) {
        let inline = loader(n, b, 1, 0, drop, 2, seed, 0, 1).expect("valid config");
        let reference = collect(inline.iter());
        let pooled = collect(loader(n, b, 1, 0, drop, 2, seed, workers, prefetch).expect("valid").iter());
        prop_assert_eq!(&pooled, &reference);
        if reference.is_empty() {
            // drop_remainder with n < b: no batch (issue 8), for every worker count.
            prop_assert!(drop && (n as u64) < b && inline.is_empty());
            return Ok(());
        }
        let k = seed % reference.len() as u64;
        prop_assert_eq!(&inline.batch(k).expect("exists").expect("ok"), &reference[k as usize]);
    }
}
