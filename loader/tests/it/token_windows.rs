//! The token-window fast path: it yields exactly what the decoded path yields, widens narrower
//! storages into one batch type, and refuses what would silently yield nothing.

use guideloom_formats::TokenFormat;
use guideloom_loader::{
    Collate, DataSource, Loader, LoaderError, StackTokens, StreamWindows, TokenLoader, TokenWindows,
    WindowParams,
};
use guideloom_storage::{ReadOptions, StorageError, StreamWriter};

fn storage() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let mut w = StreamWriter::open(dir.path(), TokenFormat::<u32>::new()).unwrap();
    // Shards of 1,000, 0 and 2,345 tokens: windows cross the boundaries.
    w.append(0, &(0..1_000).collect::<Vec<u32>>()).unwrap();
    w.append(1, &[]).unwrap();
    w.append(2, &(100_000..102_345).collect::<Vec<u32>>()).unwrap();
    w.commit().unwrap();
    dir
}

#[test]
fn token_windows_equal_stream_windows_with_stack_tokens() {
    let dir = storage();
    for workers in [0, 2] {
        let slow = Loader::builder(
            StreamWindows::with_stride(
                guideloom_storage::StreamReader::open(dir.path(), TokenFormat::<u32>::new()).unwrap(),
                129,
                100,
            )
            .unwrap(),
        )
        .shuffle(5)
        .epochs(2)
        .batch_size(8)
        .workers(workers)
        .collate(StackTokens)
        .build()
        .unwrap();
        let fast_source =
            TokenWindows::<u32>::open_with(dir.path(), 129, 100, guideloom_storage::ReadOptions::default())
                .unwrap();
        let collate = fast_source.collate();
        let fast = Loader::builder(fast_source)
            .shuffle(5)
            .epochs(2)
            .batch_size(8)
            .workers(workers)
            .collate(collate)
            .build()
            .unwrap();
        assert_eq!(fast.len(), 5, "(3345 - 129) / 100 + 1 = 33 windows");
        let a: Vec<_> = slow.iter().map(|b| b.unwrap()).collect();
        let b: Vec<_> = fast.iter().map(|b| b.unwrap()).collect();
        assert_eq!(a.len(), 10);
        assert_eq!(b.len(), a.len(), "the fast path yields as many batches");
        for (x, y) in a.iter().zip(&b) {
            assert_eq!((x.number, &x.indices, x.epoch), (y.number, &y.indices, y.epoch));
            assert_eq!(x.data, y.data);
        }
        // Window 9 = tokens [900, 1029): the last 100 of shard 0, then shard 2.
        let w9 = a
            .iter()
            .find_map(|b| b.indices.iter().position(|&i| i == 9).map(|r| b.data.row(r).unwrap().to_vec()));
        let expected: Vec<u32> = (900..1_000).chain(100_000..100_029).collect();
        assert_eq!(w9.unwrap(), expected);
        // States are interchangeable between the two paths.
        let mut it = slow.iter();
        it.nth(3).unwrap().unwrap();
        let rest: Vec<_> = fast.iter_from(&it.state()).unwrap().map(|b| b.unwrap().data).collect();
        assert_eq!(rest, b[4..].iter().map(|b| b.data.clone()).collect::<Vec<_>>());
    }
}

/// A u16 storage of ids `0..1000` (shards of 300, 0 and 700 tokens) and a u32 storage of ids
/// `70_000..71_000` (the same shard sizes).
pub(crate) fn u16_and_u32_storages() -> (tempfile::TempDir, tempfile::TempDir) {
    let small = tempfile::tempdir().unwrap();
    let mut w = StreamWriter::open(small.path(), TokenFormat::<u16>::new()).unwrap();
    w.append(0, &(0..300).collect::<Vec<u32>>()).unwrap();
    w.append(1, &[]).unwrap();
    w.append(2, &(300..1_000).collect::<Vec<u32>>()).unwrap();
    w.commit().unwrap();
    let large = tempfile::tempdir().unwrap();
    let mut w = StreamWriter::open(large.path(), TokenFormat::<u32>::new()).unwrap();
    w.append(0, &(70_000..70_300).collect::<Vec<u32>>()).unwrap();
    w.append(1, &[]).unwrap();
    w.append(2, &(70_300..71_000).collect::<Vec<u32>>()).unwrap();
    w.commit().unwrap();
    (small, large)
}

/// The language-model loader of the README, returned by name ([`TokenLoader`]): windows of
/// L + 1 = 65 tokens at stride L = 64, as `E` ids whatever the storage's token dtype.
fn lm_loader<E: guideloom_formats::Element>(dir: &std::path::Path, workers: usize) -> TokenLoader<E> {
    let windows = TokenWindows::<E>::open_with(dir, 65, 64, ReadOptions::default()).unwrap();
    let collate = windows.collate();
    Loader::builder(windows)
        .shuffle(3)
        .epochs(2)
        .batch_size(4)
        .workers(workers)
        .collate(collate)
        .build()
        .unwrap()
}

