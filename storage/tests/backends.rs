//! The I/O backends: one suite run over every backend (`common::backends()`), short reads,
//! the `GUIDELOOM_IO` override and the descriptor cap.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use guideloom_formats::{RawBytesFormat, TokenFormat};
use guideloom_storage::{
    choose_backend, io_uring_probe, AutoBackend, BackendKind, DocumentReader, DocumentWriter, FileSet,
    Manifest, MmapBackend, ReadBackend, ReadOptions, ReadRequest, StorageError, StreamReader, StreamWriter,
    Window,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::common::{backends, edit_manifest, Trickle};

/// Shard sizes in u16 elements: empty shards at the start, in the middle and at the end.
const SHARDS: [u64; 9] = [0, 700, 1, 0, 0, 3000, 5, 2048, 0];

/// Writes a u16 token stream over [`SHARDS`]; returns the stream's bytes (the reference).
pub(crate) fn token_storage(dir: &Path) -> Vec<u8> {
    let mut w = StreamWriter::open(dir, TokenFormat::<u16>::new()).unwrap();
    let mut all = Vec::new();
    let mut next = 0u32;
    for (shard, &n) in SHARDS.iter().enumerate() {
        let tokens: Vec<u32> = (0..n as u32).map(|i| (next + i).wrapping_mul(40_503) >> 16).collect();
        next += n as u32;
        w.append(shard as u64, &tokens).unwrap();
        all.extend(tokens.iter().flat_map(|&t| (t as u16).to_le_bytes()));
    }
    w.commit().unwrap();
    all
}

/// The reference: the concatenated shard files read with `std::fs::read`, cut to their
/// committed lengths.
fn reference(files: &FileSet) -> Vec<Vec<u8>> {
    files
        .files()
        .iter()
        .map(|f| {
            let mut b = std::fs::read(&f.path).unwrap();
            b.truncate(f.committed as usize);
            b
        })
        .collect()
}

#[test]
fn windows_across_shard_boundaries_empty_shards_and_empty_reads() {
    let dir = tempfile::tempdir().unwrap();
    let all = token_storage(dir.path());
    let total = all.len() as u64 / 2;
    let tok = |i: u64| u16::from_le_bytes([all[2 * i as usize], all[2 * i as usize + 1]]);
    // (offset, len) in elements: across the empty shards 3-4, starting at shard ends, the
    // whole stream, empty windows at both ends and in the middle.
    let windows: Vec<Window> = [
        (699, 3),
        (700, 1),
        (0, total),
        (701, 3000),
        (total, 0),
        (0, 0),
        (3705, 2049),
        (3500, 0),
        (690, 2020),
    ]
    .into_iter()
    .map(|(offset, len)| Window::new(offset, len))
    .collect();
    for (name, opts) in backends() {
        let r = StreamReader::open_with(dir.path(), TokenFormat::<u16>::new(), opts).unwrap();
        assert_eq!(r.len(), total, "{name}");
        let got = r.read_many(&windows).unwrap();
        assert_eq!(got.len(), windows.len(), "{name}");
        for (w, g) in windows.iter().zip(&got) {
            let want: Vec<u16> = (w.offset..w.offset + w.len).map(tok).collect();
            assert_eq!(g, &want, "{name}: window {w:?}");
        }
        let mut raw = Vec::new();
        r.read_many_raw(&[Window::new(5, 0)], &mut raw).unwrap();
        assert!(raw.is_empty(), "{name}");
    }
}

#[test]
fn documents_across_shards_with_empty_shards_and_empty_documents() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = DocumentWriter::open(dir.path(), RawBytesFormat).unwrap();
    let mut docs: Vec<Vec<u8>> = Vec::new();
    for shard in 0..6u64 {
        let n = [3usize, 0, 5, 0, 1, 40][shard as usize];
        for d in 0..n {
            let len = (d * 977 + shard as usize * 13) % 9000;
            let doc: Vec<u8> = (0..len).map(|i| (i * 31 + d + shard as usize) as u8).collect();
            w.append(shard, &doc).unwrap();
            docs.push(doc);
        }
    }
    w.append(6, b"").unwrap();
    docs.push(Vec::new());
    w.commit().unwrap();
    let mut order: Vec<u64> = (0..docs.len() as u64).rev().collect();
    order.extend([0, 49, 8, 8, 3]);
    for (name, opts) in backends() {
        let r = DocumentReader::open_with(dir.path(), RawBytesFormat, opts).unwrap();
        assert_eq!(r.len(), docs.len() as u64, "{name}");
        let got = r.get_many(&order).unwrap();
        assert_eq!(got.len(), order.len(), "{name}");
        for (&i, g) in order.iter().zip(&got) {
            assert_eq!(g, &docs[i as usize], "{name}: document {i}");
        }
        assert_eq!(r.get_many(&[]).unwrap(), Vec::<Vec<u8>>::new(), "{name}");
    }
}

