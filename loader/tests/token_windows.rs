//! The token-window fast path yields exactly what the decoded path yields.

use guideloom_formats::TokenFormat;
use guideloom_loader::{Loader, StackTokens, StreamWindows, TokenWindows};
use guideloom_storage::StreamWriter;

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
