//! Foreign layouts read in place (issue 13): every sample of `tests/data/interop/` (written
//! by the projects' own writers; see its README) reads to the exact tokens, documents and
//! dtypes, under every I/O backend; every malformed sample gives its typed error naming the
//! file; windows cross files and sequences exactly; a 4 GiB+ Megatron `.bin` reads back with
//! u64 offsets.

use std::path::{Path, PathBuf};

use guideloom_formats::{IntTokenFormat, Primitive, TokenFormat};
use guideloom_storage::foreign::{
    DocumentDelimiter, ForeignDataset, ForeignDetails, ForeignError, ForeignFormat, ForeignOptions,
};
use guideloom_storage::{ReadOptions, StorageError, Window};

use crate::common::backends;

/// A sample file or directory.
pub(crate) fn sample(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/interop").join(rel)
}

fn open(rel: &str, options: &ForeignOptions) -> ForeignDataset {
    ForeignDataset::open(sample(rel), options).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn opts(format: ForeignFormat) -> ForeignOptions {
    ForeignOptions::new().format(format)
}

/// All tokens, read in one window with `options`.
fn tokens_with(data: &ForeignDataset, options: ReadOptions) -> Vec<i64> {
    let r = data.reader(IntTokenFormat::new(data.dtype()).unwrap(), options).unwrap();
    assert_eq!(r.len(), data.elements());
    r.read(Window::new(0, r.len())).unwrap()
}

/// The documents' tokens, read in one batch with `options`.
fn documents_with(data: &ForeignDataset, options: ReadOptions) -> Vec<Vec<i64>> {
    let r = data.reader(IntTokenFormat::new(data.dtype()).unwrap(), options).unwrap();
    r.read_many(&data.document_windows()).unwrap()
}

/// Checks tokens (and documents, when given) under every backend, one read each.
fn check(data: &ForeignDataset, tokens: &[i64], documents: Option<&[&[i64]]>) {
    for (name, options) in backends() {
        assert_eq!(
            tokens_with(data, options.clone()),
            tokens,
            "{}: tokens with {name}",
            data.path().display()
        );
        if let Some(docs) = documents {
            let want: Vec<Vec<i64>> = docs.iter().map(|d| d.to_vec()).collect();
            assert_eq!(
                documents_with(data, options),
                want,
                "{}: documents with {name}",
                data.path().display()
            );
        }
    }
}

const EOT: i64 = 50256;

// ---- Megatron (AC-MEG-01..05, 11, 12) ----

#[test]
fn megatron_gpt2_sequences_documents_and_pointers() {
    let d = open("megatron/gpt2_text_document", &opts(ForeignFormat::Megatron));
    assert_eq!((d.dtype(), d.elements()), (Primitive::U16, 14));
    let m = d.megatron().unwrap();
    assert_eq!(m.sequence_lengths(), [4, 3, 5, 2]);
    assert_eq!(m.sequence_pointers(), [0, 8, 14, 24]);
    assert_eq!(m.document_indices(), [0, 1, 2, 3, 4]);
    assert_eq!(m.dtype_code(), 8);
    let seqs: &[&[i64]] = &[&[101, 102, 103, EOT], &[201, 202, EOT], &[301, 302, 303, 304, EOT], &[401, EOT]];
    check(&d, &seqs.concat(), Some(seqs));
    let r = d.reader(TokenFormat::<u16>::new(), ReadOptions::default()).unwrap();
    assert_eq!(r.read_many(&m.sequence_windows()).unwrap()[2], [301, 302, 303, 304, 50256]);
    // AC-MEG-05: get(seq=2, offset=1, length=3), and a range past the sequence.
    assert_eq!(r.read(m.sequence_range(2, 1, Some(3)).unwrap()).unwrap(), [302, 303, 304]);
    assert!(matches!(m.sequence_range(2, 3, Some(3)), Err(StorageError::OutOfRange { total: 5, .. })));
    assert!(matches!(m.sequence_range(4, 0, None), Err(StorageError::OutOfRange { total: 4, .. })));
    // The prefix may also be named by either file.
    assert_eq!(open("megatron/gpt2_text_document.idx", &ForeignOptions::new()).elements(), 14);
}

#[test]
fn megatron_llama3_int32() {
    let d = open("megatron/llama3_text_document", &ForeignOptions::new());
    assert_eq!((d.format(), d.dtype()), (ForeignFormat::Megatron, Primitive::I32));
    assert_eq!(d.megatron().unwrap().sequence_pointers(), [0, 20]);
    let seqs: &[&[i64]] = &[&[128000, 101, 102, 103, 128001], &[128000, 201, 202, 128001]];
    check(&d, &seqs.concat(), Some(seqs));
}

#[test]
fn megatron_other_and_sentences_with_an_empty_document() {
    let d = open("megatron/other_text_document", &ForeignOptions::new());
    let seqs: &[&[i64]] = &[&[501, 502, 503, 504, 505, EOT], &[601, 602, EOT]];
    check(&d, &seqs.concat(), Some(seqs));

    let d = open("megatron/sentences_text_sentence", &ForeignOptions::new());
    let m = d.megatron().unwrap();
    assert_eq!(m.document_indices(), [0, 2, 2, 3]);
    let r = d.reader(IntTokenFormat::new(Primitive::U16).unwrap(), ReadOptions::default()).unwrap();
    assert_eq!(r.read_many(&m.sequence_windows()).unwrap(), [vec![11, 12], vec![13, 14, 15], vec![21]]);
    check(&d, &[11, 12, 13, 14, 15, 21], Some(&[&[11, 12, 13, 14, 15], &[], &[21]]));
    assert_eq!(d.documents(), Some(&[0, 5, 5, 6][..]));
}

#[test]
fn megatron_multimodal_modes_or_trailing_bytes() {
    let d = open("megatron/multimodal_text_document", &ForeignOptions::new().multimodal(true));
    assert_eq!(d.megatron().unwrap().modes(), Some(&[0, 1, 2][..]));
    let r = d.reader(IntTokenFormat::new(Primitive::U16).unwrap(), ReadOptions::default()).unwrap();
    let seqs = r.read_many(&d.megatron().unwrap().sequence_windows()).unwrap();
    assert_eq!(seqs, [vec![7, 8], vec![9], vec![10, 11, 12]]);
    let e = ForeignDataset::open(sample("megatron/multimodal_text_document"), &ForeignOptions::new())
        .unwrap_err();
    assert_foreign(&e, "multimodal_text_document.idx", &ForeignError::TrailingBytes { count: 3 });
}

#[test]
fn megatron_repair_pointers_rebuilds_the_negative_one() {
    let options = opts(ForeignFormat::Megatron).repair_pointers(true);
    let d = open("malformed/megatron/negative_pointer", &options);
    assert_eq!(d.megatron().unwrap().repaired_pointers(), 1);
    assert_eq!(d.megatron().unwrap().sequence_pointers(), [0, 8, 14, 24]);
    let seqs: &[&[i64]] = &[&[101, 102, 103, EOT], &[201, 202, EOT], &[301, 302, 303, 304, EOT], &[401, EOT]];
    check(&d, &seqs.concat(), Some(seqs));
    assert_eq!(open("megatron/gpt2_text_document", &options).megatron().unwrap().repaired_pointers(), 0);
}

#[test]
fn megatron_legacy_tntidx_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut idx = b"TNTIDX\0\0".to_vec();
    idx.extend_from_slice(&[0u8; 64]);
    std::fs::write(dir.path().join("old.idx"), idx).unwrap();
    std::fs::write(dir.path().join("old.bin"), b"").unwrap();
    let e = ForeignDataset::open(dir.path().join("old"), &opts(ForeignFormat::Megatron)).unwrap_err();
    assert_foreign(&e, "old.idx", &ForeignError::UnsupportedLegacyFormat { magic: "TNTIDX".into() });
}

