//! Per-record randomness and the map context.

use rand::RngCore;
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha12Rng;

use crate::permutation::{chacha_seed, TAG_RECORD_RNG};
use crate::RecordId;

/// Domain tag of the seed of a sequential record's RNG.
const TAG_SEQUENTIAL_RECORD: u64 = u64::from_le_bytes(*b"glseqrec");

/// The seed a sequential record's RNG is keyed with: `seed` mixed with the record's shard and
/// token offset (the record index and the epoch key the generator itself).
pub(crate) fn record_seed(seed: u64, id: &RecordId) -> u64 {
    crate::fingerprint_words(&[TAG_SEQUENTIAL_RECORD, seed, id.shard, id.offset])
}

/// The random number generator a `map` function draws from: ChaCha12 keyed by
/// `(seed, epoch, position)` (position in the epoch's global order, before wrapping), so a
/// record's draws depend neither on the worker that ran it nor on the worker count, and
/// differ between epochs and between ranks.
///
/// It implements `RngCore` of rand 0.9 (`rand_core` 0.9), so every method of rand 0.9's
/// [`Rng`](rand::Rng) works on it. Import `Rng` from the re-export
/// [`guideloom_loader::rand`](crate::rand) (or `guideloom::loader::rand`): a `rand` of another
/// version in your own `Cargo.toml` (what a plain `cargo add rand` may pick) has another `Rng`
/// trait that this type does not implement.
///
/// ```
/// use guideloom_loader::rand::Rng;
/// use guideloom_loader::RecordRng;
/// let mut a = RecordRng::new(1, 0, 5);
/// let mut b = RecordRng::new(1, 0, 5);
/// assert_eq!(a.random::<u64>(), b.random::<u64>());
/// assert_ne!(RecordRng::new(1, 0, 5).random::<u64>(), RecordRng::new(1, 1, 5).random::<u64>());
/// ```
#[derive(Debug, Clone)]
pub struct RecordRng(ChaCha12Rng);

impl RecordRng {
    /// The generator of the record at `position` of epoch `epoch` under `seed`.
    pub fn new(seed: u64, epoch: u64, position: u64) -> Self {
        RecordRng(ChaCha12Rng::from_seed(chacha_seed(TAG_RECORD_RNG, seed, epoch, position)))
    }

    /// The generator of record `id` of a [`SequentialLoader`](crate::SequentialLoader) in
    /// epoch `epoch` under `seed`: [`RecordRng::new`] with the record index as the position
    /// and a seed mixed from `seed`, the shard and the token offset, so a record's draws depend
    /// on its identity only, not on the rank, world size or worker that delivers it.
    ///
    /// ```
    /// use guideloom_loader::rand::Rng;
    /// use guideloom_loader::{RecordId, RecordRng};
    /// let id = RecordId { shard: 3, record: 1, offset: 0 };
    /// let a = RecordRng::for_record(7, 0, &id).random::<u64>();
    /// assert_eq!(a, RecordRng::for_record(7, 0, &id).random::<u64>());
    /// assert_ne!(a, RecordRng::for_record(7, 0, &RecordId { shard: 2, ..id }).random::<u64>());
    /// ```
    pub fn for_record(seed: u64, epoch: u64, id: &RecordId) -> Self {
        RecordRng::new(record_seed(seed, id), epoch, id.record)
    }
}

impl RngCore for RecordRng {
    fn next_u32(&mut self) -> u32 {
        self.0.next_u32()
    }
    fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }
    fn fill_bytes(&mut self, dst: &mut [u8]) {
        self.0.fill_bytes(dst)
    }
}

/// What a `map` function knows about the record it transforms.
#[derive(Debug)]
pub struct MapContext {
    pub(crate) seed: u64,
    pub(crate) epoch: u64,
    pub(crate) position: u64,
    pub(crate) index: u64,
    pub(crate) batch: u64,
    pub(crate) padding: bool,
    pub(crate) rng: Option<RecordRng>,
    /// The record's identity, for records of a sequential source.
    pub(crate) record: Option<RecordId>,
}

impl MapContext {
    /// The epoch.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Position in the epoch's global order, before wrapping (`>= n` for padding): the step.
    pub fn position(&self) -> u64 {
        self.position
    }

    /// The record index in the source.
    pub fn index(&self) -> u64 {
        self.index
    }

    /// Absolute batch number of this rank.
    pub fn batch(&self) -> u64 {
        self.batch
    }

    /// Whether the record is padding.
    pub fn is_padding(&self) -> bool {
        self.padding
    }

    /// The identity of a record of a [`SequentialLoader`](crate::SequentialLoader) (shard,
    /// record in the shard, token offset of a packed window); `None` for the random-access
    /// [`Loader`](crate::Loader). For sequential records, [`MapContext::position`] and
    /// [`MapContext::index`] are the record's index in its shard.
    pub fn record_id(&self) -> Option<RecordId> {
        self.record
    }

    /// The record's RNG, created on first use: [`RecordRng::new`] for `(seed, epoch,
    /// position)` in a [`Loader`](crate::Loader), [`RecordRng::for_record`] in a
    /// [`SequentialLoader`](crate::SequentialLoader).
    pub fn rng(&mut self) -> &mut RecordRng {
        let (seed, epoch, position) = (self.seed, self.epoch, self.position);
        self.rng.get_or_insert_with(|| RecordRng::new(seed, epoch, position))
    }
}
