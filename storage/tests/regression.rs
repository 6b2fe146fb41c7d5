//! Regression tests: each pins a bug that was found and fixed, and carries its issue number in
//! its name (`issue12_...` = issue 12: a safe function built the mmap backend, and
//! `GUIDELOOM_IO=mmap` turned every default reader into mmap). Regressions that need another
//! module's fixtures stay there, named the same way (`backends::issue8_...`).

use guideloom_formats::TokenFormat;
use guideloom_storage::{
    auto_backend_choice, choose_backend, io_uring_probe, AutoBackend, DirectBackend, MmapBackend,
    PreadBackend, ReadBackend, ReadOptions, StreamReader, UringBackend, Window,
};
use std::path::Path;

use guideloom_testkit::hostile::{mkfifo, within_watchdog};

use crate::backends::{run_child, token_storage};

/// Every safe public way to obtain a read backend, with what it yields (`name()`).
fn safe_backends(dir: &Path) -> Vec<(&'static str, &'static str)> {
    let mut v = vec![
        ("ReadOptions::default()", ReadOptions::default().backend.name()),
        ("AutoBackend::new()", AutoBackend::new().name()),
        ("AutoBackend::default()", AutoBackend::default().name()),
        ("auto_backend_choice()", auto_backend_choice().kind.name()),
        ("PreadBackend", PreadBackend.name()),
        ("DirectBackend::pread()", DirectBackend::pread().name()),
        (
            "a reader opened with default options",
            StreamReader::open(dir, TokenFormat::<u16>::new()).unwrap().options().backend.name(),
        ),
    ];
    for value in [None, Some(""), Some("auto"), Some("pread"), Some("io_uring"), Some("mmap"), Some(" MMAP ")]
    {
        v.push(("AutoBackend::for_env_value", AutoBackend::for_env_value(value).name()));
        v.push(("choose_backend", choose_backend(value).kind.name()));
    }
    if let Ok(u) = UringBackend::new() {
        v.push(("UringBackend::new()", u.name()));
    }
    if let Ok(d) = DirectBackend::io_uring() {
        v.push(("DirectBackend::io_uring()", d.name()));
    }
    v
}

#[test]
fn issue12_no_safe_constructor_yields_mmap_whatever_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    token_storage(dir.path());
    for (what, name) in safe_backends(dir.path()) {
        assert_ne!(name, "mmap", "{what}");
    }
    // The same with GUIDELOOM_IO=mmap set before the process first reads it.
    run_child("regression::no_mmap_child", &[("GUIDELOOM_IO", "mmap"), ("GUIDELOOM_TEST_EXPECT", "mmap")]);
    run_child("regression::no_mmap_child", &[("GUIDELOOM_IO", " MMAP "), ("GUIDELOOM_TEST_EXPECT", "MMAP")]);
    // The mmap backend itself stays reachable through its unsafe constructor.
    // SAFETY: nothing truncates or rewrites this private temp storage while it is mapped.
    let mmap = unsafe { MmapBackend::new() };
    assert_eq!(mmap.name(), "mmap");
}

/// Child half of [`issue12_no_safe_constructor_yields_mmap_whatever_the_environment`]; does nothing
/// in a normal run.
#[test]
fn no_mmap_child() {
    let Ok(expect) = std::env::var("GUIDELOOM_TEST_EXPECT") else { return };
    let want = if io_uring_probe().is_ok() { "io_uring" } else { "pread" };
    let dir = tempfile::tempdir().unwrap();
    let all = token_storage(dir.path());
    for (what, name) in safe_backends(dir.path()) {
        assert_ne!(name, "mmap", "{what}");
    }
    let choice = auto_backend_choice();
    assert_eq!(choice.kind.name(), want);
    assert!(choice.reason.contains(&format!("GUIDELOOM_IO={expect} not honoured")), "{}", choice.reason);
    let opts = ReadOptions::default();
    assert_eq!(opts.backend.name(), want);
    let r = StreamReader::open_with(dir.path(), TokenFormat::<u16>::new(), opts).unwrap();
    let mut raw = Vec::new();
    r.read_many_raw(&[Window::new(0, r.len())], &mut raw).unwrap();
    assert!(raw == all);
    println!("child-checked");
}

/// Whether `e` is the refusal of file `name` as not being a regular file inside the storage.
fn refused(e: &guideloom_storage::StorageError, name: &str) -> bool {
    matches!(e, guideloom_storage::StorageError::UnsafeFile { path, .. } if path.ends_with(name))
}

