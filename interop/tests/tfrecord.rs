//! TFRecord (issue 28 item 3): the samples written by the `tfrecord` package 1.14.6
//! (`tests/data/samples2/tfrecord`, AC-TFR-01..04 of `tests/data/samples2/FORMATS.md` §8.4)
//! read in order by the sequential loader's source and as a token stream, against
//! `expected.json`; the index file; the malformed files' errors.

use guideloom_formats::Primitive;
use guideloom_interop::{ForeignDataset, ForeignError, ForeignFormat, ForeignOptions, TfRecordShards};
use guideloom_loader::sequential::{SequentialLoader, SequentialSource, ShardPos, ShardReader};

use crate::common::assert_foreign;
use crate::records_samples::{
    assert_case, assert_documents, case_error, documents, expected, open2, sample2, sequential_records,
};

fn opts() -> ForeignOptions {
    ForeignOptions::new().format(ForeignFormat::TfRecord)
}

fn all_records(shards: &TfRecordShards) -> Vec<Vec<i64>> {
    sequential_records(shards).unwrap()
}

#[test]
fn issue28_ac_tfr_01_02_examples_plain_and_gzip_match_expected() {
    let want = expected("tfrecord");
    for name in ["examples.tfrecord", "examples.tfrecord.gz"] {
        let path = sample2(&format!("tfrecord/{name}"));
        let shards = TfRecordShards::open(path.to_str().unwrap(), &ForeignOptions::new()).unwrap();
        assert_eq!(shards.dtype(), Primitive::I64);
        let docs = all_records(&shards);
        assert_documents(&want["examples.tfrecord"], &docs);
        let data = open2(&format!("tfrecord/{name}"), &opts());
        assert_eq!(data.dtype(), Primitive::I64);
        assert_eq!(documents(&data), docs, "{name}");
    }
}

#[test]
fn issue28_ac_tfr_03_the_index_reaches_record_17() {
    let path = sample2("tfrecord/examples.tfrecord");
    let shards = TfRecordShards::open(path.to_str().unwrap(), &ForeignOptions::new()).unwrap();
    let index = shards.read_index(0, sample2("tfrecord/examples.tfrecord.index").to_str().unwrap()).unwrap();
    assert_eq!(index.len(), 120);
    assert_eq!(
        index[..3],
        [
            ShardPos { record: 0, offset: 0 },
            ShardPos { record: 1, offset: 162 },
            ShardPos { record: 2, offset: 397 }
        ]
    );
    let mut r = shards.open(0, index[17]).unwrap();
    assert_eq!(
        r.next_record().unwrap().unwrap()[..8],
        [27559, 18154, 6402, 35970, 20898, 22991, 10729, 8776]
    );
    assert_eq!(r.pos(), index[18]);
    // An index that does not match the file is refused.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("bad.index"), "0 162\n162 236\n").unwrap();
    let e = shards.read_index(0, dir.path().join("bad.index").to_str().unwrap()).unwrap_err();
    assert!(matches!(e.foreign_error(), Some(ForeignError::BadRecordIndex { line: 2, .. })), "{e}");
    assert!(e.to_string().contains("index line 2"), "{e}");
}

#[test]
fn issue28_ac_tfr_04_raw_u16_records() {
    let want = expected("tfrecord");
    let path = sample2("tfrecord/raw_u16_tokens.tfrecord");
    let shards =
        TfRecordShards::open(path.to_str().unwrap(), &ForeignOptions::new().dtype(Primitive::U16)).unwrap();
    let docs = all_records(&shards);
    assert_documents(&want["raw_u16_tokens.tfrecord"], &docs);
    let examples = all_records(
        &TfRecordShards::open(
            sample2("tfrecord/examples.tfrecord").to_str().unwrap(),
            &ForeignOptions::new(),
        )
        .unwrap(),
    );
    assert_eq!(docs[..], examples[..60]);
    let data = open2("tfrecord/raw_u16_tokens.tfrecord", &opts().dtype(Primitive::U16));
    assert_eq!((data.dtype(), data.elements(), data.document_count()), (Primitive::U16, 1_381, Some(60)));
}

