//! Issue 30, items 1 and 6: parts written by many writers and one atomic commit
//! (`guideloom_storage::parts`): the committed storage equals a single writer's, duplicates keep
//! the lowest attempt, disagreeing parts are refused, `gc` lists exactly the orphans, and every
//! fault (a missing or short file, a path escaping the storage, a crash before the commit, a
//! concurrent committer) is a typed error that leaves the previous manifest in force.

use std::path::Path;
use std::sync::Arc;

use guideloom_formats::TokenFormat;
use guideloom_storage::kind::Stream;
use guideloom_storage::parts::{abort, commit_parts, commit_parts_in, gc, CommitMode, PartWriter, Receipt};
use guideloom_storage::{
    verify, Manifest, MemDir, StorageError, StreamReader, StreamWriter, Window, WriteDir, FORMAT_VERSION,
    FORMAT_VERSION_FLAT, MANIFEST_FILE,
};
use guideloom_testkit::race::RaceDir;

type Tokens = TokenFormat<u16>;

/// A part writer of `Tokens`.
type TokenPart = PartWriter<Stream<Tokens>>;

/// The documents of partition `p` (deterministic, different per partition).
fn docs(p: u64) -> Vec<Vec<u32>> {
    (0..=p).map(|d| (0..(3 + d * 2)).map(|i| (p * 1000 + d * 10 + i) as u32).collect()).collect()
}

/// Writes part `p`, attempt `a`, of job `job` under `root` with `docs(p)`; returns its receipt.
fn part(root: &Path, job: &str, p: u64, a: u64) -> Receipt {
    let mut w: TokenPart = PartWriter::open(root, job, p, a, Tokens::new()).unwrap();
    for d in docs(p) {
        w.append(0, &d).unwrap();
    }
    w.finish().unwrap()
}

/// Every token of the storage at `dir`.
fn all_tokens(dir: &Path) -> Vec<u16> {
    let r = StreamReader::open(dir, Tokens::new()).unwrap();
    r.read(Window::new(0, r.len())).unwrap()
}

/// The single-writer storage of partitions `0..n`: partition `p` in shard `p`.
fn single_writer(dir: &Path, n: u64) {
    let mut w = StreamWriter::open(dir, Tokens::new()).unwrap();
    for p in 0..n {
        for d in docs(p) {
            w.append(p, &d).unwrap();
        }
    }
    w.commit().unwrap();
}

#[test]
fn issue30_parts_in_any_order_and_attempts_equal_the_single_writer_storage() {
    let single = tempfile::tempdir().unwrap();
    single_writer(single.path(), 4);
    let root = tempfile::tempdir().unwrap();
    // Written out of order, partition 2 by its second attempt only, partition 1 twice.
    let receipts = vec![
        part(root.path(), "job", 3, 0),
        part(root.path(), "job", 1, 1),
        part(root.path(), "job", 0, 0),
        part(root.path(), "job", 2, 5),
        part(root.path(), "job", 1, 0),
    ];
    let report = commit_parts(root.path(), &receipts, CommitMode::ErrorIfExists).unwrap();
    assert_eq!((report.partitions, report.shards, report.first_shard), (4, 4, 0));
    assert_eq!(report.skipped, vec![(1, 1)]);

    let (a, b) = (Manifest::load(single.path()).unwrap(), Manifest::load(root.path()).unwrap());
    assert_eq!(a.fingerprint(), b.fingerprint(), "paths are not part of the fingerprint");
    assert_eq!(report.fingerprint, b.fingerprint());
    assert_eq!((a.format_version(), b.format_version()), (FORMAT_VERSION_FLAT, FORMAT_VERSION));
    let expected_paths: Vec<_> = ["000000-0", "000001-0", "000002-5", "000003-0"]
        .iter()
        .map(|d| format!("_parts/job/{d}/shard-00000"))
        .collect();
    let paths: Vec<_> = b.shards().iter().map(|s| s.path.clone().unwrap()).collect();
    assert_eq!(paths, expected_paths);
    for (sa, sb) in a.shards().iter().zip(b.shards()) {
        let fa = std::fs::read(single.path().join(sa.file_name("stream"))).unwrap();
        let fb = std::fs::read(root.path().join(sb.file_name("stream"))).unwrap();
        assert_eq!(fa, fb, "shard {}", sa.id);
    }
    let expected: Vec<u16> = (0..4).flat_map(docs).flatten().map(|t| t as u16).collect();
    assert_eq!(all_tokens(root.path()), expected);
    assert_eq!(all_tokens(single.path()), expected);
    assert_eq!(verify(root.path()).unwrap().shards, 4);
    // The duplicate attempt is the one orphan.
    assert_eq!(gc(root.path(), false).unwrap(), vec!["_parts/job/000001-1".to_string()]);
}