/// 10,000 random requests (random file, offset and length, some of length 0), in batches of
/// random size and random order, compared byte for byte with `std::fs::read`; run with a
/// descriptor cap of 3 so files are closed and reopened between and within batches.
#[test]
fn ten_thousand_random_requests_match_a_reference_read() {
    let dir = tempfile::tempdir().unwrap();
    token_storage(dir.path());
    for (name, opts) in backends() {
        let opts = opts.max_open_files(3);
        let r = StreamReader::open_with(dir.path(), TokenFormat::<u16>::new(), opts).unwrap();
        let files = r.files();
        let reference = reference(files);
        let mut rng = ChaCha8Rng::seed_from_u64(4);
        let mut done = 0;
        let mut out = Vec::new();
        while done < 10_000 {
            let n = rng.random_range(1..=64usize).min(10_000 - done);
            let requests: Vec<ReadRequest> = (0..n)
                .map(|_| {
                    let file = rng.random_range(0..files.len());
                    let committed = files.file(file).committed;
                    let offset = rng.random_range(0..=committed);
                    let len =
                        if rng.random_ratio(1, 10) { 0 } else { rng.random_range(0..=committed - offset) };
                    ReadRequest { file, offset, len }
                })
                .collect();
            let want: Vec<u8> = requests
                .iter()
                .flat_map(|q| &reference[q.file][q.offset as usize..(q.offset + q.len) as usize])
                .copied()
                .collect();
            out.clear();
            out.resize(want.len(), 0xA5);
            r.options().backend.read_into(files, &requests, &mut out).unwrap();
            assert!(out == want, "{name}: batch of {n} requests from request {done} differs");
            assert!(files.open_count() <= 3 + 1, "{name}: {} descriptors cached", files.open_count());
            done += n;
        }
    }
}

#[test]
fn a_wrong_output_length_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    token_storage(dir.path());
    for (name, opts) in backends() {
        let r = StreamReader::open_with(dir.path(), TokenFormat::<u16>::new(), opts).unwrap();
        let req = [ReadRequest { file: 1, offset: 0, len: 10 }];
        let e = r.options().backend.read_into(r.files(), &req, &mut [0u8; 9]).unwrap_err();
        assert!(matches!(e, StorageError::BufferLength { expected: 10, found: 9 }), "{name}: {e}");
        let bad = [ReadRequest { file: 99, offset: 0, len: 0 }];
        let e = r.options().backend.read_into(r.files(), &bad, &mut []).unwrap_err();
        assert!(matches!(e, StorageError::FileOutOfRange { index: 99, files: 9 }), "{name}: {e}");
    }
}

/// A file truncated after the reader opened: every backend reports the typed short read with
/// the bytes that exist, never garbage (mmap maps only what the file holds when first read).
#[test]
fn file_truncated_after_open_is_a_short_read_for_every_backend() {
    for (name, opts) in backends() {
        let dir = tempfile::tempdir().unwrap();
        token_storage(dir.path());
        let r = StreamReader::open_with(dir.path(), TokenFormat::<u16>::new(), opts).unwrap();
        let p = r.files().file(5).path.clone();
        std::fs::OpenOptions::new().write(true).open(&p).unwrap().set_len(4099).unwrap();
        // Shard 5 starts at element 701: elements 701..2750 are bytes 0..4098 of the file.
        let e = r.read_many(&[Window::new(0, 3), Window::new(701 + 2000, 100)]).unwrap_err();
        match e {
            StorageError::ShortRead { path, offset, expected, got } => {
                assert_eq!((path, offset, expected, got), (p, 4000, 200, 99), "{name}")
            }
            e => panic!("{name}: unexpected {e}"),
        }
        // What is still there reads fine.
        assert_eq!(r.read_many(&[Window::new(701, 3)]).unwrap().len(), 1, "{name}");
    }
}

/// A FIFO as a shard file: io_uring reads of a pipe return at most what the pipe holds (64
/// KiB), so a 200,000-byte request completes only through resubmitted short reads; then a
/// writer that stops early gives the typed short read at end of file.
#[cfg(all(target_os = "linux", feature = "io-uring"))]
#[test]
fn io_uring_completes_short_reads_and_reports_eof() {
    let backend = match guideloom_storage::UringBackend::new() {
        Ok(b) => b,
        Err(e) => {
            return guideloom_testkit::skip_backend(
                "io_uring",
                "the io_uring short-read test",
                &e.to_string(),
            )
        }
    };
    use guideloom_storage::ShardFile;
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("shard-00000.stream");
    let c = std::ffi::CString::new(fifo.as_os_str().to_str().unwrap()).unwrap();
    // SAFETY: `c` is a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let data: Vec<u8> = (0..200_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
    for (sent, want_err) in [(200_000usize, false), (150_000, true)] {
        let files = FileSet::new(vec![ShardFile { path: fifo.clone(), shard: 0, committed: 200_000 }], 4);
        let (p, d) = (fifo.clone(), data.clone());
        let writer = std::thread::spawn(move || {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new().write(true).open(p).unwrap();
            for chunk in d[..sent].chunks(10_000) {
                f.write_all(chunk).unwrap();
            }
        });
        let mut out = vec![0u8; 200_000];
        let r = backend.read_into(&files, &[ReadRequest { file: 0, offset: 0, len: 200_000 }], &mut out);
        writer.join().unwrap();
        if want_err {
            match r.unwrap_err() {
                StorageError::ShortRead { expected: 200_000, got: 150_000, .. } => {}
                e => panic!("unexpected {e}"),
            }
            assert!(out[..150_000] == data[..150_000]);
        } else {
            r.unwrap();
            assert!(out == data);
        }
    }
}