#[test]
fn issue28_tfrecord_sequential_loader_splits_ranks_and_resumes_exactly() {
    let dir = tempfile::tempdir().unwrap();
    // Three shards: the plain file, its gzip, the plain file again under another name.
    for (from, to) in [
        ("examples.tfrecord", "a.tfrecord"),
        ("examples.tfrecord.gz", "b.tfrecord.gz"),
        ("examples.tfrecord", "c.tfrecord"),
    ] {
        std::fs::copy(sample2(&format!("tfrecord/{from}")), dir.path().join(to)).unwrap();
    }
    let shards = TfRecordShards::open(dir.path().to_str().unwrap(), &ForeignOptions::new())
        .unwrap()
        .count_lengths()
        .unwrap();
    assert_eq!(shards.shards().iter().map(|s| s.len_hint).collect::<Vec<_>>(), [Some(120); 3]);
    let loader =
        SequentialLoader::builder(shards).pack(64).batch_size(4).window_shuffle(16).seed(7).build().unwrap();
    let all: Vec<_> = loader.iter().map(|b| b.unwrap()).collect();
    assert_eq!(all.iter().map(|b| b.data.len()).sum::<usize>(), 3 * 2_770 / 64);
    // Resume after batch 5 (its state) gives the same batches after it.
    let mut it = loader.iter();
    for _ in 0..5 {
        it.next().unwrap().unwrap();
    }
    let state = it.state();
    let rest: Vec<_> = loader.iter_from(&state).unwrap().map(|b| b.unwrap().data).collect();
    let want: Vec<_> = all[5..].iter().map(|b| b.data.clone()).collect();
    assert_eq!(rest, want);
}

#[test]
fn issue28_malformed_tfrecords_give_their_errors() {
    for name in ["data_crc_mismatch", "length_crc_mismatch", "huge_length", "float_feature", "bad_protobuf"] {
        let rel = format!("tfrecord/{name}.tfrecord");
        let case = case_error(&rel);
        let e = ForeignDataset::open(sample2(&format!("malformed/{rel}")), &opts()).unwrap_err();
        assert_case(&e, &format!("{name}.tfrecord"), &case);
        // The sequential source fails on the same record, naming the file.
        let shards = TfRecordShards::open(
            sample2(&format!("malformed/{rel}")).to_str().unwrap(),
            &ForeignOptions::new(),
        )
        .unwrap();
        let mut r = shards.open(0, ShardPos::START).unwrap();
        let err = loop {
            match r.next_record() {
                Ok(Some(_)) => continue,
                Ok(None) => panic!("{name}: read to the end"),
                Err(e) => break e,
            }
        };
        let chain = std::iter::successors(Some(&err as &dyn std::error::Error), |e| e.source())
            .map(|e| e.to_string())
            .collect::<Vec<_>>()
            .join(": ");
        assert!(chain.contains(&format!("{name}.tfrecord")) && chain.contains(&e.to_string()), "{chain}");
    }
}

// ---- Records built byte by byte (issue 33: the framing's and the index's boundaries) ----

/// One record as TensorFlow's `RecordWriter` frames it: u64 length, its masked crc32c, the
/// data, the data's masked crc32c (`crc32c::Mask`: rotated right by 15, plus 0xa282ead8).
fn record(data: &[u8]) -> Vec<u8> {
    let mask = |b: &[u8]| crc32c::crc32c(b).rotate_right(15).wrapping_add(0xa282_ead8);
    let mut out = (data.len() as u64).to_le_bytes().to_vec();
    out.extend(mask(&out).to_le_bytes());
    out.extend(data);
    out.extend(mask(data).to_le_bytes());
    out
}

/// Raw u16 records (two ids each, `ForeignOptions::dtype`) read from a file holding `bytes`,
/// as a token stream; the error's file is `name`.
fn raw_records(name: &str, bytes: &[u8]) -> Result<ForeignDataset, guideloom_interop::InteropError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    std::fs::write(&path, bytes).unwrap();
    ForeignDataset::open(&path, &opts().dtype(Primitive::U16))
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(bytes).unwrap();
    gz.finish().unwrap()
}

/// Issue 33 (mutants of the framing's short reads: the head `n < 12` -> `>`, the data
/// `data.len() < need` -> `>`): after a whole 18-byte record, 5 bytes are a truncated head
/// (record 1 at byte 18, 5 bytes there); a head claiming 10 bytes of data with 3 there is a
/// record out of range, in a plain file (its size known before the read) and in a gzip stream
/// (found by the read): both name the record, its offset, its length and the 3 bytes left.
#[test]
fn issue33_foreign_tfrecord_a_record_cut_in_its_head_or_its_data() {
    let mut cut_head = record(b"ab");
    cut_head.extend([1, 2, 3, 4, 5]);
    for (name, bytes) in [("a.tfrecord", cut_head.clone()), ("a.tfrecord.gz", gzip(&cut_head))] {
        let e = raw_records(name, &bytes).unwrap_err();
        assert_foreign(&e, name, &ForeignError::TruncatedRecord { record: 1, offset: 18, have: 5 });
    }
    let mut cut_data = record(b"ab");
    let whole = record(b"0123456789");
    cut_data.extend(&whole[..12 + 3]);
    for (name, bytes) in [("b.tfrecord", cut_data.clone()), ("b.tfrecord.gz", gzip(&cut_data))] {
        let e = raw_records(name, &bytes).unwrap_err();
        let want = ForeignError::RecordOutOfRange { record: 1, offset: 18, length: 10, left: 3 };
        assert_foreign(&e, name, &want);
    }
    let mut both = record(b"ab");
    both.extend(record(&[7, 0, 9, 0]));
    for (name, bytes) in [("c.tfrecord", both.clone()), ("c.tfrecord.gz", gzip(&both))] {
        let d = raw_records(name, &bytes).unwrap();
        assert_eq!((d.elements(), d.documents()), (3, Some(&[0, 1, 3][..])), "{name}");
    }
}

