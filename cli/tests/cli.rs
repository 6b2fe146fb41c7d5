//! The `guideloom` binary driven from outside, on real files.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use guideloom::storage::Window;

/// Every `--backend` value the CLI accepts (`auto`, `pread`, `io-uring`, `mmap`) that this
/// host can run: `io-uring` is left out with a note where io_uring cannot be set up (a
/// sandbox blocking it), or fails the test when `GUIDELOOM_REQUIRE_BACKENDS` names io_uring
/// (as CI sets it), the rule the storage tests follow.
pub(crate) fn backends() -> Vec<&'static str> {
    let mut v = vec!["auto", "pread", "mmap"];
    match guideloom::storage::io_uring_probe() {
        Ok(()) => v.insert(2, "io-uring"),
        Err(e) => guideloom_testkit::skip_backend("io_uring", "--backend io-uring", &e),
    }
    v
}

pub(crate) fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_guideloom"))
}

pub(crate) fn run_ok(args: &[&str]) -> Output {
    let out = bin().args(args).output().expect("run guideloom");
    assert!(out.status.success(), "guideloom {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    out
}

/// Runs `guideloom ingest jsonl --out OUT --tokens-field ids [EXTRA...] INPUT`, the
/// invocation that turns the tests' JSON Lines fixtures (one `{"ids": [...]}` object a line)
/// into a storage, and checks that it succeeds.
pub(crate) fn ingest_jsonl_fixture(out: &Path, input: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["ingest", "jsonl", "--out", out.to_str().unwrap(), "--tokens-field", "ids"];
    args.extend_from_slice(extra);
    args.push(input.to_str().unwrap());
    run_ok(&args)
}

pub(crate) fn austen(name: &str) -> PathBuf {
    guideloom_testkit::repo_root().join("data/austen").join(name)
}

fn read_u32_stream(dir: &Path) -> Vec<u32> {
    let r =
        guideloom::storage::StreamReader::open(dir, guideloom::formats::TokenFormat::<u32>::new()).unwrap();
    r.read(Window::new(0, r.len())).unwrap()
}

#[test]
fn ingest_pride_and_prejudice_matches_tiktoken_cl100k() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("pp");
    let file = austen("prideprejudice.txt");
    run_ok(&[
        "ingest",
        "text",
        "--out",
        out.to_str().unwrap(),
        "--tokenizer",
        "cl100k",
        file.to_str().unwrap(),
    ]);
    let text = std::fs::read_to_string(&file).unwrap();
    let bpe = tiktoken_rs::cl100k_base().unwrap();
    let expected = bpe.encode_ordinary(&text);
    let stream = read_u32_stream(&out);
    // Pinned, so a tokenizer update that changes cl100k ids fails here (the oracle above is
    // the same tiktoken-rs the CLI links): "PRIDE AND PREJUDICE\n\n" ... "them.\n".
    assert_eq!(stream.len(), 160_980);
    assert_eq!(stream[..8], [6616, 12420, 3651, 21626, 41, 4760, 5604, 271]);
    assert_eq!(stream[stream.len() - 8..], [1027, 279, 3445, 315, 5089, 287, 1124, 627]);
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
            "ingest",
            "text",
            "--out",
            dir.to_str().unwrap(),
            "--split",
            "blank-line",
            "--eos",
            "--shards",
            shards,
            "--tokenizer",
            "gpt2",
            file.to_str().unwrap(),
        ]);
    }
    let m = guideloom::storage::Manifest::load(&four).unwrap();
    assert_eq!(m.shards().len(), 4);
    assert_eq!(m.dtype_descr(), &serde_json::json!("<u2"), "gpt2 ids fit u16");
    let read = |d: &Path| {
        let r =
            guideloom::storage::StreamReader::open(d, guideloom::formats::TokenFormat::<u16>::new()).unwrap();
        r.read(Window::new(0, r.len())).unwrap()
    };
    let (a, b) = (read(&one), read(&four));
    assert_eq!(a, b);
    // 1,035 blocks of non-blank lines (counted outside this code base: maximal runs of lines
    // that hold more than whitespace in data/austen/persuasion.txt).
    let text = std::fs::read_to_string(&file).unwrap();
    let blocks = guideloom::ingest::split_text(&text, guideloom::ingest::Split::BlankLine);
    assert_eq!(blocks.len(), 1_035);
    assert_eq!(a.iter().filter(|&&t| t == 50_256).count(), 1_035);
    assert_eq!(m.metadata()["documents"], 1_035);
    assert_eq!(*a.last().unwrap(), 50_256);
}

#[test]
fn ingest_jsonl_u16_refuses_70000_and_auto_stores_u32() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("docs.jsonl");
    std::fs::write(&input, "{\"ids\": [1, 2, 3]}\n{\"ids\": [70000, 5]}\n").unwrap();
    let out16 = tmp.path().join("s16");
    let o = bin()
        .args([
            "ingest",
            "jsonl",
            "--out",
            out16.to_str().unwrap(),
            "--tokens-field",
            "ids",
            "--dtype",
            "u16",
        ])
        .arg(&input)
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("70000"), "{err}");
    assert!(err.contains("document 1"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let out = tmp.path().join("auto");
    ingest_jsonl_fixture(&out, &input, &[]);
    assert_eq!(guideloom::storage::Manifest::load(&out).unwrap().dtype_descr(), &serde_json::json!("<u4"));
    assert_eq!(read_u32_stream(&out), [1, 2, 3, 70_000, 5]);
}

#[test]
fn inspect_verify_names_the_flipped_shard() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("docs.jsonl");
    let lines: String = (0..40).map(|i| format!("{{\"ids\": [{i}, {}, {}]}}\n", i + 1, i + 2)).collect();
    std::fs::write(&input, lines).unwrap();
    let out = tmp.path().join("s");
    ingest_jsonl_fixture(&out, &input, &["--shards", "3"]);
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
    assert_eq!(err.trim(), "error: /nonexistent/storage does not exist");
    let empty = tempfile::tempdir().unwrap();
    let o = bin().arg("inspect").arg(empty.path()).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        err.trim(),
        format!("error: {} is not a guideloom storage (no manifest.json)", empty.path().display())
    );
}

/// A JSONL-ingested storage of known ids over 3 shards: document `d` holds ids
/// `1000*d .. 1000*d + 7 + d`. Returns the directory and the concatenated stream.
pub(crate) fn known_storage(tmp: &Path) -> (PathBuf, Vec<u64>) {
    let input = tmp.join("known.jsonl");
    let mut stream = Vec::new();
    let mut lines = String::new();
    for d in 0..12u64 {
        let ids: Vec<u64> = (1000 * d..1000 * d + 7 + d).collect();
        lines.push_str(&serde_json::json!({ "ids": ids }).to_string());
        lines.push('\n');
        stream.extend(ids);
    }
    std::fs::write(&input, lines).unwrap();
    let out = tmp.join("known");
    ingest_jsonl_fixture(&out, &input, &["--shards", "3"]);
    (out, stream)
}

pub(crate) fn batches(dir: &Path, extra: &[&str]) -> Vec<String> {
    let mut args = vec!["batches", dir.to_str().unwrap()];
    args.extend_from_slice(extra);
    let out = run_ok(&args);
    String::from_utf8(out.stdout).unwrap().lines().map(str::to_string).collect()
}