#[test]
fn megatron_windows_span_sequences_exactly() {
    // AC 4: windows that start in one sequence and end in the next (and the next).
    let d = open("megatron/gpt2_text_document", &ForeignOptions::new());
    for (name, options) in backends() {
        let r = d.reader(IntTokenFormat::new(Primitive::U16).unwrap(), options).unwrap();
        let got = r.read_many(&[Window::new(2, 4), Window::new(6, 6), Window::new(11, 3)]).unwrap();
        assert_eq!(
            got,
            [vec![103, EOT, 201, 202], vec![EOT, 301, 302, 303, 304, EOT], vec![EOT, 401, EOT]],
            "{name}"
        );
    }
}

// ---- nanoGPT, llm.c, modded-nanogpt (AC-NANO, AC-LLMC, AC-MOD) ----

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
        matches!(&e, StorageError::Foreign { format: None, .. })
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

// ---- MDS (AC-MDS-01..07) ----

const CORPUS_EOT: [&[i64]; 4] =
    [&[101, 102, 103, EOT], &[201, 202, EOT], &[301, 302, 303, 304, EOT], &[401, EOT]];

#[test]
fn mds_llm_foundry_ndarray_int32_and_bytes_int64() {
    let samples: &[&[i64]] = &[&[101, 102, 103, EOT], &[201, 202, EOT, 301], &[302, 303, 304, EOT]];
    let d = open("mds/llmfoundry_ndarray_int32", &ForeignOptions::new());
    assert_eq!((d.format(), d.dtype(), d.document_count()), (ForeignFormat::Mds, Primitive::I32, Some(3)));
    check(&d, &samples.concat(), Some(samples));
    let d = open("mds/llmfoundry_bytes_int64", &ForeignOptions::new());
    assert_eq!(d.dtype(), Primitive::I64);
    check(&d, &samples.concat(), Some(samples));
    // The same bytes read with the wrong dtype (AC-MDS-02 documents the misconfiguration).
    let d = open("mds/llmfoundry_bytes_int64", &ForeignOptions::new().dtype(Primitive::U16));
    let docs = documents_with(&d, ReadOptions::default());
    assert_eq!(docs.iter().map(Vec::len).collect::<Vec<_>>(), [16, 16, 16]);
    assert_eq!(docs[0][..8], [101, 0, 0, 0, 102, 0, 0, 0]);
    let d = open("mds/llmfoundry_bytes_int64", &ForeignOptions::new().dtype(Primitive::I32));
    assert!(documents_with(&d, ReadOptions::default()).iter().all(|s| s.len() == 8));
}

