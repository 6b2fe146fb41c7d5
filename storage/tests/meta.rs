//! Stream-with-meta storage: the run contract at append time, windows with their payloads,
//! the built-in document-tokens format, on-disk layout, hostile index files, index overhead.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use guideloom_formats::{
    DocumentTokensFormat, Dtype, FormatError, MetaSink, MetaWindow, Primitive, StreamWithMetaFormat,
    TokenDocument,
};
use guideloom_storage::{
    Manifest, ReadOptions, StorageError, StreamWithMetaReader, StreamWithMetaWriter, Window,
};

use crate::common::{backends, edit_manifest, Counting};

/// A record of the scripted format: the pairs to push (one u16 element per pair, its value
/// the key), and the size to report.
#[derive(Debug, Clone)]
struct Script {
    size: u64,
    pairs: Vec<(u16, Option<&'static [u8]>)>,
}

/// A record whose size is its pair count.
fn script(pairs: &[(u16, Option<&'static [u8]>)]) -> Script {
    Script { size: pairs.len() as u64, pairs: pairs.to_vec() }
}

/// Everything a window hands to unpack, copied out.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Raw {
    stream: Vec<u16>,
    shard_lengths: Vec<u64>,
    shards: Vec<u64>,
    document_shard: Vec<u64>,
    document_index: Vec<u32>,
    document_data: Vec<Vec<u8>>,
    run_offset: Vec<u64>,
}

/// Pushes the script's pairs verbatim; with `ignore_errors`, drops the sink's errors (the
/// storage must still refuse the record).
#[derive(Debug, Clone, Copy)]
struct ScriptFormat {
    ignore_errors: bool,
}

const SCRIPT: ScriptFormat = ScriptFormat { ignore_errors: false };

impl StreamWithMetaFormat for ScriptFormat {
    type Input = Script;
    type Output = Raw;
    type Key = u16;
    fn name(&self) -> &str {
        "script-test"
    }
    fn dtype(&self) -> Dtype {
        Dtype::Primitive(Primitive::U16)
    }
    fn size(&self, record: &Script) -> u64 {
        record.size
    }
    fn pack(&self, record: &Script, meta: &mut MetaSink<u16>, out: &mut Vec<u8>) -> Result<u64, FormatError> {
        for &(key, payload) in &record.pairs {
            let pushed = meta.push(key, payload);
            if !self.ignore_errors {
                pushed?;
            }
            out.extend_from_slice(&key.to_le_bytes());
        }
        Ok(record.pairs.len() as u64)
    }
    fn unpack(&self, w: &MetaWindow<'_>) -> Result<Raw, FormatError> {
        Ok(Raw {
            stream: w.stream().elements::<u16>()?.into_owned(),
            shard_lengths: w.stream().shard_lengths().to_vec(),
            shards: w.stream().shards().to_vec(),
            document_shard: w.document_shard().to_vec(),
            document_index: w.document_index().to_vec(),
            document_data: w.document_data().iter().map(|d| d.to_vec()).collect(),
            run_offset: w.run_offset().to_vec(),
        })
    }
}

fn file_len(dir: &Path, name: &str) -> u64 {
    std::fs::metadata(dir.join(name)).unwrap().len()
}

fn doc(ordinal: u64, tokens: &[u32], data: &[u8]) -> TokenDocument {
    TokenDocument { ordinal, tokens: tokens.to_vec(), data: data.to_vec() }
}

/// Acceptance 1: chunk ids [0,0,1,1,1] and [0,1] -> 7 elements, 4 payloads; window 3..6.
fn reference_example(dir: &Path) {
    let mut w = StreamWithMetaWriter::open(dir, SCRIPT).unwrap();
    let a = script(&[(0, Some(b"a0")), (0, None), (1, Some(b"a1")), (1, None), (1, None)]);
    let b = script(&[(0, Some(b"b0")), (1, Some(b"b1"))]);
    assert_eq!(w.append(0, &a).unwrap(), 5);
    assert_eq!(w.append(1, &b).unwrap(), 2);
    w.commit().unwrap();
}

#[test]
fn reference_example_stores_one_payload_per_run_and_reads_window_3_to_6() {
    let dir = tempfile::tempdir().unwrap();
    reference_example(dir.path());
    // Keys are per call: record b's keys 0 and 1 are new runs, so 2 + 2 payloads are stored.
    assert_eq!(std::fs::read(dir.path().join("shard-00000.meta")).unwrap(), b"a0a1");
    assert_eq!(std::fs::read(dir.path().join("shard-00001.meta")).unwrap(), b"b0b1");
    let idx0 = std::fs::read(dir.path().join("shard-00000.metaidx")).unwrap();
    let le = |v: &[u64]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    assert_eq!(idx0, le(&[0, 0, 2, 2])); // runs at elements 0 and 2, payloads at bytes 0 and 2
    assert_eq!(std::fs::read(dir.path().join("shard-00001.metaidx")).unwrap(), le(&[0, 0, 1, 2]));
    assert_eq!(std::fs::read(dir.path().join("shard-00000.stream")).unwrap(), [0, 0, 0, 0, 1, 0, 1, 0, 1, 0]);
    let m = Manifest::load(dir.path()).unwrap();
    assert_eq!(m.kind().as_str(), "stream_with_meta");
    assert_eq!(m.shards()[0].files["meta"].bytes, 4);
    assert_eq!(m.shards()[0].files["metaidx"].bytes, 32);
    for (name, opts) in backends() {
        let r = StreamWithMetaReader::open_with(dir.path(), SCRIPT, opts).unwrap();
        assert_eq!((r.len(), r.run_count()), (7, 4), "{name}");
        let w = r.read(Window::new(3, 3)).unwrap();
        assert_eq!(
            w,
            Raw {
                stream: vec![1, 1, 0],
                shard_lengths: vec![2, 1],
                shards: vec![0, 1],
                document_shard: vec![0, 1],
                document_index: vec![0, 0, 1],
                document_data: vec![b"a1".to_vec(), b"b0".to_vec()],
                run_offset: vec![1, 0],
            },
            "{name}"
        );
        // The whole stream: 4 payloads in first-touch order.
        let all = r.read(Window::new(0, 7)).unwrap();
        assert_eq!(all.document_index, [0, 0, 1, 1, 1, 2, 3], "{name}");
        assert_eq!(all.document_data, [&b"a0"[..], b"a1", b"b0", b"b1"], "{name}");
        assert_eq!(all.document_shard, [0, 0, 1, 1], "{name}");
        assert_eq!(r.read(Window::new(7, 0)).unwrap().document_data, Vec::<Vec<u8>>::new(), "{name}");
    }
    assert_eq!(guideloom_storage::verify(dir.path()).unwrap().files, 6);
}

#[test]
fn invalid_records_are_typed_errors_and_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    reference_example(dir.path());
    let sizes =
        |d: &Path| ["shard-00000.stream", "shard-00000.meta", "shard-00000.metaidx"].map(|f| file_len(d, f));
    let before = sizes(dir.path());
    let lenient = ScriptFormat { ignore_errors: true };
    let cases: [(ScriptFormat, Script, u64, &str); 6] = [
        // A key repeating after another key.
        (SCRIPT, script(&[(0, Some(b"x")), (1, Some(b"y")), (0, Some(b"z"))]), 2, "repeats"),
        // A run whose first pair has no payload.
        (SCRIPT, script(&[(0, Some(b"x")), (1, None)]), 1, "no payload"),
        (SCRIPT, script(&[(0, None)]), 0, "no payload"),
        // Fewer and more pairs than `size`.
        (SCRIPT, Script { size: 3, pairs: vec![(0, Some(b"x")), (0, None)] }, 2, "2 pairs"),
        (SCRIPT, Script { size: 1, pairs: vec![(0, Some(b"x")), (0, None)] }, 1, "2 pairs"),
        // A format that swallows the sink's error is refused all the same.
        (lenient, script(&[(0, Some(b"x")), (1, Some(b"y")), (0, Some(b"z"))]), 2, "repeats"),
    ];
    for (format, record, position, reason) in cases {
        let mut w = StreamWithMetaWriter::open(dir.path(), format).unwrap();
        for shard in [0, 2] {
            match w.append(shard, &record).unwrap_err() {
                StorageError::Format {
                    shard: s,
                    source: FormatError::InvalidMeta { position: p, reason: r },
                } => {
                    assert_eq!((s, p), (shard, position), "{record:?}");
                    assert!(r.contains(reason), "{r}");
                }
                e => panic!("unexpected {e}"),
            }
        }
        assert_eq!(w.shard_len(0), 5);
        w.commit().unwrap();
        assert_eq!(sizes(dir.path()), before, "{record:?}");
        // Shard 2 was never created.
        assert!(!dir.path().join("shard-00002.stream").exists());
        assert!(!dir.path().join("shard-00002.meta").exists());
    }
    let r = StreamWithMetaReader::open(dir.path(), SCRIPT).unwrap();
    assert_eq!((r.len(), r.run_count()), (7, 4));
    assert_eq!(r.manifest().shards().iter().map(|s| s.id).collect::<Vec<_>>(), [0, 1]);
    // The writer keeps working after a refusal.
    let mut w = StreamWithMetaWriter::open(dir.path(), SCRIPT).unwrap();
    let e = w.append(0, &script(&[(0, None)])).unwrap_err();
    assert!(
        matches!(&e, StorageError::Format { shard: 0, source: FormatError::InvalidMeta { position: 0, .. } }),
        "{e:?}"
    );
    w.append(0, &script(&[(5, Some(b"c"))])).unwrap();
    w.commit().unwrap();
    let r = StreamWithMetaReader::open(dir.path(), SCRIPT).unwrap();
    let tail = r.read(Window::new(4, 2)).unwrap();
    assert_eq!((tail.stream, tail.document_data), (vec![1, 5], vec![b"a1".to_vec(), b"c".to_vec()]));
    assert_eq!(tail.document_shard, [0, 0]);
}

#[test]
fn document_lengths_come_from_metadata_not_token_values() {
    let dir = tempfile::tempdir().unwrap();
    let format = DocumentTokensFormat::<u16>::new();
    let mut w = StreamWithMetaWriter::open(dir.path(), format).unwrap();
    // Every token is 7: no end-of-text token anywhere, boundaries only in the metadata.
    w.append(0, &[doc(10, &[7; 8], b"first")]).unwrap();
    w.append(0, &[doc(11, &[7; 5], b""), doc(12, &[7; 4], b"third")]).unwrap();
    w.commit().unwrap();
    for (name, opts) in backends() {
        let r = StreamWithMetaReader::open_with(dir.path(), format, opts).unwrap();
        assert_eq!(r.len(), 17, "{name}");
        let out = r.read(Window::new(0, 17)).unwrap();
        assert_eq!(out.tokens, [7; 17], "{name}");
        assert_eq!(out.documents.len(), 3, "{name}");
        assert_eq!(out.document_lengths(), [8, 5, 4], "{name}");
        assert_eq!(out.documents.iter().map(|d| d.ordinal).collect::<Vec<_>>(), [10, 11, 12], "{name}");
        assert_eq!(out.documents[0].data, b"first", "{name}");
        assert_eq!(out.documents[2].data, b"third", "{name}");
        assert_eq!(out.position, [0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 0, 1, 2, 3], "{name}");
        // A window starting mid-document: true positions (the count continues).
        let mid = r.read(Window::new(3, 12)).unwrap();
        assert_eq!(mid.document_lengths(), [5, 5, 2], "{name}");
        assert_eq!(mid.position, [3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 0, 1], "{name}");
        assert_eq!(mid.document, [10, 10, 10, 10, 10, 11, 11, 11, 11, 11, 12, 12], "{name}");
    }
}

#[test]
fn packed_row_masks_the_cross_document_target_and_restarts_positions() {
    let dir = tempfile::tempdir().unwrap();
    let format = DocumentTokensFormat::<u32>::new();
    let mut w = StreamWithMetaWriter::open(dir.path(), format).unwrap();
    let (a1, a2, a3, b1, b2) = (101u32, 102, 103, 201, 202);
    w.append(0, &[doc(0, &[a1, a2, a3], b"doc a")]).unwrap();
    w.append(0, &[doc(1, &[b1, b2], b"doc b")]).unwrap();
    w.commit().unwrap();
    let r = StreamWithMetaReader::open(dir.path(), format).unwrap();
    let row = r.read(Window::new(0, 5)).unwrap();
    assert_eq!(row.tokens, [a1, a2, a3, b1, b2]);
    assert_eq!(row.document, [0, 0, 0, 1, 1]);
    assert_eq!(row.position, [0, 1, 2, 0, 1]);
    // Next-token labels: inputs tokens[..4] predict tokens[1..]; a3 -> b1 crosses documents.
    assert_eq!(row.same_document_targets(), [true, true, false, true]);
    let labels: Vec<i64> = row.tokens[1..]
        .iter()
        .zip(row.same_document_targets())
        .map(|(&t, keep)| if keep { i64::from(t) } else { -100 })
        .collect();
    assert_eq!(labels, [102, 103, -100, 202]);
}

#[test]
fn window_spanning_three_shards_returns_payloads_from_the_right_shards() {
    let dir = tempfile::tempdir().unwrap();
    let format = DocumentTokensFormat::<u16>::new();
    let mut w = StreamWithMetaWriter::open(dir.path(), format).unwrap();
    // Shard 0: d0 (4 tokens), d1 starting at shard 0's last element. Then shards 3 and 7.
    w.append(0, &[doc(0, &[1, 2, 3, 4], b"s0"), doc(1, &[5], b"s0 last")]).unwrap();
    w.append(7, &[doc(3, &[9, 10], b"s7")]).unwrap();
    w.append(3, &[doc(2, &[6, 7, 8], b"s3")]).unwrap();
    w.commit().unwrap();
    for (name, opts) in backends() {
        let r = StreamWithMetaReader::open_with(dir.path(), format, opts).unwrap();
        assert_eq!(r.len(), 10, "{name}");
        let out = r.read(Window::new(3, 6)).unwrap();
        assert_eq!(out.tokens, [4, 5, 6, 7, 8, 9], "{name}");
        let docs: Vec<(u64, u64, &[u8])> =
            out.documents.iter().map(|d| (d.ordinal, d.shard, d.data.as_slice())).collect();
        assert_eq!(docs, [(0, 0, &b"s0"[..]), (1, 0, b"s0 last"), (2, 3, b"s3"), (3, 7, b"s7")], "{name}");
        assert_eq!(out.document_index, [0, 1, 2, 2, 2, 3], "{name}");
        assert_eq!(out.position, [3, 0, 0, 1, 2, 0], "{name}");
        // Starting exactly at shard 0's last element.
        let out = r.read(Window::new(4, 6)).unwrap();
        assert_eq!(out.documents.iter().map(|d| d.shard).collect::<Vec<_>>(), [0, 3, 7], "{name}");
        assert_eq!(out.document, [1, 2, 2, 2, 3, 3], "{name}");
    }
}

#[test]
fn read_many_is_one_backend_call_and_matches_a_model_for_every_window() {
    let dir = tempfile::tempdir().unwrap();
    let format = DocumentTokensFormat::<u16>::new();
    let mut w = StreamWithMetaWriter::open(dir.path(), format).unwrap();
    w.append(2, &[doc(0, &[1, 2], b"x"), doc(1, &[], b"empty"), doc(2, &[3], b"")]).unwrap();
    w.append(5, &[doc(3, &[4, 5, 6, 7], b"yy")]).unwrap();
    w.append(5, &[doc(4, &[8], b"zzz")]).unwrap();
    w.append(9, &[]).unwrap();
    w.append(11, &[doc(5, &[9, 10, 11], b"w")]).unwrap();
    w.commit().unwrap();
    // Model: per element (token, ordinal, position, shard).
    let model: Vec<(u16, u64, u64, u64)> = vec![
        (1, 0, 0, 2),
        (2, 0, 1, 2),
        (3, 2, 0, 2),
        (4, 3, 0, 5),
        (5, 3, 1, 5),
        (6, 3, 2, 5),
        (7, 3, 3, 5),
        (8, 4, 0, 5),
        (9, 5, 0, 11),
        (10, 5, 1, 11),
        (11, 5, 2, 11),
    ];
    let counting = Arc::new(Counting::default());
    let opts = ReadOptions::default().backend(counting.clone());
    let r = StreamWithMetaReader::open_with(dir.path(), format, opts).unwrap();
    assert_eq!((r.len(), r.run_count()), (11, 5));
    let windows: Vec<Window> =
        (0..=11u64).flat_map(|start| (0..=11 - start).map(move |len| Window::new(start, len))).collect();
    assert_eq!(windows.len(), 78);
    let outs = r.read_many(&windows).unwrap();
    assert_eq!(outs.len(), 78);
    assert_eq!(counting.0.load(Ordering::SeqCst), 1);
    for (&Window { offset: start, len }, out) in windows.iter().zip(&outs) {
        let want = &model[start as usize..(start + len) as usize];
        assert_eq!(out.tokens, want.iter().map(|m| m.0).collect::<Vec<_>>(), "{start}+{len}");
        assert_eq!(out.document, want.iter().map(|m| m.1).collect::<Vec<_>>(), "{start}+{len}");
        assert_eq!(out.position, want.iter().map(|m| m.2).collect::<Vec<_>>(), "{start}+{len}");
        let shards: Vec<u64> = out.document_index.iter().map(|&d| out.documents[d as usize].shard).collect();
        assert_eq!(shards, want.iter().map(|m| m.3).collect::<Vec<_>>(), "{start}+{len}");
        let mut ordinals: Vec<u64> = want.iter().map(|m| m.1).collect();
        ordinals.dedup();
        assert_eq!(out.documents.iter().map(|d| d.ordinal).collect::<Vec<_>>(), ordinals);
    }
    assert!(matches!(
        r.read_many(&[Window::new(0, 1), Window::new(10, 2)]),
        Err(StorageError::OutOfRange { what: "window", start: 10, len: 2, total: 11 })
    ));
}

#[test]
fn second_session_continues_runs_and_payload_offsets() {
    let dir = tempfile::tempdir().unwrap();
    reference_example(dir.path());
    {
        // Uncommitted appends are a crash: invisible, discarded by the next session.
        let mut w = StreamWithMetaWriter::open(dir.path(), SCRIPT).unwrap();
        w.append(0, &script(&[(9, Some(b"lost"))])).unwrap();
        w.append(0, &script(&[(9, Some(b"lost"))])).unwrap();
    }
    let mut w = StreamWithMetaWriter::open(dir.path(), SCRIPT).unwrap();
    w.append(0, &script(&[(4, Some(b"c4")), (4, None)])).unwrap();
    w.set_metadata("note", serde_json::json!("second session"));
    w.finish().unwrap();
    let idx = std::fs::read(dir.path().join("shard-00000.metaidx")).unwrap();
    assert_eq!(idx.len(), 48);
    assert_eq!(&idx[32..], [5u64.to_le_bytes(), 4u64.to_le_bytes()].concat());
    let r = StreamWithMetaReader::open(dir.path(), SCRIPT).unwrap();
    assert_eq!((r.len(), r.run_count()), (9, 5));
    let w = r.read(Window::new(4, 4)).unwrap();
    assert_eq!(w.stream, [1, 4, 4, 0]);
    assert_eq!(w.document_data, [&b"a1"[..], b"c4", b"b0"]);
    assert_eq!(w.document_index, [0, 1, 1, 2]);
    assert_eq!(w.run_offset, [2, 0, 0]);
    assert_eq!(r.manifest().metadata()["note"], "second session");
    guideloom_storage::verify(dir.path()).unwrap();
}

#[test]
fn hostile_run_index_is_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    reference_example(dir.path());
    let p = dir.path().join("shard-00000.metaidx");
    let good = std::fs::read(&p).unwrap();
    let open = || StreamWithMetaReader::open(dir.path(), SCRIPT).map(|_| ());
    let patch = |at: usize, v: u64| {
        let mut b = good.clone();
        b[at..at + 8].copy_from_slice(&v.to_le_bytes());
        std::fs::write(&p, &b).unwrap();
    };
    let corrupt = |e: StorageError| match e {
        StorageError::CorruptIndex { shard, entry, path, .. } => (shard, entry, path),
        e => panic!("unexpected {e}"),
    };
    // Entries: (0, 0), (2, 2).
    patch(0, 1); // first run not at element 0
    assert_eq!(corrupt(open().unwrap_err()), (0, 0, p.clone()));
    patch(16, 0); // run starts not increasing
    assert_eq!(corrupt(open().unwrap_err()), (0, 1, p.clone()));
    patch(16, 5); // run past the shard's 5 elements
    assert_eq!(corrupt(open().unwrap_err()), (0, 1, p.clone()));
    patch(16, u64::MAX);
    assert_eq!(corrupt(open().unwrap_err()), (0, 1, p.clone()));
    patch(24, 5); // payload past the 4-byte .meta
    assert_eq!(corrupt(open().unwrap_err()), (0, 1, p.clone()));
    patch(8, 3); // payload offsets decreasing (3 then 2), also first not 0
    assert_eq!(corrupt(open().unwrap_err()), (0, 0, p.clone()));
    std::fs::write(&p, &good).unwrap();
    open().unwrap();

