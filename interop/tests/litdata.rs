//! litdata optimized chunks (`src/layouts/litdata/`): `TokensLoader` blocks and `PyTreeLoader`
//! items as documents.

use guideloom_formats::{IntTokenFormat, Primitive};
use guideloom_interop::{
    ForeignDataset, ForeignDetails, ForeignError, ForeignFormat, ForeignOptions, InteropError,
};
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

// ---- Chunks built byte by byte (issue 33: the boundaries of every check on a chunk) ----

/// A chunk as litdata's `BinaryWriter._create_chunk` writes it: u32 item count, `u32[n + 1]`
/// absolute item offsets (the first just past the table, the last the chunk's size), then the
/// items back to back.
fn chunk(items: &[Vec<u8>]) -> Vec<u8> {
    let n = items.len() as u32;
    let mut at = 4 * (n + 2);
    let mut out = n.to_le_bytes().to_vec();
    out.extend(at.to_le_bytes());
    for item in items {
        at += item.len() as u32;
        out.extend(at.to_le_bytes());
    }
    items.iter().for_each(|item| out.extend(item));
    out
}

/// A `PyTreeLoader` item (`BinaryWriter.serialize`): one u32 byte size per leaf, then the leaves.
fn item(leaves: &[Vec<u8>]) -> Vec<u8> {
    let mut out: Vec<u8> = leaves.iter().flat_map(|l| (l.len() as u32).to_le_bytes()).collect();
    leaves.iter().for_each(|l| out.extend(l));
    out
}

/// A `numpy` or `tensor` leaf as `NumpySerializer.serialize` / `TensorSerializer.serialize`
/// write it: u32 dtype index (litdata's `constants.py` tables), u32 ndim, u32 per dim, then the
/// values.
fn array_leaf(dtype_index: u32, shape: &[u32], values: &[u8]) -> Vec<u8> {
    let mut out = dtype_index.to_le_bytes().to_vec();
    out.extend((shape.len() as u32).to_le_bytes());
    shape.iter().for_each(|d| out.extend(d.to_le_bytes()));
    out.extend(values);
    out
}

/// Little-endian bytes of u16 tokens.
fn u16s(tokens: &[u16]) -> Vec<u8> {
    tokens.iter().flat_map(|t| t.to_le_bytes()).collect()
}

/// An `int` leaf as `IntegerSerializer` writes it (8 bytes).
fn int_leaf(v: i64) -> Vec<u8> {
    v.to_le_bytes().to_vec()
}

/// A copy of the sample `src` (`litdata/pytree` or `litdata/tokens_u16`) whose chunks are
/// `chunks` (`chunk-0-<i>.bin`, each listed with its item count when it has one and no `dim`)
/// and whose leaves are `formats`.
fn dataset(src: &str, formats: serde_json::Value, chunks: &[Vec<u8>]) -> tempfile::TempDir {
    let tmp = copy_dir(&sample(src));
    let mut entries = Vec::new();
    for (i, c) in chunks.iter().enumerate() {
        let name = format!("chunk-0-{i}.bin");
        std::fs::write(tmp.path().join(&name), c).unwrap();
        let items = c.get(..4).map(|b| u32::from_le_bytes(b.try_into().unwrap()));
        entries.push(
            serde_json::json!({"chunk_bytes": c.len(), "chunk_size": items, "dim": null, "filename": name}),
        );
    }
    edit_json(&tmp.path().join("index.json"), |index| {
        index["chunks"] = serde_json::Value::Array(entries);
        index["config"]["data_format"] = formats;
    });
    tmp
}

fn open_litdata(dir: &tempfile::TempDir, options: &ForeignOptions) -> Result<ForeignDataset, InteropError> {
    ForeignDataset::open(dir.path(), &options.clone().format(ForeignFormat::Litdata))
}

/// The documents of `dir` (opened as litdata), or the error.
fn documents(dir: &tempfile::TempDir, options: &ForeignOptions) -> Result<Vec<Vec<i64>>, InteropError> {
    open_litdata(dir, options).map(|d| documents_with(&d, ReadOptions::default()))
}

fn layout(file: &str, sample: u64, reason: &str) -> impl Fn(InteropError) {
    let (file, reason) = (file.to_string(), reason.to_string());
    move |e| assert_foreign(&e, &file, &ForeignError::SampleLayout { sample, reason: reason.clone() })
}

/// Issue 33 (mutants of the chunk size checks `size < 4` and `size < header`, `<` -> `<=` and
/// `==`): a chunk shorter than its count is refused needing 4 bytes; one of exactly 4 bytes
/// (0 items) needs its 8-byte table; a table of exactly its size (8 bytes, 0 items) opens
/// empty; two items in 12 bytes need 16.
#[test]
fn issue33_foreign_litdata_a_chunk_holds_its_count_and_its_offset_table() {
    let formats = serde_json::json!(["no_header_numpy:5"]);
    for (bytes, need) in
        [(vec![0u8; 3], 4), (vec![0u8; 4], 8), ([2u32, 16, 16].map(u32::to_le_bytes).concat(), 16)]
    {
        let have = bytes.len() as u64;
        let tmp = dataset("litdata/tokens_u16", formats.clone(), &[bytes]);
        let e = open_litdata(&tmp, &ForeignOptions::new()).unwrap_err();
        assert_foreign(&e, "chunk-0-0.bin", &ForeignError::TruncatedHeader { need, have });
    }
    let tmp = dataset("litdata/tokens_u16", formats, &[chunk(&[])]);
    let d = open_litdata(&tmp, &ForeignOptions::new()).unwrap();
    assert_eq!((d.elements(), d.documents()), (0, Some(&[0][..])));
}

