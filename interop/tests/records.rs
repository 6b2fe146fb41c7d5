//! [`open_token_records`]: windows and documents of any token dataset as `u32` id sequences
//! (the inputs of the Python binding's `Mixture` and `Packed`): a Megatron dataset's documents
//! are the sequences megatron-core's writer stored (its `expected.json`), a native stream's
//! windows the tokens written, a native stream-with-meta storage's documents the documents
//! written, and a dataset without document boundaries refuses documents.

use guideloom_formats::{DocumentTokensFormat, TokenDocument, TokenFormat};
use guideloom_interop::{open_token_records, InteropError, OpenOptions, RecordUnit};
use guideloom_loader::DataSource;
use guideloom_storage::{StreamWithMetaWriter, StreamWriter};

use crate::common::sample;

fn megatron_sequences(prefix: &str) -> Vec<Vec<u32>> {
    let text = std::fs::read_to_string(sample("megatron/expected.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v[prefix]["sequences"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_array().unwrap().iter().map(|t| t.as_u64().unwrap() as u32).collect())
        .collect()
}

#[test]
fn megatron_documents_are_the_sequences_megatron_wrote() {
    let prefix = sample("megatron/gpt2_text_document");
    let r =
        open_token_records(prefix.to_str().unwrap(), RecordUnit::Documents, &OpenOptions::default()).unwrap();
    let want = megatron_sequences("gpt2_text_document");
    let n = r.source().len();
    assert_eq!(n, want.len() as u64);
    let all: Vec<u64> = (0..n).collect();
    assert_eq!(r.source().get_many(&all).unwrap(), want);
    assert_eq!(r.lengths().unwrap(), want.iter().map(|d| d.len() as u64).collect::<Vec<_>>());
    assert_eq!(r.tokens(), want.iter().map(|d| d.len() as u64).sum::<u64>());
}

#[test]
fn native_stream_windows_and_no_documents() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = StreamWriter::open(dir.path(), TokenFormat::<u16>::new()).unwrap();
    w.append(0, &(0u32..10).collect::<Vec<_>>()).unwrap();
    w.append(1, &(10u32..17).collect::<Vec<_>>()).unwrap();
    w.commit().unwrap();
    let at = dir.path().to_str().unwrap();
    let r = open_token_records(at, RecordUnit::Windows { seq_len: 4, stride: 3 }, &OpenOptions::default())
        .unwrap();
    // Windows of a stream storage cross its shards: [0, 4), [3, 7), ..., [12, 16).
    let got: Vec<Vec<u32>> = (0..r.source().len()).map(|i| r.source().get(i).unwrap()).collect();
    let want: Vec<Vec<u32>> = (0..5u32).map(|k| (3 * k..3 * k + 4).collect()).collect();
    assert_eq!(got, want);
    assert!(r.lengths().is_none());
    let err = open_token_records(at, RecordUnit::Documents, &OpenOptions::default()).unwrap_err();
    assert!(matches!(err, InteropError::InvalidConfig { field: "documents", .. }), "{err}");
    let err = open_token_records(at, RecordUnit::Windows { seq_len: 0, stride: 1 }, &OpenOptions::default())
        .unwrap_err();
    assert!(
        matches!(
            err,
            InteropError::Loader(guideloom_loader::LoaderError::InvalidConfig { field: "seq_len", .. })
        ),
        "{err}"
    );
}

#[test]
fn native_stream_with_meta_documents_are_the_documents_written() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = StreamWithMetaWriter::open(dir.path(), DocumentTokensFormat::<u32>::new()).unwrap();
    let doc = |ordinal, tokens| TokenDocument { ordinal, tokens, data: Vec::new() };
    w.append(0, &[doc(0, vec![5, 6, 7]), doc(1, vec![70_000, 8])]).unwrap();
    w.append(1, &[doc(2, vec![9]), doc(3, vec![1, 2, 3, 4])]).unwrap();
    w.commit().unwrap();
    let at = dir.path().to_str().unwrap();
    let r = open_token_records(at, RecordUnit::Documents, &OpenOptions::default()).unwrap();
    let got: Vec<Vec<u32>> = (0..r.source().len()).map(|i| r.source().get(i).unwrap()).collect();
    assert_eq!(got, [vec![5, 6, 7], vec![70_000, 8], vec![9], vec![1, 2, 3, 4]]);
    assert_eq!(r.lengths().unwrap(), [3, 2, 1, 4]);
    assert_eq!(r.tokens(), 10);
    // Windows over the same stream cross the documents.
    let w = open_token_records(at, RecordUnit::Windows { seq_len: 4, stride: 4 }, &OpenOptions::default())
        .unwrap();
    assert_eq!(w.source().get(1).unwrap(), [8, 9, 1, 2]);
}
