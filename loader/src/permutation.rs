//! A keyed random-access permutation of `[0, n)`.

use rand::RngCore;
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha20Rng;

/// Number of Feistel rounds. Luby and Rackoff show 4 rounds of a pseudo-random round function
/// already give a strong pseudo-random permutation; 8 rounds leave a wide margin for the small
/// half-widths (1 to 4 bits) of tiny domains.
const ROUNDS: usize = 8;

/// Domain-separation tags for the ChaCha keys derived from `(seed, epoch, ...)`.
pub(crate) const TAG_PERMUTATION: u64 = u64::from_le_bytes(*b"glperm\0\x01");
pub(crate) const TAG_RECORD_RNG: u64 = u64::from_le_bytes(*b"glrecrng");

/// A 32-byte ChaCha seed holding four little-endian words: an injective encoding, so distinct
/// `(tag, a, b, c)` give distinct generators (no `(seed, epoch)` aliasing).
pub(crate) fn chacha_seed(tag: u64, a: u64, b: u64, c: u64) -> [u8; 32] {
    let mut s = [0u8; 32];
    for (i, w) in [tag, a, b, c].into_iter().enumerate() {
        s[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
    }
    s
}

/// A pseudo-random bijection of `[0, n)`, keyed by `(seed, epoch)`, computable one position
/// at a time in O(1) memory.
///
/// # Algorithm
///
/// A balanced Feistel network on `2h` bits (the smallest even width with `2^(2h) >= n`, so the
/// network's domain is under `4n`) turned into a permutation of `[0, n)` by *cycle-walking*:
/// `apply(x)` re-encrypts `x` until the value falls below `n`. Because the network permutes
/// `[0, 2^(2h))`, following its cycle from a point below `n` returns below `n`, and the
/// restriction is a bijection of `[0, n)` for every `n >= 1`; the expected number of network
/// evaluations per call is `2^(2h) / n < 4`. Source: J. Black and P. Rogaway, "Ciphers with
/// Arbitrary Finite Domains", CT-RSA 2002 (the "generalized Feistel" and "cycle-walking"
/// constructions); M. Luby and C. Rackoff, "How to Construct Pseudorandom Permutations from
/// Pseudorandom Functions", SIAM J. Computing 1988.
///
/// Each of the 8 rounds computes `L, R = R, L xor F(R + k_i)` where `F` is the SplitMix64
/// finalizer (Steele, Lea and Flood, "Fast Splittable Pseudorandom Number Generators",
/// OOPSLA 2014) truncated to `h` bits, and the round keys `k_i` are the first 8 words of a
/// ChaCha20 stream whose 256-bit key encodes `(tag, seed, epoch)` injectively, so different
/// `(seed, epoch)` pairs (for example `(s, 1)` and `(s + 1, 0)`) draw independent keys.
///
/// # Small domains
///
/// For `3 <= n <= 16` two independently keyed orders would coincide with probability up to
/// 1/6, so consecutive epochs (and `(seed s, epoch 1)` vs `(seed s + 1, epoch 0)`) could repeat.
/// There the order is forced to have sign `(-1)^epoch`: when the network's restriction has the
/// other sign, it is composed with the transposition of positions 0 and 1. Consecutive epochs
/// then always differ, each epoch's order stays uniform over the permutations of its sign, and
/// each position's value stays uniform (the alternating group is transitive for `n >= 3`).
/// Above 16 a repeat has probability under `1/17!` and nothing is forced.
///
/// This is a shuffling permutation, not a cipher: it makes no cryptographic claim.
///
/// ```
/// use guideloom_loader::Permutation;
/// let p = Permutation::new(10, 42, 0);
/// let mut order: Vec<u64> = (0..10).map(|i| p.apply(i).unwrap()).collect();
/// assert_eq!(p.inverse(order[3]), Some(3));
/// order.sort();
/// assert_eq!(order, (0..10).collect::<Vec<_>>());
/// assert_eq!(p.apply(10), None);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Permutation {
    n: u64,
    half_bits: u32,
    mask: u64,
    keys: [u64; ROUNDS],
    /// Compose with the transposition (0 1) of positions (small domains, see above).
    swap01: bool,
}

/// Largest `n` whose orders are forced to alternate in sign.
const SIGN_FORCED_MAX: u64 = 16;

