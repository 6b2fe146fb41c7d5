//! Issue 8, items 2 and 3: crash consistency and concurrent readers, across processes.
//!
//! A writer runs in a child process (this test binary re-invoked on [`child_role`] with
//! `GUIDELOOM_TEST_CHILD` set). It appends a deterministic sequence of records, commits every
//! [`PER_COMMIT`] records and reports `COMMITTED <records>` on stdout after each commit
//! returns. The parent SIGKILLs it at a random point and checks that the storage opens,
//! holds exactly the records of the last reported commit (or of the one after it, when the
//! kill landed after the rename but before the report), passes `verify()`, and takes new
//! appends and a commit.
//!
//! `GUIDELOOM_CRASH_SEEDS` (default 24) sets the number of kills.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use guideloom_formats::{DocumentTokensFormat, RawBytesFormat, TokenDocument, TokenFormat};
use guideloom_storage::{
    verify, DocumentWriter, LocalDir, ReadOptions, StorageError, StreamWithMetaWriter, StreamWriter, Window,
    WriteDir,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::common::backends;
use crate::hostile::{read_all, scratch_dir, Data, Kind, KINDS};

/// Records per commit in the child writer.
const PER_COMMIT: u64 = 3;

/// Shard of record `k`.
fn shard_of(k: u64) -> u64 {
    [0, 2, 5][(k % 3) as usize]
}

/// A writer of any kind appending record `k` of the deterministic sequence.
pub(crate) enum AnyWriter {
    Stream(StreamWriter<TokenFormat<u16>>),
    Document(DocumentWriter<RawBytesFormat>),
    Meta(StreamWithMetaWriter<DocumentTokensFormat<u16>>),
}

impl AnyWriter {
    fn open(kind: Kind, dir: &Path) -> Result<Self, StorageError> {
        Self::open_in(kind, Arc::new(LocalDir::new(dir)))
    }

    /// A writer of `kind` writing through `dir`.
    pub(crate) fn open_in(kind: Kind, dir: Arc<dyn WriteDir>) -> Result<Self, StorageError> {
        Ok(match kind {
            Kind::Stream => AnyWriter::Stream(StreamWriter::open_in(dir, TokenFormat::<u16>::new())?),
            Kind::Document => AnyWriter::Document(DocumentWriter::open_in(dir, RawBytesFormat)?),
            Kind::Meta => {
                AnyWriter::Meta(StreamWithMetaWriter::open_in(dir, DocumentTokensFormat::<u16>::new())?)
            }
        })
    }

    /// Appends record `k` to its shard of the sequence ([`shard_of`]).
    pub(crate) fn append(&mut self, k: u64) -> Result<(), StorageError> {
        self.append_to(shard_of(k), k)
    }

    /// Appends record `k` of the sequence to shard `shard`.
    pub(crate) fn append_to(&mut self, shard: u64, k: u64) -> Result<(), StorageError> {
        match self {
            AnyWriter::Stream(w) => {
                let tokens: Vec<u32> = (0..k % 5 + 1).map(|j| ((k * 31 + j) % 65_536) as u32).collect();
                w.append(shard, &tokens)?;
            }
            AnyWriter::Document(w) => {
                let doc: Vec<u8> = (0..k % 7).map(|j| (k + j) as u8).collect();
                w.append(shard, &doc)?;
            }
            AnyWriter::Meta(w) => {
                let doc = TokenDocument {
                    ordinal: k,
                    tokens: (0..k % 4).map(|j| ((k * 7 + j) % 65_536) as u32).collect(),
                    data: vec![k as u8; (k % 3) as usize],
                };
                w.append(shard, &[doc])?;
            }
        }
        Ok(())
    }

    pub(crate) fn commit(&mut self) -> Result<(), StorageError> {
        match self {
            AnyWriter::Stream(w) => w.commit(),
            AnyWriter::Document(w) => w.commit(),
            AnyWriter::Meta(w) => w.commit(),
        }
    }

    /// Sets a key of the user metadata (committed with the next commit).
    pub(crate) fn set_metadata(&mut self, key: &str, value: serde_json::Value) {
        match self {
            AnyWriter::Stream(w) => w.set_metadata(key, value),
            AnyWriter::Document(w) => w.set_metadata(key, value),
            AnyWriter::Meta(w) => w.set_metadata(key, value),
        }
    }
}

/// What a storage holding records `0..n` of the sequence reads as (written in one session).
fn expected(kind: Kind, n: u64) -> Data {
    let dir = scratch_dir();
    let mut w = AnyWriter::open(kind, dir.path()).unwrap();
    for k in 0..n {
        w.append(k).unwrap();
    }
    w.commit().unwrap();
    read_all(kind, dir.path(), ReadOptions::default()).unwrap()
}

fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Stream => "stream",
        Kind::Document => "document",
        Kind::Meta => "meta",
    }
}

