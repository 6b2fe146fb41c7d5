//! What the record-format tests (ArrayRecord, TFRecord, WebDataset) share: the round-2
//! samples kept in `tests/data/samples2` (written by the projects' own writers, see
//! `tests/data/samples2/FORMATS.md`), their `expected.json`, and the malformed cases.

use std::path::{Path, PathBuf};

use guideloom_interop::{ForeignDataset, ForeignOptions, InteropError};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// A file or directory of the round-2 samples.
pub(crate) fn sample2(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/samples2").join(rel)
}

/// `expected.json` of a sample directory (`arrayrecord`, `tfrecord`, `webdataset`).
pub(crate) fn expected(dir: &str) -> Value {
    let text = std::fs::read(sample2(&format!("{dir}/expected.json"))).unwrap();
    serde_json::from_slice(&text).unwrap()
}

/// The error `malformed/cases.json` gives for `rel` (`arrayrecord/chunk_data_hash.array_record`).
pub(crate) fn case_error(rel: &str) -> String {
    let text = std::fs::read(sample2("malformed/cases.json")).unwrap();
    let cases: Value = serde_json::from_slice(&text).unwrap();
    cases[rel]["error"].as_str().unwrap_or_else(|| panic!("no case {rel}")).to_string()
}

/// SHA-256 of the ids as i64 LE, in order, hex (`token_stream_sha256_i64le`).
pub(crate) fn stream_sha256(tokens: impl IntoIterator<Item = i64>) -> String {
    let mut h = Sha256::new();
    for t in tokens {
        h.update(t.to_le_bytes());
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Asserts that `expected[name]` describes `docs` exactly: documents, tokens, the stream's
/// SHA-256, the first lengths, the empty documents and the first ids of the listed ones.
pub(crate) fn assert_documents(expected: &Value, docs: &[Vec<i64>]) {
    assert_eq!(docs.len() as u64, expected["documents"].as_u64().unwrap(), "documents");
    let tokens: u64 = docs.iter().map(|d| d.len() as u64).sum();
    assert_eq!(tokens, expected["tokens"].as_u64().unwrap(), "tokens");
    assert_eq!(
        stream_sha256(docs.iter().flatten().copied()),
        expected["token_stream_sha256_i64le"].as_str().unwrap(),
        "token stream sha256"
    );
    let lengths: Vec<u64> = docs.iter().take(16).map(|d| d.len() as u64).collect();
    let want: Vec<u64> =
        expected["doc_lengths_first_16"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
    assert_eq!(lengths, want, "first lengths");
    let empty: Vec<u64> =
        docs.iter().enumerate().filter(|(_, d)| d.is_empty()).map(|(i, _)| i as u64).collect();
    let want: Vec<u64> =
        expected["empty_documents"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
    assert_eq!(empty, want, "empty documents");
    for (k, ids) in expected["first8"].as_object().unwrap() {
        let i: usize = k.parse().unwrap();
        let want: Vec<i64> = ids.as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect();
        let got: Vec<i64> = docs[i].iter().take(8).copied().collect();
        assert_eq!(got, want, "first ids of document {i}");
    }
}

/// The documents of a foreign dataset, read through its reader.
pub(crate) fn documents(data: &ForeignDataset) -> Vec<Vec<i64>> {
    let format = guideloom_formats::IntTokenFormat::new(data.dtype()).unwrap();
    let r = data.reader(format, guideloom_storage::ReadOptions::default()).unwrap();
    r.read_many(&data.document_windows()).unwrap()
}

/// Opens a sample with `options`, panicking with the error.
pub(crate) fn open2(rel: &str, options: &ForeignOptions) -> ForeignDataset {
    ForeignDataset::open(sample2(rel), options).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// Asserts that `e` names the file `file` and is `case` (as `cases.json` writes it:
/// `Kind(numbers and names)`): the error's kind is `Kind` (or wraps it, for a record) and
/// its message says each `: `-separated part of what is in the parentheses.
pub(crate) fn assert_case(e: &InteropError, file: &str, case: &str) {
    let text = e.to_string();
    let InteropError::Dataset { path, error, .. } = e else { panic!("{file}: not a dataset error: {e}") };
    assert_eq!(path.file_name().and_then(|n| n.to_str()), Some(file), "{text}: names the file");
    let (kind, inner) = case.split_once('(').unwrap_or((case, ")"));
    let inner = inner.strip_suffix(')').unwrap_or(inner);
    let debug = format!("{error:?}");
    assert!(
        debug.starts_with(kind) || debug.contains(&format!("error: {kind}")),
        "{file}: {debug} is not {kind}"
    );
    for part in inner.split(": ").filter(|p| !p.is_empty()) {
        assert!(text.contains(part), "{file}: {text:?} does not say {part:?} ({case})");
    }
}

/// Every record of a sequential source, shard after shard, from the start.
pub(crate) fn sequential_records<S: guideloom_loader::sequential::SequentialSource>(
    source: &S,
) -> Result<Vec<S::Item>, guideloom_loader::LoaderError> {
    use guideloom_loader::sequential::{ShardPos, ShardReader};
    let mut out = Vec::new();
    for s in 0..source.shards().len() as u64 {
        let mut r = source.open(s, ShardPos::START)?;
        while let Some(d) = r.next_record()? {
            out.push(d);
        }
    }
    Ok(out)
}
