//! nanoGPT and llm.c / modded-nanogpt token files (`src/layouts/raw.rs`): raw tokens with
//! their dtype named, llm.c's headers, globs as one stream, documents from a delimiter.

use guideloom_formats::{IntTokenFormat, Primitive};
use guideloom_interop::{
    DocumentDelimiter, ForeignDataset, ForeignDetails, ForeignError, ForeignFormat, ForeignOptions,
    InteropError,
};
use guideloom_storage::Window;

use crate::common::{assert_foreign, backends, check, open, opts, sample, EOT};

#[test]
fn nanogpt_train_and_val_as_raw_u16_with_documents_after_eot() {
    let options =
        opts(ForeignFormat::NanoGpt).dtype(Primitive::U16).delimiter(DocumentDelimiter::Ends(50256));
    let d = open("nanogpt/train.bin", &options);
    assert_eq!(d.elements(), 12);
    let docs: &[&[i64]] = &[&[101, 102, 103, EOT], &[201, 202, EOT], &[301, 302, 303, 304, EOT]];
    check(&d, &docs.concat(), Some(docs));
    check(&open("nanogpt/val.bin", &options), &[401, EOT], Some(&[&[401, EOT]]));
    let d = open("nanogpt_shakespeare_char/train.bin", &opts(ForeignFormat::NanoGpt).dtype(Primitive::U16));
    check(&d, &[7, 5, 1, 2, 3, 1, 5, 6, 1, 4, 5, 7, 1, 7, 5, 1, 2], None);
    assert_eq!(d.documents(), None);
    check(
        &open("nanogpt_shakespeare_char/val.bin", &opts(ForeignFormat::NanoGpt).dtype(Primitive::U16)),
        &[3, 0],
        None,
    );
    // The dtype is never guessed.
    let e = ForeignDataset::open(sample("nanogpt/train.bin"), &opts(ForeignFormat::NanoGpt)).unwrap_err();
    assert!(matches!(e.foreign_error(), Some(ForeignError::MissingOption { option: "dtype", .. })));
    let e = ForeignDataset::open(sample("nanogpt/train.bin"), &ForeignOptions::new()).unwrap_err();
    assert!(
        matches!(&e, InteropError::Dataset { format: None, .. })
            && matches!(e.foreign_error(), Some(ForeignError::UnknownFormat { .. })),
        "{e}"
    );
    // A size that is not a whole number of elements.
    let e = ForeignDataset::open(
        sample("llmc/tiny_val_000000.bin"),
        &opts(ForeignFormat::NanoGpt).dtype(Primitive::U32),
    )
    .unwrap_err();
    assert_foreign(
        &e,
        "tiny_val_000000.bin",
        &ForeignError::NotMultipleOfItemSize { bytes: 1038, itemsize: 4 },
    );
}

#[test]
fn llmc_v1_v7_documents_before_the_delimiter() {
    let options = ForeignOptions::new().delimiter(DocumentDelimiter::Starts(50256));
    let d = open("llmc/tiny_val_000000.bin", &options);
    assert_eq!((d.format(), d.dtype()), (ForeignFormat::Llmc, Primitive::U16));
    assert!(matches!(d.details(), ForeignDetails::Llmc { versions } if versions == &[1]));
    check(&d, &[EOT, 101, 102, 103, EOT, 201, 202], Some(&[&[EOT, 101, 102, 103], &[EOT, 201, 202]]));
    check(
        &open("llmc/tiny_train_000001.bin", &ForeignOptions::new()),
        &[EOT, 301, 302, 303, 304, EOT, 401],
        None,
    );
    let d = open("llmc/tiny_llama3_val_000000.bin", &ForeignOptions::new());
    assert_eq!(d.dtype(), Primitive::U32);
    assert!(matches!(d.details(), ForeignDetails::Llmc { versions } if versions == &[7]));
    check(&d, &[128000, 101, 102, 103, 128000, 201, 202], None);
    // AC-MOD-01: modded-nanogpt's copies, BOS-aligned.
    let d = open("modded_nanogpt/fineweb_val_000000.bin", &options);
    assert_eq!(d.documents(), Some(&[0, 4, 7][..]));
}

