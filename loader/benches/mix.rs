//! The cost of [`Mix`] per record (issue 16): random-access reads of a three-source mixture
//! (weights 0.5 / 0.3 / 0.2 of `RangeSource`s of 10^6 records each) against the same reads of
//! one bare `RangeSource`, so the difference is the schedule (`MixPlan::locate`) and the
//! per-source dispatch.
//!
//! Run: `cargo bench -p guideloom-loader --bench mix`.
//!
//! - `bare/get_many`: batches of 256 positions of a shuffled order read from one source;
//! - `mix=<schedule>,<stop>/get_many`: the same positions read from the mixture (greedy:
//!   Megatron's minimum-error rule from checkpoints of per-source counts; proportional: the
//!   closed form), first-exhausted and budget (sources wrap into re-permuted epochs).
//! - `mix=<schedule>/locate`: `MixPlan::locate` alone, one position at a time.
//!
//! Figures and the machine: docs/BENCHMARKS.md, "Mixing".

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use guideloom_loader::mix::{Mix, MixConfig, MixSchedule, MixStop};
use guideloom_loader::{DataSource, Permutation, RangeSource};

const N: u64 = 1_000_000;
const BATCH: u64 = 256;

fn bench(c: &mut Criterion) {
    let sources = || (0..3).map(|i| RangeSource::new(i * N as i64, (i + 1) * N as i64, 1).unwrap()).collect();
    let mut g = c.benchmark_group("mix");
    g.throughput(Throughput::Elements(BATCH));
    g.sample_size(30).measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    let bare = RangeSource::new(0, N as i64, 1).unwrap();
    // Positions of a shuffled order, batch by batch (the same for every variant).
    let order = Permutation::new(N, 7, 0);
    let mut batch = 0u64;
    let mut next_positions = |len: u64| {
        let start = (batch * BATCH) % (len - BATCH);
        batch += 1;
        (start..start + BATCH).map(|p| order.apply(p % N).unwrap() % len).collect::<Vec<u64>>()
    };
    g.bench_function("bare/get_many", |b| {
        b.iter(|| bare.get_many(&next_positions(N)).unwrap());
    });
    for schedule in [MixSchedule::Greedy, MixSchedule::Proportional] {
        for (stop, name) in [(MixStop::FirstExhausted, "first-exhausted"), (MixStop::Budget(4 * N), "budget")]
        {
            let cfg =
                MixConfig::new(&[0.5, 0.3, 0.2]).unwrap().schedule(schedule).stop(stop).shuffle_sources(3);
            let mix = Mix::new(sources(), cfg).unwrap();
            let len = mix.len();
            g.bench_function(format!("mix={schedule:?},{name}/get_many"), |b| {
                b.iter(|| mix.get_many(&next_positions(len)).unwrap());
            });
        }
        let plan = MixConfig::new(&[0.5, 0.3, 0.2]).unwrap().schedule(schedule).plan(&[N, N, N]).unwrap();
        let len = plan.len();
        g.bench_function(format!("mix={schedule:?}/locate"), |b| {
            b.iter(|| {
                let mut acc = 0u64;
                for p in next_positions(len) {
                    acc = acc.wrapping_add(plan.locate(p).unwrap().record);
                }
                acc
            });
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
