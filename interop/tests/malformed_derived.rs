//! Issue 33, item 4: a malformed sample for each validation of the issue-28 readers that no
//! sample of `samples2/malformed` produces, each made here from a valid sample by changing one
//! field (so it exercises exactly that check) and asserted by variant, with the file it names
//! and the numbers it carries: the Arrow IPC message checks (`MessageDecode`) and the list
//! offsets' end (`ListOffsetOutOfRange`, with the case exactly on the bound read whole), the
//! Parquet footer length (`FooterLengthOutOfRange`, on both sides of the bound) and page
//! decoding (`PageDecode`), riegeli's chunk bounds (`ChunkDecode`, the headers' HighwayHash
//! recomputed so only the size is wrong), and gzip streams cut short (`DecompressionFailed`,
//! TFRecord and WebDataset).

use std::path::{Path, PathBuf};

use guideloom_interop::{ForeignDataset, ForeignError, ForeignFormat, ForeignOptions, InteropError};

/// `samples2/REL`.
fn sample2(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/samples2").join(rel)
}

/// A copy of the sample directory or file `rel` in a new temporary directory; the copy's path.
fn copy(rel: &str) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let src = sample2(rel);
    let dst = tmp.path().join(src.file_name().unwrap());
    if src.is_dir() {
        std::fs::create_dir(&dst).unwrap();
        for e in std::fs::read_dir(&src).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), dst.join(e.file_name())).unwrap();
        }
    } else {
        std::fs::copy(&src, &dst).unwrap();
    }
    (tmp, dst)
}

/// Replaces the bytes of `path` by `f` of them.
fn edit(path: &Path, f: impl FnOnce(&mut Vec<u8>)) {
    let mut b = std::fs::read(path).unwrap();
    f(&mut b);
    std::fs::write(path, b).unwrap();
}

/// The error opening `path` as `format`, which must be about file `file`: its foreign error.
fn refused(path: &Path, format: ForeignFormat, file: &str) -> ForeignError {
    match ForeignDataset::open(path, &ForeignOptions::new().format(format)) {
        Err(InteropError::Dataset { path: named, error, .. }) => {
            assert_eq!(named.file_name().and_then(|n| n.to_str()), Some(file), "{error}: names the file");
            *error
        }
        Err(other) => panic!("{}: expected a dataset error naming {file}, got {other}", path.display()),
        Ok(_) => panic!("{}: opened", path.display()),
    }
}

/// The document lengths of the dataset at `path`.
#[cfg(feature = "arrow")]
fn lengths(path: &Path, format: ForeignFormat) -> Vec<u64> {
    let data = ForeignDataset::open(path, &ForeignOptions::new().format(format)).unwrap();
    data.document_windows().iter().map(|w| w.len).collect()
}

#[cfg(feature = "arrow")]
const ARROW_FILE: &str = "data-00000-of-00001.arrow";

#[cfg(feature = "arrow")]
#[test]
fn issue33_arrow_a_message_without_its_continuation_marker_and_an_empty_stream_are_message_decode_errors() {
    let (_tmp, dir) = copy("hf_arrow/tokens_u16");
    edit(&dir.join(ARROW_FILE), |b| b[..4].copy_from_slice(&[0, 0, 0, 0]));
    assert_eq!(
        refused(&dir, ForeignFormat::HfArrow, ARROW_FILE),
        ForeignError::MessageDecode {
            message: 0,
            offset: 0,
            reason: "no continuation marker (found 00000000; pre-0.15 streams are not read)".into()
        }
    );
    edit(&dir.join(ARROW_FILE), Vec::clear);
    assert_eq!(
        refused(&dir, ForeignFormat::HfArrow, ARROW_FILE),
        ForeignError::MessageDecode {
            message: 0,
            offset: 0,
            reason: "no schema message (an empty file)".into()
        }
    );
}