    // Manifest lengths that do not fit the files: never a huge allocation.
    let m0 = std::fs::read(dir.path().join("manifest.json")).unwrap();
    let set_metaidx = |bytes: u64| {
        std::fs::write(dir.path().join("manifest.json"), &m0).unwrap();
        edit_manifest(dir.path(), |m| m["shards"][0]["files"]["metaidx"]["bytes"] = bytes.into());
    };
    set_metaidx(24);
    assert_eq!(corrupt(open().unwrap_err()).1, 1);
    set_metaidx(u64::MAX / 16 * 16);
    assert!(matches!(open().unwrap_err(), StorageError::CorruptIndex { shard: 0, .. }));
    set_metaidx(64); // 4 runs <= 5 elements, file has 32 bytes
    assert!(matches!(
        open().unwrap_err(),
        StorageError::ShardTooShort { shard: 0, expected: 64, actual: 32, .. }
    ));
    std::fs::write(dir.path().join("manifest.json"), &m0).unwrap();
    edit_manifest(dir.path(), |m| {
        m["shards"][0]["files"].as_object_mut().unwrap().remove("meta");
    });
    assert!(matches!(open().unwrap_err(), StorageError::InvalidManifest { .. }));
    std::fs::write(dir.path().join("manifest.json"), &m0).unwrap();
    // A truncated payload file.
    let meta = dir.path().join("shard-00001.meta");
    std::fs::OpenOptions::new().write(true).open(&meta).unwrap().set_len(3).unwrap();
    assert!(matches!(
        open().unwrap_err(),
        StorageError::ShardTooShort { shard: 1, expected: 4, actual: 3, .. }
    ));
}

