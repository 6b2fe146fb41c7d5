//! Foreign datasets (issue 13) through the loader (`src/windows.rs`): the token-window fast
//! path over files read in place equals the same path over a native storage of the same ids,
//! signed ids widen exactly, documents are records, and a state saved over a foreign dataset
//! resumes it (and only it).

use std::path::{Path, PathBuf};

use guideloom_formats::{Primitive, TokenFormat};
use guideloom_interop::{token_windows, DocumentDelimiter, ForeignDataset, ForeignFormat, ForeignOptions};
use guideloom_loader::{DataSource, Loader, LoaderError, Spans, TokenLoader, TokenWindows};
use guideloom_storage::{ReadOptions, StreamWriter};

use crate::common::sample;

/// A nanoGPT `train.bin` of `ids` (raw little-endian u16, what numpy's `tofile` writes) in
/// `dir`, and a native storage of the same ids split over two shards.
fn nanogpt_and_native(dir: &Path, ids: &[u16]) -> (PathBuf, PathBuf) {
    let bin = dir.join("train.bin");
    std::fs::write(&bin, ids.iter().flat_map(|t| t.to_le_bytes()).collect::<Vec<_>>()).unwrap();
    let native = dir.join("native");
    let mut w = StreamWriter::open(&native, TokenFormat::<u16>::new()).unwrap();
    let (a, b) = ids.split_at(ids.len() / 3);
    w.append(0, &a.iter().map(|&t| u32::from(t)).collect::<Vec<_>>()).unwrap();
    w.append(1, &b.iter().map(|&t| u32::from(t)).collect::<Vec<_>>()).unwrap();
    w.commit().unwrap();
    (bin, native)
}

fn loader(windows: TokenWindows<i64>, workers: usize) -> TokenLoader<i64> {
    let collate = windows.collate();
    Loader::builder(windows)
        .shuffle(9)
        .epochs(2)
        .batch_size(3)
        .workers(workers)
        .collate(collate)
        .build()
        .unwrap()
}

#[test]
fn nanogpt_in_place_equals_the_native_storage_of_the_same_ids() {
    let dir = tempfile::tempdir().unwrap();
    let ids: Vec<u16> = (0..5_000u32).map(|i| (i * 7919 % 65_521) as u16).collect();
    let (bin, native) = nanogpt_and_native(dir.path(), &ids);
    let data = ForeignDataset::open(
        &bin,
        &ForeignOptions::new().format(ForeignFormat::NanoGpt).dtype(Primitive::U16),
    )
    .unwrap();
    for workers in [0, 2] {
        let foreign = loader(token_windows(&data, 129, 128, ReadOptions::default()).unwrap(), workers);
        let ours =
            loader(TokenWindows::open_with(&native, 129, 128, ReadOptions::default()).unwrap(), workers);
        let a: Vec<_> = foreign.iter().map(|b| b.unwrap().data).collect();
        let b: Vec<_> = ours.iter().map(|b| b.unwrap().data).collect();
        assert_eq!(a.len(), 26);
        assert_eq!(a, b, "workers {workers}");
        let first = a[0].row(0).unwrap().to_vec();
        let start = first[0];
        assert!(
            ids.windows(129).any(|w| w.iter().map(|&t| i64::from(t)).eq(first.iter().copied())),
            "{start}"
        );
    }
}

#[test]
fn megatron_int32_windows_widen_and_cross_sequences() {
    let data = ForeignDataset::open(sample("megatron/llama3_text_document"), &ForeignOptions::new()).unwrap();
    let windows = token_windows::<i64>(&data, 4, 3, ReadOptions::default()).unwrap();
    assert_eq!((windows.len(), windows.stored_dtype().to_string()), (2, "<i4".to_string()));
    let collate = windows.collate();
    let batch =
        guideloom_loader::Collate::collate(&collate, vec![windows.get(0).unwrap(), windows.get(1).unwrap()])
            .unwrap();
    assert_eq!(batch.data(), [128000, 101, 102, 103, 103, 128001, 128000, 201]);
    // Signed ids do not fit an unsigned batch type.
    assert!(matches!(
        token_windows::<u32>(&data, 4, 3, ReadOptions::default()),
        Err(LoaderError::TokenDtype { .. })
    ));
    assert_eq!(token_windows::<i32>(&data, 4, 3, ReadOptions::default()).unwrap().len(), 2);
}

