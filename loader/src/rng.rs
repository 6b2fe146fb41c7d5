//! Per-record randomness: the generator a `map` function draws from.

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

    // `RecordRng::for_record` (keyed by a sequential record's identity) is in context.rs,
    // beside `RecordId`.
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