/// Issue 33 (mutants of the index's line check `offset != expect || length < 16 || end >
/// size`: either `||` -> `&&`, `<` -> `==`, `<=`): a file of an empty record (16 bytes, the
/// framing alone) and a 2-byte one (18) has the index `0 16` / `16 18`. Each broken line is
/// refused with its own reason: a length below the framing's 16 bytes, an offset that is not
/// where the records before end, a record past the file's end, and a length the record at
/// that offset does not have.
#[test]
fn issue33_foreign_tfrecord_index_lines_at_their_boundaries() {
    let dir = tempfile::tempdir().unwrap();
    let mut file = record(b"");
    file.extend(record(b"xy"));
    std::fs::write(dir.path().join("a.tfrecord"), &file).unwrap();
    let shards =
        TfRecordShards::open(dir.path().join("a.tfrecord").to_str().unwrap(), &ForeignOptions::new())
            .unwrap();
    let index = |text: &str| {
        std::fs::write(dir.path().join("a.index"), text).unwrap();
        shards.read_index(0, dir.path().join("a.index").to_str().unwrap())
    };
    assert_eq!(index("0 16\n16 18\n").unwrap(), [ShardPos::START, ShardPos { record: 1, offset: 16 }]);
    let before = |at, len, expect| {
        format!("record at {at} of {len} bytes: the records before end at {expect}, the file at 34")
    };
    for (text, line, reason) in [
        ("0 15\n", 1, before(0, 15, 0)),
        ("0 16\n20 18\n", 2, before(20, 18, 16)),
        ("0 16\n16 19\n", 2, before(16, 19, 16)),
        ("0 16\n16 17\n", 2, "no record of 17 bytes at offset 16".to_string()),
    ] {
        let e = index(text).unwrap_err();
        assert_foreign(&e, "a.index", &ForeignError::BadRecordIndex { line, reason });
    }
}

/// Issue 33 (mutants of `TfRecordShards::files` -> empty, and of the source's fingerprint
/// -> 0, 1): the files are the shards' paths in order; sources over other files or reading
/// records another way have other fingerprints, none 0 or 1.
#[test]
fn issue33_foreign_tfrecord_files_and_fingerprints() {
    let dir = sample2("tfrecord");
    let at = |name: &str, options: &ForeignOptions| {
        TfRecordShards::open(dir.join(name).to_str().unwrap(), options).unwrap()
    };
    let examples = at("examples.tfrecord", &ForeignOptions::new());
    assert_eq!(examples.files(), [dir.join("examples.tfrecord")]);
    let raw = at("raw_u16_tokens.tfrecord", &ForeignOptions::new().dtype(Primitive::U16));
    let as_raw = at("examples.tfrecord", &ForeignOptions::new().dtype(Primitive::U16));
    let prints = [examples.fingerprint(), raw.fingerprint(), as_raw.fingerprint()];
    assert!(prints.iter().all(|&p| p > 1), "{prints:?}");
    assert!(prints[0] != prints[1] && prints[1] != prints[2] && prints[0] != prints[2], "{prints:?}");
    assert_eq!(examples.fingerprint(), at("examples.tfrecord", &ForeignOptions::new()).fingerprint());
}

/// Issue 33 (mutant of `Debug for Framing` -> nothing): a reader's debug form names the
/// record and byte offset it is at (after record 0 of the sample: record 1 at byte 162).
#[test]
fn issue33_foreign_tfrecord_a_reader_s_debug_form_names_its_position() {
    let path = sample2("tfrecord/examples.tfrecord");
    let shards = TfRecordShards::open(path.to_str().unwrap(), &ForeignOptions::new()).unwrap();
    let mut r = shards.open(0, ShardPos::START).unwrap();
    r.next_record().unwrap().unwrap();
    let text = format!("{r:?}");
    assert!(text.contains("Framing { record: 1, offset: 162 }"), "{text}");
}
