//! I/O backends compared on one storage: random windows of 2,048 u16 tokens (4 KiB) and
//! 2,048 u32 tokens (8 KiB) and random 64 KiB reads, in batches of 32 through
//! `StreamReader::read_many_raw` (one `read_into` per batch), one reading thread.
//!
//! - `warm`: the storage is in the page cache (read once before), for pread, io_uring, mmap.
//! - `cold-direct`: `O_DIRECT` reads (page cache bypassed) with pread and io_uring.
//! - `cold-buffered`: buffered reads after `posix_fadvise(DONTNEED)` of every shard file at
//!   the start of each sample (readahead applies), for pread, io_uring, mmap.
//!
//! Run: `GUIDELOOM_BENCH_MIB=2048 cargo bench -p guideloom-storage --bench backends`.
//! `GUIDELOOM_BENCH_MIB` sets the storage size in MiB (default 1024); `GUIDELOOM_BENCH_DIR`
//! the directory it is written in (default: a temp dir in `$TMPDIR`); it is deleted at the
//! end. Criterion reports bytes/s; windows/s = bytes/s ÷ window bytes (4,096, 8,192 or
//! 65,536).

use std::fs::File;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use guideloom_formats::TokenFormat;
use guideloom_storage::{
    DirectBackend, Manifest, MmapBackend, PreadBackend, ReadBackend, ReadOptions, StreamReader, StreamWriter,
    UringBackend, Window,
};
use rand::{Rng, SeedableRng};

const BATCH: usize = 32;
const SHARDS: u64 = 8;

/// Writes `mib` MiB of pseudo-random bytes as 8 shards of a u16 storage in `dir/u16` and links
/// the same files as a u32 storage in `dir/u32`.
fn make_storages(dir: &Path, mib: u64) {
    let shard_bytes = (mib << 20) / SHARDS / 8 * 8;
    for (sub, itemsize) in [("u16", 2u64), ("u32", 4)] {
        let d = dir.join(sub);
        std::fs::create_dir_all(&d).expect("dir");
        if itemsize == 2 {
            let mut w = StreamWriter::open(&d, TokenFormat::<u16>::new()).expect("writer");
            w.append(0, &[0]).expect("append");
            w.commit().expect("commit");
        } else {
            let mut w = StreamWriter::open(&d, TokenFormat::<u32>::new()).expect("writer");
            w.append(0, &[0]).expect("append");
            w.commit().expect("commit");
        }
        let mut shards = Vec::new();
        for s in 0..SHARDS {
            let p = Manifest::shard_path(&d, s, "stream");
            let _ = std::fs::remove_file(&p);
            let src = Manifest::shard_path(&dir.join("u16"), s, "stream");
            if itemsize == 2 {
                write_shard(&p, s, shard_bytes);
            } else {
                std::fs::hard_link(&src, &p).expect("link");
            }
            // checksum 0: not verified by readers; `verify` is not run here.
            let elements = shard_bytes / itemsize;
            shards.push(
                serde_json::json!({"id": s, "elements": elements, "bytes": shard_bytes, "checksum": 0}),
            );
        }
        // The manifest the writer committed, with these shards instead of its one.
        let path = d.join("manifest.json");
        let mut m: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).expect("manifest")).expect("manifest JSON");
        m["shards"] = shards.into();
        std::fs::write(&path, serde_json::to_vec_pretty(&m).expect("JSON")).expect("write manifest");
    }
}

fn write_shard(p: &Path, seed: u64, bytes: u64) {
    use std::io::Write;
    let mut f = std::io::BufWriter::with_capacity(8 << 20, File::create(p).expect("create"));
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut chunk = vec![0u8; 1 << 20];
    let mut left = bytes;
    while left > 0 {
        for w in chunk.chunks_exact_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            w.copy_from_slice(&x.to_le_bytes());
        }
        let n = left.min(chunk.len() as u64) as usize;
        f.write_all(&chunk[..n]).expect("write");
        left -= n as u64;
    }
    f.into_inner().expect("flush").sync_all().expect("fsync");
}

