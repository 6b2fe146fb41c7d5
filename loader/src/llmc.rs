//! llm.c's sequential batch order (karpathy/llm.c `llmc/dataloader.h`, `DataLoader` without
//! shuffling): shards in sorted-name order, and in each shard the windows of `B * T + 1`
//! tokens that process `rank` of `P` reads at token `idx * P * B * T + rank * B * T`, for
//! `idx < (ntok - 1) / (P * B * T)`; after the last shard it wraps to the first.

use guideloom_storage::foreign::ForeignDataset;
use guideloom_storage::Window;

use crate::LoaderError;

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