#[test]
fn issue19_files_outside_the_storage_are_never_read_or_written_through_links() {
    use guideloom_storage::{verify, StreamWriter};
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let victim = outside.path().join("victim");
    let original: Vec<u8> = (0..4096u32).map(|i| (i * 31 % 251) as u8).collect();
    std::fs::write(&victim, &original).unwrap();
    token_storage(dir.path());
    let shard = dir.path().join("shard-00000.stream");
    let committed = std::fs::metadata(&shard).unwrap().len();
    assert!(committed <= original.len() as u64);

    // A shard replaced by a link to another file: the reader does not serve its bytes, the
    // writer neither truncates nor appends to it.
    std::fs::remove_file(&shard).unwrap();
    std::os::unix::fs::symlink(&victim, &shard).unwrap();
    let e = StreamReader::open(dir.path(), TokenFormat::<u16>::new()).unwrap_err();
    assert!(refused(&e, "shard-00000.stream"), "{e}");
    let e = verify(dir.path()).unwrap_err();
    assert!(refused(&e, "shard-00000.stream"), "{e}");
    let mut w = StreamWriter::open(dir.path(), TokenFormat::<u16>::new()).unwrap();
    let e = w.append(0, &[1, 2, 3]).unwrap_err();
    assert!(refused(&e, "shard-00000.stream"), "{e}");
    drop(w);
    // A link as a new shard: the writer does not create the file elsewhere.
    let elsewhere = outside.path().join("created-elsewhere");
    std::os::unix::fs::symlink(&elsewhere, dir.path().join("shard-00009.stream")).unwrap();
    let mut w = StreamWriter::open(dir.path(), TokenFormat::<u16>::new()).unwrap();
    let e = w.append(9, &[1, 2, 3]).unwrap_err();
    assert!(refused(&e, "shard-00009.stream"), "{e}");
    drop(w);
    assert!(!elsewhere.exists());
    // A link as the manifest's temp file: the commit does not write through it.
    std::fs::remove_file(&shard).unwrap();
    std::fs::remove_file(dir.path().join("shard-00009.stream")).unwrap();
    std::fs::remove_dir_all(dir.path()).unwrap();
    token_storage(dir.path());
    std::os::unix::fs::symlink(&victim, dir.path().join("manifest.json.tmp")).unwrap();
    let mut w = StreamWriter::open(dir.path(), TokenFormat::<u16>::new()).unwrap();
    w.append(0, &[7]).unwrap();
    let e = w.commit().unwrap_err();
    assert!(refused(&e, "manifest.json.tmp"), "{e}");
    drop(w);
    // A link as the lock file: the writer does not open it.
    std::fs::remove_file(dir.path().join(".writer.lock")).unwrap();
    std::os::unix::fs::symlink(&victim, dir.path().join(".writer.lock")).unwrap();
    let e = StreamWriter::open(dir.path(), TokenFormat::<u16>::new()).unwrap_err();
    assert!(refused(&e, ".writer.lock"), "{e}");
    // A hard link as a shard: a writer would change the other name too.
    std::fs::remove_file(dir.path().join(".writer.lock")).unwrap();
    let hard = outside.path().join("hard");
    std::fs::hard_link(&shard, &hard).unwrap();
    let hard_before = std::fs::read(&hard).unwrap();
    let mut w = StreamWriter::open(dir.path(), TokenFormat::<u16>::new()).unwrap();
    let e = w.append(0, &[1]).unwrap_err();
    assert!(refused(&e, "shard-00000.stream"), "{e}");
    drop(w);
    assert_eq!(std::fs::read(&hard).unwrap(), hard_before);
    // The outside file is unchanged, byte for byte.
    assert_eq!(std::fs::read(&victim).unwrap(), original);

    // A manifest whose shard names a file by a string of its own (`files` key) is refused
    // before any file is opened.
    let m = dir.path().join("manifest.json");
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&m).unwrap()).unwrap();
    v["shards"][0]["files"] = serde_json::json!({"/../../../etc/passwd": {"bytes": 1, "checksum": 0}});
    std::fs::write(&m, serde_json::to_vec(&v).unwrap()).unwrap();
    match verify(dir.path()).unwrap_err() {
        guideloom_storage::StorageError::InvalidManifest { reason, .. } => {
            assert!(reason.contains("/../../../etc/passwd"), "{reason}")
        }
        e => panic!("unexpected {e}"),
    }
}