#[test]
fn mds_zstd_shards_with_hashes_verified() {
    let d = open("mds/tokens_zstd_sha1_xxh3", &ForeignOptions::new().verify_hashes(true));
    assert_eq!(d.dtype(), Primitive::U16);
    assert!(
        matches!(d.details(), ForeignDetails::Mds { samples, column } if samples == &[2, 2] && column.0 == "tokens")
    );
    check(&d, &CORPUS_EOT.concat(), Some(&CORPUS_EOT));
    for (name, options) in backends() {
        let r = d.reader(IntTokenFormat::new(Primitive::U16).unwrap(), options).unwrap();
        assert_eq!(r.read(Window::new(5, 4)).unwrap(), [202, EOT, 301, 302], "{name}: across the two shards");
    }
}

#[test]
fn mds_empty_first_shard_merged_index_and_encodings() {
    let d = open("mds/empty_first_shard", &ForeignOptions::new());
    assert!(matches!(d.details(), ForeignDetails::Mds { samples, .. } if samples == &[0, 1, 1]));
    check(&d, &[101, 102, 103, EOT, 201, 202, EOT], Some(&CORPUS_EOT[..2]));
    let d = open("mds/merged", &ForeignOptions::new());
    let names: Vec<String> = d.files().iter().map(|f| f.path.display().to_string()).collect();
    assert_eq!(names, ["part0/shard.00000.mds", "part1/shard.00000.mds"]);
    let samples: &[&[i64]] = &[&[101, 102, 103, EOT], &[201, 202, EOT, 301], &[302, 303, 304, EOT]];
    check(&d, &samples.concat(), Some(samples));
    // AC-MDS-06: an untyped ndarray column as tokens: row 0 is uint16, row 1 float32.
    let e = ForeignDataset::open(sample("mds/encodings"), &ForeignOptions::new().column("c_nd")).unwrap_err();
    assert_foreign(&e, "shard.00000.mds", &ForeignError::UnsupportedTokenDType { dtype: "float32".into() });
    let e =
        ForeignDataset::open(sample("mds/encodings"), &ForeignOptions::new().column("e_str")).unwrap_err();
    assert!(matches!(e.foreign_error(), Some(ForeignError::TokenColumn { .. })), "{e}");
}

#[test]
fn mds_pickle_is_refused_before_any_shard_is_opened() {
    let e = ForeignDataset::open(sample("mds/unsafe_pkl"), &ForeignOptions::new()).unwrap_err();
    assert_foreign(
        &e,
        "index.json",
        &ForeignError::UnsafeEncoding { column: "obj".into(), encoding: "pkl".into() },
    );
}

// ---- litdata (AC-LIT-01..03) ----

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

// ---- OLMo / Dolma (AC-OLMO-01..04) ----

#[test]
fn olmo_token_files_with_their_metadata() {
    let options = opts(ForeignFormat::Olmo).dtype(Primitive::U16);
    let d = open("olmo/part-0-00000.npy", &options);
    let docs: &[&[i64]] =
        &[&[101, 102, 103, 50279], &[201, 202, 50279], &[301, 302, 303, 304, 50279], &[401, 50279]];
    check(&d, &docs.concat(), Some(docs));
    assert_eq!(d.documents(), Some(&[0, 4, 7, 12, 14][..]));
    // The same boundaries from an EOS scan when the metadata is not there.
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(sample("olmo/part-0-00000.npy"), dir.path().join("part-0-00000.npy")).unwrap();
    let scanned = ForeignDataset::open(
        dir.path().join("part-0-00000.npy"),
        &options.clone().delimiter(DocumentDelimiter::Ends(50279)),
    )
    .unwrap();
    assert_eq!(scanned.documents(), d.documents());
    // OLMo-core's FSL instances of L = 4 (the tail [401, 50279] dropped).
    let r = d.reader(IntTokenFormat::new(Primitive::U16).unwrap(), ReadOptions::default()).unwrap();
    assert_eq!(
        r.read_many(&d.file_windows(4, 4).unwrap()).unwrap(),
        [vec![101, 102, 103, 50279], vec![201, 202, 50279, 301], vec![302, 303, 304, 50279]]
    );
    let d = open("olmo/part-1-00000.npy", &opts(ForeignFormat::Olmo).dtype(Primitive::U32));
    check(
        &d,
        &[101, 102, 103, 100257, 201, 202, 100257],
        Some(&[&[101, 102, 103, 100257], &[201, 202, 100257]]),
    );
}

