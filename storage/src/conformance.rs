//! The contract of the file-access seam, as checks any implementation can be run through:
//! functions over `&dyn StorageDir` and `&dyn WriteDir` that panic, naming the directory and
//! what it got wrong, where an implementation breaks the contract the traits document. The
//! crate runs them over [`crate::LocalDir`], [`crate::MemDir`], the power-loss test file
//! system and the remote directory on the S3 test server; another crate's tests call them on
//! their own directories the same way (object_store's `integration` module and tantivy's
//! directory tests are the model).
//!
//! Compiled with the `test-util` feature only (a dev-dependency:
//! `guideloom-storage = { version = "0.1", features = ["test-util"] }`).
//!
//! - [`check_read`]: a directory holding [`fixture`]'s files (written by other means, or by
//!   [`write_fixture`]) answers lengths, positional reads and their bounds, whole-file reads
//!   and their cut, batched reads (request order, buffer length, file index, bounds), the
//!   length check ([`crate::LengthFault`]), listing, readahead hints and expectations, and
//!   refuses names that leave the storage.
//! - [`check_write`]: an empty writable directory creates, locks, opens, writes, cuts,
//!   extends, syncs, renames and replaces ([`WriteDir::replace_if`]'s comparisons) as
//!   documented, and refuses unsafe names.
//! - [`check_replace_race`]: of many threads replacing one file with the same expectation at
//!   once, exactly one wins.
//! - [`check_all`]: the three on one empty writable directory.
//!
//! ```
//! use guideloom_storage::{conformance, MemDir};
//! conformance::check_all(&MemDir::new());
//! ```

use std::path::Path;
use std::sync::{Barrier, Mutex, PoisonError};

use crate::dir::{EntryKind, ExpectedFile, LengthFault, StorageDir, WriteDir};
use crate::io::{FileSet, ReadRequest, ShardFile};
use crate::StorageError;

/// The fixture's files, `(name, length)`: an empty file, a short one, and one of 70,001 bytes
/// (many blocks of a remote directory of small blocks, its last block short).
pub const FIXTURE: [(&str, usize); 3] = [("empty.bin", 0), ("small.bin", 100), ("large.bin", 70_001)];

/// Names every directory refuses with [`StorageError::UnsafeFile`]: parent components, an
/// absolute path, an empty name, a backslash, a NUL byte.
pub const UNSAFE_NAMES: [&str; 6] = ["../escape", "/etc/passwd", "a/../../b", "", "a\\b", "nul\0byte"];

/// The bytes of fixture file `len` bytes long: a position-dependent pattern, so a read from
/// the wrong offset shows.
fn pattern(len: usize) -> Vec<u8> {
    (0..len as u64).map(|i| ((i.wrapping_mul(2_654_435_761) >> 7) ^ i) as u8).collect()
}

/// The fixture: [`FIXTURE`]'s files with their bytes.
pub fn fixture() -> Vec<(&'static str, Vec<u8>)> {
    FIXTURE.iter().map(|&(name, len)| (name, pattern(len))).collect()
}

/// What a reader of [`fixture`] would tell its directory ([`StorageDir::expect_files`]): every
/// fixture file with its length and crc32c.
pub fn fixture_expected() -> Vec<ExpectedFile> {
    fixture()
        .into_iter()
        .enumerate()
        .map(|(i, (name, bytes))| ExpectedFile {
            name: name.to_string(),
            shard: i as u64,
            committed: bytes.len() as u64,
            checksum: crc32c::crc32c(&bytes),
        })
        .collect()
}

/// Writes [`fixture`]'s files into `dir` through [`WriteDir::open_write`] (created, truncated,
/// written, synced) and syncs the directory.
///
/// # Panics
/// When a write fails.
pub fn write_fixture(dir: &dyn WriteDir) {
    let at = dir.path().display();
    dir.create_dir().unwrap_or_else(|e| panic!("{at}: create_dir: {e}"));
    for (name, bytes) in fixture() {
        let mut f = dir.open_write(name, true).unwrap_or_else(|e| panic!("{at}: open_write {name}: {e}"));
        f.set_len(0)
            .and_then(|()| f.write_all_at(&bytes, 0))
            .and_then(|()| f.sync())
            .unwrap_or_else(|e| panic!("{at}: writing {name}: {e}"));
    }
    dir.sync_dir().unwrap_or_else(|e| panic!("{at}: sync_dir: {e}"));
}

