//! The sampler: a pure function from this rank's step (or batch number) to record indices.

use serde::{Deserialize, Serialize};

use crate::{LoaderError, Permutation};

/// The most padding records an epoch may need beyond its own record count (see
/// [`Sampler::new`]): an epoch pads at most `max(records, MAX_PADDING)` records.
pub const MAX_PADDING: u64 = 1 << 20;

/// The sampling configuration: shuffle, epochs, batching and data-parallel sharding.
///
/// It is part of a loader's [`State`](crate::State): restoring a state into a loader with a
/// different configuration is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SamplerConfig {
    /// Seed of the per-epoch permutations and of the per-record RNGs (default 0).
    pub seed: u64,
    /// Whether each epoch visits the records in a seeded pseudo-random order (default
    /// `false`: records in index order).
    pub shuffle: bool,
    /// Number of epochs, or `None` for an unbounded stream (default `Some(1)`).
    pub epochs: Option<u64>,
    /// Records per batch per rank, `B` (default 32).
    pub batch_size: u64,
    /// Whether the incomplete final (global) batch of each epoch is dropped (default `false`).
    pub drop_remainder: bool,
    /// This process's data-parallel rank `r`, `0 <= r < world_size` (default 0).
    pub rank: u64,
    /// Number of data-parallel ranks `W` (default 1).
    pub world_size: u64,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig {
            seed: 0,
            shuffle: false,
            epochs: Some(1),
            batch_size: 32,
            drop_remainder: false,
            rank: 0,
            world_size: 1,
        }
    }
}

/// One step of a rank's record sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// The epoch.
    pub epoch: u64,
    /// Position in the epoch's global order, before wrapping (`>= n` for padding).
    pub position: u64,
    /// The record index (`order(position mod n)`).
    pub index: u64,
    /// Whether this step repeats a record to complete the final global batch.
    pub padding: bool,
}

/// The records of one batch of one rank, as computed by [`Sampler::batch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchPlan {
    /// Absolute batch number of this rank (counted from the first batch of epoch 0).
    pub number: u64,
    /// The epoch.
    pub epoch: u64,
    /// Global positions in the epoch's order, before wrapping (`>= n` for padding).
    pub positions: Vec<u64>,
    /// Record indices, parallel to `positions`.
    pub indices: Vec<u64>,
    /// Padding flags, parallel to `positions`.
    pub padding: Vec<bool>,
}

/// Maps this rank's steps and batch numbers to record indices; a pure function of
/// `num_records` and the [`SamplerConfig`].
///
/// # Order and sharding
///
/// Epoch `e` has one global order of the `n` records: `order_e(p) =
/// Permutation::new(n, seed, e).apply(p)` when shuffling, `p` otherwise. With batch size `B` and
/// world size `W`, global batch `g` covers positions `[g*B*W, (g+1)*B*W)` of that order and rank
/// `r` takes the `r`-th run of `B` positions in it: `g*B*W + r*B + i` for `i < B` (shuffle
/// globally, then shard; a rank's run is never reshuffled).
///
/// The final global batch of an epoch may be incomplete:
/// - `drop_remainder` on: it is dropped (`floor(n / (B*W))` batches per epoch); as each
///   epoch has its own order, different records fall in the dropped tail each epoch.
/// - off, `W == 1`: the last batch holds the `n mod B` remaining records
///   (`ceil(n / B)` batches).
/// - off, `W > 1`: positions `p >= n` wrap to `p mod n` (the start of the epoch's order) and
///   are flagged as padding, so every rank gets `B` records in each of the `ceil(n / (B*W))`
///   batches.
///
/// No batch is empty and no batch spans two epochs. Batch number `k` of a rank is batch
/// `k mod G` of epoch `k / G`, where `G` is [`Sampler::batches_per_epoch`].
///
/// ```
/// use guideloom_loader::{Sampler, SamplerConfig};
/// let cfg = SamplerConfig { batch_size: 2, world_size: 2, rank: 0, ..Default::default() };
/// let s = Sampler::new(5, cfg)?;
/// assert_eq!(s.batches_per_epoch(), 2);
/// let last = s.batch(1).unwrap();
/// assert_eq!(last.indices, [4, 0]);
/// assert_eq!(last.padding, [false, true]);
/// # Ok::<(), guideloom_loader::LoaderError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sampler {
    config: SamplerConfig,
    num_records: u64,
    batches_per_epoch: u64,
    steps_per_epoch: u64,
    total_batches: Option<u64>,
}