#[test]
fn verify_checks_payload_and_index_files_and_kind_is_checked() {
    let dir = tempfile::tempdir().unwrap();
    reference_example(dir.path());
    let report = guideloom_storage::verify(dir.path()).unwrap();
    assert_eq!((report.shards, report.files, report.bytes), (2, 6, 10 + 4 + 32 + 4 + 4 + 32));
    let p = dir.path().join("shard-00001.meta");
    std::fs::write(&p, b"b0bX").unwrap();
    let e = guideloom_storage::verify(dir.path()).unwrap_err();
    assert!(matches!(&e, StorageError::ChecksumMismatch { shard: 1, path, .. } if *path == p), "{e}");
    // Another dtype or kind is refused.
    let e = StreamWithMetaReader::open(dir.path(), DocumentTokensFormat::<u32>::new()).unwrap_err();
    assert!(
        matches!(&e, StorageError::DtypeMismatch { expected, found, .. } if expected == "<u4" && found == "<u2")
    );
    let e = guideloom_storage::StreamReader::open(dir.path(), guideloom_formats::TokenFormat::<u16>::new())
        .unwrap_err();
    assert!(matches!(e, StorageError::KindMismatch { .. }), "{e}");
}

/// Writes `runs` documents of `elements / runs` u16 tokens into one shard; returns the
/// `.metaidx` size in bytes.
fn overhead(dir: &Path, elements: u64, runs: u64) -> u64 {
    let format = DocumentTokensFormat::<u16>::new();
    let mut w = StreamWithMetaWriter::open(dir, format).unwrap();
    let per = (elements / runs) as usize;
    let mut d = TokenDocument { ordinal: 0, tokens: vec![0u32; per], data: Vec::new() };
    for i in 0..runs {
        d.ordinal = i;
        d.tokens.fill((i % 50_000) as u32);
        w.append(0, std::slice::from_ref(&d)).unwrap();
    }
    w.commit().unwrap();
    let r = StreamWithMetaReader::open(dir, format).unwrap();
    assert_eq!((r.len(), r.run_count()), (elements, runs));
    let last = r.read(Window::new(elements - 2, 2)).unwrap();
    assert_eq!(last.position, [per as u64 - 2, per as u64 - 1]);
    assert_eq!(last.document, [runs - 1, runs - 1]);
    file_len(dir, "shard-00000.metaidx")
}

#[test]
fn run_length_index_costs_16_bytes_per_run() {
    let dir = tempfile::tempdir().unwrap();
    // 100,000 elements in 1,000 runs: the ratio of acceptance item 6 at 1/100 scale.
    let bytes = overhead(dir.path(), 100_000, 1_000);
    assert_eq!(bytes, 16_000);
    assert_eq!(bytes as f64 / 100_000.0, 0.16);
}

/// Acceptance item 6 at full size; run with
/// `cargo test -p guideloom-storage --test storage -- --ignored meta::index_overhead_10m --nocapture`
/// (measured: 1,600,000 index bytes = 0.16 bytes/element; payloads 0.08 bytes/element).
#[test]
#[ignore = "writes 20 MB; run on demand to measure"]
fn index_overhead_10m_elements_100k_runs() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = overhead(dir.path(), 10_000_000, 100_000);
    let payload = file_len(dir.path(), "shard-00000.meta");
    println!(
        "10,000,000 elements, 100,000 runs: metaidx {bytes} bytes = {} bytes/element; payloads {payload} bytes = {} bytes/element",
        bytes as f64 / 1e7,
        payload as f64 / 1e7
    );
    assert_eq!(bytes, 1_600_000);
    assert_eq!(payload, 800_000);
}
