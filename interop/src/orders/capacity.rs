//! The one way an index sized from outside input is allocated ([`index_vec`]): its entries
//! and bytes checked against [`MAX_INDEX_BYTES`] before any allocation, and the allocation
//! itself fallible, so that `--train-samples 1e15` is a typed error, not an abort.

use crate::error::{InteropError, Result};

/// The most bytes one index built from a count a user or a file gives may take (16 GiB;
/// Megatron's own indices at that size would hold over two billion samples).
pub const MAX_INDEX_BYTES: u64 = 16 << 30;

/// The bytes of `count` entries of `T` when they fit [`MAX_INDEX_BYTES`].
///
/// # Errors
/// [`InteropError::IndexTooLarge`] naming `what`, the count and the bytes otherwise.
pub(crate) fn check_index<T>(what: &'static str, count: u64) -> Result<usize> {
    let bytes = count.saturating_mul(std::mem::size_of::<T>() as u64);
    if bytes > MAX_INDEX_BYTES || usize::try_from(count).is_err() {
        return Err(InteropError::IndexTooLarge { what, count, bytes, limit: MAX_INDEX_BYTES });
    }
    Ok(count as usize)
}

/// An empty vector with room for `count` entries of `T`, after [`check_index`]; the
/// allocation's own failure is the same typed error.
///
/// # Errors
/// [`InteropError::IndexTooLarge`].
pub(crate) fn index_vec<T>(what: &'static str, count: u64) -> Result<Vec<T>> {
    let n = check_index::<T>(what, count)?;
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| InteropError::IndexTooLarge {
        what,
        count,
        bytes: count.saturating_mul(std::mem::size_of::<T>() as u64),
        limit: MAX_INDEX_BYTES,
    })?;
    Ok(v)
}

#[cfg(test)]
mod tests {
    /// Issue 32 class 6: the indices of the orders are allocated only through
    /// [`super::index_vec`]: no `with_capacity` sized from a count is left in them.
    #[test]
    fn issue32_order_indices_are_allocated_only_through_the_checked_helper() {
        for (name, text) in [
            ("megatron/blend.rs", include_str!("megatron/blend.rs")),
            ("megatron/gpt.rs", include_str!("megatron/gpt.rs")),
            ("llmc.rs", include_str!("llmc.rs")),
        ] {
            let code = text.split("#[cfg(test)]").next().unwrap_or(text);
            assert!(!code.contains("with_capacity("), "{name}: allocate indices through index_vec");
        }
    }

    /// The helper refuses before allocating, naming the count and the bytes.
    #[test]
    fn issue32_index_vec_names_the_count_and_the_bytes() {
        match super::index_vec::<u64>("shuffle index", 1 << 40) {
            Err(crate::InteropError::IndexTooLarge { what, count, bytes, limit }) => {
                assert_eq!(
                    (what, count, bytes, limit),
                    ("shuffle index", 1 << 40, 8 << 40, super::MAX_INDEX_BYTES)
                )
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(super::index_vec::<u32>("x", 10).unwrap().capacity(), 10);
    }

    /// Issue 33 (the `orders` mutation run: `bytes > MAX_INDEX_BYTES` -> `>=`): an index of
    /// exactly [`super::MAX_INDEX_BYTES`] is allowed, one entry more is refused (checked
    /// without allocating).
    #[test]
    fn issue33_orders_index_bytes_limit_on_both_sides() {
        let at = super::MAX_INDEX_BYTES / 8;
        assert_eq!(super::check_index::<u64>("shuffle index", at).unwrap(), at as usize);
        match super::check_index::<u64>("shuffle index", at + 1) {
            Err(crate::InteropError::IndexTooLarge { count, bytes, .. }) => {
                assert_eq!((count, bytes), (at + 1, super::MAX_INDEX_BYTES + 8))
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(super::check_index::<[u8; 10]>("blend index", 0).unwrap(), 0);
    }
}