#[test]
fn issue19_hangs_on_non_regular_files_are_refused_before_opening() {
    use guideloom_storage::{verify, Manifest, StorageError, StreamWriter};
    // A FIFO as the manifest.
    let dir = tempfile::tempdir().unwrap();
    token_storage(dir.path());
    std::fs::remove_file(dir.path().join("manifest.json")).unwrap();
    mkfifo(&dir.path().join("manifest.json"));
    let p = dir.path().to_path_buf();
    let e = within_watchdog("loading a FIFO manifest", move || Manifest::load(&p).unwrap_err());
    assert!(refused(&e, "manifest.json"), "{e}");

    // A FIFO and a directory as a shard.
    let dir = tempfile::tempdir().unwrap();
    token_storage(dir.path());
    let shard = dir.path().join("shard-00001.stream");
    std::fs::remove_file(&shard).unwrap();
    mkfifo(&shard);
    let p = dir.path().to_path_buf();
    let e = within_watchdog("opening a FIFO shard", move || {
        StreamReader::open(&p, TokenFormat::<u16>::new()).unwrap_err()
    });
    assert!(refused(&e, "shard-00001.stream"), "{e}");
    let p = dir.path().to_path_buf();
    let e = within_watchdog("verifying a FIFO shard", move || verify(&p).unwrap_err());
    assert!(refused(&e, "shard-00001.stream"), "{e}");
    let p = dir.path().to_path_buf();
    let e = within_watchdog("appending to a FIFO shard", move || {
        let mut w = StreamWriter::open(&p, TokenFormat::<u16>::new()).unwrap();
        w.append(1, &[1]).unwrap_err()
    });
    assert!(refused(&e, "shard-00001.stream"), "{e}");
    std::fs::remove_file(&shard).unwrap();
    std::fs::create_dir(&shard).unwrap();
    let e = StreamReader::open(dir.path(), TokenFormat::<u16>::new()).unwrap_err();
    assert!(
        matches!(&e, StorageError::UnsafeFile { reason, .. } if reason.contains("directory")),
        "a directory is not a short shard: {e}"
    );

    // A FIFO as the writer lock.
    let dir = tempfile::tempdir().unwrap();
    mkfifo(&dir.path().join(".writer.lock"));
    let p = dir.path().to_path_buf();
    let e = within_watchdog("locking through a FIFO", move || {
        StreamWriter::open(&p, TokenFormat::<u16>::new()).unwrap_err()
    });
    assert!(refused(&e, ".writer.lock"), "{e}");
}

#[test]
fn issue19_appends_that_lose_updates_are_refused_and_leftovers_reused() {
    use guideloom_storage::{StorageError, StreamWriter};
    let dir = tempfile::tempdir().unwrap();
    let mut a = StreamWriter::open(dir.path(), TokenFormat::<u16>::new()).unwrap();
    a.append(0, &[1, 2]).unwrap();
    a.commit().unwrap();
    // A second writer waits for the lock: it cannot read the manifest before the first commits.
    let e = StreamWriter::open(dir.path(), TokenFormat::<u16>::new()).unwrap_err();
    assert!(matches!(e, StorageError::Locked { .. }), "{e}");
    // One that gets around the lock (its file removed under the first writer) commits; the
    // first writer's next commit would replace that manifest, losing its update: refused.
    std::fs::remove_file(dir.path().join(".writer.lock")).unwrap();
    let mut b = StreamWriter::open(dir.path(), TokenFormat::<u16>::new()).unwrap();
    b.append(1, &[9]).unwrap();
    b.commit().unwrap();
    drop(b);
    a.append(0, &[3]).unwrap();
    let e = a.commit().unwrap_err();
    assert!(matches!(e, StorageError::ConcurrentCommit { .. }), "{e}");
    drop(a);
    let r = StreamReader::open(dir.path(), TokenFormat::<u16>::new()).unwrap();
    assert_eq!(r.read(Window::new(0, 3)).unwrap(), vec![1, 2, 9]);

    // An interrupted writer leaves a shard file no manifest names; the next writer reuses it.
    let mut w = StreamWriter::open(dir.path(), TokenFormat::<u16>::new()).unwrap();
    w.append(5, &[4, 4, 4, 4]).unwrap();
    w.append(6, &vec![0; 600_000]).unwrap();
    drop(w);
    assert!(dir.path().join("shard-00006.stream").exists());
    let mut w = StreamWriter::open(dir.path(), TokenFormat::<u16>::new()).unwrap();
    w.append(6, &[8]).unwrap();
    w.commit().unwrap();
    drop(w);
    assert_eq!(std::fs::metadata(dir.path().join("shard-00006.stream")).unwrap().len(), 2);
    let r = StreamReader::open(dir.path(), TokenFormat::<u16>::new()).unwrap();
    assert_eq!(r.read(Window::new(0, 4)).unwrap(), vec![1, 2, 9, 8]);
}

