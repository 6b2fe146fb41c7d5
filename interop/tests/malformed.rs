//! Every malformed sample of `malformed/cases.json` (AC-MEG-10, AC-LLMC-05, AC-MDS-08,
//! AC-LIT-04, AC-NPY-07; issue 33: one for every validation of these readers) gives its typed
//! error naming the file, and detection finds its layout.

use guideloom_interop::{ForeignDataset, ForeignError, ForeignFormat, ForeignOptions, InteropError};

use crate::common::{assert_foreign, case_path, sample};

/// Every case of `malformed/cases.json` with its format, the file the error must name and the
/// exact error.
fn malformed_cases() -> Vec<(&'static str, ForeignFormat, &'static str, ForeignError)> {
    use ForeignError as E;
    use ForeignFormat as F;
    vec![
        (
            "litdata/dim_mismatch/index.json",
            F::Litdata,
            "chunk-0-0.bin",
            E::ChunkSizeMismatch { dim: 9, need: 34, have: 30 },
        ),
        // Issue 33: every validation of the readers has a sample (these from the valid layout
        // of dim_mismatch, dim 7: items of 4 and 3 u16 tokens at offsets 16, 24, 30).
        ("litdata/encrypted/index.json", F::Litdata, "index.json", E::Encrypted),
        (
            "litdata/odd_item_bytes/index.json",
            F::Litdata,
            "chunk-0-0.bin",
            E::SampleLayout { sample: 0, reason: "7 bytes are not whole 2-byte tokens".into() },
        ),
        (
            "litdata/offsets_decreasing/index.json",
            F::Litdata,
            "chunk-0-0.bin",
            E::OffsetsNotMonotonic { entry: 1 },
        ),
        (
            "litdata/framed_zstd_magic/index.json",
            F::Litdata,
            "index.json",
            E::UnsupportedCompression { compression: "zstd batch".into() },
        ),
        (
            "litdata/unknown_numpy_dtype_index/index.json",
            F::Litdata,
            "index.json",
            E::UnsupportedTokenDType { dtype: "object".into() },
        ),
        ("llmc/bad_magic.bin", F::Llmc, "bad_magic.bin", E::BadMagic { found: "20240521".into() }),
        (
            "llmc/bad_version.bin",
            F::Llmc,
            "bad_version.bin",
            E::UnsupportedVersion { field: "version", found: 2 },
        ),
        ("llmc/eval_file_magic.bin", F::Llmc, "eval_file_magic.bin", E::NotATokenShard { magic: 20240522 }),
        (
            "llmc/header_only_short.bin",
            F::Llmc,
            "header_only_short.bin",
            E::TruncatedHeader { need: 1024, have: 1000 },
        ),
        ("llmc/negative_ntok.bin", F::Llmc, "negative_ntok.bin", E::NegativeTokenCount { found: -1 }),
        (
            "llmc/trailing_byte.bin",
            F::Llmc,
            "trailing_byte.bin",
            E::SizeMismatch { expected: 1030, got: 1031 },
        ),
        (
            "mds/bytes_mismatch/index.json",
            F::Mds,
            "shard.00000.mds",
            E::ShardSizeMismatch { index: 1, file: 267 },
        ),
        (
            "mds/format_json/index.json",
            F::Mds,
            "index.json",
            E::UnsupportedShardFormat { shard: 0, found: "json".into() },
        ),
        (
            "mds/hash_mismatch/index.json",
            F::Mds,
            "shard.00000.mds",
            E::HashMismatch {
                algorithm: "sha1".into(),
                expected: "0000000000000000000000000000000000000000".into(),
                found: "d295b4213fbc2ac90053d8e64071161461dd73b2".into(),
            },
        ),
        ("mds/index_version_1/index.json", F::Mds, "index.json", E::UnsupportedIndexVersion { found: 1 }),
        (
            "mds/index_not_object/index.json",
            F::Mds,
            "index.json",
            E::InvalidIndex { reason: "the index is not a JSON object".into() },
        ),
        // Issue 33: offset_past_eof's offsets made valid, then entry 1 moved past entry 2
        // (201, 250, 245, 267).
        ("mds/offsets_decreasing/index.json", F::Mds, "shard.00000.mds", E::OffsetsNotMonotonic { entry: 2 }),
        (
            "mds/unsupported_hash/index.json",
            F::Mds,
            "shard.00000.mds",
            E::UnsupportedHash { algorithm: "md4".into() },
        ),
        (
            "mds/missing_shard/index.json",
            F::Mds,
            "shard.00000.mds",
            E::ShardNotFound { basename: "shard.00000.mds".into() },
        ),
        (
            "mds/offset_past_eof/index.json",
            F::Mds,
            "shard.00000.mds",
            E::OffsetOutOfRange { entry: 1, offset: 0x00ff_ffff, min: 20, size: 267 },
        ),
        (
            "mds/samples_mismatch/index.json",
            F::Mds,
            "shard.00000.mds",
            E::SampleCountMismatch { index: 4, shard: 3 },
        ),
        (
            "mds/shard_version_1/index.json",
            F::Mds,
            "index.json",
            E::UnsupportedShardVersion { shard: 0, found: 1 },
        ),
        (
            "mds/unknown_encoding/index.json",
            F::Mds,
            "index.json",
            E::UnknownEncoding { column: "tokens".into(), encoding: "foo".into() },
        ),
        ("megatron/bad_dtype_code.idx", F::Megatron, "bad_dtype_code.idx", E::UnknownDTypeCode { code: 9 }),
        (
            "megatron/bad_magic.idx",
            F::Megatron,
            "bad_magic.idx",
            E::BadMagic { found: "MMIDIDY\\x00\\x00".into() },
        ),
        (
            "megatron/bad_version.idx",
            F::Megatron,
            "bad_version.idx",
            E::UnsupportedVersion { field: "version", found: 2 },
        ),
        (
            "megatron/bin_too_short.idx",
            F::Megatron,
            "bin_too_short.bin",
            E::DataFileSize { have: 26, want: 28 },
        ),
        (
            "megatron/doc_index_end_mismatch.idx",
            F::Megatron,
            "doc_index_end_mismatch.idx",
            E::DocumentIndexEnd { last: 3, sequences: 4 },
        ),
        // Issue 33: negative_pointer.idx with its pointers made valid (0, 8, 14, 24), then one
        // field changed each.
        (
            "megatron/doc_index_decreasing.idx",
            F::Megatron,
            "doc_index_decreasing.idx",
            E::DocumentIndexNotMonotonic { entry: 2 },
        ),
        (
            "megatron/doc_index_start.idx",
            F::Megatron,
            "doc_index_start.idx",
            E::DocumentIndexStart { found: 1 },
        ),
        (
            "megatron/negative_length.idx",
            F::Megatron,
            "negative_length.idx",
            E::NegativeLength { sequence: 1 },
        ),
        (
            "megatron/pointer_mismatch.idx",
            F::Megatron,
            "pointer_mismatch.idx",
            E::PointerMismatch { sequence: 2, found: 15, expected: 14 },
        ),
        ("megatron/dtype_code_zero.idx", F::Megatron, "dtype_code_zero.idx", E::UnknownDTypeCode { code: 0 }),
        (
            "megatron/negative_pointer.idx",
            F::Megatron,
            "negative_pointer.idx",
            E::NegativePointer { sequence: 2 },
        ),
        (
            "megatron/trailing_idx_bytes.idx",
            F::Megatron,
            "trailing_idx_bytes.idx",
            E::TrailingBytes { count: 1 },
        ),
        (
            "megatron/truncated_idx.idx",
            F::Megatron,
            "truncated_idx.idx",
            E::TruncatedIndex { need: 122, have: 100 },
        ),
        ("npy/bad_magic.npy", F::Npy, "bad_magic.npy", E::BadMagic { found: "\\x93NUMPZ".into() }),
        // Issue 33: v2_u2.npy announcing a 10,001-byte header (over the 10,000 read), and
        // v1_u2.npy with a fourth key.
        ("npy/header_too_large.npy", F::Npy, "header_too_large.npy", E::HeaderTooLarge { len: 10_001 }),
        (
            "npy/header_extra_key.npy",
            F::Npy,
            "header_extra_key.npy",
            E::HeaderExtraKey { key: "order".into() },
        ),
        ("npy/data_truncated.npy", F::Npy, "data_truncated.npy", E::DataSize { have: 5, need: 6 }),
        (
            "npy/float_tokens.npy",
            F::Npy,
            "float_tokens.npy",
            E::UnsupportedTokenDType { dtype: "<f4".into() },
        ),
        (
            "npy/header_not_dict.npy",
            F::Npy,
            "header_not_dict.npy",
            E::HeaderParse { reason: "expected '{' at byte 0".into() },
        ),
        (
            "npy/missing_shape_key.npy",
            F::Npy,
            "missing_shape_key.npy",
            E::HeaderMissingKey { key: "shape".into() },
        ),
    ]
}

