//! The round-2 record formats through the `guideloom` binary (issue 28 item 4): `inspect`,
//! `batches` and `import` of ArrayRecord, TFRecord and WebDataset samples, detected or
//! named, and their malformed files refused with the file named.

use std::path::PathBuf;

use crate::cli::{batches, bin, run_ok};

fn sample2(rel: &str) -> PathBuf {
    // This crate's own checkout (the samples are the interop crate's test data).
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../interop/tests/data/samples2").join(rel)
}

/// A sample, the flags it needs, its format, dtype, tokens and documents.
type Case = (&'static str, Vec<&'static str>, &'static str, &'static str, u64, u64);

/// Every record sample with the flags it needs, its format, dtype, tokens and documents.
fn cases() -> Vec<Case> {
    vec![
        ("arrayrecord/tokens_npy_default.array_record", vec![], "arrayrecord", "<i4", 2_726, 100),
        ("arrayrecord/tokens_npy_g4_snappy.array_record", vec![], "arrayrecord", "<i4", 2_726, 100),
        (
            "arrayrecord/tokens_u16_raw_g16_brotli.array_record",
            vec!["--dtype", "u16"],
            "arrayrecord",
            "<u2",
            2_726,
            100,
        ),
        ("tfrecord/examples.tfrecord", vec![], "tfrecord", "<i8", 2_770, 120),
        ("tfrecord/examples.tfrecord.gz", vec![], "tfrecord", "<i8", 2_770, 120),
        (
            "tfrecord/raw_u16_tokens.tfrecord",
            vec!["--format", "tfrecord", "--dtype", "u16"],
            "tfrecord",
            "<u2",
            1_381,
            60,
        ),
        ("webdataset/shards", vec![], "webdataset", "<i4", 2_509, 100),
        ("webdataset/long_keys.tar", vec!["--column", "input_ids.npy"], "webdataset", "<u2", 137, 6),
    ]
}

#[test]
fn issue28_inspect_batches_and_import_of_the_record_formats() {
    let tmp = tempfile::tempdir().unwrap();
    for (i, (rel, flags, format, dtype, tokens, documents)) in cases().into_iter().enumerate() {
        let path = sample2(rel);
        let mut args = vec!["inspect", "--json", path.to_str().unwrap()];
        args.extend_from_slice(&flags);
        let v: serde_json::Value = serde_json::from_slice(&run_ok(&args).stdout).unwrap();
        assert_eq!(
            (v["format"].as_str(), v["dtype"].as_str(), v["elements"].as_u64(), v["documents"].as_u64()),
            (Some(format), Some(dtype), Some(tokens), Some(documents)),
            "{rel}"
        );
        // `import` keeps the ids and the documents; its batches are the ones read in place.
        let out = tmp.path().join(format!("imported{i}"));
        let mut args = vec!["import", path.to_str().unwrap(), "--out", out.to_str().unwrap(), "--doc-meta"];
        args.extend_from_slice(&flags);
        if dtype == "<i8" {
            args.extend_from_slice(&["--out-dtype", "u32"]);
        }
        run_ok(&args);
        let config = ["--seq-len", "33", "--stride", "32", "--shuffle", "--seed", "5", "--batch-size", "3"];
        let mut in_place_args = flags.clone();
        in_place_args.extend_from_slice(&config);
        let in_place = batches(&path, &in_place_args);
        let native: Vec<String> = batches(&out, &config);
        assert!(!in_place.is_empty(), "{rel}");
        let strip = |lines: &[String]| -> Vec<serde_json::Value> {
            lines
                .iter()
                .map(|l| {
                    let v: serde_json::Value = serde_json::from_str(l).unwrap();
                    serde_json::json!([v["batch"], v["windows"], v["tokens"]])
                })
                .collect()
        };
        assert_eq!(strip(&native), strip(&in_place), "{rel}");
        let m = guideloom::storage::Manifest::load(&out).unwrap();
        assert_eq!(m.metadata()["source"]["format"], format, "{rel}");
    }
}

#[test]
fn issue28_malformed_record_files_are_refused_naming_the_file() {
    for (rel, says) in [
        ("arrayrecord/chunk_data_hash.array_record", "chunk at 64: data hash"),
        ("arrayrecord/not_block_aligned.array_record", "size 196508 is not a multiple of 65536"),
        ("tfrecord/length_crc_mismatch.tfrecord", "record 0 at offset 0: length crc mismatch"),
        ("webdataset/path_traversal.tar", "member 1: ../x.npy"),
    ] {
        let path = sample2(&format!("malformed/{rel}"));
        let mut args = vec!["inspect", path.to_str().unwrap()];
        if rel.starts_with("tfrecord") {
            args.extend_from_slice(&["--format", "tfrecord"]);
        }
        let o = bin().args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{rel}");
        assert!(err.contains(says) && err.contains(rel.rsplit('/').next().unwrap()), "{rel}: {err}");
    }
}

#[test]
fn issue28_sequential_tfrecord_and_webdataset_pack_the_records_in_order() {
    let tokens = |lines: &[String]| -> Vec<serde_json::Value> {
        lines
            .iter()
            .flat_map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                v["tokens"].as_array().unwrap().clone()
            })
            .collect()
    };
    for (flag, rel, in_place_flags) in [
        ("--tfrecord", "tfrecord/examples.tfrecord", vec![]),
        ("--tfrecord", "tfrecord/examples.tfrecord.gz", vec![]),
        ("--webdataset", "webdataset/shards", vec![]),
        ("--webdataset", "webdataset/long_keys.tar", vec!["--column", "input_ids.npy"]),
    ] {
        let path = sample2(rel);
        let mut args = vec![
            "batches",
            "--sequential",
            flag,
            path.to_str().unwrap(),
            "--seq-len",
            "32",
            "--batch-size",
            "3",
        ];
        if rel.contains("long_keys") {
            args.extend_from_slice(&["--tokens-field", "input_ids.npy"]);
        }
        let out = run_ok(&args);
        let sequential: Vec<String> =
            String::from_utf8(out.stdout).unwrap().lines().map(str::to_string).collect();
        let mut flags = in_place_flags.clone();
        flags.extend_from_slice(&["--seq-len", "32", "--stride", "32", "--batch-size", "3"]);
        let in_place = batches(&path, &flags);
        assert!(!sequential.is_empty(), "{rel}");
        assert_eq!(tokens(&sequential), tokens(&in_place), "{rel}");
    }
    // A `txt` field tokenized as it is read.
    let path = sample2("webdataset/shards");
    let args = [
        "batches",
        "--sequential",
        "--webdataset",
        path.to_str().unwrap(),
        "--tokens-field",
        "txt",
        "--seq-len",
        "8",
    ];
    let out = run_ok(&args);
    assert!(!out.stdout.is_empty());
}