#[test]
fn olmo_refuses_npy_and_metadata_past_the_tokens() {
    let e = ForeignDataset::open(sample("npy/v1_u2.npy"), &opts(ForeignFormat::Olmo).dtype(Primitive::U16))
        .unwrap_err();
    assert_foreign(&e, "v1_u2.npy", &ForeignError::LooksLikeNpy);
    let e = ForeignDataset::open(sample("olmo/part-0-00000.npy"), &opts(ForeignFormat::Npy)).unwrap_err();
    assert!(matches!(e.foreign_error(), Some(ForeignError::BadMagic { .. })), "{e}");
    // AC-OLMO-04: the last row edited to end at 15 of 14 tokens.
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(sample("olmo/part-0-00000.npy"), dir.path().join("p.npy")).unwrap();
    let csv = "0,4,doc0,toy.jsonl.gz,0\n4,7,doc1,toy.jsonl.gz,1\n7,12,doc2,toy.jsonl.gz,2\n12,15,doc3,toy.jsonl.gz,3\n";
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    std::io::Write::write_all(&mut gz, csv.as_bytes()).unwrap();
    std::fs::write(dir.path().join("p.csv.gz"), gz.finish().unwrap()).unwrap();
    let e = ForeignDataset::open(dir.path().join("p.npy"), &opts(ForeignFormat::Olmo).dtype(Primitive::U16))
        .unwrap_err();
    assert_foreign(
        &e,
        "p.csv.gz",
        &ForeignError::MetadataOutOfRange { row: 3, start: 12, end: 15, tokens: 14 },
    );
}

// ---- NumPy (AC-NPY-01..06) ----

#[test]
fn npy_versions_byte_orders_and_shapes() {
    for v in ["npy/v1_u2.npy", "npy/v2_u2.npy", "npy/v3_u2.npy"] {
        let d = open(v, &ForeignOptions::new());
        assert_eq!((d.format(), d.dtype()), (ForeignFormat::Npy, Primitive::U16));
        check(&d, &[101, 102, 103, EOT, 201], None);
    }
    let d = open("npy/be_i4.npy", &ForeignOptions::new());
    assert_eq!((d.dtype(), d.big_endian()), (Primitive::I32, true));
    check(&d, &[101, 102, 103, EOT, 201], None);
    // The fast path (raw bytes into a caller's buffer) swaps too.
    let r = d.reader(IntTokenFormat::new(Primitive::I32).unwrap(), ReadOptions::default()).unwrap();
    let mut raw = vec![0u8; 8];
    r.read_many_into(&[Window::new(3, 2)], &mut raw).unwrap();
    assert_eq!(raw, [0x50, 0xc4, 0, 0, 0xc9, 0, 0, 0]);
    let d = open("npy/c_2x3_u4.npy", &ForeignOptions::new());
    check(&d, &[0, 1, 2, 3, 4, 5], Some(&[&[0, 1, 2], &[3, 4, 5]]));
    let d = open("npy/empty_u2.npy", &ForeignOptions::new());
    assert_eq!(d.elements(), 0);
    check(&d, &[], None);
    let refused = [
        ("npy/fortran_2x3_u4.npy", ForeignError::UnsupportedLayout { layout: "fortran_order".into() }),
        ("npy/scalar_i8.npy", ForeignError::UnsupportedShape { shape: "()".into() }),
        ("npy/object.npy", ForeignError::UnsafeDType { descr: "|O".into() }),
        (
            "npy/structured.npy",
            ForeignError::UnsupportedTokenDType { dtype: "[('tok', '<u2'), ('pos', '<u4')]".into() },
        ),
    ];
    for (rel, want) in refused {
        let e = ForeignDataset::open(sample(rel), &ForeignOptions::new()).unwrap_err();
        assert_foreign(&e, Path::new(rel).file_name().unwrap().to_str().unwrap(), &want);
    }
}

#[test]
fn npy_directory_is_one_stream_of_files_in_order() {
    let d = open("npy/dir_tokens", &ForeignOptions::new().file_documents(true));
    let names: Vec<String> = d.files().iter().map(|f| f.path.display().to_string()).collect();
    assert_eq!(names, ["000.npy", "001.npy", "002.npy", "003.npy"]);
    check(&d, &CORPUS_EOT.concat(), Some(&CORPUS_EOT));
    for (name, options) in backends() {
        let r = d.reader(IntTokenFormat::new(Primitive::U16).unwrap(), options).unwrap();
        assert_eq!(r.read(Window::new(2, 8)).unwrap(), [103, EOT, 201, 202, EOT, 301, 302, 303], "{name}");
    }
}

#[test]
fn npy_megatron_cache_files_read_as_arrays() {
    // AC-NPY-06: Megatron's GPTDataset cache; the description names num_samples (4: the
    // separate-final-epoch case, 5: the other).
    for (num_samples, shuffle) in [(4, [0, 2, 1, 3, 5, 4]), (5, [0, 4, 3, 2, 5, 1])] {
        let cache = sample("megatron/cache");
        let mut hits = 0;
        for entry in std::fs::read_dir(&cache).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_str().unwrap().to_string();
            let Some(md5) = name.strip_suffix("-GPTDataset-train-description.txt") else { continue };
            let text = std::fs::read_to_string(&path).unwrap();
            if !text.contains(&format!("\"num_samples\": {num_samples},")) {
                continue;
            }
            let d = open(
                &format!("megatron/cache/{md5}-GPTDataset-train-shuffle_index.npy"),
                &ForeignOptions::new(),
            );
            assert_eq!(d.dtype(), Primitive::U32);
            check(&d, &shuffle, None);
            hits += 1;
        }
        assert_eq!(hits, 1, "one cache per configuration");
    }
}

