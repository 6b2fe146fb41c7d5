use std::marker::PhantomData;

use serde_json::{json, Value};

use crate::{Dtype, Element, FormatError, RawWindow, StreamFormat};

/// An unsigned integer element type that can hold token ids (`u8`, `u16`, `u32`, `u64`).
pub trait TokenElement: Element + Copy + Into<u64> {
    /// The largest id this element type holds.
    const MAX_ID: u64;
    /// Converts an id known to be `<= MAX_ID`.
    fn from_id(id: u64) -> Self;
    /// The sum of `ids` modulo 2^64 (see [`sum_ids`]).
    fn sum(ids: &[Self]) -> u64;
}

/// Ids of 8 and 16 bits summed in 32-bit lanes, over blocks short enough that no lane
/// overflows (`BLOCK * MAX_ID < 2^32`), so the loop vectorizes to the widest lanes the target
/// has; each block's sum added to the u64 total.
macro_rules! token_element_narrow {
    ($($t:ty => $block:expr),*) => {$(
        impl TokenElement for $t {
            const MAX_ID: u64 = <$t>::MAX as u64;
            fn from_id(id: u64) -> Self {
                id as $t
            }
            fn sum(ids: &[Self]) -> u64 {
                ids.chunks($block)
                    .map(|b| u64::from(b.iter().fold(0u32, |a, &x| a.wrapping_add(u32::from(x)))))
                    .fold(0u64, u64::wrapping_add)
            }
        }
    )*};
}
token_element_narrow!(u8 => 1 << 24, u16 => 1 << 16);

macro_rules! token_element_wide {
    ($($t:ty),*) => {$(
        impl TokenElement for $t {
            const MAX_ID: u64 = <$t>::MAX as u64;
            fn from_id(id: u64) -> Self {
                id as $t
            }
            fn sum(ids: &[Self]) -> u64 {
                ids.iter().fold(0u64, |a, &x| a.wrapping_add(x as u64))
            }
        }
    )*};
}
token_element_wide!(u32, u64);

/// The sum of token ids modulo 2^64, the checksum the benchmarks and `guideloom bench` report
/// (every token read is summed, so none is skipped). Equal to
/// `ids.iter().fold(0u64, |a, &x| a.wrapping_add(x.into()))`, written so the compiler
/// vectorizes it for the target it builds for: u8 and u16 ids in 32-bit lanes over blocks that
/// cannot overflow one, u32 and u64 ids in 64-bit lanes.
///
/// ```
/// assert_eq!(guideloom_formats::sum_ids(&[65_535u16; 70_000]), 65_535 * 70_000);
/// assert_eq!(guideloom_formats::sum_ids(&[u64::MAX, 2]), 1);
/// ```
pub fn sum_ids<E: TokenElement>(ids: &[E]) -> u64 {
    E::sum(ids)
}

/// A type a caller may pass token ids as (`u8`..`u64`, `usize`, and the signed types, where a
/// negative id is refused).
pub trait TokenId: Copy + Send + Sync + 'static {
    /// The id as `u64`, or `None` when it is negative.
    fn to_id(self) -> Option<u64>;
}

macro_rules! token_id_unsigned {
    ($($t:ty),*) => {$(
        impl TokenId for $t {
            fn to_id(self) -> Option<u64> {
                Some(self as u64)
            }
        }
    )*};
}
macro_rules! token_id_signed {
    ($($t:ty),*) => {$(
        impl TokenId for $t {
            fn to_id(self) -> Option<u64> {
                u64::try_from(self).ok()
            }
        }
    )*};
}
token_id_unsigned!(u8, u16, u32, u64, usize);
token_id_signed!(i8, i16, i32, i64, isize);

/// Token ids stored as one unsigned integer element each.
///
/// - `E`: the stored element type (`u16` for vocabularies under 65,536 ids, else `u32`).
/// - `I`: the id type callers append (default `u32`, what tokenizers return).
///
/// `pack` refuses an id that does not fit `E` ([`FormatError::TokenOutOfRange`], naming the id
/// and its position); `unpack` returns the window's ids as a `Vec<E>` and ignores the shard
/// segmentation. Manifest name: `"tokens"`.
pub struct TokenFormat<E, I = u32> {
    _types: PhantomData<fn() -> (E, I)>,
}

impl<E, I> std::fmt::Debug for TokenFormat<E, I> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenFormat").field("element", &std::any::type_name::<E>()).finish()
    }
}

impl<E, I> Clone for TokenFormat<E, I> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<E, I> Copy for TokenFormat<E, I> {}

impl<E, I> Default for TokenFormat<E, I> {
    fn default() -> Self {
        TokenFormat { _types: PhantomData }
    }
}

