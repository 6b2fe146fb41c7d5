//! A language-model training loop over a guideloom storage, with checkpoint and resume.
//! Run: `cargo run --example train_loop`.
use std::path::Path;

use guideloom::formats::TokenFormat;
use guideloom::loader::{Loader, LoaderError, State, TokenLoader, TokenWindows};
use guideloom::storage::{ReadOptions, StreamWriter};

/// Tokens the model sees per row (the context length L).
const L: u64 = 128;
/// Rows per batch.
const BATCH: u64 = 8;

/// A shuffled, prefetching loader of windows of L + 1 tokens at stride L (every token is a
/// target once), read straight into `[BATCH, L + 1]` buffers of i64 ids (what an embedding
/// layer takes) whatever token dtype (u16 or u32) the storage holds. `TokenLoader` names the
/// type, so the loader can be returned.
fn build(dir: &Path) -> Result<TokenLoader<i64>, LoaderError> {
    let windows = TokenWindows::<i64>::open_with(dir, L + 1, L, ReadOptions::default())?;
    let collate = windows.collate();
    Loader::builder(windows)
        .shuffle(7)
        .epochs(2)
        .batch_size(BATCH)
        .drop_remainder(true)
        .workers(2)
        .prefetch(4)
        .collate(collate)
        .build()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // 1. Write a small token storage over two shards (a real job runs `guideloom ingest`).
    let dir = std::env::temp_dir().join(format!("guideloom-train-loop-{}", std::process::id()));
    let mut w = StreamWriter::open(&dir, TokenFormat::<u16>::new())?;
    for shard in 0..2u64 {
        let tokens: Vec<u32> = (0..4_000).map(|i| (i * 7 + shard as u32) % 50_000).collect();
        w.append(shard, &tokens)?;
    }
    w.commit()?;

    // 2. Train: each [8, 129] batch splits into [8, 128] inputs and the [8, 128] targets
    // (the same rows shifted by one token).
    let loader = build(&dir)?;
    let mut it = loader.iter();
    let mut checkpoint = None;
    let mut seen = Vec::new();
    while let Some(batch) = it.next() {
        let batch = batch?;
        assert_eq!(batch.data.shape(), [BATCH as usize, L as usize + 1]);
        let (inputs, targets) = batch.data.inputs_targets();
        assert_eq!(inputs.shape(), [BATCH as usize, L as usize]);
        assert_eq!(inputs.row(0).map(|r| &r[1..]), targets.row(0).map(|r| &r[..L as usize - 1]));
        seen.push((inputs.into_vec(), targets.into_vec())); // train_step(inputs, targets) here
        if seen.len() == 5 {
            checkpoint = Some(it.state().to_json()); // save with the model weights
        }
    }
    println!("trained on {} batches of {BATCH} x {L} inputs and targets", seen.len());

    // 3. Resume from the checkpoint in a fresh loader (after a crash, on another machine...).
    let state = State::from_json(&checkpoint.ok_or("no checkpoint")?)?;
    let resumed: Vec<(Vec<i64>, Vec<i64>)> = build(&dir)?
        .iter_from(&state)?
        .map(|b| {
            b.map(|b| {
                let (inputs, targets) = b.data.inputs_targets();
                (inputs.into_vec(), targets.into_vec())
            })
        })
        .collect::<Result<_, _>>()?;
    assert_eq!(resumed, seen[5..]);
    println!(
        "resumed after batch {}: {} batches, identical to the uninterrupted run",
        state.next_batch,
        resumed.len()
    );
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