#[test]
fn readers_are_exact_over_a_backend_returning_pieces() {
    let dir = tempfile::tempdir().unwrap();
    let all = token_storage(dir.path());
    for (name, opts) in backends() {
        let t = Arc::new(Trickle(Arc::clone(&opts.backend), AtomicUsize::new(0)));
        let r =
            StreamReader::open_with(dir.path(), TokenFormat::<u16>::new(), opts.backend(t.clone())).unwrap();
        let mut raw = Vec::new();
        r.read_many_raw(&[Window::new(690, 20), Window::new(3, 1)], &mut raw).unwrap();
        let mut want = all[1380..1420].to_vec();
        want.extend_from_slice(&all[6..8]);
        assert_eq!(raw, want, "{name}");
        assert_eq!(t.1.load(Ordering::Relaxed), 14 + 1, "{name}");
    }
}

#[test]
fn mmap_map_range_is_a_zero_copy_view() {
    let dir = tempfile::tempdir().unwrap();
    let all = token_storage(dir.path());
    // SAFETY: nothing truncates or rewrites this private temp storage while it is mapped.
    let mmap = unsafe { MmapBackend::new() };
    let r = StreamReader::open_with(dir.path(), TokenFormat::<u16>::new(), ReadOptions::default()).unwrap();
    let a = mmap.map_range(r.files(), ReadRequest { file: 5, offset: 10, len: 100 }).unwrap();
    assert_eq!(&a[..], &all[2 * 701 + 10..2 * 701 + 110]);
    let b = mmap.map_range(r.files(), ReadRequest { file: 5, offset: 10, len: 100 }).unwrap();
    assert_eq!(a.as_ptr(), b.as_ptr(), "one cached map per file");
    assert!(mmap.map_range(r.files(), ReadRequest { file: 0, offset: 0, len: 0 }).unwrap().is_empty());
    let e = mmap.map_range(r.files(), ReadRequest { file: 5, offset: 5990, len: 20 }).unwrap_err();
    assert!(matches!(e, StorageError::ShortRead { expected: 20, got: 10, .. }), "{e}");
    let e = mmap.map_range(r.files(), ReadRequest { file: 0, offset: 0, len: 1 }).unwrap_err();
    assert!(matches!(e, StorageError::ShortRead { expected: 1, got: 0, .. }), "{e}");
}

#[test]
fn env_values_choose_the_backend() {
    assert_eq!(choose_backend(Some("pread")).kind, BackendKind::Pread);
    assert_eq!(choose_backend(Some(" PREAD ")).kind, BackendKind::Pread);
    assert_eq!(choose_backend(Some("pread")).reason, "forced by GUIDELOOM_IO=pread");
    assert_eq!(choose_backend(Some("io_uring")).kind, BackendKind::IoUring);
    let probe = io_uring_probe();
    let want = if probe.is_ok() { BackendKind::IoUring } else { BackendKind::Pread };
    // mmap is not honoured by the library: it chooses as for auto and says so.
    for v in [None, Some(""), Some("auto"), Some("bogus"), Some("mmap")] {
        let c = choose_backend(v);
        assert_eq!(c.kind, want, "{v:?}: {}", c.reason);
    }
    assert!(choose_backend(Some("bogus")).reason.contains("not recognised"));
    assert!(choose_backend(Some("mmap")).reason.contains("GUIDELOOM_IO=mmap not honoured"));
    assert_eq!(AutoBackend::for_env_value(Some("pread")).name(), "pread");
    assert_eq!(AutoBackend::for_env_value(Some("mmap")).name(), want.name());
}

#[test]
fn backend_names_parse_in_one_place() {
    let parse = |s: &str| s.parse::<BackendKind>();
    for (names, kind) in [
        (&["auto", "AUTO", "", "  "][..], BackendKind::Auto),
        (&["pread", " Pread "][..], BackendKind::Pread),
        (&["io_uring", "io-uring", "uring", "IO_URING"][..], BackendKind::IoUring),
        (&["mmap", "MMap"][..], BackendKind::Mmap),
    ] {
        for n in names {
            assert_eq!(parse(n).unwrap(), kind, "{n:?}");
        }
    }
    let e = parse("posix").unwrap_err();
    assert!(matches!(&e, StorageError::UnknownBackend { name } if name == "posix"), "{e}");
    assert_eq!(e.to_string(), "unknown I/O backend \"posix\": expected auto, io_uring, pread or mmap");
    assert_eq!(BackendKind::IoUring.to_string(), "io_uring");
}

/// Re-runs this test binary with only `test` selected and `env` set (environment variables
/// are process-global; tests of this binary run in parallel threads).
pub(crate) fn run_child(test: &str, env: &[(&str, &str)]) {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([test, "--exact", "--test-threads=1", "--nocapture"]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "child {test} failed:\n{text}");
    assert!(text.contains("1 passed"), "child {test} did not run:\n{text}");
    assert!(text.contains("child-checked"), "child {test} checked nothing:\n{text}");
}

