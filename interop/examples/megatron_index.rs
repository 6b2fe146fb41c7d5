//! Times Megatron's `GPTDataset` index (document, sample and shuffle index) for many samples
//! over a synthetic dataset, and reports the process's peak resident memory.
//!
//! `cargo run --release -p guideloom-interop --example megatron_index -- [samples] [documents] [seq_length]`
//! (defaults 10^8 samples, 10^6 documents, seq_length 2048). Document `i` holds
//! `1 + (i * 7919) % 4000` tokens (about 2000 on average).

use std::time::Instant;

use guideloom_interop::{GptConfig, GptIndex};

fn arg(i: usize, default: u64) -> u64 {
    std::env::args().nth(i).and_then(|a| a.parse().ok()).unwrap_or(default)
}

/// Peak resident set size in KiB (Linux `VmHWM`), or 0 elsewhere.
fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let samples = arg(1, 100_000_000);
    let documents = arg(2, 1_000_000);
    let seq_length = arg(3, 2048);
    let lengths: Vec<u32> = (0..documents).map(|i| 1 + ((i * 7919) % 4000) as u32).collect();
    let tokens: u64 = lengths.iter().map(|&n| u64::from(n)).sum();
    let config = GptConfig::new(seq_length, 1234).split("1,0,0").num_samples(samples);
    let before = peak_rss_kib();
    let t = Instant::now();
    let index = GptIndex::build(&lengths, 0..documents, &config)?;
    let secs = t.elapsed().as_secs_f64();
    println!(
        "samples requested {samples}, documents {documents} ({tokens} tokens), seq_length {seq_length}: \
         epochs {}, separate final epoch {}, document index {} entries, sample index {} entries, \
         shuffle index {} entries; built in {secs:.2} s; peak RSS {:.0} MiB (before {:.0} MiB)",
        index.epochs(),
        index.separate_final_epoch(),
        index.document_index().len(),
        index.sample_index().len(),
        index.shuffle_index().len(),
        peak_rss_kib() as f64 / 1024.0,
        before as f64 / 1024.0,
    );
    Ok(())
}