// ---- Malformed samples (AC-MEG-10, AC-LLMC-05, AC-MDS-08, AC-LIT-04, AC-NPY-07) ----

/// Asserts that `e` is a foreign error about a file named `file` with exactly `want`.
fn assert_foreign(e: &StorageError, file: &str, want: &ForeignError) {
    match e {
        StorageError::Foreign { path, error, .. } => {
            assert_eq!(error.as_ref(), want, "{e}");
            assert_eq!(path.file_name().and_then(|n| n.to_str()), Some(file), "{e}: names the file");
            assert!(e.to_string().contains(file), "{e}");
        }
        other => panic!("expected {want:?}, got {other}"),
    }
}

/// Every case of `malformed/cases.json` with its format, the file the error must name and the
/// exact error.
fn malformed_cases() -> Vec<(&'static str, ForeignFormat, &'static str, ForeignError)> {
    use ForeignError as E;
    use ForeignFormat as F;
    vec![
        (
            "litdata/dim_mismatch/index.json",
            F::Litdata,
            "chunk-0-0.bin",
            E::ChunkSizeMismatch { dim: 9, need: 34, have: 30 },
        ),
        (
            "litdata/framed_zstd_magic/index.json",
            F::Litdata,
            "index.json",
            E::UnsupportedCompression { compression: "zstd batch".into() },
        ),
        (
            "litdata/unknown_numpy_dtype_index/index.json",
            F::Litdata,
            "index.json",
            E::UnsupportedTokenDType { dtype: "object".into() },
        ),
        ("llmc/bad_magic.bin", F::Llmc, "bad_magic.bin", E::BadMagic { found: "20240521".into() }),
        (
            "llmc/bad_version.bin",
            F::Llmc,
            "bad_version.bin",
            E::UnsupportedVersion { field: "version", found: 2 },
        ),
        ("llmc/eval_file_magic.bin", F::Llmc, "eval_file_magic.bin", E::NotATokenShard { magic: 20240522 }),
        (
            "llmc/header_only_short.bin",
            F::Llmc,
            "header_only_short.bin",
            E::TruncatedHeader { need: 1024, have: 1000 },
        ),
        ("llmc/negative_ntok.bin", F::Llmc, "negative_ntok.bin", E::NegativeTokenCount { found: -1 }),
        (
            "llmc/trailing_byte.bin",
            F::Llmc,
            "trailing_byte.bin",
            E::SizeMismatch { expected: 1030, got: 1031 },
        ),
        (
            "mds/bytes_mismatch/index.json",
            F::Mds,
            "shard.00000.mds",
            E::ShardSizeMismatch { index: 1, file: 267 },
        ),
        (
            "mds/format_json/index.json",
            F::Mds,
            "index.json",
            E::UnsupportedShardFormat { shard: 0, found: "json".into() },
        ),
        (
            "mds/hash_mismatch/index.json",
            F::Mds,
            "shard.00000.mds",
            E::HashMismatch {
                algorithm: "sha1".into(),
                expected: "0000000000000000000000000000000000000000".into(),
                found: "d295b4213fbc2ac90053d8e64071161461dd73b2".into(),
            },
        ),
        ("mds/index_version_1/index.json", F::Mds, "index.json", E::UnsupportedIndexVersion { found: 1 }),
        (
            "mds/missing_shard/index.json",
            F::Mds,
            "shard.00000.mds",
            E::ShardNotFound { basename: "shard.00000.mds".into() },
        ),
        (
            "mds/offset_past_eof/index.json",
            F::Mds,
            "shard.00000.mds",
            E::OffsetOutOfRange { entry: 1, offset: 0x00ff_ffff, min: 20, size: 267 },
        ),
        (
            "mds/samples_mismatch/index.json",
            F::Mds,
            "shard.00000.mds",
            E::SampleCountMismatch { index: 4, shard: 3 },
        ),
        (
            "mds/shard_version_1/index.json",
            F::Mds,
            "index.json",
            E::UnsupportedShardVersion { shard: 0, found: 1 },
        ),
        (
            "mds/unknown_encoding/index.json",
            F::Mds,
            "index.json",
            E::UnknownEncoding { column: "tokens".into(), encoding: "foo".into() },
        ),
        ("megatron/bad_dtype_code.idx", F::Megatron, "bad_dtype_code.idx", E::UnknownDTypeCode { code: 9 }),
        (
            "megatron/bad_magic.idx",
            F::Megatron,
            "bad_magic.idx",
            E::BadMagic { found: "MMIDIDY\\x00\\x00".into() },
        ),
        (
            "megatron/bad_version.idx",
            F::Megatron,
            "bad_version.idx",
            E::UnsupportedVersion { field: "version", found: 2 },
        ),
        (
            "megatron/bin_too_short.idx",
            F::Megatron,
            "bin_too_short.bin",
            E::DataFileSize { have: 26, want: 28 },
        ),
        (
            "megatron/doc_index_end_mismatch.idx",
            F::Megatron,
            "doc_index_end_mismatch.idx",
            E::DocumentIndexEnd { last: 3, sequences: 4 },
        ),
        ("megatron/dtype_code_zero.idx", F::Megatron, "dtype_code_zero.idx", E::UnknownDTypeCode { code: 0 }),
        (
            "megatron/negative_pointer.idx",
            F::Megatron,
            "negative_pointer.idx",
            E::NegativePointer { sequence: 2 },
        ),
        (
            "megatron/trailing_idx_bytes.idx",
            F::Megatron,
            "trailing_idx_bytes.idx",
            E::TrailingBytes { count: 1 },
        ),
        (
            "megatron/truncated_idx.idx",
            F::Megatron,
            "truncated_idx.idx",
            E::TruncatedIndex { need: 122, have: 100 },
        ),
        ("npy/bad_magic.npy", F::Npy, "bad_magic.npy", E::BadMagic { found: "\\x93NUMPZ".into() }),
        ("npy/data_truncated.npy", F::Npy, "data_truncated.npy", E::DataSize { have: 5, need: 6 }),
        (
            "npy/float_tokens.npy",
            F::Npy,
            "float_tokens.npy",
            E::UnsupportedTokenDType { dtype: "<f4".into() },
        ),
        (
            "npy/header_not_dict.npy",
            F::Npy,
            "header_not_dict.npy",
            E::HeaderParse { reason: "expected '{' at byte 0".into() },
        ),
        (
            "npy/missing_shape_key.npy",
            F::Npy,
            "missing_shape_key.npy",
            E::HeaderMissingKey { key: "shape".into() },
        ),
    ]
}