/// The storage of [`issue19_descriptors_under_any_limit_every_backend_reads_300_shards`]:
/// 300 shards of 5 tokens (shard `s` holds `5s .. 5s + 5`).
fn many_shards(dir: &Path) {
    use guideloom_storage::StreamWriter;
    let mut w = StreamWriter::open(dir, TokenFormat::<u16>::new()).unwrap();
    for s in 0..300u32 {
        w.append(u64::from(s), &(5 * s..5 * s + 5).collect::<Vec<u32>>()).unwrap();
    }
    w.commit().unwrap();
}

/// Issue 19, class 8 (descriptors under any limit): with 300 shards and `RLIMIT_NOFILE` 64,
/// readers with the default cap of 128 descriptors failed with `EMFILE` on every backend. The
/// cap now follows the process's free descriptors, and an `EMFILE` evicts and retries.
#[test]
fn issue19_descriptors_under_any_limit_every_backend_reads_300_shards() {
    let dir = tempfile::tempdir().unwrap();
    many_shards(dir.path());
    run_child(
        "regression::descriptors_child",
        &[("GUIDELOOM_TEST_STORAGE", dir.path().to_str().unwrap()), ("GUIDELOOM_TEST_NOFILE", "64")],
    );
}

/// Issue 19, class 8: the budget was computed per reader, at open, so four readers opened one
/// after another each took half of what was free and together ran the process into its
/// limit (surviving only through the `EMFILE` retry). All readers now share one count of the
/// descriptors they cache, held to one process-wide budget.
#[test]
fn issue19_descriptors_under_any_limit_are_one_budget_shared_by_every_reader() {
    let dir = tempfile::tempdir().unwrap();
    many_shards(dir.path());
    run_child(
        "regression::shared_budget_child",
        &[("GUIDELOOM_TEST_SHARED", dir.path().to_str().unwrap()), ("GUIDELOOM_TEST_NOFILE", "64")],
    );
}

/// Child half of [`issue19_descriptors_under_any_limit_are_one_budget_shared_by_every_reader`];
/// does nothing in a normal run.
#[test]
fn shared_budget_child() {
    let Ok(dir) = std::env::var("GUIDELOOM_TEST_SHARED") else { return };
    let n: u64 = std::env::var("GUIDELOOM_TEST_NOFILE").unwrap().parse().unwrap();
    let limit = libc::rlimit { rlim_cur: n, rlim_max: n };
    // SAFETY: `setrlimit` reads a valid, initialized `rlimit` for this process only.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) }, 0);
    let fds = || std::fs::read_dir("/proc/self/fd").unwrap().count();
    let baseline = fds();
    let options = ReadOptions::default().backend(std::sync::Arc::new(PreadBackend));
    let readers: Vec<StreamReader<TokenFormat<u16>>> = (0..4)
        .map(|_| StreamReader::open_with(&dir, TokenFormat::<u16>::new(), options.clone()).unwrap())
        .collect();
    let budget = guideloom_storage::shared_descriptor_budget();
    assert!((8..64).contains(&budget), "{budget}");
    let mut most = 0;
    // Every reader reads every shard, the readers taking turns shard by shard.
    for s in 0..300u64 {
        for r in &readers {
            assert_eq!(
                r.read(Window::new(s * 5, 5)).unwrap(),
                (s as u16 * 5..s as u16 * 5 + 5).collect::<Vec<_>>()
            );
            assert!(
                guideloom_storage::open_descriptors() <= budget,
                "{} > {budget}",
                guideloom_storage::open_descriptors()
            );
            most = most.max(fds());
        }
    }
    // Before: each reader cached up to its own cap, 4 x (free - margin) / 2, and the process hit
    // its limit of 64 (EMFILE, then a retry). Now the cached descriptors stay within one budget.
    assert!(most <= baseline + budget + 1, "{most} descriptors open, baseline {baseline}, budget {budget}");
    assert!(most < 64);
    drop(readers);
    assert_eq!(guideloom_storage::open_descriptors(), 0);
    println!("child-checked");
}

