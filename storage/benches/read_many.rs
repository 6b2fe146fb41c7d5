//! `read_many` throughput for shuffled windows of 2,048 u16 tokens, batches of 32, from a
//! 256 MiB stream storage in the page cache (pread backend).
//!
//! Run: `cargo bench -p guideloom-storage --bench read_many`.
//! `GUIDELOOM_BENCH_MIB` sets the storage size in MiB (default 256).

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use guideloom_formats::TokenFormat;
use guideloom_storage::{StreamReader, StreamWriter, Window};
use rand::seq::SliceRandom;
use rand::SeedableRng;

const SEQ: u64 = 2_048;
const BATCH: usize = 32;

fn bench(c: &mut Criterion) {
    let mib: u64 = std::env::var("GUIDELOOM_BENCH_MIB").ok().and_then(|v| v.parse().ok()).unwrap_or(256);
    let dir = tempfile::tempdir().expect("temp dir");
    let tokens = mib << 19; // u16 tokens
    let mut w = StreamWriter::open(dir.path(), TokenFormat::<u16>::new()).expect("writer");
    let shards = 8u64;
    let chunk: Vec<u32> = (0..1u32 << 20).map(|i| i.wrapping_mul(2_654_435_761) >> 16).collect();
    for s in 0..shards {
        let mut left = tokens / shards;
        while left > 0 {
            let n = left.min(chunk.len() as u64) as usize;
            w.append(s, &chunk[..n]).expect("append");
            left -= n as u64;
        }
    }
    w.commit().expect("commit");
    let r = StreamReader::open(dir.path(), TokenFormat::<u16>::new()).expect("open");
    let n_windows = r.len() / SEQ;
    let mut order: Vec<u64> = (0..n_windows).collect();
    order.shuffle(&mut rand_chacha::ChaCha8Rng::seed_from_u64(0));
    let mut g = c.benchmark_group("read_many_u16_2048x32");
    g.throughput(Throughput::Bytes(SEQ * 2 * BATCH as u64));
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
