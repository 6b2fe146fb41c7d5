//! The MT19937 Mersenne Twister and NumPy's legacy shuffle over it ([`Mt19937`]): the
//! generator of Megatron-Core's shuffles (`numpy.random.RandomState`) and of llm.c's
//! (`llmc/rand.h`).
//!
//! Sources: Matsumoto & Nishimura 1998 (`init_genrand`, `genrand_int32`); NumPy
//! `numpy/random/src/mt19937/`, `numpy/random/src/legacy/`, `numpy/random/src/distributions/`
//! (`random_interval`, the masked rejection draw) and `numpy/random/mtrand.pyx`
//! (`RandomState.shuffle`).

use crate::error::{InteropError, Result};

/// The MT19937 Mersenne Twister (32-bit), seeded as `init_genrand` (Matsumoto & Nishimura,
/// 1998) — the generator of `numpy.random.RandomState(seed)` for an integer seed.
///
/// ```
/// use guideloom_interop::Mt19937;
/// let mut g = Mt19937::new(5489)?;
/// assert_eq!(g.next_u32(), 3_499_211_612);
/// # Ok::<(), guideloom_interop::InteropError>(())
/// ```
#[derive(Clone)]
pub struct Mt19937 {
    state: Box<[u32; 624]>,
    index: usize,
}

impl std::fmt::Debug for Mt19937 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mt19937").field("index", &self.index).finish_non_exhaustive()
    }
}

impl Mt19937 {
    /// The generator seeded with `seed` by `init_genrand`.
    ///
    /// # Errors
    /// [`InteropError::InvalidSeed`] when `seed` is not in `[0, 2^32)` (NumPy refuses it too).
    pub fn new(seed: u64) -> Result<Self> {
        let s = u32::try_from(seed).map_err(|_| InteropError::InvalidSeed { seed })?;
        let mut state = Box::new([0u32; 624]);
        state[0] = s;
        for i in 1..624 {
            let p = state[i - 1];
            state[i] = 1_812_433_253u32.wrapping_mul(p ^ (p >> 30)).wrapping_add(i as u32);
        }
        Ok(Mt19937 { state, index: 624 })
    }

    fn twist(&mut self) {
        const UPPER: u32 = 0x8000_0000;
        const LOWER: u32 = 0x7fff_ffff;
        let mt = &mut self.state;
        for i in 0..624 {
            let y = (mt[i] & UPPER) | (mt[(i + 1) % 624] & LOWER);
            let mut v = mt[(i + 397) % 624] ^ (y >> 1);
            if y & 1 != 0 {
                v ^= 0x9908_b0df;
            }
            mt[i] = v;
        }
        self.index = 0;
    }

    /// The untempered state words and the position of the next one (624: a twist comes
    /// first), to compare with a generator state another program saved.
    pub(crate) fn words(&self) -> (&[u32; 624], usize) {
        (&self.state, self.index)
    }

    /// The next 32-bit output (tempered).
    pub fn next_u32(&mut self) -> u32 {
        if self.index >= 624 {
            self.twist();
        }
        let mut y = self.state[self.index];
        self.index += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^ (y >> 18)
    }

    /// NumPy's legacy 64-bit output: `(next_u32() << 32) | next_u32()`.
    pub fn next_u64(&mut self) -> u64 {
        let hi = u64::from(self.next_u32());
        (hi << 32) | u64::from(self.next_u32())
    }

    /// A uniform integer in `[0, max]` by NumPy's legacy masked rejection
    /// (`random_interval`): `max` with every lower bit set is the mask; 32-bit draws when
    /// `max < 2^32`, else 64-bit draws, until one is `<= max`.
    pub fn interval(&mut self, max: u64) -> u64 {
        if max == 0 {
            return 0;
        }
        let mut mask = max;
        for s in [1, 2, 4, 8, 16, 32] {
            mask |= mask >> s;
        }
        if max <= u64::from(u32::MAX) {
            loop {
                let v = u64::from(self.next_u32()) & mask;
                if v <= max {
                    return v;
                }
            }
        }
        loop {
            let v = self.next_u64() & mask;
            if v <= max {
                return v;
            }
        }
    }

    /// `RandomState.shuffle` of a 1-D array: Fisher-Yates from the back, `j = interval(i)`
    /// for `i = n - 1` down to 1.
    ///
    /// ```
    /// use guideloom_interop::Mt19937;
    /// let mut a: Vec<u32> = (0..5).collect();
    /// Mt19937::new(42)?.shuffle(&mut a);
    /// assert_eq!(a, [1, 4, 2, 0, 3]);
    /// # Ok::<(), guideloom_interop::InteropError>(())
    /// ```
    pub fn shuffle<T>(&mut self, a: &mut [T]) {
        for i in (1..a.len()).rev() {
            let j = self.interval(i as u64) as usize;
            a.swap(i, j);
        }
    }
}
