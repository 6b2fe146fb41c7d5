//! MosaicML Streaming MDS (`src/layouts/mds/`): LLM Foundry's columns, zstd shards with their
//! hashes, empty and merged indexes, refused encodings, and index paths that stay inside the
//! dataset.

use guideloom_formats::{IntTokenFormat, Primitive};
use guideloom_interop::{
    ForeignDataset, ForeignDetails, ForeignError, ForeignFormat, ForeignOptions, InteropError,
};
use guideloom_storage::{ReadOptions, Window};

use crate::common::{
    assert_foreign, backends, case_path, check, copy_dir, documents_with, edit_json, open, sample,
    CORPUS_EOT, EOT,
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
    let tmp = copy_dir(&src);
    let raw = vec![0u8; 64 << 20];
    let packed = zstd::encode_all(&raw[..], 3).unwrap();
    assert!(packed.len() < 64 << 10, "{}", packed.len());
    std::fs::write(tmp.path().join("shard.00000.mds.zstd"), &packed).unwrap();
    edit_json(&tmp.path().join("index.json"), |index| {
        let shard = &mut index["shards"][0];
        shard["raw_data"]["bytes"] = serde_json::json!(64 << 20);
        shard["zip_data"]["bytes"] = serde_json::json!(packed.len());
    });
    // Refused when the dataset is opened (the shard is inflated there), naming the compressed
    // file: the claim and the bound in the reason.
    let e = ForeignDataset::open(tmp.path(), &mds()).unwrap_err();
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

/// A copy of the zstd sample (`mds/tokens_zstd_sha1_xxh3`: two shards of two samples, the
/// compressed files only) in a new directory, with each shard also inflated beside it as
/// its raw file when `raw` is set, and `edit` applied to its `index.json`.
fn zstd_copy(raw: bool, edit: impl FnOnce(&mut serde_json::Value)) -> tempfile::TempDir {
    let src = sample("mds/tokens_zstd_sha1_xxh3");
    let tmp = copy_dir(&src);
    if raw {
        for k in 0..2 {
            let zip = std::fs::read(tmp.path().join(format!("shard.0000{k}.mds.zstd"))).unwrap();
            std::fs::write(
                tmp.path().join(format!("shard.0000{k}.mds")),
                zstd::decode_all(&zip[..]).unwrap(),
            )
            .unwrap();
        }
    }
    edit_json(&tmp.path().join("index.json"), edit);
    tmp
}

/// The zstd sample with only its raw shards (inflated), the index unchanged.
fn raw_only_copy() -> tempfile::TempDir {
    let tmp = zstd_copy(true, |_| {});
    for k in 0..2 {
        std::fs::remove_file(tmp.path().join(format!("shard.0000{k}.mds.zstd"))).unwrap();
    }
    tmp
}

fn mds() -> ForeignOptions {
    ForeignOptions::new().format(ForeignFormat::Mds)
}

fn open_mds(dir: &std::path::Path) -> Result<ForeignDataset, InteropError> {
    ForeignDataset::open(dir, &mds().verify_hashes(true))
}

/// Issue 33 (mutants of `shard_bytes`' choice `l == raw.bytes`): Streaming reads a shard's raw
/// file when it is there with the index's size, else inflates the compressed one. A raw file
/// of the right size is read with its compressed file gone; a raw file one byte short (a
/// half-written copy) is passed over for the compressed file; with neither, the shard is not
/// found.
#[test]
fn issue33_foreign_mds_a_raw_shard_is_read_only_at_the_index_s_size() {
    let tmp = raw_only_copy();
    let d = open_mds(tmp.path()).unwrap();
    check(&d, &CORPUS_EOT.concat(), Some(&CORPUS_EOT));
    assert!(d.files().iter().all(|f| !f.path.display().to_string().ends_with(".zstd")));

    let tmp = zstd_copy(true, |_| {});
    let raw = tmp.path().join("shard.00001.mds");
    let bytes = std::fs::read(&raw).unwrap();
    std::fs::write(&raw, &bytes[..bytes.len() - 1]).unwrap();
    check(&open_mds(tmp.path()).unwrap(), &CORPUS_EOT.concat(), Some(&CORPUS_EOT));
    std::fs::remove_file(tmp.path().join("shard.00001.mds.zstd")).unwrap();
    let e = open_mds(tmp.path()).unwrap_err();
    assert_foreign(
        &e,
        "shard.00001.mds",
        &ForeignError::ShardNotFound { basename: "shard.00001.mds".into() },
    );
}

/// Issue 33 (mutants of the sums `elements += tokens`, `global += samples` in `open`): each
/// shard's element count is the tokens of its samples (4 + 3 and 5 + 2), and an error in the
/// second shard names its sample by the global index (shard 0 holds samples 0 and 1).
#[test]
fn issue33_foreign_mds_counts_per_shard_and_global_sample_numbers() {
    let d = open_mds(zstd_copy(false, |_| {}).path()).unwrap();
    assert_eq!(d.files().iter().map(|f| f.elements).collect::<Vec<_>>(), [7, 7]);
    // Shard 1's first sample cut to 2 bytes: too short for its one column size word.
    let tmp = raw_only_copy();
    let path = tmp.path().join("shard.00001.mds");
    let mut shard = std::fs::read(&path).unwrap();
    let first = u32::from_le_bytes(shard[4..8].try_into().unwrap());
    shard[8..12].copy_from_slice(&(first + 2).to_le_bytes());
    std::fs::write(&path, &shard).unwrap();
    let e = ForeignDataset::open(tmp.path(), &mds()).unwrap_err();
    assert_foreign(
        &e,
        "shard.00001.mds",
        &ForeignError::SampleLayout { sample: 2, reason: "2 bytes cannot hold 1 column sizes".into() },
    );
}

/// Issue 33 (mutant of the compressed file's read limit `max(2 x its size, 1 << 20)`): a
/// compressed file larger than its index says is read up to 1 MiB (Streaming does not check
/// the size either); one byte past 1 MiB is refused before it is read.
#[test]
fn issue33_foreign_mds_a_compressed_shard_is_read_up_to_1_mib() {
    let small =
        |index: &mut serde_json::Value| index["shards"][0]["zip_data"]["bytes"] = serde_json::json!(1);
    let d = ForeignDataset::open(zstd_copy(false, small).path(), &mds()).unwrap();
    check(&d, &CORPUS_EOT.concat(), Some(&CORPUS_EOT));
    let tmp = zstd_copy(false, small);
    std::fs::write(tmp.path().join("shard.00000.mds.zstd"), vec![0u8; (1 << 20) + 1]).unwrap();
    let e = ForeignDataset::open(tmp.path(), &mds()).unwrap_err();
    assert_foreign(
        &e,
        "shard.00000.mds.zstd",
        &ForeignError::InvalidIndex { reason: "1048577 bytes, more than the 1048576-byte limit".into() },
    );
}

/// Issue 33 (mutants of the memory budget `held > MAX_INFLATED_BYTES`): shards claiming
/// exactly 8 GiB inflated pass the budget (and meet the bound of their compressed bytes,
/// which refuses them with its own reason); one byte more is refused by the budget.
#[test]
fn issue33_foreign_mds_the_inflated_shards_budget_on_both_sides() {
    let max = guideloom_formats::MAX_INFLATED_BYTES;
    for (claim, reason) in [
        (max, format!("the index claims {max} bytes for 213 compressed bytes; at most")),
        (max + 1, format!("the inflated shards would hold {} bytes in memory, more than {max}", max + 1)),
    ] {
        let tmp =
            zstd_copy(false, |index| index["shards"][0]["raw_data"]["bytes"] = serde_json::json!(claim));
        let e = ForeignDataset::open(tmp.path(), &mds()).unwrap_err();
        match &e {
            InteropError::Dataset { path, error, .. } => {
                assert!(path.ends_with("shard.00000.mds.zstd"), "{e}");
                assert!(
                    matches!(error.as_ref(), ForeignError::DecompressionFailed { reason: r } if r.starts_with(&reason)),
                    "{claim}: {e}"
                );
            }
            other => panic!("expected DecompressionFailed, got {other}"),
        }
    }
}

/// Issue 33 (mutants of `index::validate`'s column checks): a shard's column names,
/// encodings and sizes must have one length (one list longer is refused, either of the two);
/// every shard's token column must have the first shard's name and encoding (a name or an
/// encoding changed in shard 1 is refused naming both).
#[test]
fn issue33_foreign_mds_the_index_s_columns_agree_within_and_across_shards() {
    let refused = |edit: &dyn Fn(&mut serde_json::Value), want: ForeignError| {
        let tmp = zstd_copy(false, |index| edit(index));
        let e = ForeignDataset::open(tmp.path(), &mds()).unwrap_err();
        assert_foreign(&e, "index.json", &want);
    };
    let lengths = || ForeignError::InvalidIndex {
        reason: "shards[0]: column names, encodings and sizes differ in length".into(),
    };
    refused(
        &|i| i["shards"][0]["column_encodings"] = serde_json::json!(["int", "ndarray:uint16", "str"]),
        lengths(),
    );
    refused(&|i| i["shards"][0]["column_sizes"] = serde_json::json!([8, null, null]), lengths());
    refused(
        &|i| i["shards"][1]["column_encodings"] = serde_json::json!(["int", "ndarray:int32"]),
        ForeignError::MixedDTypes {
            expected: "tokens: ndarray:uint16".into(),
            found: "tokens: ndarray:int32".into(),
        },
    );
    refused(
        &|i| i["shards"][1]["column_names"] = serde_json::json!(["id", "ids"]),
        ForeignError::MixedDTypes {
            expected: "tokens: ndarray:uint16".into(),
            found: "ids: ndarray:uint16".into(),
        },
    );
}