#[test]
fn guideloom_io_pread_makes_auto_pick_pread() {
    run_child("backends::auto_env_child", &[("GUIDELOOM_IO", "pread"), ("GUIDELOOM_TEST_EXPECT", "pread")]);
}

/// Child half of [`guideloom_io_pread_makes_auto_pick_pread`]; does nothing in a normal run.
#[test]
fn auto_env_child() {
    let Ok(expect) = std::env::var("GUIDELOOM_TEST_EXPECT") else { return };
    let choice = guideloom_storage::auto_backend_choice();
    assert_eq!(choice.kind.name(), expect);
    assert_eq!(choice.reason, format!("forced by GUIDELOOM_IO={expect}"));
    let opts = ReadOptions::default();
    assert_eq!(opts.backend.name(), expect);
    let dir = tempfile::tempdir().unwrap();
    let all = token_storage(dir.path());
    let r = StreamReader::open_with(dir.path(), TokenFormat::<u16>::new(), opts).unwrap();
    let mut raw = Vec::new();
    r.read_many_raw(&[Window::new(0, r.len())], &mut raw).unwrap();
    assert!(raw == all);
    println!("child-checked");
}

fn count_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// Writes a stream storage of 5,000 small shards (u16 elements; shard sizes 0..=120) without
/// the writer (which would fsync 5,000 files); returns its bytes.
fn many_shards(dir: &Path, shards: u64) -> Vec<u8> {
    let mut w = StreamWriter::open(dir, TokenFormat::<u16>::new()).unwrap();
    w.append(0, &[0]).unwrap();
    w.commit().unwrap();
    drop(w);
    let mut entries = Vec::new();
    let mut all = Vec::new();
    for s in 0..shards {
        let n = (s * 37) % 121;
        let bytes: Vec<u8> = (0..n).flat_map(|i| ((s * 1000 + i) as u16).to_le_bytes()).collect();
        let p: PathBuf = Manifest::shard_path(dir, s, "stream");
        std::fs::write(&p, &bytes).unwrap();
        let checksum = crc32c::crc32c(&bytes);
        entries.push(serde_json::json!({"id": s, "elements": n, "bytes": 2 * n, "checksum": checksum}));
        all.extend(bytes);
    }
    edit_manifest(dir, |m| m["shards"] = entries.into());
    all
}

#[test]
fn issue8_five_thousand_shards_never_exceed_the_descriptor_cap() {
    run_child("backends::descriptor_cap_child", &[("GUIDELOOM_TEST_FD_CHILD", "1")]);
}

/// Child half of [`issue8_five_thousand_shards_never_exceed_the_descriptor_cap`] (alone in its
/// process, so `/proc/self/fd` counts only its own descriptors); does nothing in a normal run.
#[test]
fn descriptor_cap_child() {
    if std::env::var("GUIDELOOM_TEST_FD_CHILD").is_err() {
        return;
    }
    const CAP: usize = 64;
    // On tmpfs when it accepts O_DIRECT (Linux 6.6 and later): creating and deleting 5,000
    // files on this ext4 (mounted with `discard`) takes about 20 s.
    let dir = crate::hostile::scratch_dir();
    let all = many_shards(dir.path(), 5_000);
    let total = all.len() as u64 / 2;
    let backends = backends();
    // Taken after the io_uring probe; each reading thread's ring adds one descriptor.
    let baseline = count_fds();
    for (name, opts) in backends {
        let r =
            StreamReader::open_with(dir.path(), TokenFormat::<u16>::new(), opts.max_open_files(CAP)).unwrap();
        // A sampler thread watches the count while reads are in flight (its own read_dir
        // holds one descriptor).
        let stop = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(AtomicUsize::new(0));
        let sampler = {
            let (stop, peak) = (Arc::clone(&stop), Arc::clone(&peak));
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    peak.fetch_max(count_fds(), Ordering::Relaxed);
                }
            })
        };
        let mut rng = ChaCha8Rng::seed_from_u64(5_000);
        let mut touched = std::collections::HashSet::new();
        let mut raw = Vec::new();
        for _ in 0..100 {
            let batch: Vec<Window> = (0..32)
                .map(|_| {
                    let len = rng.random_range(0..400u64);
                    Window::new(rng.random_range(0..=total - len), len)
                })
                .collect();
            r.read_many_raw(&batch, &mut raw).unwrap();
            let want: Vec<u8> = batch
                .iter()
                .flat_map(|w| &all[2 * w.offset as usize..2 * (w.offset + w.len) as usize])
                .copied()
                .collect();
            assert!(raw == want, "{name}");
            for w in &batch {
                touched.insert(w.offset * 5_000 / total);
            }
            let now = count_fds();
            assert!(now <= baseline + CAP + 2, "{name}: {now} descriptors open, baseline {baseline}");
        }
        stop.store(true, Ordering::Relaxed);
        sampler.join().unwrap();
        let peak = peak.load(Ordering::Relaxed);
        assert!(
            peak <= baseline + CAP + 4,
            "{name}: peak of {peak} descriptors, baseline {baseline}, cap {CAP}"
        );
        println!("{name}: peak {peak} descriptors (baseline {baseline}, cap {CAP})");
        assert!(touched.len() > 2_000, "{name}: reads touched only {} regions", touched.len());
        assert!(r.files().open_count() <= CAP, "{name}");
    }
    // After dropping the readers only this thread's ring is left.
    assert!(count_fds() <= baseline + 1);
    println!("child-checked");
}

