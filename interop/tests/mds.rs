//! MosaicML Streaming MDS (`src/layouts/mds/`): LLM Foundry's columns, zstd shards with their
//! hashes, empty and merged indexes, refused encodings, and index paths that stay inside the
//! dataset.

use guideloom_formats::{IntTokenFormat, Primitive};
use guideloom_interop::{
    ForeignDataset, ForeignDetails, ForeignError, ForeignFormat, ForeignOptions, InteropError,
};
use guideloom_storage::{ReadOptions, Window};

use crate::common::{
    assert_foreign, backends, case_path, check, documents_with, open, sample, CORPUS_EOT, EOT,
};

#[test]
fn mds_llm_foundry_ndarray_int32_and_bytes_int64() {
    let samples: &[&[i64]] = &[&[101, 102, 103, EOT], &[201, 202, EOT, 301], &[302, 303, 304, EOT]];
    let d = open("mds/llmfoundry_ndarray_int32", &ForeignOptions::new());
    assert_eq!((d.format(), d.dtype(), d.document_count()), (ForeignFormat::Mds, Primitive::I32, Some(3)));
    check(&d, &samples.concat(), Some(samples));
    let d = open("mds/llmfoundry_bytes_int64", &ForeignOptions::new());
    assert_eq!(d.dtype(), Primitive::I64);
    check(&d, &samples.concat(), Some(samples));
    // The same bytes read with the wrong dtype (AC-MDS-02 documents the misconfiguration).
    let d = open("mds/llmfoundry_bytes_int64", &ForeignOptions::new().dtype(Primitive::U16));
    let docs = documents_with(&d, ReadOptions::default());
    assert_eq!(docs.iter().map(Vec::len).collect::<Vec<_>>(), [16, 16, 16]);
    assert_eq!(docs[0][..8], [101, 0, 0, 0, 102, 0, 0, 0]);
    let d = open("mds/llmfoundry_bytes_int64", &ForeignOptions::new().dtype(Primitive::I32));
    assert!(documents_with(&d, ReadOptions::default()).iter().all(|s| s.len() == 8));
}

#[test]
fn mds_zstd_shards_with_hashes_verified() {
    let d = open("mds/tokens_zstd_sha1_xxh3", &ForeignOptions::new().verify_hashes(true));
    assert_eq!(d.dtype(), Primitive::U16);
    assert!(
        matches!(d.details(), ForeignDetails::Mds { samples, column } if samples == &[2, 2] && column.0 == "tokens")
    );
    check(&d, &CORPUS_EOT.concat(), Some(&CORPUS_EOT));
    for (name, options) in backends() {
        let r = d.reader(IntTokenFormat::new(Primitive::U16).unwrap(), options).unwrap();
        assert_eq!(r.read(Window::new(5, 4)).unwrap(), [202, EOT, 301, 302], "{name}: across the two shards");
    }
}

#[test]
fn mds_empty_first_shard_merged_index_and_encodings() {
    let d = open("mds/empty_first_shard", &ForeignOptions::new());
    assert!(matches!(d.details(), ForeignDetails::Mds { samples, .. } if samples == &[0, 1, 1]));
    check(&d, &[101, 102, 103, EOT, 201, 202, EOT], Some(&CORPUS_EOT[..2]));
    let d = open("mds/merged", &ForeignOptions::new());
    let names: Vec<String> = d.files().iter().map(|f| f.path.display().to_string()).collect();
    assert_eq!(names, ["part0/shard.00000.mds", "part1/shard.00000.mds"]);
    let samples: &[&[i64]] = &[&[101, 102, 103, EOT], &[201, 202, EOT, 301], &[302, 303, 304, EOT]];
    check(&d, &samples.concat(), Some(samples));
    // AC-MDS-06: an untyped ndarray column as tokens: row 0 is uint16, row 1 float32.
    let e = ForeignDataset::open(sample("mds/encodings"), &ForeignOptions::new().column("c_nd")).unwrap_err();
    assert_foreign(&e, "shard.00000.mds", &ForeignError::UnsupportedTokenDType { dtype: "float32".into() });
    let e =
        ForeignDataset::open(sample("mds/encodings"), &ForeignOptions::new().column("e_str")).unwrap_err();
    assert!(matches!(e.foreign_error(), Some(ForeignError::TokenColumn { .. })), "{e}");
}

#[test]
fn mds_pickle_is_refused_before_any_shard_is_opened() {
    let e = ForeignDataset::open(sample("mds/unsafe_pkl"), &ForeignOptions::new()).unwrap_err();
    assert_foreign(
        &e,
        "index.json",
        &ForeignError::UnsafeEncoding { column: "obj".into(), encoding: "pkl".into() },
    );
}