/// Issue 33 (mutants of the `TokensLoader` item error's global sample `global + k` and
/// `global += n`, and of a chunk's elements `end - chunk_start`): an item of odd bytes (u16
/// tokens) is named by its index over the whole dataset: item 1 of the second chunk is sample
/// 3; the same item in the first chunk is sample 1. Each chunk counts its own tokens.
#[test]
fn issue33_foreign_litdata_a_tokens_item_error_names_the_global_sample() {
    let formats = serde_json::json!(["no_header_numpy:5"]);
    let good = chunk(&[u16s(&[1, 2]), u16s(&[3])]);
    let bad = chunk(&[u16s(&[4]), vec![5, 0, 6]]);
    let reason = "3 bytes are not whole 2-byte tokens";
    let tmp = dataset("litdata/tokens_u16", formats.clone(), &[good.clone(), bad.clone()]);
    layout("chunk-0-1.bin", 3, reason)(open_litdata(&tmp, &ForeignOptions::new()).unwrap_err());
    let tmp = dataset("litdata/tokens_u16", formats.clone(), &[bad, good.clone()]);
    layout("chunk-0-0.bin", 1, reason)(open_litdata(&tmp, &ForeignOptions::new()).unwrap_err());
    let tmp = dataset("litdata/tokens_u16", formats, &[good.clone(), good]);
    assert_eq!(documents(&tmp, &ForeignOptions::new()).unwrap(), [vec![1, 2], vec![3], vec![1, 2], vec![3]]);
    // Each chunk's own tokens (3 each) and bytes (a 16-byte table and 6 bytes of tokens).
    let d = open_litdata(&tmp, &ForeignOptions::new()).unwrap();
    let files: Vec<(u64, u64)> = d.files().iter().map(|f| (f.bytes, f.elements)).collect();
    assert_eq!(files, [(22, 3), (22, 3)]);
}

/// Issue 33 (mutants of the `PyTreeLoader` item checks: `len < 4 * leaves` -> `<=`, `==`,
/// `4 + leaves`, `4 / leaves`; the global sample `global + k` -> `global * k`): an item of two
/// leaves needs their 8 bytes of sizes: 7 bytes are refused naming the sample over the whole
/// dataset (item 1 of the second chunk, after two: sample 3); exactly 8 bytes (both leaves
/// empty) is an empty document.
#[test]
fn issue33_foreign_litdata_a_pytree_item_holds_its_leaf_sizes() {
    let formats = serde_json::json!(["int", "no_header_numpy:5"]);
    let good = chunk(&[item(&[int_leaf(7), u16s(&[11, 12])]), item(&[int_leaf(8), u16s(&[13])])]);
    let seven = chunk(&[item(&[int_leaf(9), u16s(&[14])]), vec![0; 7]]);
    let tmp = dataset("litdata/pytree", formats.clone(), &[good.clone(), seven]);
    layout("chunk-0-1.bin", 3, "7 bytes cannot hold 2 leaf sizes")(
        open_litdata(&tmp, &ForeignOptions::new()).unwrap_err(),
    );
    let eight = chunk(&[item(&[int_leaf(9), u16s(&[14])]), vec![0; 8]]);
    let tmp = dataset("litdata/pytree", formats, &[good, eight]);
    assert_eq!(documents(&tmp, &ForeignOptions::new()).unwrap(), [vec![11, 12], vec![13], vec![14], vec![]]);
}

/// Issue 33 (mutants of the headered array leaf: the dtype table chosen by `kind == Numpy`,
/// the header's size `8 + 4 * ndim`, the values `leaf_len - skip`): `numpy` and `tensor` leaves
/// as litdata's serializers write them, of 1-D and 2-D arrays, read as their values. The same
/// dtype index means another dtype in the other table: numpy's 5 is uint16 and torch's 5
/// complex64 (refused); torch's 20 is uint16 and numpy's 20 is no entry.
#[test]
fn issue33_foreign_litdata_numpy_and_tensor_leaves_read_their_values() {
    let items = |index: u32| {
        chunk(&[
            item(&[int_leaf(1), array_leaf(index, &[3], &u16s(&[101, 102, 103]))]),
            item(&[int_leaf(2), array_leaf(index, &[2, 2], &u16s(&[201, 202, 203, 204]))]),
            item(&[int_leaf(3), array_leaf(index, &[0], &[])]),
        ])
    };
    let want = [vec![101, 102, 103], vec![201, 202, 203, 204], vec![]];
    for (leaf, index) in [("numpy", 5), ("tensor", 20)] {
        let tmp = dataset("litdata/pytree", serde_json::json!(["int", leaf]), &[items(index)]);
        let d = open_litdata(&tmp, &ForeignOptions::new()).unwrap();
        assert_eq!((d.dtype(), d.elements()), (Primitive::U16, 7), "{leaf}");
        assert_eq!(documents_with(&d, ReadOptions::default()), want, "{leaf}");
    }
    for (leaf, index, dtype) in [("tensor", 5, "complex64"), ("numpy", 20, "numpy dtype index 20")] {
        let tmp = dataset("litdata/pytree", serde_json::json!(["int", leaf]), &[items(index)]);
        let e = open_litdata(&tmp, &ForeignOptions::new()).unwrap_err();
        assert_foreign(&e, "chunk-0-0.bin", &ForeignError::UnsupportedTokenDType { dtype: dtype.into() });
    }
}