/// Issue 21: what `GUIDELOOM_REQUIRE_BACKENDS` names is present in [`backends`] (which fails
/// itself when it is not), and a required io_uring is also what the default `auto` backend
/// picks (unless the run forces it off, which then contradicts the requirement and fails).
/// With the variable unset this checks the always-present backends only.
#[test]
fn required_backends_are_present() {
    let names: Vec<&str> = backends().into_iter().map(|(n, _)| n).collect();
    for always in ["pread", "mmap", "hybrid", "auto", "auto, io_uring forced off"] {
        assert!(names.contains(&always), "{always} missing from {names:?}");
    }
    let required = guideloom_testkit::required_backends();
    for b in &required {
        let want: &[&str] = match *b {
            "io_uring" => &["io_uring"],
            "direct" => &["pread+direct"],
            // strace: `power_loss::local_commits_make_their_syscalls_in_order`; evict:
            // `hybrid_routes_evicted_files_cold_and_cached_files_to_the_map`.
            _ => &[],
        };
        for w in want {
            assert!(names.contains(w), "{b} is required but {w} is not among {names:?}");
        }
        if *b == "io_uring" {
            assert_eq!(guideloom_storage::auto_backend_choice().kind, BackendKind::IoUring);
        }
    }
    if required.contains(&"io_uring") && required.contains(&"direct") {
        assert!(names.contains(&"io_uring+direct"), "{names:?}");
        assert_eq!(names.len(), 8);
    }
}

/// Issue 21, item 4: a backend the run requires but cannot use fails the run instead of
/// being skipped. In a child process io_uring is made unavailable by `GUIDELOOM_IO=pread`:
/// requiring it fails [`required_backends_are_present`] (its `backends()` call), naming the
/// backend and the reason; without the requirement the same test passes and says on stderr
/// what it skipped, in the one skip format CI counts (`SKIPPED: <what>: <reason>`).
#[test]
fn a_required_backend_that_is_missing_fails_the_run() {
    let child = |require: &str| {
        Command::new(std::env::current_exe().unwrap())
            .args(["backends::required_backends_are_present", "--exact", "--test-threads=1", "--nocapture"])
            .env("GUIDELOOM_IO", "pread")
            .env("GUIDELOOM_REQUIRE_BACKENDS", require)
            .output()
            .unwrap()
    };
    let out = child("io_uring");
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a missing required backend passed:\n{text}");
    assert!(
        text.contains(
            "backend io_uring is required (GUIDELOOM_REQUIRE_BACKENDS) but unavailable: GUIDELOOM_IO=pread"
        ),
        "{text}"
    );
    let out = child("");
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("1 passed"), "{text}");
    assert!(text.contains("SKIPPED: io_uring backends: GUIDELOOM_IO=pread turns io_uring off"), "{text}");
}

/// Counts the requests a backend is asked for, then reads them through it.
#[derive(Debug)]
struct Counting(Arc<dyn ReadBackend>, AtomicUsize);

impl ReadBackend for Counting {
    fn name(&self) -> &'static str {
        "counting"
    }
    fn read_into(
        &self,
        files: &FileSet,
        requests: &[ReadRequest],
        out: &mut [u8],
    ) -> guideloom_storage::Result<()> {
        self.1.fetch_add(requests.len(), Ordering::Relaxed);
        self.0.read_into(files, requests, out)
    }
}

/// Pages of `path` in the page cache now, and its pages (`mincore(2)` over a fresh map, which
/// maps no page itself).
fn cached_pages(path: &Path) -> (usize, usize) {
    let f = std::fs::File::open(path).unwrap();
    // SAFETY: the file is private to this test; nothing truncates it while mapped.
    let map = unsafe { memmap2::Mmap::map(&f) }.unwrap();
    // SAFETY: `sysconf` only reads a configuration value.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    let pages = map.len().div_ceil(page);
    let mut vec = vec![0u8; pages];
    // SAFETY: `map` is a live, page-aligned mapping of `map.len()` bytes; `vec` holds one byte
    // per page of it.
    let rc = unsafe { libc::mincore(map.as_ptr() as *mut libc::c_void, map.len(), vec.as_mut_ptr().cast()) };
    assert_eq!(rc, 0, "mincore: {}", std::io::Error::last_os_error());
    (vec.iter().filter(|&&b| b & 1 == 1).count(), pages)
}

/// Flushes `path` and drops its pages from the page cache (`fsync`, then
/// `posix_fadvise(DONTNEED)`); whether none is left cached. (Some file systems keep them:
/// tmpfs, for one.)
fn evict(path: &Path) -> bool {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(path).unwrap();
    f.sync_all().unwrap();
    // SAFETY: `f` is an open descriptor; the advice only affects the page cache.
    let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(rc, 0);
    cached_pages(path).0 == 0
}