#[test]
fn batches_return_exact_windows_across_shards() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, stream) = known_storage(tmp.path());
    assert_eq!(stream.len(), 150);
    let m = guideloom::storage::Manifest::load(&dir).unwrap();
    let shard_ends: Vec<u64> = m
        .shards()
        .iter()
        .scan(0, |a, s| {
            *a += s.elements.unwrap();
            Some(*a)
        })
        .collect();
    assert_eq!(shard_ends, [57, 115, 150]);
    let lines = batches(&dir, &["--seq-len", "16", "--batch-size", "4"]);
    // 150 tokens: windows of 16 with stride 16 -> 9 windows -> batches of 4, 4, 1.
    assert_eq!(lines.len(), 3);
    let mut w = 0u64;
    for (b, line) in lines.iter().enumerate() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["batch"], b as u64);
        assert_eq!(v["epoch"], 0);
        assert!(v.get("padding").is_none());
        for (i, row) in v["tokens"].as_array().unwrap().iter().enumerate() {
            assert_eq!(v["windows"][i], w);
            let expected: Vec<u64> = stream[(w * 16) as usize..(w * 16 + 16) as usize].to_vec();
            let got: Vec<u64> = row.as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
            assert_eq!(got, expected, "window {w}");
            w += 1;
        }
    }
    assert_eq!(w, 9);
    // Window 3 = tokens [48, 64) crosses the shard boundary at 57; with stride 10, window 10
    // = [100, 116) crosses the one at 115.
    let v: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
    assert_eq!(v["tokens"][3][8], 5011, "last id of shard 0");
    assert_eq!(v["tokens"][3][9], 6000, "first id of shard 1");
    let lines = batches(&dir, &["--seq-len", "16", "--stride", "10", "--batch-size", "14"]);
    let v: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
    assert_eq!(v["windows"].as_array().unwrap().len(), 14);
    let row10: Vec<u64> = v["tokens"][10].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
    assert_eq!(row10, stream[100..116].to_vec());
    assert_eq!((row10[14], row10[15]), (9_015, 10_000), "last of shard 1, first of shard 2");
}

#[test]
fn batches_are_identical_for_every_worker_count_prefetch_and_backend() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, _) = known_storage(tmp.path());
    let base =
        ["--seq-len", "7", "--stride", "5", "--batch-size", "3", "--shuffle", "--seed", "9", "--epochs", "2"];
    let reference = batches(&dir, &base);
    assert_eq!(reference.len(), 20, "29 windows -> 10 batches per epoch, 2 epochs");
    for workers in ["0", "1", "2", "4"] {
        for prefetch in ["1", "8"] {
            for backend in crate::cli::backends() {
                let mut args = base.to_vec();
                args.extend_from_slice(&["--workers", workers, "--prefetch", prefetch, "--backend", backend]);
                assert_eq!(
                    batches(&dir, &args),
                    reference,
                    "workers {workers} prefetch {prefetch} backend {backend}"
                );
            }
        }
    }
    // Two ranks: disjoint windows per epoch, padding flagged in the last global batch.
    let r0 = batches(&dir, &[&base[..], &["--world-size", "2", "--rank", "0", "--no-tokens"]].concat());
    let r1 = batches(&dir, &[&base[..], &["--world-size", "2", "--rank", "1", "--no-tokens"]].concat());
    assert_eq!(r0.len(), r1.len());
    // 29 windows = 4 full global batches of 6, then positions 24..30: rank 1 gets 27, 28 and
    // the wrapped position 29 (padding).
    assert_eq!(r1.len(), 10);
    let last0: serde_json::Value = serde_json::from_str(&r0[4]).unwrap();
    let last1: serde_json::Value = serde_json::from_str(&r1[4]).unwrap();
    assert!(last1.get("tokens").is_none());
    assert!(last0.get("padding").is_none());
    assert_eq!(last1["padding"], serde_json::json!([false, false, true]));
    let windows = |lines: &[String]| -> Vec<u64> {
        lines[..5]
            .iter()
            .flat_map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                v["windows"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect::<Vec<_>>()
            })
            .collect()
    };
    let (mut w0, mut w1) = (windows(&r0), windows(&r1));
    w1.pop(); // the padding window repeats one of the epoch
    w0.extend(w1);
    w0.sort();
    assert_eq!(w0, (0..29).collect::<Vec<u64>>(), "the ranks split one epoch");
}

#[test]
fn save_state_and_resume_reproduce_the_rest_with_another_worker_count() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, _) = known_storage(tmp.path());
    let base = ["--seq-len", "8", "--batch-size", "2", "--shuffle", "--seed", "3", "--epochs", "3"];
    let full = batches(&dir, &[&base[..], &["--workers", "2"]].concat());
    assert_eq!(full.len(), 27);
    let state = tmp.path().join("state.json");
    for k in [0usize, 1, 9, 10, 26, 27] {
        let ks = k.to_string();
        let head = batches(
            &dir,
            &[&base[..], &["--workers", "2", "--max-batches", &ks, "--save-state", state.to_str().unwrap()]]
                .concat(),
        );
        assert_eq!(head, full[..k].to_vec());
        let text = std::fs::read_to_string(&state).unwrap();
        assert!(text.len() < 1024);
        let tail =
            batches(&dir, &[&base[..], &["--workers", "4", "--resume", state.to_str().unwrap()]].concat());
        assert_eq!(tail, full[k..].to_vec(), "resume after {k}");
    }
    // A state restored onto another configuration is refused, naming the field. (Another
    // batch size is another global batch, accepted where the consumed windows divide it
    // (issue 17): this state, at the end of the run, resumes to no batch.)
    let refused = |extra: &[&str]| {
        let o = bin()
            .args(["batches", dir.to_str().unwrap(), "--seq-len", "8", "--shuffle", "--epochs", "3"])
            .args(extra)
            .arg("--resume")
            .arg(&state)
            .output()
            .unwrap();
        (
            o.status.success(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let (ok, stdout, stderr) = refused(&["--batch-size", "2", "--seed", "4"]);
    assert!(!ok);
    assert!(stderr.contains("seed"), "{stderr}");
    assert_eq!(refused(&["--batch-size", "4", "--seed", "3"]), (true, String::new(), String::new()));
    assert!(stdout.is_empty());
}

#[test]
fn doc_meta_batches_report_per_token_documents() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("lines.txt");
    std::fs::write(&input, "hello world\nsecond document here\nthird\n").unwrap();
    let out = tmp.path().join("dm");
    run_ok(&[
        "ingest",
        "text",
        "--out",
        out.to_str().unwrap(),
        "--split",
        "line",
        "--doc-meta",
        "--tokenizer",
        "gpt2",
        input.to_str().unwrap(),
    ]);
    let bpe = tiktoken_rs::r50k_base().unwrap();
    let lens: Vec<usize> = ["hello world", "second document here", "third"]
        .iter()
        .map(|t| bpe.encode_ordinary(t).len())
        .collect();
    let total: usize = lens.iter().sum();
    let lines = batches(&out, &["--seq-len", &total.to_string()]);
    assert_eq!(lines.len(), 1);
    let v: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
    let docs: Vec<u64> = v["documents"][0].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
    let expected: Vec<u64> =
        lens.iter().enumerate().flat_map(|(d, &n)| std::iter::repeat_n(d as u64, n)).collect();
    assert_eq!(docs, expected);
}

#[test]
fn batches_on_a_truncated_shard_names_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, _) = known_storage(tmp.path());
    let shard = dir.join("shard-00002.stream");
    std::fs::OpenOptions::new().write(true).open(&shard).unwrap().set_len(10).unwrap();
    let o = bin().args(["batches", dir.to_str().unwrap(), "--seq-len", "8"]).output().unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("shard-00002.stream") && err.contains("shorter than committed"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn oam_fromdata_and_read_reproduce_the_golden_cases() {
    let tmp = tempfile::tempdir().unwrap();
    let golden = guideloom_testkit::repo_root().join("oamap/tests/data/golden");
    for case in ["list_of_records", "nullable_union", "utf8_strings", "list_of_lists"] {
        let c: serde_json::Value =
            serde_json::from_slice(&std::fs::read(golden.join(format!("{case}.json"))).unwrap()).unwrap();
        let (schema, data) = (tmp.path().join("schema.json"), tmp.path().join("data.json"));
        std::fs::write(&schema, c["schema"].to_string()).unwrap();
        std::fs::write(&data, c["data"].to_string()).unwrap();
        let o = run_ok(&[
            "oam",
            "fromdata",
            "--schema",
            schema.to_str().unwrap(),
            "--data",
            data.to_str().unwrap(),
        ]);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["arrays"], c["arrays"], "{case}");
        let arrays = tmp.path().join("arrays.json");
        std::fs::write(&arrays, &o.stdout).unwrap();
        let o = run_ok(&[
            "oam",
            "read",
            "--schema",
            schema.to_str().unwrap(),
            "--arrays",
            arrays.to_str().unwrap(),
        ]);
        let back: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(back, c["data"], "{case}");
        // Through an .npz file with the schema stored inside.
        let npz = tmp.path().join("x.npz");
        let args =
            ["oam", "fromdata", "--schema", schema.to_str().unwrap(), "--data", data.to_str().unwrap()];
        run_ok(&[&args[..], &["--out", npz.to_str().unwrap()]].concat());
        let o = run_ok(&["oam", "read", npz.to_str().unwrap()]);
        assert_eq!(
            serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap(),
            c["data"],
            "{case} via npz"
        );
    }
}

