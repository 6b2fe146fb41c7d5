//! What the layout tests share: the samples (the projects' own writers' output, see the
//! README of the samples' directory), opening them, and reading them under every I/O
//! backend.

use std::path::{Path, PathBuf};

use guideloom_formats::IntTokenFormat;
use guideloom_interop::{ForeignDataset, ForeignError, ForeignFormat, ForeignOptions, InteropError};
use guideloom_storage::{ReadOptions, Window};

pub(crate) use guideloom_testkit::backends::read_backends as backends;

/// A sample file or directory: the interop samples kept in the repository (they stay at
/// `storage/tests/data/interop`, where states saved by earlier versions, whose fingerprints
/// held the path, name them).
pub(crate) fn sample(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../storage/tests/data/interop").join(rel)
}

/// A file of llm.c's own order fixtures (`loader/tests/data/llmc_order`: shards and the
/// batches llm.c's `DataLoader` read from them).
pub(crate) fn llmc_order(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../loader/tests/data/llmc_order").join(rel)
}

pub(crate) fn open(rel: &str, options: &ForeignOptions) -> ForeignDataset {
    ForeignDataset::open(sample(rel), options).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

pub(crate) fn opts(format: ForeignFormat) -> ForeignOptions {
    ForeignOptions::new().format(format)
}

/// All tokens, read in one window with `options`.
pub(crate) fn tokens_with(data: &ForeignDataset, options: ReadOptions) -> Vec<i64> {
    let r = data.reader(IntTokenFormat::new(data.dtype()).unwrap(), options).unwrap();
    assert_eq!(r.len(), data.elements());
    r.read(Window::new(0, r.len())).unwrap()
}

/// The documents' tokens, read in one batch with `options`.
pub(crate) fn documents_with(data: &ForeignDataset, options: ReadOptions) -> Vec<Vec<i64>> {
    let r = data.reader(IntTokenFormat::new(data.dtype()).unwrap(), options).unwrap();
    r.read_many(&data.document_windows()).unwrap()
}

/// Checks tokens (and documents, when given) under every backend, one read each.
pub(crate) fn check(data: &ForeignDataset, tokens: &[i64], documents: Option<&[&[i64]]>) {
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

/// The end-of-text token of the GPT-2 samples.
pub(crate) const EOT: i64 = 50256;

/// The four documents of the corpus most samples hold.
pub(crate) const CORPUS_EOT: [&[i64]; 4] =
    [&[101, 102, 103, EOT], &[201, 202, EOT], &[301, 302, 303, 304, EOT], &[401, EOT]];

/// A new temporary directory holding a copy of the files of directory `src` (one level: the
/// samples' dataset directories), for a test to edit.
pub(crate) fn copy_dir(src: &Path) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(src).unwrap().flatten() {
        std::fs::copy(e.path(), tmp.path().join(e.file_name())).unwrap();
    }
    tmp
}

/// Reads the JSON file `path`, applies `edit` to it and writes it back (a sample's index made
/// malformed or changed by a test).
pub(crate) fn edit_json(path: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let mut value: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    edit(&mut value);
    std::fs::write(path, serde_json::to_vec(&value).unwrap()).unwrap();
}

/// Asserts that `e` is a foreign error about a file named `file` with exactly `want`.
pub(crate) fn assert_foreign(e: &InteropError, file: &str, want: &ForeignError) {
    match e {
        InteropError::Dataset { path, error, .. } => {
            assert_eq!(error.as_ref(), want, "{e}");
            assert_eq!(path.file_name().and_then(|n| n.to_str()), Some(file), "{e}: names the file");
            assert!(e.to_string().contains(file), "{e}");
        }
        other => panic!("expected {want:?}, got {other}"),
    }
}

/// The path a case opens: the directory of an `index.json`, the file otherwise.
pub(crate) fn case_path(case: &str) -> PathBuf {
    let p = sample(&format!("malformed/{case}"));
    if p.file_name().is_some_and(|n| n == "index.json") {
        p.parent().unwrap().to_path_buf()
    } else {
        p
    }
}
