//! Regression tests: each pins a bug that was found and fixed, and carries its issue number in
//! its name (they moved here with the code: issue 18's from guideloom-storage, issue 14's from
//! guideloom-loader).

use std::path::Path;

use guideloom_interop::InteropError;
use guideloom_storage::StorageError;
use guideloom_testkit::hostile::{mkfifo, within_watchdog};

use crate::common::sample;

/// Whether `e` is the refusal of `name`, found by a foreign dataset's listing or named, as
/// `what` (`"a FIFO"`) instead of a regular file.
fn refused_as(e: &InteropError, name: &str, what: &str) -> bool {
    matches!(e, InteropError::Storage(StorageError::UnsafeFile { path, reason })
        if path.ends_with(name) && reason.contains(what))
}

/// nanoGPT u16 tokens `ids` written to `path`.
fn raw_u16(path: &Path, ids: &[u16]) {
    std::fs::write(path, ids.iter().flat_map(|t| t.to_le_bytes()).collect::<Vec<u8>>()).unwrap();
}

#[test]
fn issue18_a_fifo_matched_by_a_foreign_glob_or_directory_is_an_error_naming_it() {
    use guideloom_formats::Primitive;
    use guideloom_interop::{detect, ForeignDataset, ForeignFormat, ForeignOptions};
    // Found by the new-user trial: a FIFO matched by a glob was silently left out.
    let dir = tempfile::tempdir().unwrap();
    raw_u16(&dir.path().join("a.bin"), &[1, 2, 3]);
    mkfifo(&dir.path().join("b.bin"));
    let glob = dir.path().join("*.bin");
    let options = ForeignOptions::new().format(ForeignFormat::NanoGpt).dtype(Primitive::U16);
    let e =
        within_watchdog("a glob matching a FIFO", move || ForeignDataset::open(glob, &options).unwrap_err());
    assert!(refused_as(&e, "b.bin", "a FIFO"), "{e}");
    // A directory of NumPy files: detection and an explicit format both refuse it.
    let npy = tempfile::tempdir().unwrap();
    let mut v1 = b"\x93NUMPY\x01\x00".to_vec();
    let header = "{'descr': '<u2', 'fortran_order': False, 'shape': (2,), }";
    let pad = 64 - (10 + header.len() + 1) % 64;
    let header = format!("{header}{}\n", " ".repeat(pad % 64));
    v1.extend_from_slice(&(header.len() as u16).to_le_bytes());
    v1.extend_from_slice(header.as_bytes());
    v1.extend_from_slice(&[7, 0, 8, 0]);
    std::fs::write(npy.path().join("a.npy"), &v1).unwrap();
    assert_eq!(ForeignDataset::open(npy.path(), &ForeignOptions::new()).unwrap().elements(), 2);
    mkfifo(&npy.path().join("b.npy"));
    let p = npy.path().to_path_buf();
    let e = within_watchdog("detecting a directory holding a FIFO", move || detect(&p).unwrap_err());
    assert!(refused_as(&e, "b.npy", "a FIFO"), "{e}");
    let p = npy.path().to_path_buf();
    let e = within_watchdog("a directory holding a FIFO", move || {
        ForeignDataset::open(&p, &ForeignOptions::new().format(ForeignFormat::Npy)).unwrap_err()
    });
    assert!(refused_as(&e, "b.npy", "a FIFO"), "{e}");
    // A sub-directory whose name matches is passed over (a dataset is its regular files).
    std::fs::remove_file(npy.path().join("b.npy")).unwrap();
    std::fs::create_dir(npy.path().join("cache.npy")).unwrap();
    let data = ForeignDataset::open(npy.path(), &ForeignOptions::new()).unwrap();
    assert_eq!(data.files().iter().map(|f| f.path.display().to_string()).collect::<Vec<_>>(), ["a.npy"]);
}

#[test]
fn issue18_a_fifo_named_directly_is_refused_as_a_fifo_not_reported_missing() {
    use guideloom_formats::Primitive;
    use guideloom_interop::{ForeignDataset, ForeignError, ForeignFormat, ForeignOptions};
    // Found by the new-user trial: a FIFO named as the dataset gave "no file matches".
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("train.bin");
    mkfifo(&fifo);
    let options = ForeignOptions::new().format(ForeignFormat::NanoGpt).dtype(Primitive::U16);
    let o = options.clone();
    let e =
        within_watchdog("a FIFO named as the dataset", move || ForeignDataset::open(&fifo, &o).unwrap_err());
    assert!(refused_as(&e, "train.bin", "a FIFO"), "{e}");
    // A file that is really missing still says so.
    let e = ForeignDataset::open(dir.path().join("none.bin"), &options).unwrap_err();
    assert!(matches!(e.foreign_error(), Some(ForeignError::NoFiles { .. })), "{e}");
}

