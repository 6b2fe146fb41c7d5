//! [`open_tokens`] (issue 26, item 2): every sample dataset (a native storage written here,
//! every foreign layout of the repository's interop samples) opened by its local path and by
//! its `s3://` copy on moto's S3 server (`tests/s3/setup.sh`; skipped with a message when it
//! is not installed, unless `GUIDELOOM_REQUIRE_S3` is set) through `open_tokens` alone gives
//! the same tokens, and the known ones where the samples say them.

use std::path::Path;

use guideloom_formats::{Primitive, TokenFormat};
use guideloom_interop::{
    open_tokens, ForeignFormat, ForeignOptions, InteropError, OpenOptions, TokenDataset,
};
use guideloom_loader::{Collate, DataSource};
use guideloom_storage::{RemoteDir, RemoteOptions, StorageKind, StreamWriter, Window};
use guideloom_testkit::s3::MotoServer;

use crate::common::{sample, CORPUS_EOT, EOT};

const BUCKET: &str = "guideloom-open";

/// Every file below `local`, as objects under `s3://BUCKET/prefix` (sub-directories as `/`
/// parts).
fn upload_tree(remote: &RemoteOptions, local: &Path, prefix: &str) {
    let dir = RemoteDir::open(&format!("s3://{BUCKET}/{prefix}"), remote.clone()).unwrap();
    for (rel, bytes) in guideloom_testkit::files_below(local) {
        dir.put(&rel, bytes).unwrap();
    }
}

/// All of the dataset's tokens, in one read.
fn all_tokens(data: &TokenDataset) -> Vec<i64> {
    let n = data.elements();
    let mut rows = data.reader().read_many(&[Window::new(0, n)]).unwrap();
    assert_eq!(rows.len(), 1);
    rows.pop().unwrap()
}