/// The 4-row sample of `malformed/hf_arrow/decreasing_offsets` (9 token values, its list
/// offsets `0 3 7 5 9` at byte 520 of the stream) with the offsets set to `0 3 5 7 LAST`:
/// `LAST` = 9, the number of values, reads rows of 3, 2, 2 and 2 tokens; 10 is one past the
/// values.
#[cfg(feature = "arrow")]
#[test]
fn issue33_arrow_list_offsets_ending_past_the_values_are_refused_one_past_the_bound_not_on_it() {
    let (_tmp, dir) = copy("malformed/hf_arrow/decreasing_offsets");
    let set = |last: i32| {
        edit(&dir.join(ARROW_FILE), |b| {
            let at = 520;
            let old: Vec<i32> = (0..5)
                .map(|i| i32::from_le_bytes(b[at + 4 * i..at + 4 * i + 4].try_into().unwrap()))
                .collect();
            assert!(
                old == [0, 3, 7, 5, 9] || old[..4] == [0, 3, 5, 7],
                "the offsets are where they were: {old:?}"
            );
            for (i, o) in [0, 3, 5, 7, last].iter().enumerate() {
                b[at + 4 * i..at + 4 * i + 4].copy_from_slice(&o.to_le_bytes());
            }
        })
    };
    set(9);
    assert_eq!(lengths(&dir, ForeignFormat::HfArrow), [3, 2, 2, 2]);
    set(10);
    assert_eq!(
        refused(&dir, ForeignFormat::HfArrow, ARROW_FILE),
        ForeignError::ListOffsetOutOfRange { column: "input_ids".into(), row: 3, offset: 10, values: 9 }
    );
}

#[cfg(feature = "parquet")]
const PARQUET: &str = "parquet/tokens_u16_uncompressed_v2.parquet";

/// The footer length (the 4 bytes before the closing `PAR1`) set to `size - 12` (the most the
/// file can hold: it then covers the file from byte 4, so the footer does not decode) and to
/// `size - 11` (one past: refused before anything is decoded).
#[cfg(feature = "parquet")]
#[test]
fn issue33_parquet_a_footer_length_past_the_file_is_refused_one_past_the_bound() {
    let (_tmp, path) = copy(PARQUET);
    let file = path.file_name().unwrap().to_str().unwrap().to_string();
    let size = std::fs::metadata(&path).unwrap().len();
    let set = |footer: u64| {
        edit(&path, |b| {
            let at = b.len() - 8;
            b[at..at + 4].copy_from_slice(&(footer as u32).to_le_bytes());
        })
    };
    set(size - 12);
    assert!(
        matches!(refused(&path, ForeignFormat::Parquet, &file), ForeignError::FooterDecode { .. }),
        "a footer of the whole file is decoded (and fails), not refused by its length"
    );
    set(size - 11);
    assert_eq!(
        refused(&path, ForeignFormat::Parquet, &file),
        ForeignError::FooterLengthOutOfRange { footer: size - 11, file: size }
    );
}

/// The gzip-compressed sample with the gzip magic of its first page's data zeroed (the
/// footer, the page header and so every range intact): the page does not inflate.
#[cfg(feature = "parquet")]
#[test]
fn issue33_parquet_a_damaged_page_is_a_page_decode_error_naming_the_row_group_and_column() {
    let (_tmp, path) = copy("parquet/tokens_i64_large_list_gzip.parquet");
    let file = path.file_name().unwrap().to_str().unwrap().to_string();
    let bytes = std::fs::read(&path).unwrap();
    let meta = parquet::file::metadata::ParquetMetaDataReader::new()
        .parse_and_finish(&bytes::Bytes::from(bytes.clone()))
        .unwrap();
    let group = meta.row_group(0);
    let chunk = group
        .columns()
        .iter()
        .find(|c| c.column_path().string().starts_with("input_ids"))
        .expect("the token column");
    let (start, len) = chunk.byte_range();
    let range = &bytes[start as usize..(start + len) as usize];
    let magic = range.windows(3).position(|w| w == [0x1f, 0x8b, 0x08]).expect("a gzip member in the chunk");
    let at = start as usize + magic;
    edit(&path, |b| b[at..at + 2].copy_from_slice(&[0, 0]));
    match refused(&path, ForeignFormat::Parquet, &file) {
        ForeignError::PageDecode { row_group: 0, column, reason } => {
            assert_eq!(column, chunk.column_path().string());
            assert!(!reason.is_empty());
        }
        other => panic!("expected PageDecode of row group 0, got {other:?}"),
    }
}