#[test]
fn every_malformed_sample_gives_its_typed_error_naming_the_file() {
    let listed: serde_json::Value =
        serde_json::from_slice(&std::fs::read(sample("malformed/cases.json")).unwrap()).unwrap();
    let cases = malformed_cases();
    let mut keys: Vec<&str> = listed.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort_unstable();
    let mut ours: Vec<&str> = cases.iter().map(|c| c.0).collect();
    ours.sort_unstable();
    assert_eq!(ours, keys, "every case of cases.json is tested");
    for (case, format, file, want) in cases {
        // A layout this build does not read gives that error, naming the dataset's path.
        let (file, want) = match format.feature() {
            Some((feature, false)) => {
                let path = case_path(case);
                (
                    path.file_name().unwrap().to_str().unwrap().to_string(),
                    ForeignError::FeatureDisabled { feature },
                )
            }
            _ => (file.to_string(), want),
        };
        let verify = case.starts_with("mds/hash_mismatch") || case.starts_with("mds/unsupported_hash");
        let options = ForeignOptions::new().format(format).verify_hashes(verify);
        let e = ForeignDataset::open(case_path(case), &options).expect_err(case);
        assert_foreign(&e, &file, &want);
        // Detection finds the same layout where it can tell it.
        if format != ForeignFormat::Llmc {
            if let Err(InteropError::Dataset { format: Some(found), .. }) =
                ForeignDataset::open(case_path(case), &ForeignOptions::new().verify_hashes(verify))
            {
                assert_eq!(found, format, "{case}");
            }
        }
    }
}