impl Sampler {
    /// A sampler over `num_records` records.
    ///
    /// # Errors
    /// [`LoaderError::InvalidConfig`] when `batch_size`, `world_size` or `epochs` is 0,
    /// `rank >= world_size`, or `batch_size * world_size` overflows; with several ranks and no
    /// `drop_remainder`, when an epoch would need more than `max(num_records, MAX_PADDING)`
    /// padding records.
    ///
    /// An empty source (`num_records == 0`), or `drop_remainder` with fewer records than one
    /// global batch (`n < B*W`), is valid and has no batch: `batches_per_epoch() == 0`,
    /// `total_batches() == Some(0)` even when unbounded, and `batch(k)` is `None` for every
    /// `k` (as torch's `DataLoader` and Grain yield nothing over an empty dataset).
    pub fn new(num_records: u64, config: SamplerConfig) -> Result<Self, LoaderError> {
        let bad = |field, detail: String| Err(LoaderError::InvalidConfig { field, detail });
        if config.batch_size == 0 {
            return bad("batch_size", "must be at least 1".into());
        }
        if config.world_size == 0 {
            return bad("world_size", "must be at least 1".into());
        }
        if config.rank >= config.world_size {
            return bad(
                "rank",
                format!("rank {} is not below world size {}", config.rank, config.world_size),
            );
        }
        if config.epochs == Some(0) {
            return bad("epochs", "must be at least 1 (or unbounded)".into());
        }
        let Some(global) = config.batch_size.checked_mul(config.world_size) else {
            return bad("batch_size", "batch_size * world_size overflows u64".into());
        };
        let batches_per_epoch =
            if config.drop_remainder { num_records / global } else { num_records.div_ceil(global) };
        // Batch sizes are user numbers: with several ranks every batch is full, the last
        // global step padded with repeated records. Padding beyond the data itself (and a
        // fixed slack) is a batch size no source supports, refused here instead of allocated
        // (a batch of 10^8 padding records over 50 windows took 15 GB).
        if config.world_size > 1 && !config.drop_remainder {
            let padding = batches_per_epoch.saturating_mul(global).saturating_sub(num_records);
            if padding > num_records.max(MAX_PADDING) {
                return bad(
                    "batch_size",
                    format!(
                        "batch_size {} * world_size {} = {global} records per step over {num_records} records would pad every epoch with {padding} repeated records (at most max(records, {MAX_PADDING})); lower the batch size or drop the remainder",
                        config.batch_size, config.world_size
                    ),
                );
            }
        }
        let steps_per_epoch = if config.world_size == 1 && !config.drop_remainder {
            num_records
        } else {
            batches_per_epoch * config.batch_size
        };
        let total_batches = match config.epochs {
            // Nothing to yield, in any number of epochs.
            _ if batches_per_epoch == 0 => Some(0),
            None => None,
            Some(e) => match batches_per_epoch.checked_mul(e) {
                Some(t) => Some(t),
                None => {
                    return bad("epochs", format!("{e} epochs of {batches_per_epoch} batches overflow u64"))
                }
            },
        };
        Ok(Sampler { config, num_records, batches_per_epoch, steps_per_epoch, total_batches })
    }

    /// The configuration.
    pub fn config(&self) -> &SamplerConfig {
        &self.config
    }