/// riegeli's HighwayHash (key `"Riegeli/records\n"` twice), from the riegeli specification.
#[cfg(feature = "arrayrecord")]
fn riegeli_hash(data: &[u8]) -> u64 {
    use highway::{HighwayHash, HighwayHasher, Key};
    HighwayHasher::new(Key([
        0x2f69_6c65_6765_6952,
        0x0a73_6472_6f63_6572,
        0x2f69_6c65_6765_6952,
        0x0a73_6472_6f63_6572,
    ]))
    .hash64(data)
}

/// The first records chunk (at byte 64: block header 0..24, signature chunk 24..64) with its
/// `data_size` set past the file, its header hash recomputed so the header itself is valid.
#[cfg(feature = "arrayrecord")]
#[test]
fn issue33_arrayrecord_a_chunk_whose_data_runs_past_the_file_is_a_chunk_decode_error() {
    let (_tmp, path) = copy("arrayrecord/tokens_npy_default.array_record");
    let file = path.file_name().unwrap().to_str().unwrap().to_string();
    let size = std::fs::metadata(&path).unwrap().len();
    edit(&path, |b| {
        let h = &mut b[64..104];
        assert_eq!(
            u64::from_le_bytes(h[..8].try_into().unwrap()),
            riegeli_hash(&h[8..]),
            "a chunk header at 64"
        );
        h[8..16].copy_from_slice(&size.to_le_bytes());
        let sum = riegeli_hash(&h[8..]);
        h[..8].copy_from_slice(&sum.to_le_bytes());
    });
    match refused(&path, ForeignFormat::ArrayRecord, &file) {
        ForeignError::ChunkDecode { chunk: 64, reason } => {
            assert!(reason.starts_with(&format!("data_size {size} runs past ")), "{reason}")
        }
        other => panic!("expected ChunkDecode of the chunk at 64, got {other:?}"),
    }
}

/// `rel` (a gzip-compressed file) cut to half its length: the stream ends inside the deflate
/// data.
#[cfg(any(feature = "tfrecord", feature = "webdataset"))]
fn cut_in_half(rel: &str) -> (tempfile::TempDir, PathBuf) {
    let (tmp, path) = copy(rel);
    edit(&path, |b| b.truncate(b.len() / 2));
    (tmp, path)
}

#[cfg(feature = "tfrecord")]
#[test]
fn issue33_tfrecord_a_gzip_stream_cut_short_is_a_decompression_error() {
    let (_tmp, path) = cut_in_half("tfrecord/examples.tfrecord.gz");
    match refused(&path, ForeignFormat::TfRecord, "examples.tfrecord.gz") {
        ForeignError::DecompressionFailed { reason } => assert!(!reason.is_empty()),
        other => panic!("expected DecompressionFailed, got {other:?}"),
    }
}

#[cfg(feature = "webdataset")]
#[test]
fn issue33_webdataset_a_gzip_stream_cut_short_is_a_decompression_error() {
    let (_tmp, path) = cut_in_half("webdataset/train_gz-000000.tar.gz");
    match refused(&path, ForeignFormat::WebDataset, "train_gz-000000.tar.gz") {
        ForeignError::DecompressionFailed { reason } => assert!(!reason.is_empty()),
        other => panic!("expected DecompressionFailed, got {other:?}"),
    }
}