fn shard_files(dir: &Path) -> Vec<File> {
    (0..SHARDS)
        .map(|s| File::open(Manifest::shard_path(&dir.join("u16"), s, "stream")).expect("open"))
        .collect()
}

fn drop_cache(files: &[File]) {
    for f in files {
        // SAFETY: a plain advisory syscall on an open descriptor; no memory is involved.
        unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    }
}

fn warm_cache(files: &[File]) {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; 8 << 20];
    for f in files {
        let mut off = 0;
        while let Ok(n @ 1..) = f.read_at(&mut buf, off) {
            off += n as u64;
        }
    }
}

/// The bytes of `windows` (elements of `itemsize` bytes) read with `std::fs` from the shard
/// files (equal lengths) of `dir/u16`, which the u32 storage shares: the reference a backend's
/// read is compared with.
fn file_bytes(dir: &Path, windows: &[Window], itemsize: u64) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let files = shard_files(dir);
    let shard_bytes = files[0].metadata().expect("metadata").len();
    let mut out = Vec::new();
    for w in windows {
        let (mut at, end) = (w.offset * itemsize, (w.offset + w.len) * itemsize);
        while at < end {
            let (shard, off) = ((at / shard_bytes) as usize, at % shard_bytes);
            let n = (end - at).min(shard_bytes - off);
            let mut piece = vec![0u8; n as usize];
            files[shard].read_exact_at(&mut piece, off).expect("read");
            out.extend_from_slice(&piece);
            at += n;
        }
    }
    out
}

/// Random windows of `tokens` elements over a stream of `total` elements.
fn batches(total: u64, tokens: u64, seed: u64) -> impl FnMut() -> Vec<Window> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    move || (0..BATCH).map(|_| Window::new(rng.random_range(0..total - tokens), tokens)).collect()
}

fn bench_reader<T: guideloom_storage_bench::Tok>(
    c: &mut Criterion,
    group: &str,
    dir: &Path,
    cases: &[(&str, Arc<dyn ReadBackend>)],
    tokens: u64,
    cold: Option<&[File]>,
) {
    let mut g = c.benchmark_group(group);
    g.throughput(Throughput::Bytes(tokens * T::SIZE * BATCH as u64));
    g.warm_up_time(Duration::from_millis(700));
    g.measurement_time(Duration::from_secs(3));
    g.sample_size(if cold.is_some() { 10 } else { 20 });
    for (name, backend) in cases {
        let r = T::open(dir, ReadOptions::default().backend(Arc::clone(backend)));
        let mut next = batches(T::len(&r), tokens, 7);
        let mut buf = Vec::new();
        // What is timed reads the right bytes: one batch equals a plain read of the files.
        let check = next();
        T::read(&r, &check, &mut buf);
        assert!(buf == file_bytes(dir, &check, T::SIZE), "{group}/{name}: the backend read other bytes");
        g.bench_function(*name, |b| {
            b.iter_custom(|iters| {
                if let Some(files) = cold {
                    drop_cache(files);
                }
                let batches: Vec<_> = (0..iters).map(|_| next()).collect();
                let t = Instant::now();
                for w in &batches {
                    T::read(&r, w, &mut buf);
                }
                t.elapsed()
            })
        });
    }
    g.finish();
}

/// Glue so one bench body serves u16 and u32 readers.
mod guideloom_storage_bench {
    use super::*;

    pub(crate) trait Tok {
        const SIZE: u64;
        type R;
        fn open(dir: &Path, o: ReadOptions) -> Self::R;
        fn len(r: &Self::R) -> u64;
        fn read(r: &Self::R, w: &[Window], buf: &mut Vec<u8>);
    }

    pub(crate) struct U16;
    pub(crate) struct U32;

