//! Per-record randomness and the map context.

use rand::RngCore;
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha12Rng;

use crate::permutation::{chacha_seed, TAG_RECORD_RNG};

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

    /// The record's RNG ([`RecordRng`] for `(seed, epoch, position)`), created on first use.
    pub fn rng(&mut self) -> &mut RecordRng {
        let (seed, epoch, position) = (self.seed, self.epoch, self.position);
        self.rng.get_or_insert_with(|| RecordRng::new(seed, epoch, position))
    }
}
