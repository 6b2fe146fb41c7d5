//! A training loop over a guideloom storage, with checkpoint and resume.
//! Run: `cargo run --example train_loop`.
use guideloom::formats::TokenFormat;
use guideloom::loader::{Loader, StackTokens, State, StreamWindows};
use guideloom::storage::StreamWriter;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // 1. Write a small token storage over two shards (a real job runs `guideloom ingest`).
    let dir = std::env::temp_dir().join(format!("guideloom-train-loop-{}", std::process::id()));
    let mut w = StreamWriter::open(&dir, TokenFormat::<u16>::new())?;
    for shard in 0..2u64 {
        let tokens: Vec<u32> = (0..4_000).map(|i| (i * 7 + shard as u32) % 50_000).collect();
        w.append(shard, &tokens)?;
    }
    w.commit()?;

    // 2. A shuffled, prefetching loader of 129-token windows collated to [8, 129] buffers.
    let build = || -> Result<_, Box<dyn std::error::Error>> {
        let windows = StreamWindows::open(&dir, TokenFormat::<u16>::new(), 129)?;
        Ok(Loader::builder(windows)
            .shuffle(7)
            .epochs(2)
            .batch_size(8)
            .drop_remainder(true)
            .workers(2)
            .prefetch(4)
            .collate(StackTokens)
            .build()?)
    };
    let loader = build()?;
    let mut it = loader.iter();
    let mut checkpoint = None;
    let mut seen = Vec::new();
    while let Some(batch) = it.next() {
        let batch = batch?;
        assert_eq!(batch.data.shape(), [8, 129]);
        seen.push(batch.data.into_vec()); // train_step(&batch.data) would go here
        if seen.len() == 5 {
            checkpoint = Some(it.state().to_json()); // save with the model weights
        }
    }
    println!("trained on {} batches of {:?} windows", seen.len(), [8, 129]);

    // 3. Resume from the checkpoint in a fresh loader (after a crash, on another machine...).
    let state = State::from_json(&checkpoint.ok_or("no checkpoint")?)?;
    let resumed: Vec<Vec<u16>> =
        build()?.iter_from(&state)?.map(|b| b.map(|b| b.data.into_vec())).collect::<Result<_, _>>()?;
    assert_eq!(resumed, seen[5..]);
    println!(
        "resumed after batch {}: {} batches, identical to the uninterrupted run",
        state.next_batch,
        resumed.len()
    );
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
