//! Hugging Face `datasets` directories (`save_to_disk`, Arrow IPC streams) and their acceptance
//! cases AC-HFA-01..08 (issue 28, formats2.md §8.1), exactly as `datasets` 5.2.0 read them
//! (`expected.json`), and the malformed cases of §8.6.

use guideloom_interop::{
    detect, ForeignDataset, ForeignDetails, ForeignError, ForeignFormat, ForeignOptions,
};

use crate::common::{assert_foreign, copy_dir};
use crate::tables::{check_expected, document, expected, sample2, HF_ARROW_SAMPLES};

fn hf() -> ForeignOptions {
    ForeignOptions::new().format(ForeignFormat::HfArrow)
}

fn open(rel: &str, options: &ForeignOptions) -> ForeignDataset {
    ForeignDataset::open(sample2(rel), options).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// AC-HFA-01..05 and 07: each sample's counts, documents and token stream, detected and named.
#[test]
fn issue28_hf_arrow_samples_read_as_datasets_reads_them() {
    let want = expected("hf_arrow");
    for name in HF_ARROW_SAMPLES {
        let rel = format!("hf_arrow/{name}");
        assert_eq!(detect(&sample2(&rel)).unwrap(), ForeignFormat::HfArrow, "{name}");
        for options in [hf(), ForeignOptions::new()] {
            let data = open(&rel, &options);
            assert_eq!(data.format(), ForeignFormat::HfArrow);
            check_expected(&data, &want[name]);
        }
    }
}

/// AC-HFA-01 in full: two shards in `state.json` order, doc 5 empty, docs 17 and 399, and the
/// details `inspect` prints.
#[test]
fn issue28_hf_arrow_two_shards_in_state_json_order() {
    let data = open("hf_arrow/tokens_i32_2shards", &hf());
    assert_eq!((data.document_count(), data.elements()), (Some(400), 9689));
    let names: Vec<String> = data.files().iter().map(|f| f.path.display().to_string()).collect();
    assert_eq!(names, ["data-00000-of-00002.arrow", "data-00001-of-00002.arrow"]);
    assert_eq!(document(&data, 5), Vec::<i64>::new());
    assert_eq!(document(&data, 17)[..8], [14868, 16250, 18913, 41848, 35917, 22429, 39810, 31348]);
    assert_eq!(document(&data, 399)[..8], [936, 29459, 19939, 41929, 637, 6464, 10728, 4285]);
    match data.details() {
        ForeignDetails::Table { column, column_type, rows, groups, .. } => {
            assert_eq!((column.as_str(), column_type.as_str()), ("input_ids", "list<int32>"));
            assert_eq!((rows.as_slice(), groups.as_slice()), (&[200, 200][..], &[1, 1][..]));
        }
        other => panic!("{other:?}"),
    }
    let d = data.describe();
    assert_eq!(d["format"], "arrow");
    assert_eq!(d["record_batches"], serde_json::json!([1, 1]));
    // The dtypes of the other samples.
    for (name, ty) in [
        ("tokens_i64", "list<int64>"),
        ("tokens_large_list", "large_list<int32>"),
        ("tokens_u16", "list<uint16>"),
    ] {
        let d = open(&format!("hf_arrow/{name}"), &hf()).describe();
        assert_eq!(d["column"]["type"], ty, "{name}");
    }
}

/// AC-HFA-08: document 250 read alone equals document 250 of the full read, and lies in the
/// second shard (its window starts past the first shard's tokens, so only that file is read).
#[test]
fn issue28_hf_arrow_random_document_reads_one_shard() {
    let data = open("hf_arrow/tokens_i32_2shards", &hf());
    let all = crate::common::documents_with(&data, guideloom_storage::ReadOptions::default());
    assert_eq!(document(&data, 250), all[250]);
    let w = data.document(250).unwrap();
    let first = data.files()[0].elements;
    assert!(w.offset >= first && w.offset + w.len <= data.elements(), "{w:?}");
}

/// AC-HFA-06: a `DatasetDict` reads the split named; without one, `SplitRequired`.
#[test]
fn issue28_hf_arrow_dataset_dict_needs_a_split() {
    let want = expected("hf_arrow");
    for split in ["train", "validation"] {
        let data = open("hf_arrow/dataset_dict", &hf().split(split));
        check_expected(&data, &want["dataset_dict"][split]);
    }
    assert_eq!(document(&open("hf_arrow/dataset_dict", &hf().split("validation")), 17), [2395, 21109, 24976]);
    let e = ForeignDataset::open(sample2("hf_arrow/dataset_dict"), &hf()).unwrap_err();
    assert_foreign(
        &e,
        "dataset_dict.json",
        &ForeignError::SplitRequired { splits: vec!["train".into(), "validation".into()] },
    );
    let e = ForeignDataset::open(sample2("hf_arrow/dataset_dict"), &hf().split("test")).unwrap_err();
    assert!(matches!(e.foreign_error(), Some(ForeignError::SplitRequired { .. })), "{e}");
}

/// A single `.arrow` file and a glob read the same rows as the directory; a column chosen by
/// name that is not a token list is refused.
#[test]
fn issue28_hf_arrow_files_and_globs() {
    let dir = open("hf_arrow/tokens_i32_2shards", &hf());
    let glob = open("hf_arrow/tokens_i32_2shards/data-*.arrow", &hf());
    assert_eq!(glob.documents(), dir.documents());
    let one = open("hf_arrow/tokens_i32_2shards/data-00001-of-00002.arrow", &ForeignOptions::new());
    assert_eq!(one.format(), ForeignFormat::HfArrow);
    assert_eq!(one.document_count(), Some(200));
    assert_eq!(document(&one, 50), document(&dir, 250));
    let e = ForeignDataset::open(sample2("hf_arrow/tokens_i64"), &hf().column("text")).unwrap_err();
    assert_foreign(
        &e,
        "data-00000-of-00001.arrow",
        &ForeignError::UnsupportedTokenType { found: "string".into() },
    );
}

/// Every `malformed/hf_arrow` case of `cases.json` gives its error, naming the file.
#[test]
fn issue28_hf_arrow_malformed_cases_give_their_errors() {
    use ForeignError as E;
    let shard = "data-00000-of-00001.arrow";
    let cases = [
        ("truncated_stream", shard, E::TruncatedStream { batch: 0, need: 5536, offset: 488, present: 2768 }),
        ("decreasing_offsets", shard, E::InvalidOffsets { column: "input_ids".into(), row: 2, a: 7, b: 5 }),
        ("missing_shard", "state.json", E::FileNotFound { name: "data-00001-of-00002.arrow".into() }),
        ("nested_list", shard, E::UnsupportedTokenType { found: "list<list<int32>>".into() }),
        ("float_tokens", shard, E::UnsupportedTokenType { found: "list<float>".into() }),
        (
            "huge_metadata_length",
            shard,
            E::MessageOutOfRange { message: 1, offset: 232, metadata: 2147483632, file: 6032 },
        ),
        (
            "missing_column",
            shard,
            E::ColumnNotFound { column: "input_ids".into(), have: vec!["text".into(), "tokens".into()] },
        ),
    ];
    let listed: serde_json::Value =
        serde_json::from_slice(&std::fs::read(sample2("malformed/cases.json")).unwrap()).unwrap();
    let n = listed.as_object().unwrap().keys().filter(|k| k.starts_with("hf_arrow/")).count();
    assert_eq!(n, cases.len(), "every hf_arrow case of cases.json is here");
    for (case, file, want) in cases {
        let dir = sample2(&format!("malformed/hf_arrow/{case}"));
        assert_eq!(detect(&dir).unwrap(), ForeignFormat::HfArrow, "{case}");
        let e = ForeignDataset::open(&dir, &hf()).map(|d| d.describe()).unwrap_err();
        assert_foreign(&e, file, &want);
    }
}

/// Issue 33 (mutant of `Tables::add`'s `n > 0`): a record batch without tokens (here a batch
/// holding only document 5, which is empty) adds a document and no segment: the stream's
/// segments are the non-empty batches', each with its tokens, and every document reads as
/// from the one-batch file. The file is rewritten by arrow-rs's own IPC writer in three batches
/// (rows 0..5, 5..6, 6..200) with the sample's schema.
#[test]
fn issue33_foreign_a_record_batch_without_tokens_adds_no_segment() {
    use arrow_array::Array;
    let src = sample2("hf_arrow/tokens_i64");
    let tmp = copy_dir(&src);
    let file = tmp.path().join("data-00000-of-00001.arrow");
    let reader = arrow_ipc::reader::StreamReader::try_new(std::fs::File::open(&file).unwrap(), None).unwrap();
    let schema = reader.schema();
    let batches: Vec<_> = reader.map(Result::unwrap).collect();
    assert_eq!(batches.len(), 1, "the sample is one batch");
    let whole = &batches[0];
    assert_eq!(whole.num_rows(), 200);
    let ids = whole.column_by_name("input_ids").unwrap();
    assert_eq!(ids.slice(5, 1).as_any().downcast_ref::<arrow_array::ListArray>().unwrap().value(0).len(), 0);
    let mut out = Vec::new();
    let mut w = arrow_ipc::writer::StreamWriter::try_new(&mut out, &schema).unwrap();
    for (offset, len) in [(0, 5), (5, 1), (6, 194)] {
        w.write(&whole.slice(offset, len)).unwrap();
    }
    w.finish().unwrap();
    drop(w);
    std::fs::write(&file, out).unwrap();

    let original = open("hf_arrow/tokens_i64", &hf());
    let split = ForeignDataset::open(tmp.path(), &hf()).unwrap();
    assert_eq!(split.documents(), original.documents());
    let segments = split.layout().segments;
    let five = original.documents().unwrap()[5];
    assert_eq!(segments.iter().map(|s| s.elements).collect::<Vec<_>>(), [five, 5388 - five]);
    assert_eq!(split.files()[0].elements, 5388);
    assert_eq!(document(&split, 4), document(&original, 4));
    assert_eq!(document(&split, 6), document(&original, 6));
    assert!(document(&split, 5).is_empty());
}

/// Issue 33 (mutant of the `DatasetDict` test `has("dataset_dict.json") && !has("state.json")`
/// -> `||`): a directory of Arrow stream files without `state.json` is read as the files,
/// sorted (the two-shard sample without its `state.json`: the same 400 documents); a
/// directory with both `state.json` and a `dataset_dict.json` is one dataset, read by its
/// `state.json`, not a dictionary asking for a split.
#[test]
fn issue33_foreign_hf_arrow_a_directory_is_a_dictionary_only_without_state_json() {
    let bare = copy_dir(&sample2("hf_arrow/tokens_i32_2shards"));
    std::fs::remove_file(bare.path().join("state.json")).unwrap();
    let both = copy_dir(&sample2("hf_arrow/tokens_i32_2shards"));
    std::fs::write(both.path().join("dataset_dict.json"), r#"{"splits": ["train"]}"#).unwrap();
    for dir in [&bare, &both] {
        let data = ForeignDataset::open(dir.path(), &hf()).unwrap();
        assert_eq!((data.document_count(), data.elements()), (Some(400), 9689));
        assert_eq!(document(&data, 17)[..4], [14868, 16250, 18913, 41848]);
    }
}

/// Issue 33 (mutants of `state.json`'s name check `contains('/') || == ".." || == "."`, either
/// `||` -> `&&`): a data file must be a plain name in the directory: a name with a `/` is
/// refused even when the file exists there (a shard moved into `sub/`), and so are `.` and `..`;
/// each refusal names `state.json` and the name.
#[test]
fn issue33_foreign_hf_arrow_state_json_names_plain_files_only() {
    for name in ["sub/data-00000-of-00002.arrow", ".", ".."] {
        let tmp = copy_dir(&sample2("hf_arrow/tokens_i32_2shards"));
        std::fs::create_dir(tmp.path().join("sub")).unwrap();
        std::fs::copy(
            tmp.path().join("data-00000-of-00002.arrow"),
            tmp.path().join("sub/data-00000-of-00002.arrow"),
        )
        .unwrap();
        crate::common::edit_json(&tmp.path().join("state.json"), |state| {
            state["_data_files"][0]["filename"] = name.into();
        });
        let e = ForeignDataset::open(tmp.path(), &hf()).unwrap_err();
        assert_foreign(&e, "state.json", &ForeignError::UnsafeShardPath { path: name.into() });
    }
}