#[test]
fn issue30_appending_parts_continues_the_storage_and_a_writer_continues_after_them() {
    let root = tempfile::tempdir().unwrap();
    let mut w = StreamWriter::open(root.path(), Tokens::new()).unwrap();
    w.append(0, &[7u32, 8]).unwrap();
    w.commit().unwrap();
    drop(w);
    let receipts = vec![part(root.path(), "j2", 1, 0), part(root.path(), "j2", 0, 0)];
    assert!(matches!(
        commit_parts(root.path(), &receipts, CommitMode::ErrorIfExists),
        Err(StorageError::StorageExists { .. })
    ));
    let report = commit_parts(root.path(), &receipts, CommitMode::Append).unwrap();
    assert_eq!((report.first_shard, report.shards), (1, 2));
    // A normal writer opens the committed storage and appends a new flat shard after the parts.
    let mut w = StreamWriter::open(root.path(), Tokens::new()).unwrap();
    w.append(3, &[9u32]).unwrap();
    w.commit().unwrap();
    drop(w);
    let mut expected = vec![7u16, 8];
    expected.extend((0..2).flat_map(docs).flatten().map(|t| t as u16));
    expected.push(9);
    assert_eq!(all_tokens(root.path()), expected);
    assert_eq!(verify(root.path()).unwrap().shards, 4);
    // Overwrite keeps only the new parts.
    let again = vec![part(root.path(), "j3", 0, 0)];
    commit_parts(root.path(), &again, CommitMode::Overwrite).unwrap();
    assert_eq!(all_tokens(root.path()), docs(0).concat().iter().map(|&t| t as u16).collect::<Vec<_>>());
    assert_eq!(gc(root.path(), false).unwrap(), vec!["_parts/j2".to_string()]);
}

#[test]
fn issue30_parts_that_disagree_are_refused_naming_the_partition_and_both_values() {
    let root = tempfile::tempdir().unwrap();
    let a = part(root.path(), "job", 0, 0);
    let mut w: PartWriter<Stream<TokenFormat<u32>>> =
        PartWriter::open(root.path(), "job", 1, 0, TokenFormat::<u32>::new()).unwrap();
    w.append(0, &[1u32]).unwrap();
    let b = w.finish().unwrap();
    match commit_parts(root.path(), &[b.clone(), a.clone()], CommitMode::ErrorIfExists) {
        Err(StorageError::PartMismatch { partition: 1, field: "dtype", expected, found, against }) => {
            assert_eq!((expected.as_str(), found.as_str(), against), ("\"<u2\"", "\"<u4\"", Some(0)));
        }
        other => panic!("{other:?}"),
    }
    assert!(!root.path().join(MANIFEST_FILE).exists(), "nothing committed");
    // Against the storage when appending.
    commit_parts(root.path(), &[a], CommitMode::ErrorIfExists).unwrap();
    match commit_parts(root.path(), &[b], CommitMode::Append) {
        Err(e @ StorageError::PartMismatch { partition: 1, field: "dtype", against: None, .. }) => {
            assert!(e.to_string().contains("but the storage has"), "{e}")
        }
        other => panic!("{other:?}"),
    }
    // The same dtype, another format name.
    let mut c = part(root.path(), "job", 2, 0);
    c.format.name = "other".into();
    assert!(matches!(
        commit_parts(root.path(), &[c], CommitMode::Append),
        Err(StorageError::PartMismatch { partition: 2, field: "format", .. })
    ));
}

