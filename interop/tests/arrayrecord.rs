//! Grain's ArrayRecord (issue 28 item 2): the samples written by `array-record` 0.8.6
//! (`tests/data/samples2/arrayrecord`, acceptance cases AC-AR-01..06 of
//! `tests/data/samples2/FORMATS.md` §8.3) read by record index, as documents and as token
//! streams, against the `expected.json` of the project's own reader; and the malformed
//! files' errors.

use guideloom_formats::Primitive;
use guideloom_interop::{
    open_tokens, ArrayRecordReader, ArrayRecordSource, ForeignDataset, ForeignError, ForeignFormat,
    ForeignOptions, OpenOptions,
};
use guideloom_loader::DataSource;
use guideloom_storage::Window;
use sha2::{Digest, Sha256};

use crate::records_samples::{
    assert_case, assert_documents, case_error, documents, expected, open2, sample2,
};

const TOKEN_FILES: [&str; 4] = [
    "tokens_npy_default.array_record",
    "tokens_npy_g4_snappy.array_record",
    "tokens_u16_raw_g16_brotli.array_record",
    "tokens_npy_g8_uncompressed_2blocks.array_record",
];

fn opts() -> ForeignOptions {
    ForeignOptions::new().format(ForeignFormat::ArrayRecord)
}

#[test]
fn issue28_every_sample_index_matches_the_footer_array_record_wrote() {
    let want = expected("arrayrecord");
    for name in TOKEN_FILES.iter().chain(&["raw_bytes_default.array_record"]) {
        let e = &want[*name];
        let r = ArrayRecordReader::open(sample2(&format!("arrayrecord/{name}"))).unwrap();
        assert_eq!(r.file_bytes(), e["file_size"].as_u64().unwrap(), "{name}");
        assert_eq!(r.len(), e["index"]["num_records"].as_u64().unwrap(), "{name}");
        assert_eq!(r.chunk_count(), e["index"]["num_chunks"].as_u64().unwrap(), "{name}");
        assert_eq!(r.footer_offset(), e["index"]["footer_offset"].as_u64().unwrap(), "{name}");
        assert_eq!(r.writer_options(), e["writer_options"].as_str().unwrap(), "{name}");
        let first4: Vec<(u64, u64, u64)> = e["chunk_index_first4"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| (c[0].as_u64().unwrap(), c[1].as_u64().unwrap(), c[2].as_u64().unwrap()))
            .collect();
        assert_eq!(r.chunk_index()[..4], first4[..], "{name}");
        let record3 = r.record(3).unwrap();
        let sha: String = Sha256::digest(&record3).iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(sha, e["record_3_sha256"].as_str().unwrap(), "{name}");
    }
}

#[test]
fn issue28_ac_ar_01_raw_records_are_byte_documents() {
    let r = ArrayRecordReader::open(sample2("arrayrecord/raw_bytes_default.array_record")).unwrap();
    assert_eq!((r.len(), r.group_size(), r.chunk_count()), (100, 1, 100));
    assert_eq!(r.footer_offset(), 10_414);
    assert_eq!(r.record(17).unwrap(), b"document 17: w188 w690 w43 w406 w613 w300");
    // As a token stream of bytes (u8), each record one document.
    let data = open2("arrayrecord/raw_bytes_default.array_record", &opts().dtype(Primitive::U8));
    let docs = documents(&data);
    assert_eq!(docs.len(), 100);
    let doc17: Vec<u8> = docs[17].iter().map(|&b| b as u8).collect();
    assert_eq!(doc17, b"document 17: w188 w690 w43 w406 w613 w300");
}

#[test]
fn issue28_ac_ar_02_to_05_token_records_match_expected_in_every_compression() {
    let want = expected("arrayrecord");
    for name in TOKEN_FILES {
        let e = if name.contains("u16_raw") { &want["tokens_npy_default.array_record"] } else { &want[name] };
        let mut o = opts();
        if name.contains("u16_raw") {
            o = o.dtype(Primitive::U16);
        }
        let data = open2(&format!("arrayrecord/{name}"), &o);
        let docs = documents(&data);
        assert_documents(e, &docs);
        // Each record read alone equals its document.
        let r = ArrayRecordReader::open(sample2(&format!("arrayrecord/{name}"))).unwrap();
        for i in [0u64, 5, 17, 57, 99] {
            let bytes = r.record(i).unwrap();
            let tokens = data
                .reader(guideloom_formats::IntTokenFormat::new(data.dtype()).unwrap(), Default::default())
                .unwrap();
            let w = data.document(i).unwrap();
            let got = tokens.read(w).unwrap();
            assert_eq!(got, docs[i as usize], "{name} record {i}");
            assert!(bytes.len() as u64 >= w.len * data.dtype().size(), "{name} record {i}");
        }
    }
    let data = open2("arrayrecord/tokens_npy_g8_uncompressed_2blocks.array_record", &opts());
    assert_eq!((data.document_count(), data.elements(), data.dtype()), (Some(100), 15_595, Primitive::I32));
}

