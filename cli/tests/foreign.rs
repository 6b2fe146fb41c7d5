//! Datasets in other projects' layouts through the `guideloom` binary (issue 13): `batches`,
//! `bench`, `inspect` and `import` read them in place; the output equals that of a native
//! storage of the same ids; states resume them.

use std::path::{Path, PathBuf};

use crate::cli::{backends, batches, bin, ingest_jsonl_fixture, run_ok};

fn sample(rel: &str) -> PathBuf {
    guideloom_testkit::repo_root().join("storage/tests/data/interop").join(rel)
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A nanoGPT `train.bin` of `ids` as numpy writes it (`np.array(ids, dtype=np.uint16)
/// .tofile(...)`: raw little-endian u16), and the same ids as JSON Lines for `ingest`
/// (documents of 100 ids).
fn nanogpt_train_bin(dir: &Path, ids: &[u16]) -> (PathBuf, PathBuf) {
    let bin_path = dir.join("train.bin");
    std::fs::write(&bin_path, ids.iter().flat_map(|t| t.to_le_bytes()).collect::<Vec<_>>()).unwrap();
    let jsonl = dir.join("ids.jsonl");
    let lines: String = ids.chunks(100).map(|c| format!("{}\n", serde_json::json!({ "ids": c }))).collect();
    std::fs::write(&jsonl, lines).unwrap();
    (bin_path, jsonl)
}

#[test]
fn nanogpt_batches_in_place_equal_ingest_then_batches() {
    // Acceptance 3: byte-identical output, same seed and windows, workers 0 and 2, every
    // backend.
    let tmp = tempfile::tempdir().unwrap();
    let ids: Vec<u16> = (0..3_000u32).map(|i| (i * 40_503 % 50_257) as u16).collect();
    let (train, jsonl) = nanogpt_train_bin(tmp.path(), &ids);
    let native = tmp.path().join("native");
    ingest_jsonl_fixture(&native, &jsonl, &["--shards", "3"]);
    let config = [
        "--seq-len",
        "65",
        "--stride",
        "64",
        "--batch-size",
        "4",
        "--shuffle",
        "--seed",
        "7",
        "--epochs",
        "2",
    ];
    let want = batches(&native, &config);
    assert_eq!(want.len(), 24, "46 windows a epoch, batches of 4, 2 epochs");
    for workers in ["0", "2"] {
        for backend in backends() {
            let mut args =
                vec!["--format", "nanogpt", "--dtype", "u16", "--workers", workers, "--backend", backend];
            args.extend_from_slice(&config);
            let got = batches(&train, &args);
            assert!(got == want, "workers {workers}, backend {backend}");
        }
    }
    // The sample written by nanoGPT's own numpy code, too.
    let got = batches(
        &sample("nanogpt/train.bin"),
        &["--format", "nanogpt", "--dtype", "u16", "--seq-len", "5", "--stride", "4"],
    );
    assert_eq!(
        got,
        [
            r#"{"batch":0,"epoch":0,"windows":[0],"tokens":[[101,102,103,50256,201]]}"#,
            r#"{"batch":1,"epoch":0,"windows":[1],"tokens":[[201,202,50256,301,302]]}"#,
        ]
    );
}

#[test]
fn raw_files_need_the_format_and_the_dtype() {
    let train = sample("nanogpt/train.bin");
    for args in [
        vec!["--seq-len", "4"],
        vec!["--seq-len", "4", "--dtype", "u16"],
        vec!["--seq-len", "4", "--format", "nanogpt"],
    ] {
        let mut all = vec!["batches", s(&train)];
        all.extend(args.iter().copied());
        let o = bin().args(&all).output().unwrap();
        assert!(!o.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.starts_with("error: ") && err.contains("train.bin") && !err.contains("panicked"),
            "{err}"
        );
    }
    // AC-LLMC-04: a header-less llm.c file is not detected; with --format llmc --dtype i32 it reads.
    let legacy = sample("llmc_legacy/tiny_shakespeare_val.bin");
    let o = bin().args(["batches", s(&legacy), "--seq-len", "4", "--dtype", "i32"]).output().unwrap();
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--format"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let got = batches(&legacy, &["--format", "llmc", "--dtype", "i32", "--seq-len", "14"]);
    assert_eq!(
        got,
        [
            r#"{"batch":0,"epoch":0,"windows":[0],"tokens":[[50256,101,102,103,50256,201,202,50256,301,302,303,304,50256,401]]}"#
        ]
    );
}

#[test]
fn save_state_and_resume_over_a_foreign_dataset_reproduce_the_run() {
    // Acceptance 4, through the CLI: an llm.c glob of two shards.
    let tmp = tempfile::tempdir().unwrap();
    let glob = sample("modded_nanogpt/fineweb_*.bin");
    let config =
        ["--seq-len", "3", "--stride", "2", "--shuffle", "--seed", "3", "--epochs", "3", "--batch-size", "2"];
    let full = batches(&glob, &config);
    assert_eq!(full.len(), 9);
    let state = tmp.path().join("state.json");
    let mut head_args = config.to_vec();
    head_args.extend(["--max-batches", "4", "--save-state", s(&state)]);
    let head = batches(&glob, &head_args);
    let mut rest_args = config.to_vec();
    rest_args.extend(["--resume", s(&state), "--workers", "2"]);
    let rest = batches(&glob, &rest_args);
    assert_eq!([head, rest].concat(), full);
    // The state names the data: resuming it on other files (the same bytes under other
    // names) is refused.
    for (from, to) in [("fineweb_train_000001.bin", "a.bin"), ("fineweb_val_000000.bin", "b.bin")] {
        std::fs::copy(sample(&format!("modded_nanogpt/{from}")), tmp.path().join(to)).unwrap();
    }
    let o = bin()
        .args(["batches", s(&tmp.path().join("*.bin"))])
        .args(config)
        .args(["--resume", s(&state)])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("fingerprint"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn inspect_json_reports_format_dtype_elements_documents_files() {
    let o = run_ok(&["inspect", "--json", s(&sample("megatron/gpt2_text_document"))]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["format"], "megatron");
    assert_eq!(v["dtype"], "<u2");
    assert_eq!(v["elements"], 14);
    assert_eq!(v["documents"], 4);
    assert_eq!(v["sequences"], 4);
    assert_eq!(v["files"][0]["path"], "gpt2_text_document.bin");
    assert_eq!(v["files"][0]["bytes"], 28);
    let o = run_ok(&["inspect", "--json", "--verify", s(&sample("mds/tokens_zstd_sha1_xxh3"))]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (v["format"].as_str(), v["verified"].as_bool(), v["samples"].clone()),
        (Some("mds"), Some(true), serde_json::json!([2, 2]))
    );
    let o = bin().args(["inspect", "--verify", s(&sample("malformed/mds/hash_mismatch"))]).output().unwrap();
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("sha1 hash mismatch"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = bin().args(["inspect", "--verify", s(&sample("npy/v1_u2.npy"))]).output().unwrap();
    assert!(String::from_utf8_lossy(&o.stderr).contains("nothing to verify"));
}

#[test]
fn bench_reads_foreign_datasets_through_the_fast_path() {
    let o = run_ok(&["bench", "--json", s(&sample("megatron/llama3_text_document")), "--seq-len", "3"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (v["windows"].as_u64(), v["tokens"].as_u64(), v["bytes"].as_u64()),
        (Some(3), Some(9), Some(36))
    );
    // The sum of the ids of the three windows.
    let sum: u64 = [128000, 101, 102, 103, 128001, 128000, 201, 202, 128001].iter().sum();
    assert_eq!(v["checksum"], sum.to_string());
}

/// Every sample a plain `batches` reads, with the flags it needs.
pub(crate) fn importable() -> Vec<(&'static str, Vec<&'static str>)> {
    vec![
        ("megatron/gpt2_text_document", vec![]),
        ("megatron/llama3_text_document", vec![]),
        ("megatron/sentences_text_sentence", vec![]),
        ("megatron/multimodal_text_document", vec!["--multimodal"]),
        ("nanogpt/train.bin", vec!["--format", "nanogpt", "--dtype", "u16"]),
        ("nanogpt_shakespeare_char/train.bin", vec!["--format", "nanogpt", "--dtype", "u16"]),
        ("llmc/tiny_val_000000.bin", vec![]),
        ("llmc/tiny_llama3_val_000000.bin", vec![]),
        ("llmc_legacy/tiny_shakespeare_val.bin", vec!["--format", "llmc", "--dtype", "i32"]),
        ("modded_nanogpt/fineweb_*.bin", vec![]),
        ("mds/llmfoundry_ndarray_int32", vec![]),
        ("mds/llmfoundry_bytes_int64", vec![]),
        ("mds/tokens_zstd_sha1_xxh3", vec![]),
        ("mds/empty_first_shard", vec![]),
        ("mds/merged", vec![]),
        ("litdata/tokens_u16", vec![]),
        ("litdata/tokens_i32_tensor", vec![]),
        ("litdata/pytree", vec![]),
        ("olmo/part-0-00000.npy", vec!["--format", "olmo", "--dtype", "u16"]),
        ("olmo/part-1-00000.npy", vec!["--format", "olmo", "--dtype", "u32"]),
        ("npy/v1_u2.npy", vec![]),
        ("npy/v2_u2.npy", vec![]),
        ("npy/v3_u2.npy", vec![]),
        ("npy/be_i4.npy", vec![]),
        ("npy/c_2x3_u4.npy", vec![]),
        ("npy/dir_tokens", vec![]),
    ]
}

#[test]
fn import_of_each_sample_batches_like_the_files_in_place() {
    // Acceptance 5.
    let tmp = tempfile::tempdir().unwrap();
    for (i, (rel, flags)) in importable().into_iter().enumerate() {
        let out = tmp.path().join(format!("imported{i}"));
        let mut args =
            vec!["import".to_string(), s(&sample(rel)).to_string(), "--out".into(), s(&out).to_string()];
        args.extend(flags.iter().map(|f| f.to_string()));
        let o = bin().args(&args).output().unwrap();
        assert!(o.status.success(), "{rel}: {}", String::from_utf8_lossy(&o.stderr));
        let config = ["--seq-len", "3", "--stride", "2", "--shuffle", "--seed", "11", "--batch-size", "2"];
        let mut foreign_args: Vec<&str> = flags.clone();
        foreign_args.extend_from_slice(&config);
        let in_place = batches(&sample(rel), &foreign_args);
        let native = batches(&out, &config);
        assert!(!in_place.is_empty(), "{rel}");
        assert_eq!(native, in_place, "{rel}");
        let m = guideloom::storage::Manifest::load(&out).unwrap();
        assert_eq!(
            m.metadata()["source"]["format"],
            rel.split('/')
                .next()
                .unwrap()
                .replace("modded_nanogpt", "llmc")
                .replace("llmc_legacy", "llmc")
                .replace("nanogpt_shakespeare_char", "nanogpt")
        );
    }
    // With --doc-meta the documents become runs of a stream-with-meta storage.
    let out = tmp.path().join("docs");
    run_ok(&["import", s(&sample("megatron/sentences_text_sentence")), "--out", s(&out), "--doc-meta"]);
    let lines = batches(&out, &["--seq-len", "6"]);
    assert_eq!(
        lines,
        [r#"{"batch":0,"epoch":0,"windows":[0],"tokens":[[11,12,13,14,15,21]],"documents":[[0,0,0,0,0,2]]}"#]
    );
    // An existing storage is not overwritten; ids that do not fit are refused.
    let o = bin().args(["import", s(&sample("npy/v1_u2.npy")), "--out", s(&out)]).output().unwrap();
    assert!(String::from_utf8_lossy(&o.stderr).contains("already holds a storage"));
    let o = bin()
        .args([
            "import",
            s(&sample("megatron/llama3_text_document")),
            "--out",
            s(&tmp.path().join("narrow")),
            "--out-dtype",
            "u16",
        ])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("128000"), "{}", String::from_utf8_lossy(&o.stderr));
}

/// A sample of issue 28 (`interop/tests/data/samples2`: Hugging Face Arrow directories and
/// Parquet files).
fn sample2(rel: &str) -> PathBuf {
    guideloom_testkit::repo_root().join("interop/tests/data/samples2").join(rel)
}

/// Issue 28 through the binary: `inspect` reports each Hugging Face Arrow and Parquet sample's
/// format, counts and token column; `batches` reads them in place (shuffled, strided); an
/// `import --doc-meta` of each batches alike and keeps its documents; `bench` reads them; a
/// `DatasetDict` needs `--hf-split`.
#[test]
fn issue28_hf_arrow_and_parquet_through_the_cli() {
    let cases: [(&str, &[&str], &str, u64, u64); 6] = [
        ("hf_arrow/tokens_i32_2shards", &[], "arrow", 400, 9689),
        ("hf_arrow/tokens_u16", &[], "arrow", 200, 4887),
        ("hf_arrow/dataset_dict", &["--hf-split", "validation"], "arrow", 30, 673),
        ("hf_parquet/data/train-*.parquet", &["--format", "parquet"], "parquet", 300, 7438),
        ("parquet/tokens_zstd_pageindex.parquet", &[], "parquet", 400, 10084),
        ("parquet/tokens_i64_large_list_gzip.parquet", &[], "parquet", 150, 3651),
    ];
    let tmp = tempfile::tempdir().unwrap();
    for (i, (rel, flags, format, documents, tokens)) in cases.into_iter().enumerate() {
        let path = sample2(rel);
        let mut args = vec!["inspect", "--json", s(&path)];
        args.extend_from_slice(flags);
        let v: serde_json::Value = serde_json::from_slice(&run_ok(&args).stdout).unwrap();
        assert_eq!(
            (v["format"].as_str(), v["documents"].as_u64(), v["elements"].as_u64()),
            (Some(format), Some(documents), Some(tokens)),
            "{rel}"
        );
        assert_eq!(v["column"]["name"], "input_ids", "{rel}");
        let out = tmp.path().join(format!("imported{i}"));
        let mut args = vec!["import", s(&path), "--out", s(&out), "--doc-meta"];
        args.extend_from_slice(flags);
        run_ok(&args);
        let m = guideloom::storage::Manifest::load(&out).unwrap();
        assert_eq!(m.metadata()["source"]["format"], format, "{rel}");
        assert_eq!(m.metadata()["documents"], documents, "{rel}");
        let with_tokens =
            ["--seq-len", "7", "--stride", "5", "--shuffle", "--seed", "28", "--batch-size", "3"];
        let mut foreign: Vec<&str> = flags.to_vec();
        foreign.extend_from_slice(&with_tokens);
        let in_place = batches(&path, &foreign);
        // The native storage's batches carry the documents too: compare the tokens.
        let native: Vec<serde_json::Value> = batches(&out, &with_tokens)
            .iter()
            .map(|l| {
                let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
                v.as_object_mut().unwrap().remove("documents");
                v
            })
            .collect();
        let in_place: Vec<serde_json::Value> =
            in_place.iter().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert!(!in_place.is_empty(), "{rel}");
        assert_eq!(native, in_place, "{rel}");
        let mut args = vec!["bench", "--json", s(&path), "--seq-len", "16"];
        args.extend_from_slice(flags);
        let b: serde_json::Value = serde_json::from_slice(&run_ok(&args).stdout).unwrap();
        assert_eq!(b["windows"].as_u64(), Some(tokens / 16), "{rel}");
    }
    let o = bin().args(["inspect", s(&sample2("hf_arrow/dataset_dict"))]).output().unwrap();
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("name a split (train, validation)"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