/// The path a case opens: the directory of an `index.json`, the file otherwise.
fn case_path(case: &str) -> PathBuf {
    let p = sample(&format!("malformed/{case}"));
    if p.file_name().is_some_and(|n| n == "index.json") {
        p.parent().unwrap().to_path_buf()
    } else {
        p
    }
}

#[test]
fn every_malformed_sample_gives_its_typed_error_naming_the_file() {
    let listed: serde_json::Value =
        serde_json::from_slice(&std::fs::read(sample("malformed/cases.json")).unwrap()).unwrap();
    let cases = malformed_cases();
    let mut keys: Vec<&str> = listed.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort_unstable();
    let mut ours: Vec<&str> = cases.iter().map(|c| c.0).collect();
    ours.sort_unstable();
    assert_eq!(ours, keys, "every case of cases.json is tested");
    for (case, format, file, want) in cases {
        let verify = case.starts_with("mds/hash_mismatch");
        let options = ForeignOptions::new().format(format).verify_hashes(verify);
        let e = ForeignDataset::open(case_path(case), &options).expect_err(case);
        assert_foreign(&e, file, &want);
        // Detection finds the same layout where it can tell it.
        if format != ForeignFormat::Llmc {
            if let Err(StorageError::Foreign { format: Some(found), .. }) =
                ForeignDataset::open(case_path(case), &ForeignOptions::new().verify_hashes(verify))
            {
                assert_eq!(found, format, "{case}");
            }
        }
    }
}

#[test]
fn hash_mismatch_reads_fine_without_verification_under_every_backend() {
    let d = ForeignDataset::open(case_path("mds/hash_mismatch/index.json"), &ForeignOptions::new()).unwrap();
    let samples: &[&[i64]] = &[&[101, 102, 103, EOT], &[201, 202, EOT, 301], &[302, 303, 304, EOT]];
    check(&d, &samples.concat(), Some(samples));
}

#[test]
fn index_paths_cannot_leave_the_dataset() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::copy(sample("mds/llmfoundry_ndarray_int32/shard.00000.mds"), dir.path().join("outside.mds"))
        .unwrap();
    for name in ["../outside.mds", "/etc/passwd", "a\\\\b.mds", "sub/../../outside.mds"] {
        let index = serde_json::json!({"version": 2, "shards": [{
            "column_encodings": ["ndarray:int32"], "column_names": ["tokens"], "column_sizes": [null],
            "compression": null, "format": "mds", "hashes": [],
            "raw_data": {"basename": name, "bytes": 267, "hashes": {}},
            "samples": 3, "size_limit": 67108864, "version": 2, "zip_data": null}]});
        std::fs::write(data.join("index.json"), index.to_string()).unwrap();
        let e = ForeignDataset::open(&data, &ForeignOptions::new()).unwrap_err();
        assert!(
            matches!(e.foreign_error(), Some(ForeignError::UnsafeShardPath { path }) if path == name),
            "{name}: {e}"
        );
    }
    // A link inside the directory pointing out of it.
    std::os::unix::fs::symlink(dir.path().join("outside.mds"), data.join("link.mds")).unwrap();
    let index = serde_json::json!({"version": 2, "shards": [{
        "column_encodings": ["ndarray:int32"], "column_names": ["tokens"], "column_sizes": [null],
        "compression": null, "format": "mds", "hashes": [],
        "raw_data": {"basename": "link.mds", "bytes": 267, "hashes": {}},
        "samples": 3, "size_limit": 67108864, "version": 2, "zip_data": null}]});
    std::fs::write(data.join("index.json"), index.to_string()).unwrap();
    let e = ForeignDataset::open(&data, &ForeignOptions::new()).unwrap_err();
    assert!(matches!(e.foreign_error(), Some(ForeignError::UnsafeShardPath { .. })), "{e}");
}