/// Child half of [`issue19_descriptors_under_any_limit_every_backend_reads_300_shards`]; does
/// nothing in a normal run.
#[test]
fn descriptors_child() {
    let Ok(dir) = std::env::var("GUIDELOOM_TEST_STORAGE") else { return };
    let n: u64 = std::env::var("GUIDELOOM_TEST_NOFILE").unwrap().parse().unwrap();
    let limit = libc::rlimit { rlim_cur: n, rlim_max: n };
    // SAFETY: `setrlimit` reads a valid, initialized `rlimit` for this process only.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) }, 0);
    assert!(guideloom_storage::descriptor_budget() < 64);
    let want: Vec<u16> = (0..1500u16).collect();
    for (name, options) in crate::common::backends() {
        let r = StreamReader::open_with(&dir, TokenFormat::<u16>::new(), options).unwrap();
        // Windows crossing every shard boundary, in an order that revisits shards.
        let keys: Vec<Window> = (0..299u64).map(|s| Window::new((s * 7 % 299) * 5 + 3, 4)).collect();
        let got = r.read_many(&keys).unwrap_or_else(|e| panic!("{name}: {e}"));
        for (k, g) in keys.iter().zip(&got) {
            let start = k.offset as usize;
            assert_eq!(g[..], want[start..start + 4], "{name}");
        }
        assert_eq!(r.read(Window::new(0, 1500)).unwrap_or_else(|e| panic!("{name}: {e}")), want, "{name}");
    }
    println!("child-checked");
}

/// A stream storage of `shards` shards of one u16 token each (token `i` in shard `i`), its
/// files and manifest written directly (fast for many shards); checksums are real.
fn many_tiny_shards(dir: &Path, shards: u64) {
    use guideloom_storage::StreamWriter;
    let mut w = StreamWriter::open(dir, TokenFormat::<u16>::new()).unwrap();
    w.append(0, &[0]).unwrap();
    w.commit().unwrap();
    drop(w);
    let m = dir.join("manifest.json");
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&m).unwrap()).unwrap();
    let mut entries = Vec::new();
    for i in 0..shards {
        let bytes = (i as u16).to_le_bytes();
        std::fs::write(dir.join(format!("shard-{i:05}.stream")), bytes).unwrap();
        let mut e = v["shards"][0].clone();
        e["id"] = i.into();
        e["checksum"] = crc32c::crc32c(&bytes).into();
        entries.push(e);
    }
    v["shards"] = entries.into();
    std::fs::write(&m, serde_json::to_vec(&v).unwrap()).unwrap();
}

/// Issue 20 moved the open-time check of every shard file (issue 19's rule: a regular file of
/// at least its committed size) to one `fstatat` per file relative to the storage directory,
/// split over threads for many shards. The fault reported is still the first in shard order,
/// whichever thread's part of the list holds it, with the same variant and path as before:
/// 20,000 shards (two or more parts), faults added from the back.
#[test]
fn issue20_parallel_shard_checks_report_the_first_fault_in_shard_order() {
    use guideloom_storage::StorageError;
    let dir = tempfile::tempdir_in("/dev/shm").or_else(|_| tempfile::tempdir()).unwrap();
    many_tiny_shards(dir.path(), 20_000);
    let open = || StreamReader::open(dir.path(), TokenFormat::<u16>::new());
    let r = open().unwrap();
    assert_eq!(r.len(), 20_000);
    assert_eq!(r.read(Window::new(19_998, 2)).unwrap(), [19_998, 19_999]);
    let name = |i: u64| dir.path().join(format!("shard-{i:05}.stream"));

    // A short shard near the end.
    std::fs::write(name(19_000), b"").unwrap();
    match open().unwrap_err() {
        StorageError::ShardTooShort { shard, path, expected, actual } => {
            assert_eq!((shard, path, expected, actual), (19_000, name(19_000), 2, 0))
        }
        e => panic!("unexpected {e}"),
    }
    // A link before it, in another part of the list.
    std::fs::remove_file(name(12_000)).unwrap();
    std::os::unix::fs::symlink(name(1), name(12_000)).unwrap();
    let e = open().unwrap_err();
    assert!(
        matches!(&e, StorageError::UnsafeFile { path, reason } if *path == name(12_000) && reason.contains("symbolic link")),
        "{e}"
    );
    // A directory before that.
    std::fs::remove_file(name(9_000)).unwrap();
    std::fs::create_dir(name(9_000)).unwrap();
    let e = open().unwrap_err();
    assert!(
        matches!(&e, StorageError::UnsafeFile { path, reason } if *path == name(9_000) && reason.contains("directory")),
        "{e}"
    );
    // A missing shard in the first part.
    std::fs::remove_file(name(3)).unwrap();
    match open().unwrap_err() {
        StorageError::MissingShard { shard, path } => assert_eq!((shard, path), (3, name(3))),
        e => panic!("unexpected {e}"),
    }
}