    impl Tok for U16 {
        const SIZE: u64 = 2;
        type R = StreamReader<TokenFormat<u16>>;
        fn open(dir: &Path, o: ReadOptions) -> Self::R {
            StreamReader::open_with(dir.join("u16"), TokenFormat::<u16>::new(), o).expect("open u16")
        }
        fn len(r: &Self::R) -> u64 {
            r.len()
        }
        fn read(r: &Self::R, w: &[Window], buf: &mut Vec<u8>) {
            r.read_many_raw(w, buf).expect("read");
        }
    }

    impl Tok for U32 {
        const SIZE: u64 = 4;
        type R = StreamReader<TokenFormat<u32>>;
        fn open(dir: &Path, o: ReadOptions) -> Self::R {
            StreamReader::open_with(dir.join("u32"), TokenFormat::<u32>::new(), o).expect("open u32")
        }
        fn len(r: &Self::R) -> u64 {
            r.len()
        }
        fn read(r: &Self::R, w: &[Window], buf: &mut Vec<u8>) {
            r.read_many_raw(w, buf).expect("read");
        }
    }
}

use guideloom_storage_bench::{U16, U32};

fn bench(c: &mut Criterion) {
    let mib: u64 = std::env::var("GUIDELOOM_BENCH_MIB").ok().and_then(|v| v.parse().ok()).unwrap_or(1024);
    let parent = std::env::var_os("GUIDELOOM_BENCH_DIR").map(std::path::PathBuf::from);
    let tmp = match &parent {
        Some(p) => tempfile::tempdir_in(p),
        None => tempfile::tempdir(),
    }
    .expect("temp dir");
    let dir = tmp.path();
    let t = Instant::now();
    make_storages(dir, mib);
    eprintln!("wrote {mib} MiB in {:.1} s", t.elapsed().as_secs_f64());

    let mut buffered: Vec<(&str, Arc<dyn ReadBackend>)> = vec![("pread", Arc::new(PreadBackend))];
    let mut direct: Vec<(&str, Arc<dyn ReadBackend>)> = vec![("pread", Arc::new(DirectBackend::pread()))];
    match (UringBackend::new(), DirectBackend::io_uring()) {
        (Ok(u), Ok(d)) => {
            buffered.push(("io_uring", Arc::new(u)));
            direct.push(("io_uring", Arc::new(d)));
        }
        (Err(e), _) | (_, Err(e)) => {
            guideloom_testkit::skip_backend("io_uring", "the io_uring benchmarks", &e.to_string())
        }
    }
    // SAFETY: the bench's storage lives in its own temp dir; nothing truncates or rewrites it
    // while mapped.
    buffered.push(("mmap", Arc::new(unsafe { MmapBackend::new() })));

    let files = shard_files(dir);
    warm_cache(&files);
    bench_reader::<U16>(c, "warm/u16x2048_4KiB", dir, &buffered, 2048, None);
    bench_reader::<U32>(c, "warm/u32x2048_8KiB", dir, &buffered, 2048, None);
    bench_reader::<U16>(c, "warm/64KiB", dir, &buffered, 32_768, None);
    drop_cache(&files);
    bench_reader::<U16>(c, "cold-direct/u16x2048_4KiB", dir, &direct, 2048, None);
    bench_reader::<U32>(c, "cold-direct/u32x2048_8KiB", dir, &direct, 2048, None);
    bench_reader::<U16>(c, "cold-direct/64KiB", dir, &direct, 32_768, None);
    bench_reader::<U16>(c, "cold-buffered/u16x2048_4KiB", dir, &buffered, 2048, Some(&files));
    bench_reader::<U32>(c, "cold-buffered/u32x2048_8KiB", dir, &buffered, 2048, Some(&files));
    bench_reader::<U16>(c, "cold-buffered/64KiB", dir, &buffered, 32_768, Some(&files));
    drop_cache(&files);
}

criterion_group!(benches, bench);
criterion_main!(benches);