// ---- u64 offsets end to end (AC 6) ----

/// A Megatron dataset whose `.bin` is 2^32 + 10 bytes (sparse): sequence 0 holds 2^31 - 1
/// u16 tokens (2^32 - 2 bytes, zeros but its first and last token), sequence 1 one token at
/// byte 2^32 - 2, sequence 2 five tokens at byte 2^32 (pointer past 4 GiB).
#[test]
fn megatron_sparse_bin_past_4_gib_reads_with_u64_offsets() {
    use std::io::{Seek, SeekFrom, Write};
    let dir = tempfile::tempdir().unwrap();
    let len0: u64 = (1 << 31) - 1;
    let lengths = [len0 as i32, 1, 5];
    let pointers: [i64; 3] = [0, (2 * len0) as i64, 1 << 32];
    let mut idx = b"MMIDIDX\0\0".to_vec();
    idx.extend_from_slice(&1u64.to_le_bytes());
    idx.push(8);
    idx.extend_from_slice(&3u64.to_le_bytes());
    idx.extend_from_slice(&4u64.to_le_bytes());
    lengths.iter().for_each(|l| idx.extend_from_slice(&l.to_le_bytes()));
    pointers.iter().for_each(|p| idx.extend_from_slice(&p.to_le_bytes()));
    [0i64, 1, 2, 3].iter().for_each(|d| idx.extend_from_slice(&d.to_le_bytes()));
    std::fs::write(dir.path().join("big.idx"), idx).unwrap();
    let mut bin = std::fs::File::create(dir.path().join("big.bin")).unwrap();
    bin.set_len((1 << 32) + 10).unwrap();
    bin.write_all(&7u16.to_le_bytes()).unwrap();
    bin.seek(SeekFrom::Start(2 * len0 - 2)).unwrap();
    let tail: [u16; 7] = [8, 9, 10, 11, 12, 13, 14];
    bin.write_all(&tail.iter().flat_map(|t| t.to_le_bytes()).collect::<Vec<_>>()).unwrap();
    drop(bin);
    let d = ForeignDataset::open(dir.path().join("big"), &ForeignOptions::new()).unwrap();
    let m = d.megatron().unwrap();
    assert_eq!(m.sequence_pointers(), [0, (1 << 32) - 2, 1 << 32]);
    assert_eq!(d.elements(), len0 + 6);
    assert_eq!(d.documents(), Some(&[0, len0, len0 + 1, len0 + 6][..]));
    for (name, options) in backends() {
        let r = d.reader(TokenFormat::<u16>::new(), options).unwrap();
        let got = r
            .read_many(&[
                Window::new(0, 2),
                Window::new(len0 - 2, 5),
                m.sequence(2).unwrap(),
                Window::new(len0 + 3, 3),
            ])
            .unwrap();
        assert_eq!(
            got,
            [vec![7, 0], vec![0, 8, 9, 10, 11], vec![10, 11, 12, 13, 14], vec![12, 13, 14]],
            "{name}"
        );
        assert_eq!(r.read(m.sequence_range(2, 2, Some(3)).unwrap()).unwrap(), [12, 13, 14], "{name}");
    }
}

// ---- Hostile files: damage never panics ----

