//! TFRecord (issue 28 item 3): the samples written by the `tfrecord` package 1.14.6
//! (`tests/data/samples2/tfrecord`, AC-TFR-01..04 of `tests/data/samples2/FORMATS.md` §8.4)
//! read in order by the sequential loader's source and as a token stream, against
//! `expected.json`; the index file; the malformed files' errors.

use guideloom_formats::Primitive;
use guideloom_interop::{ForeignDataset, ForeignError, ForeignFormat, ForeignOptions, TfRecordShards};
use guideloom_loader::sequential::{SequentialLoader, SequentialSource, ShardPos, ShardReader};

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
