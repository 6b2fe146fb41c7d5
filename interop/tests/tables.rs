//! What the Hugging Face Arrow and Parquet tests share (issue 28): the samples2 files kept in
//! the repository (`tests/data/samples2`, written by `datasets` 5.2.0 and pyarrow 26.0.1, with
//! the `expected.json` their own readers returned), and the check of a dataset against an
//! entry of `expected.json`.

use std::path::{Path, PathBuf};

use guideloom_interop::ForeignDataset;
use guideloom_storage::ReadOptions;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::common::{backends, documents_with, tokens_with};

/// The Hugging Face `save_to_disk` samples of a single split (`hf_arrow/<name>`).
pub(crate) const HF_ARROW_SAMPLES: [&str; 6] = [
    "tokens_i32_2shards",
    "tokens_i64",
    "tokens_inferred",
    "tokens_large_list",
    "tokens_u16",
    "shuffled_select",
];

/// A file or directory of `tests/data/samples2`.
pub(crate) fn sample2(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/samples2").join(rel)
}

/// The `expected.json` of a samples2 directory.
pub(crate) fn expected(dir: &str) -> Value {
    serde_json::from_slice(&std::fs::read(sample2(dir).join("expected.json")).unwrap()).unwrap()
}

/// SHA-256 of the tokens as i64 little-endian, hex.
pub(crate) fn stream_sha256(tokens: &[i64]) -> String {
    let mut h = Sha256::new();
    for t in tokens {
        h.update(t.to_le_bytes());
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// The dtype name `expected.json` gives (`int32`, `uint16`, ...) of a guideloom descr.
fn dtype_name(descr: &str) -> &'static str {
    match descr {
        "|i1" => "int8",
        "|u1" => "uint8",
        "<i2" => "int16",
        "<u2" => "uint16",
        "<i4" => "int32",
        "<u4" => "uint32",
        "<i8" => "int64",
        "<u8" => "uint64",
        _ => "other",
    }
}

/// Checks `data` against the expected entry `want` under every I/O backend: dtype, documents,
/// tokens, the first 16 document lengths, the empty documents, the first 8 tokens of every
/// listed document, and the SHA-256 of the whole stream; the documents concatenated are the
/// stream.
pub(crate) fn check_expected(data: &ForeignDataset, want: &Value) {
    let name = data.path().display().to_string();
    assert_eq!(dtype_name(data.dtype().descr()), want["dtype"].as_str().unwrap(), "{name}: dtype");
    assert_eq!(data.document_count(), want["documents"].as_u64(), "{name}: documents");
    assert_eq!(data.elements(), want["tokens"].as_u64().unwrap(), "{name}: tokens");
    for (backend, options) in backends() {
        let all = tokens_with(data, options.clone());
        assert_eq!(
            stream_sha256(&all),
            want["token_stream_sha256_i64le"].as_str().unwrap(),
            "{name} {backend}"
        );
        let docs = documents_with(data, options);
        assert_eq!(docs.concat(), all, "{name} {backend}: documents are the stream");
        let lengths: Vec<u64> = docs.iter().take(16).map(|d| d.len() as u64).collect();
        let want_lengths: Vec<u64> =
            want["doc_lengths_first_16"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
        assert_eq!(lengths, want_lengths, "{name} {backend}: document lengths");
        let empty: Vec<u64> = (0..docs.len() as u64).filter(|&i| docs[i as usize].is_empty()).collect();
        let want_empty: Vec<u64> =
            want["empty_documents"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
        assert_eq!(empty, want_empty, "{name} {backend}: empty documents");
        for (k, first) in want["first8"].as_object().unwrap() {
            let i: usize = k.parse().unwrap();
            let first: Vec<i64> = first.as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect();
            assert_eq!(docs[i][..docs[i].len().min(8)], first[..], "{name} {backend}: document {i}");
        }
    }
}

/// The tokens of document `i` of `data`, read alone.
pub(crate) fn document(data: &ForeignDataset, i: u64) -> Vec<i64> {
    let r = data
        .reader(guideloom_formats::IntTokenFormat::new(data.dtype()).unwrap(), ReadOptions::default())
        .unwrap();
    r.read(data.document(i).unwrap()).unwrap()
}