/// Copies the dataset `rel` into `dir` (all files of its folder) and returns the path to
/// open there.
fn copy_dataset(rel: &str, dir: &Path) -> PathBuf {
    let src = sample(rel);
    let (folder, name) = if src.is_dir() {
        (src.clone(), None)
    } else {
        (src.parent().unwrap().to_path_buf(), src.file_name())
    };
    for entry in walk(&folder) {
        let to = dir.join(entry.strip_prefix(&folder).unwrap());
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(&entry, &to).unwrap();
    }
    match name {
        Some(n) => dir.join(n),
        None => dir.to_path_buf(),
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out.sort();
    out
}

/// Everything a reader of `d` returns: the whole stream and every document.
fn read_everything(
    d: &ForeignDataset,
    options: ReadOptions,
) -> Result<(Vec<i64>, Vec<Vec<i64>>), StorageError> {
    let format = IntTokenFormat::new(d.dtype())
        .map_err(|e| StorageError::Backend { backend: "test", reason: e.to_string() })?;
    let r = d.reader(format, options)?;
    let all = r.read(Window::new(0, r.len()))?;
    let docs = r.read_many(&d.document_windows())?;
    Ok((all, docs))
}

/// The mutation test of issue 13, extended for issue 19 to the rule the native storages'
/// (`hostile`) follows: 540 seeded byte replacements and truncations of the samples, each
/// opened and read completely under every I/O backend, give the undamaged data exactly, a
/// typed error, or other data (these layouts have no checksum over the tokens), the same on
/// every backend; never a panic (`catch_unwind`), a single allocation above 4 MiB + 8 x the
/// dataset's bytes (the counting allocator of `hostile`), or a hang (a 300 s watchdog naming
/// the case).
#[test]
fn damaged_samples_give_errors_never_panics() {
    use rand::{Rng, SeedableRng};
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    let progress = Arc::new(AtomicU64::new(0));
    let (tx, rx) = std::sync::mpsc::channel();
    let p = Arc::clone(&progress);
    std::thread::spawn(move || {
        let _ = tx.send(catch_unwind(AssertUnwindSafe(|| damaged_sample_cases(&p))));
    });
    let tally = match rx.recv_timeout(std::time::Duration::from_secs(300)) {
        Ok(Ok(t)) => t,
        Ok(Err(p)) => std::panic::resume_unwind(p),
        Err(_) => panic!("case {} made no progress in 300 s (a hang)", progress.load(Ordering::SeqCst)),
    };
    let (exact, other, refused, failures) = tally;
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
    assert!(exact > 0 && refused > 0, "{exact} exact, {other} other data, {refused} refused");
    eprintln!("damaged foreign samples: {exact} read exactly, {other} other data, {refused} typed errors");

    fn damaged_sample_cases(progress: &AtomicU64) -> (u32, u32, u32, Vec<String>) {
        let cases: [(&str, ForeignOptions); 9] = [
            ("megatron/gpt2_text_document", ForeignOptions::new()),
            ("megatron/sentences_text_sentence", ForeignOptions::new().repair_pointers(true)),
            ("llmc/tiny_val_000000.bin", ForeignOptions::new().delimiter(DocumentDelimiter::Starts(50256))),
            ("mds/empty_first_shard", ForeignOptions::new()),
            ("mds/tokens_zstd_sha1_xxh3", ForeignOptions::new()),
            ("mds/encodings", ForeignOptions::new().column("c_nd")),
            ("litdata/pytree", ForeignOptions::new()),
            ("npy/c_2x3_u4.npy", ForeignOptions::new()),
            ("olmo/part-0-00000.npy", opts(ForeignFormat::Olmo).dtype(Primitive::U16)),
        ];
        let backends = backends();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(13);
        let (mut exact, mut other, mut refused) = (0u32, 0u32, 0u32);
        let mut failures = Vec::new();
        for (c, (rel, options)) in cases.into_iter().enumerate() {
            // The undamaged sample's outcome (mds/encodings' c_nd column is a float32 array:
            // refused as token data even undamaged).
            let want = ForeignDataset::open(sample(rel), &options)
                .map_err(|e| e.to_string())
                .and_then(|d| read_everything(&d, ReadOptions::default()).map_err(|e| e.to_string()));
            for round in 0..60u64 {
                progress.store(c as u64 * 60 + round, Ordering::SeqCst);
                let dir = tempfile::tempdir().unwrap();
                let path = copy_dataset(rel, dir.path());
                let files = walk(dir.path());
                let on_disk: u64 = files.iter().map(|f| std::fs::metadata(f).unwrap().len()).sum();
                let victim = &files[rng.random_range(0..files.len())];
                let mut bytes = std::fs::read(victim).unwrap();
                if bytes.is_empty() {
                    continue;
                }
                if round % 4 == 3 {
                    bytes.truncate(rng.random_range(0..bytes.len()));
                } else {
                    for _ in 0..rng.random_range(1..4) {
                        let at = rng.random_range(0..bytes.len());
                        bytes[at] = rng.random();
                    }
                }
                std::fs::write(victim, &bytes).unwrap();
                let what = format!("{rel} round {round} ({})", victim.display());
                let cap = (4usize << 20) + 8 * on_disk as usize;
                let mut first: Option<String> = None;
                for (name, backend) in &backends {
                    let run = || {
                        ForeignDataset::open(&path, &options)
                            .map_err(|e| e.to_string())
                            .and_then(|d| read_everything(&d, backend.clone()).map_err(|e| e.to_string()))
                    };
                    let (outcome, largest) =
                        crate::hostile::with_alloc_cap(cap, || catch_unwind(AssertUnwindSafe(run)));
                    let outcome = match outcome {
                        Ok(o) => o,
                        Err(p) => {
                            failures
                                .push(format!("{what} [{name}]: panic: {}", crate::hostile::panic_text(&*p)));
                            continue;
                        }
                    };
                    if largest > cap {
                        failures.push(format!("{what} [{name}]: allocation of {largest} bytes (cap {cap})"));
                    }
                    let class = match &outcome {
                        _ if outcome == want => "exact".to_string(),
                        Ok(_) => "other".to_string(),
                        Err(e) if e.is_empty() => {
                            failures.push(format!("{what} [{name}]: an error with no message"));
                            "error".to_string()
                        }
                        Err(e) => format!("error: {e}"),
                    };
                    match &first {
                        None => {
                            match class.as_str() {
                                "exact" => exact += 1,
                                "other" => other += 1,
                                _ => refused += 1,
                            }
                            first = Some(class);
                        }
                        Some(f) if *f != class => {
                            failures.push(format!("{what}: backends disagree: {f} / [{name}] {class}"))
                        }
                        Some(_) => {}
                    }
                }
            }
        }
        (exact, other, refused, failures)
    }
}