#[test]
fn issue30_gc_lists_exactly_the_orphans_and_abort_removes_only_uncommitted_parts() {
    let root = tempfile::tempdir().unwrap();
    let kept = vec![part(root.path(), "job", 0, 0), part(root.path(), "job", 1, 0)];
    let _failed = part(root.path(), "job", 1, 1);
    // A task that died while writing: its part was never committed.
    let mut dying: TokenPart = PartWriter::open(root.path(), "job", 2, 0, Tokens::new()).unwrap();
    dying.append(0, &[1u32, 2]).unwrap();
    drop(dying);
    let _crashed = part(root.path(), "crashed", 0, 0);
    commit_parts(root.path(), &kept, CommitMode::ErrorIfExists).unwrap();
    let orphans =
        vec!["_parts/crashed".to_string(), "_parts/job/000001-1".into(), "_parts/job/000002-0".into()];
    assert_eq!(gc(root.path(), false).unwrap(), orphans);
    assert!(root.path().join("_parts/job/000001-1").exists(), "a dry run deletes nothing");
    assert_eq!(abort(root.path(), "job").unwrap(), orphans[1..].to_vec());
    assert!(root.path().join("_parts/job/000000-0").exists(), "committed parts stay");
    assert_eq!(gc(root.path(), true).unwrap(), orphans[..1].to_vec());
    assert_eq!(gc(root.path(), false).unwrap(), Vec::<String>::new());
    assert_eq!(all_tokens(root.path()).len(), (0..2).flat_map(docs).flatten().count());
    assert!(matches!(abort(root.path(), "../x"), Err(StorageError::InvalidJob { .. })));
    assert!(matches!(
        TokenPart::open(root.path(), "a/b", 0, 0, Tokens::new()),
        Err(StorageError::InvalidJob { .. })
    ));
    // An attempt is written once.
    assert!(matches!(
        TokenPart::open(root.path(), "job", 0, 0, Tokens::new()),
        Err(StorageError::StorageExists { .. })
    ));
}

#[test]
fn issue30_a_crash_between_part_writes_and_the_commit_leaves_the_previous_manifest() {
    let root = tempfile::tempdir().unwrap();
    commit_parts(root.path(), &[part(root.path(), "first", 0, 0)], CommitMode::ErrorIfExists).unwrap();
    let before = std::fs::read(root.path().join(MANIFEST_FILE)).unwrap();
    let expected = all_tokens(root.path());
    // The second job writes its parts, one of them half (dropped before its own commit), and
    // never commits: the root is unchanged and reads as before.
    let _ = part(root.path(), "second", 0, 0);
    let mut half: TokenPart = PartWriter::open(root.path(), "second", 1, 0, Tokens::new()).unwrap();
    half.append(0, &[5u32; 100]).unwrap();
    drop(half);
    assert_eq!(std::fs::read(root.path().join(MANIFEST_FILE)).unwrap(), before);
    assert_eq!(all_tokens(root.path()), expected);
    verify(root.path()).unwrap();
    assert_eq!(gc(root.path(), false).unwrap(), vec!["_parts/second".to_string()]);
}

#[test]
fn issue30_a_receipt_naming_a_missing_or_short_file_is_an_error_naming_it() {
    let root = tempfile::tempdir().unwrap();
    let receipts = vec![part(root.path(), "job", 0, 0), part(root.path(), "job", 1, 0)];
    let file = root.path().join("_parts/job/000001-0/shard-00000.stream");
    let len = std::fs::metadata(&file).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&file).unwrap().set_len(len - 2).unwrap();
    match commit_parts(root.path(), &receipts, CommitMode::ErrorIfExists) {
        Err(StorageError::PartFileShort { partition: 1, path, expected, found }) => {
            assert_eq!((path, expected, found), (file.clone(), len, len - 2));
        }
        other => panic!("{other:?}"),
    }
    std::fs::remove_file(&file).unwrap();
    match commit_parts(root.path(), &receipts, CommitMode::ErrorIfExists) {
        Err(StorageError::PartFileMissing { partition: 1, path }) => assert_eq!(path, file),
        other => panic!("{other:?}"),
    }
    assert!(!root.path().join(MANIFEST_FILE).exists());
    // The other side: with its files whole, the same receipt commits.
    commit_parts(root.path(), &receipts[..1], CommitMode::ErrorIfExists).unwrap();
}

