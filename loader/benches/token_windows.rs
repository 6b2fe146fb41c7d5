//! The token-window fast path's hot paths, so that a regression shows up in review: shuffled
//! windows of 2,049 u16 tokens, batch 32, from a stream storage in the page cache (8 shards,
//! `GUIDELOOM_BENCH_MIB` MiB, default 64).
//!
//! Run: `cargo bench -p guideloom-loader --bench token_windows`.
//!
//! - `collate/copy`: `TokenWindowCollate::collate` of one batch (one backend call into a
//!   recycled `[32, 2049]` buffer), the batch dropped after each call (its buffer returns to
//!   the pool);
//! - `collate/zero-copy`: `MappedWindowCollate::collate` of the same batch (views into the
//!   mapped shards, no copy) and a sum of its bytes;
//! - `loader/workers=W`: `it.next()` of an unbounded shuffled loader over `TokenWindows` with
//!   its own collation, the consumer summing every token (the `guideloom bench` consumer);
//! - `plan/shards=S`: shard resolution alone, `StreamReader::plan` of one batch of 32 shuffled
//!   windows (which shard and byte range each window reads; no I/O) over a storage of the same
//!   tokens in S shards, for S = 8 and 1,000 (the lookup is a binary search over shard starts).

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use guideloom_formats::TokenFormat;
use guideloom_loader::{Collate, DataSource, Loader, TokenWindows, WindowSpan};
use guideloom_storage::{MmapBackend, ReadOptions, StreamReader, Window};

const SEQ: u64 = 2_049;
const BATCH: u64 = 32;

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temp dir");
    let mib = guideloom_testkit::bench_mib(64);
    guideloom_testkit::write_u16_storage(dir.path(), mib, 8);
    let open = || TokenWindows::<u16>::open_with(dir.path(), SEQ, SEQ, ReadOptions::default()).expect("open");

    let mut g = c.benchmark_group("token_windows_u16_2049x32");
    g.throughput(Throughput::Elements(BATCH));
    g.sample_size(30).measurement_time(Duration::from_secs(4)).warm_up_time(Duration::from_secs(1));

    let source = open();
    let n = source.len();
    // A fixed spread-out batch of windows.
    let spans: Vec<WindowSpan> = (0..BATCH).map(|k| source.get((k * 7_919) % n).expect("in range")).collect();
    let copy = source.collate();
    let want: u64 = copy.collate(spans.clone()).expect("read").data().iter().map(|&t| u64::from(t)).sum();
    g.bench_function("collate/copy", |b| b.iter(|| copy.collate(spans.clone()).expect("read").data().len()));
    // SAFETY: the benchmark's temporary storage is written before this point and never
    // truncated or rewritten while mapped.
    let mapped = source.mapped_collate(unsafe { MmapBackend::new() });
    let sum = |spans: Vec<WindowSpan>| -> u64 {
        let views = mapped.collate(spans).expect("map");
        views
            .parts()
            .map(|p| p.chunks_exact(2).map(|c| u64::from(u16::from_le_bytes([c[0], c[1]]))).sum::<u64>())
            .sum()
    };
    assert_eq!(sum(spans.clone()), want, "the views hold other tokens than the copy");
    g.bench_function("collate/zero-copy", |b| b.iter(|| sum(spans.clone())));

    for workers in [0usize, 2] {
        let source = open();
        let collate = source.collate();
        let loader = Loader::builder(source)
            .shuffle(1)
            .unbounded()
            .batch_size(BATCH)
            .workers(workers)
            .collate(collate)
            .build()
            .expect("valid");
        let mut it = loader.iter();
        g.bench_function(format!("loader/workers={workers}"), |b| {
            b.iter(|| {
                let batch = it.next().expect("unbounded").expect("read");
                batch.data.data().iter().map(|&t| u64::from(t)).sum::<u64>()
            })
        });
    }

    for shards in [8u64, 1_000] {
        let dir = tempfile::tempdir().expect("temp dir");
        guideloom_testkit::write_u16_storage(dir.path(), mib, shards);
        let r = StreamReader::open(dir.path(), TokenFormat::<u16>::new()).expect("open");
        let n = r.len() / SEQ;
        let windows: Vec<Window> = (0..BATCH).map(|k| Window::new(((k * 7_919) % n) * SEQ, SEQ)).collect();
        // The plan covers exactly the batch's bytes.
        let plan = r.plan(&windows).expect("plan");
        assert_eq!(
            (plan.bytes(), plan.len() as u64),
            (BATCH * SEQ * 2, BATCH),
            "the plan reads other bytes than the batch's"
        );
        g.bench_function(format!("plan/shards={shards}"), |b| b.iter(|| r.plan(&windows).expect("plan")));
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
