//! litdata optimized chunks (`src/layouts/litdata/`): `TokensLoader` blocks and `PyTreeLoader`
//! items as documents.

use guideloom_formats::{IntTokenFormat, Primitive};
use guideloom_interop::{ForeignDataset, ForeignDetails, ForeignError, ForeignFormat, ForeignOptions};
use guideloom_storage::ReadOptions;

use crate::common::{assert_foreign, check, copy_dir, documents_with, edit_json, open, sample, EOT};

#[test]
fn litdata_tokens_loader_blocks_documents_and_tensors() {
    let d = open("litdata/tokens_u16", &ForeignOptions::new());
    assert_eq!((d.format(), d.dtype()), (ForeignFormat::Litdata, Primitive::U16));
    let chunk0: &[&[i64]] = &[&[101, 102, 103, EOT], &[201, 202, EOT]];
    let all = [101, 102, 103, EOT, 201, 202, EOT, 301, 302, 303, 304, EOT, 401, EOT];
    check(&d, &all, None);
    assert_eq!(
        documents_with(&d, ReadOptions::default())[..2],
        chunk0.iter().map(|c| c.to_vec()).collect::<Vec<_>>()[..]
    );
    let r = d.reader(IntTokenFormat::new(Primitive::U16).unwrap(), ReadOptions::default()).unwrap();
    let blocks = r.read_many(&d.file_windows(3, 3).unwrap()).unwrap();
    assert_eq!(blocks, [vec![101, 102, 103], vec![EOT, 201, 202], vec![301, 302, 303], vec![304, EOT, 401]]);
    assert_eq!(r.read_many(&d.file_windows(7, 7).unwrap()).unwrap(), [all[..7].to_vec(), all[7..].to_vec()]);
    assert!(d.file_windows(8, 8).unwrap().is_empty());

    let d = open("litdata/tokens_i32_tensor", &ForeignOptions::new());
    assert_eq!(d.dtype(), Primitive::I32);
    let r = d.reader(IntTokenFormat::new(Primitive::I32).unwrap(), ReadOptions::default()).unwrap();
    let blocks = r.read_many(&d.file_windows(4, 4).unwrap()).unwrap();
    assert_eq!(blocks, [vec![EOT, 101, 102, 103], vec![EOT, 201, 202, EOT], vec![301, 302, 303, 304]]);
}

#[test]
fn litdata_pytree_items_are_documents() {
    let d = open("litdata/pytree", &ForeignOptions::new());
    let docs: &[&[i64]] = &[&[101, 102, 103], &[201, 202], &[301, 302, 303, 304], &[401]];
    check(&d, &docs.concat(), Some(docs));
    assert!(
        matches!(d.details(), ForeignDetails::Litdata { item_loader, items } if item_loader == "PyTreeLoader" && items == &[2, 2])
    );
}

/// Issue 33 (mutant of the `TokensLoader` check `formats.len() != 1 || !raw`): a
/// `TokensLoader` dataset is one headerless array per item. The sample opens; the same chunks
/// described as a `numpy` leaf (one leaf with a header) or as a headerless array beside an
/// `int` (two leaves) are refused naming the formats.
#[test]
fn issue33_foreign_litdata_a_tokens_loader_holds_one_headerless_array() {
    let src = sample("litdata/tokens_u16");
    for (formats, refused) in [
        (serde_json::json!(["no_header_numpy:5"]), None),
        (serde_json::json!(["numpy"]), Some(r#"["numpy"]"#)),
        (serde_json::json!(["no_header_numpy:5", "int"]), Some(r#"["no_header_numpy:5", "int"]"#)),
    ] {
        let tmp = copy_dir(&src);
        edit_json(&tmp.path().join("index.json"), |index| index["config"]["data_format"] = formats);
        let r = ForeignDataset::open(tmp.path(), &ForeignOptions::new().format(ForeignFormat::Litdata));
        match refused {
            None => assert_eq!(r.unwrap().dtype(), Primitive::U16),
            Some(f) => assert_foreign(
                &r.unwrap_err(),
                "index.json",
                &ForeignError::TokenColumn {
                    reason: format!("a TokensLoader dataset of {f}, not one headerless array"),
                },
            ),
        }
    }
}