/// Two 1 MiB files with distinct bytes, written, fsynced and evicted from the page cache;
/// `None` (a skip, or a failure where `GUIDELOOM_REQUIRE_BACKENDS` names `evict`, as CI sets
/// it) where the file system keeps evicted pages.
fn evicted_pair(dir: &Path) -> Option<(Vec<ShardFileBytes>, Vec<guideloom_storage::ShardFile>)> {
    let mut bytes = Vec::new();
    let mut shards = Vec::new();
    for i in 0..2u64 {
        let path = dir.join(format!("shard-{i:05}.stream"));
        let b: Vec<u8> = (0..1u32 << 20).map(|k| (k.wrapping_mul(2_654_435_761) >> (13 + i)) as u8).collect();
        std::fs::write(&path, &b).unwrap();
        if !evict(&path) {
            guideloom_testkit::skip_backend(
                "evict",
                "the hybrid routing test",
                &format!("posix_fadvise(DONTNEED) left pages of {} cached", path.display()),
            );
            return None;
        }
        shards.push(guideloom_storage::ShardFile { path, shard: i, committed: b.len() as u64 });
        bytes.push(b);
    }
    Some((bytes, shards))
}

type ShardFileBytes = Vec<u8>;

/// 4 KiB requests over the whole of file `file` (256 of them).
fn whole(file: usize) -> Vec<ReadRequest> {
    (0..256u64).map(|k| ReadRequest { file, offset: k * 4096, len: 4096 }).collect()
}

/// The hybrid backend sends an evicted file to the cold path and, once the file was read
/// whole (so its pages are cached), to the map; reads are exact either way, also for a batch
/// over one cached and one evicted file. A decision is kept for the recheck interval. On the
/// host's page cache (the same rule with a test probe, on any host:
/// [`issue33_hybrid_routes_by_the_probe_residency_on_any_host`]); needs eviction, which CI
/// requires (`evict` in `GUIDELOOM_REQUIRE_BACKENDS`).
#[test]
fn hybrid_routes_evicted_files_cold_and_cached_files_to_the_map() {
    use guideloom_storage::{HybridBackend, HybridRoute};
    use std::time::Duration;
    let dir = tempfile::tempdir().unwrap();
    let Some((bytes, shards)) = evicted_pair(dir.path()) else { return };
    let counting = Arc::new(Counting(Arc::new(AutoBackend::new()), AtomicUsize::new(0)));
    // SAFETY: the files are private to this test; nothing truncates or rewrites them.
    // Checks inline, so each route below is the decision made for that call.
    let hybrid = unsafe { HybridBackend::new() }.cold(counting.clone()).check_in_background(false);
    let every_batch = hybrid.clone().recheck_interval(Duration::ZERO);
    let files = FileSet::new(shards.clone(), 8);
    assert_eq!(every_batch.route(&files, 0).unwrap(), HybridRoute::Cold);
    assert_eq!(every_batch.route(&files, 1).unwrap(), HybridRoute::Cold);
    assert!(matches!(every_batch.route(&files, 2), Err(StorageError::FileOutOfRange { index: 2, files: 2 })));

    // File 0 read whole, through the cold path: now cached, so mapped.
    let mut out = vec![0u8; 1 << 20];
    every_batch.read_into(&files, &whole(0), &mut out).unwrap();
    assert!(out == bytes[0]);
    assert_eq!(counting.1.load(Ordering::Relaxed), 256);
    assert_eq!(cached_pages(&shards[0].path), (256, 256));
    assert_eq!(every_batch.route(&files, 0).unwrap(), HybridRoute::Map);
    // The routing state lives in the set: the next check is due when the last checker's
    // interval ends (here at once, so an hourly backend checks now, then not for an hour).
    let hourly = hybrid.clone().recheck_interval(Duration::from_secs(3600));
    assert_eq!(hourly.route(&files, 0).unwrap(), HybridRoute::Map);

    // A batch over both files: file 0's requests from the map, file 1's through the cold path
    // (counted), laid out in request order.
    let (mut mixed, mut want) = (Vec::new(), Vec::new());
    for k in 0..256u64 {
        for (file, len) in [(0usize, 1000u64), (1, 4096)] {
            let offset = if file == 0 { (255 - k) * 4096 + 17 } else { k * 4096 };
            mixed.push(ReadRequest { file, offset, len });
            want.extend_from_slice(&bytes[file][offset as usize..(offset + len) as usize]);
        }
    }
    mixed.push(ReadRequest { file: 1, offset: 5, len: 0 });
    let mut out = vec![0u8; want.len()];
    every_batch.read_into(&files, &mixed, &mut out).unwrap();
    assert!(out == want);
    assert_eq!(counting.1.load(Ordering::Relaxed), 256 + 257);
    // File 1 is now cached too: every batch reads from the maps.
    assert_eq!(every_batch.route(&files, 1).unwrap(), HybridRoute::Map);
    let mut out = vec![0u8; want.len()];
    every_batch.read_into(&files, &mixed, &mut out).unwrap();
    assert!(out == want);
    assert_eq!(counting.1.load(Ordering::Relaxed), 256 + 257);
    drop(files);

    // Evicted again (the maps are gone with the set), read in a new set by a backend that
    // re-checks hourly: the first check says cold, and the decision holds although the file
    // is cached again after one whole read.
    if !evict(&shards[1].path) {
        return guideloom_testkit::skip_backend("evict", "the hybrid routing test", "pages stayed cached");
    }
    let files = FileSet::new(shards.clone(), 8);
    assert_eq!(hourly.route(&files, 1).unwrap(), HybridRoute::Cold);
    let mut out = vec![0u8; 1 << 20];
    hourly.read_into(&files, &whole(1), &mut out).unwrap();
    assert!(out == bytes[1]);
    assert_eq!(cached_pages(&shards[1].path), (256, 256));
    assert_eq!(hourly.route(&files, 1).unwrap(), HybridRoute::Cold);
    assert_eq!(counting.1.load(Ordering::Relaxed), 256 + 257 + 256);
    // The same file in a new set is checked afresh.
    let files = FileSet::new(shards, 8);
    assert_eq!(hourly.route(&files, 1).unwrap(), HybridRoute::Map);
    assert_eq!(hybrid.name(), "hybrid");
}

