//! What a `map` function knows about the record it transforms: the [`MapContext`], the
//! identity of a sequential record ([`RecordId`]) and the generator keyed by it.

use serde::{Deserialize, Serialize};

use crate::RecordRng;

/// Domain tag of the seed of a sequential record's RNG.
const TAG_SEQUENTIAL_RECORD: u64 = u64::from_le_bytes(*b"glseqrec");

/// The identity of a record delivered by a
/// [`SequentialLoader`](crate::sequential::SequentialLoader): record `record` of shard `shard`
/// (counted in the shard's own order, whatever the shuffle), and for packed token windows the
/// token `offset` in that record where the window starts (0 otherwise).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct RecordId {
    /// The shard.
    pub shard: u64,
    /// The record's index in its shard.
    pub record: u64,
    /// For packed windows, the first token's offset in the record; 0 otherwise.
    pub offset: u64,
}

/// The seed a sequential record's RNG is keyed with: `seed` mixed with the record's shard and
/// token offset (the record index and the epoch key the generator itself).
pub(crate) fn record_seed(seed: u64, id: &RecordId) -> u64 {
    crate::fingerprint_words(&[TAG_SEQUENTIAL_RECORD, seed, id.shard, id.offset])
}

impl RecordRng {
    /// The generator of record `id` of a
    /// [`SequentialLoader`](crate::sequential::SequentialLoader) in epoch `epoch` under `seed`:
    /// [`RecordRng::new`] with the record index as the position and a seed mixed from `seed`,
    /// the shard and the token offset, so a record's draws depend on its identity only, not on
    /// the rank, world size or worker that delivers it.
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

    /// The identity of a record of a
    /// [`SequentialLoader`](crate::sequential::SequentialLoader) (shard, record in the shard,
    /// token offset of a packed window); `None` for the random-access [`Loader`](crate::Loader).
    /// For sequential records, [`MapContext::position`] and [`MapContext::index`] are the
    /// record's index in its shard.
    pub fn record_id(&self) -> Option<RecordId> {
        self.record
    }

    /// The record's RNG, created on first use: [`RecordRng::new`] for `(seed, epoch,
    /// position)` in a [`Loader`](crate::Loader), [`RecordRng::for_record`] in a
    /// [`SequentialLoader`](crate::sequential::SequentialLoader).
    pub fn rng(&mut self) -> &mut RecordRng {
        let (seed, epoch, position) = (self.seed, self.epoch, self.position);
        self.rng.get_or_insert_with(|| RecordRng::new(seed, epoch, position))
    }
}
