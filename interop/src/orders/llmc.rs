//! llm.c's sequential batch order (karpathy/llm.c `llmc/dataloader.h`, `DataLoader` without
//! shuffling): shards in sorted-name order, and in each shard the windows of `B * T + 1`
//! tokens that process `rank` of `P` reads at token `idx * P * B * T + rank * B * T`, for
//! `idx < (ntok - 1) / (P * B * T)`; after the last shard it wraps to the first. And its
//! shuffled order (`should_shuffle`, [`llmc_shuffled_windows`]), and the positions llm.c's
//! checkpoints (`state_*.bin`, [`LlmcCheckpoint`]) store, mapped to loader states.

use guideloom_loader::State;
use guideloom_storage::Window;

use crate::dataset::ForeignDataset;
use crate::error::{InteropError, Result};
use crate::orders::megatron::mt19937::Mt19937;

/// The windows llm.c's sequential `DataLoader` reads from the shards of `data` (an llm.c
/// dataset, one file per shard), as records in the order the loader's sampler deals them:
/// shard by shard, batch position by batch position, process by process. A loader over
/// [`Spans`](guideloom_loader::Spans) of these windows with shuffling off, `batch_size(1)` and
/// `shard(rank, processes)` gives process `rank` llm.c's batches in llm.c's order (each
/// record: `B * T + 1` tokens, inputs the first `B * T`, targets shifted by one); more
/// epochs wrap to the first shard, as llm.c does. A shard too short for one window
/// contributes none.
///
/// ```
/// use guideloom_interop::{llmc_windows, ForeignDataset, ForeignFormat, ForeignOptions};
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
/// [`InteropError::InvalidConfig`] when `batch`, `seq` or `processes` is 0 or `B * T * P`
/// overflows.
pub fn llmc_windows(data: &ForeignDataset, batch: u64, seq: u64, processes: u64) -> Result<Vec<Window>> {
    let (bt, step) = steps(batch, seq, processes)?;
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
/// [`Loader::initial_state`](guideloom_loader::Loader::initial_state) is `initial` (`batch_size(1)`,
/// world size `processes`, shuffle off). The next step is the batch llm.c would read next.
///
/// `sample` may equal the shard's batch count: llm.c moves to the next shard lazily, before
/// the next batch, so a checkpoint written after a shard's last batch stores that count; the
/// next batch is then the next shard's first (after the last shard, the first shard's).
///
/// # Errors
/// [`InteropError::InvalidConfig`] (field `llmc`) when `initial`'s global batch is not
/// `processes`, `shard` is not a shard of `data`, or `sample` is more than its batch count.
pub fn llmc_resume_state(
    initial: &State,
    data: &ForeignDataset,
    (batch, seq, processes): (u64, u64, u64),
    shard: u64,
    sample: u64,
) -> Result<State> {
    let bad = |detail: String| InteropError::InvalidConfig { field: "llmc", detail };
    let (_, step) = steps(batch, seq, processes)?;
    if initial.global_batch != processes {
        return Err(bad(format!(
            "the loader's global batch is {}; llm.c's {processes} processes take one window each per step",
            initial.global_batch
        )));
    }
    let per: Vec<u64> = data.files().iter().map(|f| f.elements.saturating_sub(1) / step).collect();
    let here = usize::try_from(shard).ok().and_then(|s| per.get(s)).copied();
    let here = here.ok_or_else(|| bad(format!("shard {shard} of {}", per.len())))?;
    if sample > here {
        return Err(bad(format!("batch position {sample} of shard {shard}, which holds {here}")));
    }
    let before: u64 = per[..shard as usize].iter().sum();
    Ok(State { next_batch: before + sample, ..*initial })
}

/// `(B * T, P * B * T)`, checked.
fn steps(batch: u64, seq: u64, processes: u64) -> Result<(u64, u64)> {
    // B*T*P > 0 implies B*T > 0: one check of the product covers every factor.
    let bt = batch.checked_mul(seq);
    let step = bt.and_then(|n| n.checked_mul(processes)).filter(|&n| n > 0);
    match (bt, step) {
        (Some(bt), Some(step)) => Ok((bt, step)),
        _ => Err(InteropError::InvalidConfig {
            field: "llmc",
            detail: format!(
                "B = {batch}, T = {seq}, processes = {processes}: each must be > 0 and B*T*P fit u64"
            ),
        }),
    }
}

/// llm.c's `random_permutation` (`llmc/rand.h`): Fisher-Yates from the back with
/// `j = randint32() % (i + 1)` (a plain modulo, unlike NumPy's masked rejection).
fn permute<T>(a: &mut [T], rng: &mut Mt19937) {
    for i in (1..a.len()).rev() {
        let j = rng.next_u32() as usize % (i + 1);
        a.swap(i, j);
    }
}

/// llm.c's shuffled walk for one process: per epoch the shard order (permuted in place, so
/// epoch `e` permutes epoch `e - 1`'s order), then per shard a fresh permutation of its
/// batch positions; `visit(epoch, shard order, position in it, positions, rng)` sees
/// each shard after its permutation was drawn. Stops when `visit` returns `false`.
fn walk_shuffled(
    per: &[u64],
    rank: u64,
    epochs: u64,
    mut visit: impl FnMut(u64, &[usize], usize, &[u64], &Mt19937) -> bool,
) -> Result<()> {
    // manual_seed(42 + process_rank) with an unsigned int seed.
    let seed = rank.checked_add(42).filter(|&s| s <= u64::from(u32::MAX));
    let seed = seed.ok_or_else(|| InteropError::InvalidConfig {
        field: "llmc",
        detail: format!("process rank {rank}: llm.c seeds its shuffle with 42 + rank, an unsigned int"),
    })?;
    let mut rng = Mt19937::new(seed)?;
    let mut shards: Vec<usize> = (0..per.len()).collect();
    let mut positions = Vec::new();
    for epoch in 0..epochs {
        permute(&mut shards, &mut rng);
        for (at, &s) in shards.iter().enumerate() {
            positions.clear();
            positions.extend(0..per[s]);
            permute(&mut positions, &mut rng);
            if !visit(epoch, &shards, at, &positions, &rng) {
                return Ok(());
            }
        }
    }
    Ok(())
}

/// Batches per shard (`(ntok - 1) / (P * B * T)`) and the first token of each shard.
fn shard_batches(data: &ForeignDataset, step: u64) -> (Vec<u64>, Vec<u64>) {
    let mut start = 0u64;
    data.files()
        .iter()
        .map(|f| {
            let s = start;
            start += f.elements;
            (f.elements.saturating_sub(1) / step, s)
        })
        .unzip()
}

/// The windows process `rank` of `processes` reads from `data` (an llm.c dataset, shards in
/// sorted-name order) with llm.c's shuffling on (`dataloader_init(..., should_shuffle = 1)`,
/// karpathy/llm.c `llmc/dataloader.h` and `llmc/rand.h`), for `epochs` epochs, in order:
/// each process seeds llm.c's MT19937 (`manual_seed`, the classic `init_genrand`) with
/// `42 + rank`; every epoch permutes the shard order in place (`random_permutation`, draws
/// `randint32() % (i + 1)`), then for each shard in that order draws a permutation of its
/// batch positions `0 .. (ntok - 1) / (P * B * T)` and reads the window of `B * T + 1`
/// tokens at token `idx * P * B * T + rank * B * T` for each position `idx`. The processes'
/// orders differ (each has its own generator), so each gets its own list: a loader over
/// [`Spans`](guideloom_loader::Spans) of it with shuffling off, `batch_size(1)`, one rank, one epoch
/// gives llm.c's batches of that process. A shard too short for one window contributes none
/// (llm.c refuses it).
///
/// ```
/// use guideloom_interop::{llmc_shuffled_windows, ForeignDataset, ForeignFormat, ForeignOptions};
/// let dir = tempfile::tempdir()?;
/// let mut shard = vec![0u8; 1024];
/// shard[..12].copy_from_slice(&[0x88, 0xd8, 0x34, 0x01, 1, 0, 0, 0, 9, 0, 0, 0]);
/// shard.extend((0u16..9).flat_map(|t| t.to_le_bytes()));
/// std::fs::write(dir.path().join("x_train_000001.bin"), shard)?;
/// let data = ForeignDataset::open(dir.path().join("x_train_000001.bin"), &ForeignOptions::new().format(ForeignFormat::Llmc))?;
/// let starts: Vec<u64> = llmc_shuffled_windows(&data, (1, 2, 1), 0, 2)?.iter().map(|w| w.offset).collect();
/// // llm.c's own DataLoader reads these windows in this order (measured).
/// assert_eq!(starts, [2, 0, 6, 4, 6, 2, 0, 4]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
/// [`InteropError::InvalidConfig`] (field `llmc`) when `batch`, `seq` or `processes` is 0,
/// `B * T * P` overflows, `rank >= processes` or `42 + rank` is not a u32.
pub fn llmc_shuffled_windows(
    data: &ForeignDataset,
    (batch, seq, processes): (u64, u64, u64),
    rank: u64,
    epochs: u64,
) -> Result<Vec<Window>> {
    let (bt, step) = steps(batch, seq, processes)?;
    check_rank(rank, processes)?;
    let (per, starts) = shard_batches(data, step);
    let mut out = Vec::new();
    walk_shuffled(&per, rank, epochs, |_, order, at, positions, _| {
        let s = order[at];
        out.extend(positions.iter().map(|&idx| Window::new(starts[s] + idx * step + rank * bt, bt + 1)));
        true
    })?;
    Ok(out)
}

fn check_rank(rank: u64, processes: u64) -> Result<()> {
    if rank >= processes {
        return Err(InteropError::InvalidConfig {
            field: "llmc",
            detail: format!("process rank {rank} of {processes} processes"),
        });
    }
    Ok(())
}

/// The loader state that continues process `rank`'s shuffled llm.c run from its
/// `DataLoader`'s position in epoch `epoch` (0 for the first pass over the shards):
/// `shard` is `current_shard_idx` (a position in that epoch's shard order) and `sample` is
/// `current_sample_idx` (batches read from that shard, up to its batch count), for a loader
/// over [`llmc_shuffled_windows`] of the same `data`, `(batch, seq, processes)` and `rank`
/// with [`Loader::initial_state`](guideloom_loader::Loader::initial_state) `initial` (`batch_size(1)`,
/// one rank, shuffle off). The next step is the batch llm.c would read next. llm.c does not
/// store the epoch; [`LlmcCheckpoint::epoch`] finds it from a checkpoint's shuffle state.
///
/// # Errors
/// [`InteropError::InvalidConfig`] (field `llmc`) as [`llmc_shuffled_windows`], when
/// `initial`'s global batch is not 1, `shard` is not a shard position, or `sample` is more
/// than that shard's batch count.
pub fn llmc_shuffled_resume_state(
    initial: &State,
    data: &ForeignDataset,
    (batch, seq, processes): (u64, u64, u64),
    rank: u64,
    (epoch, shard, sample): (u64, u64, u64),
) -> Result<State> {
    let bad = |detail: String| InteropError::InvalidConfig { field: "llmc", detail };
    let (_, step) = steps(batch, seq, processes)?;
    check_rank(rank, processes)?;
    if initial.global_batch != 1 {
        return Err(bad(format!(
            "the loader's global batch is {}; a shuffled llm.c process takes one window per step",
            initial.global_batch
        )));
    }
    let (per, _) = shard_batches(data, step);
    if usize::try_from(shard).map_or(true, |s| s >= per.len()) {
        return Err(bad(format!("shard position {shard} of {}", per.len())));
    }
    let per_epoch: u64 = per.iter().sum();
    let mut before = epoch.checked_mul(per_epoch).ok_or_else(|| bad(format!("epoch {epoch} overflows")))?;
    let mut found = None;
    // O(epoch x batches per epoch): the generator is replayed up to that epoch.
    walk_shuffled(&per, rank, epoch.saturating_add(1), |e, order, at, _, _| {
        let s = order[at];
        if e < epoch {
            return true;
        }
        if at as u64 == shard {
            found = Some(per[s]);
            return false;
        }
        before += per[s];
        true
    })?;
    let here = found.ok_or_else(|| bad(format!("shard position {shard}")))?;
    if sample > here {
        return Err(bad(format!("batch position {sample} of shard position {shard}, which holds {here}")));
    }
    Ok(State { next_batch: before + sample, ..*initial })
}

/// The data-loader fields of an llm.c checkpoint (`state_%08d_%05d.bin`, written by
/// karpathy/llm.c `train_gpt2.cu` `save_state`): a header of 256 little-endian int32 —
/// `[0]` magic 20240527, `[1]` version 1, `[2]` processes, `[3]` rank, `[5]` shuffle flag,
/// `[10]` step, and the `size_t` (u64) `current_shard_idx` at int 30 and `current_sample_idx`
/// at int 32 — then the optimizer state, and, when shuffling, a tail of the shard count
/// (u64), the current shard order (int32 each), the current shard's batch count (u64), its
/// batch permutation (int32 each) and the `mt19937_state` struct (2520 bytes: `seed_` u64,
/// `left_` int32, `next_` u32, `state_` 624 × u32, `MATRIX_A` 2 × u32).
///
/// Map it with [`llmc_resume_state`] (sequential: `shard`, `sample`) or
/// [`llmc_shuffled_resume_state`] (shuffled: [`LlmcCheckpoint::epoch`], `shard`, `sample`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct LlmcCheckpoint {
    /// `num_processes` of the run.
    pub processes: u64,
    /// `process_rank` of the process that wrote the file.
    pub rank: u64,
    /// Whether its training loader shuffled.
    pub shuffle: bool,
    /// The optimization step.
    pub step: u64,
    /// `current_shard_idx`: the shard (position in the epoch's shard order when shuffling).
    pub shard: u64,
    /// `current_sample_idx`: batches read from that shard.
    pub sample: u64,
}