/// Polls `route` until it answers `want` (the checker thread's decision landed), for at most
/// 30 s; whether it did. Not a speed assertion: the check of a 1 MiB file takes microseconds,
/// the bound only keeps a broken checker from hanging the suite.
fn route_becomes(
    backend: &guideloom_storage::HybridBackend,
    files: &FileSet,
    file: usize,
    want: guideloom_storage::HybridRoute,
) -> bool {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::time::Instant::now() < until {
        if backend.route(files, file).unwrap() == want {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    false
}

/// Issue 31: with checks in the background (the default), the first batch over a warm file
/// does not wait for its `mincore(2)` check and population: it is read through the cold path
/// (counted), and the map path takes over once the checker thread decided; an evicted file
/// stays cold. Reads are exact on both paths.
#[test]
fn issue31_hybrid_checks_residency_off_the_first_batchs_path() {
    use guideloom_storage::{HybridBackend, HybridRoute};
    use std::time::Duration;
    let dir = tempfile::tempdir().unwrap();
    let Some((bytes, shards)) = evicted_pair(dir.path()) else { return };
    // File 0 made warm again by reading it whole; file 1 stays evicted.
    let _ = std::fs::read(&shards[0].path).unwrap();
    assert_eq!(cached_pages(&shards[0].path), (256, 256));
    let counting = Arc::new(Counting(Arc::new(AutoBackend::new()), AtomicUsize::new(0)));
    // SAFETY: the files are private to this test; nothing truncates or rewrites them.
    let hybrid = unsafe { HybridBackend::new() }.cold(counting.clone()).recheck_interval(Duration::ZERO);
    assert!(hybrid.checks_in_background());
    let files = FileSet::new(shards.clone(), 8);
    // The first batch: no decision yet, so the cold path, 256 requests counted.
    let mut out = vec![0u8; 1 << 20];
    hybrid.read_into(&files, &whole(0), &mut out).unwrap();
    assert!(out == bytes[0]);
    assert_eq!(counting.1.load(Ordering::Relaxed), 256);
    // The checker finds file 0 warm: the map path, no request counted.
    assert!(route_becomes(&hybrid, &files, 0, HybridRoute::Map), "file 0 never routed to the map");
    let mut out = vec![0u8; 1 << 20];
    hybrid.read_into(&files, &whole(0), &mut out).unwrap();
    assert!(out == bytes[0]);
    assert_eq!(counting.1.load(Ordering::Relaxed), 256);
    // File 1 is evicted: every check says cold, reads stay on the cold path (and exact).
    for _ in 0..3 {
        assert_eq!(hybrid.route(&files, 1).unwrap(), HybridRoute::Cold);
        std::thread::sleep(Duration::from_millis(2));
    }
    let req = [ReadRequest { file: 1, offset: 4096 * 7 + 3, len: 5000 }];
    let mut out = vec![0u8; 5000];
    hybrid.read_into(&files, &req, &mut out).unwrap();
    assert!(out[..] == bytes[1][4096 * 7 + 3..4096 * 7 + 3 + 5000]);
    assert_eq!(counting.1.load(Ordering::Relaxed), 257);
}

/// Residency as the test sets it: `(resident, total)` pages per file path (absent: unknown),
/// and the map lengths the backend asked about.
#[derive(Debug, Default)]
struct SetResidency(
    std::sync::Mutex<std::collections::HashMap<PathBuf, (u64, u64)>>,
    std::sync::Mutex<Vec<u64>>,
);

impl SetResidency {
    fn set(&self, path: &Path, pages: Option<(u64, u64)>) {
        let mut m = self.0.lock().unwrap();
        match pages {
            Some(p) => m.insert(path.to_path_buf(), p),
            None => m.remove(path),
        };
    }
}

impl guideloom_storage::ResidencyProbe for SetResidency {
    fn resident_pages(&self, file: &guideloom_storage::ShardFile, len: u64) -> Option<(u64, u64)> {
        self.1.lock().unwrap().push(len);
        self.0.lock().unwrap().get(&file.path).copied()
    }
}

/// Issue 33, item 3: the hybrid backend's routing, with residency from a test probe instead of
/// the host's page cache, so it runs the same on every host (no eviction needed). The rule:
/// a file goes to its map when at most `floor(total * (1 - 0.99))` of its pages are missing
/// (hand-computed: 2 of 256, 1 of 100), else, and when residency is unknown or nonsense, to the
/// cold path; a decision holds for the recheck interval within one file set; reads are exact
/// either way, also in a batch over one mapped and one cold file.
#[test]
fn issue33_hybrid_routes_by_the_probe_residency_on_any_host() {
    use guideloom_storage::{HybridBackend, HybridRoute, ShardFile};
    use std::time::Duration;
    let dir = tempfile::tempdir().unwrap();
    let (mut bytes, mut shards) = (Vec::new(), Vec::new());
    for i in 0..2u64 {
        let path = dir.path().join(format!("shard-{i:05}.stream"));
        let b: Vec<u8> = (0..1u32 << 20).map(|k| (k.wrapping_mul(2_654_435_761) >> (13 + i)) as u8).collect();
        std::fs::write(&path, &b).unwrap();
        shards.push(ShardFile { path, shard: i, committed: b.len() as u64 });
        bytes.push(b);
    }
    let probe = Arc::new(SetResidency::default());
    let counting = Arc::new(Counting(Arc::new(AutoBackend::new()), AtomicUsize::new(0)));
    // SAFETY: the files are private to this test; nothing truncates or rewrites them.
    // Inline checks, so each route below is the decision made for that call.
    let hybrid = unsafe { HybridBackend::new() }
        .cold(counting.clone())
        .residency_probe(probe.clone())
        .check_in_background(false);
    let every_batch = hybrid.clone().recheck_interval(Duration::ZERO);
    let files = FileSet::new(shards.clone(), 8);
    let route = |f: usize| every_batch.route(&files, f).unwrap();

    // Unknown residency (the probe says nothing) is cold; so is a report of more resident
    // pages than the file has.
    assert_eq!(route(0), HybridRoute::Cold);
    probe.set(&shards[0].path, Some((257, 256)));
    assert_eq!(route(0), HybridRoute::Cold);
    // The threshold on both sides and exactly on it.
    for (pages, want) in [
        ((256, 256), HybridRoute::Map),
        ((254, 256), HybridRoute::Map), // 2 missing: floor(256 * 0.01) = 2 allowed
        ((253, 256), HybridRoute::Cold),
        ((99, 100), HybridRoute::Map), // exactly 0.99
        ((98, 100), HybridRoute::Cold),
        ((0, 256), HybridRoute::Cold),
    ] {
        probe.set(&shards[0].path, Some(pages));
        assert_eq!(route(0), want, "{pages:?}");
    }
    // The probe is asked about the mapped length, the whole file here.
    assert!(probe.1.lock().unwrap().iter().all(|&len| len == 1 << 20));
    assert!(matches!(every_batch.route(&files, 2), Err(StorageError::FileOutOfRange { index: 2, files: 2 })));

    // File 0 cold, file 1 warm: a batch over both reads file 0's requests through the cold
    // path (counted) and file 1's from the map, laid out in request order.
    probe.set(&shards[1].path, Some((256, 256)));
    let (mut mixed, mut want) = (Vec::new(), Vec::new());
    for k in 0..256u64 {
        for (file, len) in [(0usize, 4096u64), (1, 1000)] {
            let offset = if file == 1 { (255 - k) * 4096 + 17 } else { k * 4096 };
            mixed.push(ReadRequest { file, offset, len });
            want.extend_from_slice(&bytes[file][offset as usize..(offset + len) as usize]);
        }
    }
    let mut out = vec![0u8; want.len()];
    every_batch.read_into(&files, &mixed, &mut out).unwrap();
    assert!(out == want);
    assert_eq!(counting.1.load(Ordering::Relaxed), 256);
    // Both warm: nothing goes through the cold path.
    probe.set(&shards[0].path, Some((255, 256)));
    let mut out = vec![0u8; want.len()];
    every_batch.read_into(&files, &mixed, &mut out).unwrap();
    assert!(out == want);
    assert_eq!(counting.1.load(Ordering::Relaxed), 256);
    drop(files);

    // An hourly backend keeps its first decision in a file set although the residency
    // changes; a new set is checked afresh.
    let hourly = hybrid.recheck_interval(Duration::from_secs(3600));
    let files = FileSet::new(shards.clone(), 8);
    assert_eq!(hourly.route(&files, 1).unwrap(), HybridRoute::Map);
    probe.set(&shards[1].path, Some((0, 256)));
    assert_eq!(hourly.route(&files, 1).unwrap(), HybridRoute::Map);
    let files = FileSet::new(shards, 8);
    assert_eq!(hourly.route(&files, 1).unwrap(), HybridRoute::Cold);
    let mut out = vec![0u8; 1 << 20];
    hourly.read_into(&files, &whole(1), &mut out).unwrap();
    assert!(out == bytes[1]);
    assert_eq!(counting.1.load(Ordering::Relaxed), 256 + 256);
}