#[test]
fn oam_read_planets_npz_star_258() {
    let npz = guideloom_testkit::repo_root().join("data/exoplanets/planets.npz");
    let o = run_ok(&["oam", "read", npz.to_str().unwrap(), "--index", "258"]);
    let star: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let names: Vec<&str> =
        star["planets"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["HD 40307 b", "HD 40307 c", "HD 40307 d", "HD 40307 f", "HD 40307 g"]);
    let o = bin().args(["oam", "read", npz.to_str().unwrap(), "--index", "2660"]).output().unwrap();
    assert!(!o.status.success());
    assert!(!String::from_utf8_lossy(&o.stderr).contains("panicked"));
}

#[test]
fn ingest_refuses_an_existing_storage_unless_append_and_append_continues_it() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a.jsonl"), tmp.path().join("b.jsonl"));
    std::fs::write(&a, "{\"ids\": [1, 2]}\n{\"ids\": [3]}\n").unwrap();
    std::fs::write(&b, "{\"ids\": [4, 5, 6]}\n").unwrap();
    let out = tmp.path().join("s");
    let o = out.to_str().unwrap();
    ingest_jsonl_fixture(&out, &a, &["--shards", "2"]);
    let again = bin()
        .args(["ingest", "jsonl", "--out", o, "--tokens-field", "ids", b.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!again.status.success());
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("--append"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    ingest_jsonl_fixture(&out, &b, &["--append"]);
    let m = guideloom::storage::Manifest::load(&out).unwrap();
    assert_eq!(
        m.shards().iter().map(|s| s.id).collect::<Vec<_>>(),
        [0, 1, 2],
        "appended after the last shard"
    );
    assert_eq!(m.metadata()["documents"], 3);
    let r =
        guideloom::storage::StreamReader::open(&out, guideloom::formats::TokenFormat::<u16>::new()).unwrap();
    assert_eq!(r.read(Window::new(0, r.len())).unwrap(), vec![1, 2, 3, 4, 5, 6]);
    // Another field (or tokenizer) is refused, naming it.
    let txt = tmp.path().join("t.jsonl");
    std::fs::write(&txt, "{\"text\": \"hello\"}\n").unwrap();
    let mixed = bin()
        .args(["ingest", "jsonl", "--out", o, "--text-field", "text", "--append", txt.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!mixed.status.success());
    let err = String::from_utf8_lossy(&mixed.stderr);
    assert!(err.contains("cannot append") && err.contains("text_field = none"), "{err}");
}

#[test]
fn doc_meta_append_continues_document_ordinals() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a.txt"), tmp.path().join("b.txt"));
    std::fs::write(&a, "one\ntwo\n").unwrap();
    std::fs::write(&b, "three\n").unwrap();
    let out = tmp.path().join("dm");
    let o = out.to_str().unwrap();
    let base = ["ingest", "text", "--out", o, "--split", "line", "--doc-meta", "--tokenizer", "gpt2"];
    run_ok(&[&base[..], &[a.to_str().unwrap()]].concat());
    run_ok(&[&base[..], &["--append", b.to_str().unwrap()]].concat());
    let lines = batches(&out, &["--seq-len", "3"]);
    let v: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
    assert_eq!(v["documents"], serde_json::json!([[0, 1, 2]]), "one token per line: ordinals 0, 1, then 2");
}

/// `ingest jsonl --doc-meta` keeps each line's document boundary (issue 16).
#[test]
fn ingest_jsonl_doc_meta_keeps_document_boundaries() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("docs.jsonl");
    std::fs::write(&input, "{\"ids\": [5, 6, 0]}\n{\"ids\": [7, 8]}\n{\"ids\": [9]}\n").unwrap();
    let out = tmp.path().join("dm");
    ingest_jsonl_fixture(&out, &input, &["--doc-meta"]);
    let lines = batches(&out, &["--seq-len", "6"]);
    let v: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
    assert_eq!(v["tokens"], serde_json::json!([[5, 6, 0, 7, 8, 9]]));
    assert_eq!(v["documents"], serde_json::json!([[0, 0, 0, 1, 1, 2]]));
}

/// Writes a JSONL storage of `docs` (token ids) into `dir`, with document boundaries when
/// `doc_meta`.
fn jsonl_storage(dir: &Path, name: &str, docs: &[&[u32]], doc_meta: bool) -> PathBuf {
    let input = dir.join(format!("{name}.jsonl"));
    let text: String = docs.iter().map(|d| format!("{{\"ids\": {d:?}}}\n")).collect();
    std::fs::write(&input, text).unwrap();
    let out = dir.join(name);
    let mut args = vec!["ingest", "jsonl", "--out", out.to_str().unwrap(), "--tokens-field", "ids"];
    if doc_meta {
        args.push("--doc-meta");
    }
    args.push(input.to_str().unwrap());
    run_ok(&args);
    out
}

fn json_lines(out: &std::process::Output) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// `batches --mix` (issue 16): windows of two storages mixed 1:1, each line with its sources.
#[test]
fn batches_mix_two_storages_with_sources() {
    let tmp = tempfile::tempdir().unwrap();
    let a = jsonl_storage(tmp.path(), "a", &[&[1, 2, 3, 4, 5, 6]], false);
    let b = jsonl_storage(tmp.path(), "b", &[&[10, 11, 12, 13]], false);
    let ma = format!("{}=1", a.display());
    let mb = format!("{}=1", b.display());
    let o = run_ok(&["batches", "--mix", &ma, "--mix", &mb, "--seq-len", "2", "--batch-size", "2"]);
    let v = json_lines(&o);
    assert_eq!(v.len(), 2);
    assert_eq!(v[0]["tokens"], serde_json::json!([[1, 2], [10, 11]]));
    assert_eq!(v[0]["sources"], serde_json::json!([0, 1]));
    assert_eq!(v[1]["tokens"], serde_json::json!([[3, 4], [12, 13]]));
    // Greedy 0.7/0.3 with a budget: Megatron's order of sources.
    let ma = format!("{}=0.7", a.display());
    let mb = format!("{}=0.3", b.display());
    let o = run_ok(&[
        "batches",
        "--mix",
        &ma,
        "--mix",
        &mb,
        "--mix-schedule",
        "greedy",
        "--mix-stop",
        "budget:10",
        "--seq-len",
        "1",
        "--batch-size",
        "10",
    ]);
    assert_eq!(json_lines(&o)[0]["sources"], serde_json::json!([0, 1, 0, 0, 1, 0, 0, 1, 0, 0]));
}