    /// Number of records `n` of the source.
    pub fn num_records(&self) -> u64 {
        self.num_records
    }

    /// Batches per epoch of this rank (equal for every rank).
    pub fn batches_per_epoch(&self) -> u64 {
        self.batches_per_epoch
    }

    /// Steps (records, padding included) per epoch of this rank.
    pub fn steps_per_epoch(&self) -> u64 {
        self.steps_per_epoch
    }

    /// Batches over all epochs, or `None` when epochs are unbounded.
    pub fn total_batches(&self) -> Option<u64> {
        self.total_batches
    }

    /// The permutation of epoch `epoch`, or `None` when not shuffling.
    pub fn permutation(&self, epoch: u64) -> Option<Permutation> {
        self.config.shuffle.then(|| Permutation::new(self.num_records, self.config.seed, epoch))
    }

    /// The record at `position` (`< n`) of epoch `epoch`'s global order, or `None` when
    /// `position >= n`.
    pub fn order(&self, epoch: u64, position: u64) -> Option<u64> {
        match self.permutation(epoch) {
            Some(p) => p.apply(position),
            None => (position < self.num_records).then_some(position),
        }
    }

    /// This rank's step `step` (its `step`-th record, counted from epoch 0), or `None` past
    /// the last epoch.
    pub fn step(&self, step: u64) -> Option<Step> {
        if self.steps_per_epoch == 0 {
            return None;
        }
        let epoch = step / self.steps_per_epoch;
        if self.config.epochs.is_some_and(|e| epoch >= e) {
            return None;
        }
        let j = step % self.steps_per_epoch;
        let position = self.global_position(j / self.config.batch_size, j % self.config.batch_size);
        let wrapped = position % self.num_records;
        let index = self.order(epoch, wrapped)?;
        Some(Step { epoch, position, index, padding: position >= self.num_records })
    }

    /// The records of this rank's batch `number` (absolute, counted from epoch 0), or `None`
    /// past the last batch.
    pub fn batch(&self, number: u64) -> Option<BatchPlan> {
        if self.batches_per_epoch == 0 || self.total_batches.is_some_and(|t| number >= t) {
            return None;
        }
        let epoch = number / self.batches_per_epoch;
        let g = number % self.batches_per_epoch;
        let perm = self.permutation(epoch);
        let b = self.config.batch_size;
        let len = if self.config.world_size == 1 && !self.config.drop_remainder {
            b.min(self.num_records - g * b)
        } else {
            b
        };
        let mut plan = BatchPlan {
            number,
            epoch,
            positions: Vec::with_capacity(len as usize),
            indices: Vec::with_capacity(len as usize),
            padding: Vec::with_capacity(len as usize),
        };
        for i in 0..len {
            let position = self.global_position(g, i);
            let wrapped = position % self.num_records;
            let index = match &perm {
                Some(p) => p.apply(wrapped)?,
                None => wrapped,
            };
            plan.positions.push(position);
            plan.indices.push(index);
            plan.padding.push(position >= self.num_records);
        }
        Some(plan)
    }