fn kind_from(name: &str) -> Kind {
    match name {
        "stream" => Kind::Stream,
        "document" => Kind::Document,
        _ => Kind::Meta,
    }
}

/// The child side: `GUIDELOOM_TEST_CHILD=writer` appends records from `GUIDELOOM_TEST_START`
/// to the storage in `GUIDELOOM_TEST_DIR`, commits every [`PER_COMMIT`] records, prints
/// `COMMITTED <records>` after each commit, and stops after `GUIDELOOM_TEST_COMMITS` commits.
/// With `GUIDELOOM_TEST_STEPPED` set it reads a line from stdin before each commit (the parent
/// paces the commits). A no-op in a normal test run.
#[test]
fn child_role() {
    let Ok(role) = std::env::var("GUIDELOOM_TEST_CHILD") else { return };
    assert_eq!(role, "writer");
    let env = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("{k} unset"));
    let dir = PathBuf::from(env("GUIDELOOM_TEST_DIR"));
    let kind = kind_from(&env("GUIDELOOM_TEST_KIND"));
    let mut k: u64 = env("GUIDELOOM_TEST_START").parse().unwrap();
    let commits: u64 = env("GUIDELOOM_TEST_COMMITS").parse().unwrap();
    let stepped = std::env::var_os("GUIDELOOM_TEST_STEPPED").is_some();
    let mut w = AnyWriter::open(kind, &dir).unwrap();
    let mut out = std::io::stdout().lock();
    let mut go = String::new();
    for _ in 0..commits {
        for _ in 0..PER_COMMIT {
            w.append(k).unwrap();
            k += 1;
        }
        if stepped {
            go.clear();
            std::io::stdin().read_line(&mut go).unwrap();
        }
        w.commit().unwrap();
        use std::io::Write;
        writeln!(out, "COMMITTED {k}").unwrap();
        out.flush().unwrap();
    }
}

/// Starts the writer child on `dir`; returns it and a channel of the record counts it
/// reports as committed.
fn spawn_writer(kind: Kind, dir: &Path, start: u64, commits: u64) -> (Child, mpsc::Receiver<u64>) {
    spawn_writer_with(kind, dir, start, commits, false)
}

/// [`spawn_writer`]; when `stepped`, the child waits for a line on its stdin (piped; take it
/// from the child) before each commit.
fn spawn_writer_with(
    kind: Kind,
    dir: &Path,
    start: u64,
    commits: u64,
    stepped: bool,
) -> (Child, mpsc::Receiver<u64>) {
    let mut command = Command::new(std::env::current_exe().unwrap());
    if stepped {
        command.env("GUIDELOOM_TEST_STEPPED", "1").stdin(Stdio::piped());
    } else {
        command.stdin(Stdio::null());
    }
    let mut child = command
        .args(["--exact", "crash::child_role", "--nocapture", "--test-threads", "1", "-q"])
        .env("GUIDELOOM_TEST_CHILD", "writer")
        .env("GUIDELOOM_TEST_DIR", dir)
        .env("GUIDELOOM_TEST_KIND", kind_name(kind))
        .env("GUIDELOOM_TEST_START", start.to_string())
        .env("GUIDELOOM_TEST_COMMITS", commits.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            // Keeps draining when nobody listens, so the child never writes to a closed pipe.
            if let Some(n) = line.strip_prefix("COMMITTED ") {
                let _ = tx.send(n.trim().parse::<u64>().unwrap());
            }
        }
    });
    (child, rx)
}

