//! `read_many` throughput for shuffled windows of 2,048 u16 tokens, batches of 32, from a
//! 256 MiB stream storage in the page cache (pread backend).
//!
//! Run: `cargo bench -p guideloom-storage --bench read_many`.
//! `GUIDELOOM_BENCH_MIB` sets the storage size in MiB (default 256).

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use guideloom_formats::TokenFormat;
use guideloom_storage::{StreamReader, Window};
use rand::seq::SliceRandom;
use rand::SeedableRng;

const SEQ: u64 = 2_048;
const BATCH: usize = 32;

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temp dir");
    let mib = guideloom_testkit::bench_mib(256);
    guideloom_testkit::write_u16_storage(dir.path(), mib, 8);
    let r = StreamReader::open(dir.path(), TokenFormat::<u16>::new()).expect("open");
    let n_windows = r.len() / SEQ;
    let mut order: Vec<u64> = (0..n_windows).collect();
    order.shuffle(&mut rand_chacha::ChaCha8Rng::seed_from_u64(0));
    let mut g = c.benchmark_group("read_many_u16_2048x32");
    g.throughput(Throughput::Bytes(SEQ * 2 * BATCH as u64));
    // What is timed reads the right tokens: the first batch, decoded and raw, equals the
    // tokens the storage was written with (computed from its pattern, not read back).
    let first: Vec<Window> = order[..BATCH].iter().map(|&w| Window::new(w * SEQ, SEQ)).collect();
    let want: Vec<Vec<u16>> =
        first.iter().map(|w| guideloom_testkit::u16_storage_tokens(mib, 8, w.offset, w.len)).collect();
    assert!(r.read_many(&first).expect("read") == want, "read_many returned other tokens");
    let mut raw = Vec::new();
    r.read_many_raw(&first, &mut raw).expect("read");
    let want_raw: Vec<u8> = want.iter().flatten().flat_map(|t| t.to_le_bytes()).collect();
    assert!(raw == want_raw, "read_many_raw returned other bytes");
    let mut next = 0usize;
    let mut batch = move || {
        let b: Vec<Window> =
            (0..BATCH).map(|i| Window::new(order[(next + i) % order.len()] * SEQ, SEQ)).collect();
        next = (next + BATCH) % order.len();
        b
    };
    g.bench_function("decoded", |bch| {
        bch.iter_batched(&mut batch, |b| r.read_many(&b).expect("read"), BatchSize::SmallInput)
    });
    let mut buf = Vec::new();
    g.bench_function("raw", |bch| {
        bch.iter_batched(&mut batch, |b| r.read_many_raw(&b, &mut buf).expect("read"), BatchSize::SmallInput)
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
