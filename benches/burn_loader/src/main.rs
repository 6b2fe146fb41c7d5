//! burn peer: `DataLoaderBuilder` (shuffle, batch 32, `num_workers`) over a `Dataset` whose
//! item `i` is the window `[i*L, (i+1)*L)` of a raw little-endian token file, mapped with mmap.
//! The batcher stacks the windows into one row-major buffer (the same output as guideloom's
//! `StackTokens`); the consumer sums every token id (the checksum).
//!
//! Usage: burn_loader BIN u16|u32 SEQ_LEN BATCH WORKERS MAX_BATCHES(0 = one epoch) SEED
//!        burn_loader cpu-map RECORDS ROUNDS BATCH WORKERS SEED (a CPU-heavy `get`, see `work`)
use std::sync::Arc;
use std::time::Instant;

use burn_core::data::dataloader::batcher::Batcher;
use burn_core::data::dataloader::DataLoaderBuilder;
use burn_core::data::dataset::{Dataset, DatasetError};

struct Windows<T> {
    map: Arc<memmap2::Mmap>,
    seq: usize,
    n: usize,
    _t: std::marker::PhantomData<T>,
}

trait Tok: Copy + Send + Sync + std::fmt::Debug + Default + Into<u64> + 'static {
    const SIZE: usize;
}
impl Tok for u16 {
    const SIZE: usize = 2;
}
impl Tok for u32 {
    const SIZE: usize = 4;
}

impl<T: Tok> Dataset<Vec<T>> for Windows<T> {
    fn get(&self, index: usize) -> Result<Vec<T>, DatasetError> {
        assert!(index < self.n, "window {index} out of range");
        let start = index * self.seq * T::SIZE;
        let bytes = &self.map[start..start + self.seq * T::SIZE];
        let mut v = vec![T::default(); self.seq];
        // SAFETY: v holds seq elements of a plain integer type; bytes has seq*SIZE bytes; the
        // host is little-endian (x86_64), so a byte copy is the decode.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), v.as_mut_ptr() as *mut u8, bytes.len()) };
        Ok(v)
    }
    fn len(&self) -> usize {
        self.n
    }
}

#[derive(Clone, Debug)]
struct Stack;

#[derive(Clone, Debug)]
struct TokenBatch<T> {
    data: Vec<T>,
    rows: usize,
}

impl<T: Tok> Batcher<Vec<T>, TokenBatch<T>> for Stack {
    fn batch(&self, items: Vec<Vec<T>>, _device: &burn_core::tensor::Device) -> TokenBatch<T> {
        let rows = items.len();
        let mut data = Vec::with_capacity(rows * items.first().map_or(0, Vec::len));
        for it in &items {
            data.extend_from_slice(it);
        }
        TokenBatch { data, rows }
    }
}

fn run<T: Tok>(path: &str, seq: usize, batch: usize, workers: usize, max_batches: usize, seed: u64) {
    let t0 = Instant::now();
    let file = std::fs::File::open(path).expect("open bin");
    // SAFETY: the benchmark's data file is not modified while mapped.
    let map = Arc::new(unsafe { memmap2::Mmap::map(&file) }.expect("mmap"));
    let n = map.len() / T::SIZE / seq;
    let ds = Windows::<T> { map, seq, n, _t: std::marker::PhantomData };
    let loader = DataLoaderBuilder::new(Stack).batch_size(batch).shuffle(seed).num_workers(workers).build(ds);
    let mut first = None;
    let (mut batches, mut windows, mut checksum) = (0usize, 0usize, 0u64);
    for b in loader.iter() {
        let b: TokenBatch<T> = b.expect("batch");
        checksum = checksum.wrapping_add(b.data.iter().map(|&t| Into::<u64>::into(t)).sum::<u64>());
        first.get_or_insert_with(|| t0.elapsed().as_secs_f64());
        batches += 1;
        windows += b.rows;
        if max_batches > 0 && batches >= max_batches {
            break;
        }
    }
    let seconds = t0.elapsed().as_secs_f64();
    println!(
        "{}",
        serde_json::json!({"batches": batches, "windows": windows, "tokens": windows * seq, "seconds": seconds,
            "first_batch_s": first.unwrap_or(seconds), "checksum": checksum.to_string(), "epoch_windows": n})
    );
    std::process::exit(0); // do not wait for burn's workers to drain the rest of the epoch
}

/// A fixed amount of real CPU work for record `i`: `rounds` steps of a dependent integer hash
/// chain (the same function as `benches/native cpu-map`; ~20 µs at 12,000 rounds here).
fn work(i: u64, rounds: u64) -> u64 {
    let mut h = i ^ 0x9e37_79b9_7f4a_7c15;
    for _ in 0..rounds {
        h = h.wrapping_mul(0x0100_0000_01b3) ^ (h >> 29);
    }
    h
}

struct CpuRecords {
    n: usize,
    rounds: u64,
}

impl Dataset<u64> for CpuRecords {
    fn get(&self, index: usize) -> Result<u64, DatasetError> {
        Ok(work(index as u64, self.rounds))
    }
    fn len(&self) -> usize {
        self.n
    }
}

#[derive(Clone, Debug)]
struct Collect;

impl Batcher<u64, Vec<u64>> for Collect {
    fn batch(&self, items: Vec<u64>, _device: &burn_core::tensor::Device) -> Vec<u64> {
        items
    }
}

/// `burn_loader cpu-map RECORDS ROUNDS BATCH WORKERS SEED`: records whose `get` costs
/// `work(i, ROUNDS)`, shuffled, batched; the consumer sums the results.
fn cpu_map(n: usize, rounds: u64, batch: usize, workers: usize, seed: u64) {
    let t0 = Instant::now();
    let loader = DataLoaderBuilder::new(Collect)
        .batch_size(batch)
        .shuffle(seed)
        .num_workers(workers)
        .build(CpuRecords { n, rounds });
    let mut first = None;
    let (mut batches, mut records, mut checksum) = (0usize, 0usize, 0u64);
    for b in loader.iter() {
        let b: Vec<u64> = b.expect("batch");
        checksum = b.iter().fold(checksum, |a, &x| a.wrapping_add(x));
        first.get_or_insert_with(|| t0.elapsed().as_secs_f64());
        batches += 1;
        records += b.len();
    }
    let seconds = t0.elapsed().as_secs_f64();
    println!(
        "{}",
        serde_json::json!({"batches": batches, "windows": records, "seconds": seconds,
            "first_batch_s": first.unwrap_or(seconds), "checksum": checksum.to_string(), "epoch_windows": n})
    );
    std::process::exit(0);
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    if a.get(1).map(String::as_str) == Some("cpu-map") && a.len() == 7 {
        let p = |i: usize| a[i].parse::<usize>().expect("number");
        return cpu_map(p(2), p(3) as u64, p(4), p(5), p(6) as u64);
    }
    if a.len() != 8 {
        eprintln!("usage: burn_loader BIN u16|u32 SEQ_LEN BATCH WORKERS MAX_BATCHES SEED");
        std::process::exit(2);
    }
    let p = |i: usize| a[i].parse::<usize>().expect("number");
    let (seq, batch, workers, maxb) = (p(3), p(4), p(5), p(6));
    let seed = a[7].parse().expect("seed");
    match a[2].as_str() {
        "u16" => run::<u16>(&a[1], seq, batch, workers, maxb, seed),
        "u32" => run::<u32>(&a[1], seq, batch, workers, maxb, seed),
        d => panic!("dtype {d}"),
    }
}