/// Panics with `what` about `dir` unless `got` is the error `want` describes.
fn expect_err<T: std::fmt::Debug>(
    dir: &Path,
    what: &str,
    got: crate::Result<T>,
    want: &str,
    ok: impl FnOnce(&StorageError) -> bool,
) {
    match got {
        Err(e) if ok(&e) => {}
        Err(e) => panic!("{}: {what}: expected {want}, got the error {e:?}", dir.display()),
        Ok(v) => panic!("{}: {what}: expected {want}, got Ok({v:?})", dir.display()),
    }
}

fn is_unsafe(e: &StorageError) -> bool {
    matches!(e, StorageError::UnsafeFile { .. })
}

fn is_not_found(e: &StorageError) -> bool {
    matches!(e, StorageError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
}

/// Checks the read half of the contract on `dir`, which holds [`fixture`]'s files (and no
/// file named `missing.bin`).
///
/// # Panics
/// At the first answer that breaks the contract, naming the directory, the call and what it
/// returned.
pub fn check_read(dir: &dyn StorageDir) {
    let at = dir.path().to_path_buf();
    let a = at.display();
    let files = fixture();
    dir.expect_files(&fixture_expected());
    // Lengths.
    for (name, bytes) in &files {
        let len = dir.file_len(name).unwrap_or_else(|e| panic!("{a}: file_len {name}: {e}"));
        assert_eq!(len, Some(bytes.len() as u64), "{a}: file_len {name}");
    }
    assert_eq!(dir.file_len("missing.bin").unwrap_or_else(|e| panic!("{a}: file_len missing: {e}")), None);
    // Positional reads, inside and across block boundaries, and their bounds.
    let large = &files[2].1;
    for (offset, len) in
        [(0usize, 1usize), (0, 4096), (4095, 2), (4096, 4096), (8191, 3), (69_990, 11), (70_001, 0)]
    {
        let mut out = vec![0u8; len];
        dir.read_at("large.bin", offset as u64, &mut out)
            .unwrap_or_else(|e| panic!("{a}: read_at large.bin {offset} +{len}: {e}"));
        assert!(out == large[offset..offset + len], "{a}: read_at large.bin {offset} +{len}: wrong bytes");
    }
    for (offset, len, got) in [(95u64, 10usize, 5u64), (100, 1, 0), (200, 3, 0)] {
        let mut out = vec![0u8; len];
        match dir.read_at("small.bin", offset, &mut out) {
            Err(StorageError::ShortRead { path, offset: o, expected, got: g }) => {
                assert_eq!(
                    (o, expected, g),
                    (offset, len as u64, got),
                    "{a}: read_at small.bin {offset} +{len}"
                );
                assert_eq!(path, at.join("small.bin"), "{a}: the short read names the file");
            }
            other => panic!(
                "{a}: read_at small.bin {offset} +{len} past the end: expected ShortRead, got {other:?}"
            ),
        }
    }
    let mut one = [0u8; 1];
    expect_err(
        &at,
        "read_at at offset u64::MAX",
        dir.read_at("small.bin", u64::MAX, &mut one),
        "an error",
        |e| matches!(e, StorageError::ShortRead { .. } | StorageError::Io { .. }),
    );
    expect_err(&at, "read_at missing.bin", dir.read_at("missing.bin", 0, &mut one), "NotFound", is_not_found);
    // Whole files, and the cut at `max_len + 1` bytes.
    let small = &files[1].1;
    let whole = |name: &str, max: u64| {
        dir.read_file(name, max).unwrap_or_else(|e| panic!("{a}: read_file {name} (max {max}): {e}"))
    };
    assert_eq!(whole("empty.bin", 10), Some(Vec::new()), "{a}: read_file empty.bin");
    assert_eq!(whole("small.bin", 100).as_deref(), Some(&small[..]), "{a}: read_file small.bin, max 100");
    assert_eq!(whole("small.bin", 99).as_deref(), Some(&small[..]), "{a}: read_file small.bin, max 99");
    assert_eq!(whole("small.bin", 10).as_deref(), Some(&small[..11]), "{a}: read_file small.bin, max 10");
    assert!(whole("large.bin", u64::MAX).is_some_and(|b| b == *large), "{a}: read_file large.bin");
    assert_eq!(whole("missing.bin", 10), None, "{a}: read_file missing.bin");
    check_batched(dir, &files);
    // Lengths of many files at once: the first missing or short one, by position.
    let shard = |name: &str, committed: u64| ShardFile { path: at.join(name), shard: 0, committed };
    let lengths =
        |list: &[ShardFile]| dir.check_lengths(list).unwrap_or_else(|e| panic!("{a}: check_lengths: {e}"));
    assert_eq!(lengths(&[shard("small.bin", 100), shard("large.bin", 70_001)]), None, "{a}: check_lengths");
    assert_eq!(
        lengths(&[shard("small.bin", 50), shard("large.bin", 80_000), shard("missing.bin", 0)]),
        Some(LengthFault { index: 1, found: Some(70_001) }),
        "{a}: check_lengths, a short file"
    );
    assert_eq!(
        lengths(&[shard("empty.bin", 0), shard("missing.bin", 1), shard("large.bin", 80_000)]),
        Some(LengthFault { index: 1, found: None }),
        "{a}: check_lengths, a missing file"
    );
    // Listing: every fixture file as a file, or not listable at all.
    match dir.list() {
        Ok(entries) => {
            for (name, _) in &files {
                assert!(
                    entries.iter().any(|e| e.name == *name && e.kind == EntryKind::File),
                    "{a}: list lacks the file {name}: {entries:?}"
                );
            }
        }
        Err(StorageError::Io { source, .. }) if source.kind() == std::io::ErrorKind::Unsupported => {}
        Err(e) => panic!("{a}: list: {e}"),
    }
    // Names that leave the storage.
    for name in UNSAFE_NAMES {
        let what = |call: &str| format!("{call} {name:?}");
        expect_err(&at, &what("file_len"), dir.file_len(name), "UnsafeFile", is_unsafe);
        expect_err(&at, &what("read_at"), dir.read_at(name, 0, &mut one), "UnsafeFile", is_unsafe);
        expect_err(&at, &what("read_file"), dir.read_file(name, 10), "UnsafeFile", is_unsafe);
    }
}

/// The batched reads of [`check_read`]: request order, zero-length requests, readahead
/// hints, and the checks of the buffer length, the file index and the bounds.
fn check_batched(dir: &dyn StorageDir, files: &[(&str, Vec<u8>)]) {
    let at = dir.path().to_path_buf();
    let a = at.display();
    let set = FileSet::new(
        files
            .iter()
            .map(|(name, b)| ShardFile { path: at.join(name), shard: 0, committed: b.len() as u64 })
            .collect(),
        4,
    );
    let req = |file: usize, offset: u64, len: u64| ReadRequest { file, offset, len };
    let requests =
        [req(2, 4090, 20), req(1, 0, 10), req(2, 0, 5), req(0, 0, 0), req(1, 99, 1), req(2, 69_990, 11)];
    dir.prefetch(&set, &requests);
    let want: Vec<u8> = requests
        .iter()
        .flat_map(|r| files[r.file].1[r.offset as usize..(r.offset + r.len) as usize].to_vec())
        .collect();
    let mut out = vec![0u8; want.len()];
    dir.read_requests(&set, &requests, &mut out).unwrap_or_else(|e| panic!("{a}: read_requests: {e}"));
    assert!(out == want, "{a}: read_requests: the bytes are not the requests' in request order");
    let mut short = vec![0u8; want.len() - 1];
    expect_err(
        &at,
        "read_requests into a short buffer",
        dir.read_requests(&set, &requests, &mut short),
        "BufferLength",
        |e| matches!(e, StorageError::BufferLength { expected, found } if *expected == want.len() as u64 && *found == want.len() as u64 - 1),
    );
    let mut four = [0u8; 4];
    expect_err(
        &at,
        "read_requests of file 7",
        dir.read_requests(&set, &[req(7, 0, 4)], &mut four),
        "FileOutOfRange",
        |e| matches!(e, StorageError::FileOutOfRange { .. }),
    );
    expect_err(
        &at,
        "read_requests past the end",
        dir.read_requests(&set, &[req(1, 98, 4)], &mut four),
        "ShortRead",
        |e| matches!(e, StorageError::ShortRead { .. }),
    );
}

/// Checks the write half of the contract on `dir`, an empty directory (which need not exist
/// yet), leaving files `w.bin`, `u.bin` and `m.bin` in it.
///
/// # Panics
/// At the first answer that breaks the contract, naming the directory, the call and what it
/// returned.
pub fn check_write(dir: &dyn WriteDir) {
    let at = dir.path().to_path_buf();
    let a = at.display();
    let ok = |what: &str, r: crate::Result<()>| r.unwrap_or_else(|e| panic!("{a}: {what}: {e}"));
    ok("create_dir", dir.create_dir());
    ok("create_dir again", dir.create_dir());
    // The writer lock: exclusive until dropped, or none at all.
    let lock = dir.lock().unwrap_or_else(|e| panic!("{a}: lock: {e}"));
    if lock.is_exclusive() {
        expect_err(&at, "a second lock while the first is held", dir.lock(), "Locked", |e| {
            matches!(e, StorageError::Locked { .. })
        });
        drop(lock);
        drop(dir.lock().unwrap_or_else(|e| panic!("{a}: lock after the first was dropped: {e}")));
    }
    // Opening, writing, cutting and extending; seen once synced.
    expect_err(
        &at,
        "open_write of a missing file without create",
        dir.open_write("w.bin", false),
        "NotFound",
        is_not_found,
    );
    let read =
        |name: &str| dir.read_file(name, 1 << 20).unwrap_or_else(|e| panic!("{a}: read_file {name}: {e}"));
    let mut f = dir.open_write("w.bin", true).unwrap_or_else(|e| panic!("{a}: open_write w.bin: {e}"));
    assert_eq!(f.len().ok(), Some(0), "{a}: a new file's length");
    assert_eq!(f.is_empty().ok(), Some(true), "{a}: a new file is empty");
    ok("write_all_at 0", f.write_all_at(b"hello", 0));
    ok("write_all_at 10", f.write_all_at(b"world", 10));
    assert_eq!(f.len().ok(), Some(15), "{a}: the length after a write past the end");
    ok("sync", f.sync());
    assert_eq!(dir.file_len("w.bin").ok().flatten(), Some(15), "{a}: file_len after sync");
    assert_eq!(read("w.bin").as_deref(), Some(&b"hello\0\0\0\0\0world"[..]), "{a}: the gap reads as zeros");
    ok("set_len 5", f.set_len(5));
    ok("sync", f.sync());
    assert_eq!(read("w.bin").as_deref(), Some(&b"hello"[..]), "{a}: cut to 5 bytes");
    ok("set_len 8", f.set_len(8));
    ok("sync", f.sync());
    drop(f);
    assert_eq!(read("w.bin").as_deref(), Some(&b"hello\0\0\0"[..]), "{a}: extended with zeros");
    let mut f = dir.open_write("w.bin", true).unwrap_or_else(|e| panic!("{a}: open_write w.bin again: {e}"));
    assert_eq!(f.len().ok(), Some(8), "{a}: opening an existing file does not truncate it");
    ok("write_all_at 8", f.write_all_at(b"!", 8));
    ok("sync", f.sync());
    drop(f);
    ok("sync_dir", dir.sync_dir());
    assert_eq!(read("w.bin").as_deref(), Some(&b"hello\0\0\0!"[..]), "{a}: appended");
    // Renames: moved, replacing the target.
    let mut f = dir.open_write("u.bin", true).unwrap_or_else(|e| panic!("{a}: open_write u.bin: {e}"));
    ok("write u.bin", f.write_all_at(b"old", 0).and_then(|()| f.sync()));
    drop(f);
    ok("rename w.bin -> v.bin", dir.rename("w.bin", "v.bin"));
    assert_eq!(dir.file_len("w.bin").ok(), Some(None), "{a}: the renamed file is gone");
    ok("rename v.bin -> u.bin", dir.rename("v.bin", "u.bin"));
    ok("sync_dir", dir.sync_dir());
    assert_eq!(read("u.bin").as_deref(), Some(&b"hello\0\0\0!"[..]), "{a}: the rename replaced u.bin");
    match dir.rename("v.bin", "x.bin") {
        Err(StorageError::Io { path, source }) => {
            // The error names one of the two files (implementations differ: the local
            // directory and the memory one name the target, the power-cut one the source).
            assert!(
                path.ends_with("v.bin") || path.ends_with("x.bin"),
                "{a}: the error names {}",
                path.display()
            );
            assert_eq!(source.kind(), std::io::ErrorKind::NotFound, "{a}: {source}");
        }
        // An object store names the object it could not copy.
        Err(StorageError::Remote { url, cause, .. }) => {
            assert!(url.ends_with("v.bin") || url.ends_with("x.bin"), "{a}: the error names {url}");
            assert!(cause.contains("does not exist"), "{a}: {cause}");
        }
        other => panic!("{a}: renaming a missing file gave {other:?}"),
    }
    check_replace(dir);
    // Names that leave the storage.
    for name in UNSAFE_NAMES {
        let what = |call: &str| format!("{call} {name:?}");
        expect_err(&at, &what("open_write"), dir.open_write(name, true), "UnsafeFile", is_unsafe);
        expect_err(&at, &what("rename from"), dir.rename(name, "u2.bin"), "UnsafeFile", is_unsafe);
        expect_err(&at, &what("rename to"), dir.rename("u.bin", name), "UnsafeFile", is_unsafe);
        expect_err(&at, &what("replace_if"), dir.replace_if(name, None, b"x"), "UnsafeFile", is_unsafe);
    }
}

/// [`WriteDir::replace_if`]'s comparisons, one call at a time, on file `m.bin`.
fn check_replace(dir: &dyn WriteDir) {
    let at = dir.path().to_path_buf();
    let a = at.display();
    let read = || dir.read_file("m.bin", 1 << 20).unwrap_or_else(|e| panic!("{a}: read_file m.bin: {e}"));
    let refused = |what: &str, r: crate::Result<()>, now: Option<&[u8]>| {
        expect_err(
            &at,
            what,
            r,
            "ConcurrentCommit naming m.bin",
            |e| matches!(e, StorageError::ConcurrentCommit { path } if *path == at.join("m.bin")),
        );
        assert_eq!(read().as_deref(), now, "{a}: {what}: the file changed although refused");
    };
    let ok = |what: &str, r: crate::Result<()>, now: &[u8]| {
        r.unwrap_or_else(|e| panic!("{a}: {what}: {e}"));
        assert_eq!(read().as_deref(), Some(now), "{a}: {what}: not replaced");
    };
    refused("replace_if of a missing file expecting bytes", dir.replace_if("m.bin", Some(b"x"), b"1"), None);
    ok("replace_if of a missing file expecting none", dir.replace_if("m.bin", None, b"one"), b"one");
    refused(
        "replace_if expecting none of a file that exists",
        dir.replace_if("m.bin", None, b"two"),
        Some(b"one"),
    );
    refused("replace_if expecting other bytes", dir.replace_if("m.bin", Some(b"uno"), b"two"), Some(b"one"));
    refused("replace_if expecting a prefix", dir.replace_if("m.bin", Some(b"on"), b"two"), Some(b"one"));
    ok("replace_if expecting the bytes there", dir.replace_if("m.bin", Some(b"one"), b"two"), b"two");
    ok("replace_if with nothing", dir.replace_if("m.bin", Some(b"two"), b""), b"");
    ok("replace_if of an empty file", dir.replace_if("m.bin", Some(b""), b"three"), b"three");
}

/// Checks that of `threads` threads calling [`WriteDir::replace_if`] on one file at once, all
/// expecting what is there, exactly one succeeds and the others get
/// [`StorageError::ConcurrentCommit`] (first for a file that does not exist yet, then for
/// one that does); the file then holds the winner's bytes. Uses files `race-new.bin` and
/// `race.bin` of `dir` (writable, created when missing).
///
/// # Panics
/// When more or fewer than one call succeeds, a refused call fails otherwise, or the file does
/// not hold the winner's bytes.
pub fn check_replace_race(dir: &dyn WriteDir, threads: usize) {
    let a = &dir.path().display().to_string();
    dir.create_dir().unwrap_or_else(|e| panic!("{a}: create_dir: {e}"));
    let race = |name: &str, expected: Option<&[u8]>| {
        let barrier = Barrier::new(threads);
        let won = Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for t in 0..threads {
                let (barrier, won) = (&barrier, &won);
                s.spawn(move || {
                    let a = a;
                    let mine = format!("thread {t}");
                    barrier.wait();
                    match dir.replace_if(name, expected, mine.as_bytes()) {
                        Ok(()) => won.lock().unwrap_or_else(PoisonError::into_inner).push(mine),
                        Err(StorageError::ConcurrentCommit { .. }) => {}
                        Err(e) => panic!("{a}: racing replace_if of {name}: {e}"),
                    }
                });
            }
        });
        let won = won.into_inner().unwrap_or_else(PoisonError::into_inner);
        assert_eq!(won.len(), 1, "{a}: {threads} racing replace_if of {name}: these won: {won:?}");
        let now = dir.read_file(name, 1 << 10).unwrap_or_else(|e| panic!("{a}: read_file {name}: {e}"));
        assert_eq!(
            now.as_deref(),
            Some(won[0].as_bytes()),
            "{a}: {name} holds another than the winner's bytes"
        );
        won.into_iter().next().unwrap_or_default()
    };
    race("race-new.bin", None);
    dir.replace_if("race.bin", None, b"start")
        .or_else(|_| {
            let now = dir.read_file("race.bin", 1 << 10)?.unwrap_or_default();
            dir.replace_if("race.bin", Some(&now), b"start")
        })
        .unwrap_or_else(|e| panic!("{a}: replace_if race.bin: {e}"));
    race("race.bin", Some(b"start"));
}

/// [`check_write`], [`write_fixture`] and [`check_read`], then [`check_replace_race`] with 8
/// threads, on `dir`: an empty writable directory.
///
/// # Panics
/// As the checks it runs.
pub fn check_all(dir: &dyn WriteDir) {
    check_write(dir);
    write_fixture(dir);
    check_read(dir);
    check_replace_race(dir, 8);
}