#[test]
fn issue30_a_receipt_whose_path_escapes_its_part_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let good = part(root.path(), "job", 0, 0);
    let text = good.to_json();
    assert_eq!(Receipt::from_json(&text).unwrap(), good);
    for bad in [
        "../shard-00000",
        "/etc/shard-00000",
        "_parts/job/000000-0/../../shard-00000",
        "_parts/job/000000-0/./shard-00000",
        "_parts/job/000000-0//shard-00000",
        "_parts/job/000001-0/shard-00000",
        "_parts/job/000000-0/sub/shard-00000",
        "shard-00000",
    ] {
        let forged = text.replace("_parts/job/000000-0/shard-00000", bad);
        assert!(
            matches!(Receipt::from_json(&forged), Err(StorageError::InvalidReceipt { .. })),
            "{bad:?} accepted"
        );
        let mut r = good.clone();
        r.shards[0].path = Some(bad.to_string());
        assert!(matches!(
            commit_parts(root.path(), &[r], CommitMode::ErrorIfExists),
            Err(StorageError::InvalidReceipt { partition: 0, .. })
        ));
    }
    assert!(matches!(Receipt::from_json("{"), Err(StorageError::InvalidReceipt { .. })));
    let v2 = text.replace("\"receipt_version\":1", "\"receipt_version\":2");
    assert!(matches!(Receipt::from_json(&v2), Err(StorageError::InvalidReceipt { .. })));
    commit_parts(root.path(), &[good], CommitMode::ErrorIfExists).unwrap();
}

#[cfg(unix)]
#[test]
fn issue30_a_manifest_whose_path_escapes_the_storage_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let receipts = vec![part(root.path(), "job", 0, 0)];
    commit_parts(root.path(), &receipts, CommitMode::ErrorIfExists).unwrap();
    let text = std::fs::read_to_string(root.path().join(MANIFEST_FILE)).unwrap();
    for bad in
        ["../outside/shard-00000", "/tmp/shard-00000", "_parts/../../x", "_parts/job//000000-0/shard-00000"]
    {
        let forged = text.replace("_parts/job/000000-0/shard-00000", bad);
        std::fs::write(root.path().join(MANIFEST_FILE), &forged).unwrap();
        match StreamReader::open(root.path(), Tokens::new()) {
            Err(StorageError::InvalidManifest { reason, .. }) => {
                assert!(reason.contains("shard 0"), "{reason}")
            }
            other => panic!("{bad:?}: {other:?}"),
        }
    }
    // A path in a version-1 manifest is refused too.
    let v1 = text.replace("\"format_version\": 2", "\"format_version\": 1");
    assert_ne!(v1, text);
    std::fs::write(root.path().join(MANIFEST_FILE), &v1).unwrap();
    assert!(matches!(
        StreamReader::open(root.path(), Tokens::new()),
        Err(StorageError::InvalidManifest { .. })
    ));
    std::fs::write(root.path().join(MANIFEST_FILE), &text).unwrap();
    assert_eq!(all_tokens(root.path()).len(), docs(0).concat().len());

    // `_parts` replaced by a link to the same files elsewhere: refused by the reader, `verify`
    // and a writer; the same files back in place read again.
    let outside = tempfile::tempdir().unwrap();
    let moved = outside.path().join("_parts");
    std::fs::rename(root.path().join("_parts"), &moved).unwrap();
    std::os::unix::fs::symlink(&moved, root.path().join("_parts")).unwrap();
    assert!(matches!(StreamReader::open(root.path(), Tokens::new()), Err(StorageError::UnsafeFile { .. })));
    assert!(matches!(verify(root.path()), Err(StorageError::UnsafeFile { .. })));
    assert!(matches!(StreamWriter::open(root.path(), Tokens::new()), Err(StorageError::UnsafeFile { .. })));
    assert!(matches!(
        commit_parts(root.path(), &receipts, CommitMode::Append),
        Err(StorageError::UnsafeFile { .. })
    ));
    std::fs::remove_file(root.path().join("_parts")).unwrap();
    std::fs::rename(&moved, root.path().join("_parts")).unwrap();
    assert_eq!(all_tokens(root.path()).len(), docs(0).concat().len());
    verify(root.path()).unwrap();
}

/// Copies every file under `root` (recursively) into `dir` by its relative name.
fn copy_into(root: &Path, dir: &dyn WriteDir) {
    fn walk(base: &Path, at: &Path, dir: &dyn WriteDir) {
        for e in std::fs::read_dir(at).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(base, &p, dir);
            } else {
                let name = p.strip_prefix(base).unwrap().to_str().unwrap().to_string();
                let mut f = dir.open_write(&name, true).unwrap();
                f.write_all_at(&std::fs::read(&p).unwrap(), 0).unwrap();
                f.sync().unwrap();
            }
        }
    }
    walk(root, root, dir);
    dir.sync_dir().unwrap();
}