/// The sequences of the Megatron sample `prefix` as its `expected.json` says them.
fn megatron_expected(prefix: &str) -> Vec<i64> {
    let text = std::fs::read_to_string(sample("megatron/expected.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let seqs = v[prefix]["sequences"].as_array().unwrap_or_else(|| panic!("{prefix} in expected.json"));
    seqs.iter().flat_map(|s| s.as_array().unwrap().iter().map(|t| t.as_i64().unwrap())).collect()
}

/// One sample: its path below the samples (or a native storage's directory), its foreign
/// options, and its tokens where known (or, for the issue 28 samples below
/// `tests/data/samples2`, the SHA-256 of their stream as `expected.json` gives it).
struct Case {
    rel: &'static str,
    foreign: ForeignOptions,
    tokens: Option<Vec<i64>>,
    /// A sample of `tests/data/samples2` (uploaded under `samples2/`), with the
    /// `token_stream_sha256_i64le` of its expected entry (directory, key, split).
    samples2: Option<(&'static str, &'static str, Option<&'static str>)>,
}

fn case(rel: &'static str, foreign: ForeignOptions, tokens: Option<Vec<i64>>) -> Case {
    Case { rel, foreign, tokens, samples2: None }
}

/// A case of the issue 28 samples: `rel` below `tests/data/samples2`, checked against the
/// entry `key` (and `split`) of `<dir>/expected.json`.
#[cfg(any(feature = "arrow", feature = "parquet"))]
fn case2(
    rel: &'static str,
    foreign: ForeignOptions,
    (dir, key, split): (&'static str, &'static str, Option<&'static str>),
) -> Case {
    Case { rel, foreign, tokens: None, samples2: Some((dir, key, split)) }
}

/// The issue 28 samples (Hugging Face Arrow directories, Parquet files), with the features
/// that read them.
fn samples2_cases() -> Vec<Case> {
    #[allow(unused_mut)]
    let mut cases = Vec::new();
    #[cfg(feature = "arrow")]
    cases.extend([
        case2("hf_arrow/tokens_i32_2shards", ForeignOptions::new(), ("hf_arrow", "tokens_i32_2shards", None)),
        case2(
            "hf_arrow/tokens_i32_2shards/data-*.arrow",
            named(ForeignFormat::HfArrow),
            ("hf_arrow", "tokens_i32_2shards", None),
        ),
        case2("hf_arrow/tokens_u16", ForeignOptions::new(), ("hf_arrow", "tokens_u16", None)),
        case2("hf_arrow/tokens_large_list", ForeignOptions::new(), ("hf_arrow", "tokens_large_list", None)),
        case2(
            "hf_arrow/dataset_dict",
            ForeignOptions::new().split("validation"),
            ("hf_arrow", "dataset_dict", Some("validation")),
        ),
    ]);
    #[cfg(feature = "parquet")]
    cases.extend([
        case2(
            "hf_parquet/data/train-*.parquet",
            named(ForeignFormat::Parquet),
            ("hf_parquet", "train", None),
        ),
        case2(
            "parquet/tokens_zstd_pageindex.parquet",
            ForeignOptions::new(),
            ("parquet", "tokens_zstd_pageindex.parquet", None),
        ),
        case2(
            "parquet/tokens_snappy_nopageindex.parquet",
            ForeignOptions::new(),
            ("parquet", "tokens_snappy_nopageindex.parquet", None),
        ),
        case2(
            "parquet/tokens_u16_uncompressed_v2.parquet",
            ForeignOptions::new(),
            ("parquet", "tokens_u16_uncompressed_v2.parquet", None),
        ),
        case2(
            "parquet/tokens_i64_large_list_gzip.parquet",
            ForeignOptions::new(),
            ("parquet", "tokens_i64_large_list_gzip.parquet", None),
        ),
    ]);
    cases
}

fn named(format: ForeignFormat) -> ForeignOptions {
    ForeignOptions::new().format(format)
}

/// Every layout's samples (megatron, nanogpt, llmc and its legacy files, mds, litdata, olmo,
/// npy; Hugging Face Arrow and Parquet: [`samples2_cases`]).
fn foreign_cases() -> Vec<Case> {
    let corpus: Vec<i64> = CORPUS_EOT.concat();
    let mut cases = vec![
        case(
            "megatron/gpt2_text_document",
            ForeignOptions::new(),
            Some(megatron_expected("gpt2_text_document")),
        ),
        case(
            "megatron/llama3_text_document",
            ForeignOptions::new(),
            Some(megatron_expected("llama3_text_document")),
        ),
        case("megatron/other_text_document", ForeignOptions::new(), None),
        case("megatron/multimodal_text_document", ForeignOptions::new().multimodal(true), None),
        case("megatron/sentences_text_sentence", ForeignOptions::new(), None),
        case(
            "nanogpt/train.bin",
            named(ForeignFormat::NanoGpt).dtype(Primitive::U16),
            Some(vec![101, 102, 103, EOT, 201, 202, EOT, 301, 302, 303, 304, EOT]),
        ),
        case("nanogpt/val.bin", named(ForeignFormat::NanoGpt).dtype(Primitive::U16), Some(vec![401, EOT])),
        case(
            "nanogpt_shakespeare_char/train.bin",
            named(ForeignFormat::NanoGpt).dtype(Primitive::U16),
            Some(vec![7, 5, 1, 2, 3, 1, 5, 6, 1, 4, 5, 7, 1, 7, 5, 1, 2]),
        ),
        case(
            "llmc/tiny_val_000000.bin",
            ForeignOptions::new(),
            Some(vec![EOT, 101, 102, 103, EOT, 201, 202]),
        ),
        case(
            "llmc/tiny_train_000001.bin",
            ForeignOptions::new(),
            Some(vec![EOT, 301, 302, 303, 304, EOT, 401]),
        ),
        case(
            "llmc/tiny_llama3_val_000000.bin",
            ForeignOptions::new(),
            Some(vec![128000, 101, 102, 103, 128000, 201, 202]),
        ),
        case("modded_nanogpt/fineweb_*.bin", named(ForeignFormat::Llmc), None),
        case("llmc_legacy/tiny_shakespeare_val.bin", named(ForeignFormat::Llmc).dtype(Primitive::I32), None),
        case("litdata/tokens_u16", ForeignOptions::new(), None),
        case("litdata/tokens_i32_tensor", ForeignOptions::new(), None),
        case(
            "litdata/pytree",
            ForeignOptions::new(),
            Some(vec![101, 102, 103, 201, 202, 301, 302, 303, 304, 401]),
        ),
        case("npy/v1_u2.npy", ForeignOptions::new(), Some(vec![101, 102, 103, EOT, 201])),
        case("npy/v2_u2.npy", ForeignOptions::new(), Some(vec![101, 102, 103, EOT, 201])),
        case("npy/v3_u2.npy", ForeignOptions::new(), Some(vec![101, 102, 103, EOT, 201])),
        case("npy/be_i4.npy", ForeignOptions::new(), Some(vec![101, 102, 103, EOT, 201])),
        case("npy/c_2x3_u4.npy", ForeignOptions::new(), Some(vec![0, 1, 2, 3, 4, 5])),
        case("npy/dir_tokens", ForeignOptions::new(), Some(corpus.clone())),
    ];
    if cfg!(feature = "mds") {
        cases.extend([
            case("mds/llmfoundry_ndarray_int32", ForeignOptions::new(), None),
            case("mds/llmfoundry_bytes_int64", ForeignOptions::new(), None),
            case("mds/tokens_zstd_sha1_xxh3", ForeignOptions::new(), Some(corpus.clone())),
            case(
                "mds/empty_first_shard",
                ForeignOptions::new(),
                Some(vec![101, 102, 103, EOT, 201, 202, EOT]),
            ),
            case("mds/merged", ForeignOptions::new(), None),
        ]);
    }
    if cfg!(feature = "olmo") {
        cases.extend([
            case(
                "olmo/part-0-00000.npy",
                named(ForeignFormat::Olmo).dtype(Primitive::U16),
                Some(vec![101, 102, 103, 50279, 201, 202, 50279, 301, 302, 303, 304, 50279, 401, 50279]),
            ),
            case(
                "olmo/part-1-00000.npy",
                named(ForeignFormat::Olmo).dtype(Primitive::U32),
                Some(vec![101, 102, 103, 100257, 201, 202, 100257]),
            ),
        ]);
    }
    cases.extend(samples2_cases());
    cases
}

#[test]
fn issue26_open_tokens_reads_every_sample_locally_and_from_s3_alike() {
    let Some(moto) = MotoServer::start("issue26_open_tokens_reads_every_sample_locally_and_from_s3_alike")
    else {
        return;
    };
    moto.create_bucket(BUCKET);
    let remote = RemoteOptions::default().block_size(4096).store_options(moto.store_options());
    upload_tree(&remote, &sample(""), "interop");
    let samples2 = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/samples2");
    upload_tree(&remote, &samples2, "samples2");
    // Native storages: u16 and u32 token streams.
    let native = tempfile::tempdir().unwrap();
    let u16_tokens: Vec<u32> = vec![3, 1, 4, 1, 5, 9, 2, 6];
    let mut w = StreamWriter::open(native.path().join("u16"), TokenFormat::<u16>::new()).unwrap();
    w.append(0, &u16_tokens).unwrap();
    w.commit().unwrap();
    let u32_tokens: Vec<u32> = vec![100_000, 7, 70_000];
    let mut w = StreamWriter::open(native.path().join("u32"), TokenFormat::<u32>::new()).unwrap();
    w.append(0, &u32_tokens).unwrap();
    w.commit().unwrap();
    upload_tree(&remote, native.path(), "native");

    let options = OpenOptions::default().remote(remote.clone());
    let mut checked = 0;
    let natives = [
        ("u16", u16_tokens.iter().map(|&t| i64::from(t)).collect::<Vec<_>>(), "<u2"),
        ("u32", u32_tokens.iter().map(|&t| i64::from(t)).collect(), "<u4"),
    ];
    for (name, want, dtype) in natives {
        let local_path = native.path().join(name);
        let local = open_tokens(local_path.to_str().unwrap(), &options).unwrap();
        let url = format!("s3://{BUCKET}/native/{name}");
        let from_s3 = open_tokens(&url, &options).unwrap();
        for data in [&local, &from_s3] {
            assert!(data.foreign().is_none(), "{}", data.location());
            assert_eq!(data.dtype().to_string(), dtype, "{}", data.location());
            assert_eq!(all_tokens(data), want, "{}", data.location());
        }
        assert_eq!(from_s3.location(), url);
        checked += 1;
    }
    for c in foreign_cases() {
        let options = options.clone().foreign(c.foreign.clone());
        let (local_path, url) = match c.samples2 {
            Some(_) => (samples2.join(c.rel), format!("s3://{BUCKET}/samples2/{}", c.rel)),
            None => (sample(c.rel), format!("s3://{BUCKET}/interop/{}", c.rel)),
        };
        let local =
            open_tokens(local_path.to_str().unwrap(), &options).unwrap_or_else(|e| panic!("{}: {e}", c.rel));
        let from_s3 = open_tokens(&url, &options).unwrap_or_else(|e| panic!("{url}: {e}"));
        let (l, r) = (all_tokens(&local), all_tokens(&from_s3));
        assert!(!l.is_empty(), "{}", c.rel);
        assert_eq!(l, r, "{}: local and s3 tokens", c.rel);
        assert_eq!(local.dtype(), from_s3.dtype(), "{}", c.rel);
        let (lf, rf) = (local.foreign().unwrap(), from_s3.foreign().unwrap());
        assert_eq!(lf.format(), rf.format(), "{}", c.rel);
        if let Some(format) = c.foreign.format {
            assert_eq!(lf.format(), format, "{}", c.rel);
        }
        if let Some(want) = &c.tokens {
            assert_eq!(&l, want, "{}: known tokens", c.rel);
        }
        assert_eq!(lf.documents(), rf.documents(), "{}: local and s3 documents", c.rel);
        #[cfg(any(feature = "arrow", feature = "parquet"))]
        if let Some((dir, key, split)) = c.samples2 {
            let want = crate::tables::expected(dir);
            let want = split.map_or(&want[key], |s| &want[key][s]);
            let sha = want["token_stream_sha256_i64le"].as_str().unwrap();
            assert_eq!(crate::tables::stream_sha256(&r), sha, "{url}: the expected stream");
        }
        checked += 1;
    }
    assert_eq!(checked, 2 + foreign_cases().len());
}

#[test]
fn issue26_open_tokens_windows_and_refusals() {
    // A native u16 stream through windows: u32 batches.
    let dir = tempfile::tempdir().unwrap();
    let mut w = StreamWriter::open(dir.path(), TokenFormat::<u16>::new()).unwrap();
    w.append(0, &[10, 11, 12, 13, 14, 15, 16]).unwrap();
    w.commit().unwrap();
    let data = open_tokens(dir.path().to_str().unwrap(), &OpenOptions::default()).unwrap();
    let windows = data.windows::<u32>(3, 2).unwrap();
    assert_eq!(windows.len(), 3);
    let batch = windows.collate().collate(vec![windows.get(2).unwrap(), windows.get(0).unwrap()]).unwrap();
    assert_eq!(batch.data(), [14, 15, 16, 10, 11, 12]);
    // A foreign dataset through windows, the layout detected.
    let data =
        open_tokens(sample("llmc/tiny_val_000000.bin").to_str().unwrap(), &OpenOptions::default()).unwrap();
    assert_eq!(data.foreign().unwrap().format(), ForeignFormat::Llmc);
    let windows = data.windows::<i64>(3, 3).unwrap();
    let batch = windows.collate().collate(vec![windows.get(1).unwrap()]).unwrap();
    assert_eq!(batch.data(), [103, EOT, 201]);
    // u32 ids do not fit u16 windows.
    let data =
        open_tokens(sample("llmc/tiny_llama3_val_000000.bin").to_str().unwrap(), &OpenOptions::default())
            .unwrap();
    assert!(matches!(data.windows::<u16>(2, 2), Err(InteropError::Loader(_))));
    // A native storage that is not a token stream: a typed error naming it.
    let meta = tempfile::tempdir().unwrap();
    let mut w =
        guideloom_storage::DocumentWriter::open(meta.path(), guideloom_formats::RawBytesFormat).unwrap();
    w.append(0, b"x".as_slice()).unwrap();
    w.commit().unwrap();
    let at = meta.path().to_str().unwrap();
    match open_tokens(at, &OpenOptions::default()) {
        Err(InteropError::NotTokens { location, kind, dtype }) => {
            assert_eq!((location.as_str(), kind, dtype.as_str()), (at, StorageKind::Document, "none"));
        }
        other => panic!("{other:?}"),
    }
    // A named layout wins over detection; an unknown one is the foreign error.
    let e = open_tokens(sample("nanogpt/train.bin").to_str().unwrap(), &OpenOptions::default()).unwrap_err();
    assert!(matches!(&e, InteropError::Dataset { format: None, .. }), "{e}");
}

/// The child of [`issue34_the_library_openers_read_the_cli_environment`]: run by it in a
/// process of its own with the store's and the cache's environment (a test changing its own
/// process environment would race the others); does nothing when run by the harness.
#[test]
fn issue34_child_opens_through_the_environment() {
    let Ok(url) = std::env::var("GUIDELOOM_ISSUE34_URL") else { return };
    let dir = guideloom_storage::StorageLocation::parse(&url).open().unwrap();
    let r =
        guideloom_storage::StreamReader::open_in(dir, TokenFormat::<u16>::new(), Default::default()).unwrap();
    assert_eq!(r.read(Window::new(1, 3)).unwrap(), [11, 12, 13]);
    let data = open_tokens(&url, &OpenOptions::default()).unwrap();
    assert_eq!(all_tokens(&data), (10..30).collect::<Vec<i64>>());
}

/// Issue 34 item 3: `StorageLocation::open()` and `open_tokens` with default options read the
/// environment the command line reads (`GUIDELOOM_CACHE_DIR` and object_store's variables):
/// the child process reaches the store through `AWS_*` alone and fills the cache directory.
#[test]
fn issue34_the_library_openers_read_the_cli_environment() {
    let Some(moto) = MotoServer::start("issue34_the_library_openers_read_the_cli_environment") else {
        return;
    };
    moto.create_bucket(BUCKET);
    let remote = RemoteOptions::default().store_options(moto.store_options());
    let native = tempfile::tempdir().unwrap();
    let mut w = StreamWriter::open(native.path(), TokenFormat::<u16>::new()).unwrap();
    w.append(0, &(10..30).collect::<Vec<u32>>()).unwrap();
    w.commit().unwrap();
    upload_tree(&remote, native.path(), "env");
    let cache = tempfile::tempdir().unwrap();
    let child = |cache_dir: Option<&Path>| {
        let mut c = std::process::Command::new(std::env::current_exe().unwrap());
        c.args([
            "--exact",
            "open::issue34_child_opens_through_the_environment",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env("GUIDELOOM_ISSUE34_URL", format!("s3://{BUCKET}/env"))
        .envs(moto.client_env())
        .env_remove("GUIDELOOM_CACHE_DIR");
        if let Some(d) = cache_dir {
            c.env("GUIDELOOM_CACHE_DIR", d);
        }
        let out = c.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
        assert!(stdout.contains("1 passed"), "{stdout}");
    };
    child(None);
    assert_eq!(guideloom_testkit::files_below(cache.path()).len(), 0);
    child(Some(cache.path()));
    let cached = guideloom_testkit::files_below(cache.path());
    assert!(!cached.is_empty(), "GUIDELOOM_CACHE_DIR holds the blocks the child read");
}

/// The round-2 record formats (issue 28): each sample read by `open_tokens` from its local
/// path and from its `s3://` copy gives the same tokens and documents; ArrayRecord records by
/// index, and the TFRecord and WebDataset sequential sources, read alike from both.
#[cfg(all(feature = "arrayrecord", feature = "tfrecord", feature = "webdataset"))]
#[test]
fn issue28_record_formats_read_locally_and_from_s3_alike() {
    use guideloom_interop::{ArrayRecordReader, TfRecordShards, WebDatasetShards};
    use guideloom_loader::sequential::SequentialSource;
    use guideloom_storage::StorageLocation;

    use crate::records_samples::sample2;

    fn sequential<S: SequentialSource<Item = Vec<i64>>>(s: &S) -> Vec<Vec<i64>> {
        crate::records_samples::sequential_records(s).unwrap()
    }

    let Some(moto) = MotoServer::start("issue28_record_formats_read_locally_and_from_s3_alike") else {
        return;
    };
    moto.create_bucket(BUCKET);
    let remote = RemoteOptions::default().block_size(4096).store_options(moto.store_options());
    upload_tree(&remote, &sample2(""), "samples2");
    let options = OpenOptions::default().remote(remote.clone());
    let cases: [(&str, ForeignOptions, u64); 8] = [
        ("arrayrecord/tokens_npy_default.array_record", ForeignOptions::new(), 2_726),
        ("arrayrecord/tokens_npy_g4_snappy.array_record", ForeignOptions::new(), 2_726),
        (
            "arrayrecord/tokens_u16_raw_g16_brotli.array_record",
            named(ForeignFormat::ArrayRecord).dtype(Primitive::U16),
            2_726,
        ),
        ("arrayrecord/tokens_npy_g8_uncompressed_2blocks.array_record", ForeignOptions::new(), 15_595),
        ("tfrecord/examples.tfrecord", ForeignOptions::new(), 2_770),
        ("tfrecord/examples.tfrecord.gz", named(ForeignFormat::TfRecord), 2_770),
        ("tfrecord/raw_u16_tokens.tfrecord", named(ForeignFormat::TfRecord).dtype(Primitive::U16), 1_381),
        ("webdataset/shards", ForeignOptions::new(), 2_509),
    ];
    for (rel, foreign, tokens) in cases {
        let options = options.clone().foreign(foreign.clone());
        let local =
            open_tokens(sample2(rel).to_str().unwrap(), &options).unwrap_or_else(|e| panic!("{rel}: {e}"));
        let url = format!("s3://{BUCKET}/samples2/{rel}");
        let from_s3 = open_tokens(&url, &options).unwrap_or_else(|e| panic!("{url}: {e}"));
        let (l, r) = (all_tokens(&local), all_tokens(&from_s3));
        assert_eq!(l.len() as u64, tokens, "{rel}");
        assert_eq!(l, r, "{rel}: local and s3 tokens");
        let (lf, rf) = (local.foreign().unwrap(), from_s3.foreign().unwrap());
        assert_eq!((lf.format(), lf.documents()), (rf.format(), rf.documents()), "{rel}");
        assert_eq!(lf.describe()["records"], rf.describe()["records"], "{rel}");
    }
    // ArrayRecord by index, from the store's block cache.
    let rel = "arrayrecord/tokens_npy_g8_uncompressed_2blocks.array_record";
    let local = ArrayRecordReader::open(sample2(rel)).unwrap();
    let url = StorageLocation::parse(&format!("s3://{BUCKET}/samples2/{rel}"));
    let from_s3 = ArrayRecordReader::open_at(&url, &remote).unwrap();
    assert_eq!((from_s3.len(), from_s3.chunk_index()), (local.len(), local.chunk_index()));
    for i in [0, 57, 80, 99] {
        assert_eq!(from_s3.record(i).unwrap(), local.record(i).unwrap(), "record {i}");
    }
    // The sequential sources.
    for rel in ["tfrecord/examples.tfrecord", "tfrecord/examples.tfrecord.gz"] {
        let url = StorageLocation::parse(&format!("s3://{BUCKET}/samples2/{rel}"));
        let a = TfRecordShards::open(sample2(rel).to_str().unwrap(), &ForeignOptions::new()).unwrap();
        let b = TfRecordShards::open_at(&url, &remote, &ForeignOptions::new()).unwrap();
        assert_eq!(sequential(&a), sequential(&b), "{rel}");
    }
    let url = StorageLocation::parse(&format!("s3://{BUCKET}/samples2/webdataset/shards"));
    let a = WebDatasetShards::open(sample2("webdataset/shards").to_str().unwrap(), &ForeignOptions::new())
        .unwrap();
    let b = WebDatasetShards::open_at(&url, &remote, &ForeignOptions::new()).unwrap();
    assert_eq!(b.shards().len(), 5);
    assert_eq!(sequential(&a), sequential(&b));
}