#[test]
fn issue18_links_are_followed_only_when_named_never_when_found_by_a_listing() {
    use guideloom_formats::Primitive;
    use guideloom_interop::{ForeignDataset, ForeignFormat, ForeignOptions};
    // Found by the new-user trial: a link matched by a glob was silently left out.
    let outside = tempfile::tempdir().unwrap();
    raw_u16(&outside.path().join("real.bin"), &[5, 6, 7, 8]);
    let dir = tempfile::tempdir().unwrap();
    raw_u16(&dir.path().join("a.bin"), &[1, 2]);
    std::os::unix::fs::symlink(outside.path().join("real.bin"), dir.path().join("b.bin")).unwrap();
    let options = ForeignOptions::new().format(ForeignFormat::NanoGpt).dtype(Primitive::U16);
    let e = ForeignDataset::open(dir.path().join("*.bin"), &options).unwrap_err();
    assert!(refused_as(&e, "b.bin", "a symbolic link"), "{e}");
    // Named directly, the link is the user's choice: it is resolved once, and its target's
    // directory is the dataset's.
    let data = ForeignDataset::open(dir.path().join("b.bin"), &options).unwrap();
    assert_eq!(data.elements(), 4);
    assert_eq!(data.root(), outside.path().canonicalize().unwrap());
}

/// Issue 14: llm.c moves to the next shard lazily (before the next batch), so a checkpoint
/// written after a shard's last batch stores `current_sample_idx` equal to the shard's batch
/// count; that position was refused. It resumes at the next shard's first batch, and after
/// the last shard at the first shard's.
#[test]
fn issue14_llmc_checkpoint_after_a_shards_last_batch_resumes_at_the_next_shard() {
    use guideloom_formats::IntTokenFormat;
    use guideloom_interop::{llmc_resume_state, llmc_windows, ForeignDataset, ForeignFormat, ForeignOptions};
    use guideloom_loader::{Loader, Spans};
    let dir = tempfile::tempdir().unwrap();
    for name in ["tiny_val_000000.bin", "tiny_train_000001.bin"] {
        std::fs::copy(sample(&format!("llmc/{name}")), dir.path().join(name)).unwrap();
    }
    let data =
        ForeignDataset::open(dir.path().join("*.bin"), &ForeignOptions::new().format(ForeignFormat::Llmc))
            .unwrap();
    let reader = data
        .reader(IntTokenFormat::new(data.dtype()).unwrap(), guideloom_storage::ReadOptions::default())
        .unwrap();
    let loader = Loader::builder(Spans::new(reader, llmc_windows(&data, 1, 2, 1).unwrap()).unwrap())
        .batch_size(1)
        .epochs(2)
        .workers(0)
        .build()
        .unwrap();
    let next = |shard, sample| {
        let state = llmc_resume_state(&loader.initial_state(), &data, (1, 2, 1), shard, sample).unwrap();
        loader.iter_from(&state).unwrap().next().unwrap().unwrap().data.remove(0)
    };
    // Shard 0 (train) holds 3 batches: after its last, shard 1's (val) first.
    assert_eq!(next(0, 3), [50256, 101, 102]);
    // After the last shard's last batch: the wrap to shard 0.
    assert_eq!(next(1, 3), [50256, 301, 302]);
}

/// Issue 33 (mutation testing, `interop/src/orders/megatron/split.rs`): the split string's
/// refusals at their boundaries. Megatron's `parse_and_normalize_split` takes one to three
/// numbers (four are refused, three accepted) whose sum is positive and finite (a zero sum, and
/// one that overflows f64 — 400 nines — are refused; a sum of 1 is accepted).
#[test]
fn issue33_megatron_split_strings_refused_at_their_boundaries() {
    use guideloom_interop::megatron_split_ranges;
    let refused = |split: &str, detail: &str| match megatron_split_ranges(split, 10) {
        Err(InteropError::InvalidConfig { field: "split", detail: d }) => assert_eq!(d, detail, "{split:?}"),
        other => panic!("{split:?}: expected a refusal, got {other:?}"),
    };
    refused("1,2,3,4", "\"1,2,3,4\" must hold one to three numbers");
    refused("", "\"\" must hold one to three numbers");
    assert_eq!(megatron_split_ranges("1,2,2", 10).unwrap(), [Some(0..2), Some(2..6), Some(6..10)]);
    refused("0,0", "the numbers of \"0,0\" sum to 0");
    let huge = "9".repeat(400);
    refused(&huge, &format!("the numbers of {huge:?} sum to inf"));
    assert_eq!(megatron_split_ranges("0,1", 10).unwrap(), [None, Some(0..10), None]);
}