/// Item 2: SIGKILL a writer child at random points (24 seeds in CI, `GUIDELOOM_CRASH_SEEDS`
/// for more), over all three kinds: the storage opens with exactly the records of the last
/// reported commit (or the next one), `verify()` passes, and a new writer appends and commits.
#[test]
fn killed_writer_leaves_the_last_commit() {
    let seeds: u64 = std::env::var("GUIDELOOM_CRASH_SEEDS").ok().and_then(|v| v.parse().ok()).unwrap_or(24);
    let mut cache: std::collections::HashMap<(Kind, u64), Data> = Default::default();
    let mut expect = |kind: Kind, n: u64| cache.entry((kind, n)).or_insert_with(|| expected(kind, n)).clone();
    let mut outcomes = [0u64; 2];
    for seed in 0..seeds {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let kind = KINDS[(seed % 3) as usize];
        let tmp = scratch_dir();
        let dir = tmp.path().join("s");
        // A first session commits 2 batches, so the killed one continues an existing storage.
        let (mut first, _) = spawn_writer(kind, &dir, 0, 2);
        assert!(first.wait().unwrap().success());
        let (mut child, rx) = spawn_writer(kind, &dir, 2 * PER_COMMIT, 1_000_000);
        let wait_for = rng.random_range(0..4u64);
        let mut last = 2 * PER_COMMIT;
        while last < 2 * PER_COMMIT + wait_for * PER_COMMIT {
            last = rx.recv_timeout(Duration::from_secs(60)).expect("the writer child reports commits");
        }
        std::thread::sleep(Duration::from_micros(rng.random_range(0..3_000)));
        // The writer is still running (it commits a million times), so the kill lands in it.
        assert!(child.try_wait().unwrap().is_none(), "seed {seed}: the writer ended before the kill");
        child.kill().unwrap(); // SIGKILL
        let status = child.wait().unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(libc::SIGKILL),
            "seed {seed}"
        );
        // Reports printed before the kill are still in the pipe.
        while let Ok(n) = rx.recv_timeout(Duration::from_secs(10)) {
            last = n;
        }
        let opened = read_all(kind, &dir, ReadOptions::default())
            .unwrap_or_else(|e| panic!("seed {seed} ({kind:?}): open after kill failed: {e}"));
        let n = if opened == expect(kind, last) {
            outcomes[0] += 1;
            last
        } else {
            assert_eq!(
                opened,
                expect(kind, last + PER_COMMIT),
                "seed {seed} ({kind:?}): neither commit {last} nor the next one"
            );
            outcomes[1] += 1;
            last + PER_COMMIT
        };
        for (name, opts) in backends() {
            assert_eq!(read_all(kind, &dir, opts).unwrap(), opened, "backend {name}");
        }
        verify(&dir).unwrap_or_else(|e| panic!("seed {seed} ({kind:?}): verify after kill: {e}"));
        let mut w = AnyWriter::open(kind, &dir).unwrap();
        w.append(n).unwrap();
        w.append(n + 1).unwrap();
        w.commit().unwrap();
        drop(w);
        assert_eq!(read_all(kind, &dir, ReadOptions::default()).unwrap(), expect(kind, n + 2), "seed {seed}");
        verify(&dir).unwrap();
    }
    eprintln!(
        "crash: {seeds} kills: {} at the last reported commit, {} one commit later",
        outcomes[0], outcomes[1]
    );
    // Random kills land mostly outside the short window between a rename and its report;
    // `power_loss` covers that window (and every other point) deterministically.
    assert!(outcomes[0] > 0, "no kill landed outside a rename window: {outcomes:?}");
}

/// Item 2, the manifest replacement: a kill between writing `manifest.json.tmp` and renaming
/// it leaves the tmp file (complete or partial) and uncommitted bytes past every shard's
/// committed length. Readers see the last commit, `verify()` passes, and the next writer
/// discards the leftovers, commits, and leaves no tmp file.
#[test]
fn stale_manifest_tmp_and_uncommitted_bytes_are_ignored() {
    for kind in KINDS {
        for complete_tmp in [false, true] {
            let tmp = scratch_dir();
            let dir = tmp.path();
            let mut w = AnyWriter::open(kind, dir).unwrap();
            for k in 0..6 {
                w.append(k).unwrap();
            }
            w.commit().unwrap();
            drop(w);
            // The newer manifest a killed commit of 3 more records would have written.
            let newer = scratch_dir();
            let mut w = AnyWriter::open(kind, newer.path()).unwrap();
            for k in 0..9 {
                w.append(k).unwrap();
            }
            w.commit().unwrap();
            drop(w);
            let mut text = std::fs::read(newer.path().join("manifest.json")).unwrap();
            if !complete_tmp {
                text.truncate(text.len() / 2);
            }
            std::fs::write(dir.join("manifest.json.tmp"), &text).unwrap();
            // Uncommitted bytes past the committed length of every file.
            for e in std::fs::read_dir(dir).unwrap() {
                let p = e.unwrap().path();
                if p.file_name().unwrap().to_str().unwrap().starts_with("shard-") {
                    let mut b = std::fs::read(&p).unwrap();
                    b.extend_from_slice(&[0xEE; 13]);
                    std::fs::write(&p, b).unwrap();
                }
            }
            for (name, opts) in backends() {
                assert_eq!(read_all(kind, dir, opts).unwrap(), expected(kind, 6), "{kind:?} {name}");
            }
            verify(dir).unwrap();
            let mut w = AnyWriter::open(kind, dir).unwrap();
            for k in 6..8 {
                w.append(k).unwrap();
            }
            w.commit().unwrap();
            drop(w);
            assert!(!dir.join("manifest.json.tmp").exists());
            assert_eq!(read_all(kind, dir, ReadOptions::default()).unwrap(), expected(kind, 8), "{kind:?}");
            verify(dir).unwrap();
        }
    }
}