/// `batches --pack` (issue 16, acceptance 8 end to end): documents from a --doc-meta
/// storage packed into one row, with segment ids, positions and per-document targets.
#[test]
fn batches_pack_documents_of_a_doc_meta_storage() {
    let tmp = tempfile::tempdir().unwrap();
    let d = jsonl_storage(tmp.path(), "d", &[&[5, 6, 0], &[7, 8, 0], &[9]], true);
    let dir = d.to_str().unwrap();
    let o = run_ok(&["batches", dir, "--pack", "first-fit", "--bins", "2", "--seq-len", "7"]);
    let v = json_lines(&o);
    assert_eq!(v.len(), 1);
    assert_eq!(v[0]["tokens"], serde_json::json!([[5, 6, 0, 7, 8, 0, 9]]));
    assert_eq!(v[0]["segment_ids"], serde_json::json!([[1, 1, 1, 2, 2, 2, 3]]));
    assert_eq!(v[0]["positions"], serde_json::json!([[0, 1, 2, 0, 1, 2, 0]]));
    assert_eq!(v[0]["targets"], serde_json::json!([[6, 0, -100, 8, 0, -100, -100]]));
    // Rows of 4 with --pad-id 99: planned BFD packs [7,8,0,9], [5,6,0,99].
    let o = run_ok(&[
        "batches",
        dir,
        "--pack",
        "planned-bfd",
        "--seq-len",
        "4",
        "--pad-id",
        "99",
        "--batch-size",
        "2",
    ]);
    assert_eq!(json_lines(&o)[0]["tokens"], serde_json::json!([[5, 6, 0, 9], [7, 8, 0, 99]]));
    // A plain token stream has no document boundaries to pack.
    let plain = jsonl_storage(tmp.path(), "p", &[&[1, 2]], false);
    let out = bin()
        .args(["batches", plain.to_str().unwrap(), "--pack", "first-fit", "--seq-len", "4"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--doc-meta"));
}

/// State save/resume of packed and mixed batches equals the uninterrupted run.
#[test]
fn batches_mix_and_pack_resume_equals_the_uninterrupted_run() {
    let tmp = tempfile::tempdir().unwrap();
    let docs: Vec<Vec<u32>> = (0..20u32).map(|i| vec![i + 1; 1 + (i as usize * 7) % 5]).collect();
    let refs: Vec<&[u32]> = docs.iter().map(|d| d.as_slice()).collect();
    let a = jsonl_storage(tmp.path(), "a", &refs[..12], true);
    let b = jsonl_storage(tmp.path(), "b", &refs[12..], true);
    let ma = format!("{}=2", a.display());
    let mb = format!("{}=1", b.display());
    let state = tmp.path().join("state.json");
    let st = state.to_str().unwrap();
    let base = [
        "batches",
        "--mix",
        &ma,
        "--mix",
        &mb,
        "--mix-stop",
        "all-exhausted",
        "--pack",
        "best-fit",
        "--bins",
        "2",
        "--seq-len",
        "6",
        "--batch-size",
        "2",
        "--shuffle",
        "--epochs",
        "2",
    ];
    let full = json_lines(&run_ok(&base));
    assert!(full.len() >= 4);
    let head = json_lines(&run_ok(&[&base[..], &["--max-batches", "3", "--save-state", st]].concat()));
    assert_eq!(head[..], full[..3]);
    assert!(std::fs::read(&state).unwrap().len() < 1024);
    let rest = json_lines(&run_ok(&[&base[..], &["--resume", st]].concat()));
    assert_eq!(rest[..], full[3..]);
    assert!(full[0]["sources"].is_array());
}

/// `batches --pack stream-*` (issue 16, the stage): Grain's first-fit rows over the
/// storage's order, and exact resume of a shuffled, mixed, two-epoch streaming packer.
#[test]
fn batches_stream_packers_rows_and_resume() {
    let tmp = tempfile::tempdir().unwrap();
    let d = jsonl_storage(tmp.path(), "d", &[&[1, 1, 1], &[2, 2, 2, 2], &[3, 3], &[4]], true);
    let dir = d.to_str().unwrap();
    let rows = |pack: &str| {
        let o =
            run_ok(&["batches", dir, "--pack", pack, "--bins", "2", "--seq-len", "6", "--batch-size", "2"]);
        let v = json_lines(&o);
        assert_eq!(v.len(), 1, "{pack}");
        (v[0]["tokens"].clone(), v[0]["records"].clone())
    };
    assert_eq!(
        rows("stream-first-fit"),
        (serde_json::json!([[1, 1, 1, 3, 3, 4], [2, 2, 2, 2, 0, 0]]), serde_json::json!([0, 2, 3, 1]))
    );
    assert_eq!(rows("stream-best-fit").0, serde_json::json!([[1, 1, 1, 4, 0, 0], [2, 2, 2, 2, 3, 3]]));
    assert_eq!(rows("stream-concat-split").0, serde_json::json!([[1, 1, 1, 2, 2, 2], [2, 3, 3, 4, 0, 0]]));

    let docs: Vec<Vec<u32>> = (0..30u32).map(|i| vec![i + 1; 1 + (i as usize * 7) % 9]).collect();
    let refs: Vec<&[u32]> = docs.iter().map(|d| d.as_slice()).collect();
    let a = jsonl_storage(tmp.path(), "a", &refs[..18], true);
    let b = jsonl_storage(tmp.path(), "b", &refs[18..], true);
    let (ma, mb) = (format!("{}=2", a.display()), format!("{}=1", b.display()));
    let state = tmp.path().join("state.json");
    let st = state.to_str().unwrap();
    for pack in ["stream-first-fit", "stream-best-fit", "stream-concat-split"] {
        let base = [
            "batches",
            "--mix",
            &ma,
            "--mix",
            &mb,
            "--mix-stop",
            "all-exhausted",
            "--pack",
            pack,
            "--bins",
            "3",
            "--seq-len",
            "6",
            "--overflow",
            "split",
            "--batch-size",
            "2",
            "--shuffle",
            "--epochs",
            "2",
        ];
        let full = json_lines(&run_ok(&[&base[..], &["--workers", "3"]].concat()));
        assert!(full.len() >= 6, "{pack}");
        for k in [1, 4] {
            let head = json_lines(&run_ok(
                &[&base[..], &["--max-batches", &k.to_string(), "--save-state", st, "--workers", "1"]]
                    .concat(),
            ));
            assert_eq!(head[..], full[..k], "{pack}");
            assert!(std::fs::read(&state).unwrap().len() < 1024);
            let rest = json_lines(&run_ok(&[&base[..], &["--resume", st, "--workers", "0"]].concat()));
            assert_eq!(rest[..], full[k..], "{pack} after {k}");
        }
        assert!(full[0]["sources"].is_array());
        // Every token of every document once per epoch (split documents included).
        let real: usize = full
            .iter()
            .filter(|b| b["epoch"] == 0)
            .flat_map(|b| {
                b["segment_ids"].as_array().unwrap().iter().flat_map(|r| r.as_array().unwrap().clone())
            })
            .filter(|s| s != 0)
            .count();
        assert_eq!(real, docs.iter().map(Vec::len).sum::<usize>(), "{pack}");
    }
}

/// `bench --pack ... --json` (issue 16): the pipeline `batches` runs, with its share of padding.
#[test]
fn bench_mix_and_pack_report_rows_and_padding() {
    let tmp = tempfile::tempdir().unwrap();
    let d = jsonl_storage(tmp.path(), "d", &[&[1, 1, 1], &[2, 2, 2, 2], &[3, 3], &[4]], true);
    let dir = d.to_str().unwrap();
    let bench = |args: &[&str]| -> serde_json::Value {
        let o = run_ok(&[&["bench", "--json", "--seq-len", "6", "--batch-size", "2"], args].concat());
        serde_json::from_slice(&o.stdout).unwrap()
    };
    for (pack, rows) in [("stream-first-fit", 2), ("best-fit", 2), ("planned-bfd", 2), ("concat-split", 2)] {
        let v = bench(&[dir, "--pack", pack, "--bins", "2"]);
        assert_eq!(
            (v["rows"].as_u64(), v["tokens"].as_u64(), v["real_tokens"].as_u64()),
            (Some(rows), Some(12), Some(10)),
            "{pack}"
        );
        assert_eq!(v["padding_share"].as_f64(), Some(2.0 / 12.0), "{pack}");
    }
    // Without --pack a mixture mixes windows: one window of 6 tokens per storage of 10.
    let ma = format!("{dir}=1");
    let v = bench(&["--mix", &ma, "--mix", &ma]);
    assert_eq!(
        (v["rows"].as_u64(), v["real_tokens"].as_u64(), v["pipeline"].as_str()),
        (Some(2), Some(12), Some("records"))
    );
}

#[test]
fn bad_numbers_are_one_sentence_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, _) = known_storage(tmp.path());
    let d = dir.to_str().unwrap();
    let never = tmp.path().join("never-written");
    let out = never.to_str().unwrap();
    for (args, needle) in [
        (vec!["bench", d, "--seq-len", "8", "--seconds=-1"], "--seconds"),
        (vec!["bench", d, "--seq-len", "8", "--seconds", "nan"], "--seconds"),
        (vec!["bench", d, "--seq-len", "8", "--seconds", "inf"], "--seconds"),
        (vec!["bench", d, "--seq-len", "8", "--max-batches", "0"], "--max-batches"),
        (vec!["bench", d, "--seq-len", "100000"], "no batch"),
        (vec!["batches", d, "--seq-len", "8", "--workers", "100000"], "at most 1024"),
        (vec!["ingest", "jsonl", "--out", out, "--tokens-field", "i", "--shards", "0", d], "shards"),
    ] {
        let o = bin().args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(if args[0] == "ingest" { 2 } else { 1 }), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    assert!(!never.exists(), "a refused ingest wrote nothing");
}

#[test]
fn oam_fromdata_refuses_float32_overflow_instead_of_a_silent_null() {
    let tmp = tempfile::tempdir().unwrap();
    let (schema, data) = (tmp.path().join("s.json"), tmp.path().join("d.json"));
    std::fs::write(&schema, r#"{"type": "list", "content": {"type": "primitive", "dtype": "float32"}}"#)
        .unwrap();
    std::fs::write(&data, "[1e300, 2.5]").unwrap();
    let o = bin()
        .args(["oam", "fromdata", "--schema", schema.to_str().unwrap(), "--data", data.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("out of range for float32"));
}

/// A u32 token storage of `windows` windows of `seq_len` tokens, each token an 11-character
/// id (so a batch of one window prints about `12 * seq_len` bytes); `change` replaces token
/// `(index, id)`.
fn wide_storage(dir: &Path, windows: u64, seq_len: u64, change: Option<(u64, u32)>) -> Vec<u32> {
    let mut tokens: Vec<u32> =
        (0..windows * seq_len).map(|i| 1_000_000_000 + (i as u32).wrapping_mul(7_919) % 1_000_000).collect();
    if let Some((i, v)) = change {
        tokens[i as usize] = v;
    }
    let mut w =
        guideloom::storage::StreamWriter::open(dir, guideloom::formats::TokenFormat::<u32>::new()).unwrap();
    for (s, chunk) in tokens.chunks((seq_len * 3) as usize).enumerate() {
        w.append(s as u64, chunk).unwrap();
    }
    w.commit().unwrap();
    tokens
}

/// Issue 21, item 5: `--save-state` with a reader that takes k lines and closes the pipe
/// records exactly k (the batch whose write failed is not delivered), and resuming from the
/// state prints exactly batches k.. of the uninterrupted run. Each line is larger than any
/// pipe buffer plus the reader's buffer (over 1 MiB + 64 KiB), so the child cannot finish
/// writing line k before the reader closes.
#[test]
fn save_state_with_a_closed_stdout_records_what_was_delivered() {
    use std::io::BufRead;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("wide");
    wide_storage(&dir, 4, 120_000, None);
    let d = dir.to_str().unwrap();
    let base = ["batches", d, "--seq-len", "120000", "--batch-size", "1", "--shuffle", "--seed", "4"];
    let base = [&base[..], &["--epochs", "3"]].concat();
    let full: Vec<String> =
        String::from_utf8(run_ok(&base).stdout).unwrap().lines().map(str::to_string).collect();
    assert_eq!(full.len(), 12);
    assert!(full.iter().all(|l| l.len() > (1 << 20) + (64 << 10)), "lines too short for the test");
    let state = tmp.path().join("state.json");
    for k in [0usize, 1, 5] {
        let mut child = bin()
            .args(&base)
            .arg("--save-state")
            .arg(&state)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut reader = std::io::BufReader::new(child.stdout.take().unwrap());
        for (i, want) in full.iter().enumerate().take(k) {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            assert_eq!(line.trim_end(), want, "line {i}");
        }
        drop(reader); // closes the pipe
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "k={k}: {}", String::from_utf8_lossy(&out.stderr));
        let s = guideloom::loader::State::from_json(&std::fs::read_to_string(&state).unwrap()).unwrap();
        assert_eq!(s.next_batch, k as u64, "the state records the {k} lines the reader took");
        let rest = run_ok(&[&base[..], &["--resume", state.to_str().unwrap()]].concat());
        let rest: Vec<&str> = std::str::from_utf8(&rest.stdout).unwrap().lines().collect();
        assert_eq!(rest, full[k..], "resume after {k}");
        let first: serde_json::Value = serde_json::from_str(rest[0]).unwrap();
        assert_eq!(first["batch"], k as u64);
    }
}

/// Issue 21, item 2: two storages with the same number of windows that differ in one token
/// have different fingerprints: a state saved on one is refused on the other, naming
/// `source.fingerprint` with both values; a metadata-only commit keeps the fingerprint, so
/// the state still resumes there.
#[test]
fn resume_onto_other_data_of_the_same_length_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    let tokens = wide_storage(&a, 6, 10, None);
    wide_storage(&b, 6, 10, Some((33, tokens[33] + 1)));
    let state = tmp.path().join("state.json");
    let args = |dir: &Path| -> Vec<String> {
        ["batches", dir.to_str().unwrap(), "--seq-len", "10", "--batch-size", "2", "--shuffle", "--no-tokens"]
            .map(String::from)
            .to_vec()
    };
    let with = |dir: &Path, extra: &[&str]| {
        let mut v = args(dir);
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    let head = run_ok(
        &with(&a, &["--max-batches", "1", "--save-state", state.to_str().unwrap()])
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );
    assert_eq!(String::from_utf8(head.stdout).unwrap().lines().count(), 1);
    let fp = |dir: &Path| {
        guideloom::storage::StreamReader::open(dir, guideloom::formats::TokenFormat::<u32>::new())
            .unwrap()
            .fingerprint()
    };
    assert_ne!(fp(&a), fp(&b));
    let o = bin().args(with(&b, &["--resume", state.to_str().unwrap()])).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("source.fingerprint"), "{err}");
    // Metadata only: the fingerprint and the resumed batches stay.
    let rest_a = run_ok(
        &with(&a, &["--resume", state.to_str().unwrap()]).iter().map(String::as_str).collect::<Vec<_>>(),
    )
    .stdout;
    let before = fp(&a);
    let mut w =
        guideloom::storage::StreamWriter::open(&a, guideloom::formats::TokenFormat::<u32>::new()).unwrap();
    w.set_metadata("note", serde_json::json!("metadata only"));
    w.commit().unwrap();
    drop(w);
    assert_eq!(fp(&a), before);
    let again = run_ok(
        &with(&a, &["--resume", state.to_str().unwrap()]).iter().map(String::as_str).collect::<Vec<_>>(),
    )
    .stdout;
    assert_eq!(again, rest_a);
    assert_eq!(String::from_utf8(again).unwrap().lines().count(), 2, "6 windows, batches of 2, one taken");
}

/// The sum of the token ids of window `w` (length `len`, stride `stride`) of `stream`.
fn window_sum(stream: &[u64], w: u64, len: u64, stride: u64) -> u64 {
    stream[(w * stride) as usize..(w * stride + len) as usize].iter().sum()
}

/// Issue 12: `bench` takes `--stride` and `--seed` as `batches` does; the JSON report counts
/// the strided windows, its checksum is the sum of the windows' ids, and it echoes both.
#[test]
fn bench_honours_stride_and_seed() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, stream) = known_storage(tmp.path());
    let d = dir.to_str().unwrap();
    let bench_json = |extra: &[&str]| -> serde_json::Value {
        let o = run_ok(&[&["bench", d, "--seq-len", "16", "--json"][..], extra].concat());
        serde_json::from_slice(&o.stdout).unwrap()
    };
    // 150 tokens, windows of 16 every 10 tokens: starts 0, 10, ..., 130 = 14 windows.
    let v = bench_json(&["--stride", "10", "--batch-size", "4"]);
    assert_eq!(v["windows"], 14);
    assert_eq!(v["batches"], 4);
    assert_eq!(v["tokens"], 14 * 16);
    assert_eq!(v["stride"], 10);
    let all: u64 = (0..14).map(|w| window_sum(&stream, w, 16, 10)).sum();
    assert_eq!(v["checksum"], all.to_string());
    // The first shuffled window depends on --seed: bench's one-window checksum follows the
    // window `batches` shows first for the same seed.
    let first_window = |seed: &str| -> u64 {
        let args = ["--seq-len", "16", "--stride", "10", "--shuffle", "--seed", seed, "--max-batches", "1"];
        let lines = batches(&dir, &[&args[..], &["--no-tokens"]].concat());
        let v: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
        v["windows"][0].as_u64().unwrap()
    };
    let seeds: Vec<(String, u64)> = (0..20).map(|s| (s.to_string(), first_window(&s.to_string()))).collect();
    let (s1, w1) = &seeds[0];
    let (s2, w2) = seeds.iter().find(|(_, w)| w != w1).expect("two seeds with different first windows");
    for (seed, w) in [(s1, w1), (s2, w2)] {
        let v = bench_json(&["--stride", "10", "--shuffle", "--seed", seed, "--max-batches", "1"]);
        assert_eq!(v["seed"], seed.parse::<u64>().unwrap());
        assert_eq!(v["windows"], 1, "seed {seed}");
        assert_eq!(v["checksum"], window_sum(&stream, *w, 16, 10).to_string(), "seed {seed}: window {w}");
    }
}

