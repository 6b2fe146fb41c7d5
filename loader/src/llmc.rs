//! llm.c's sequential batch order (karpathy/llm.c `llmc/dataloader.h`, `DataLoader` without
//! shuffling): shards in sorted-name order, and in each shard the windows of `B * T + 1`
//! tokens that process `rank` of `P` reads at token `idx * P * B * T + rank * B * T`, for
//! `idx < (ntok - 1) / (P * B * T)`; after the last shard it wraps to the first.

use guideloom_storage::foreign::ForeignDataset;
use guideloom_storage::Window;

use crate::{LoaderError, State};

/// The windows llm.c's sequential `DataLoader` reads from the shards of `data` (an llm.c
/// dataset, one file per shard), as records in the order the loader's sampler deals them:
/// shard by shard, batch position by batch position, process by process. A loader over
/// [`Spans`](crate::Spans) of these windows with shuffling off, `batch_size(1)` and
/// `shard(rank, processes)` gives process `rank` llm.c's batches in llm.c's order (each
/// record: `B * T + 1` tokens, inputs the first `B * T`, targets shifted by one); more
/// epochs wrap to the first shard, as llm.c does. A shard too short for one window
/// contributes none.
///
/// ```
/// use guideloom_loader::llmc_windows;
/// use guideloom_storage::foreign::{ForeignDataset, ForeignFormat, ForeignOptions};
/// use guideloom_storage::Window;
/// let dir = tempfile::tempdir()?;
/// let mut shard = vec![0u8; 1024];
/// shard[..12].copy_from_slice(&[0x88, 0xd8, 0x34, 0x01, 1, 0, 0, 0, 5, 0, 0, 0]);
/// shard.extend((0u16..5).flat_map(|t| t.to_le_bytes()));
/// std::fs::write(dir.path().join("x_val_000000.bin"), shard)?;
/// let data = ForeignDataset::open(dir.path().join("x_val_000000.bin"), &ForeignOptions::new().format(ForeignFormat::Llmc))?;
/// assert_eq!(llmc_windows(&data, 1, 2, 1)?, [Window::new(0, 3), Window::new(2, 3)]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
/// [`LoaderError::InvalidConfig`] when `batch`, `seq` or `processes` is 0 or `B * T * P`
/// overflows.
pub fn llmc_windows(
    data: &ForeignDataset,
    batch: u64,
    seq: u64,
    processes: u64,
) -> Result<Vec<Window>, LoaderError> {
    let bt = batch.checked_mul(seq).filter(|&n| n > 0);
    let step = bt.and_then(|n| n.checked_mul(processes)).filter(|&n| n > 0);
    let (Some(bt), Some(step)) = (bt, step) else {
        return Err(LoaderError::InvalidConfig {
            field: "llmc",
            detail: format!(
                "B = {batch}, T = {seq}, processes = {processes}: each must be > 0 and B*T*P fit u64"
            ),
        });
    };
    let mut out = Vec::new();
    let mut start = 0u64;
    for f in data.files() {
        let batches = f.elements.saturating_sub(1) / step;
        for idx in 0..batches {
            for rank in 0..processes {
                out.push(Window::new(start + idx * step + rank * bt, bt + 1));
            }
        }
        start += f.elements;
    }
    Ok(out)
}

/// The loader state that continues an llm.c run from its `DataLoader`'s position
/// (`current_shard_idx`, `current_sample_idx`: the shard and the batch position inside it,
/// what llm.c's checkpoint stores and `dataloader_resume` restores), for a loader over
/// [`llmc_windows`] of the same `data`, `batch`, `seq` and `processes`, whose
/// [`Loader::initial_state`](crate::Loader::initial_state) is `initial` (`batch_size(1)`,
/// world size `processes`, shuffle off). The next step is the batch llm.c would read next.
///
/// # Errors
/// [`LoaderError::InvalidConfig`] (field `llmc`) when `initial`'s global batch is not
/// `processes`, `shard` is not a shard of `data`, or `sample` is not a batch position of it.
pub fn llmc_resume_state(
    initial: &State,
    data: &ForeignDataset,
    (batch, seq, processes): (u64, u64, u64),
    shard: u64,
    sample: u64,
) -> Result<State, LoaderError> {
    let bad = |detail: String| LoaderError::InvalidConfig { field: "llmc", detail };
    let step = batch.saturating_mul(seq).saturating_mul(processes).max(1);
    if initial.global_batch != processes {
        return Err(bad(format!(
            "the loader's global batch is {}; llm.c's {processes} processes take one window each per step",
            initial.global_batch
        )));
    }
    let per: Vec<u64> = data.files().iter().map(|f| f.elements.saturating_sub(1) / step).collect();
    let here = usize::try_from(shard).ok().and_then(|s| per.get(s)).copied();
    let here = here.ok_or_else(|| bad(format!("shard {shard} of {}", per.len())))?;
    if sample >= here {
        return Err(bad(format!("batch position {sample} of shard {shard}, which holds {here}")));
    }
    let before: u64 = per[..shard as usize].iter().sum();
    Ok(State { next_batch: before + sample, ..*initial })
}