    /// Global position of record `i` of this rank's run in global batch `g` of an epoch.
    /// `g < batches_per_epoch` and `i < B` keep it below `ceil(n / BW) * BW <= n + BW`, which
    /// fits u64 since `n` and `B*W` do (`B*W` was checked; a sum overflowing means `n` close to
    /// `u64::MAX`, where saturating keeps the value `>= n`, still a padding position).
    fn global_position(&self, g: u64, i: u64) -> u64 {
        let b = self.config.batch_size;
        g.saturating_mul(b * self.config.world_size).saturating_add(self.config.rank * b).saturating_add(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(b: u64, w: u64, r: u64, drop: bool) -> SamplerConfig {
        SamplerConfig { batch_size: b, world_size: w, rank: r, drop_remainder: drop, ..Default::default() }
    }

    #[test]
    fn single_rank_last_batch_is_short() {
        let s = Sampler::new(34, cfg(16, 1, 0, false)).unwrap();
        assert_eq!(s.batches_per_epoch(), 3);
        assert_eq!(s.batch(2).unwrap().indices, [32, 33]);
        assert_eq!(s.batch(3), None);
        assert_eq!(s.step(33).unwrap().index, 33);
        assert_eq!(s.step(34), None);
    }

    #[test]
    fn drop_remainder_drops_the_global_tail() {
        let s = Sampler::new(10, cfg(2, 2, 1, true)).unwrap();
        assert_eq!(s.batches_per_epoch(), 2);
        assert_eq!(s.batch(0).unwrap().indices, [2, 3]);
        assert_eq!(s.batch(1).unwrap().indices, [6, 7]);
        // Fewer records than one global batch: valid, no batch.
        let s = Sampler::new(3, cfg(2, 2, 0, true)).unwrap();
        assert_eq!(
            (s.batches_per_epoch(), s.total_batches(), s.batch(0), s.step(0)),
            (0, Some(0), None, None)
        );
    }

    #[test]
    fn padding_wraps_to_the_epoch_start() {
        let s = Sampler::new(5, cfg(2, 2, 1, false)).unwrap();
        let b = s.batch(1).unwrap();
        assert_eq!((b.positions, b.indices, b.padding), (vec![6, 7], vec![1, 2], vec![true, true]));
        // B*W larger than n wraps more than once.
        let s = Sampler::new(3, cfg(4, 2, 1, false)).unwrap();
        assert_eq!(s.batch(0).unwrap().indices, [1, 2, 0, 1]);
    }

    #[test]
    fn steps_agree_with_batches() {
        for (n, b, w, drop) in [(34, 16, 1, false), (5, 2, 2, false), (10, 3, 2, true), (100, 7, 3, false)] {
            for r in 0..w {
                let mut c = cfg(b, w, r, drop);
                c.shuffle = true;
                c.epochs = Some(2);
                let s = Sampler::new(n, c).unwrap();
                let from_batches: Vec<u64> =
                    (0..s.total_batches().unwrap()).flat_map(|k| s.batch(k).unwrap().indices).collect();
                let from_steps: Vec<u64> = (0..).map_while(|i| s.step(i)).map(|st| st.index).collect();
                assert_eq!(from_batches, from_steps);
            }
        }
    }

    /// Regression (issue 8): an empty source used to be `InvalidConfig`; it has no batch, in
    /// any number of epochs, unbounded included.
    #[test]
    fn empty_source_has_no_batch() {
        for epochs in [Some(1), Some(5), None] {
            for (b, w, drop) in [(1, 1, false), (4, 2, true), (3, 1, true)] {
                let s =
                    Sampler::new(0, SamplerConfig { epochs, shuffle: true, ..cfg(b, w, 0, drop) }).unwrap();
                assert_eq!((s.batches_per_epoch(), s.steps_per_epoch(), s.total_batches()), (0, 0, Some(0)));
                assert_eq!((s.batch(0), s.step(0), s.order(0, 0)), (None, None, None));
            }
        }
    }

    #[test]
    fn invalid_configs_name_the_field() {
        let f = |n, c| match Sampler::new(n, c) {
            Err(LoaderError::InvalidConfig { field, .. }) => field,
            other => panic!("unexpected {other:?}"),
        };
        assert_eq!(f(5, cfg(0, 1, 0, false)), "batch_size");
        assert_eq!(f(5, cfg(1, 0, 0, false)), "world_size");
        assert_eq!(f(5, cfg(1, 2, 2, false)), "rank");
        assert_eq!(f(5, SamplerConfig { epochs: Some(0), ..cfg(1, 1, 0, false) }), "epochs");
        assert_eq!(f(5, cfg(u64::MAX, 2, 0, false)), "batch_size");
    }
}