/// With the shard files checked all at once after the manifest's entries (issue 20), the
/// first fault in shard order is still the one reported when a manifest entry and a file are
/// both wrong: a missing file before a bad entry is a `MissingShard`, a bad entry before a
/// missing file an `InvalidManifest`.
#[test]
fn issue20_a_bad_manifest_entry_and_a_missing_file_report_the_first_in_shard_order() {
    use guideloom_storage::StorageError;
    let dir = tempfile::tempdir().unwrap();
    many_tiny_shards(dir.path(), 8);
    let m = dir.path().join("manifest.json");
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&m).unwrap()).unwrap();
    v["shards"][4]["elements"] = 7.into(); // 7 elements of 2 bytes, but 2 bytes
    std::fs::write(&m, serde_json::to_vec(&v).unwrap()).unwrap();
    let open = || StreamReader::open(dir.path(), TokenFormat::<u16>::new()).unwrap_err();
    let e = open();
    assert!(
        matches!(&e, StorageError::InvalidManifest { reason, .. } if reason.starts_with("shard 4 records 7 elements")),
        "{e}"
    );
    std::fs::remove_file(dir.path().join("shard-00006.stream")).unwrap();
    let e = open();
    assert!(matches!(&e, StorageError::InvalidManifest { .. }), "{e}");
    std::fs::remove_file(dir.path().join("shard-00002.stream")).unwrap();
    let e = open();
    assert!(matches!(&e, StorageError::MissingShard { shard: 2, .. }), "{e}");
}

/// A hook run once, at a point of a writer's opening.
type Hook = std::sync::Mutex<Option<Box<dyn FnOnce() + Send>>>;

/// A local directory that pauses a writer at the two points of its opening where another
/// writer's commit matters: just before it takes the writer lock (`before_lock`), and just
/// after it has read the manifest (`after_manifest`). With `lockless` it takes no lock (as an
/// object store), so a second writer can commit between the manifest read and the commit.
struct RaceDir {
    inner: guideloom_storage::LocalDir,
    lockless: bool,
    before_lock: Hook,
    after_manifest: Hook,
}

impl std::fmt::Debug for RaceDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RaceDir").field("inner", &self.inner).finish_non_exhaustive()
    }
}

impl RaceDir {
    fn new(path: &Path, lockless: bool) -> Self {
        RaceDir {
            inner: guideloom_storage::LocalDir::new(path),
            lockless,
            before_lock: Hook::default(),
            after_manifest: Hook::default(),
        }
    }

    fn run(hook: &Hook) {
        let f = hook.lock().unwrap().take();
        if let Some(f) = f {
            f();
        }
    }
}

impl guideloom_storage::StorageDir for RaceDir {
    fn path(&self) -> &Path {
        self.inner.path()
    }
    fn file_len(&self, name: &str) -> guideloom_storage::Result<Option<u64>> {
        self.inner.file_len(name)
    }
    fn read_at(&self, name: &str, offset: u64, out: &mut [u8]) -> guideloom_storage::Result<()> {
        self.inner.read_at(name, offset, out)
    }
    fn read_file(&self, name: &str, max_len: u64) -> guideloom_storage::Result<Option<Vec<u8>>> {
        let r = self.inner.read_file(name, max_len);
        if name == guideloom_storage::MANIFEST_FILE {
            Self::run(&self.after_manifest);
        }
        r
    }
}