#[test]
fn issue30_of_two_committers_without_a_lock_one_wins_and_the_other_gets_a_typed_error() {
    let local = tempfile::tempdir().unwrap();
    let a = vec![part(local.path(), "a", 0, 0)];
    let b = vec![part(local.path(), "b", 0, 0)];
    let dir = RaceDir::new(Arc::new(MemDir::new()));
    copy_into(local.path(), &dir);
    let b2 = b.clone();
    dir.before_next_replace(move |inner: &MemDir| {
        commit_parts_in(inner, &b2, CommitMode::Append, None).unwrap();
    });
    assert!(matches!(
        commit_parts_in(&dir, &a, CommitMode::Append, None),
        Err(StorageError::ConcurrentCommit { .. })
    ));
    // The winner's commit stands; the loser can commit again after it.
    let r = StreamReader::open_in(dir.inner.clone(), Tokens::new(), Default::default()).unwrap();
    assert_eq!(r.len(), docs(0).concat().len() as u64);
    let report = commit_parts_in(&dir, &a, CommitMode::Append, None).unwrap();
    assert_eq!(report.first_shard, 1);
}

#[test]
fn issue30_receipts_of_several_jobs_and_empty_commits() {
    let root = tempfile::tempdir().unwrap();
    let a = part(root.path(), "a", 0, 0);
    let b = part(root.path(), "b", 1, 0);
    assert!(matches!(
        commit_parts(root.path(), &[a.clone(), b], CommitMode::ErrorIfExists),
        Err(StorageError::InvalidReceipt { partition: 1, .. })
    ));
    assert!(matches!(commit_parts(root.path(), &[], CommitMode::Append), Err(StorageError::NoParts { .. })));
    commit_parts(root.path(), &[a], CommitMode::ErrorIfExists).unwrap();
    // No part appended to a storage: the manifest is rewritten unchanged in content.
    let fp = Manifest::load(root.path()).unwrap().fingerprint();
    assert_eq!(commit_parts(root.path(), &[], CommitMode::Append).unwrap().fingerprint, fp);
}

/// Issue 30, item 7: the time of `commit_parts` for 10,000 parts of one shard each (local; the
/// part files are copies of one real part, made without syncs). Ignored (a measurement, not a
/// check); run with
/// `cargo test --release -p guideloom-storage --test storage issue30_bench -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement: run it with --ignored --nocapture"]
fn issue30_bench_commit_parts_of_10000_parts() {
    const PARTS: u64 = 10_000;
    let root = tempfile::tempdir().unwrap();
    let model = part(root.path(), "bench", 0, 0);
    let data = std::fs::read(root.path().join(model.shards[0].file_name("stream"))).unwrap();
    let mut receipts = vec![model.clone()];
    for p in 1..PARTS {
        let mut r = model.clone();
        r.partition = p;
        let stem = format!("{}/shard-00000", r.dir_name());
        std::fs::create_dir_all(root.path().join(r.dir_name())).unwrap();
        std::fs::write(root.path().join(format!("{stem}.stream")), &data).unwrap();
        r.shards[0].path = Some(stem);
        receipts.push(r);
    }
    let texts: Vec<String> = receipts.iter().map(Receipt::to_json).collect();
    let start = std::time::Instant::now();
    let parsed: Vec<Receipt> = texts.iter().map(|t| Receipt::from_json(t).unwrap()).collect();
    let parse = start.elapsed();
    let start = std::time::Instant::now();
    let report = commit_parts(root.path(), &parsed, CommitMode::ErrorIfExists).unwrap();
    let commit = start.elapsed();
    let start = std::time::Instant::now();
    let r = StreamReader::open(root.path(), Tokens::new()).unwrap();
    let open = start.elapsed();
    assert_eq!(report.shards, PARTS);
    assert_eq!(r.len(), PARTS * docs(0).concat().len() as u64);
    println!(
        "commit_parts of {PARTS} parts: {:.1} ms (receipts parsed in {:.1} ms; the committed storage opens in {:.1} ms)",
        commit.as_secs_f64() * 1e3,
        parse.as_secs_f64() * 1e3,
        open.as_secs_f64() * 1e3
    );
}