impl Permutation {
    /// The permutation of `[0, n)` for `(seed, epoch)`.
    pub fn new(n: u64, seed: u64, epoch: u64) -> Self {
        let mut half_bits = 1u32;
        while half_bits < 32 && (1u128 << (2 * half_bits)) < u128::from(n) {
            half_bits += 1;
        }
        let mask = (1u64 << half_bits) - 1;
        let mut rng = ChaCha20Rng::from_seed(chacha_seed(TAG_PERMUTATION, seed, epoch, 0));
        let mut keys = [0u64; ROUNDS];
        for k in &mut keys {
            *k = rng.next_u64();
        }
        let mut p = Permutation { n, half_bits, mask, keys, swap01: false };
        if (3..=SIGN_FORCED_MAX).contains(&n) {
            let odd = p.is_odd();
            p.swap01 = odd != (epoch % 2 == 1);
        }
        p
    }

    /// Whether the (unforced) restriction to `[0, n)` is an odd permutation: `n - cycles` odd.
    fn is_odd(&self) -> bool {
        let mut seen = [false; SIGN_FORCED_MAX as usize];
        let mut cycles = 0u64;
        for start in 0..self.n {
            if seen[start as usize] {
                continue;
            }
            cycles += 1;
            let mut x = start;
            while !seen[x as usize] {
                seen[x as usize] = true;
                x = self.walk(x, Self::encrypt);
            }
        }
        (self.n - cycles) % 2 == 1
    }

    fn walk(&self, mut x: u64, step: fn(&Self, u64) -> u64) -> u64 {
        loop {
            x = step(self, x);
            if x < self.n {
                return x;
            }
        }
    }

    fn swap(&self, x: u64) -> u64 {
        match (self.swap01, x) {
            (true, 0) => 1,
            (true, 1) => 0,
            _ => x,
        }
    }

    /// The domain size `n`.
    pub fn len(&self) -> u64 {
        self.n
    }

    /// Whether the domain is empty (`n == 0`).
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// The image of `position`, or `None` when `position >= n`.
    pub fn apply(&self, position: u64) -> Option<u64> {
        if position >= self.n {
            return None;
        }
        Some(self.walk(self.swap(position), Self::encrypt))
    }

    /// The position whose image is `value` (`apply(inverse(v)) == v`), or `None` when
    /// `value >= n`.
    pub fn inverse(&self, value: u64) -> Option<u64> {
        if value >= self.n {
            return None;
        }
        Some(self.swap(self.walk(value, Self::decrypt)))
    }

    #[cfg(test)]
    pub(crate) fn round_keys(&self) -> [u64; ROUNDS] {
        self.keys
    }

    fn round(&self, r: u64, key: u64) -> u64 {
        let mut z = r.wrapping_add(key);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) & self.mask
    }

    fn encrypt(&self, x: u64) -> u64 {
        let (mut l, mut r) = (x >> self.half_bits, x & self.mask);
        for &k in &self.keys {
            let t = l ^ self.round(r, k);
            l = r;
            r = t;
        }
        (l << self.half_bits) | r
    }

    fn decrypt(&self, x: u64) -> u64 {
        let (mut l, mut r) = (x >> self.half_bits, x & self.mask);
        for &k in self.keys.iter().rev() {
            let t = r ^ self.round(l, k);
            r = l;
            l = t;
        }
        (l << self.half_bits) | r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_not_aliased() {
        for s in 0..50u64 {
            assert_ne!(
                Permutation::new(100, s, 1).round_keys(),
                Permutation::new(100, s + 1, 0).round_keys()
            );
            assert_ne!(Permutation::new(100, s, 0).round_keys(), Permutation::new(100, s, 1).round_keys());
        }
    }

    #[test]
    fn small_domains_alternate_in_sign() {
        for n in 3..=16u64 {
            for seed in 0..20 {
                for epoch in 0..4 {
                    let p = Permutation::new(n, seed, epoch);
                    let mut q = p.clone();
                    q.swap01 = false;
                    let sign_odd = q.is_odd() != p.swap01;
                    assert_eq!(sign_odd, epoch % 2 == 1, "n={n} seed={seed} epoch={epoch}");
                    for x in 0..n {
                        assert_eq!(p.inverse(p.apply(x).unwrap()), Some(x));
                    }
                }
            }
        }
    }

    #[test]
    fn widths() {
        assert_eq!(Permutation::new(1, 0, 0).half_bits, 1);
        assert_eq!(Permutation::new(4, 0, 0).half_bits, 1);
        assert_eq!(Permutation::new(5, 0, 0).half_bits, 2);
        assert_eq!(Permutation::new(1 << 16, 0, 0).half_bits, 8);
        assert_eq!(Permutation::new((1 << 16) + 1, 0, 0).half_bits, 9);
        assert_eq!(Permutation::new(u64::MAX, 0, 0).half_bits, 32);
        let p = Permutation::new(u64::MAX, 7, 0);
        let y = p.apply(u64::MAX - 1).unwrap();
        assert_eq!(p.inverse(y), Some(u64::MAX - 1));
    }
}
