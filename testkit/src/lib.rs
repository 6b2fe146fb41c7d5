//! Fixtures shared by guideloom's tests and benchmarks, so no crate keeps its own copy: the
//! bundled data sets' paths and the synthetic token storage the read benchmarks use.
//!
//! A dev-dependency only; it is not published and panics on failure (it serves tests).

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};

use guideloom_formats::TokenFormat;
use guideloom_storage::StreamWriter;

/// The repository's root (the workspace directory).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A file of the bundled NASA Exoplanet Archive sample (`data/exoplanets/NAME`):
/// `planets.npz` (OAMap's npz layout, 2,660 stars) or `planets.json.gz` (the same as JSON).
pub fn exoplanets(name: &str) -> PathBuf {
    repo_root().join("data/exoplanets").join(name)
}

/// The size in MiB a benchmark works on: the environment variable `GUIDELOOM_BENCH_MIB` when
/// it holds a number, else `default`.
pub fn bench_mib(default: u64) -> u64 {
    std::env::var("GUIDELOOM_BENCH_MIB").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Writes the read benchmarks' storage into `dir`: `mib` MiB of `u16` tokens (`mib * 2^19`
/// tokens) in `shards` equal shards, each token a multiplicative hash of its position in a
/// repeating 2^20-token pattern (so windows differ and checksums catch misplaced bytes).
///
/// # Panics
/// When the storage cannot be written (a fixture for tests and benchmarks).
pub fn write_u16_storage(dir: &Path, mib: u64, shards: u64) {
    let tokens = mib << 19;
    let mut w = StreamWriter::open(dir, TokenFormat::<u16>::new()).expect("writer");
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
}

/// The bytes of the exoplanets sample in OAMap's npz layout (`data/exoplanets/planets.npz`).
///
/// # Panics
/// When the file cannot be read.
pub fn planets_npz() -> Vec<u8> {
    std::fs::read(exoplanets("planets.npz")).expect("data/exoplanets/planets.npz")
}

/// The exoplanets sample's stars as JSON values (`data/exoplanets/planets.json.gz`, 2,660
/// stars with 3,572 planets among them), in file order.
///
/// # Panics
/// When the file cannot be read or is not a JSON list.
pub fn stars_json() -> Vec<serde_json::Value> {
    use std::io::Read;
    let file = std::fs::File::open(exoplanets("planets.json.gz")).expect("data/exoplanets/planets.json.gz");
    let mut text = String::new();
    flate2::read::GzDecoder::new(file).read_to_string(&mut text).expect("gzip");
    match serde_json::from_str(&text).expect("JSON") {
        serde_json::Value::Array(stars) => stars,
        other => panic!("planets.json.gz holds {other}, not a list"),
    }
}