/// `open` reads a u16 and a u32 storage into one batch type (u32, and i64 for embeddings
/// that take i64): exact ids, windows of 65 at stride 64 across the empty middle shard, and
/// inputs/targets that are each row's first and last 64 tokens.
#[test]
fn open_widens_u16_and_u32_storages_into_one_batch_type() {
    let (small, large) = u16_and_u32_storages();
    for (dir, base) in [(small.path(), 0u32), (large.path(), 70_000)] {
        for workers in [0, 2] {
            let loader = lm_loader::<u32>(dir, workers);
            // (1000 - 65) / 64 + 1 = 15 windows: batches of 4, 4, 4, 3 per epoch.
            assert_eq!((loader.len(), loader.source().len()), (4, 15));
            let batches: Vec<_> = loader.iter().map(|b| b.unwrap()).collect();
            assert_eq!(batches.len(), 8);
            let wide: Vec<_> = lm_loader::<i64>(dir, workers).iter().map(|b| b.unwrap()).collect();
            assert_eq!(wide.len(), batches.len());
            for (b, w) in batches.iter().zip(&wide) {
                assert_eq!(b.indices, w.indices);
                assert_eq!(b.data.shape(), [b.indices.len(), 65]);
                let (inputs, targets) = b.data.inputs_targets();
                assert_eq!(inputs.shape(), [b.indices.len(), 64]);
                assert_eq!(targets.shape(), [b.indices.len(), 64]);
                for (r, &window) in b.indices.iter().enumerate() {
                    let first = base + 64 * window as u32;
                    let expected: Vec<u32> = (first..first + 65).collect();
                    assert_eq!(b.data.row(r).unwrap(), &expected[..], "window {window}");
                    assert_eq!(inputs.row(r).unwrap(), &expected[..64]);
                    assert_eq!(targets.row(r).unwrap(), &expected[1..]);
                    let as_i64: Vec<i64> = expected.iter().map(|&t| i64::from(t)).collect();
                    assert_eq!(w.data.row(r).unwrap(), &as_i64[..]);
                }
            }
        }
    }
    // Window 4 of the u16 storage holds 256..321: tokens of shard 0, then of shard 2.
    let windows = TokenWindows::<u64>::open_with(small.path(), 65, 64, ReadOptions::default()).unwrap();
    assert_eq!(windows.stored_dtype().to_string(), "<u2");
    assert_eq!((windows.seq_len(), windows.stride(), windows.elements()), (65, 64, 1_000));
    let batch = windows.collate().collate(vec![windows.get(4).unwrap(), windows.get(0).unwrap()]).unwrap();
    let expected: Vec<u64> = (256..321).chain(0..65).collect();
    assert_eq!(batch.data(), &expected[..]);
}

/// The widened source has the records of the exact one: same windows, same fingerprint and
/// window parameters, so a state moves between them; a state of another stride names it.
#[test]
fn widened_and_exact_sources_share_states() {
    let (small, _large) = u16_and_u32_storages();
    let exact = TokenWindows::<u16>::open_with(small.path(), 65, 64, ReadOptions::default()).unwrap();
    let collate = exact.collate();
    let exact = Loader::builder(exact).shuffle(3).epochs(2).batch_size(4).collate(collate).build().unwrap();
    let wide = lm_loader::<u32>(small.path(), 2);
    assert_eq!(exact.initial_state(), wide.initial_state());
    assert_eq!(
        exact.initial_state().source.window,
        Some(WindowParams { seq_len: 65, stride: 64, elements: 1_000 })
    );
    let mut it = exact.iter();
    it.nth(2).unwrap().unwrap();
    let rest: Vec<Vec<u32>> =
        wide.iter_from(&it.state()).unwrap().map(|b| b.unwrap().data.into_vec()).collect();
    let expected: Vec<Vec<u32>> =
        it.map(|b| b.unwrap().data.into_vec().into_iter().map(u32::from).collect()).collect();
    assert_eq!(rest.len(), 5);
    assert_eq!(rest, expected);

    let other_stride = TokenWindows::<u32>::open_with(small.path(), 65, 65, ReadOptions::default()).unwrap();
    let collate = other_stride.collate();
    let other =
        Loader::builder(other_stride).shuffle(3).epochs(2).batch_size(4).collate(collate).build().unwrap();
    match other.iter_from(&wide.initial_state()) {
        Err(LoaderError::StateMismatch { field, expected, found }) => {
            assert_eq!((field, expected.as_str(), found.as_str()), ("source.stride", "65", "64"));
        }
        other => panic!("unexpected {:?}", other.map(|it| it.state())),
    }
}

