//! Parquet token tables (Hugging Face Hub files and pyarrow files) and their acceptance cases
//! AC-HFP-01/02 and AC-PQ-01..04 (issue 28, formats2.md §8.2), exactly as pyarrow 26.0.1 read
//! them (`expected.json`), and the malformed cases of §8.6.

use guideloom_interop::{
    detect, ForeignDataset, ForeignDetails, ForeignError, ForeignFormat, ForeignOptions,
};
use guideloom_testkit::hostile::with_alloc_cap;

use crate::common::{assert_foreign, documents_with};
use crate::tables::{check_expected, document, expected, sample2};

fn pq() -> ForeignOptions {
    ForeignOptions::new().format(ForeignFormat::Parquet)
}

fn open(rel: &str, options: &ForeignOptions) -> ForeignDataset {
    ForeignDataset::open(sample2(rel), options).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn row_groups(data: &ForeignDataset) -> Vec<u64> {
    match data.details() {
        ForeignDetails::Table { groups, .. } => groups.clone(),
        other => panic!("{other:?}"),
    }
}

/// AC-PQ-01..04: each pyarrow file's counts, documents and token stream, detected and named,
/// with its row groups.
#[test]
fn issue28_parquet_samples_read_as_pyarrow_reads_them() {
    let want = expected("parquet");
    for (name, groups) in [
        ("tokens_zstd_pageindex.parquet", 4u64),
        ("tokens_snappy_nopageindex.parquet", 3),
        ("tokens_u16_uncompressed_v2.parquet", 4),
        ("tokens_i64_large_list_gzip.parquet", 1),
    ] {
        let rel = format!("parquet/{name}");
        assert_eq!(detect(&sample2(&rel)).unwrap(), ForeignFormat::Parquet, "{name}");
        for options in [pq(), ForeignOptions::new()] {
            let data = open(&rel, &options);
            check_expected(&data, &want[name]);
            assert_eq!(row_groups(&data), [groups], "{name}");
            assert_eq!(want[name]["row_groups"].as_array().unwrap().len() as u64, groups, "{name}");
        }
    }
    let d = open("parquet/tokens_i64_large_list_gzip.parquet", &pq());
    assert_eq!(document(&d, 1), [24320]);
    let d = open("parquet/tokens_zstd_pageindex.parquet", &pq());
    assert_eq!(document(&d, 399)[..8], [18773, 31804, 38548, 15978, 23774, 32085, 1652, 39049]);
    assert_eq!(d.describe()["column"]["type"], "list<int32>");
    let d = open("parquet/tokens_u16_uncompressed_v2.parquet", &pq());
    assert_eq!(d.describe()["column"]["type"], "list<uint16>");
}

/// AC-HFP-01/02: the Hub's shards of a split, by glob or as the directory's files, in name
/// order; the test split's documents are the train split's first 120.
#[test]
fn issue28_hf_hub_parquet_splits() {
    let want = expected("hf_parquet");
    let train = open("hf_parquet/data/train-*.parquet", &pq());
    check_expected(&train, &want["train"]);
    assert_eq!(row_groups(&train), [3, 3]);
    assert_eq!(document(&train, 160)[..8], [48545, 40556, 19754, 15665, 38131, 33199, 43185, 27673]);
    let test = open("hf_parquet/data/test-00000-of-00001.parquet", &ForeignOptions::new());
    check_expected(&test, &want["test"]);
    let (a, b) = (documents_with(&train, Default::default()), documents_with(&test, Default::default()));
    assert_eq!(a[..120], b[..]);
    // The directory holds both splits: all three files, in name order.
    let all = open("hf_parquet/data", &ForeignOptions::new());
    assert_eq!(all.format(), ForeignFormat::Parquet);
    assert_eq!(all.document_count(), Some(420));
}

/// A random document (AC-PQ-01's document 250, in row group 2 of 4) read alone equals the
/// full read's, through the page index; the same from the file without one.
#[test]
fn issue28_parquet_random_documents_equal_the_sequential_read() {
    for name in ["tokens_zstd_pageindex.parquet", "tokens_snappy_nopageindex.parquet"] {
        let data = open(&format!("parquet/{name}"), &pq());
        let all = documents_with(&data, Default::default());
        for i in [250u64, 0, 17, 299, 101] {
            assert_eq!(document(&data, i), all[i as usize], "{name} document {i}");
        }
        // The units of decoding: a page each with the offset index (2 KiB pages), a row
        // group each without.
        let blocks = data.describe()["decode_blocks"][0].as_u64().unwrap();
        if name.contains("nopageindex") {
            assert_eq!(blocks, 3, "{name}");
        } else {
            assert_eq!(blocks, 13, "{name}: one per data page");
        }
    }
}

/// Every `malformed/parquet` case of `cases.json` gives its error, naming the file; the zstd
/// bomb is refused without allocating anything near the 64 MiB its frame holds.
#[test]
fn issue28_parquet_malformed_cases_give_their_errors() {
    use ForeignError as E;
    let path = "input_ids.list.element".to_string();
    let cases = [
        ("bad_magic.parquet", E::BadMagic { found: "footer: PAR0".into() }),
        ("truncated_tail.parquet", E::BadMagic { found: "footer: 41414141".into() }),
        (
            "column_chunk_past_footer.parquet",
            E::ColumnChunkOutOfRange { row_group: 1, column: path.clone(), end: 4105, data_end: 4041 },
        ),
        ("string_tokens.parquet", E::UnsupportedTokenType { found: "string".into() }),
        (
            "zstd_bomb.parquet",
            E::DecompressedSizeMismatch {
                row_group: 0,
                column: path.clone(),
                page: 0,
                declared: 32031,
                found: "frame holds more".into(),
            },
        ),
    ];
    let listed: serde_json::Value =
        serde_json::from_slice(&std::fs::read(sample2("malformed/cases.json")).unwrap()).unwrap();
    let n = listed.as_object().unwrap().keys().filter(|k| k.starts_with("parquet/")).count();
    assert_eq!(n, cases.len(), "every parquet case of cases.json is here");
    for (case, want) in cases {
        let file = sample2(&format!("malformed/parquet/{case}"));
        let (e, largest) =
            with_alloc_cap(8 << 20, || ForeignDataset::open(&file, &pq()).map(|d| d.elements()));
        let e = e.unwrap_err();
        assert_foreign(&e, case, &want);
        assert!(largest < 8 << 20, "{case}: a {largest}-byte allocation");
    }
}

/// Issue 33 (mutants of `Tables::add`'s dtype check and element sum): a directory of Parquet
/// files is one table only when every file's token column has the first file's dtype. Two
/// int32 files give each its own element count (pyarrow's: 7197 and 10084 tokens); an int64
/// file before an int32 one is refused naming the second file and both dtypes.
#[test]
fn issue33_foreign_table_files_share_one_dtype_and_count_their_own_tokens() {
    let same = tempfile::tempdir().unwrap();
    for f in ["tokens_snappy_nopageindex.parquet", "tokens_zstd_pageindex.parquet"] {
        std::fs::copy(sample2(&format!("parquet/{f}")), same.path().join(f)).unwrap();
    }
    let d = ForeignDataset::open(same.path(), &pq()).unwrap();
    assert_eq!(d.files().iter().map(|f| f.elements).collect::<Vec<_>>(), [7197, 10084]);
    assert_eq!((d.elements(), d.document_count()), (7197 + 10084, Some(300 + 400)));
    let mixed = tempfile::tempdir().unwrap();
    for f in ["tokens_i64_large_list_gzip.parquet", "tokens_zstd_pageindex.parquet"] {
        std::fs::copy(sample2(&format!("parquet/{f}")), mixed.path().join(f)).unwrap();
    }
    let e = ForeignDataset::open(mixed.path(), &pq()).unwrap_err();
    assert_foreign(
        &e,
        "tokens_zstd_pageindex.parquet",
        &ForeignError::MixedDTypes { expected: "<i8".into(), found: "<i4".into() },
    );
}