#[test]
fn llmc_glob_is_one_stream_and_windows_span_the_shards() {
    // AC 4: a glob of two shards (modded-nanogpt's copies of llm.c's gpt-2 shards), in
    // byte-wise name order.
    let d = ForeignDataset::open(sample("modded_nanogpt/fineweb_*.bin"), &opts(ForeignFormat::Llmc)).unwrap();
    let names: Vec<String> = d.files().iter().map(|f| f.path.display().to_string()).collect();
    assert_eq!(names, ["fineweb_train_000001.bin", "fineweb_val_000000.bin"]);
    check(&d, &[EOT, 301, 302, 303, 304, EOT, 401, EOT, 101, 102, 103, EOT, 201, 202], None);
    for (name, options) in backends() {
        let r = d.reader(IntTokenFormat::new(Primitive::U16).unwrap(), options).unwrap();
        assert_eq!(r.read(Window::new(5, 4)).unwrap(), [EOT, 401, EOT, 101], "{name}");
    }
    // llm.c's per-shard batches (B = 1, T = 2: windows of 3 tokens every 2, inside each shard).
    assert_eq!(
        d.file_windows(3, 2).unwrap(),
        [
            Window::new(0, 3),
            Window::new(2, 3),
            Window::new(4, 3),
            Window::new(7, 3),
            Window::new(9, 3),
            Window::new(11, 3)
        ]
    );
    // A glob mixing u16 and u32 shards is refused.
    let e = ForeignDataset::open(sample("llmc/tiny_*.bin"), &opts(ForeignFormat::Llmc)).unwrap_err();
    assert!(matches!(e.foreign_error(), Some(ForeignError::MixedDTypes { .. })), "{e}");
    // Detected without naming the format.
    let d = ForeignDataset::open(sample("modded_nanogpt/fineweb_*.bin"), &ForeignOptions::new()).unwrap();
    assert_eq!((d.format(), d.elements()), (ForeignFormat::Llmc, 14));
}

#[test]
fn llmc_legacy_raw_int32_needs_the_dtype() {
    let d = open("llmc_legacy/tiny_shakespeare_val.bin", &opts(ForeignFormat::Llmc).dtype(Primitive::I32));
    assert!(matches!(d.details(), ForeignDetails::Llmc { versions } if versions == &[0]));
    check(&d, &[EOT, 101, 102, 103, EOT, 201, 202, EOT, 301, 302, 303, 304, EOT, 401], None);
    let d = open("llmc_legacy/tiny_shakespeare_val.bin", &opts(ForeignFormat::NanoGpt).dtype(Primitive::I32));
    assert_eq!(d.elements(), 14);
    let e = ForeignDataset::open(sample("llmc_legacy/tiny_shakespeare_val.bin"), &ForeignOptions::new())
        .unwrap_err();
    assert!(matches!(e.foreign_error(), Some(ForeignError::UnknownFormat { .. })), "{e}");
}

/// Issue 33 (mutants of the header's `head.len() < 8`): an llm.c file with its magic and fewer
/// than 8 bytes cannot hold its version (truncated); with 8, its version is read and checked
/// first (a wrong one refused as such, the right one then refused as a truncated header); the
/// header is 1024 bytes (`bytes < 1024` on both sides).
#[test]
fn issue33_foreign_llmc_a_short_header_at_its_boundaries() {
    let dir = tempfile::tempdir().unwrap();
    let magic = 20_240_520i32.to_le_bytes();
    let cases: [(&str, Vec<u8>, ForeignError); 3] = [
        (
            "seven.bin",
            [&magic[..], &[1, 0, 0]].concat(),
            ForeignError::TruncatedHeader { need: 1024, have: 7 },
        ),
        (
            "eight.bin",
            [&magic[..], &9i32.to_le_bytes()].concat(),
            ForeignError::UnsupportedVersion { field: "version", found: 9 },
        ),
        (
            "eight_v1.bin",
            [&magic[..], &1i32.to_le_bytes()].concat(),
            ForeignError::TruncatedHeader { need: 1024, have: 8 },
        ),
    ];
    for (name, bytes, want) in cases {
        std::fs::write(dir.path().join(name), bytes).unwrap();
        let e = ForeignDataset::open(dir.path().join(name), &opts(ForeignFormat::Llmc)).unwrap_err();
        assert_foreign(&e, name, &want);
    }
    // The whole 1024-byte header with no tokens opens; one byte short of it does not.
    let mut header = [&magic[..], &1i32.to_le_bytes(), &0i32.to_le_bytes()].concat();
    header.resize(1024, 0);
    std::fs::write(dir.path().join("empty.bin"), &header).unwrap();
    let d = ForeignDataset::open(dir.path().join("empty.bin"), &opts(ForeignFormat::Llmc)).unwrap();
    assert_eq!((d.elements(), d.dtype()), (0, Primitive::U16));
    // A dtype given must be the header's (issue 33: `d != file_dtype`): uint16 opens, uint32 is
    // refused naming both.
    let given = |p| ForeignDataset::open(dir.path().join("empty.bin"), &opts(ForeignFormat::Llmc).dtype(p));
    assert_eq!(given(Primitive::U16).unwrap().dtype(), Primitive::U16);
    assert_foreign(
        &given(Primitive::U32).unwrap_err(),
        "empty.bin",
        &ForeignError::MixedDTypes { expected: "<u2".into(), found: "<u4".into() },
    );
    std::fs::write(dir.path().join("short.bin"), &header[..1023]).unwrap();
    let e = ForeignDataset::open(dir.path().join("short.bin"), &opts(ForeignFormat::Llmc)).unwrap_err();
    assert_foreign(&e, "short.bin", &ForeignError::TruncatedHeader { need: 1024, have: 1023 });
}