/// The most permutation steps (shards and batch positions drawn) [`LlmcCheckpoint::epoch`]
/// replays looking for a checkpoint's epoch (2^28: seconds of work).
const LLMC_EPOCH_SEARCH_STEPS: u64 = 1 << 28;

/// Bytes of llm.c's `mt19937_state` struct on a 64-bit platform.
const LLMC_RNG_BYTES: usize = 8 + 4 + 4 + 624 * 4 + 8;

fn checkpoint_error(detail: String) -> InteropError {
    InteropError::ForeignCheckpoint { what: "llm.c checkpoint", detail }
}

fn le_u64(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

fn le_u32(b: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(w)
}

impl LlmcCheckpoint {
    /// The header's size in bytes (256 int32).
    pub const HEADER_BYTES: usize = 1024;

    /// The fields of the header, the file's first [`Self::HEADER_BYTES`] bytes.
    ///
    /// # Errors
    /// [`InteropError::ForeignCheckpoint`] when `header` is shorter than 1024 bytes, the magic
    /// is not 20240527, the version not 1, or the process count or rank is out of range.
    pub fn parse_header(header: &[u8]) -> Result<Self> {
        if header.len() < Self::HEADER_BYTES {
            return Err(checkpoint_error(format!("{} bytes, need a 1024-byte header", header.len())));
        }
        let int = |i: usize| le_u32(header, 4 * i) as i32;
        if int(0) != 20_240_527 {
            return Err(checkpoint_error(format!("magic {} (expected 20240527)", int(0))));
        }
        if int(1) != 1 {
            return Err(checkpoint_error(format!("version {} (expected 1)", int(1))));
        }
        let (processes, rank) = (int(2), int(3));
        // `0 <= rank < processes` also refuses a process count below 1.
        if rank < 0 || rank >= processes {
            return Err(checkpoint_error(format!("rank {rank} of {processes} processes")));
        }
        Ok(LlmcCheckpoint {
            processes: processes as u64,
            rank: rank as u64,
            shuffle: int(5) != 0,
            step: u64::from(int(10) as u32),
            shard: le_u64(header, 120),
            sample: le_u64(header, 128),
        })
    }

    /// The most bytes the shuffle tail of a checkpoint over `data` with `(batch, seq)` can
    /// take: pass at least this many of the file's last bytes (or all of a smaller file) to
    /// [`LlmcCheckpoint::epoch`].
    ///
    /// # Errors
    /// As [`llmc_shuffled_windows`].
    pub fn tail_bytes(&self, data: &ForeignDataset, (batch, seq): (u64, u64)) -> Result<u64> {
        let (_, step) = steps(batch, seq, self.processes)?;
        let (per, _) = shard_batches(data, step);
        let most = per.iter().copied().max().unwrap_or(0);
        Ok(16 + 4 * per.len() as u64 + 4 * most + LLMC_RNG_BYTES as u64)
    }

    /// The epoch (0-based) of a shuffled checkpoint: the one whose shard order, current
    /// shard's batch permutation and generator state, computed as
    /// [`llmc_shuffled_windows`] does for this rank, equal the tail's. `tail` holds the
    /// file's last bytes (at least [`LlmcCheckpoint::tail_bytes`], or the whole file); epochs
    /// `0 .. max_epochs` are tried, within 2^28 replayed permutation steps (an epoch that
    /// draws nothing, one shard of at most one batch, equals the first: only epoch 0 is
    /// tried then).
    ///
    /// # Errors
    /// [`InteropError::ForeignCheckpoint`] when the checkpoint is not a shuffled one, or no
    /// epoch below `max_epochs` matches (another dataset, B, T or process count);
    /// [`InteropError::InvalidConfig`] as [`llmc_shuffled_windows`].
    pub fn epoch(
        &self,
        tail: &[u8],
        data: &ForeignDataset,
        (batch, seq): (u64, u64),
        max_epochs: u64,
    ) -> Result<u64> {
        self.epoch_within(tail, data, (batch, seq), max_epochs, LLMC_EPOCH_SEARCH_STEPS)
    }

    /// [`LlmcCheckpoint::epoch`] with at most `budget` replayed permutation steps.
    fn epoch_within(
        &self,
        tail: &[u8],
        data: &ForeignDataset,
        (batch, seq): (u64, u64),
        max_epochs: u64,
        budget: u64,
    ) -> Result<u64> {
        if !self.shuffle {
            return Err(checkpoint_error("not a shuffled run: it stores no epoch state".into()));
        }
        let (_, step) = steps(batch, seq, self.processes)?;
        let (per, _) = shard_batches(data, step);
        let n = per.len();
        // Bounded whatever `max_epochs` is: an epoch that draws nothing (one shard of at most
        // one batch) leaves the generator as it was, so every epoch equals the first; others
        // are replayed within `budget` permutation steps.
        let draws = per.iter().fold(n as u64, |a, &p| a.saturating_add(p));
        let draws_nothing = n <= 1 && per.iter().all(|&p| p <= 1);
        let tried = if draws_nothing { 1 } else { max_epochs.min(budget / draws.max(1)).max(1) };
        let tried = tried.min(max_epochs);
        let mut found = None;
        walk_shuffled(&per, self.rank, tried, |e, order, at, positions, rng| {
            if at as u64 != self.shard {
                return true;
            }
            if tail_matches(tail, order, positions, rng) {
                found = Some(e);
                return false;
            }
            true
        })?;
        found.ok_or_else(|| {
            let bound = if tried < max_epochs {
                format!(" (the search stops after {tried} epochs: each draws {draws} permutation steps, at most {budget} are replayed)")
            } else {
                String::new()
            };
            checkpoint_error(format!(
                "no epoch below {tried} of rank {} over these {n} shards (B = {batch}, T = {seq}, \
                 {} processes) has the checkpoint's shard order, batch permutation and generator state{bound}",
                self.rank, self.processes
            ))
        })
    }
}

/// Whether the last bytes of `tail` are llm.c's shuffle tail for this shard order, batch
/// permutation and generator.
fn tail_matches(tail: &[u8], order: &[usize], positions: &[u64], rng: &Mt19937) -> bool {
    let (n, k) = (order.len(), positions.len());
    let need = 16 + 4 * n + 4 * k + LLMC_RNG_BYTES;
    if tail.len() < need {
        return false;
    }
    let t = &tail[tail.len() - need..];
    if le_u64(t, 0) != n as u64 {
        return false;
    }
    if (0..n).any(|i| u64::from(le_u32(t, 8 + 4 * i)) != order[i] as u64) {
        return false;
    }
    let at = 8 + 4 * n;
    if le_u64(t, at) != k as u64 || (0..k).any(|i| u64::from(le_u32(t, at + 8 + 4 * i)) != positions[i]) {
        return false;
    }
    let r = at + 8 + 4 * k;
    let next = le_u32(t, r + 12) as usize;
    let (words, index) = rng.words();
    // A generator that drew nothing: llm.c's next_ is 0, ours points past the state (624).
    let same_place = next == index || (next == 0 && index == 624);
    same_place && (0..624).all(|i| le_u32(t, r + 16 + 4 * i) == words[i])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ForeignFormat, ForeignOptions};

    /// An llm.c dataset of `shards` shards (`x_train_00000k.bin`, k from 1) of `tokens` gpt-2
    /// tokens each under `dir`: llm.c's 1024-byte header and the tokens as u16.
    fn dataset(dir: &std::path::Path, shards: u32, tokens: u16) -> ForeignDataset {
        for k in 1..=shards {
            let mut shard = vec![0u8; 1024];
            for (i, v) in [20240520u32, 1, u32::from(tokens)].into_iter().enumerate() {
                shard[4 * i..4 * i + 4].copy_from_slice(&v.to_le_bytes());
            }
            shard.extend((0..tokens).flat_map(|t| t.to_le_bytes()));
            std::fs::write(dir.join(format!("x_train_{k:06}.bin")), shard).unwrap();
        }
        let options = ForeignOptions::new().format(ForeignFormat::Llmc);
        ForeignDataset::open(dir.join("x_train_*.bin"), &options).unwrap()
    }

    /// A shuffled run's checkpoint of rank 0 of 1 process at shard position `shard`.
    fn checkpoint(shard: u64) -> LlmcCheckpoint {
        LlmcCheckpoint { processes: 1, rank: 0, shuffle: true, step: 0, shard, sample: 0 }
    }

    /// llm.c's shuffle tail (`save_state`: the shard count and order, the batch count and
    /// permutation, `mt19937_state`) of rank 0's walk over `per` at `epoch`, shard position `at`.
    fn tail_at(per: &[u64], epoch: u64, at: usize) -> Vec<u8> {
        let mut out = None;
        walk_shuffled(per, 0, epoch + 1, |e, order, a, positions, rng| {
            if (e, a) != (epoch, at) {
                return true;
            }
            let (words, index) = rng.words();
            let mut t = Vec::new();
            t.extend((order.len() as u64).to_le_bytes());
            t.extend(order.iter().flat_map(|&o| (o as u32).to_le_bytes()));
            t.extend((positions.len() as u64).to_le_bytes());
            t.extend(positions.iter().flat_map(|&p| (p as u32).to_le_bytes()));
            t.extend(42u64.to_le_bytes());
            t.extend(1i32.to_le_bytes());
            t.extend((index as u32).to_le_bytes());
            t.extend(words.iter().flat_map(|w| w.to_le_bytes()));
            t.extend([0u32, 0x9908_b0df].iter().flat_map(|m| m.to_le_bytes()));
            out = Some(t);
            false
        })
        .unwrap();
        out.unwrap()
    }

    /// Issue 33 (mutant of `draws_nothing`'s `&&` -> `||`): only one shard of at most one
    /// batch draws nothing; two shards of one batch each draw the shard order every epoch,
    /// and one shard of two batches its batch order, so their later epochs are searched.
    #[test]
    fn issue33_orders_llmc_the_epoch_search_skips_only_a_walk_that_draws_nothing() {
        let dir = tempfile::tempdir().unwrap();
        // B = T = 1: 2 tokens are one batch per shard, 3 tokens two.
        for (shards, tokens, per) in [(2, 2, vec![1, 1]), (1, 3, vec![2])] {
            let sub = dir.path().join(format!("{shards}-{tokens}"));
            std::fs::create_dir(&sub).unwrap();
            let data = dataset(&sub, shards, tokens);
            for epoch in [1, 3] {
                let tail = tail_at(&per, epoch, 0);
                let found = checkpoint(0).epoch(&tail, &data, (1, 1), 10).unwrap();
                assert_eq!(found, epoch, "{per:?}");
            }
        }
    }

    /// Issue 33 (mutants of the epoch bound `budget / draws` and of `tried < max_epochs`):
    /// the search tries `min(max_epochs, budget / draws)` epochs, `draws` = shards + batches
    /// (here 1 + 3 = 4), and says it stopped early only when the bound, not `max_epochs`,
    /// ended it.
    #[test]
    fn issue33_orders_llmc_the_epoch_search_stops_at_its_budget() {
        let dir = tempfile::tempdir().unwrap();
        let data = dataset(dir.path(), 1, 4);
        let tail = tail_at(&[3], 2, 0);
        let c = checkpoint(0);
        let none = "no epoch below 2 of rank 0 over these 1 shards (B = 1, T = 1, 1 processes) has the \
                    checkpoint's shard order, batch permutation and generator state";
        let err = |r: Result<u64>| match r {
            Err(InteropError::ForeignCheckpoint { what: "llm.c checkpoint", detail }) => detail,
            other => panic!("expected no epoch, got {other:?}"),
        };
        assert_eq!(
            err(c.epoch_within(&tail, &data, (1, 1), 10, 8)),
            format!(
                "{none} (the search stops after 2 epochs: each draws 4 permutation steps, at most 8 are replayed)"
            )
        );
        assert_eq!(c.epoch_within(&tail, &data, (1, 1), 10, 12).unwrap(), 2);
        assert_eq!(err(c.epoch_within(&tail, &data, (1, 1), 2, LLMC_EPOCH_SEARCH_STEPS)), none);
        assert_eq!(c.epoch_within(&tail, &data, (1, 1), 3, 12).unwrap(), 2);
        assert_eq!(c.epoch(&tail, &data, (1, 1), 3).unwrap(), 2);
    }
}