/// Ids that do not all fit the requested type are refused at open, naming both dtypes; the
/// exact reader of `TokenWindows::new` refuses another dtype with the storage's error.
#[test]
fn narrowing_is_refused() {
    let (small, large) = u16_and_u32_storages();
    let err = TokenWindows::<u16>::open(large.path(), 8).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "{} holds token ids of dtype <u4, which do not all fit the requested element type <u2",
            large.path().display()
        )
    );
    assert!(matches!(TokenWindows::<i32>::open(large.path(), 8), Err(LoaderError::TokenDtype { .. })));
    assert!(matches!(TokenWindows::<f32>::open(small.path(), 8), Err(LoaderError::TokenDtype { .. })));
    assert_eq!(TokenWindows::<i32>::open(small.path(), 8).unwrap().len(), 125);
    // `open` widens (issue 26: it is what `open_any` was); the exact reader that
    // `TokenWindows::new` takes refuses another dtype with the storage's error.
    assert_eq!(TokenWindows::<u32>::open(small.path(), 8).unwrap().len(), 125);
    match guideloom_storage::StreamReader::open(small.path(), TokenFormat::<u32>::new()) {
        Err(source) => {
            assert!(
                matches!(&source, StorageError::DtypeMismatch { expected, found, .. } if expected == "<u4" && found == "<u2"),
                "{source}"
            );
        }
        Ok(_) => panic!("a <u2 storage opened as <u4"),
    }
}

/// Batches are read into recycled buffers (a dropped batch hands its buffer back): every batch
/// still equals the decoded path's, with a short final batch (1 row) whose buffer is then
/// lengthened for the next epoch's full batches, at 0 and 2 workers.
#[test]
fn recycled_batch_buffers_hold_exactly_the_batch() {
    let dir = storage();
    for workers in [0, 2] {
        let slow = Loader::builder(
            StreamWindows::with_stride(
                guideloom_storage::StreamReader::open(dir.path(), TokenFormat::<u32>::new()).unwrap(),
                129,
                100,
            )
            .unwrap(),
        )
        .shuffle(9)
        .epochs(3)
        .batch_size(8)
        .collate(StackTokens)
        .build()
        .unwrap();
        let source = TokenWindows::<u32>::open_with(dir.path(), 129, 100, ReadOptions::default()).unwrap();
        let collate = source.collate();
        let pool = std::sync::Arc::clone(collate.pool());
        let fast = Loader::builder(source)
            .shuffle(9)
            .epochs(3)
            .batch_size(8)
            .workers(workers)
            .prefetch(1)
            .collate(collate)
            .build()
            .unwrap();
        let expected: Vec<_> = slow.iter().map(|b| b.unwrap().data).collect();
        assert_eq!(expected.len(), 15);
        assert_eq!(expected[4].shape(), [1, 129], "33 windows: the last batch of an epoch has 1 row");
        let mut buffers = std::collections::HashSet::new();
        let mut n = 0;
        for (b, want) in fast.iter().zip(&expected) {
            let b = b.unwrap();
            assert_eq!(b.data, *want, "batch {} ({workers} workers)", b.number);
            buffers.insert(b.data.data().as_ptr() as usize);
            n += 1;
            // `b` drops here: its buffer goes back to the pool.
        }
        assert_eq!(n, 15);
        assert!(buffers.len() < n, "{workers} workers: 15 batches in {} distinct buffers", buffers.len());
        assert!(pool.free_buffers() >= 1);
        // A batch taken out of its buffer does not return it.
        let kept = fast.batch(0).unwrap().unwrap().data.into_vec();
        assert_eq!(kept, expected[0].data());
    }
}

/// Zero-copy batches: the views of each window, concatenated, are the bytes the copying path
/// reads (windows crossing the shard boundary and the empty shard come in two pieces), at 0
/// and 2 workers.
#[test]
fn mapped_batches_view_the_same_bytes_as_the_copying_path() {
    let dir = storage();
    for workers in [0, 2] {
        let source = TokenWindows::<u32>::open_with(dir.path(), 129, 100, ReadOptions::default()).unwrap();
        let copying = source.collate();
        // SAFETY: nothing truncates or rewrites this private temporary storage while it is mapped.
        let mapped = source.mapped_collate(unsafe { guideloom_storage::MmapBackend::new() });
        let loader = Loader::builder(source)
            .shuffle(3)
            .batch_size(8)
            .workers(workers)
            .collate(mapped)
            .build()
            .unwrap();
        let mut windows = 0;
        let mut two_pieces = 0;
        for b in loader.iter() {
            let b = b.unwrap();
            let spans: Vec<_> = b.indices.iter().map(|&i| loader.source().get(i).unwrap()).collect();
            let want = copying.collate(spans).unwrap();
            assert_eq!(b.data.len(), b.len());
            for row in 0..b.len() {
                let pieces = b.data.window(row).unwrap();
                two_pieces += usize::from(pieces.len() == 2);
                let bytes: Vec<u8> = pieces.flat_map(|p| p.iter().copied()).collect();
                let ids: Vec<u32> =
                    bytes.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
                assert_eq!(ids, want.row(row).unwrap(), "window {} ({workers} workers)", b.indices[row]);
            }
            assert!(b.data.window(b.len()).is_none());
            windows += b.len();
        }
        assert_eq!(windows, 33);
        assert_eq!(two_pieces, 1, "window 9 = tokens [900, 1029) crosses from shard 0 to shard 2");
    }
}
