//! Fixtures shared by guideloom's tests and benchmarks, so no crate keeps its own copy: the
//! bundled data sets' paths, the synthetic token storage the read benchmarks use (and the
//! tokens it holds, for their checks), the I/O backends every read test runs over
//! ([`backends::read_backends`]) and the rule for those a host lacks
//! ([`REQUIRE_BACKENDS_ENV`]), and the counting allocator of the hostile-input tests
//! ([`hostile`]).
//!
//! A dev-dependency only; it is not published and panics on failure (it serves tests).
//! `unsafe` appears only where a test fixture needs it (the mmap backends under the tests'
//! contract, the allocator), each block with its `// SAFETY:`.

#![deny(unsafe_code)]

use std::path::{Path, PathBuf};

use guideloom_formats::TokenFormat;
use guideloom_storage::StreamWriter;

pub mod backends;
pub mod hostile;
pub mod race;
pub mod s3;

/// Every file below `root` (directories walked), as (its path relative to `root`, its
/// bytes), in no particular order: what a test uploads to an object-store prefix.
///
/// # Panics
/// When the tree cannot be read or a name is not UTF-8 (a test fixture).
pub fn files_below(root: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(root).unwrap().to_str().unwrap().to_string();
                out.push((rel, std::fs::read(&p).unwrap()));
            }
        }
    }
    out
}

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
    let chunk: Vec<u32> = (0..1u32 << 20).map(u16_pattern).collect();
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

/// Token `i` of the repeating pattern [`write_u16_storage`] fills shards with.
fn u16_pattern(i: u32) -> u32 {
    i.wrapping_mul(2_654_435_761) >> 16
}

/// The tokens `[start, start + len)` of the stream [`write_u16_storage`] writes with `mib`
/// and `shards`, computed from the pattern without reading the storage (what a benchmark
/// compares a read with before it times it).
pub fn u16_storage_tokens(mib: u64, shards: u64, start: u64, len: u64) -> Vec<u16> {
    let per_shard = (mib << 19) / shards;
    (start..start + len)
        .map(|p| {
            let q = p % per_shard;
            u16_pattern((q % (1 << 20)) as u32) as u16
        })
        .collect()
}

/// The environment variable that turns a missing I/O backend (or test tool) from an explicit
/// skip into a test failure: a comma-separated list of `io_uring`, `direct` (`O_DIRECT`),
/// `strace` (the syscall-order test of local commits) and `evict` (`posix_fadvise(DONTNEED)`
/// dropping a file's pages, which the hybrid backend's host test needs), or `all`. CI
/// (`.ci/run`) sets it, so a runner that lost one fails instead of passing with less checked;
/// unset (a developer's machine, a sandbox that blocks io_uring or ptrace), tests skip what is
/// missing and say so ([`skipped`]).
pub const REQUIRE_BACKENDS_ENV: &str = "GUIDELOOM_REQUIRE_BACKENDS";

/// The names [`REQUIRE_BACKENDS_ENV`] accepts.
pub const REQUIRABLE_BACKENDS: [&str; 4] = ["io_uring", "direct", "strace", "evict"];