// ------------------------------------------------------------------ issue 17: elastic, sequential

/// The windows (record numbers) of every printed batch of `lines`.
fn windows_of(lines: &[String]) -> Vec<Vec<u64>> {
    lines
        .iter()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["windows"].as_array().unwrap().iter().map(|w| w.as_u64().unwrap()).collect()
        })
        .collect()
}

/// Issue 17 (CLI): a state saved by `batches` on 8 ranks (global batch 24) resumes on 6 ranks:
/// the states of ranks 0 and 7 are byte-identical, and the 6 new ranks continue at window 48
/// (75 windows of 2 tokens; with --drop-remainder 3 steps per epoch).
#[test]
fn issue17_batches_resume_a_state_of_eight_ranks_on_six() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, _) = known_storage(tmp.path());
    let common = ["--seq-len", "2", "--global-batch", "24", "--drop-remainder", "--no-tokens"];
    let mut states = Vec::new();
    for rank in ["0", "7"] {
        let state = tmp.path().join(format!("state{rank}.json"));
        let args =
            [&common[..], &["--world-size", "8", "--rank", rank, "--max-batches", "2", "--save-state"]]
                .concat();
        let mut args: Vec<&str> = args;
        args.push(state.to_str().unwrap());
        let lines = batches(&dir, &args);
        assert_eq!(windows_of(&lines)[0], if rank == "0" { [0, 1, 2] } else { [21, 22, 23] });
        states.push(std::fs::read_to_string(&state).unwrap());
    }
    assert_eq!(states[0], states[1]);
    assert!(states[0].contains(r#""next_batch":2,"global_batch":24"#), "{}", states[0]);
    let state = tmp.path().join("state0.json");
    for (rank, first) in [("0", 48u64), ("5", 68)] {
        let lines = batches(
            &dir,
            &[&common[..], &["--world-size", "6", "--rank", rank, "--resume", state.to_str().unwrap()]]
                .concat(),
        );
        let w = windows_of(&lines);
        assert_eq!(w, [(first..first + 4).collect::<Vec<_>>()], "rank {rank}: step 2 only");
        let v: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
        assert_eq!(v["batch"], 2);
    }
    // --batch-size 4 on 6 ranks is the same global batch.
    let lines = batches(
        &dir,
        &["--seq-len", "2", "--batch-size", "4", "--world-size", "6", "--rank", "1", "--drop-remainder"],
    );
    assert_eq!(windows_of(&lines)[0], [4, 5, 6, 7]);
}

/// Issue 17 (CLI): a world size that does not divide the global batch is refused naming both;
/// another global batch is refused unless --round-down, which replays flagged windows.
#[test]
fn issue17_batches_refuse_a_world_size_and_round_down_on_request() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, _) = known_storage(tmp.path());
    let d = dir.to_str().unwrap();
    let o = bin()
        .args(["batches", d, "--seq-len", "2", "--global-batch", "24", "--world-size", "5"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert_eq!(
        String::from_utf8_lossy(&o.stderr).trim(),
        "error: invalid configuration: world_size: the world size 5 does not divide the global batch 24"
    );
    let state = tmp.path().join("s.json");
    let s = state.to_str().unwrap();
    batches(&dir, &["--seq-len", "2", "--global-batch", "24", "--max-batches", "2", "--save-state", s]);
    let args = ["batches", d, "--seq-len", "2", "--global-batch", "36", "--world-size", "3", "--resume", s];
    let o = bin().args(args).output().unwrap();
    assert!(!o.status.success());
    assert_eq!(
        String::from_utf8_lossy(&o.stderr).trim(),
        "error: cannot resume with the global batch 36: the state's epoch consumed 48 positions, not a multiple of it"
    );
    let lines = batches(&dir, &[&args[2..], &["--round-down", "--no-tokens", "--max-batches", "1"]].concat());
    let v: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
    assert_eq!(v["batch"], 1);
    assert_eq!(windows_of(&lines)[0], (36..48).collect::<Vec<_>>());
    assert_eq!(v["repeat"], serde_json::json!(vec![true; 12]));
}

/// Issue 17 (CLI): `bench --resume` of a state of another world size measures the rest of the
/// epoch on this rank.
#[test]
fn issue17_bench_resumes_a_state_on_another_world_size() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, stream) = known_storage(tmp.path());
    let state = tmp.path().join("s.json");
    batches(
        &dir,
        &[
            "--seq-len",
            "2",
            "--batch-size",
            "6",
            "--max-batches",
            "2",
            "--save-state",
            state.to_str().unwrap(),
        ],
    );
    let o = run_ok(&[
        "bench",
        dir.to_str().unwrap(),
        "--seq-len",
        "2",
        "--batch-size",
        "2",
        "--world-size",
        "3",
        "--rank",
        "1",
        "--resume",
        state.to_str().unwrap(),
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    // 75 windows, global batch 6: steps 2..12 (13 steps); rank 1 takes windows 6t+2, 6t+3; the
    // last step (72..77) has 72-74 real, rank 1 gets 74 and the padding window 0.
    assert_eq!(v["batches"], 11);
    let rank1: Vec<u64> =
        (2..13).flat_map(|t| [6 * t + 2, 6 * t + 3]).map(|w| if w < 75 { w } else { w - 75 }).collect();
    let sum: u64 = rank1.iter().map(|&w| window_sum(&stream, w, 2, 2)).sum();
    assert_eq!(v["checksum"], sum.to_string());
}

/// Persuasion's first 60 paragraphs as two JSON Lines files of field `text`.
fn persuasion_jsonl(dir: &Path) -> Vec<PathBuf> {
    let text = std::fs::read_to_string(austen("persuasion.txt")).unwrap();
    let blocks = guideloom::ingest::split_text(&text, guideloom::ingest::Split::BlankLine);
    (0..2)
        .map(|f| {
            let lines: String = blocks[30 * f..30 * (f + 1)]
                .iter()
                .map(|(_, b)| format!("{}\n", serde_json::json!({ "text": b })))
                .collect();
            let p = dir.join(format!("p{f}.jsonl"));
            std::fs::write(&p, lines).unwrap();
            p
        })
        .collect()
}

fn tokens_of(lines: &[String]) -> Vec<Vec<u64>> {
    lines
        .iter()
        .flat_map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["tokens"]
                .as_array()
                .unwrap()
                .iter()
                .map(|w| w.as_array().unwrap().iter().map(|t| t.as_u64().unwrap()).collect::<Vec<_>>())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Issue 17 (CLI, item 11): `batches --sequential --jsonl ... --text-field` tokenizes on the
/// fly and prints the windows `ingest jsonl` + `batches` print for the same files.
#[test]
fn issue17_sequential_batches_equal_ingest_then_batches() {
    let tmp = tempfile::tempdir().unwrap();
    let files = persuasion_jsonl(tmp.path());
    let out = tmp.path().join("indexed");
    let mut ingest = vec!["ingest", "jsonl", "--out", out.to_str().unwrap(), "--text-field", "text"];
    ingest.extend(files.iter().map(|f| f.to_str().unwrap()));
    run_ok(&ingest);
    let indexed = batches(&out, &["--seq-len", "32", "--batch-size", "4"]);
    let mut args =
        vec!["batches", "--sequential", "--text-field", "text", "--seq-len", "32", "--batch-size", "4"];
    args.push("--jsonl");
    args.extend(files.iter().map(|f| f.to_str().unwrap()));
    let o = run_ok(&[&args[..], &["--workers", "3"]].concat());
    let sequential: Vec<String> = String::from_utf8(o.stdout).unwrap().lines().map(str::to_string).collect();
    assert_eq!(sequential.len(), indexed.len());
    assert_eq!(tokens_of(&sequential), tokens_of(&indexed));
    let v: serde_json::Value = serde_json::from_str(&sequential[0]).unwrap();
    assert_eq!(v["windows"][0], serde_json::json!([0, 0, 0]), "file 0, document 0, token 0");
    // The tail (fewer than 32 tokens) is reported on stderr.
    let err = String::from_utf8(o.stderr).unwrap();
    assert!(err.starts_with("dropped {\"epoch\":0,\"shard\":1,"), "{err}");
}

/// Issue 17 (CLI): sequential text files on 2 ranks for one batch, then on 3 ranks
/// (--resume-ranks): every token is printed once or reported as the dropped tail.
#[test]
fn issue17_sequential_batches_resume_two_ranks_on_three() {
    let tmp = tempfile::tempdir().unwrap();
    let texts: Vec<PathBuf> = ["persuasion.txt", "emma.txt", "mansfieldpark.txt"]
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let text = std::fs::read_to_string(austen(name)).unwrap();
            let cut: String = text.lines().take(40 + 10 * i).map(|l| format!("{l}\n")).collect();
            let p = tmp.path().join(name);
            std::fs::write(&p, cut).unwrap();
            p
        })
        .collect();
    let base = |world: &str, rank: &str| -> Vec<String> {
        let mut a: Vec<String> =
            ["batches", "--sequential", "--split", "blank-line", "--tokenizer", "gpt2", "--seq-len", "16"]
                .iter()
                .map(|s| s.to_string())
                .collect();
        a.extend(
            ["--cycle", "2", "--batch-size", "3", "--world-size", world, "--rank", rank].map(String::from),
        );
        a.push("--text".into());
        a.extend(texts.iter().map(|p| p.to_str().unwrap().to_string()));
        a
    };
    let mut tokens: Vec<u64> = Vec::new();
    let mut states = Vec::new();
    for rank in 0..2 {
        let state = tmp.path().join(format!("r{rank}.json"));
        let mut a = base("2", &rank.to_string());
        a.extend(["--max-batches", "1", "--save-state", state.to_str().unwrap()].map(String::from));
        let o = run_ok(&a.iter().map(String::as_str).collect::<Vec<_>>());
        let lines: Vec<String> = String::from_utf8(o.stdout).unwrap().lines().map(str::to_string).collect();
        tokens.extend(tokens_of(&lines).concat());
        states.push(state);
    }
    // The documents of each file, tokenized as `ingest text --split blank-line` does.
    let bpe = tiktoken_rs::r50k_base().unwrap();
    let docs: Vec<Vec<Vec<u64>>> = texts
        .iter()
        .map(|p| {
            let text = std::fs::read_to_string(p).unwrap();
            guideloom::ingest::split_text(&text, guideloom::ingest::Split::BlankLine)
                .iter()
                .map(|(_, block)| bpe.encode_ordinary(block).into_iter().map(u64::from).collect())
                .collect()
        })
        .collect();
    let mut tails = 0;
    for rank in 0..3 {
        let mut a = base("3", &rank.to_string());
        a.push("--resume-ranks".into());
        a.extend(states.iter().map(|s| s.to_str().unwrap().to_string()));
        let o = run_ok(&a.iter().map(String::as_str).collect::<Vec<_>>());
        let lines: Vec<String> = String::from_utf8(o.stdout).unwrap().lines().map(str::to_string).collect();
        tokens.extend(tokens_of(&lines).concat());
        for line in String::from_utf8(o.stderr).unwrap().lines() {
            let d: serde_json::Value = serde_json::from_str(line.strip_prefix("dropped ").unwrap()).unwrap();
            let at = |k: &str| d[k].as_u64().unwrap() as usize;
            tokens.extend(&docs[at("shard")][at("record")][at("from_token")..]);
            tails += 1;
        }
    }
    assert!((1..=3).contains(&tails), "{tails} tails");
    let mut all: Vec<u64> = docs.concat().concat();
    all.sort_unstable();
    tokens.sort_unstable();
    assert_eq!(tokens, all, "every token printed once or reported as a tail");
}

