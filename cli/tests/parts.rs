//! Issue 30: `ingest --part`, `commit-parts`, `gc` and `ingest --workers N`: parts written by
//! separate runs (any order, a retried attempt) commit to the storage one ingest writes, whose
//! token stream and batches do not depend on the number of workers.

use std::path::Path;

use guideloom::storage::{Manifest, StreamReader, Window};

use crate::cli::{austen, bin, run_ok};

/// Every token of the u32 or u16 stream storage at `dir`, as u32.
fn tokens(dir: &Path) -> Vec<u32> {
    let m = Manifest::load(dir).unwrap();
    if m.dtype().unwrap().itemsize() == 2 {
        let r = StreamReader::open(dir, guideloom::formats::TokenFormat::<u16>::new()).unwrap();
        r.read(Window::new(0, r.len())).unwrap().into_iter().map(u32::from).collect()
    } else {
        let r = StreamReader::open(dir, guideloom::formats::TokenFormat::<u32>::new()).unwrap();
        r.read(Window::new(0, r.len())).unwrap()
    }
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Whether `inspect --verify` passes on `dir` (its verdict is on stderr).
fn verified(dir: &Path) -> bool {
    String::from_utf8_lossy(&run_ok(&["inspect", s(dir), "--verify"]).stderr).contains("all checksums match")
}

fn stdout(args: &[&str]) -> String {
    String::from_utf8(run_ok(args).stdout).unwrap()
}

/// Four text files of 24 KB of the bundled corpus each (whole lines), in `dir`.
fn corpus_in(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for (i, name) in ["persuasion.txt", "northangerabbey.txt"].iter().enumerate() {
        let text = std::fs::read_to_string(austen(name)).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for half in 0..2 {
            let mut piece = String::new();
            for l in lines.iter().skip(400 + half * 600) {
                if piece.len() > 24_000 {
                    break;
                }
                piece.push_str(l);
                piece.push('\n');
            }
            let f = dir.join(format!("in{}.txt", 2 * i + half));
            std::fs::write(&f, piece).unwrap();
            files.push(f);
        }
    }
    files
}

#[test]
fn issue30_ingest_with_workers_writes_the_stream_one_worker_writes() {
    let tmp = tempfile::tempdir().unwrap();
    let files = corpus_in(tmp.path());
    let mut outs = Vec::new();
    for workers in ["1", "2", "3"] {
        let out = tmp.path().join(format!("w{workers}"));
        let mut args =
            vec!["ingest", "text", "--out", s(&out), "--split", "blank-line", "--workers", workers];
        args.extend(files.iter().map(|f| s(f)));
        run_ok(&args);
        outs.push(out);
    }
    let one = tokens(&outs[0]);
    assert!(one.len() > 1000);
    let batches = |d: &Path| {
        stdout(&["batches", s(d), "--seq-len", "64", "--batch-size", "4", "--seed", "9", "--epochs", "1"])
    };
    let reference = batches(&outs[0]);
    let m1 = Manifest::load(&outs[0]).unwrap();
    for out in &outs[1..] {
        assert_eq!(tokens(out), one, "{}", out.display());
        assert_eq!(batches(out), reference, "{}", out.display());
        assert!(verified(out));
        let m = Manifest::load(out).unwrap();
        assert_eq!(m.metadata(), m1.metadata(), "the same metadata (documents, tokenizer, split)");
        assert_eq!(m.dtype(), m1.dtype());
        // Nothing left over: every part directory is referenced.
        assert_eq!(stdout(&["gc", s(out)]), "");
    }
    assert_eq!(Manifest::load(&outs[1]).unwrap().shards().len(), 2);
    // Two runs with the same workers commit the same fingerprint (the paths differ, by job).
    let again = tmp.path().join("again");
    let mut args = vec!["ingest", "text", "--out", s(&again), "--split", "blank-line", "--workers", "2"];
    args.extend(files.iter().map(|f| s(f)));
    run_ok(&args);
    assert_eq!(
        Manifest::load(&again).unwrap().fingerprint(),
        Manifest::load(&outs[1]).unwrap().fingerprint()
    );
    // An existing storage is refused before any part is written.
    let out = bin().args(&args).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("already holds"));
}

#[test]
fn issue30_parts_written_by_separate_runs_commit_and_gc_lists_the_retried_attempt() {
    let tmp = tempfile::tempdir().unwrap();
    let files = corpus_in(tmp.path());
    let (a, b) = (&files[..1], &files[1..]);
    let root = tmp.path().join("root");
    let receipts = tmp.path().join("receipts");
    std::fs::create_dir_all(&receipts).unwrap();
    let part = |spec: &str, inputs: &[std::path::PathBuf], receipt: Option<&Path>| {
        let mut args = vec!["ingest", "text", "--out", s(&root), "--dtype", "u32", "--part", spec];
        if let Some(r) = receipt {
            args.extend(["--receipt", s(r)]);
        }
        args.extend(inputs.iter().map(|f| s(f)));
        stdout(&args)
    };
    // Partition 1 first, partition 0 twice (attempt 1 is a retry that also finished).
    let printed = part("job-7:1:0", b, None);
    std::fs::write(receipts.join("p1.json"), &printed).unwrap();
    assert!(printed.contains("\"partition\":1"), "{printed}");
    assert_eq!(part("job-7:0:1", a, Some(&receipts.join("p0b.json"))), "");
    assert_eq!(part("job-7:0:0", a, Some(&receipts.join("p0.json"))), "");
    // Nothing is visible before the commit.
    assert!(!root.join("manifest.json").exists());
    let out = stdout(&["commit-parts", s(&root), "--receipts-dir", s(&receipts)]);
    assert!(out.contains("committed 2 partitions") && out.contains("[(0, 1)]"), "{out}");
    // The reference: one ingest of all files in partition order.
    let single = tmp.path().join("single");
    let mut args = vec!["ingest", "text", "--out", s(&single), "--dtype", "u32"];
    args.extend(files.iter().map(|f| s(f)));
    run_ok(&args);
    assert_eq!(tokens(&root), tokens(&single));
    assert!(verified(&root));
    assert_eq!(stdout(&["gc", s(&root)]), "_parts/job-7/000000-1\n");
    assert_eq!(stdout(&["gc", s(&root), "--apply"]), "deleted _parts/job-7/000000-1\n");
    assert_eq!(stdout(&["gc", s(&root)]), "");
    assert_eq!(tokens(&root), tokens(&single));
    // A second commit of the same receipts onto the storage: refused in error mode.
    let again = bin().args(["commit-parts", s(&root), s(&receipts.join("p1.json"))]).output().unwrap();
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("already holds a storage"));
    // A bad --part spec is a usage error.
    let bad = bin()
        .args(["ingest", "text", "--out", s(&root), "--part", "job:x:0", s(&files[0])])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
}