/// Item 3: a reader opened before another process appends and commits 20 times keeps reading
/// exactly its snapshot (with every backend) while the writer runs: the parent paces the
/// writer's commits, and reads with every reader while each commit is in flight and again
/// after it is reported (a reader opened then sees that commit); after the writer ended the
/// old readers still read their snapshot.
#[test]
fn reader_keeps_its_snapshot_while_another_process_commits() {
    use std::io::Write;
    for kind in KINDS {
        let tmp = scratch_dir();
        let dir = tmp.path().join("s");
        let (mut first, _) = spawn_writer(kind, &dir, 0, 2);
        assert!(first.wait().unwrap().success());
        let snapshot = expected(kind, 2 * PER_COMMIT);
        let readers: Vec<_> =
            backends().into_iter().map(|(name, opts)| (name, Reader::open(kind, &dir, opts))).collect();
        let (mut child, rx) = spawn_writer_with(kind, &dir, 2 * PER_COMMIT, 20, true);
        let mut go = child.stdin.take().unwrap();
        let mut reads = 0u64;
        for c in 1..=20u64 {
            writeln!(go).unwrap(); // commit c may start
            for (name, r) in &readers {
                assert_eq!(r.read_all(), snapshot, "{kind:?} [{name}] during commit {c}");
                reads += 1;
            }
            let n = rx.recv_timeout(Duration::from_secs(60)).expect("the writer child reports commits");
            assert_eq!(n, (2 + c) * PER_COMMIT, "{kind:?}: commit {c}");
            for (name, r) in &readers {
                assert_eq!(r.read_all(), snapshot, "{kind:?} [{name}] after commit {c}");
                reads += 1;
            }
            let now = read_all(kind, &dir, ReadOptions::default()).unwrap();
            assert_eq!(now, expected(kind, n), "{kind:?}: a reader opened after commit {c}");
        }
        drop(go);
        assert!(child.wait().unwrap().success());
        assert_eq!(reads, 40 * readers.len() as u64);
        for (name, r) in &readers {
            assert_eq!(r.read_all(), snapshot, "{kind:?} [{name}] after the writer ended");
        }
    }
}

/// A reader of any kind kept open across the writer's commits.
enum Reader {
    Stream(guideloom_storage::StreamReader<TokenFormat<u16>>),
    Document(guideloom_storage::DocumentReader<RawBytesFormat>),
    Meta(guideloom_storage::StreamWithMetaReader<DocumentTokensFormat<u16>>),
}

impl Reader {
    fn open(kind: Kind, dir: &Path, opts: ReadOptions) -> Self {
        match kind {
            Kind::Stream => Reader::Stream(
                guideloom_storage::StreamReader::open_with(dir, TokenFormat::<u16>::new(), opts).unwrap(),
            ),
            Kind::Document => Reader::Document(
                guideloom_storage::DocumentReader::open_with(dir, RawBytesFormat, opts).unwrap(),
            ),
            Kind::Meta => Reader::Meta(
                guideloom_storage::StreamWithMetaReader::open_with(
                    dir,
                    DocumentTokensFormat::<u16>::new(),
                    opts,
                )
                .unwrap(),
            ),
        }
    }

    /// Reads everything as [`read_all`] does, through this already-open reader.
    fn read_all(&self) -> Data {
        let windows = |n: u64| (0..n).step_by(3).map(|o| Window::new(o, 4.min(n - o))).collect::<Vec<_>>();
        match self {
            Reader::Stream(r) => Data::Stream(
                r.read(Window::new(0, r.len())).unwrap(),
                r.read_many(&windows(r.len())).unwrap(),
            ),
            Reader::Document(r) => {
                let all: Vec<u64> = (0..r.len()).collect();
                let rev: Vec<u64> = all.iter().rev().copied().collect();
                Data::Docs(r.get_many(&all).unwrap(), r.get_many(&rev).unwrap())
            }
            Reader::Meta(r) => {
                Data::Meta(r.read(Window::new(0, r.len())).unwrap(), r.read_many(&windows(r.len())).unwrap())
            }
        }
    }
}