/// The library's mix then pack of two `--doc-meta` storages (u16 ids, as `ingest jsonl`
/// wrote them), widened as the CLI prints them: per row, its tokens and the source of each
/// piece.
fn library_mix_pack(
    dirs: &[&Path],
    config: guideloom::loader::mix::MixConfig,
    seq_len: u64,
) -> Vec<(Vec<i64>, Vec<i64>)> {
    use guideloom::formats::DocumentTokensFormat;
    use guideloom::loader::mix::Mix;
    use guideloom::loader::pack::{PackConfig, PackStrategy};
    use guideloom::loader::{DataSource, MetaDocuments};
    use guideloom::storage::StreamWithMetaReader;
    let sources: Vec<MetaDocuments<u16>> = dirs
        .iter()
        .map(|d| {
            MetaDocuments::new(StreamWithMetaReader::open(d, DocumentTokensFormat::<u16>::new()).unwrap())
                .unwrap()
        })
        .collect();
    let packed = Mix::new(sources, config)
        .unwrap()
        .pack(PackConfig::new(seq_len, PackStrategy::BestFitDecreasing), 0u16, u16::MAX)
        .unwrap();
    (0..packed.len())
        .map(|r| {
            let row = packed.get(r).unwrap();
            (
                row.tokens.iter().map(|&t| i64::from(t)).collect(),
                row.sources.iter().map(|&s| i64::from(s)).collect(),
            )
        })
        .collect()
}