#[test]
fn hash_mismatch_reads_fine_without_verification_under_every_backend() {
    let d = ForeignDataset::open(case_path("mds/hash_mismatch/index.json"), &ForeignOptions::new()).unwrap();
    let samples: &[&[i64]] = &[&[101, 102, 103, EOT], &[201, 202, EOT, 301], &[302, 303, 304, EOT]];
    check(&d, &samples.concat(), Some(samples));
}

#[test]
fn index_paths_cannot_leave_the_dataset() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::copy(sample("mds/llmfoundry_ndarray_int32/shard.00000.mds"), dir.path().join("outside.mds"))
        .unwrap();
    for name in ["../outside.mds", "/etc/passwd", "a\\\\b.mds", "sub/../../outside.mds"] {
        let index = serde_json::json!({"version": 2, "shards": [{
            "column_encodings": ["ndarray:int32"], "column_names": ["tokens"], "column_sizes": [null],
            "compression": null, "format": "mds", "hashes": [],
            "raw_data": {"basename": name, "bytes": 267, "hashes": {}},
            "samples": 3, "size_limit": 67108864, "version": 2, "zip_data": null}]});
        std::fs::write(data.join("index.json"), index.to_string()).unwrap();
        let e = ForeignDataset::open(&data, &ForeignOptions::new()).unwrap_err();
        assert!(
            matches!(e.foreign_error(), Some(ForeignError::UnsafeShardPath { path }) if path == name),
            "{name}: {e}"
        );
    }
    // A link inside the directory pointing out of it.
    std::os::unix::fs::symlink(dir.path().join("outside.mds"), data.join("link.mds")).unwrap();
    let index = serde_json::json!({"version": 2, "shards": [{
        "column_encodings": ["ndarray:int32"], "column_names": ["tokens"], "column_sizes": [null],
        "compression": null, "format": "mds", "hashes": [],
        "raw_data": {"basename": "link.mds", "bytes": 267, "hashes": {}},
        "samples": 3, "size_limit": 67108864, "version": 2, "zip_data": null}]});
    std::fs::write(data.join("index.json"), index.to_string()).unwrap();
    let e = ForeignDataset::open(&data, &ForeignOptions::new()).unwrap_err();
    assert!(matches!(e.foreign_error(), Some(ForeignError::UnsafeShardPath { .. })), "{e}");
}

/// Issue 32 class 5: a compressed shard was inflated up to the size its index claims, so a
/// few kilobytes of zstd claiming 64 MiB were inflated whole. A claim past what its compressed
/// bytes may inflate to (`guideloom_formats::inflate_bound`: 100 times plus 1 MiB) is now
/// refused before anything is inflated.
#[test]
fn issue32_a_compressed_shard_is_inflated_only_within_a_bound_of_its_compressed_size() {
    let src = sample("mds/tokens_zstd_sha1_xxh3");
    let tmp = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(&src).unwrap().flatten() {
        std::fs::copy(e.path(), tmp.path().join(e.file_name())).unwrap();
    }
    let raw = vec![0u8; 64 << 20];
    let packed = zstd::encode_all(&raw[..], 3).unwrap();
    assert!(packed.len() < 64 << 10, "{}", packed.len());
    std::fs::write(tmp.path().join("shard.00000.mds.zstd"), &packed).unwrap();
    let mut index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(tmp.path().join("index.json")).unwrap()).unwrap();
    let shard = &mut index["shards"][0];
    shard["raw_data"]["bytes"] = serde_json::json!(64 << 20);
    shard["zip_data"]["bytes"] = serde_json::json!(packed.len());
    std::fs::write(tmp.path().join("index.json"), serde_json::to_vec(&index).unwrap()).unwrap();
    // Refused when the dataset is opened (the shard is inflated there), naming the compressed
    // file: the claim and the bound in the reason.
    let e = ForeignDataset::open(tmp.path(), &ForeignOptions::new().format(ForeignFormat::Mds)).unwrap_err();
    let claim = format!("claims {} bytes for {} compressed bytes; at most", 64 << 20, packed.len());
    match &e {
        InteropError::Dataset { path, error, .. } => {
            assert_eq!(path.file_name().and_then(|n| n.to_str()), Some("shard.00000.mds.zstd"), "{e}");
            assert!(
                matches!(error.as_ref(), ForeignError::DecompressionFailed { reason } if reason.contains(&claim)),
                "{e}"
            );
        }
        other => panic!("expected DecompressionFailed naming the zstd shard, got {other}"),
    }
}
