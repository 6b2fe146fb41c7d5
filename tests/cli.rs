//! The `guideloom` binary driven from outside, on real files.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_guideloom"))
}

pub fn run_ok(args: &[&str]) -> Output {
    let out = bin().args(args).output().expect("run guideloom");
    assert!(out.status.success(), "guideloom {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    out
}

pub fn austen(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data/austen").join(name)
}

fn read_u32_stream(dir: &Path) -> Vec<u32> {
    let r = guideloom::storage::StreamReader::open(dir, guideloom::formats::TokenFormat::<u32>::new()).unwrap();
    r.read(0, r.len()).unwrap()
}

#[test]
fn ingest_pride_and_prejudice_matches_tiktoken_cl100k() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("pp");
    let file = austen("prideprejudice.txt");
    run_ok(&["ingest", "text", "--out", out.to_str().unwrap(), "--tokenizer", "cl100k", file.to_str().unwrap()]);
    let text = std::fs::read_to_string(&file).unwrap();
    let bpe = tiktoken_rs::cl100k_base().unwrap();
    let expected = bpe.encode_ordinary(&text);
    let stream = read_u32_stream(&out);
    assert_eq!(stream.len(), expected.len());
    assert_eq!(stream, expected);
    assert_eq!(bpe.decode(&stream).unwrap(), text);
}

#[test]
fn ingest_shards_do_not_change_the_stream_and_eos_follows_each_document() {
    let tmp = tempfile::tempdir().unwrap();
    let (one, four) = (tmp.path().join("one"), tmp.path().join("four"));
    let file = austen("persuasion.txt");
    for (dir, shards) in [(&one, "1"), (&four, "4")] {
        run_ok(&[
            "ingest", "text", "--out", dir.to_str().unwrap(), "--split", "blank-line", "--eos", "--shards", shards,
            "--tokenizer", "gpt2", file.to_str().unwrap(),
        ]);
    }
    let m = guideloom::storage::Manifest::load(&four).unwrap();
    assert_eq!(m.shards.len(), 4);
    assert_eq!(m.dtype, serde_json::json!("<u2"), "gpt2 ids fit u16");
    let read = |d: &Path| {
        let r = guideloom::storage::StreamReader::open(d, guideloom::formats::TokenFormat::<u16>::new()).unwrap();
        r.read(0, r.len()).unwrap()
    };
    let (a, b) = (read(&one), read(&four));
    assert_eq!(a, b);
    let text = std::fs::read_to_string(&file).unwrap();
    let blocks = guideloom::ingest::split_text(&text, guideloom::ingest::Split::BlankLine);
    assert_eq!(a.iter().filter(|&&t| t == 50_256).count(), blocks.len());
    assert_eq!(m.metadata["documents"], blocks.len());
    assert_eq!(*a.last().unwrap(), 50_256);
}

#[test]
fn ingest_jsonl_u16_refuses_70000_and_auto_stores_u32() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("docs.jsonl");
    std::fs::write(&input, "{\"ids\": [1, 2, 3]}\n{\"ids\": [70000, 5]}\n").unwrap();
    let out16 = tmp.path().join("s16");
    let o = bin()
        .args(["ingest", "jsonl", "--out", out16.to_str().unwrap(), "--tokens-field", "ids", "--dtype", "u16"])
        .arg(&input)
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("70000"), "{err}");
    assert!(err.contains("document 1"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let out = tmp.path().join("auto");
    run_ok(&["ingest", "jsonl", "--out", out.to_str().unwrap(), "--tokens-field", "ids", input.to_str().unwrap()]);
    assert_eq!(guideloom::storage::Manifest::load(&out).unwrap().dtype, serde_json::json!("<u4"));
    assert_eq!(read_u32_stream(&out), [1, 2, 3, 70_000, 5]);
}

#[test]
fn inspect_verify_names_the_flipped_shard() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("docs.jsonl");
    let lines: String = (0..40).map(|i| format!("{{\"ids\": [{i}, {}, {}]}}\n", i + 1, i + 2)).collect();
    std::fs::write(&input, lines).unwrap();
    let out = tmp.path().join("s");
    run_ok(&["ingest", "jsonl", "--out", out.to_str().unwrap(), "--tokens-field", "ids", "--shards", "3", input.to_str().unwrap()]);
    let o = run_ok(&["inspect", out.to_str().unwrap(), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["kind"], "stream");
    assert_eq!(v["dtype"], "<u2");
    assert_eq!(v["elements"], 120);
    assert_eq!(v["shards"].as_array().unwrap().len(), 3);
    assert_eq!(v["shards"][0]["elements"], 42);
    assert_eq!(v["shards"][0]["bytes"], 84);
    run_ok(&["inspect", out.to_str().unwrap(), "--verify"]);
    let shard = out.join("shard-00001.stream");
    let mut b = std::fs::read(&shard).unwrap();
    b[3] ^= 1;
    std::fs::write(&shard, b).unwrap();
    let o = bin().args(["inspect", out.to_str().unwrap(), "--verify"]).output().unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("shard 1") && err.contains("shard-00001.stream"), "{err}");
}

#[test]
fn errors_are_one_sentence_without_panic() {
    let o = bin().args(["inspect", "/nonexistent/storage"]).output().unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.trim(), "error: /nonexistent/storage is not a guideloom storage (no manifest.json)");
}