/// Issue 34 item 5: `batches --mix A=0.7 --mix B=0.3 --pack` realizes the mix the library's
/// `MixConfig::new(&[0.7, 0.3])` + `Mix::pack` does (the same rows, the same sources, so the same
/// share of tokens), in records (documents) by default and in tokens with `--mix-unit tokens`
/// (`MixConfig::by_tokens`).
#[test]
fn issue34_cli_and_library_realize_the_same_mix() {
    use guideloom::loader::mix::MixConfig;
    let tmp = tempfile::tempdir().unwrap();
    // Source a: 40 documents of 2 tokens; source b: 20 documents of 6 tokens.
    let da: Vec<Vec<u32>> = (0..40u32).map(|i| vec![100 + i; 2]).collect();
    let db: Vec<Vec<u32>> = (0..20u32).map(|i| vec![200 + i; 6]).collect();
    let ra: Vec<&[u32]> = da.iter().map(Vec::as_slice).collect();
    let rb: Vec<&[u32]> = db.iter().map(Vec::as_slice).collect();
    let a = jsonl_storage(tmp.path(), "a", &ra, true);
    let b = jsonl_storage(tmp.path(), "b", &rb, true);
    let (ma, mb) = (format!("{}=0.7", a.display()), format!("{}=0.3", b.display()));
    let cli = |unit: &str| -> Vec<(Vec<i64>, Vec<i64>)> {
        let args = ["batches", "--mix", &ma, "--mix", &mb, "--mix-unit", unit, "--pack", "planned-bfd"];
        let lines = json_lines(&run_ok(&[&args[..], &["--seq-len", "8", "--batch-size", "1"]].concat()));
        let grid = |v: &serde_json::Value| -> Vec<i64> {
            v[0].as_array().unwrap().iter().map(|x| x.as_i64().unwrap()).collect()
        };
        lines.iter().map(|l| (grid(&l["tokens"]), grid(&l["sources"]))).collect()
    };
    let token_share = |rows: &[(Vec<i64>, Vec<i64>)]| {
        let (mut from_a, mut all) = (0, 0);
        for (tokens, _) in rows {
            from_a += tokens.iter().filter(|&&t| (100..200).contains(&t)).count();
            all += tokens.iter().filter(|&&t| t >= 100).count();
        }
        (from_a, all)
    };
    let records = cli("records");
    assert_eq!(records, library_mix_pack(&[&a, &b], MixConfig::new(&[0.7, 0.3]).unwrap(), 8));
    // floor(min(40 / 0.7, 20 / 0.3)) = 57 documents, ceil(57 * 0.7) = 40 of a: 80 of 182 tokens.
    assert_eq!(token_share(&records), (80, 80 + 17 * 6));
    let tokens = cli("tokens");
    let by_tokens = MixConfig::by_tokens(&[0.7, 0.3], &[40, 20], &[80, 120]).unwrap();
    // Record weights 0.7 * 40 / 80 : 0.3 * 20 / 120 = 0.35 : 0.05 = 7 : 1.
    assert_eq!(by_tokens.ratios(), [7, 1]);
    assert_eq!(tokens, library_mix_pack(&[&a, &b], by_tokens, 8));
    // floor(min(40 * 8 / 7, 20 * 8)) = 45 documents, ceil(45 * 7 / 8) = 40 of a: 80 tokens of
    // a and 5 * 6 = 30 of b (73 % of the tokens from a, against 44 % by records).
    assert_eq!(token_share(&tokens), (80, 110));
}