/// The backends [`REQUIRE_BACKENDS_ENV`] requires (names of [`REQUIRABLE_BACKENDS`]).
///
/// # Panics
/// When the variable names something else (a typo must not silently require nothing).
pub fn required_backends() -> Vec<&'static str> {
    let Ok(value) = std::env::var(REQUIRE_BACKENDS_ENV) else { return Vec::new() };
    let mut out = Vec::new();
    for name in value.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        if name == "all" {
            out.extend(REQUIRABLE_BACKENDS);
            continue;
        }
        match REQUIRABLE_BACKENDS.iter().find(|b| b.eq_ignore_ascii_case(name)) {
            Some(b) => out.push(*b),
            None => panic!(
                "{REQUIRE_BACKENDS_ENV}={value}: unknown backend {name:?}; expected io_uring, direct, strace, evict or all"
            ),
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// Whether [`REQUIRE_BACKENDS_ENV`] requires `backend` (one of [`REQUIRABLE_BACKENDS`]).
///
/// # Panics
/// As [`required_backends`], and when `backend` is not one of [`REQUIRABLE_BACKENDS`] (a
/// name the variable cannot require would make its skip impossible to turn into a failure).
pub fn backend_required(backend: &str) -> bool {
    assert!(
        REQUIRABLE_BACKENDS.contains(&backend),
        "{backend:?} is not a backend {REQUIRE_BACKENDS_ENV} can require ({REQUIRABLE_BACKENDS:?})"
    );
    required_backends().contains(&backend)
}

/// The start of every skip line [`skipped`] prints: `SKIPPED: ` (what CI's skip count,
/// `.ci/check-skips.py`, looks for at the start of a line of the test output).
pub const SKIP_MARK: &str = "SKIPPED: ";

/// The line [`skipped`] prints for `what` and `reason`: `SKIPPED: <what>: <reason>` (one
/// line: line breaks in the reason become spaces).
pub fn skip_line(what: &str, reason: &str) -> String {
    let one_line = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    format!("{SKIP_MARK}{}: {}", one_line(what), one_line(reason))
}

/// Reports that a test (or the part `what` of one) did not run, and why, as one line
/// [`skip_line`] on the process's standard error, written past libtest's output capture (the
/// capture takes only `print!`/`eprint!`), so the line shows in `cargo test`'s output even
/// when the test passes. CI counts these lines (`.ci/check-skips.py`): any skip not listed in
/// `.ci/allowed-skips.txt` fails the run.
pub fn skipped(what: &str, reason: &str) {
    use std::io::Write;
    let line = skip_line(what, reason) + "\n";
    // Standard error is unbuffered; a failed write has nowhere to be reported.
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// What a test does with a backend it cannot run: fails (panics naming `backend` and
/// `reason`) when [`REQUIRE_BACKENDS_ENV`] requires it, else reports the skip ([`skipped`]:
/// `SKIPPED: <what>: <reason> (set GUIDELOOM_REQUIRE_BACKENDS=<backend> to make this a
/// failure)`) and returns, so the caller leaves it out.
///
/// # Panics
/// When the run requires `backend`, or `backend` is not one of [`REQUIRABLE_BACKENDS`].
pub fn skip_backend(backend: &str, what: &str, reason: &str) {
    if backend_required(backend) {
        panic!("{what}: backend {backend} is required ({REQUIRE_BACKENDS_ENV}) but unavailable: {reason}");
    }
    skipped(what, &format!("{reason} (set {REQUIRE_BACKENDS_ENV}={backend} to make this a failure)"));
}

/// Whether `O_DIRECT` opens succeed in `dir` (tmpfs refused them before Linux 6.6); `Err`
/// with the reason when they do not.
pub fn direct_io_works_in(dir: &Path) -> Result<(), String> {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::OpenOptionsExt;
        let probe = dir.join(format!(".guideloom-direct-probe-{}", std::process::id()));
        std::fs::write(&probe, [0u8; 4096]).map_err(|e| format!("cannot write {}: {e}", probe.display()))?;
        let opened = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(&probe);
        let _ = std::fs::remove_file(&probe);
        opened.map(drop).map_err(|e| format!("{} refuses O_DIRECT: {e}", dir.display()))
    }
    #[cfg(not(target_os = "linux"))]
    {
        Err(format!("O_DIRECT is Linux-only ({} not checked)", dir.display()))
    }
}

#[cfg(test)]
mod tests {
    /// Issue 33: a skip is one line that starts with the mark CI counts, its reason on the
    /// same line.
    #[test]
    fn issue33_a_skip_is_one_greppable_line() {
        assert_eq!(
            super::skip_line("the hybrid routing test", "pages of\n  /tmp/x stayed cached"),
            "SKIPPED: the hybrid routing test: pages of /tmp/x stayed cached"
        );
        assert!(super::skip_line("a", "b").starts_with(super::SKIP_MARK));
    }

    /// Issue 33: a name the requirement variable cannot name is refused, so no skip is beyond
    /// its reach.
    #[test]
    #[should_panic(expected = "is not a backend GUIDELOOM_REQUIRE_BACKENDS can require")]
    fn issue33_an_unrequirable_backend_is_refused() {
        super::backend_required("floppy");
    }

    use guideloom_formats::TokenFormat;
    use guideloom_storage::{StreamReader, Window};

    /// The computed tokens are what the writer wrote, across a shard boundary and at the end.
    #[test]
    fn u16_storage_tokens_match_the_storage() {
        let dir = tempfile::tempdir().expect("temp dir");
        super::write_u16_storage(dir.path(), 1, 3);
        let r = StreamReader::open(dir.path(), TokenFormat::<u16>::new()).expect("open");
        assert_eq!(r.len(), 3 * ((1 << 19) / 3));
        for (start, len) in [(0, 10), (174_760, 8), (r.len() - 5, 5)] {
            assert_eq!(
                r.read(Window::new(start, len)).expect("read"),
                super::u16_storage_tokens(1, 3, start, len)
            );
        }
    }
}