impl guideloom_storage::WriteDir for RaceDir {
    fn create_dir(&self) -> guideloom_storage::Result<()> {
        self.inner.create_dir()
    }
    fn lock(&self) -> guideloom_storage::Result<guideloom_storage::DirLock> {
        Self::run(&self.before_lock);
        if self.lockless {
            Ok(guideloom_storage::DirLock::none())
        } else {
            self.inner.lock()
        }
    }
    fn open_write(
        &self,
        name: &str,
        create: bool,
    ) -> guideloom_storage::Result<Box<dyn guideloom_storage::WriteFile>> {
        self.inner.open_write(name, create)
    }
    fn rename(&self, from: &str, to: &str) -> guideloom_storage::Result<()> {
        self.inner.rename(from, to)
    }
    fn sync_dir(&self) -> guideloom_storage::Result<()> {
        self.inner.sync_dir()
    }
    fn replace_if(&self, name: &str, expected: Option<&[u8]>, bytes: &[u8]) -> guideloom_storage::Result<()> {
        self.inner.replace_if(name, expected, bytes)
    }
}

/// Issue 32 class 7: the old check of the append race paused a writer on a planted FIFO
/// lock, which is refused now. The writer is now paused deterministically (a `WriteDir`
/// that runs a second writer at the pause): a second writer's commit just before the first
/// takes its lock is read by the first (both shards' tokens stay); one between the first's
/// manifest read and its commit (a directory without a lock, as an object store) makes the
/// first's commit a `ConcurrentCommit`, and after reopening both writers' tokens are there.
#[test]
fn issue32_a_second_writer_committing_at_the_pause_loses_no_token() {
    use guideloom_storage::{StorageError, StreamWriter, WriteDir};
    let fmt = TokenFormat::<u16>::new;
    let second = |path: std::path::PathBuf, shard: u64, tokens: Vec<u32>| {
        move || {
            let mut w = StreamWriter::open(&path, TokenFormat::<u16>::new()).unwrap();
            w.append(shard, &tokens).unwrap();
            w.commit().unwrap();
        }
    };
    for lockless in [false, true] {
        let tmp = tempfile::tempdir().unwrap();
        let mut w = StreamWriter::open(tmp.path(), fmt()).unwrap();
        w.append(0, &[1, 2]).unwrap();
        w.commit().unwrap();
        drop(w);
        // Paused before locking: the second writer commits shard 1 there.
        let dir = std::sync::Arc::new(RaceDir::new(tmp.path(), lockless));
        *dir.before_lock.lock().unwrap() = Some(Box::new(second(tmp.path().to_path_buf(), 1, vec![7, 8])));
        let as_dir: std::sync::Arc<dyn WriteDir> = dir.clone();
        let mut a = StreamWriter::open_in(as_dir, fmt()).unwrap();
        a.append(0, &[3]).unwrap();
        a.commit().unwrap();
        drop(a);
        let r = StreamReader::open(tmp.path(), fmt()).unwrap();
        assert_eq!(
            r.read(Window::new(0, 5)).unwrap(),
            vec![1, 2, 3, 7, 8],
            "lockless {lockless}: before the lock"
        );
        if !lockless {
            continue;
        }
        // Paused after the manifest read, without a lock: the second writer commits shard 2.
        let dir = std::sync::Arc::new(RaceDir::new(tmp.path(), true));
        *dir.after_manifest.lock().unwrap() = Some(Box::new(second(tmp.path().to_path_buf(), 2, vec![9])));
        let as_dir: std::sync::Arc<dyn WriteDir> = dir.clone();
        let mut a = StreamWriter::open_in(as_dir, fmt()).unwrap();
        a.append(0, &[4]).unwrap();
        let e = a.commit().unwrap_err();
        assert!(matches!(e, StorageError::ConcurrentCommit { .. }), "{e}");
        drop(a);
        let r = StreamReader::open(tmp.path(), fmt()).unwrap();
        assert_eq!(
            r.read(Window::new(0, 6)).unwrap(),
            vec![1, 2, 3, 7, 8, 9],
            "the second writer's commit stays"
        );
        // The first writer tries again: it reads the second's manifest, and nothing is lost.
        let mut a = StreamWriter::open(tmp.path(), fmt()).unwrap();
        a.append(0, &[4]).unwrap();
        a.commit().unwrap();
        drop(a);
        let r = StreamReader::open(tmp.path(), fmt()).unwrap();
        assert_eq!(r.read(Window::new(0, 7)).unwrap(), vec![1, 2, 3, 4, 7, 8, 9]);
    }
}