#[test]
fn state_over_a_foreign_dataset_resumes_it_and_only_it() {
    // AC 4: --save-state/--resume over a foreign dataset reproduces the uninterrupted run.
    let options = ForeignOptions::new().format(ForeignFormat::Llmc);
    let data = ForeignDataset::open(sample("modded_nanogpt/fineweb_*.bin"), &options).unwrap();
    let make = || {
        let w = token_windows::<i64>(&data, 3, 2, ReadOptions::default()).unwrap();
        let c = w.collate();
        Loader::builder(w).shuffle(3).epochs(3).batch_size(2).workers(2).collate(c).build().unwrap()
    };
    let full: Vec<_> = make().iter().map(|b| b.unwrap()).collect();
    let mut it = make().iter();
    let head: Vec<_> = (0..4).map(|_| it.next().unwrap().unwrap()).collect();
    let state = it.state();
    drop(it);
    let json = state.to_json();
    assert!(json.len() < 400, "{json}");
    let rest: Vec<_> = make()
        .iter_from(&guideloom_loader::State::from_json(&json).unwrap())
        .unwrap()
        .map(|b| b.unwrap())
        .collect();
    assert_eq!(head.iter().chain(&rest).cloned().collect::<Vec<_>>(), full);
    // The same windows over another dataset (one shard) are refused by fingerprint.
    let other = ForeignDataset::open(sample("llmc/tiny_val_000000.bin"), &options).unwrap();
    let w = token_windows::<i64>(&other, 3, 2, ReadOptions::default()).unwrap();
    let c = w.collate();
    let l = Loader::builder(w).shuffle(3).epochs(3).batch_size(2).workers(2).collate(c).build().unwrap();
    assert!(matches!(l.iter_from(&state), Err(LoaderError::StateMismatch { .. })));
}

#[test]
fn documents_of_a_foreign_dataset_are_records_read_in_one_call() {
    // An MDS dataset: read with the `mds` feature (`features` checks the refusal without it).
    #[cfg(feature = "mds")]
    {
        use guideloom_formats::IntTokenFormat;
        let data = ForeignDataset::open(sample("mds/tokens_zstd_sha1_xxh3"), &ForeignOptions::new()).unwrap();
        let reader = data.reader(IntTokenFormat::new(data.dtype()).unwrap(), ReadOptions::default()).unwrap();
        let docs = Spans::new(reader, data.document_windows()).unwrap();
        assert_eq!(docs.len(), 4);
        let loader = Loader::builder(docs).batch_size(3).workers(0).build().unwrap();
        let batches: Vec<_> = loader.iter().map(|b| b.unwrap().data).collect();
        assert_eq!(
            batches,
            [
                vec![vec![101, 102, 103, 50256], vec![201, 202, 50256], vec![301, 302, 303, 304, 50256]],
                vec![vec![401, 50256]]
            ]
        );
    }
    // nanoGPT documents cut after the end-of-text.
    let options = ForeignOptions::new()
        .format(ForeignFormat::NanoGpt)
        .dtype(Primitive::U16)
        .delimiter(DocumentDelimiter::Ends(50256));
    let data = ForeignDataset::open(sample("nanogpt/train.bin"), &options).unwrap();
    let reader = data.reader(TokenFormat::<u16>::new(), ReadOptions::default()).unwrap();
    let docs = Spans::new(reader, data.document_windows()).unwrap();
    assert_eq!(docs.get(1).unwrap(), [201, 202, 50256]);
    let reader = data.reader(TokenFormat::<u16>::new(), ReadOptions::default()).unwrap();
    assert!(matches!(
        Spans::new(reader, vec![guideloom_storage::Window::new(10, 3)]),
        Err(LoaderError::InvalidConfig { field: "spans", .. })
    ));
}