impl<E: TokenElement, I: TokenId> TokenFormat<E, I> {
    /// The token format for element type `E`.
    pub fn new() -> Self {
        Self::default()
    }
}

impl<E: TokenElement, I: TokenId> StreamFormat for TokenFormat<E, I> {
    type Input = [I];
    type Output = Vec<E>;

    fn name(&self) -> &str {
        "tokens"
    }

    fn params(&self) -> Value {
        json!({})
    }

    fn dtype(&self) -> Dtype {
        E::dtype()
    }

    fn pack(&self, record: &[I], out: &mut Vec<u8>) -> Result<u64, FormatError> {
        out.reserve(
            std::mem::size_of_val(record) / std::mem::size_of::<I>().max(1) * std::mem::size_of::<E>(),
        );
        for (position, &id) in record.iter().enumerate() {
            let fits = id.to_id().filter(|&v| v <= E::MAX_ID);
            let Some(v) = fits else {
                return Err(FormatError::TokenOutOfRange {
                    id: id.to_id().unwrap_or(u64::MAX),
                    position: position as u64,
                    dtype: E::dtype().to_string(),
                });
            };
            out.extend_from_slice(bytemuck::bytes_of(&E::from_id(v).to_le()));
        }
        Ok(record.len() as u64)
    }

    fn unpack(&self, window: &RawWindow<'_>) -> Result<Vec<E>, FormatError> {
        Ok(window.elements::<E>()?.into_owned())
    }
}

/// Little-endian conversion for token elements (a no-op on little-endian machines).
trait ToLe {
    fn to_le(self) -> Self;
}
impl<E: TokenElement> ToLe for E {
    fn to_le(self) -> Self {
        if cfg!(target_endian = "little") {
            self
        } else {
            let mut b = bytemuck::bytes_of(&self).to_vec();
            b.reverse();
            bytemuck::pod_read_unaligned(&b)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_too_large_names_id_and_position() {
        let f = TokenFormat::<u16>::new();
        let mut out = Vec::new();
        let err = f.pack(&[1, 65_535, 70_000], &mut out).unwrap_err();
        match err {
            FormatError::TokenOutOfRange { id, position, dtype } => {
                assert_eq!((id, position, dtype.as_str()), (70_000, 2, "<u2"));
            }
            e => panic!("unexpected {e}"),
        }
        let f = TokenFormat::<u8, i32>::new();
        assert!(matches!(f.pack(&[-1], &mut out), Err(FormatError::TokenOutOfRange { position: 0, .. })));
    }

    #[test]
    fn u32_round_trip() {
        let f = TokenFormat::<u32, u64>::new();
        let mut out = Vec::new();
        assert_eq!(f.pack(&[0, 1, 4_294_967_295], &mut out).unwrap(), 3);
        assert_eq!(out.len(), 12);
        let w = RawWindow::new(&out, 4, &[1, 2], &[0, 5]).unwrap();
        assert_eq!(f.unpack(&w).unwrap(), vec![0, 1, u32::MAX]);
        assert!(matches!(
            f.pack(&[1 << 32], &mut out),
            Err(FormatError::TokenOutOfRange { id: 4_294_967_296, position: 0, ref dtype }) if dtype == "<u4"
        ));
    }
}

#[cfg(test)]
mod sum_tests {
    use super::sum_ids;

    /// The plain wrapping fold, the definition `sum_ids` must equal.
    fn fold<E: super::TokenElement>(ids: &[E]) -> u64 {
        ids.iter().fold(0u64, |a, &x| a.wrapping_add(x.into()))
    }

    /// Block edges of the narrow sums: one block exactly, one id either side, with every id at
    /// its maximum (the case that would overflow a 32-bit lane with a block one id longer).
    #[test]
    fn sum_ids_equals_the_wrapping_fold_at_every_block_edge() {
        for n in [0usize, 1, (1 << 16) - 1, 1 << 16, (1 << 16) + 1, 3 << 16] {
            let v = vec![u16::MAX; n];
            assert_eq!(sum_ids(&v), fold(&v), "u16 x {n}");
            assert_eq!(sum_ids(&v), n as u64 * 65_535);
        }
        for n in [(1 << 24) - 1, 1 << 24, (1 << 24) + 1] {
            let v = vec![u8::MAX; n];
            assert_eq!(sum_ids(&v), n as u64 * 255, "u8 x {n}");
        }
        let v: Vec<u32> = (0..100_000u32).map(|i| i.wrapping_mul(2_654_435_761)).collect();
        assert_eq!(sum_ids(&v), fold(&v));
        assert_eq!(sum_ids(&[u64::MAX, u64::MAX, 3]), 1);
    }
}