/// `guideloom ARGS`, which must fail: its stderr.
fn run_err(args: &[&str]) -> String {
    let out = bin().args(args).output().unwrap();
    assert!(!out.status.success(), "guideloom {args:?} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Issue 34 item 7: errors that a flag fixes name the flag. A raw token file without
/// `--format` (it said "manifest.json: Not a directory"), `upload` of a file (the same), a
/// document longer than a packed row (it named neither the storage nor `--overflow`), an MDS
/// dataset whose token column is ambiguous (it said "3 candidates" but listed all 9 columns).
#[test]
fn issue34_errors_name_the_flag_that_fixes_them() {
    let tmp = tempfile::tempdir().unwrap();
    let train = tmp.path().join("train.bin");
    std::fs::write(&train, (0u16..100).flat_map(u16::to_le_bytes).collect::<Vec<u8>>()).unwrap();
    let t = train.to_str().unwrap();
    let err = run_err(&["batches", t, "--seq-len", "4"]);
    assert_eq!(
        err,
        format!(
            "error: {t} is a file, not a guideloom storage (a directory with manifest.json), and its layout is \
             not detected from its contents: name its layout and token type with --format and --dtype \
             (nanoGPT's train.bin: --format nanogpt --dtype u16; llm.c files before 2024-05-21: --format llmc \
             --dtype i32; OLMo: --format olmo --dtype u32); batches, bench and inspect read it in place\n"
        )
    );
    // The flags it names read the file.
    let ok = run_ok(&[
        "batches",
        t,
        "--format",
        "nanogpt",
        "--dtype",
        "u16",
        "--seq-len",
        "4",
        "--max-batches",
        "1",
    ]);
    assert_eq!(json_lines(&ok)[0]["tokens"][0][0], 0);
    let err = run_err(&["upload", t, "s3://bucket/train"]);
    assert_eq!(
        err,
        format!(
            "error: upload copies a guideloom storage (a directory with manifest.json) and {t} is a file; to \
             store a dataset in another project's layout, convert it with `guideloom import {t} --out \
             s3://bucket/train` (with --format and --dtype for a raw token file such as nanoGPT's train.bin: \
             --format nanogpt --dtype u16)\n"
        )
    );
    // Packing: the storage and the document, and --overflow.
    let docs = jsonl_storage(tmp.path(), "docs", &[&[1, 2], &[1, 2, 3, 4, 5, 6, 7, 8, 9]], true);
    let d = docs.to_str().unwrap();
    for pack in ["first-fit", "stream-first-fit"] {
        let err = run_err(&["batches", d, "--pack", pack, "--seq-len", "4"]);
        assert_eq!(
            err,
            format!(
                "error: --pack: document 1 of {d} has 9 tokens, more than a row of --seq-len 4; pass --overflow \
                 truncate (keep its first 4 tokens) or --overflow split (cut it into rows of 4), or a larger \
                 --seq-len\n"
            ),
            "{pack}"
        );
    }
    // In a mixture, the storage of the document (position 1 of the mixture is b's document 0).
    let other = jsonl_storage(tmp.path(), "other", &[&[7; 6]], true);
    let (ma, mb) = (format!("{d}=1"), format!("{}=1", other.display()));
    let err = run_err(&["batches", "--mix", &ma, "--mix", &mb, "--pack", "best-fit", "--seq-len", "4"]);
    assert!(
        err.starts_with(&format!("error: --pack: document 0 of {} has 6 tokens", other.display())),
        "{err}"
    );
    let mds = guideloom_testkit::repo_root().join("storage/tests/data/interop/mds/encodings");
    let err = run_err(&["inspect", mds.to_str().unwrap()]);
    assert!(
        err.ends_with(
            "token column: no `tokens` column, and 3 of the 9 columns can hold tokens (bytes or ndarray \
             encodings): [\"c_nd\", \"d_ndfix\", \"f_bytes\"]; name one with --column (ForeignOptions::column)\n"
        ),
        "{err}"
    );
}

/// Issue 34 item 6: a state saved on a dataset read in place does not resume on its imported
/// copy (another fingerprint, documented), and the error names both sides: this run's data
/// (storage and path), records and fingerprint, the state's file, records and fingerprint.
#[test]
fn issue34_resume_on_an_imported_copy_names_both_sides() {
    let tmp = tempfile::tempdir().unwrap();
    let train = tmp.path().join("train.bin");
    std::fs::write(&train, (0u16..100).flat_map(u16::to_le_bytes).collect::<Vec<u8>>()).unwrap();
    let (t, state, copy) = (train.to_str().unwrap(), tmp.path().join("state.json"), tmp.path().join("copy"));
    let (st, c) = (state.to_str().unwrap(), copy.to_str().unwrap());
    let raw = ["--format", "nanogpt", "--dtype", "u16", "--seq-len", "4"];
    run_ok(&[&["batches", t][..], &raw, &["--max-batches", "2", "--save-state", st]].concat());
    run_ok(&["import", t, "--format", "nanogpt", "--dtype", "u16", "--out", c]);
    let saved: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&state).unwrap()).unwrap();
    let theirs = saved["source"]["fingerprint"].as_u64().unwrap();
    // The copy's own fingerprint, from a state saved on it.
    let own = tmp.path().join("own.json");
    run_ok(&["batches", c, "--seq-len", "4", "--max-batches", "1", "--save-state", own.to_str().unwrap()]);
    let own: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&own).unwrap()).unwrap();
    let ours = own["source"]["fingerprint"].as_u64().unwrap();
    assert_ne!(ours, theirs);
    let err = run_err(&["batches", c, "--seq-len", "4", "--resume", st]);
    assert_eq!(
        err,
        format!(
            "error: --resume {st}: the state was saved over other data than this run reads. This run: the \
             guideloom storage {c}, 25 records; the state: 25 records (the same count). A state resumes only \
             on the data it was saved on, read the same way: a dataset read in place and its `guideloom \
             import` copy have different fingerprints (the copy's comes from its manifest: shard counts and \
             checksums), while `guideloom upload` keeps a storage's fingerprint (the same manifest): state \
             mismatch: source.fingerprint: the loader has {ours}, the state has {theirs}\n"
        )
    );
    // On the dataset it was saved on, it resumes.
    let rest = json_lines(&run_ok(&[&["batches", t][..], &raw, &["--resume", st]].concat()));
    assert_eq!(rest[0]["batch"], 2);
}