#[test]
fn issue28_ac_ar_04_raw_records_need_a_dtype() {
    let e = ForeignDataset::open(sample2("arrayrecord/tokens_u16_raw_g16_brotli.array_record"), &opts())
        .unwrap_err();
    match e.foreign_error() {
        Some(ForeignError::InRecord { at, error }) => {
            assert_eq!(at, "record 0");
            assert!(matches!(**error, ForeignError::DTypeRequired { .. }), "{e}");
        }
        _ => panic!("{e}"),
    }
    let r = ArrayRecordReader::open(sample2("arrayrecord/tokens_u16_raw_g16_brotli.array_record")).unwrap();
    assert_eq!((r.group_size(), r.chunk_count(), r.chunk_index()[6].2), (16, 7, 4));
}

#[test]
fn issue28_ac_ar_05_a_random_record_decodes_only_its_chunk() {
    let r = ArrayRecordReader::open(sample2("arrayrecord/tokens_npy_g8_uncompressed_2blocks.array_record"))
        .unwrap();
    assert_eq!((r.file_bytes(), r.chunk_count(), r.footer_offset()), (196_608, 13, 76_014));
    assert_eq!(r.chunks_decoded(), 0);
    let rec = r.record(57).unwrap();
    assert_eq!(r.chunks_decoded(), 1);
    // Chunk 7 holds records 56..64: another record of it is served without a read.
    let again = r.record(56).unwrap();
    assert_eq!(r.chunks_decoded(), 1);
    assert_ne!(rec, again);
    // Chunk 10 crosses the block boundary at 65,536 (its block header is skipped).
    let index = r.chunk_index();
    assert!(index[10].0 < 65_536 && index[11].0 > 65_536, "{index:?}");
    let data = open2("arrayrecord/tokens_npy_g8_uncompressed_2blocks.array_record", &opts());
    let docs = documents(&data);
    for i in 80..88 {
        let rec = r.record(i).unwrap();
        // .npy v1 of int32 ids: the ids are the record's last 4 * len bytes.
        let ids: Vec<i64> = rec[rec.len() - 4 * docs[i as usize].len()..]
            .chunks_exact(4)
            .map(|c| i64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]])))
            .collect();
        assert_eq!(ids, docs[i as usize], "record {i}");
    }
    assert_eq!(r.chunks_decoded(), 2);
}

#[test]
fn issue28_ac_ar_06_transposed_chunks_are_refused_on_open() {
    let path = sample2("arrayrecord/tokens_npy_transposed.array_record");
    let e = ArrayRecordReader::open(&path).unwrap_err();
    assert!(
        matches!(e.foreign_error(), Some(ForeignError::UnsupportedChunkType { chunk_type: 't', .. })),
        "{e}"
    );
    let e = ForeignDataset::open(&path, &opts()).unwrap_err();
    assert!(
        matches!(e.foreign_error(), Some(ForeignError::UnsupportedChunkType { chunk_type: 't', .. })),
        "{e}"
    );
}

#[test]
fn issue28_grain_data_source_order_over_files() {
    // Grain's ArrayRecordDataSource concatenates the files in the order given.
    let a = ArrayRecordReader::open(sample2("arrayrecord/raw_bytes_default.array_record")).unwrap();
    let b = ArrayRecordReader::open(sample2("arrayrecord/tokens_npy_g4_snappy.array_record")).unwrap();
    let want_last = b.record(99).unwrap();
    let source = ArrayRecordSource::new(vec![a, b]);
    assert_eq!(source.len(), 200);
    assert_eq!(source.locate(100), Some((1, 0)));
    assert_eq!(source.get(17).unwrap(), b"document 17: w188 w690 w43 w406 w613 w300");
    assert_eq!(source.get(199).unwrap(), want_last);
    assert!(matches!(
        source.get(200),
        Err(guideloom_loader::LoaderError::IndexOutOfRange { index: 200, len: 200 })
    ));
}

#[test]
fn issue28_detected_and_opened_through_open_tokens() {
    let path = sample2("arrayrecord/tokens_npy_g4_snappy.array_record");
    assert_eq!(guideloom_interop::detect(&path).unwrap(), ForeignFormat::ArrayRecord);
    let data = open_tokens(path.to_str().unwrap(), &OpenOptions::default()).unwrap();
    assert_eq!((data.elements(), data.foreign().unwrap().document_count()), (2_726, Some(100)));
    let doc17 = data.foreign().unwrap().document(17).unwrap();
    assert_eq!(
        data.reader().read(Window::new(doc17.offset, 8)).unwrap(),
        vec![32092, 37579, 34938, 406, 47472, 4288, 46228, 26713]
    );
    let windows = data.windows::<i32>(64, 64).unwrap();
    assert_eq!(windows.len(), 2_726 / 64);
}

#[test]
fn issue28_malformed_array_records_give_their_errors() {
    for name in [
        "footer_offset_past_eof",
        "bad_postscript_magic",
        "not_block_aligned",
        "chunk_data_hash",
        "num_records_mismatch",
        "float_npy_record",
    ] {
        let rel = format!("arrayrecord/{name}.array_record");
        let case = case_error(&rel);
        let path = sample2(&format!("malformed/{rel}"));
        let e = ForeignDataset::open(&path, &opts()).unwrap_err();
        assert_case(&e, &format!("{name}.array_record"), &case);
    }
}