/// Issue 33 (mutants of the array leaf's bounds: `leaf_len < 8` -> `<=`, `==`, `>`;
/// `skip > leaf_len` -> `>=`, `==`, `<`): a leaf of 7 bytes cannot hold its dtype and ndim; one
/// of exactly 8 (a 0-d header) passes that check; a 1-D header of exactly its leaf's 12 bytes
/// (shape `[0]`) is an empty array; a 2-D header of 16 bytes in a leaf of 15 is refused. New
/// check: the shape's product is the values' count (a shape of 3 in 2 values is refused, and
/// so is the 0-d header, a shape of 1 value in 0 bytes).
#[test]
fn issue33_foreign_litdata_an_array_leaf_holds_its_header_and_its_shape() {
    let formats = serde_json::json!(["int", "numpy"]);
    let one = |leaf: Vec<u8>| {
        let tmp = dataset("litdata/pytree", formats.clone(), &[chunk(&[item(&[int_leaf(1), leaf])])]);
        documents(&tmp, &ForeignOptions::new())
    };
    assert_eq!(one(array_leaf(5, &[0], &[])).unwrap(), [Vec::<i64>::new()]);
    assert_eq!(one(array_leaf(5, &[2], &u16s(&[7, 8]))).unwrap(), [vec![7, 8]]);
    // Past four dims the reader reads the shape a second time: the same rule.
    assert_eq!(one(array_leaf(5, &[1, 1, 1, 1, 2], &u16s(&[7, 8]))).unwrap(), [vec![7, 8]]);
    layout("chunk-0-0.bin", 0, "a shape of 3 values in 4 value bytes")(
        one(array_leaf(5, &[1, 1, 1, 1, 3], &u16s(&[7, 8]))).unwrap_err(),
    );
    let refused = [
        (array_leaf(5, &[], &[])[..7].to_vec(), "an array leaf of 7 bytes"),
        (array_leaf(5, &[], &[]), "a shape of 1 values in 0 value bytes"),
        (array_leaf(5, &[1, 1], &[])[..15].to_vec(), "an array header of 16 bytes in a leaf of 15"),
        (array_leaf(5, &[3], &u16s(&[7, 8])), "a shape of 3 values in 4 value bytes"),
        (
            array_leaf(5, &[1 << 31, 1 << 31, 1 << 31], &u16s(&[7])),
            "a shape past 2^64 values in 2 value bytes",
        ),
    ];
    for (leaf, reason) in refused {
        layout("chunk-0-0.bin", 0, reason)(one(leaf).unwrap_err());
    }
}

/// Issue 33 (mutants of the array leaves' dtype agreement, the guard `d != p` -> `true`,
/// `false`, `==`): every array leaf must have the dtype of the first (or the one the options
/// name); the same dtype throughout opens.
#[test]
fn issue33_foreign_litdata_array_leaves_agree_on_one_dtype() {
    let formats = serde_json::json!(["int", "numpy"]);
    let u16_item = item(&[int_leaf(1), array_leaf(5, &[1], &u16s(&[9]))]);
    let i32_item = item(&[int_leaf(2), array_leaf(2, &[1], &7i32.to_le_bytes())]);
    let tmp = dataset("litdata/pytree", formats.clone(), &[chunk(&[u16_item.clone(), u16_item.clone()])]);
    assert_eq!(documents(&tmp, &ForeignOptions::new()).unwrap(), [vec![9], vec![9]]);
    assert_eq!(documents(&tmp, &ForeignOptions::new().dtype(Primitive::U16)).unwrap(), [vec![9], vec![9]]);
    let e = open_litdata(&tmp, &ForeignOptions::new().dtype(Primitive::I32)).unwrap_err();
    assert_foreign(
        &e,
        "chunk-0-0.bin",
        &ForeignError::MixedDTypes { expected: "<i4".into(), found: "<u2".into() },
    );
    let tmp = dataset("litdata/pytree", formats, &[chunk(&[u16_item]), chunk(&[i32_item])]);
    let e = open_litdata(&tmp, &ForeignOptions::new()).unwrap_err();
    assert_foreign(
        &e,
        "chunk-0-1.bin",
        &ForeignError::MixedDTypes { expected: "<u2".into(), found: "<i4".into() },
    );
}
